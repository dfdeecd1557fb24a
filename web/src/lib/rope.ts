// Rotary position embedding (RoPE) and the key/value cache of grouped-query attention, computed in the
// page from the model's own numbers: the trace's rope.angles give the frequencies, its attn.q / attn.k
// the vectors. Pairs follow Hugging Face's rotate_half convention: dimension i turns with i + Dh/2.

/** Each pair's frequency (radians per position), read off the trace's angles (T, Dh/2): row p holds
 *  p * inv_freq, so row 1 is inv_freq itself. Null when the text has a single position (row 0 is all 0). */
export function invFreqFromAngles(angles: Float32Array, nPos: number): Float64Array | null {
  if (nPos < 2) return null;
  const half = angles.length / nPos;
  const out = new Float64Array(half);
  for (let i = 0; i < half; i++) out[i] = angles[half + i];
  return out;
}

/** `x` (Dh numbers) rotated for position `pos`: pair i = (x[i], x[i + Dh/2]) turns by pos * invFreq[i]. */
export function rotate(x: ArrayLike<number>, invFreq: ArrayLike<number>, pos: number): Float64Array {
  const half = invFreq.length;
  const out = new Float64Array(2 * half);
  for (let i = 0; i < half; i++) {
    const a = pos * invFreq[i], c = Math.cos(a), s = Math.sin(a);
    const x1 = x[i], x2 = x[i + half];
    out[i] = x1 * c - x2 * s;
    out[i + half] = x2 * c + x1 * s;
  }
  return out;
}

/** The raw attention score (no 1/√Dh) of query `q` at position m and key `k` at position n, both
 *  given before rotation: rotate(q, m) · rotate(k, n). It depends on m − n only. */
export function ropeScore(q: ArrayLike<number>, k: ArrayLike<number>, invFreq: ArrayLike<number>, m: number,
  n: number): number {
  const a = rotate(q, invFreq, m), b = rotate(k, invFreq, n);
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

/** Bytes one value takes in the model's dtype (null when unknown). */
export function bytesPerValue(dtype: string | undefined): number | null {
  switch (dtype) {
    case "float32": return 4;
    case "bfloat16": case "float16": return 2;
    default: return null;
  }
}

/** Bytes the key/value cache holds per token: K and V, in every layer, for every key/value head. */
export function kvBytesPerToken(nLayer: number, kvHeads: number, headDim: number, bytes: number): number {
  return 2 * nLayer * kvHeads * headDim * bytes;
}

/** A byte count in binary units (B, KiB, MiB, GiB). */
export function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let u = 0, v = n;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return `${u === 0 ? v : v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)} ${units[u]}`;
}

// The formulas beside the two views (plain HTML, as lib/formulas.ts writes them).
const v = (s: string) => `<i>${s}</i>`;
const sub = (s: string, x: string) => `${s}<sub>${x}</sub>`;
export const ROPE_FORMULA =
  `${sub(v("θ"), "i")} = frequency of pair ${v("i")}, &nbsp;angle = ${v("m")}·${sub(v("θ"), "i")}<br>` +
  `(${sub(v("x"), "i")}, ${sub(v("x"), "i+d/2")}) → (${sub(v("x"), "i")} cos ${v("m")}${sub(v("θ"), "i")} − ` +
  `${sub(v("x"), "i+d/2")} sin ${v("m")}${sub(v("θ"), "i")}, &nbsp;${sub(v("x"), "i+d/2")} cos ${v("m")}${sub(v("θ"), "i")} + ` +
  `${sub(v("x"), "i")} sin ${v("m")}${sub(v("θ"), "i")})<br>` +
  `(${sub(v("R"), "m")}${v("q")}) · (${sub(v("R"), "n")}${v("k")}) = ${v("q")} · ${sub(v("R"), "n−m")}${v("k")}`;
export const GQA_FORMULA =
  `${v("g")}(${v("h")}) = ⌊${v("h")} / (${v("H")}/${v("G")})⌋<br>` +
  `${sub(v("A"), "h")} = softmax(${sub(v("Q"), "h")} ${sub(v("K"), `${v("g")}(${v("h")})`)}<sup>⊤</sup> / √${v("d")} + ${v("M")})<br>` +
  `${sub(v("z"), "h")} = ${sub(v("A"), "h")} ${sub(v("V"), `${v("g")}(${v("h")})`)}<br>` +
  `KV bytes per token = 2 · ${v("L")} · ${v("G")} · ${v("d")} · bytes`;
