// What the steering panel says about an answer of /api/steer. Every sentence that depends on the numbers is chosen
// by them (lib/lesson.ts's claim), with the other wordings beside it; numbers to 3 significant digits.
import type { SteerOut, SteerToken } from "../../lib/generated/api";
import { claim, say, type Text } from "../../lib/lesson";
import { dec, int, pct } from "../../lib/lessonFormat";

/** The positions of the continuations where the two tokens differ (one continuation may end sooner: the positions
 *  past its end differ too). */
export function differing(plain: SteerToken[], steered: SteerToken[]): number[] {
  const n = Math.max(plain.length, steered.length);
  return Array.from({ length: n }, (_, i) => i).filter((i) => plain[i]?.id !== steered[i]?.id);
}

/** How many times the length of the residual stream's typical vector `strength` times the direction adds. */
export function relative(r: SteerOut, strength: number): number {
  return (Math.abs(strength) * r.direction.norm) / r.residual_norm;
}

/** Whether the two continuations agree, and where they part. */
export function outcome(r: SteerOut): Text {
  const n = Math.max(r.plain.length, r.steered.length);
  if (r.changed_at === null)
    return [r.strength === 0 ? claim("steer.sameZero", { n: int("steer-n", n) })
      : claim("steer.same", { s: dec("steer-s", r.strength), n: int("steer-n", n) })];
  const vars = { k: int("steer-k", differing(r.plain, r.steered).length), n: int("steer-n", n),
    at: int("steer-at", r.changed_at) };
  return [claim(r.changed_at === 0 ? "steer.differFirst" : r.changed_at === 1 ? "steer.differAfterOne" : "steer.differAfter",
    vars)];
}

/** What the strength adds, against the residual stream it is added to. */
export function size(r: SteerOut): Text {
  if (r.strength === 0) return [];
  return [say("steer.size", { s: dec("steer-s", r.strength), dn: dec("steer-dn", r.direction.norm),
    ratio: dec("steer-ratio", relative(r, r.strength)), layer: int("steer-layer", r.direction.layer),
    rn: dec("steer-rn", r.residual_norm) })];
}

/** Which of the two measures call a continuation broken: its mean log-probability under the unsteered model below
 *  `bound` (halfway from the plain text's to a uniform guess's), or its share of distinct tokens below `distinct_bound`
 *  (half the plain text's: it repeats itself). */
export function brokenBy(r: SteerOut, lp: number | null, distinct: number): { lp: boolean; rep: boolean } {
  return { lp: lp !== null && r.bound !== null && lp < r.bound, rep: distinct < r.distinct_bound };
}

/** The steered text's score under the unsteered model and its share of distinct tokens, and whether either counts
 *  as broken. */
export function score(r: SteerOut): Text {
  if (r.steered_log_prob === null || r.plain_log_prob === null || r.bound === null) return [];
  const by = brokenBy(r, r.steered_log_prob, r.steered_distinct);
  const vars = { b: dec("steer-bound", r.bound), db: pct("steer-distinct-bound", r.distinct_bound) };
  return [say("steer.score", { st: dec("steer-lp", r.steered_log_prob), pl: dec("steer-plain-lp", r.plain_log_prob),
    u: dec("steer-uniform", r.uniform_log_prob), sd: pct("steer-distinct", r.steered_distinct),
    pd: pct("steer-plain-distinct", r.plain_distinct) }),
  claim(by.lp && by.rep ? "steer.brokenBoth" : by.lp ? "steer.brokenLp" : by.rep ? "steer.brokenRep" : "steer.notBroken", vars)];
}

/** Where the sweep breaks the text down and by which measure, or that none of its strengths does. */
export function sweepText(r: SteerOut): Text {
  if (!r.sweep.length || r.bound === null) return [];
  const b = dec("steer-bound", r.bound), db = pct("steer-distinct-bound", r.distinct_bound);
  const n = int("steer-sweep-n", r.sweep.length);
  const at = r.sweep.find((p) => p.broken);
  if (!at) {
    const last = r.sweep[r.sweep.length - 1];
    return [claim("steer.noBreak", { n, max: dec("steer-sweep-max", last.strength),
      f: dec("steer-sweep-max-f", relative(r, last.strength)), b, db })];
  }
  const by = brokenBy(r, at.mean_log_prob, at.distinct);
  const why = by.lp && by.rep ? "steer.whyBoth" : by.lp ? "steer.whyLp" : "steer.whyRep";
  const whyVars = { lp: dec("steer-breakdown-lp", at.mean_log_prob ?? NaN), b,
    d: pct("steer-breakdown-distinct", at.distinct), db };
  return [claim("steer.breaks", { s: dec("steer-breakdown", at.strength), f: dec("steer-breakdown-f", relative(r, at.strength)),
    why: claim(why, whyVars), k: int("steer-broken-k", r.sweep.filter((p) => p.broken).length), n })];
}

/** How many of each continuation's tokens are among the tokens the direction promotes most. */
export function inPromoted(r: SteerOut): Text {
  if (!r.promoted.length) return [];
  const ids = new Set(r.promoted.map((x) => x.id));
  const count = (ts: SteerToken[]) => ts.filter((x) => ids.has(x.id)).length;
  return [say("steer.inPromoted", { k: int("steer-in-steered", count(r.steered)), n: int("steer-n-steered", r.steered.length),
    j: int("steer-in-plain", count(r.plain)), np: int("steer-n-plain", r.plain.length), m: int("steer-lens-m", r.promoted.length) })];
}
