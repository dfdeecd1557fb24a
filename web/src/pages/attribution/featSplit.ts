// The sentences of the "by features" split, each chosen by the numbers it states: which block's output is split and
// what that leaves out (nothing but the norm's constant at the last block; the later blocks' writes elsewhere), and
// whether the error, what the autoencoder misses, moves the logit more or less than the largest feature.
import type { FeatureAttributionOut } from "../../lib/generated/api";
import type { MessageKey } from "../../lib/i18n";

export interface Said { key: MessageKey; vars: Record<string, string | number> }

/** What the split covers: block `layer`'s output, which is the whole stream the final norm reads only at the last. */
export function scopeSentence(a: FeatureAttributionOut, num: (v: number) => string): Said {
  const vars = { l: a.layer, whole: num(a.whole), metric: num(a.metric), rest: num(a.rest), later: num(a.later),
    from: a.layer + 1, to: a.n_layer - 1 };
  if (a.layer === a.n_layer - 1) return { key: "attr.fLast", vars };
  return { key: a.layer + 1 === a.n_layer - 1 ? "attr.fEarlierOne" : "attr.fEarlierMany", vars };
}

/** The error's effect against the largest feature's (by size). */
export function errorSentence(a: FeatureAttributionOut, num: (v: number) => string): Said {
  const best = a.features[0];
  if (!best) return { key: "attr.fNoFeatures", vars: { error: num(a.error) } };
  const vars = { error: num(a.error), best: num(best.effect), id: best.id };
  return { key: Math.abs(a.error) > Math.abs(best.effect) ? "attr.fErrorBig" : "attr.fErrorSmall", vars };
}
