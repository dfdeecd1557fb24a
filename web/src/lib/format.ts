import { format } from "d3-format";

const f4 = format(".4f");
const g4 = format(".4~g");
const pct = format(".4~p");

const r3 = format(".3~r");
const g3 = format(".3~g");

// Significant digits the values on this page hold, where fewer than the 4 decimals `num` shows: an offline
// snapshot stores its large tensors in float16 (11 bits: about 3.3 digits), which a 4th digit would misstate.
let heldDigits: 3 | null = null;

/** From now on show values with 3 significant digits, what float16 holds (an offline snapshot's page, before it
 *  is drawn): no digit that the file does not carry. */
export function showFloat16Digits(): void {
  heldDigits = 3;
}

/** A value as shown everywhere in the app: 4 decimals, or 4 significant digits when very small/large (3
 *  significant digits on a page whose values are float16: `showFloat16Digits`). */
export function num(v: number): string {
  if (v === -Infinity) return "−∞";
  if (v === Infinity) return "∞";
  if (Number.isNaN(v)) return "NaN";
  const a = Math.abs(v);
  if (heldDigits !== null) return (a !== 0 && (a < 1e-3 || a >= 1e5) ? g3(v) : r3(v)).replace("-", "−");
  return (a !== 0 && (a < 1e-3 || a >= 1e5) ? g4(v) : f4(v)).replace("-", "−");
}

/** A probability as a percentage with 4 significant digits. */
export function prob(p: number): string {
  return p === 0 ? "0%" : pct(p);
}

/** Runs of the token list: a lone token, or a group of tokens that together make whole characters
 * (an emoji split into bytes), with the text they make. */
export interface TokenRun { start: number; end: number; text: string | null }

export function tokenRuns(n: number, groups: readonly { start: number; end: number; text: string }[]): TokenRun[] {
  const runs: TokenRun[] = [];
  let g = 0;
  for (let i = 0; i < n; ) {
    while (g < groups.length && groups[g].start < i) g++;
    const grp = groups[g];
    if (grp && grp.start === i && grp.end <= n) { runs.push({ ...grp }); i = grp.end; g++; }
    else { runs.push({ start: i, end: i + 1, text: null }); i++; }
  }
  return runs;
}

/** Token text with its spaces and line breaks made visible. */
export function visible(text: string): string {
  return text.replace(/ /g, "␣").replace(/\n/g, "↵").replace(/\t/g, "⇥");
}
