import { format } from "d3-format";

const f4 = format(".4f");
const g4 = format(".4~g");
const pct = format(".4~p");

/** A value as shown everywhere in the app: 4 decimals, or 4 significant digits when very small/large. */
export function num(v: number): string {
  if (v === -Infinity) return "−∞";
  if (v === Infinity) return "∞";
  if (Number.isNaN(v)) return "NaN";
  const a = Math.abs(v);
  return (a !== 0 && (a < 1e-3 || a >= 1e5) ? g4(v) : f4(v)).replace("-", "−");
}

/** A probability as a percentage with 4 significant digits. */
export function prob(p: number): string {
  return p === 0 ? "0%" : pct(p);
}

/** Token text with its spaces and line breaks made visible. */
export function visible(text: string): string {
  return text.replace(/ /g, "␣").replace(/\n/g, "↵").replace(/\t/g, "⇥");
}
