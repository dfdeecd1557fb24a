// The offline snapshot: one HTML file holding the app and the data of one trace (written by
// `transformer-explainer snapshot`). When the page carries that data, every API call is answered from
// it here instead of going to a server: the same shapes, cut from the stored full tensors, and the
// analyses computed when the file was written. Anything else gets a message saying so.
import type { EncodedTensor, ModelList, SamplingIn, TensorSpec, TraceOut } from "../lib/generated/api";
import { ABLATION_TOP } from "../lib/generated/limits";

interface Stored { dims: string[]; shape: number[]; dtype: "float16" | "float32"; data: string }

export interface SnapshotData {
  format: "transformer-explainer-snapshot";
  version: number;
  models: ModelList;
  trace: TraceOut;
  sampling: SamplingIn;
  top_n: number;
  tensors: Record<string, Stored>; // full activations by name (no head / position slicing)
  weights: Record<string, Stored>;
  omitted: string[]; // names left out to keep the file small
  analysis: {
    lens: { top: number; out: Record<string, unknown> & { positions: number[]; layers: { positions: unknown[] }[] } } | null;
    heads: (Record<string, unknown> & { reference: unknown }) | null;
    importance: Record<string, unknown> | null;
    ablations: Record<string, Record<string, unknown>>; // "layer.head" -> zero ablation of that head
    ablation_top: number;
    neighbours: Record<string, Record<string, unknown> & { neighbours: unknown[] }>; // by token id
    analogy: { request: { positive: unknown[]; negative: unknown[] }; out: (Record<string, unknown> & { neighbours: unknown[] }) | null;
      error: string | null } | null;
    projection: { request: unknown[]; out: Record<string, unknown> | null; error: string | null } | null;
  };
}

function read(): SnapshotData | null {
  if (typeof document === "undefined") return null;
  const el = document.getElementById("te-snapshot");
  if (!el?.textContent) return null;
  const d = JSON.parse(el.textContent) as SnapshotData;
  return d.format === "transformer-explainer-snapshot" ? d : null;
}

export const snapshot: SnapshotData | null = read();

export class SnapshotError extends Error {
  status = 404;
}

const NEEDS_SERVER = "This page is an offline snapshot of one text; {what} needs the live app " +
  "(transformer-explainer serve).";
const missing = (what: string) => new SnapshotError(NEEDS_SERVER.replace("{what}", what));

// -- tensors ---------------------------------------------------------------------------------------

function b64bytes(b64: string): Uint8Array {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function half(h: number): number {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  if (e === 0) return s * 2 ** -14 * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * 2 ** (e - 15) * (1 + f / 1024);
}

// float -> IEEE half bits, round to nearest even (as numpy's float32 -> float16, which the server uses)
const f32buf = new Float32Array(1), u32buf = new Uint32Array(f32buf.buffer);
function toHalf(v: number): number {
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

/** A stored tensor as float16 bits: slices keep the exact values the server would send. */
interface Full { dims: string[]; shape: number[]; bits: Uint16Array }
const decoded = new Map<string, Full>();

function decode(key: string, s: Stored): Full {
  let d = decoded.get(key);
  if (!d) {
    const bytes = b64bytes(s.data), view = new DataView(bytes.buffer);
    const n = s.shape.reduce((a, b) => a * b, 1), bits = new Uint16Array(n);
    if (s.dtype === "float16") for (let i = 0; i < n; i++) bits[i] = view.getUint16(2 * i, true);
    else for (let i = 0; i < n; i++) bits[i] = toHalf(view.getFloat32(4 * i, true));
    d = { dims: s.dims, shape: s.shape, bits };
    decoded.set(key, d);
  }
  return d;
}

/** `t` with one index of axis `axis` taken (the axis removed). */
function take(t: Full, axis: number, i: number): Full {
  const outer = t.shape.slice(0, axis).reduce((a, b) => a * b, 1);
  const inner = t.shape.slice(axis + 1).reduce((a, b) => a * b, 1);
  const n = t.shape[axis];
  const bits = new Uint16Array(outer * inner);
  for (let o = 0; o < outer; o++) bits.set(t.bits.subarray((o * n + i) * inner, (o * n + i + 1) * inner), o * inner);
  return { dims: t.dims.filter((_, k) => k !== axis), shape: t.shape.filter((_, k) => k !== axis), bits };
}

function index(t: Full, dim: string, i: number, what: string, name: string): Full {
  const axis = t.dims.indexOf(dim);
  if (axis < 0) throw new SnapshotError(`${name} has no ${what} dimension (its dims are ${t.dims.join(", ")})`);
  const n = t.shape[axis], j = i < 0 ? n + i : i;
  if (j < 0 || j >= n) throw new SnapshotError(`${what} ${i} is out of range for ${name} (0..${n - 1})`);
  return take(t, axis, j);
}

function base64(bytes: Uint8Array): string {
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

/** The answer for `spec`, echoing its fields as the server does (the app files tensors by them). */
function encode(name: string, spec: TensorSpec, t: Full): EncodedTensor {
  const dtype = spec.dtype ?? "float16";
  let bytes: Uint8Array;
  if (dtype === "float16") {
    const le = new DataView(new ArrayBuffer(2 * t.bits.length));
    t.bits.forEach((h, i) => le.setUint16(2 * i, h, true));
    bytes = new Uint8Array(le.buffer);
  } else {
    const le = new DataView(new ArrayBuffer(4 * t.bits.length));
    t.bits.forEach((h, i) => le.setFloat32(4 * i, half(h), true));
    bytes = new Uint8Array(le.buffer);
  }
  return { name, head: spec.head ?? null, position: spec.position ?? null, row: spec.row ?? null, dims: t.dims,
    shape: t.shape, dtype, data: base64(bytes) };
}

/** The full activation `name`: stored, or derived from a stored one as the Python trace derives it. */
function activation(d: SnapshotData, name: string): Full {
  if (name in d.tensors) return decode(name, d.tensors[name]);
  if (name === "embed.sum") return activation(d, "blocks.0.resid_pre");
  const post = /^blocks\.(\d+)\.resid_post$/.exec(name); // a block's output is the next block's input
  if (post && Number(post[1]) < d.trace.config.n_layer - 1) return activation(d, `blocks.${Number(post[1]) + 1}.resid_pre`);
  const m = /^blocks\.(\d+)\.(attn\.concat|attn\.scaled_scores|attn\.masked_scores)$/.exec(name);
  if (m && m[2] === "attn.concat") { // (H, T, Dh) -> (T, H * Dh)
    const z = activation(d, `blocks.${m[1]}.attn.z`);
    const [H, T, Dh] = z.shape, bits = new Uint16Array(H * T * Dh);
    for (let h = 0; h < H; h++) for (let t = 0; t < T; t++)
      bits.set(z.bits.subarray((h * T + t) * Dh, (h * T + t + 1) * Dh), t * H * Dh + h * Dh);
    return { dims: ["T", "D"], shape: [T, H * Dh], bits };
  }
  if (m) {
    const s = activation(d, `blocks.${m[1]}.attn.scores`);
    const [H, T, S] = s.shape, scale = 1 / Math.sqrt(d.trace.config.head_dim), bits = new Uint16Array(s.bits.length);
    const masked = m[2] === "attn.masked_scores";
    for (let h = 0; h < H; h++) for (let t = 0; t < T; t++) for (let k = 0; k < S; k++) {
      const i = (h * T + t) * S + k;
      bits[i] = masked && k > t ? toHalf(-Infinity) : toHalf(Math.fround(half(s.bits[i]) * scale));
    }
    return { dims: s.dims, shape: s.shape, bits };
  }
  throw missing(`${name} (left out to keep the file small)`);
}

function activationSlice(d: SnapshotData, spec: TensorSpec): EncodedTensor {
  let t = activation(d, spec.name);
  if (spec.head != null) t = index(t, "H", spec.head, "head", spec.name);
  if (spec.position != null) t = index(t, t.dims.includes("T") ? "T" : "S", spec.position, "position", spec.name);
  return encode(spec.name, spec, t);
}

function weightSlice(d: SnapshotData, spec: TensorSpec): EncodedTensor {
  if (!(spec.name in d.weights)) throw missing(`the weight ${spec.name} (left out to keep the file small)`);
  let t = decode(`w|${spec.name}`, d.weights[spec.name]);
  if (spec.head != null) t = index(t, "H", spec.head, "head", spec.name);
  if (spec.row != null) t = index(t, t.dims[0], spec.row, "row", spec.name);
  return encode(spec.name, spec, t);
}

// -- requests --------------------------------------------------------------------------------------

type Body = Record<string, unknown> & { model?: string | null; text?: string | null; ids?: number[] | null };

function sameInput(d: SnapshotData, b: Body): void {
  const tr = d.trace;
  const ok = (b.ids != null && b.ids.join() === tr.token_ids.join()) || (b.text != null && b.text === tr.text);
  if (!ok) throw missing("another text");
  if (b.model != null && b.model !== tr.model) throw missing(`the model ${b.model}`);
}

const sameSampling = (a: SamplingIn, b: SamplingIn | undefined) => !!b && (a.temperature ?? 1) === (b.temperature ?? 1)
  && (a.top_k ?? null) === (b.top_k ?? null) && (a.top_p ?? null) === (b.top_p ?? null)
  && (a.seed ?? null) === (b.seed ?? null);

const sameTokens = (a: unknown[], b: unknown[]) => JSON.stringify(a) === JSON.stringify(b);

function analysisCall(d: SnapshotData, what: string, b: Body): unknown {
  const a = d.analysis;
  if (["lens", "ablate", "importance", "heads"].includes(what)) sameInput(d, b);
  switch (what) {
    case "lens": {
      const top = Number(b.top ?? 5);
      if (!a.lens || top > a.lens.top) throw missing(`the logit lens with more than ${a.lens?.top ?? 0} tokens`);
      const all = a.lens.out, T = d.trace.token_ids.length;
      const cols = ((b.positions as number[] | undefined) ?? [-1]).map((p) => {
        const q = p < 0 ? T + p : p;
        if (q < 0 || q >= T) throw new SnapshotError(`position ${p} is outside the ${T} traced tokens`);
        return all.positions.indexOf(q);
      });
      const pick = <X>(xs: X[]) => cols.map((i) => xs[i]);
      return { ...all, positions: pick(all.positions), position_tokens: pick(all.position_tokens as string[]),
        targets: pick(all.targets as unknown[]),
        layers: all.layers.map((l) => ({ ...l, positions: pick(l.positions as { top: unknown[] }[])
          .map((c) => ({ ...c, top: c.top.slice(0, top) })) })) };
    }
    case "heads":
      if (!a.heads) throw missing("head roles");
      return b.reference === false ? { ...a.heads, reference: null, reference_role_of: null } : a.heads;
    case "importance":
      if (!a.importance || (b.mode ?? "zero") !== "zero") throw missing("this head-importance map");
      return a.importance;
    case "ablate": {
      const heads = (b.heads as number[][] | undefined) ?? [];
      const key = heads.length === 1 && !(b.layers as unknown[] | undefined)?.length ? heads[0].join(".") : "";
      const res = a.ablations[key];
      if (!res || (b.mode ?? "zero") !== "zero" || Number(b.top ?? ABLATION_TOP) > a.ablation_top)
        throw missing("this ablation (the snapshot holds each head alone, zero ablation)");
      return res;
    }
    case "neighbours": {
      const tok = b.token;
      const id = typeof tok === "number" ? tok
        : Object.keys(a.neighbours).find((k) => (a.neighbours[k].token as { token: string }).token === tok);
      const res = id != null ? a.neighbours[String(id)] : undefined;
      if (!res || Number(b.n ?? 10) > res.neighbours.length) throw missing("the neighbours of this token");
      return { ...res, neighbours: res.neighbours.slice(0, Number(b.n ?? 10)) };
    }
    case "analogy": {
      const r = a.analogy;
      if (!r || !sameTokens(r.request.positive, b.positive as unknown[]) || !sameTokens(r.request.negative,
        (b.negative as unknown[] | undefined) ?? [])) throw missing("this analogy");
      if (!r.out) throw new SnapshotError(r.error ?? "no answer");
      return { ...r.out, neighbours: r.out.neighbours.slice(0, Number(b.n ?? 10)) };
    }
    case "project": {
      const r = a.projection;
      if (!r || !sameTokens(r.request, b.tokens as unknown[])) throw missing("this projection");
      if (!r.out) throw new SnapshotError(r.error ?? "no answer");
      return r.out;
    }
  }
  throw missing(`analysis/${what}`);
}

/** Answer an API call from the snapshot (the same JSON a server would send). */
export async function snapshotCall(path: string, body?: unknown): Promise<unknown> {
  const d = snapshot!;
  const b = (body ?? {}) as Body;
  if (path === "models") return d.models;
  if (path.startsWith("models/")) {
    const m = d.models.models.find((x) => x.name === decodeURIComponent(path.slice(7)));
    if (!m) throw new SnapshotError(`unknown model ${path.slice(7)}`);
    return m;
  }
  if (path.startsWith("analysis/")) return analysisCall(d, path.slice(9), b);
  switch (path) {
    case "trace": {
      sameInput(d, b);
      if (!sameSampling(d.sampling, b.sampling as SamplingIn)) throw missing("other sampling settings");
      const include = (b.include as TensorSpec[] | undefined) ?? [];
      return { ...d.trace, tensors: include.map((s) => activationSlice(d, s)), timings_ms: {} };
    }
    case "tensors":
      sameInput(d, b);
      return { model: d.trace.model, token_ids: d.trace.token_ids,
        tensors: (b.tensors as TensorSpec[]).map((s) => activationSlice(d, s)) };
    case "weights":
      return { model: d.trace.model, token_ids: [], tensors: (b.tensors as TensorSpec[]).map((s) => weightSlice(d, s)) };
    case "next_token":
      sameInput(d, b);
      if (!sameSampling(d.sampling, b.sampling as SamplingIn)) throw missing("other sampling settings");
      return d.trace.next;
    case "generate":
      throw missing("generating more text");
  }
  throw missing(path);
}
