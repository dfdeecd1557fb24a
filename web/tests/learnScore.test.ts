// How the "Watch it learn" page writes a head's score (src/pages/learn/state.svelte.ts `score`), beside each head, in
// its readout and sentences, and in the induction lesson's card: 3 decimals for every head, "< 0.001" for a tiny
// positive score (the page wrote 0.0004506 beside 0.3970), never a rounding that reads as reaching the 0.5 bar or 1.
// Checked on chosen values and on every score of the shipped recorded run.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import type { InductionRecord } from "../src/lib/generated/api";
import { score } from "../src/pages/learn/state.svelte";

// vitest runs in web/
const RUN = resolve(process.cwd(), "../src/transformer_explainer/builtin/induction-run");
const log = (run: string): InductionRecord[] => readFileSync(resolve(RUN, run, "log.jsonl"), "utf8")
  .split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l) as InductionRecord);

/** The number a written score says the value is at least and below (an interval the reader takes it to mean). */
function reading(shown: string): [number, number] {
  if (shown === "0") return [0, 0];
  if (shown.startsWith("< ")) return [0, Number(shown.slice(2))];
  if (shown.startsWith("> ")) return [Number(shown.slice(2)), 1];
  const x = Number(shown);
  return [x - 0.0005, x + 0.0005];
}

describe("a head's score as the page writes it", () => {
  it("has 3 decimals, or says how small", () => {
    expect(score(0.397)).toBe("0.397");
    expect(score(0.0316)).toBe("0.032");
    expect(score(0.0004506186523940414)).toBe("< 0.001");
    expect(score(1.822359445213806e-5)).toBe("< 0.001");
    expect(score(0.001)).toBe("0.001");
    expect(score(0)).toBe("0");
    expect(score(0.5)).toBe("0.500");
    expect(score(1)).toBe("1.000");
  });

  it("never reads as on the bar, or as all the attention, when it is not", () => {
    expect(score(0.4996)).toBe("< 0.500");
    expect(score(0.49949)).toBe("0.499");
    expect(score(0.9996)).toBe("> 0.999");
  });

  it("writes every score of the shipped run evenly and truly", () => {
    const recs = [...log("main"), ...log("control")];
    const all = recs.flatMap((r) => [...r.previous_token.flat(), ...r.induction.flat()]);
    expect(all.length).toBeGreaterThan(700);
    expect(all.some((v) => v > 0 && v < 1e-3)).toBe(true); // the run has the tiny scores this is about
    for (const v of all) {
      const s = score(v);
      expect(s, String(v)).toMatch(/^(0|\d\.\d{3}|< 0\.001|< 0\.500|> 0\.999)$/);
      const [lo, hi] = reading(s);
      expect(v >= lo - 1e-12 && v <= hi + 1e-12, `${v} written ${s}`).toBe(true);
      // on the same side of the 0.5 bar as the page's bold (HeadScores: a score >= 0.5)
      const readsOnBar = s.startsWith("> ") || (/^\d/.test(s) && Number(s) >= 0.5);
      expect(readsOnBar, `${v} written ${s}`).toBe(v >= 0.5);
    }
  });
});
