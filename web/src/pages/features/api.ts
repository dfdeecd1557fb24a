// Calls to /api/features through the app's one `call`, typed by the generated schema types, and the answers kept
// by what they were asked for (the page's state survives switching views; one request per text, depth and feature).
import { call } from "../../lib/client";
import type { FeaturePageOut, FeaturesIn, FeaturesOut } from "../../lib/generated/api";

/** A feature's page; `description` is what the project wrote the feature detects (null where it wrote nothing). */
export type FeaturePage = FeaturePageOut;

const KEEP = 24;
const answers = new Map<string, Promise<unknown>>();

function cached<T>(key: string, ask: () => Promise<T>): Promise<T> {
  let p = answers.get(key) as Promise<T> | undefined;
  if (!p) {
    p = ask();
    answers.set(key, p);
    p.catch(() => answers.delete(key));
    if (answers.size > KEEP) answers.delete(answers.keys().next().value!);
  }
  return p;
}

export const features = {
  /** The features of a text (token ids) at a hook. */
  ofText: (b: FeaturesIn) => cached(`text|${b.model}|${b.hook}|${b.top}|${b.ids?.join()}`,
    () => call<FeaturesOut>("features", b)),
  /** One feature's page, computed once on the corpus. */
  page: (model: string, hook: string, id: number) => cached(`page|${model}|${hook}|${id}`,
    () => call<FeaturePage>(`features/${encodeURIComponent(hook)}/${id}?model=${encodeURIComponent(model)}`)),
};
