// Which sparse autoencoders the model in use ships (GET /api/features/hooks), asked once per model. It lives in the
// first page's chunk because the architecture's menu offers the Features page only where the model ships one; the
// page itself is a chunk of its own (src/parts.ts). An offline snapshot answers from the features it carries (the
// text's, at one autoencoder), and a file that carries none asks nothing.
import { call } from "../../lib/client";
import type { FeatureHooksOut } from "../../lib/generated/api";
import { snapshot } from "../../snapshot/static";

class HookList {
  /** The answers by model name; a model not in it has not been asked yet (or its answer is on its way). */
  byModel = $state.raw(new Map<string, FeatureHooksOut>());
  /** Why the list of a model could not be read, by model name. */
  failed = $state.raw(new Map<string, Error>());
}

export const hookList = new HookList();
const asked = new Set<string>();

/** Ask once which autoencoders `model` ships (nothing in an offline snapshot). */
export function loadHooks(model: string): void {
  if ((snapshot && !snapshot.features) || asked.has(model)) return;
  asked.add(model);
  call<FeatureHooksOut>(`features/hooks?model=${encodeURIComponent(model)}`).then(
    (out) => { hookList.byModel = new Map(hookList.byModel).set(model, out); },
    (e: unknown) => {
      asked.delete(model);
      hookList.failed = new Map(hookList.failed).set(model, e instanceof Error ? e : new Error(String(e)));
    });
}

/** Whether `model` ships autoencoders: true or false once known, null while it is being asked. */
export function shipsFeatures(model: string | null): boolean | null {
  if (snapshot && !snapshot.features) return false;
  if (!model) return null;
  const out = hookList.byModel.get(model);
  return out ? out.hooks.length > 0 : hookList.failed.has(model) ? false : null;
}
