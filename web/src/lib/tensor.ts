// Tensors as the API sends them: little-endian float16/float32, row-major, with the shape and the dims
// of the name scheme; as base64 in a JSON answer, or as raw bytes in a binary answer (below).
import type { AttentionOverview, EncodedTensor } from "./generated/api";

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

// -- the binary answer (the server's encoding.pack_binary) ---------------------------------------------
//   "TEB1" | u32 LE header length | header JSON | padding to 8 bytes | blobs
// The header is the JSON answer with each encoded array's "data" left "" and "blob": [offset, length]
// into the blobs (each at a multiple of 8 bytes). The bytes are attached to their objects here, so
// decodeTensor and overviewBytes read them in place: the same values as the base64 would carry.

export const BINARY_MEDIA_TYPE = "application/x-te-binary";
const attached = new WeakMap<object, Uint8Array>();
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

export function unpackBinary(buf: ArrayBuffer): unknown {
  const head = new DataView(buf, 0, 8);
  if (head.getUint32(0, false) !== 0x54454231) throw new Error("not a binary answer (no TEB1 at its start)"); // "TEB1"
  const n = head.getUint32(4, true);
  const answer = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n)));
  const start = 8 + n + ((8 - ((8 + n) % 8)) % 8);
  const attach = (node: unknown): void => {
    if (Array.isArray(node)) { for (const v of node) if (v && typeof v === "object") attach(v); return; }
    if (!node || typeof node !== "object") return;
    const o = node as Record<string, unknown>;
    if (Array.isArray(o.blob) && typeof o.data === "string") {
      const [off, len] = o.blob as [number, number];
      attached.set(o, new Uint8Array(buf, start + off, len));
      delete o.blob;
      return;
    }
    for (const v of Object.values(o)) if (v && typeof v === "object") attach(v);
  };
  attach(answer);
  return answer;
}

/** The bytes of an encoded array: attached from a binary answer, or decoded from its base64. */
function bytesOf(t: { data: string }): Uint8Array {
  return attached.get(t) ?? base64Bytes(t.data);
}

export function decodeTensor(t: EncodedTensor): Tensor {
  const bytes = bytesOf(t);
  const n = t.triangle ? triangleSize(t.shape) : t.shape.reduce((a, b) => a * b, 1);
  let data: Float32Array;
  if (t.dtype === "float16") {
    data = new Float32Array(n);
    if (LITTLE_ENDIAN && bytes.byteOffset % 2 === 0) {
      const h = new Uint16Array(bytes.buffer, bytes.byteOffset, n);
      for (let i = 0; i < n; i++) data[i] = F16[h[i]];
    } else {
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      for (let i = 0; i < n; i++) data[i] = F16[view.getUint16(2 * i, true)];
    }
  } else if (LITTLE_ENDIAN && bytes.byteOffset % 4 === 0) {
    data = new Float32Array(bytes.buffer, bytes.byteOffset, n); // in place: no copy
  } else {
    data = new Float32Array(n);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let i = 0; i < n; i++) data[i] = view.getFloat32(4 * i, true);
  }
  return { name: t.name, dims: t.dims, shape: t.shape, data: t.triangle ? fromTriangle(data, t.shape) : data };
}

/** How many values a lower triangle of the last two dims (T, S) holds: row i keys 0..S - T + i (the server's
 *  encoding.lower_triangle). */
function triangleSize(shape: number[]): number {
  const T = shape[shape.length - 2], S = shape[shape.length - 1];
  const outer = shape.slice(0, -2).reduce((a, b) => a * b, 1);
  return outer * (T * (S - T + 1) + (T * (T - 1)) / 2);
}

/** The whole (..., T, S) tensor from its lower triangle, the entries above it 0 (what they are: the server
 *  sends a triangle only then). */
function fromTriangle(tri: Float32Array, shape: number[]): Float32Array {
  const T = shape[shape.length - 2], S = shape[shape.length - 1];
  const out = new Float32Array(shape.reduce((a, b) => a * b, 1));
  let k = 0;
  for (let o = 0; o < out.length; o += T * S) {
    for (let i = 0; i < T; i++) {
      const len = S - T + i + 1;
      out.set(tri.subarray(k, k + len), o + i * S);
      k += len;
    }
  }
  return out;
}

// float -> IEEE half bits, rounding to nearest even (as numpy's and torch's float32 -> float16, which the
// server's float16 answers use).
const f32buf = new Float32Array(1), u32buf = new Uint32Array(f32buf.buffer);
export function floatToHalf(v: number): number {
  f32buf[0] = v;
  const x = u32buf[0], sign = (x >>> 16) & 0x8000, exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 112; // the exponent re-biased for half
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) { // a subnormal half, or zero
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e, rem = mant & ((1 << shift) - 1), mid = 1 << (shift - 1);
    let h = mant >> shift;
    if (rem > mid || (rem === mid && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h++; // a carry into the exponent is the right rounding
  return sign | h;
}

/** An answer's encoded tensor holding `values` in `t.dtype`, with its bytes attached as a binary answer's
 *  are (no base64): for answers made in the page itself (the offline snapshot). */
export function encodedTensor(t: Omit<EncodedTensor, "data">, values: Float32Array): EncodedTensor {
  const n = values.length, width = t.dtype === "float16" ? 2 : 4;
  const bytes = new Uint8Array(n * width), view = new DataView(bytes.buffer);
  if (t.dtype === "float16") for (let i = 0; i < n; i++) view.setUint16(2 * i, floatToHalf(values[i]), true);
  else if (LITTLE_ENDIAN) new Float32Array(bytes.buffer).set(values);
  else for (let i = 0; i < n; i++) view.setFloat32(4 * i, values[i], true);
  const out: EncodedTensor = { ...t, data: "" };
  attached.set(out, bytes);
  return out;
}

export function decodeU8(b64: string): Uint8Array {
  return base64Bytes(b64);
}

/** The attention overview's 8-bit thumbnails (see AttentionOverview in the API types). */
export function overviewBytes(a: AttentionOverview): Uint8Array {
  return bytesOf(a);
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
