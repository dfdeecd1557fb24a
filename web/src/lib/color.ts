import { interpolateRdBu, interpolatePurples } from "d3-scale-chromatic";
import { rgb } from "d3-color";

export type ColorFn = (v: number) => [number, number, number];

function toRgb(s: string): [number, number, number] {
  const c = rgb(s);
  return [c.r, c.g, c.b];
}

// the colour tables, built once: every strip and heat map asks for a colour function on every text change
let rdbu: [number, number, number][] | null = null;
let purples: [number, number, number][] | null = null;

/** Red for positive, blue for negative, white at 0; |v| >= range is full colour. */
export function diverging(range: number): ColorFn {
  const lut = (rdbu ??= Array.from({ length: 257 }, (_, i) => toRgb(interpolateRdBu(1 - i / 256))));
  return (v) => {
    if (!Number.isFinite(v)) return [200, 200, 200];
    const t = Math.max(-1, Math.min(1, v / range));
    return lut[Math.round((t + 1) * 128)];
  };
}

/** For probabilities and attention weights: white at 0, dark purple at `max`. A `gamma` below 1
 * stretches the small values (attention over many tokens is spread thin). */
export function sequential(max = 1, gamma = 1): ColorFn {
  const lut = (purples ??= Array.from({ length: 257 }, (_, i) => toRgb(interpolatePurples(i / 256))));
  return (v) => {
    if (!Number.isFinite(v)) return [215, 215, 215];
    return lut[Math.round(Math.max(0, Math.min(1, v / max)) ** gamma * 256)];
  };
}

export function css([r, g, b]: [number, number, number]): string {
  return `rgb(${r},${g},${b})`;
}
