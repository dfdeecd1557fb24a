// The heat map's pixels (components/common/heatmapPixels.ts): the colours it remembers by value are the pixels that
// calling the colour function once per cell writes, for the app's scales and for any pure function: on a causal
// pattern (runs of zeros above the diagonal), on runs of equal values, 0 beside -0, NaN beside NaN, and with colours
// that are not whole numbers (ImageData's bytes clamp and round them).
import { describe, expect, it } from "vitest";
import { paintCells } from "../src/components/common/heatmapPixels";
import { diverging, sequential, type ColorFn } from "../src/lib/color";
import { floatToHalf } from "../src/lib/tensor";

/** The pixels as the heat map wrote them before: one call of `color` per cell, through ImageData's clamped bytes. */
function reference(values: ArrayLike<number>, color: ColorFn): Uint8ClampedArray {
  const px = new Uint8ClampedArray(4 * values.length);
  for (let i = 0; i < values.length; i++) {
    const [r, g, b] = color(values[i]);
    px[4 * i] = r;
    px[4 * i + 1] = g;
    px[4 * i + 2] = b;
    px[4 * i + 3] = 255;
  }
  return px;
}

function painted(values: ArrayLike<number>, color: ColorFn): Uint8ClampedArray {
  const px = new Uint8ClampedArray(4 * values.length);
  paintCells(values, color, px, values.length);
  return px;
}

let seed = 7;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);

/** A causal pattern of T rows as float16 values in float32 (the decoded answer), each row summing to about 1. */
function pattern(T: number): Float32Array {
  const out = new Float32Array(T * T);
  for (let r = 0; r < T; r++) {
    const w = Array.from({ length: r + 1 }, () => random() ** 4);
    const sum = w.reduce((a, b) => a + b, 0);
    for (let c = 0; c <= r; c++) out[r * T + c] = half(w[c] / sum);
  }
  return out;
}

/** v rounded to float16, as the server's float16 answer carries it. */
function half(v: number): number {
  const h = floatToHalf(v), e = (h >> 10) & 0x1f, m = h & 0x3ff, sign = h & 0x8000 ? -1 : 1;
  return sign * (e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15));
}

describe("paintCells", () => {
  it("writes the pixels one call per cell writes, on a 300-token pattern with the app's scales", () => {
    const p = pattern(300);
    let max = 0;
    for (const v of p) max = Math.max(max, v);
    for (const color of [sequential(max, 0.5), sequential(1), diverging(0.3)]) {
      expect(painted(p, color)).toEqual(reference(p, color));
    }
  });

  it("holds for runs of equal values, 0 beside -0, odd values and colours that are not whole numbers", () => {
    const odd = [NaN, NaN, Infinity, Infinity, -Infinity, 0, 0, -0, -0, 0, -0, 1e-40, 1e-40, -1e-40, 3.4e38, 0.5, 0.5];
    const values = Float32Array.from([...odd, ...odd.reverse(),
      ...Array.from({ length: 5000 }, () => (random() < 0.3 ? 0 : (random() - 0.5) * 10))]);
    // a pure function that tells -0 from 0, NaN from the rest, and gives fractions beyond 0..255
    const fancy: ColorFn = (v) => Number.isNaN(v) ? [1.5, 2.5, 300]
      : Object.is(v, -0) ? [9, 8, 7] : [(v * 37.3) % 256, -v * 3.5, Math.abs(v) * 101.7];
    for (const color of [fancy, diverging(2), sequential(5, 0.5)]) {
      expect(painted(values, color)).toEqual(reference(values, color));
      expect(painted(Array.from(values), color)).toEqual(reference(values, color)); // a plain array alike
    }
  });

  it("writes into an ImageData's bytes at an offset of another buffer alike", () => {
    const p = pattern(40), buffer = new Uint8ClampedArray(4 * p.length + 2);
    const px = buffer.subarray(2); // not 4-byte aligned: byte by byte
    paintCells(p, sequential(0.1), px, p.length);
    expect(px).toEqual(reference(p, sequential(0.1)));
  });
});
