// What each claim of the chapter "Attention that forgets, compresses and sinks" (src/lessons/hybrid.ts) means, checked
// on numbers fetched here: which layers mix tokens how (by asking the server for each layer's attention pattern and
// Gated DeltaNet output: it refuses a name a layer lacks), the model's widths from /api/models, and the tensors of the
// text again from /api/tensors (the write strengths and decays, the implied and the real attention weights, the
// sinks' weights, whose complement must be the pattern row's sum). Means, products, the example token and the cache
// sizes are recomputed from those.
import { api } from "../../src/lib/client";
import type { CapabilitiesOut, ModelConfigOut, TensorSpec } from "../../src/lib/generated/api";
import type { MessageKey } from "../../src/lib/i18n";
import type { Value } from "../../src/lib/lesson";
import type { Tensor } from "../../src/lib/tensor";
import { described, type Check, type ClaimContext } from "./claims";

const num = (v: Value | undefined) => Number(v?.raw);
/** `shown` agrees with `x` to the 3 significant digits prose carries. */
const near = (shown: number, x: number, rel = 6e-3, abs = 1e-6) => Math.abs(shown - x) <= Math.max(abs, rel * Math.abs(x));
type Caps = CapabilitiesOut;
const capsOf = async (ctx: ClaimContext) => (await described(ctx)).capabilities as Caps;

/** Whether the trace answers `name` (the server refuses a name the layer does not record). */
async function answers(ctx: ClaimContext, spec: TensorSpec): Promise<boolean> {
  try {
    await ctx.tensor(spec);
    return true;
  } catch {
    return false;
  }
}
/** The layers of each kind of token mixer, asked layer by layer: attention answers its pattern, a Gated DeltaNet layer
 *  linear_attn.out, a short convolution conv.out, a state-space layer ssm.out, another kind mixer.out. */
async function layerKinds(ctx: ClaimContext): Promise<{ attn: number[]; linear: number[]; n: number; other: Record<string, number[]> }> {
  const n = (await described(ctx)).n_layer, attn: number[] = [], linear: number[] = [];
  const other: Record<string, number[]> = { short_conv: [], state_space: [], mixer: [] };
  const outs: Record<string, string> = { short_conv: "conv.out", state_space: "ssm.out", mixer: "mixer.out" };
  for (let l = 0; l < n; l++) {
    if (await answers(ctx, { name: `blocks.${l}.attn.pattern`, head: 0, position: 0 })) attn.push(l);
    if (await answers(ctx, { name: `blocks.${l}.linear_attn.out`, position: 0 })) linear.push(l);
    for (const [k, s] of Object.entries(outs)) if (await answers(ctx, { name: `blocks.${l}.${s}`, position: 0 })) other[k].push(l);
  }
  return { attn, linear, n, other };
}
const rowOf = (t: Tensor, h: number, p: number) => t.data[h * t.shape[1] + p];
/** The catalogue's count phrase quoted: its number. */
const countIs = (v: Record<string, Value>, key: string, n: number) => num(v[`${key}.n`]) === n;
const tokenIs = (v: Value | undefined, ctx: ClaimContext, p: number) => num(v) === ctx.trace.token_ids[p];

async function deltaTensors(ctx: ClaimContext, layer: number): Promise<{ beta: Tensor; decay: Tensor }> {
  const [beta, decay] = await Promise.all(["beta", "decay"].map((s) => ctx.tensor({ name: `blocks.${layer}.linear_attn.${s}` })));
  return { beta, decay };
}
function means(decay: Tensor): number[] {
  const [H, T] = decay.shape;
  return Array.from({ length: H }, (_, h) => {
    let s = 0;
    for (let t = 0; t < T; t++) s += Math.exp(decay.data[h * T + t]);
    return s / T;
  });
}

/** The decays compounded: under a hundredth ("gone"), under a half ("fades"), at least a half ("lasts"). */
async function fading(v: Record<string, Value>, ctx: ClaimContext, said: "gone" | "fades" | "lasts"): Promise<true | string> {
  const p = ctx.focus.pos, n = num(v.n), fast = num(v.fast);
  if (n !== Math.min(20, p)) return `looks back ${n} tokens from position ${p}`;
  if (!tokenIs(v.earlier, ctx, p - n) || !tokenIs(v.token, ctx, p)) return "the tokens quoted are not those positions'";
  const { linear } = await layerKinds(ctx);
  const { decay } = await deltaTensors(ctx, linear[0]);
  const m = means(decay);
  if (m[fast] !== Math.min(...m)) return `head ${fast} is not the one that keeps least (${m})`;
  let kept = 1;
  for (let r = p - n + 1; r <= p; r++) kept *= Math.exp(rowOf(decay, fast, r));
  if (!near(num(v.kept), kept)) return `the decays leave ${kept}, not ${v.kept.v}`;
  const is = kept < 0.01 ? "gone" : kept < 0.5 ? "fades" : "lasts";
  return is === said ? true : `${kept} is "${is}"`;
}

/** What the recall step compares, from tensors fetched here: the example token, the attention layer's weight on it and
 *  the weight the recurrence implies. */
async function recalled(v: Record<string, Value>, ctx: ClaimContext): Promise<{ full: number; implied: number; j: number; repeat: boolean } | string> {
  const p = ctx.focus.pos, ids = ctx.trace.token_ids, al = num(v.al), dl = num(v.dl), ha = num(v.ha), hd = num(v.hd);
  const { attn, linear } = await layerKinds(ctx);
  if (dl !== linear[0]) return `the first Gated DeltaNet layer is ${linear[0]}, not ${dl}`;
  if (al !== (attn.find((l) => l > dl) ?? attn[0])) return `attention layer ${al} is not the first after ${dl}`;
  const [row, imp] = await Promise.all([ctx.tensor({ name: `blocks.${al}.attn.pattern`, head: ha, position: p }),
    ctx.tensor({ name: `blocks.${dl}.linear_attn.implied_pattern`, head: hd, position: p })]);
  let j = -1;
  for (let s = p - 1; s >= 0 && j < 0; s--) if (ids[s] === ids[p]) j = s;
  const repeat = j >= 0;
  if (!repeat) {
    j = 0;
    for (let s = 1; s < p; s++) if (row.data[s] > row.data[j]) j = s;
  }
  if (num(v.pos) !== j || num(v.n) !== p - j || !tokenIs(v.earlier, ctx, j)) return `the example is position ${j}, not ${v.pos.v}`;
  if (!near(num(v.full), row.data[j]) || !near(num(v.implied), imp.data[j])) return `weights ${row.data[j]} and ${imp.data[j]}, not ${v.full.v} and ${v.implied.v}`;
  return { full: row.data[j], implied: imp.data[j], j, repeat };
}
/** Both weights under a thousandth in size: neither layer recalls the token. */
const small = (r: { full: number; implied: number }) => Math.abs(r.full) < 1e-3 && Math.abs(r.implied) < 1e-3;
async function recallCheck(v: Record<string, Value>, ctx: ClaimContext, test: (r: { full: number; implied: number; repeat: boolean }) => boolean): Promise<true | string> {
  const r = await recalled(v, ctx);
  if (typeof r === "string") return r;
  return test(r) ? true : `attention ${r.full}, the state ${r.implied}, a repeat: ${r.repeat}`;
}

/** The attention weight against an even spread over the keys the head sees (the window from the capabilities, else
 *  every key up to the query): k, 1 / k, the weight over 1 / k, and whether it is at least twice 1 / k. */
async function evenCheck(v: Record<string, Value>, ctx: ClaimContext, above: boolean): Promise<true | string> {
  const r = await recalled(v, ctx);
  if (typeof r === "string") return r;
  const p = ctx.focus.pos, w = (await capsOf(ctx)).windows?.[num(v.al)] ?? null;
  const k = w === null ? p + 1 : Math.min(w, p + 1);
  if (num(v.k) !== k) return `the head sees ${k} keys, not ${v.k.v}`;
  if (!near(num(v.even), 1 / k) || !near(num(v.x), r.full * k)) return `an even share is ${1 / k}, the weight ${r.full * k} times it`;
  return (r.full * k >= 2) === above ? true : `the weight ${r.full} against an even ${1 / k}`;
}

const bytesPer = (c: ModelConfigOut) => ({ float32: 4, float16: 2, bfloat16: 2 } as Record<string, number>)[c.dtype ?? "float32"] ?? 4;
/** The cache per token per layer: multi-head, grouped-query and a latent of DeepSeek-V2's proportions (d_c = 4 d_h,
 *  d_R = d_h / 2), from the model's description. */
async function caches(v: Record<string, Value>, ctx: ClaimContext): Promise<{ mha: number; gqa: number; mla: number } | string> {
  const c = await described(ctx), H = c.n_head, G = c.n_kv_heads || H, dh = c.head_dim, bv = bytesPer(c);
  if ((await capsOf(ctx)).kv_latent) return "the model has latent attention: no what-if";
  if (num(v.heads) !== H || num(v.kv) !== G || num(v.dh) !== dh) return `the widths are ${H} heads, ${G} key/value heads of ${dh}`;
  const mha = 2 * H * dh * bv, gqa = 2 * G * dh * bv, dc = 4 * dh, dr = Math.ceil(dh / 2), mla = (dc + dr) * bv;
  if (num(v.dc) !== dc || num(v.dr) !== dr) return `d_c ${dc} and d_R ${dr}, not ${v.dc.v} and ${v.dr.v}`;
  if (num(v.mha) !== mha || num(v.gqa) !== gqa || num(v.mla) !== mla) return `bytes ${mha}, ${gqa}, ${mla}`;
  if (!near(num(v.r), mha / mla)) return `the ratio is ${mha / mla}`;
  return { mha, gqa, mla };
}

/** The sinks' weights of the focus query in the focus layer (where the step put the focus: a layer with sinks), checked
 *  against their meaning: the sink takes what the pattern's row over the keys leaves of 1. */
async function sinkWeights(ctx: ClaimContext): Promise<number[] | string> {
  const layer = ctx.focus.layer, p = ctx.focus.pos;
  if (!(await capsOf(ctx)).sinks?.[layer]) return `layer ${layer} has no learned sinks`;
  const t = await ctx.tensor({ name: `blocks.${layer}.attn.sink_weight` });
  const H = t.shape[0], w = Array.from({ length: H }, (_, h) => rowOf(t, h, p));
  for (let h = 0; h < H; h++) {
    const row = await ctx.tensor({ name: `blocks.${layer}.attn.pattern`, head: h, position: p });
    const sum = row.data.reduce((a, x) => a + x, 0);
    if (!(w[h] > 0 && w[h] < 1) || Math.abs(1 - sum - w[h]) > 1e-4) return `head ${h}: the pattern's row sums to ${sum}, the sink's weight is ${w[h]}`;
  }
  return w;
}

async function firstToken(v: Record<string, Value>, ctx: ClaimContext, like: boolean): Promise<true | string> {
  const caps = await capsOf(ctx);
  if ((caps.sinks ?? []).some(Boolean)) return "the model has learned sinks";
  const { attn } = await layerKinds(ctx), T = ctx.trace.token_ids.length;
  if (num(v.n) !== T - 1) return `${T - 1} queries after the first, not ${v.n.v}`;
  let best = { l: -1, h: 0, m: -1, even: 0 };
  for (const l of attn) {
    const pat = await ctx.tensor({ name: `blocks.${l}.attn.pattern` });
    const H = pat.shape[0], w = caps.windows?.[l] ?? null;
    let even = 0;
    for (let t = 1; t < T; t++) {
      const seen = w === null ? t + 1 : Math.min(t + 1, w); // the keys query t sees; the first among them while t < w
      if (w === null || t < w) even += 1 / seen;
    }
    for (let h = 0; h < H; h++) {
      let s = 0;
      for (let t = 1; t < T; t++) s += pat.data[(h * T + t) * T];
      if (s / (T - 1) > best.m) best = { l, h, m: s / (T - 1), even: even / (T - 1) };
    }
  }
  if (num(v.layer) !== best.l || num(v.head) !== best.h) return `the head with most weight on the first token is ${best.l}.${best.h}`;
  if (!near(num(v.m), best.m) || !near(num(v.even), best.even)) return `mean ${best.m} and even ${best.even}, not ${v.m.v} and ${v.even.v}`;
  return (best.m > 0.5) === like ? true : `the most is ${best.m}`;
}


const bytesOfDtype = (dtype: string | undefined) => ({ float32: 4, float16: 2, bfloat16: 2 } as Record<string, number>)[dtype ?? "float32"] ?? 4;
/** The memory table recomputed from the trace's tensors: each Gated DeltaNet layer's state is H matrices of Dk x Dv
 *  float32 numbers (H from its write strengths, Dk and Dv from its keys and values), each full-attention layer (one
 *  without a window) caches a key and a value per key/value head and token (from its keys and values). */
async function memoryTable(ctx: ClaimContext) {
  const c = await described(ctx), caps = c.capabilities, bv = bytesOfDtype(c.dtype);
  const { attn, linear } = await layerKinds(ctx);
  let state = 0;
  for (const l of linear) {
    const [beta, k, v] = await Promise.all(["beta", "k", "v"].map((s) => ctx.tensor({ name: `blocks.${l}.linear_attn.${s}` })));
    state += beta.shape[0] * k.shape[k.shape.length - 1] * v.shape[v.shape.length - 1] * 4;
  }
  const full = attn.filter((l) => (caps.windows?.[l] ?? null) === null);
  let perToken = 0;
  for (const l of full) {
    const [k, v] = await Promise.all(["k", "v"].map((s) => ctx.tensor({ name: `blocks.${l}.attn.${s}` })));
    perToken += (k.shape[0] * k.shape[2] + v.shape[0] * v.shape[2]) * bv;
  }
  return { linear, attn, full, state, perToken, n: c.n_layer };
}
async function memoryCheck(v: Record<string, Value>, ctx: ClaimContext, key: string): Promise<true | string> {
  const t = await memoryTable(ctx), m = (await capsOf(ctx)).state_memory;
  if (!m) return "no memory table";
  if (m.state_bytes !== t.state) return `the states take ${t.state} bytes, the table says ${m.state_bytes}`;
  if (key === "state") {
    if (!countIs(v, "lin", t.linear.length) || num(v.state) !== t.state || !(m.conv_bytes > 0) || num(v.conv) !== m.conv_bytes
      || num(v.all) !== t.state + m.conv_bytes) return `the states ${t.state} and the windows ${m.conv_bytes} of ${t.linear.length} layers`;
    return true;
  }
  if (key === "noCache") return t.full.length === 0 ? true : `${t.full.length} full-attention layers`;
  for (let i = 0; i < m.tokens.length; i++) {
    if (m.kv_cache_bytes[i] !== t.perToken * m.tokens[i]) return `at ${m.tokens[i]} tokens the cache takes ${t.perToken * m.tokens[i]}`;
  }
  if (key === "cache") {
    const ok = countIs(v, "attn", t.full.length) && [1, 2, 3].every((i) => num(v[`n${i}`]) === m.tokens[i - 1]
      && num(v[`k${i}`]) === t.perToken * m.tokens[i - 1]);
    return ok ? true : `the cache of ${t.full.length} layers at ${m.tokens}: ${t.perToken} bytes a token`;
  }
  // the what-if: every layer caching what one full-attention layer does, against this model's cache and states
  const n = num(v.n), all = (t.n * t.perToken * n) / t.full.length, hybrid = t.perToken * n + t.state + m.conv_bytes;
  if (t.full.length !== t.attn.length) return "the model has windowed attention layers";
  if (num(v.layers) !== t.n || !near(num(v.all), all) || !near(num(v.hybrid), hybrid) || !near(num(v.r), all / hybrid))
    return `all attention ${all}, this model ${hybrid}`;
  return (hybrid < all) === (key === "saves") ? true : `${hybrid} against ${all}`;
}

/** A latent-attention model's cache per token per layer, from the trace's tensors: the latent's and the shared rotary
 *  key's widths (attn.kv_latent, attn.k_rope), each head's key and value widths (attn.k, attn.v), in the model's dtype;
 *  grouped-query attention with the key/value heads the sentence names. */
async function latentCaches(v: Record<string, Value>, ctx: ClaimContext): Promise<{ mha: number; gqa: number; mla: number } | string> {
  const c = await described(ctx), caps = c.capabilities as Caps, bv = bytesOfDtype(c.dtype);
  if (!caps.kv_latent) return "the model has no latent attention";
  const l = (await layerKinds(ctx)).attn[0];
  const [lat, kr, k, val] = await Promise.all(["attn.kv_latent", "attn.k_rope", "attn.k", "attn.v"].map((s) =>
    ctx.tensor({ name: `blocks.${l}.${s}` })));
  const last = (t: Tensor) => t.shape[t.shape.length - 1];
  const H = k.shape[0], dc = last(lat), dr = last(kr), dk = last(k), dv = last(val), g = num(v.kv);
  if (num(v.heads) !== H || num(v.dc) !== dc || num(v.dr) !== dr || num(v.dn) !== dk - dr || num(v.dv) !== dv)
    return `${H} heads, d_c ${dc}, d_R ${dr}, keys of ${dk}, values of ${dv}`;
  if (!(g >= 1 && H % g === 0)) return `${g} key/value heads cannot serve ${H} heads`;
  const mha = H * (dk + dv) * bv, gqa = g * (dk + dv) * bv, mla = (dc + dr) * bv;
  if (num(v.mha) !== mha || num(v.gqa) !== gqa || num(v.mla) !== mla || !near(num(v.r), mha / mla)) return `bytes ${mha}, ${gqa}, ${mla}`;
  return { mha, gqa, mla };
}

/** The type quoted is the one the model runs in (/api/models), and the memory table's where it has one. */
async function dtypeIs(v: Record<string, Value>, ctx: ClaimContext): Promise<true | string> {
  const c = await described(ctx), m = (c.capabilities as Caps).state_memory;
  if (v.dtype.raw !== c.dtype) return `the model runs in ${c.dtype}, not ${v.dtype.v}`;
  return !m || m.dtype === c.dtype ? true : `the memory table counts ${m.dtype}`;
}

const PER_LAYER_TYPES = /^gemma(4|3n)/;

/** Each layer's two last writes at the focus token, from tensors fetched here, for every layer whose trace answers a
 *  per-layer write: its length, and the MLP's (the stream after the MLP's write less the stream before it). */
async function perLayerWrites(ctx: ClaimContext): Promise<{ l: number; write: number; mlp: number }[]> {
  const n = (await described(ctx)).n_layer, p = ctx.focus.pos, out: { l: number; write: number; mlp: number }[] = [];
  const len = (x: ArrayLike<number>) => Math.sqrt(Array.from(x).reduce((a, y) => a + y * y, 0));
  for (let l = 0; l < n; l++) {
    if (!(await answers(ctx, { name: `blocks.${l}.per_layer_out`, position: p }))) continue;
    const [w, after, before] = await Promise.all(["per_layer_out", "per_layer.resid", "resid_mid"].map((s) =>
      ctx.tensor({ name: `blocks.${l}.${s}`, position: p })));
    out.push({ l, write: len(w.data), mlp: len(Array.from(after.data, (x, i) => x - before.data[i])) });
  }
  return out;
}
async function longerCheck(v: Record<string, Value>, ctx: ClaimContext, said: "all" | "none" | "some"): Promise<true | string> {
  const ws = await perLayerWrites(ctx), k = ws.filter((w) => w.write > w.mlp).length;
  if (!ws.length) return "no layer answers a per-layer write";
  if (!tokenIs(v.token, ctx, ctx.focus.pos) || num(v.n) !== ws.length) return `${ws.length} layers, at the focus token`;
  const is = k === ws.length ? "all" : k === 0 ? "none" : "some";
  return is === said && (said !== "some" || num(v.k) === k) ? true : `the per-layer write is the longer in ${k} of ${ws.length}`;
}
async function mostCheck(v: Record<string, Value>, ctx: ClaimContext, longer: boolean): Promise<true | string> {
  const ws = await perLayerWrites(ctx);
  if (!ws.length) return "no layer answers a per-layer write";
  let top = ws[0];
  for (const w of ws) if (w.write / w.mlp > top.write / top.mlp) top = w;
  if (num(v.layer) !== top.l) return `the write weighs most against the MLP's in layer ${top.l}, not ${v.layer.v}`;
  if (!near(num(v.write), top.write) || !near(num(v.mlp), top.mlp) || !near(num(v.r), top.write / top.mlp))
    return `lengths ${top.write} and ${top.mlp}, not ${v.write.v} and ${v.mlp.v}`;
  return (top.write > top.mlp) === longer ? true : `${top.write} against ${top.mlp}`;
}

/** The layers that attend with another layer's keys and values, checked on the trace: such a layer's keys and values
 *  are its source's, value for value, and a layer that computes its own has keys no earlier layer has. */
async function kvSources(ctx: ClaimContext): Promise<number[] | string> {
  const pl = (await capsOf(ctx)).per_layer;
  if (!pl) return "the model has no per-layer inputs";
  const kv = await Promise.all(pl.kv_sources.map((_, l) => Promise.all(["attn.k", "attn.v"].map((s) =>
    ctx.tensor({ name: `blocks.${l}.${s}` })))));
  const same = (a: Tensor, b: Tensor) => a.shape.join() === b.shape.join() && a.data.every((x, i) => x === b.data[i]);
  for (const [l, src] of pl.kv_sources.entries()) {
    if (src !== l && !(src < l && same(kv[l][0], kv[src][0]) && same(kv[l][1], kv[src][1]))) return `layer ${l}'s keys are not layer ${src}'s`;
    if (src === l && kv.slice(0, l).some((e) => same(e[0], kv[l][0]))) return `layer ${l}'s keys are an earlier layer's`;
  }
  return [...pl.kv_sources];
}
/** The KV cache after n tokens, from the trace's keys and values (their heads and widths) and the layers' windows: a
 *  full layer keeps every position, a sliding one its last window - 1, as transformers' cache does. */
async function kvBytes(ctx: ClaimContext, n: number, sources: number[]): Promise<{ unshared: number; shared: number }> {
  const c = await described(ctx), bv = bytesOfDtype(c.dtype), windows = (c.capabilities as Caps).windows ?? [];
  let unshared = 0, shared = 0;
  for (let l = 0; l < sources.length; l++) {
    const [k, v] = await Promise.all(["attn.k", "attn.v"].map((s) => ctx.tensor({ name: `blocks.${l}.${s}` })));
    const w = windows[l] ?? null, kept = w === null ? n : Math.min(n, w - 1);
    const bytes = kept * (k.shape[0] * k.shape[2] + v.shape[0] * v.shape[2]) * bv;
    unshared += bytes;
    if (sources[l] === l) shared += bytes;
  }
  return { unshared, shared };
}

export const CLAIMS: Partial<Record<MessageKey, Check>> = {
  "lesson.hybrid.intro.kinds": async (v, ctx) => {
    const { attn, linear, other } = await layerKinds(ctx);
    // the counts the list quotes, in its order (attention, Gated DeltaNet, short convolution, state space, other)
    const want = [attn.length, linear.length, other.short_conv.length, other.state_space.length, other.mixer.length].filter(Boolean);
    const said = Object.entries(v).filter(([k]) => k.endsWith(".n")).map(([, x]) => num(x));
    if (want.length < 2) return "the model mixes its tokens one way";
    return said.join() === want.join() ? true : `the layers are ${want} of each kind, the text says ${said}`;
  },
  "lesson.hybrid.forget.noDeltaNet": async (_v, ctx) => ((await layerKinds(ctx)).linear.length === 0 ? true : "the model has Gated DeltaNet layers"),
  "lesson.hybrid.forget.short_conv": async (v, ctx) => {
    const n = (await layerKinds(ctx)).other.short_conv.length;
    return n && num(v.n) === n ? true : `${n} short-convolution layers`;
  },
  "lesson.hybrid.forget.state_space": async (v, ctx) => {
    const n = (await layerKinds(ctx)).other.state_space.length;
    return n && num(v.n) === n ? true : `${n} state-space layers`;
  },
  "lesson.hybrid.intro.allAttention": async (v, ctx) => {
    const { attn, linear, n, other } = await layerKinds(ctx);
    return !linear.length && !Object.values(other).flat().length && attn.length === n && num(v.layers) === n ? true
      : `${attn.length} of ${n} layers have attention, and no other mixer`;
  },
  "lesson.hybrid.intro.sinks": async (v, ctx) => {
    const n = ((await capsOf(ctx)).sinks ?? []).filter(Boolean).length;
    const { attn } = await layerKinds(ctx);
    let found = 0; // the layers that answer a sink weight
    for (const l of attn) if (await answers(ctx, { name: `blocks.${l}.attn.sink_weight`, position: 0 })) found++;
    return n && found === n && countIs(v, "n", n) ? true : `${found} layers have a sink weight, the capabilities say ${n}`;
  },
  "lesson.hybrid.intro.latent": async (_v, ctx) => ((await capsOf(ctx)).kv_latent ? true : "no latent attention"),
  "lesson.hybrid.forget.none": async (v, ctx) => {
    const { attn, linear, n, other } = await layerKinds(ctx);
    return attn.length === n && !linear.length && !Object.values(other).flat().length && num(v.layers) === n ? true
      : `layers ${attn} are attention, and some mix tokens another way`;
  },
  "lesson.hybrid.forget.notRecorded": async (v, ctx) =>
    (!(await answers(ctx, { name: `blocks.${num(v.layer)}.linear_attn.decay` })) ? true : "the server gives the decays"),
  "lesson.hybrid.forget.here": async (v, ctx) => {
    const { linear } = await layerKinds(ctx), l = num(v.layer), h = num(v.head), p = ctx.focus.pos;
    if (l !== linear[0]) return `the first Gated DeltaNet layer is ${linear[0]}, not ${l}`;
    const { beta, decay } = await deltaTensors(ctx, l);
    if (h !== ctx.focus.head % beta.shape[0] || !tokenIs(v.token, ctx, p)) return "not the focus head and token";
    const b = rowOf(beta, h, p), k = Math.exp(rowOf(decay, h, p));
    if (!(b > 0 && b < 1 && k > 0 && k < 1)) return `beta ${b} and exp(g) ${k} are not both in (0, 1)`;
    return near(num(v.beta), b) && near(num(v.keep), k) ? true : `beta ${b} and exp(g) ${k}, not ${v.beta.v} and ${v.keep.v}`;
  },
  "lesson.hybrid.forget.fastest": async (v, ctx) => {
    const { linear } = await layerKinds(ctx);
    const m = means((await deltaTensors(ctx, linear[0])).decay), fast = num(v.fast);
    if (num(v.n) !== m.length) return `${m.length} heads`;
    if (m[fast] !== Math.min(...m)) return `head ${fast} keeps ${m[fast]}, the least is ${Math.min(...m)}`;
    return near(num(v.mean), m[fast]) && near(num(v.most), Math.max(...m)) ? true : `means ${m}`;
  },
  "lesson.hybrid.forget.first": (v, ctx) => (ctx.focus.pos === 0 && tokenIs(v.token, ctx, 0) ? true : `the focus is at ${ctx.focus.pos}`),
  "lesson.hybrid.forget.gone": (v, ctx) => fading(v, ctx, "gone"),
  "lesson.hybrid.forget.fades": (v, ctx) => fading(v, ctx, "fades"),
  "lesson.hybrid.forget.lasts": (v, ctx) => fading(v, ctx, "lasts"),
  "lesson.hybrid.mem.state": (v, ctx) => memoryCheck(v, ctx, "state"),
  "lesson.hybrid.mem.noCache": (v, ctx) => memoryCheck(v, ctx, "noCache"),
  "lesson.hybrid.mem.cache": (v, ctx) => memoryCheck(v, ctx, "cache"),
  "lesson.hybrid.mem.saves": (v, ctx) => memoryCheck(v, ctx, "saves"),
  "lesson.hybrid.mem.noSaving": (v, ctx) => memoryCheck(v, ctx, "noSaving"),
  "lesson.hybrid.dtype": (v, ctx) => dtypeIs(v, ctx),
  "lesson.hybrid.dtypeMem": (v, ctx) => dtypeIs(v, ctx),
  "lesson.hybrid.mem.unknown": async (_v, ctx) => (!(await capsOf(ctx)).state_memory ? true : "the capabilities give the states' sizes"),
  "lesson.hybrid.recall.first": (v, ctx) => (ctx.focus.pos === 0 && tokenIs(v.token, ctx, 0) ? true : `the focus is at ${ctx.focus.pos}`),
  "lesson.hybrid.recall.repeat": (v, ctx) => recallCheck(v, ctx, (r) => r.repeat),
  "lesson.hybrid.recall.largest": (v, ctx) => recallCheck(v, ctx, (r) => !r.repeat),
  "lesson.hybrid.recall.attnMore": (v, ctx) => recallCheck(v, ctx, (r) => r.full > r.implied && !small(r)),
  "lesson.hybrid.recall.stateMore": (v, ctx) => recallCheck(v, ctx, (r) => r.full <= r.implied && !small(r)),
  "lesson.hybrid.recall.neither": (v, ctx) => recallCheck(v, ctx, (r) => num(v.gone) === 1e-3 && small(r)),
  "lesson.hybrid.recall.aboveEven": (v, ctx) => evenCheck(v, ctx, true),
  "lesson.hybrid.recall.notAboveEven": (v, ctx) => evenCheck(v, ctx, false),
  "lesson.hybrid.recall.negative": (v, ctx) => recallCheck(v, ctx, (r) => r.implied <= -1e-3),
  "lesson.hybrid.recall.gone": (v, ctx) => recallCheck(v, ctx, (r) => num(v.gone) === 1e-3 && Math.abs(r.implied) < 1e-3),
  "lesson.hybrid.sink.noAttention": async (_v, ctx) => ((await layerKinds(ctx)).attn.length === 0 ? true : "the model has attention layers"),
  "lesson.hybrid.mla.whatIfGqa": async (v, ctx) => {
    const r = await caches(v, ctx);
    return typeof r === "string" ? r : r.gqa < r.mha ? true : "the model's attention shares no keys and values";
  },
  "lesson.hybrid.mla.whatIfMha": async (v, ctx) => {
    const r = await caches(v, ctx);
    return typeof r === "string" ? r : r.gqa === r.mha ? true : "the model's attention shares keys and values";
  },
  "lesson.hybrid.mla.belowGqa": async (v, ctx) => {
    const r = await caches(v, ctx);
    return typeof r === "string" ? r : r.mla < r.gqa ? true : `${r.mla} against ${r.gqa}`;
  },
  "lesson.hybrid.mla.aboveGqa": async (v, ctx) => {
    const r = await caches(v, ctx);
    return typeof r === "string" ? r : r.mla >= r.gqa ? true : `${r.mla} against ${r.gqa}`;
  },
  "lesson.hybrid.mla.own": async (v, ctx) => {
    const r = await latentCaches(v, ctx);
    return typeof r === "string" ? r : r.mla < r.mha ? true : `${r.mla} against ${r.mha}`;
  },
  "lesson.hybrid.mla.belowGqaOf": async (v, ctx) => {
    const r = await latentCaches(v, ctx);
    return typeof r === "string" ? r : r.mla < r.gqa ? true : `${r.mla} against ${r.gqa}`;
  },
  "lesson.hybrid.mla.aboveGqaOf": async (v, ctx) => {
    const r = await latentCaches(v, ctx);
    return typeof r === "string" ? r : r.mla >= r.gqa ? true : `${r.mla} against ${r.gqa}`;
  },
  "lesson.hybrid.sink.learned": async (v, ctx) => {
    const w = await sinkWeights(ctx);
    if (typeof w === "string") return w;
    if (num(v.layer) !== ctx.focus.layer || !tokenIs(v.token, ctx, ctx.focus.pos)) return "not the focus layer and token";
    for (let h = 0; h < w.length; h++) {
      const shown = Object.entries(v).find(([k, x]) => k.endsWith(".w") && x.id === `sink-weight-${h}`)?.[1];
      if (!shown || !near(num(shown), w[h])) return `head ${h}'s sink weight is ${w[h]}, not ${shown?.v}`;
    }
    return true;
  },
  "lesson.hybrid.sink.top": async (v, ctx) => {
    const w = await sinkWeights(ctx);
    if (typeof w === "string") return w;
    const top = w.indexOf(Math.max(...w));
    return num(v.h) === top && near(num(v.w), w[top]) ? true : `head ${top} takes ${w[top]}`;
  },
  "lesson.hybrid.sink.tooShort": async (v, ctx) => (ctx.trace.token_ids.length < 2 && num(v.n) === ctx.trace.token_ids.length
    && !((await capsOf(ctx)).sinks ?? []).some(Boolean) ? true : "the text has more than one token, or the model has sinks"),
  "lesson.hybrid.sink.firstLike": (v, ctx) => firstToken(v, ctx, true),
  "lesson.hybrid.sink.firstNone": (v, ctx) => firstToken(v, ctx, false),
  "lesson.hybrid.ple.here": async (v, ctx) => {
    const c = await described(ctx);
    const stages = (c.capabilities.layer_stages ?? []).flat();
    return v.type.raw === c.model_type && (PER_LAYER_TYPES.test(c.model_type ?? "") || stages.some((s) => s.startsWith("per_layer")))
      ? true : `${c.model_type} has no per-layer inputs`;
  },
  "lesson.hybrid.ple.own": async (v, ctx) => {
    const c = await described(ctx), pl = (c.capabilities as Caps).per_layer, ws = await perLayerWrites(ctx);
    if (!pl) return "no per-layer inputs";
    const inputs = await ctx.tensor({ name: "embed.per_layer_inputs", position: ctx.focus.pos }); // (L, P)
    const P = inputs.shape[inputs.shape.length - 1];
    return v.type.raw === c.model_type && num(v.p) === P && num(v.n) === ws.length && num(v.params) === pl.per_layer_table_params
      && pl.per_layer_table_params % (inputs.shape[0] * P) === 0 ? true : `${ws.length} layers read ${P} values each`;
  },
  "lesson.hybrid.ple.longerAll": (v, ctx) => longerCheck(v, ctx, "all"),
  "lesson.hybrid.ple.longerNone": (v, ctx) => longerCheck(v, ctx, "none"),
  "lesson.hybrid.ple.longerSome": (v, ctx) => longerCheck(v, ctx, "some"),
  "lesson.hybrid.ple.mostLonger": (v, ctx) => mostCheck(v, ctx, true),
  "lesson.hybrid.ple.mostShorter": (v, ctx) => mostCheck(v, ctx, false),
  "lesson.hybrid.kv.none": async (v, ctx) => {
    const src = await kvSources(ctx);
    if (typeof src === "string") return src;
    return src.every((s, l) => s === l) && num(v.layers) === src.length ? true : `layers share: ${src}`;
  },
  "lesson.hybrid.kv.shared": async (v, ctx) => {
    const src = await kvSources(ctx);
    if (typeof src === "string") return src;
    const sharing = src.flatMap((s, l) => (s === l ? [] : [l]));
    if (num(v.n) !== sharing.length || num(v.layers) !== src.length) return `${sharing.length} of ${src.length} layers share`;
    // every sharing layer named once, in the group ("layers {layers} attend with layer {src}'s") of its source
    const named: number[] = [];
    for (const [path, x] of Object.entries(v)) {
      if (!x.id.startsWith("kv-layer-")) continue;
      const l = num(x), group = path.slice(0, path.lastIndexOf(".layers"));
      named.push(l);
      if (num(v[`${group}.src`]) !== src[l]) return `layer ${l} is said to reuse layer ${v[`${group}.src`]?.v}'s, not ${src[l]}'s`;
    }
    return named.sort((a, b) => a - b).join() === sharing.join() ? true : `the layers named are ${named}, the sharing ones ${sharing}`;
  },
  "lesson.hybrid.kv.saves": async (v, ctx) => {
    const src = await kvSources(ctx), pl = (await capsOf(ctx)).per_layer;
    if (typeof src === "string" || !pl) return typeof src === "string" ? src : "no per-layer inputs";
    const n = num(v.n), { unshared, shared } = await kvBytes(ctx, n, src);
    if (!pl.tokens.includes(n)) return `${n} tokens is not a row of the table`;
    return num(v.unshared) === unshared && num(v.shared) === shared && num(v.saved) === unshared - shared && shared < unshared
      ? true : `at ${n} tokens the cache is ${shared} of ${unshared}`;
  },
  "lesson.hybrid.ple.none": async (v, ctx) => {
    const c = await described(ctx), stages = (c.capabilities.layer_stages ?? []).flat();
    return v.type.raw === c.model_type && !PER_LAYER_TYPES.test(c.model_type ?? "") && !stages.some((s) => s.startsWith("per_layer"))
      ? true : `${c.model_type} has per-layer inputs or shares keys and values`;
  },
};
