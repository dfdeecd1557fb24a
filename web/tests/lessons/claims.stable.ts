// What each claim of the Qwen3 / Gemma chapter (src/lessons/stable.ts) means, checked on numbers fetched here: the
// model's description from /api/models (not the trace the lesson read), its weights from /api/weights (a norm the
// model has or lacks), and the tensors of the text again from /api/tensors. Lengths, spreads, the score bound, the
// window's hidden pairs and the cache sizes are recomputed from those.
import { api } from "../../src/lib/client";
import type { ModelConfigOut } from "../../src/lib/generated/api";
import type { MessageKey } from "../../src/lib/i18n";
import type { Value } from "../../src/lib/lesson";
import { decodeTensor, type Tensor } from "../../src/lib/tensor";
import { described, hasWeight, type Check, type ClaimContext } from "./claims";

const num = (v: Value | undefined) => Number(v?.raw);
/** `shown` agrees with `x` to the 3 significant digits prose carries. */
const near = (shown: number, x: number, rel = 6e-3, abs = 1e-6) => Math.abs(shown - x) <= Math.max(abs, rel * Math.abs(x));

const blk = (ctx: ClaimContext, s: string) => `blocks.${ctx.focus.layer}.${s}`;
function rowLen(t: Tensor, row: number): number {
  const d = t.shape[t.shape.length - 1];
  let s = 0;
  for (let j = row * d; j < (row + 1) * d; j++) s += t.data[j] * t.data[j];
  return Math.sqrt(s);
}
const spread = (xs: number[]) => Math.max(...xs) / Math.min(...xs);
/** A weight of the model, fetched here (a norm's scale is what it multiplies by: Gemma's 1 + w). */
async function weight(ctx: ClaimContext, name: string): Promise<Float32Array> {
  const out = await api.weights({ model: ctx.trace.model, tensors: [{ name, dtype: "float32" }] });
  return decodeTensor(out.tensors[0]).data as Float32Array;
}
function absMax(xs: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < xs.length; i++) m = Math.max(m, Math.abs(xs[i]));
  return m;
}
const locals = (c: ModelConfigOut) => c.capabilities.layer_types.filter((k) => k === "sliding_attention").length;

async function queryLengths(ctx: ClaimContext): Promise<{ before: number[]; after: number[] }> {
  const h = ctx.focus.head;
  const [q, qn] = await Promise.all([ctx.tensor({ name: blk(ctx, "attn.q"), head: h }),
    ctx.tensor({ name: blk(ctx, "attn.q_norm.out"), head: h })]);
  const T = q.shape[0];
  return { before: Array.from({ length: T }, (_, i) => rowLen(q, i)), after: Array.from({ length: T }, (_, i) => rowLen(qn, i)) };
}

async function spreads(v: Record<string, Value>, ctx: ClaimContext, closer: boolean): Promise<true | string> {
  const { before, after } = await queryLengths(ctx);
  const b = spread(before), a = spread(after);
  if (num(v.n) !== before.length) return `says ${v.n.v} tokens, the trace has ${before.length}`;
  if (!near(num(v.before), b) || !near(num(v.after), a)) return `spreads ${b} before and ${a} after, not ${v.before.v} and ${v.after.v}`;
  return (a < b) === closer ? true : `the spread goes from ${b} to ${a}`;
}

async function bound(v: Record<string, Value>, ctx: ClaimContext, holds: boolean): Promise<true | string> {
  const c = await described(ctx), p = ctx.focus.pos, h = ctx.focus.head;
  const [sc, qn, kn] = await Promise.all([ctx.tensor({ name: blk(ctx, "attn.scaled_scores"), head: h, position: p }),
    ctx.tensor({ name: blk(ctx, "attn.q_norm.out"), head: h, position: p }), ctx.tensor({ name: blk(ctx, "attn.k_norm.out"), head: h })]);
  let largest = 0, longest = 0;
  for (let s = 0; s <= p; s++) {
    largest = Math.max(largest, Math.abs(sc.data[s]));
    longest = Math.max(longest, rowLen(kn, s));
  }
  const b = c.capabilities.attn_scale * rowLen(qn, 0) * longest;
  if (!near(num(v.largest), largest) || !near(num(v.bound), b)) return `largest ${largest} and bound ${b}, not ${v.largest.v} and ${v.bound.v}`;
  return (largest <= b * (1 + 1e-6)) === holds ? true : `largest ${largest} against the bound ${b}`;
}

/** "No score in block L can exceed cap": a normed query is at most max|g_q| √Dh long and a key max|g_k| √Dh (the
 *  scales from the weights fetched here), so cap = scale × max|g_q| √Dh × max|g_k| √Dh; every factor quoted is that;
 *  the normed queries and keys of the text are within those lengths; the quoted bound from the text's vectors is within
 *  cap, and every scaled score of every head of the block is too. */
async function cap(v: Record<string, Value>, ctx: ClaimContext, holds: boolean): Promise<true | string> {
  const c = await described(ctx), layer = num(v.layer), dh = c.head_dim, a = c.capabilities.attn_scale;
  if (layer !== ctx.focus.layer) return `the text speaks of block ${layer}, the focus is on ${ctx.focus.layer}`;
  if (num(v.dh) !== dh) return `the head width is ${dh}, not ${v.dh.v}`;
  const [wq, wk] = await Promise.all([weight(ctx, `blocks.${layer}.attn.q_norm.w`), weight(ctx, `blocks.${layer}.attn.k_norm.w`)]);
  const gq = absMax(wq), gk = absMax(wk), qMax = gq * Math.sqrt(dh), kMax = gk * Math.sqrt(dh);
  const bound = a * qMax * kMax;
  if (!near(num(v.cap), bound)) return `the bound from the scales is ${bound}, not ${v.cap.v}`;
  if (holds) {
    const want: [string, number][] = [["root", Math.sqrt(dh)], ["gq", gq], ["gk", gk], ["qmax", qMax], ["kmax", kMax], ["a", a]];
    for (const [k, x] of want) if (!v[k] || !near(num(v[k]), x)) return `${k} is ${x}, not ${v[k]?.v}`;
    const [qn, kn] = await Promise.all(["attn.q_norm.out", "attn.k_norm.out"].map((s) => ctx.tensor({ name: `blocks.${layer}.${s}` })));
    for (const [t, m, what] of [[qn, qMax, "query"], [kn, kMax, "key"]] as const) {
      for (let r = 0; r < t.data.length / dh; r++) {
        if (rowLen(t, r) > m * (1 + 1e-5)) return `a normed ${what} is ${rowLen(t, r)} long, above ${m}`;
      }
    }
  }
  const scores = await ctx.tensor({ name: `blocks.${layer}.attn.scaled_scores` }); // (H, T, S): every head, every pair
  const largest = absMax(scores.data.filter(Number.isFinite));
  return (largest <= bound * (1 + 1e-5)) === holds ? true : `the block's largest |score| is ${largest}, the bound ${bound}`;
}

/** The bound before the norm: the attention scale × the projected query's length × the longest projected key's, over
 *  the keys the focus token sees (of the key/value head the focus head reads), against the one after it. */
async function rawBound(v: Record<string, Value>, ctx: ClaimContext, above: boolean): Promise<true | string> {
  const c = await described(ctx), p = ctx.focus.pos, h = ctx.focus.head;
  const [q, k, qn, kn] = await Promise.all(["attn.q", "attn.k", "attn.q_norm.out", "attn.k_norm.out"].map((s) =>
    ctx.tensor({ name: blk(ctx, s), head: h })));
  const longest = (t: Tensor) => Math.max(...Array.from({ length: p + 1 }, (_, s) => rowLen(t, s)));
  const raw = c.capabilities.attn_scale * rowLen(q, p) * longest(k), normed = c.capabilities.attn_scale * rowLen(qn, p) * longest(kn);
  if (!near(num(v.raw), raw)) return `the bound before the norm is ${raw}, not ${v.raw.v}`;
  return (raw > normed) === above ? true : `before the norm ${raw}, after it ${normed}`;
}

async function branch(v: Record<string, Value>, ctx: ClaimContext, rawName: string, normedName: string, shrinks: boolean,
  withStream: boolean): Promise<true | string> {
  const p = ctx.focus.pos;
  if (num(v.layer) !== ctx.focus.layer || num(v.token) !== ctx.trace.token_ids[p])
    return `the text speaks of block ${v.layer.v} at ${v.token.v}, the focus is block ${ctx.focus.layer} at position ${p}`;
  const [raw, normed, pre] = await Promise.all([rawName, normedName, "resid_pre"].map((s) =>
    ctx.tensor({ name: blk(ctx, s), position: p })));
  const r = rowLen(raw, 0), n = rowLen(normed, 0);
  if (!near(num(v.raw), r) || !near(num(v.normed), n)) return `${rawName} ${r} and ${normedName} ${n}, not ${v.raw.v} and ${v.normed.v}`;
  if (withStream && !near(num(v.stream), rowLen(pre, 0))) return `the stream is ${rowLen(pre, 0)} long, not ${v.stream.v}`;
  return (n < r) === shrinks ? true : `${r} became ${n}`;
}

/** Query–key pairs a local layer hides beyond the causal mask: -inf cells on or below the diagonal, counted in the
 *  masked scores of the first local layer (head 0). */
async function hiddenPairs(ctx: ClaimContext, c: ModelConfigOut): Promise<number> {
  const layer = c.capabilities.layer_types.indexOf("sliding_attention");
  const m = await ctx.tensor({ name: `blocks.${layer}.attn.masked_scores`, head: 0 });
  const [T, S] = m.shape;
  let n = 0;
  for (let t = 0; t < T; t++) for (let s = 0; s <= t; s++) if (m.data[t * S + s] === -Infinity) n++;
  return n;
}

/** The focus head's weight at the focus token on the keys `w` or more positions back, in block `layer`. */
async function beyondWindow(ctx: ClaimContext, layer: number, w: number): Promise<number> {
  const { head, pos } = ctx.focus;
  const row = await ctx.tensor({ name: `blocks.${layer}.attn.pattern`, head, position: pos });
  let s = 0;
  for (let j = 0; j <= pos - w; j++) s += row.data[j];
  return s;
}

const BYTES: Record<string, number> = { float32: 4, bfloat16: 2, float16: 2 };
function cache(c: ModelConfigOut) {
  const L = c.n_layer, G = c.n_kv_heads || c.n_head, b = BYTES[c.dtype ?? "float32"];
  const per = 2 * G * c.head_dim * b, n = c.block_size, nl = locals(c), w = c.capabilities.local_window ?? n;
  return { per, n, all: L * n * per, windowed: ((L - nl) * n + nl * Math.min(n, w)) * per };
}

/** "{n} local layer(s) and {n} global layer(s)" (nested count sentences, singular for one), with the window where quoted. */
async function localGlobal(v: Record<string, Value>, ctx: ClaimContext): Promise<true | string> {
  const c = await described(ctx), nl = locals(c), ng = c.n_layer - nl;
  if (!nl || num(v["local.n"]) !== nl || num(v["global.n"]) !== ng) return `${nl} local layers of ${c.n_layer}`;
  for (const [k, n] of [["local", nl], ["global", ng]] as const) {
    if ((v[k].raw === `lesson.stable.n${k === "local" ? "Local" : "Global"}One`) !== (n === 1)) return `${n} ${k} layers called ${v[k].raw}`;
  }
  return !v.w || num(v.w) === c.capabilities.local_window ? true : `the window is ${c.capabilities.local_window}`;
}

export const CLAIMS: Partial<Record<MessageKey, Check>> = {
  "lesson.stable.intro.qkNorm": async (_v, ctx) => ((await described(ctx)).capabilities.qk_norm
    && await hasWeight(ctx, "blocks.0.attn.q_norm.w") ? true : "the model has no QK-norm scales"),
  "lesson.stable.intro.noQkNorm": async (_v, ctx) => (!(await hasWeight(ctx, "blocks.0.attn.q_norm.w")) ? true
    : "the model has QK-norm scales"),
  "lesson.stable.intro.sandwich": async (_v, ctx) => ((await described(ctx)).capabilities.sandwich_norm
    && await hasWeight(ctx, "blocks.0.ln1_post.w") && await hasWeight(ctx, "blocks.0.ln2_post.w") ? true
    : "the model has no norms after its branches"),
  "lesson.stable.intro.noSandwich": async (_v, ctx) => (!(await hasWeight(ctx, "blocks.0.ln1_post.w")) ? true
    : "the model has a norm after attention"),
  "lesson.stable.intro.local": (v, ctx) => localGlobal(v, ctx),
  "lesson.stable.win.what": (v, ctx) => localGlobal(v, ctx),
  "lesson.stable.mem.report": (v, ctx) => localGlobal(v, ctx),
  "lesson.stable.qk.scaleHead": async (v, ctx) => {
    const c = await described(ctx), s = 1 / c.capabilities.attn_scale ** 2;
    return near(s, c.head_dim) && num(v.dh) === c.head_dim ? true : `the scale is 1/√${s}, the head width ${c.head_dim}`;
  },
  "lesson.stable.qk.scaleScalar": async (v, ctx) => {
    const c = await described(ctx), s = 1 / c.capabilities.attn_scale ** 2;
    return !near(s, c.head_dim) && near(num(v.s), s) ? true : `the scale is 1/√${s}, the head width ${c.head_dim}`;
  },
  "lesson.stable.mem.globalGrows": async (_v, ctx) => {
    const c = await described(ctx);
    return locals(c) > 0 && locals(c) < c.n_layer ? true : `${locals(c)} local layers of ${c.n_layer}`;
  },
  "lesson.stable.mem.allLocal": async (_v, ctx) => {
    const c = await described(ctx);
    return locals(c) === c.n_layer ? true : `${locals(c)} local layers of ${c.n_layer}`;
  },
  "lesson.stable.intro.base": async (_v, ctx) => {
    const k = (await described(ctx)).capabilities;
    return k.norm === "rms" && k.positions === "rope" && k.mlp === "gated" ? true
      : `its norm is ${k.norm}, its positions ${k.positions}, its MLP ${k.mlp}`;
  },
  "lesson.stable.intro.baseOther": async (_v, ctx) => {
    const k = (await described(ctx)).capabilities;
    return !(k.norm === "rms" && k.positions === "rope" && k.mlp === "gated") ? true : "its blocks have RMSNorm, RoPE and a gated MLP";
  },
  "lesson.stable.intro.noLocal": async (_v, ctx) => (locals(await described(ctx)) === 0 ? true : "the model has local layers"),
  "lesson.stable.qk.none": async (_v, ctx) => (!(await described(ctx)).capabilities.qk_norm ? true : "the model has QK-norm"),
  "lesson.stable.qk.closer": (v, ctx) => spreads(v, ctx, true),
  "lesson.stable.qk.notCloser": (v, ctx) => spreads(v, ctx, false),
  "lesson.stable.qk.bound": (v, ctx) => bound(v, ctx, true),
  "lesson.stable.qk.boundBroken": (v, ctx) => bound(v, ctx, false),
  "lesson.stable.qk.rawAbove": (v, ctx) => rawBound(v, ctx, true),
  "lesson.stable.qk.rawBelow": (v, ctx) => rawBound(v, ctx, false),
  "lesson.stable.qk.cap": (v, ctx) => cap(v, ctx, true),
  "lesson.stable.qk.capBroken": (v, ctx) => cap(v, ctx, false),
  "lesson.stable.sw.none": async (_v, ctx) => (!(await described(ctx)).capabilities.sandwich_norm
    && !(await hasWeight(ctx, "blocks.0.ln1_post.w")) ? true : "the model has norms after its branches"),
  "lesson.stable.sw.shrinks": (v, ctx) => branch(v, ctx, "attn.out", "attn_out", true, true),
  "lesson.stable.sw.grows": (v, ctx) => branch(v, ctx, "attn.out", "attn_out", false, true),
  "lesson.stable.sw.mlpShrinks": (v, ctx) => branch(v, ctx, "mlp.out", "mlp_out", true, false),
  "lesson.stable.sw.mlpGrows": (v, ctx) => branch(v, ctx, "mlp.out", "mlp_out", false, false),
  "lesson.stable.win.none": async (v, ctx) => {
    const c = await described(ctx);
    return locals(c) === 0 && num(v.layers) === c.n_layer ? true : `${locals(c)} local layers of ${c.n_layer}`;
  },
  "lesson.stable.win.hides": async (v, ctx) => {
    const c = await described(ctx), T = ctx.trace.token_ids.length, w = c.capabilities.local_window ?? Infinity;
    if (num(v.n) !== T || num(v.w) !== w || !(T > w)) return `${T} tokens and a window of ${w}`;
    const hidden = await hiddenPairs(ctx, c);
    return num(v.hidden) === hidden ? true : `the local layer's mask hides ${hidden} pairs, not ${v.hidden.v}`;
  },
  "lesson.stable.win.short": async (v, ctx) => {
    const c = await described(ctx), T = ctx.trace.token_ids.length, w = c.capabilities.local_window ?? Infinity;
    if (num(v.n) !== T || T > w) return `${T} tokens and a window of ${w}`;
    return (await hiddenPairs(ctx, c)) === 0 ? true : "the local layer's mask hides pairs all the same";
  },
  "lesson.stable.win.outside": async (v, ctx) => {
    const c = await described(ctx), { head, pos } = ctx.focus, layer = num(v.layer), w = num(v.w);
    if (c.capabilities.layer_types[layer] !== "sliding_attention" || w !== c.capabilities.local_window)
      return `block ${layer} is not a local layer with a window of ${w}`;
    if (num(v.head) !== head) return `the text names head ${v.head.v}, the focus is on head ${head}`;
    const outside = await beyondWindow(ctx, layer, w);
    return outside === 0 && num(v.v) === 0 ? true : `the weight outside the window is ${outside}`;
  },
  "lesson.stable.win.globalReach": async (v, ctx) => {
    const c = await described(ctx), layer = num(v.layer), w = c.capabilities.local_window;
    if (c.capabilities.layer_types[layer] !== "full_attention" || w === null) return `block ${layer} is not a global layer`;
    if (num(v.head) !== ctx.focus.head) return `the text names head ${v.head.v}, the focus is on head ${ctx.focus.head}`;
    const outside = await beyondWindow(ctx, layer, w);
    return near(num(v.v), outside) ? true : `the global layer puts ${outside} beyond the window, not ${v.v.v}`;
  },
  "lesson.stable.win.nearStart": async (v, ctx) => {
    const w = (await described(ctx)).capabilities.local_window, pos = ctx.focus.pos;
    if (num(v.pos) !== pos || num(v.token) !== ctx.trace.token_ids[pos]) return `the focus is on ${pos}, not ${v.pos.v}`;
    return w !== null && pos < w && num(v.w) === w ? true : `position ${pos} against a window of ${w}`;
  },
  "lesson.stable.win.global": async (_v, ctx) => ((await described(ctx)).capabilities.layer_types.includes("full_attention")
    ? true : "the model has no global layer"),
  "lesson.stable.win.noGlobal": async (v, ctx) => {
    const k = (await described(ctx)).capabilities;
    return !k.layer_types.includes("full_attention") && num(v.w) === k.local_window ? true : "the model has a global layer";
  },
  "lesson.stable.mem.noWindow": async (v, ctx) => {
    const c = await described(ctx), m = cache(c);
    if (locals(c) !== 0) return "the model has local layers";
    return num(v.per) === c.n_layer * m.per && num(v.ctx) === m.n && num(v.total) === m.all ? true
      : `${c.n_layer * m.per} bytes per token, ${m.all} at ${m.n}`;
  },
  "lesson.stable.mem.saves": async (v, ctx) => {
    const c = await described(ctx), m = cache(c);
    if (num(v.all) !== m.all || num(v.windowed) !== m.windowed || num(v.ctx) !== m.n) return `${m.all} and ${m.windowed} at ${m.n}`;
    return m.windowed < m.all && near(num(v.r), m.all / m.windowed) ? true : `the ratio is ${m.all / m.windowed}`;
  },
  "lesson.stable.mem.same": async (v, ctx) => {
    const m = cache(await described(ctx));
    return m.windowed === m.all && num(v.all) === m.all ? true : `${m.all} against ${m.windowed}`;
  },
};
