// The catalogues (src/locales/): the languages shipped have every key English has, any language the same
// placeholders as English; no language has a key English lacks; keys are named by concept, not by a model family, and
// those of the concept namespaces are each used by the app; the lesson number format keeps 3 significant digits.
import { describe, expect, it } from "vitest";
import en from "../src/locales/en.json";
import { FAMILIES } from "../src/lib/generated/names";
import { CATALOGUES, LANGS, placeholders } from "../src/lib/i18n";
import { percent, sig3, significantDigits } from "../src/lib/lessonFormat";

const SHIPPED_COMPLETE = ["en", "zh"];

describe("catalogues", () => {
  it("are English and Chinese at least", () => {
    expect(LANGS[0]).toBe("en");
    expect(LANGS).toContain("zh");
  });
  for (const lang of LANGS) {
    it(`${lang}: the same keys and placeholders as English`, () => {
      const cat = CATALOGUES[lang] as Record<string, string>;
      const extra = Object.keys(cat).filter((k) => !(k in en));
      expect(extra).toEqual([]);
      // a translator's new file may lack keys (English fills them in); the languages shipped have them all
      const missing = Object.keys(en).filter((k) => !(k in cat));
      if (SHIPPED_COMPLETE.includes(lang)) expect(missing).toEqual([]);
      for (const k of ["meta.name", "meta.htmlLang"]) expect(cat, `${lang} ${k}`).toHaveProperty([k]);
      const differ = Object.entries(en as Record<string, string>)
        .filter(([k, s]) => k in cat && placeholders(s).sort().join() !== placeholders(cat[k]).sort().join())
        .map(([k]) => k);
      expect(differ).toEqual([]);
    });
  }
});

// the app's sources (lessons included), for the keys they name: a key is used where it is written out, or where a
// template builds it from its prefix (`overview.ropeSay_${k}`)
const sources = Object.values(import.meta.glob<string>(["../src/**/*.ts", "../src/**/*.svelte"],
  { eager: true, query: "?raw", import: "default" })).join("\n");
const builtPrefixes = [...sources.matchAll(/`([\w.]+)\$\{/g)].map((m) => m[1]);
const used = (k: string) => sources.includes(`"${k}"`) || sources.includes(`'${k}'`) || builtPrefixes.some((p) => k.startsWith(p));

describe("catalogue keys", () => {
  it("are named by concept: no namespace is a model family", () => {
    const families = Object.keys(FAMILIES);
    expect(families).toContain("llama");
    expect(Object.keys(en).filter((k) => families.includes(k.split(".")[0]))).toEqual([]);
  });
  it("of the concept namespaces are each used", () => {
    const concept = ["attn", "dtype", "embed", "mlp", "norm", "output", "overview", "pos", "residual", "tokens"];
    const keys = Object.keys(en).filter((k) => concept.includes(k.split(".")[0]));
    expect(keys.length).toBeGreaterThan(40);
    expect(keys.filter((k) => !used(k))).toEqual([]);
  });
});

describe("lesson numbers", () => {
  it("carry 3 significant digits", () => {
    expect(sig3(0.13004)).toBe("0.13");
    expect(sig3(-0.031912)).toBe("−0.0319");
    expect(sig3(17.88)).toBe("17.9");
    expect(sig3(5.6569)).toBe("5.66");
    expect(sig3(9.547e-19)).toBe("9.55 × 10⁻¹⁹");
    expect(percent(0.779123)).toBe("77.9%");
    expect(percent(9.547e-19)).toBe("< 0.01%");
    for (const x of [0.13004, -0.0319, 17.88, 123456.7, 1e-9, 0.999]) expect(significantDigits(sig3(x)) ?? 0).toBeLessThanOrEqual(3);
    expect(significantDigits("0.00000000000000009547")).toBe(4);
    expect(significantDigits("8.374%")).toBe(4);
    expect(significantDigits("50,257")).toBe(null);
  });
});
