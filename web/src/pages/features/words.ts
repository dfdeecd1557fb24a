// The numbers the Features page's sentences are about, computed in one place from the API's answers, so that each
// sentence picks its wording from the numbers it states (a feature that fires on one token, on none, on several).
import type { FeaturesOut, PositionFeaturesOut } from "../../lib/generated/api";

/** Where feature `id` fires in the text: the positions with its activation there (among the features listed). */
export function firesAt(out: FeaturesOut, id: number): Map<number, number> {
  const at = new Map<number, number>();
  for (const p of out.positions) {
    const f = p.features.find((x) => x.id === id);
    if (f) at.set(p.position, f.activation);
  }
  return at;
}

/** Whether every position lists all its active features (else a feature may fire where it is not listed). */
export function listsAll(out: FeaturesOut): boolean {
  return out.positions.every((p) => p.features.length === p.active);
}

export interface TextFeature { id: number; tokens: number; max: number; at: number }

/** The text's features: each feature listed at some position, on how many tokens it fires and where most; by its
 *  largest activation in the text. */
export function textFeatures(out: FeaturesOut): TextFeature[] {
  const by = new Map<number, TextFeature>();
  for (const p of out.positions) {
    for (const f of p.features) {
      const cur = by.get(f.id);
      if (!cur) by.set(f.id, { id: f.id, tokens: 1, max: f.activation, at: p.position });
      else {
        cur.tokens += 1;
        if (f.activation > cur.max) { cur.max = f.activation; cur.at = p.position; }
      }
    }
  }
  return [...by.values()].sort((a, b) => b.max - a.max || a.id - b.id);
}

export interface ErrorSummary { mean: number; worst: PositionFeaturesOut; lo: number; hi: number }

/** The reconstruction error's share of each vector's length over the text: its mean, where it is largest, and the
 *  fewest and most features active at one token. Null where no position has a length to compare with. */
export function errorSummary(out: FeaturesOut): ErrorSummary | null {
  const rel = out.positions.filter((p) => p.relative_error !== null);
  if (!rel.length) return null;
  const worst = rel.reduce((a, b) => (b.relative_error! > a.relative_error! ? b : a));
  const actives = out.positions.map((p) => p.active);
  return { mean: rel.reduce((s, p) => s + p.relative_error!, 0) / rel.length, worst,
    lo: Math.min(...actives), hi: Math.max(...actives) };
}
