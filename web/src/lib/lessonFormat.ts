// Numbers as lesson text quotes them (the views keep their 4 decimals; prose keeps 2-3 significant digits,
// which is what a sentence can carry): decimals to 3 significant digits, next-token probabilities as
// percentages, attention weights as decimals (as the views show them), counts exact with thousands separators,
// and a negative number after an operator in parentheses ("−0.032 + (−0.022)"). Each helper makes a `Value`
// (lib/lesson.ts); `at` names the element of the view that shows it.
import { format } from "d3-format";
import { visible } from "./format";
import { val, type Value } from "./lesson";

const r3 = format(".3~r");
const comma = format(",");

/** A real number to 3 significant digits, with a true minus sign; exponents for the very small or large. */
export function sig3(x: number): string {
  if (x === -Infinity) return "−∞";
  if (x === Infinity) return "∞";
  if (Number.isNaN(x)) return "NaN";
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-4 || a >= 1e6)) {
    const e = Math.floor(Math.log10(a));
    const m = Number((x / 10 ** e).toPrecision(3));
    return `${r3(m).replace("-", "−")} × 10${superscript(e)}`;
  }
  return r3(x).replace("-", "−");
}

const SUP: Record<string, string> = { "-": "⁻", "0": "⁰", "1": "¹", "2": "²", "3": "³", "4": "⁴", "5": "⁵", "6": "⁶",
  "7": "⁷", "8": "⁸", "9": "⁹" };
const superscript = (e: number) => String(e).replace(/./g, (c) => SUP[c] ?? c);

/** A probability as a percentage to 3 significant digits ("77.9%", "4.83%"); below 0.01% and above 99.9% it says so. */
export function percent(p: number): string {
  if (p === 0) return "0%";
  if (p === 1) return "100%";
  if (p < 1e-4) return "< 0.01%";
  if (p >= 0.9995) return "> 99.9%"; // 3 significant digits would round it to "100%"
  return `${r3(p * 100)}%`;
}

/** A real number (a score, a weight, a length, a mean). */
export const dec = (id: string, x: number, at?: string): Value => val(id, sig3(x), x, at);
/** The same, written as a term after an operator: a negative number in parentheses. */
export const term = (id: string, x: number, at?: string): Value =>
  val(id, x < 0 ? `(${sig3(x)})` : sig3(x), x, at);
/** A next-token probability, as a percentage. */
export const pct = (id: string, p: number, at?: string): Value => val(id, percent(p), p, at);
/** A whole number shown exactly: a count, an id, a position, a size. */
export const int = (id: string, n: number, at?: string): Value => val(id, comma(n), n, at);
/** A token's text with its spaces visible; `raw` is the token id. */
export const token = (id: string, text: string, tokenId: number, at?: string): Value =>
  val(id, visible(text) || `#${tokenId}`, tokenId, at);
/** A token known by its text (an encoder-decoder's vocabulary), its spaces visible as the views show them; `raw` is
 *  the text. */
export const tokenText = (id: string, text: string, at?: string): Value => val(id, visible(text), text, at);
/** An output (or source) text; an empty one shows as ∅, as the views show it. */
export const outputText = (id: string, text: string, at?: string): Value => val(id, text || "∅", text, at);
/** A name or other text (a model's name, an expert, a head "L2 H5"). */
export const word = (id: string, text: string, at?: string): Value => val(id, text, text, at);

/** The significant digits a shown number carries (for the tests: prose carries at most 3). Whole numbers are
 *  exact counts and carry none to check; null when `shown` holds no decimal number. */
export function significantDigits(shown: string): number | null {
  const m = /(\d[\d,]*)(\.(\d+))?/.exec(shown);
  if (!m || !m[2]) return null;
  const digits = (m[1].replace(/,/g, "") + m[3]).replace(/^0+/, "");
  return digits.length;
}
