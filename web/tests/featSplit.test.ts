// The "by features" split's sentences (src/pages/attribution/featSplit.ts) are chosen by the answer's numbers: the last
// block (nothing after it but the norm's constant), one block after it, several; the error larger or smaller in size
// than the largest feature; no feature active. The tiny model of the browser test reaches only some of them; every
// one is built here and its numbers checked in both catalogues.
import { describe, expect, it } from "vitest";
import type { FeatureAttributionOut } from "../src/lib/generated/api";
import { CATALOGUES } from "../src/lib/i18n";
import { errorSentence, scopeSentence } from "../src/pages/attribution/featSplit";

const num = (v: number) => v.toFixed(4);

function answer(over: Partial<FeatureAttributionOut> = {}): FeatureAttributionOut {
  return {
    model: "m", hook: "blocks.1.hook_resid_post", layer: 1, n_layer: 4, d_sae: 512, k: 32, tokens: ["a", "b"],
    position: 1, target: { id: 3, token: " c", logit: 2 }, versus: null, metric: 2, rest: 0.25, scale: 1.5,
    whole: 1, later: 0.75, bias: 0.1, error: -0.3,
    active: 3, features: [{ id: 7, activation: 1, effect: 0.9 }, { id: 2, activation: 0.5, effect: 0.4 }], others: -0.1,
    ...over,
  };
}

function fill(lang: "en" | "zh", key: string, vars: Record<string, string | number>): string {
  const s = (CATALOGUES[lang] as Record<string, string>)[key];
  expect(s, `${lang} ${key}`).toBeTypeOf("string");
  return s.replace(/\{(\w+)\}/g, (_, k: string) => String(vars[k]));
}

describe("which block's output the split covers", () => {
  it("the last block: only the norm's constant is left out", () => {
    const a = answer({ layer: 3, later: 0, whole: 1.75 });
    const s = scopeSentence(a, num);
    expect(s.key).toBe("attr.fLast");
    expect(fill("en", s.key, s.vars)).toContain("is 2.0000 less the norm's constant 0.2500");
  });
  it("one block after it, named", () => {
    const s = scopeSentence(answer({ layer: 2, n_layer: 4 }), num);
    expect(s.key).toBe("attr.fEarlierOne");
    expect(fill("en", s.key, s.vars)).toContain("Block 3, after it, writes 0.7500 more");
    expect(fill("zh", s.key, s.vars)).toContain("其后的第 3 个模块又写入了 0.7500");
  });
  it("several blocks after it: their range, and the sum stated is the metric", () => {
    const s = scopeSentence(answer(), num);
    expect(s.key).toBe("attr.fEarlierMany");
    const en = fill("en", s.key, s.vars);
    expect(en).toContain("Blocks 2 to 3, after it, write 0.7500 more");
    expect(en).toContain("1.0000 + 0.7500 + 0.2500 = 2.0000");
    expect(fill("zh", s.key, s.vars)).toContain("第 2 到第 3 个模块");
  });
});

describe("the error against the largest feature", () => {
  it("smaller in size", () => {
    const s = errorSentence(answer(), num);
    expect(s.key).toBe("attr.fErrorSmall");
    expect(fill("en", s.key, s.vars)).toContain("#7, which moves it by 0.9000");
  });
  it("larger in size, whatever its sign", () => {
    const s = errorSentence(answer({ error: -1.2 }), num);
    expect(s.key).toBe("attr.fErrorBig");
    expect(fill("zh", s.key, s.vars)).toContain("-1.2000");
  });
  it("no feature active", () => {
    const s = errorSentence(answer({ active: 0, features: [], others: 0 }), num);
    expect(s.key).toBe("attr.fNoFeatures");
  });
});
