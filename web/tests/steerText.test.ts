// What the steering panel says (src/pages/features/steerText.ts) is chosen by the answer's numbers: the same or parted
// continuations (and where), broken or not and by which measure (the mean log-probability under the unsteered model,
// the share of distinct tokens), the sweep's first broken strength or none,
// and the counts it quotes are the answer's. Cases the tiny random model of the browser test never reaches (a sweep
// that breaks the text, continuations of different lengths) are built here.
import { describe, expect, it } from "vitest";
import type { SteerOut, SteerToken, SweepPointOut } from "../src/lib/generated/api";
import { CATALOGUES } from "../src/lib/i18n";
import { plain, render, type Sentence, type Text } from "../src/lib/lesson";
import { differing, inPromoted, outcome, relative, score, size, sweepText } from "../src/pages/features/steerText";

const tok = (id: number): SteerToken => ({ id, text: ` t${id}`, prob: 1 });
const point = (strength: number, lp: number | null, broken: boolean, distinct = 1): SweepPointOut =>
  ({ strength, tokens: [tok(1)], mean_log_prob: lp, distinct, broken });

function answer(over: Partial<SteerOut> = {}): SteerOut {
  return {
    model: "m", tokens: ["The", " cat"], strength: 2,
    direction: { kind: "contrast", layer: 1, feature: null, describe: "", norm: 0.5 },
    sampling: { temperature: 0, top_k: null, top_p: null, seed: null },
    plain: [1, 2, 3, 4].map(tok), steered: [1, 2, 3, 4].map(tok), changed_at: null,
    plain_log_prob: -3, steered_log_prob: -3.5, uniform_log_prob: -10, bound: -6.5, steered_broken: false,
    plain_distinct: 1, steered_distinct: 0.75, distinct_bound: 0.5,
    residual_norm: 4, sweep: [point(1, -3.2, false), point(2, -5, false), point(4, -7, true), point(8, -6, false),
      point(16, -9, true)],
    breakdown: 4, promoted: [{ id: 3, text: " t3", logit: 0.9 }, { id: 9, text: " t9", logit: 0.5 }],
    suppressed: [{ id: 7, text: " t7", logit: -0.8 }], ...over,
  };
}

const keys = (x: Text) => x.map((s) => s.key);
const value = (x: Text, id: string) => {
  for (const s of x) for (const v of Object.values(s.vars ?? {})) if (typeof v === "object" && "id" in v && v.id === id) return v.raw;
  return undefined;
};
const words = (lang: string, x: Text) => plain(render(lang, x));

describe("steering's sentences", () => {
  it("say the continuations are the same where they are, strength 0 apart", () => {
    expect(keys(outcome(answer({ strength: 0 })))).toEqual(["steer.sameZero"]);
    expect(keys(outcome(answer()))).toEqual(["steer.same"]);
    expect(value(outcome(answer()), "steer-n")).toBe(4);
    expect(size(answer({ strength: 0 }))).toEqual([]);
  });

  it("say where they part and count the positions that differ", () => {
    const first = answer({ steered: [5, 2, 6, 4].map(tok), changed_at: 0 });
    expect(keys(outcome(first))).toEqual(["steer.differFirst"]);
    expect(value(outcome(first), "steer-k")).toBe(2);
    // the steered text ended sooner: the positions past its end differ too
    const later = answer({ steered: [1, 2, 6].map(tok), changed_at: 2 });
    expect(differing(later.plain, later.steered)).toEqual([2, 3]);
    expect(keys(outcome(later))).toEqual(["steer.differAfter"]);
    expect([value(outcome(later), "steer-at"), value(outcome(later), "steer-k"), value(outcome(later), "steer-n")])
      .toEqual([2, 2, 4]);
    expect(keys(outcome(answer({ steered: [1, 5, 3, 4].map(tok), changed_at: 1 })))).toEqual(["steer.differAfterOne"]);
  });

  it("say which measure breaks the steered text, if any", () => {
    expect(keys(score(answer()))).toEqual(["steer.score", "steer.notBroken"]);
    expect(keys(score(answer({ steered_log_prob: -8, steered_broken: true })))).toEqual(["steer.score", "steer.brokenLp"]);
    expect(keys(score(answer({ steered_distinct: 0.25, steered_broken: true })))).toEqual(["steer.score", "steer.brokenRep"]);
    expect(keys(score(answer({ steered_log_prob: -8, steered_distinct: 0.25, steered_broken: true }))))
      .toEqual(["steer.score", "steer.brokenBoth"]);
    expect(value(score(answer()), "steer-distinct")).toBe(0.75);
    expect(score(answer({ steered: [], steered_log_prob: null }))).toEqual([]);
  });

  it("name the sweep's first broken strength and by which measure, or none", () => {
    const r = answer();
    const s = sweepText(r);
    expect(keys(s)).toEqual(["steer.breaks"]);
    expect([value(s, "steer-breakdown"), value(s, "steer-broken-k"), value(s, "steer-sweep-n")]).toEqual([4, 2, 5]);
    expect(value(s, "steer-breakdown-f")).toBeCloseTo(relative(r, 4)); // 4 x 0.5 / 4 = 0.5
    expect(relative(r, 4)).toBeCloseTo(0.5);
    const why = (x: SteerOut) => (sweepText(x)[0].vars!.why as Sentence).key;
    expect(why(r)).toBe("steer.whyLp");
    // repeating itself while still likely: broken by the share of distinct tokens alone
    const rep = answer({ sweep: [point(1, -3.2, false), point(2, -4, true, 0.25), point(4, -7, true, 0.25)], breakdown: 2 });
    expect(why(rep)).toBe("steer.whyRep");
    expect(value(sweepText(rep), "steer-breakdown")).toBe(2);
    expect(why(answer({ sweep: [point(4, -7, true, 0.25)], breakdown: 4 }))).toBe("steer.whyBoth");
    const none = answer({ sweep: r.sweep.map((p) => ({ ...p, broken: false })), breakdown: null });
    expect(keys(sweepText(none))).toEqual(["steer.noBreak"]);
    expect(value(sweepText(none), "steer-sweep-max")).toBe(16);
    expect(sweepText(answer({ sweep: [] }))).toEqual([]);
  });

  it("count the continuations' tokens among the lens's top", () => {
    const r = answer({ steered: [3, 3, 9, 1].map(tok) });
    const x = inPromoted(r);
    expect([value(x, "steer-in-steered"), value(x, "steer-in-plain"), value(x, "steer-lens-m")]).toEqual([3, 1, 2]);
  });

  it("read whole in every language, placeholders filled", () => {
    for (const distinct of [0.25, 1]) {
      const r = answer({ steered: [5, 2, 6].map(tok), changed_at: 0, steered_broken: true, steered_log_prob: -8,
        steered_distinct: distinct, sweep: [point(1, -3, false), point(2, -4, true, 0.25), point(4, -8, true, distinct)] });
      const all: Sentence[] = [...outcome(r), ...size(r), ...score(r), ...sweepText(r), ...inPromoted(r)];
      for (const lang of Object.keys(CATALOGUES)) {
        const text = words(lang, all);
        expect(text, lang).not.toMatch(/\{\w+\}/);
        expect(text.length, lang).toBeGreaterThan(100);
      }
    }
  });
});
