// Tensors as the API sends them: base64 of little-endian float16/float32, row-major, with the shape
// and the dims of the name scheme.
import type { EncodedTensor } from "./generated/api";

export interface Tensor {
  name: string;
  dims: string[];
  shape: number[];
  data: Float32Array;
}

function base64Bytes(b64: string): Uint8Array {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// IEEE half -> float (exact; handles subnormals, infinities and NaN).
const F16 = (() => {
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const s = h & 0x8000 ? -1 : 1;
    const e = (h >> 10) & 0x1f;
    const f = h & 0x3ff;
    if (e === 0) table[h] = s * 2 ** -14 * (f / 1024);
    else if (e === 31) table[h] = f ? NaN : s * Infinity;
    else table[h] = s * 2 ** (e - 15) * (1 + f / 1024);
  }
  return table;
})();

export function decodeTensor(t: EncodedTensor): Tensor {
  const bytes = base64Bytes(t.data);
  const view = new DataView(bytes.buffer);
  const n = t.shape.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  if (t.dtype === "float16") for (let i = 0; i < n; i++) data[i] = F16[view.getUint16(2 * i, true)];
  else for (let i = 0; i < n; i++) data[i] = view.getFloat32(4 * i, true);
  return { name: t.name, dims: t.dims, shape: t.shape, data };
}

export function decodeU8(b64: string): Uint8Array {
  return base64Bytes(b64);
}

/** Row `i` of a 2-D tensor. */
export function row(t: Tensor, i: number): Float32Array {
  const cols = t.shape[t.shape.length - 1];
  return t.data.subarray(i * cols, (i + 1) * cols);
}

export function stats(a: ArrayLike<number>): { min: number; max: number; absMax: number; mean: number } {
  let min = Infinity, max = -Infinity, sum = 0, n = 0;
  for (let i = 0; i < a.length; i++) {
    const v = a[i];
    if (!Number.isFinite(v)) continue;
    if (v < min) min = v;
    if (v > max) max = v;
    sum += v;
    n++;
  }
  return { min, max, absMax: Math.max(Math.abs(min), Math.abs(max)) || 1, mean: n ? sum / n : 0 };
}

/** The value below which `q` of the finite |values| lie: a colour range that one outlier cannot wash out. */
export function absQuantile(a: ArrayLike<number>, q = 0.99): number {
  const xs: number[] = [];
  const step = Math.max(1, Math.floor(a.length / 20000));
  for (let i = 0; i < a.length; i += step) if (Number.isFinite(a[i])) xs.push(Math.abs(a[i]));
  if (!xs.length) return 1;
  xs.sort((x, y) => x - y);
  return xs[Math.min(xs.length - 1, Math.floor(q * xs.length))] || xs[xs.length - 1] || 1;
}
