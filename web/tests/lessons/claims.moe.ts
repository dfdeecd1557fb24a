// What each claim of the mixture-of-experts chapter (src/lessons/moe.ts) means, checked on numbers fetched here: the
// model's description from /api/models, its weights from /api/weights (the experts' and the router's matrices: their
// shapes give the parameter counts and the arithmetic of a token, the router's matrix gives the logits again from the
// block's normed input), the tensors of the text again from /api/tensors, and the ablation asked again from
// /api/analysis/ablate (its clean loss recomputed here from the logits). The softmax, the top-k choice, the
// renormalisation, the weighted sum, the loads, the load-balancing loss, the kinds of token and the paths are
// recomputed from those, not read from the lesson.
import { api } from "../../src/lib/client";
import type { ModelConfigOut } from "../../src/lib/generated/api";
import type { MessageKey } from "../../src/lib/i18n";
import type { Value } from "../../src/lib/lesson";
import { decodeTensor, type Tensor } from "../../src/lib/tensor";
import { analysis } from "../../src/pages/experiments/api";
import type { Check, ClaimContext } from "./claims";

const num = (v: Value | undefined) => Number(v?.raw);
/** `shown` agrees with `x` to the 3 significant digits prose carries. */
const near = (shown: number, x: number, rel = 6e-3, abs = 1e-6) => Math.abs(shown - x) <= Math.max(abs, rel * Math.abs(x));
/** The values a placeholder's nested sentences carry (check.ts flattens them as "name.placeholder"), in reading order. */
const inside = (v: Record<string, Value>, name: string): Value[] =>
  Object.entries(v).filter(([k, x]) => k.startsWith(`${name}.`) && typeof x.raw === "number").map(([, x]) => x);

const described = new Map<string, Promise<ModelConfigOut>>();
function config(ctx: ClaimContext): Promise<ModelConfigOut> {
  const name = ctx.trace.model;
  if (!described.has(name)) {
    described.set(name, api.model(name).then((m) => {
      if (!m.config) throw new Error(`/api/models/${name} has no config`);
      return m.config;
    }));
  }
  return described.get(name)!;
}
const infos = (ctx: ClaimContext) => api.model(ctx.trace.model);

const weights = new Map<string, Promise<Tensor | null>>();
/** A weight of the model (null: the model has no such weight), fetched once per model. */
function weight(ctx: ClaimContext, name: string): Promise<Tensor | null> {
  const key = `${ctx.trace.model}|${name}`;
  if (!weights.has(key)) {
    weights.set(key, api.weights({ model: ctx.trace.model, tensors: [{ name, dtype: "float32" }] })
      .then((out) => decodeTensor(out.tensors[0]), () => null));
  }
  return weights.get(key)!;
}
const size = (t: Tensor | null) => (t ? t.shape.reduce((a, x) => a * x, 1) : 0);

/** The blocks that have a router, by their weights. */
async function routed(ctx: ClaimContext): Promise<number[]> {
  const c = await config(ctx);
  const has = await Promise.all(Array.from({ length: c.n_layer }, (_, l) => weight(ctx, `blocks.${l}.mlp.W_router`)));
  return has.flatMap((w, l) => (w ? [l] : []));
}

/** An expert's shape (E, D, M) from block `l`'s gate matrices, and its parameters from its three matrices. */
async function expertShape(ctx: ClaimContext, l: number) {
  const [g, u, d] = await Promise.all(["W_gate", "W_in", "W_out"].map((w) => weight(ctx, `blocks.${l}.mlp.experts.${w}`)));
  if (!g || !u || !d) throw new Error(`block ${l} has no experts' matrices`);
  const [E, D, M] = g.shape;
  return { E, D, M, per: (size(g) + size(u) + size(d)) / E };
}

const topK = async (ctx: ClaimContext) => (await config(ctx)).capabilities.top_k ?? 0;
const nExperts = async (ctx: ClaimContext) => (await config(ctx)).capabilities.n_experts ?? 0;

function softmax(z: ArrayLike<number>): number[] {
  const m = Math.max(...Array.from(z)), e = Array.from(z, (x) => Math.exp(x - m)), s = e.reduce((a, x) => a + x, 0);
  return e.map((x) => x / s);
}
/** The indices of the k largest, largest first. */
const largest = (xs: number[], k: number) => xs.map((x, i) => [x, i]).sort((a, b) => b[0] - a[0] || a[1] - b[1]).slice(0, k).map((p) => p[1]);

/** The router's logits at position p of block l, from the block's normed input and the router's matrix. */
async function logitsAt(ctx: ClaimContext, l: number, p: number): Promise<number[]> {
  const [x, W] = await Promise.all([ctx.tensor({ name: `blocks.${l}.ln2.out`, position: p }), weight(ctx, `blocks.${l}.mlp.W_router`)]);
  if (!W) throw new Error(`block ${l} has no router`);
  const [D, E] = W.shape;
  return Array.from({ length: E }, (_, e) => {
    let s = 0;
    for (let i = 0; i < D; i++) s += x.data[i] * W.data[i * E + e];
    return s;
  });
}

/** Every token's choices in block l: the k largest of a softmax of the router's logits recomputed here. */
async function choicesOf(ctx: ClaimContext, l: number): Promise<{ probs: number[][]; chosen: number[][] }> {
  const [x, W] = await Promise.all([ctx.tensor({ name: `blocks.${l}.ln2.out` }), weight(ctx, `blocks.${l}.mlp.W_router`)]);
  if (!W) throw new Error(`block ${l} has no router`);
  const [T, D] = x.shape, E = W.shape[1], k = await topK(ctx);
  const probs = Array.from({ length: T }, (_, t) => softmax(Array.from({ length: E }, (_, e) => {
    let s = 0;
    for (let i = 0; i < D; i++) s += x.data[t * D + i] * W.data[i * E + e];
    return s;
  })));
  return { probs, chosen: probs.map((p) => largest(p, k)) };
}

/** The experts each token was sent to in block l, as the trace recorded them (T rows of k). */
async function recorded(ctx: ClaimContext, l: number): Promise<number[][]> {
  const t = await ctx.tensor({ name: `blocks.${l}.mlp.expert_indices` });
  const [T, k] = t.shape;
  return Array.from({ length: T }, (_, i) => Array.from(t.data.slice(i * k, (i + 1) * k)));
}

function loads(chosen: number[][], E: number): number[] {
  const n = new Array<number>(E).fill(0);
  for (const row of chosen) for (const e of row) n[e]++;
  return n;
}
const firstMax = (xs: number[]) => xs.indexOf(Math.max(...xs));
/** Every index holding the maximum (a tie gives several). */
const maxima = (xs: number[]) => xs.flatMap((x, i) => (x === Math.max(...xs) ? [i] : []));

const focusToken = (v: Record<string, Value>, ctx: ClaimContext) => num(v.token) === ctx.trace.token_ids[ctx.focus.pos];
const sameBlock = (v: Record<string, Value>, ctx: ClaimContext) => num(v.layer) === ctx.focus.layer;

// -- the router, top-k, the sum ------------------------------------------------------------------------------

async function routerHere(v: Record<string, Value>, ctx: ClaimContext): Promise<true | string> {
  const l = num(v.layer), p = ctx.focus.pos;
  if (!sameBlock(v, ctx) || !focusToken(v, ctx)) return `the text speaks of block ${l} at ${v.token.v}, the focus is block ${ctx.focus.layer} at ${p}`;
  const z = await logitsAt(ctx, l, p), P = softmax(z), order = largest(P, P.length);
  const [e1, e2, low] = [order[0], order[1], order[order.length - 1]];
  if (num(v["e1.e"]) !== e1 || num(v["e2.e"]) !== e2 || num(v["low.e"]) !== low)
    return `the router ranks experts ${e1}, ${e2} first and ${low} last, not ${v["e1.e"].v}, ${v["e2.e"].v}, ${v["low.e"].v}`;
  if (!near(num(v.z1), z[e1]) || !near(num(v.z2), z[e2])) return `the logits are ${z[e1]} and ${z[e2]}`;
  if (!near(num(v.p1), P[e1]) || !near(num(v.p2), P[e2]) || !near(num(v.pl), P[low], 6e-3, 1e-5))
    return `the probabilities are ${P[e1]}, ${P[e2]} and ${P[low]}`;
  return true;
}

async function chosenHere(v: Record<string, Value>, ctx: ClaimContext): Promise<true | string> {
  const l = ctx.focus.layer, p = ctx.focus.pos, k = await topK(ctx), E = await nExperts(ctx);
  if (!focusToken(v, ctx) || num(v.k) !== k || num(v.rest) !== E - k) return `top-${k} of ${E} at position ${p}`;
  const P = softmax(await logitsAt(ctx, l, p)), top = largest(P, k);
  const listed = inside(v, "experts"); // expert, probability, expert, probability, ...
  const experts = listed.filter((_, i) => i % 2 === 0).map(num), probs = listed.filter((_, i) => i % 2 === 1).map(num);
  if (experts.join() !== top.join()) return `the ${k} most probable experts are ${top}, not ${experts}`;
  if (!probs.every((x, i) => near(x, P[top[i]]))) return `their probabilities are ${top.map((e) => P[e])}`;
  const kept = top.reduce((s, e) => s + P[e], 0);
  return near(num(v.kept), kept) ? true : `together ${kept}, not ${v.kept.v}`;
}

/** The weights applied at the focus token (the trace's), against the probabilities recomputed here. */
async function weightsHere(v: Record<string, Value>, ctx: ClaimContext, renormalised: boolean): Promise<true | string> {
  const c = await config(ctx), l = ctx.focus.layer, p = ctx.focus.pos, k = await topK(ctx);
  if (Boolean(c.capabilities.norm_topk_prob) !== renormalised) return `norm_topk_prob is ${c.capabilities.norm_topk_prob}`;
  const P = softmax(await logitsAt(ctx, l, p)), top = largest(P, k), kept = top.reduce((s, e) => s + P[e], 0);
  const applied = await ctx.tensor({ name: `blocks.${l}.mlp.expert_weights`, position: p });
  const expected = top.map((e) => (renormalised ? P[e] / kept : P[e]));
  if (!expected.every((x, i) => near(applied.data[i], x, 1e-4))) return `the model applies ${Array.from(applied.data)}, not ${expected}`;
  const shown = inside(v, "weights").map(num);
  if (!shown.length) shown.push(num(v.weights));
  if (!shown.every((x, i) => near(x, expected[i]))) return `the weights are ${expected}, not ${shown}`;
  if (renormalised) return near(num(v.kept), kept) ? true : `the kept probability is ${kept}`;
  const s = expected.reduce((a, x) => a + x, 0);
  return near(num(v.sum), s) && s < 1 ? true : `the weights sum to ${s}`;
}

async function sumHere(v: Record<string, Value>, ctx: ClaimContext, equal: boolean): Promise<true | string> {
  const l = num(v.layer), p = ctx.focus.pos;
  if (!sameBlock(v, ctx) || !focusToken(v, ctx)) return `block ${l} at ${v.token.v} is not the focus`;
  const [out, w, idx, y] = await Promise.all(["mlp.expert_out", "mlp.expert_weights", "mlp.expert_indices", "mlp_out"].map((s) =>
    ctx.tensor({ name: `blocks.${l}.${s}`, position: p })));
  const [k, D] = out.shape;
  const terms = inside(v, "terms"); // weight, expert, length per term
  if (terms.length !== 3 * k) return `${terms.length / 3} terms for ${k} chosen experts`;
  let diff = 0;
  for (let i = 0; i < D; i++) {
    let s = 0;
    for (let j = 0; j < k; j++) s += w.data[j] * out.data[j * D + i];
    diff = Math.max(diff, Math.abs(s - y.data[i]));
  }
  for (let j = 0; j < k; j++) {
    let n = 0;
    for (let i = 0; i < D; i++) n += out.data[j * D + i] ** 2;
    const [tw, te, tn] = terms.slice(3 * j, 3 * j + 3).map(num);
    if (te !== idx.data[j] || !near(tw, w.data[j]) || !near(tn, Math.sqrt(n)))
      return `term ${j}: expert ${idx.data[j]} with weight ${w.data[j]} and length ${Math.sqrt(n)}`;
  }
  let yy = 0;
  for (let i = 0; i < D; i++) yy += y.data[i] ** 2;
  if (!near(num(v.len), Math.sqrt(yy))) return `mlp_out has length ${Math.sqrt(yy)}, not ${v.len.v}`;
  if (!near(num(v.diff), diff, 6e-3, 1e-9)) return `the largest difference is ${diff}, not ${v.diff.v}`;
  return (diff <= 1e-4 * Math.max(1, Math.sqrt(yy))) === equal ? true : `the sum and mlp_out differ by ${diff}`;
}

// -- loads and the balancing loss -----------------------------------------------------------------------------

async function loadOf(ctx: ClaimContext) {
  const l = ctx.focus.layer, E = await nExperts(ctx), k = await topK(ctx);
  const chosen = await recorded(ctx, l), n = loads(chosen, E);
  const w = await ctx.tensor({ name: `blocks.${l}.mlp.expert_weights` });
  const summed = new Array<number>(E).fill(0);
  chosen.forEach((row, t) => row.forEach((e, j) => { summed[e] += w.data[t * k + j]; }));
  return { chosen, n, summed, E, k, T: chosen.length };
}

/** Each block with experts and the share of the text's choices its busiest expert got, and how many experts got none. */
async function busiestShares(ctx: ClaimContext) {
  const blocks = await routed(ctx), E = await nExperts(ctx);
  const n = await Promise.all(blocks.map(async (l) => loads(await recorded(ctx, l), E)));
  const total = (c: number[]) => c.reduce((a, x) => a + x, 0);
  return { blocks, E, shares: n.map((c) => Math.max(...c) / total(c)), idle: n.map((c) => c.filter((x) => x === 0).length) };
}

/** The summary's sentence: the block with the most idle experts (ties: the larger busiest share), else the least even. */
async function endCase(v: Record<string, Value>, ctx: ClaimContext, idle: boolean): Promise<true | string> {
  const s = await busiestShares(ctx), score = s.blocks.map((_, i) => s.idle[i] * 2 + s.shares[i]), i = firstMax(score);
  if ((s.idle[i] > 0) !== idle) return `block ${s.blocks[i]} leaves ${s.idle[i]} experts idle`;
  return num(v.layer) === s.blocks[i] && num(v.u) === s.idle[i] && num(v.e) === s.E && near(num(v.share), s.shares[i])
    && near(num(v.even), 1 / s.E) ? true : `block ${s.blocks[i]}: ${s.idle[i]} idle, the busiest ${s.shares[i]}`;
}

/** The Switch Transformer's loss on the text in block l, from the router's logits recomputed here: E Σ f_e P_e with
 *  f_e the chosen (token, choice) pairs of e over the tokens and P_e e's mean probability. */
async function switchLoss(ctx: ClaimContext, l: number) {
  const { probs, chosen } = await choicesOf(ctx, l);
  const T = probs.length, E = probs[0].length, k = chosen[0].length;
  const f = loads(chosen, E).map((x) => x / T);
  const P = Array.from({ length: E }, (_, e) => probs.reduce((s, row) => s + row[e], 0) / T);
  const loss = E * f.reduce((s, x, e) => s + x * P[e], 0);
  const together = f.reduce((s, x, e) => s + (x - k / E) * (P[e] - 1 / E), 0); // loss = k + E × this
  return { f, P, loss, together, E, k };
}

async function evenSpread(v: Record<string, Value>, ctx: ClaimContext, above: boolean): Promise<true | string> {
  const s = await switchLoss(ctx, ctx.focus.layer);
  if (num(v.k) !== s.k || !near(num(v.even), s.k / s.E) || !near(num(v.evenP), 1 / s.E)) return `k = ${s.k}, E = ${s.E}`;
  if (!near(num(v.loss), s.loss)) return `the loss is ${s.loss}, not ${v.loss.v}`;
  if (Math.abs(s.loss - (s.k + s.E * s.together)) > 1e-6 * s.loss) return `the identity loss = k + E Σ (f − k/E)(P − 1/E) fails: ${s.loss}`;
  const isAbove = s.loss > s.k * (1 + 1e-3);
  return isAbove === above && (s.together > 0) === above ? true : `loss ${s.loss} against ${s.k}, Σ (f − k/E)(P − 1/E) = ${s.together}`;
}

// -- kinds of token ------------------------------------------------------------------------------------------

/** The kind of a token's text, by its characters: all whitespace; digits, punctuation (one leading space allowed);
 *  or a space and then letters only. */
function kind(text: string): string | null {
  const chars = Array.from(text);
  if (chars.length && chars.every((ch) => ch.trim() === "")) return "space";
  const body = chars[0] === " " ? chars.slice(1) : chars;
  if (body.length && body.every((ch) => /\p{Nd}/u.test(ch))) return "digit";
  if (body.length && body.every((ch) => /\p{P}/u.test(ch))) return "punct";
  if (chars[0] === " " && body.length && body.every((ch) => /\p{L}/u.test(ch))) return "word";
  return null;
}
const KIND_KEY: Record<string, string> = { "lesson.moe.kind.digit": "digit", "lesson.moe.kind.punct": "punct",
  "lesson.moe.kind.space": "space", "lesson.moe.kind.word": "word" };

interface Case { kind: string; layer: number; e: number; n: number; m: number; no: number; mo: number; gap: number }

/** Every (block, kind) with at least 3 tokens of the kind and 3 others: the expert most of the kind choose first. */
async function cases(ctx: ClaimContext): Promise<Case[]> {
  const kinds = ctx.trace.tokens.map((t) => kind(t.text)), T = kinds.length, E = await nExperts(ctx);
  const out: Case[] = [];
  for (const l of await routed(ctx)) {
    const first = (await recorded(ctx, l)).map((row) => row[0]);
    for (const k of ["digit", "punct", "space", "word"]) {
      const mine = kinds.map((x, t) => (x === k ? t : -1)).filter((t) => t >= 0);
      if (mine.length < 3 || T - mine.length < 3) continue;
      const tally = new Array<number>(E).fill(0);
      mine.forEach((t) => tally[first[t]]++);
      const e = firstMax(tally), m = tally[e], n = mine.length;
      const mo = first.filter((x, t) => x === e && kinds[t] !== k).length, no = T - n;
      out.push({ kind: k, layer: l, e, n, m, no, mo, gap: m / n - mo / no });
    }
  }
  return out;
}

/** What the chapter calls the clearest case: "mostly" a kind's own (3 in 4 of the kind, 1 in 4 of the others at most),
 *  "busy" (the first choice of half the other tokens or more: a load, not a speciality), a "lean" (a gap of 1/4 or
 *  more), or "weak". */
const verdict = (c: Case) => (c.m / c.n >= 0.75 && c.mo / c.no <= 0.25 ? "mostly" : c.mo / c.no >= 0.5 ? "busy"
  : c.gap >= 0.25 ? "lean" : "weak");

async function kindCase(v: Record<string, Value>, ctx: ClaimContext, want: string): Promise<true | string> {
  const all = await cases(ctx), k = KIND_KEY[String(v.kind.raw)], l = num(v.layer);
  const c = all.find((x) => x.kind === k && x.layer === l);
  if (!c) return `no ${k} tokens to speak of in block ${l}`;
  if (num(v["e.e"]) !== c.e || num(v.n) !== c.n || num(v.m) !== c.m || num(v.no) !== c.no || num(v.mo) !== c.mo)
    return `in block ${l}, ${c.m} of ${c.n} ${k} tokens choose expert ${c.e} first, and ${c.mo} of the other ${c.no}`;
  const best = Math.max(...all.map((x) => x.gap));
  if (c.gap < best - 1e-9) return `another block or kind is clearer (a gap of ${best} against ${c.gap})`;
  return verdict(c) === want ? true : `${c.m} of ${c.n} against ${c.mo} of ${c.no}: ${verdict(c)}, not ${want}`;
}

// -- parameters and arithmetic --------------------------------------------------------------------------------

/** FLOPs of one token's matrix products, from the weights' shapes: every block's attention matrices, the router and
 *  k experts (or the dense MLP), and the unembedding; 2 per multiply-add. */
async function flopsOf(ctx: ClaimContext, experts: "k" | "all"): Promise<number> {
  const c = await config(ctx), k = await topK(ctx);
  let macs = size(await weight(ctx, "unembed.W_U"));
  for (let l = 0; l < c.n_layer; l++) {
    for (const w of ["W_Q", "W_K", "W_V", "W_O"]) macs += size(await weight(ctx, `blocks.${l}.attn.${w}`));
    const router = await weight(ctx, `blocks.${l}.mlp.W_router`);
    if (router) {
      const s = await expertShape(ctx, l);
      macs += size(router) + (experts === "all" ? s.E : k) * s.per;
    } else {
      for (const w of ["W_gate", "W_in", "W_out"]) macs += size(await weight(ctx, `blocks.${l}.mlp.${w}`));
    }
  }
  return 2 * macs;
}

// -- the ablation --------------------------------------------------------------------------------------------

/** The mean next-token cross-entropy of the text, from its logits. */
async function cleanLoss(ctx: ClaimContext): Promise<number> {
  const logits = await ctx.tensor({ name: "logits" }), [T, V] = logits.shape, ids = ctx.trace.token_ids;
  let s = 0;
  for (let t = 0; t + 1 < T; t++) {
    const row = logits.data.subarray(t * V, (t + 1) * V);
    let m = -Infinity;
    for (const x of row) m = Math.max(m, x);
    let z = 0;
    for (const x of row) z += Math.exp(x - m);
    s += Math.log(z) + m - row[ids[t + 1]];
  }
  return s / (T - 1);
}

/** The expert a sentence says is taken out: block {layer}, {e} (an "expert {e}" phrase). */
const removed = (v: Record<string, Value>) => ({ l: num(v.layer), e: num(v["e.e"]) });
async function ablated(ctx: ClaimContext, l: number, e: number) {
  return analysis.ablate({ model: ctx.trace.model, ids: ctx.trace.token_ids, experts: [[l, e]], top: 1 });
}
const busiestOf = async (ctx: ClaimContext, l: number) => firstMax(loads(await recorded(ctx, l), await nExperts(ctx)));

async function lossChange(v: Record<string, Value>, ctx: ClaimContext, worse: boolean): Promise<true | string> {
  const { l, e } = removed(v), r = await ablated(ctx, l, e), clean = await cleanLoss(ctx);
  if (r.loss_before === null || r.loss_after === null) return "the ablation gives no loss";
  if (!near(r.loss_before, clean, 1e-3)) return `the clean loss is ${clean} from the logits, the ablation says ${r.loss_before}`;
  if (!near(num(v.before), clean) || !near(num(v.after), r.loss_after)) return `${clean} → ${r.loss_after}, not ${v.before.v} → ${v.after.v}`;
  const change = r.loss_after - r.loss_before;
  if (!near(num(v.change), change, 6e-3, 1e-5)) return `the change is ${change}, not ${v.change.v}`;
  return (r.loss_after > r.loss_before) === worse ? true : `the loss goes from ${r.loss_before} to ${r.loss_after}`;
}

async function topChange(v: Record<string, Value>, ctx: ClaimContext, same: boolean): Promise<true | string> {
  const { l, e } = removed(v), r = await ablated(ctx, l, e);
  const logits = await ctx.tensor({ name: "logits", position: ctx.trace.token_ids.length - 1 }), P = softmax(logits.data);
  const best = firstMax(P);
  if (r.before[0].id !== best || num(v.before) !== best || !near(num(v.pb), P[best])) return `the top next token is #${best} with ${P[best]}`;
  if (same) return r.after[0].id === best && near(num(v.pa), r.after[0].prob) ? true : `after: #${r.after[0].id} with ${r.after[0].prob}`;
  return r.after[0].id !== best && num(v.after) === r.after[0].id && near(num(v.pa), r.after[0].prob) ? true
    : `after: #${r.after[0].id} with ${r.after[0].prob}`;
}

export const CLAIMS: Partial<Record<MessageKey, Check>> = {
  "lesson.moe.dense": async (v, ctx) => {
    const l = num(v.layer), c = await config(ctx);
    return l === ctx.focus.layer && !(c.capabilities.moe_layers ?? []).includes(l) && !(await weight(ctx, `blocks.${l}.mlp.W_router`))
      ? true : `block ${l} has experts (or is not the focus)`;
  },
  "lesson.moe.intro.experts": async (v, ctx) => {
    const [l] = await routed(ctx), s = await expertShape(ctx, l), router = await weight(ctx, `blocks.${l}.mlp.W_router`);
    if (num(v.e) !== s.E || router?.shape[1] !== s.E || num(v.m) !== s.M) return `${s.E} experts of width ${s.M}`;
    return num(v.k) === await topK(ctx) && s.E > num(v.k) ? true : `top-${await topK(ctx)}`;
  },
  "lesson.moe.intro.allBlocks": async (_v, ctx) => ((await routed(ctx)).length === (await config(ctx)).n_layer ? true
    : "some blocks have no router"),
  "lesson.moe.intro.someDense": async (v, ctx) => {
    const r = await routed(ctx), L = (await config(ctx)).n_layer;
    const dense = Array.from({ length: L }, (_, l) => l).filter((l) => !r.includes(l));
    const shown = inside(v, "dense").map(num);
    if (!shown.length) shown.push(num(v.dense));
    return num(v.n) === r.length && shown.join() === dense.join() ? true : `blocks ${r} have routers, ${dense} do not`;
  },
  "lesson.moe.cost.expert": async (v, ctx) => {
    const c = await config(ctx), s = await expertShape(ctx, ctx.focus.layer);
    if (num(v.d) !== s.D || num(v.m) !== s.M) return `the experts are ${s.D} × ${s.M}`;
    return num(v.per) === s.per && s.per === 3 * s.D * s.M && !c.mlp_bias ? true : `an expert has ${s.per} parameters`;
  },
  "lesson.moe.cost.block": async (v, ctx) => {
    const s = await expertShape(ctx, ctx.focus.layer), router = size(await weight(ctx, `blocks.${ctx.focus.layer}.mlp.W_router`));
    const k = await topK(ctx);
    if (num(v.e) !== s.E || num(v.all) !== s.E * s.per || num(v.router) !== router) return `${s.E} experts, ${s.E * s.per} + ${router}`;
    return num(v.k) === k && num(v.used) === k * s.per ? true : `${k} experts use ${k * s.per}`;
  },
  "lesson.moe.cost.dense": async (v, ctx) => {
    const s = await expertShape(ctx, ctx.focus.layer), k = await topK(ctx);
    // a gated MLP km wide: gate and up d × km, down km × d
    const denseMacs = 3 * s.D * num(v.km);
    if (num(v.k) !== k || num(v.km) !== k * s.M) return `${k} experts of width ${s.M}`;
    return denseMacs === num(v.used) && denseMacs === k * s.per && near(num(v.r), s.E / k) ? true : `a dense MLP of ${v.km.v} costs ${denseMacs}`;
  },
  "lesson.moe.router.here": routerHere,
  "lesson.moe.topk.chosen": chosenHere,
  "lesson.moe.topk.renorm": (v, ctx) => weightsHere(v, ctx, true),
  "lesson.moe.topk.raw": (v, ctx) => weightsHere(v, ctx, false),
  "lesson.moe.sum.equal": (v, ctx) => sumHere(v, ctx, true),
  "lesson.moe.sum.differs": (v, ctx) => sumHere(v, ctx, false),
  "lesson.moe.load.counts": async (v, ctx) => {
    const { n, E, k, T } = await loadOf(ctx), top = firstMax(n);
    if (!sameBlock(v, ctx) || num(v.n) !== T || num(v.pairs) !== T * k || num(v.k) !== k) return `${T} tokens × ${k} in block ${ctx.focus.layer}`;
    if (!near(num(v.fair), (T * k) / E)) return `an even share is ${(T * k) / E}`;
    if (maxima(n).length > 1) return `experts ${maxima(n)} tie for the most, ${n[top]} each`;
    return num(v["e.e"]) === top && num(v.got) === n[top] && near(num(v.share), n[top] / (T * k)) ? true
      : `expert ${top} got the most, ${n[top]} (counts ${n})`;
  },
  "lesson.moe.load.countsTie": async (v, ctx) => {
    const { n, E, k, T } = await loadOf(ctx), tied = maxima(n);
    if (!sameBlock(v, ctx) || num(v.n) !== T || num(v.pairs) !== T * k || num(v.k) !== k) return `${T} tokens × ${k} in block ${ctx.focus.layer}`;
    if (!near(num(v.fair), (T * k) / E)) return `an even share is ${(T * k) / E}`;
    const shown = inside(v, "experts").map(num);
    return tied.length > 1 && shown.join() === tied.join() && num(v.got) === n[tied[0]] && near(num(v.share), n[tied[0]] / (T * k))
      ? true : `the most chosen: ${tied} (counts ${n}), not ${shown}`;
  },
  "lesson.moe.load.weightBreaksTie": async (v, ctx) => {
    const { n, summed } = await loadOf(ctx), tied = maxima(n), h = firstMax(summed);
    if (tied.length < 2 || !tied.includes(h) || num(v["e.e"]) !== h || !near(num(v.w), summed[h])) return `tied ${tied}, by weight ${h} (${summed})`;
    const rest = tied.filter((x) => x !== h), next = rest.reduce((b, x) => (summed[x] > summed[b] ? x : b), rest[0]);
    return num(v["other.e"]) === next && near(num(v["other.w"]), summed[next]) && summed[h] > summed[next] ? true
      : `next of the tied: expert ${next} with ${summed[next]}`;
  },
  "lesson.moe.load.weightOtherTie": async (v, ctx) => {
    const { n, summed } = await loadOf(ctx), tied = maxima(n), h = firstMax(summed);
    if (tied.length < 2 || tied.includes(h) || num(v["e.e"]) !== h || !near(num(v.w), summed[h])) return `tied ${tied}, by weight ${h} (${summed})`;
    const shown = inside(v, "top").map(num), want = tied.flatMap((e) => [e, summed[e]]);
    return shown.length === want.length && shown.every((x, i) => (i % 2 ? near(x, want[i]) : x === want[i])) ? true
      : `the tied with their weights: ${want}, not ${shown}`;
  },
  "lesson.moe.load.blocks": async (v, ctx) => {
    const s = await busiestShares(ctx), hi = firstMax(s.shares), lo = firstMax(s.shares.map((x) => -x));
    return num(v.m) === s.blocks.length && s.shares[hi] !== s.shares[lo] && num(v.bl) === s.blocks[lo] && num(v.bh) === s.blocks[hi]
      && near(num(v.lo), s.shares[lo]) && near(num(v.hi), s.shares[hi]) && ctx.focus.layer === s.blocks[hi] ? true
      : `the busiest shares by block ${s.blocks}: ${s.shares} (the focus on block ${ctx.focus.layer})`;
  },
  "lesson.moe.load.blocksSame": async (v, ctx) => {
    const s = await busiestShares(ctx);
    return num(v.m) === s.blocks.length && s.shares.every((x) => x === s.shares[0]) && near(num(v.share), s.shares[0]) ? true
      : `the busiest shares by block: ${s.shares}`;
  },
  "lesson.moe.end.idle": (v, ctx) => endCase(v, ctx, true),
  "lesson.moe.end.noIdle": (v, ctx) => endCase(v, ctx, false),
  "lesson.moe.load.unused": async (v, ctx) => {
    const { n, E } = await loadOf(ctx), unused = n.flatMap((x, e) => (x ? [] : [e]));
    const shown = inside(v, "experts").map(num);
    if (!shown.length) shown.push(num(v.experts));
    return num(v.u) === unused.length && num(v.e) === E && shown.join() === unused.join() ? true : `unused: ${unused}`;
  },
  "lesson.moe.load.allUsed": async (v, ctx) => {
    const { n, E } = await loadOf(ctx);
    return num(v.e) === E && n.every((x) => x > 0) ? true : `counts ${n}`;
  },
  "lesson.moe.load.weightSame": async (v, ctx) => {
    const { n, summed } = await loadOf(ctx), h = firstMax(summed);
    return h === firstMax(n) && maxima(n).length === 1 && num(v["e.e"]) === h && near(num(v.w), summed[h]) ? true : `by weight ${h} (${summed}), by count ${firstMax(n)}`;
  },
  "lesson.moe.load.weightOther": async (v, ctx) => {
    const { n, summed } = await loadOf(ctx), h = firstMax(summed), top = firstMax(n);
    if (h === top || maxima(n).length > 1 || num(v["e.e"]) !== h || num(v["top.e"]) !== top) return `by weight ${h}, by count ${top}`;
    return near(num(v.w), summed[h]) && near(num(v.wt), summed[top]) && summed[h] > summed[top] ? true : `summed weights ${summed}`;
  },
  "lesson.moe.balance.here": async (v, ctx) => {
    if (!sameBlock(v, ctx)) return `block ${v.layer.v} is not the focus`;
    const s = await switchLoss(ctx, ctx.focus.layer), x = num(v["x.e"]), top = firstMax(s.f);
    if (x !== top) return `expert ${top} is chosen most (f = ${s.f})`;
    return near(num(v.f), s.f[x]) && near(num(v.p), s.P[x]) && near(num(v.loss), s.loss) ? true
      : `f = ${s.f[x]}, P = ${s.P[x]}, loss ${s.loss}`;
  },
  "lesson.moe.balance.above": (v, ctx) => evenSpread(v, ctx, true),
  "lesson.moe.balance.notAbove": (v, ctx) => evenSpread(v, ctx, false),
  "lesson.moe.balance.trained": async (_v, ctx) => {
    const m = await infos(ctx);
    return m.name === "explainer-moe" && m.source === "builtin" ? true : `${m.name} (${m.source}) is not the built-in explainer-moe`;
  },
  "lesson.moe.special.mostly": (v, ctx) => kindCase(v, ctx, "mostly"),
  "lesson.moe.special.busy": (v, ctx) => kindCase(v, ctx, "busy"),
  "lesson.moe.special.lean": (v, ctx) => kindCase(v, ctx, "lean"),
  "lesson.moe.special.weak": (v, ctx) => kindCase(v, ctx, "weak"),
  "lesson.moe.special.none": async (v, ctx) => {
    const all = await cases(ctx);
    return num(v.min) === 3 && !all.length ? true : `${all.length} (block, kind) cases with 3 tokens or more`;
  },
  "lesson.moe.layers.path": async (v, ctx) => {
    const p = ctx.focus.pos;
    if (!focusToken(v, ctx)) return `the focus is at ${p}`;
    const shown = inside(v, "path").map(num), want: number[] = [];
    for (const l of await routed(ctx)) want.push(l, ...(await choicesOf(ctx, l)).chosen[p]);
    return shown.join() === want.join() ? true : `the path is ${want}, not ${shown}`;
  },
  "lesson.moe.layers.same": async (v, ctx) => {
    const r = await routed(ctx), sets = new Set<string>();
    for (const l of r) sets.add([...(await recorded(ctx, l))[ctx.focus.pos]].sort().join());
    return num(v.n) === r.length && sets.size === 1 ? true : `${sets.size} different sets`;
  },
  "lesson.moe.layers.differ": async (v, ctx) => {
    const r = await routed(ctx), sets = new Set<string>();
    for (const l of r) sets.add([...(await recorded(ctx, l))[ctx.focus.pos]].sort().join());
    return num(v.n) === r.length && num(v.d) === sets.size && sets.size > 1 ? true : `${sets.size} different sets over ${r.length} blocks`;
  },
  "lesson.moe.layers.combos": async (v, ctx) => {
    const E = await nExperts(ctx), k = await topK(ctx), n = (await routed(ctx)).length;
    let c = 1;
    for (let i = 1; i <= k; i++) c = (c * (E - k + i)) / i; // C(E, k)
    return num(v.e) === E && num(v.k) === k && num(v.c) === c && num(v.n) === n && near(num(v.all), c ** n) ? true
      : `C(${E}, ${k}) = ${c}, ${c ** n} paths over ${n} blocks`;
  },
  "lesson.moe.params.total": async (v, ctx) => {
    const m = await infos(ctx), r = await routed(ctx), k = await topK(ctx), s = await expertShape(ctx, r[0]);
    if (m.n_params == null || m.n_active_params == null) return "the model's sizes are unknown";
    if (num(v.total) !== m.n_params || num(v.active) !== m.n_active_params) return `${m.n_params} and ${m.n_active_params}`;
    if (m.n_params - m.n_active_params !== r.length * (s.E - k) * s.per) return `the unused experts hold ${r.length * (s.E - k) * s.per}`;
    return num(v.n) === r.length && num(v.rest) === s.E - k && near(num(v.share), m.n_active_params / m.n_params) ? true
      : `${r.length} blocks, ${s.E - k} experts left out`;
  },
  "lesson.moe.params.flops": async (v, ctx) => {
    const [f, all] = await Promise.all([flopsOf(ctx, "k"), flopsOf(ctx, "all")]);
    return near(num(v.f), f) && near(num(v.all), all) && num(v.e) === await nExperts(ctx) ? true : `${f} and ${all} FLOPs`;
  },
  "lesson.moe.params.flopsPass": async (v, ctx) => {
    const c = await config(ctx), T = ctx.trace.token_ids.length, cost = ctx.trace.cost;
    if (!cost || num(v.t) !== T || cost.n_tokens !== T) return `the pass is over ${T} tokens`;
    const [f, all] = await Promise.all([flopsOf(ctx, "k"), flopsOf(ctx, "all")]);
    // the pass: each token's matrix products, and every layer's query-key scores and weighted values over T × T
    const scores = c.n_layer * 2 * 2 * T * T * c.n_head * c.head_dim, pass = T * f + scores;
    if (!near(cost.gflop * 1e9, pass, 1e-6)) return `the pass counts ${cost.gflop * 1e9} FLOPs, T × f + the scores make ${pass}`;
    return near(num(v.g), pass / 1e9) && near(num(v.per), pass / T) && near(num(v.f), f) && near(num(v.all), all)
      && num(v.e) === await nExperts(ctx) ? true : `${pass / 1e9} GFLOP, ${pass / T} a token, ${f} and ${all}`;
  },
  "lesson.moe.params.mixtralSame": async (v, ctx) => {
    const m = await infos(ctx);
    return await nExperts(ctx) === 8 && await topK(ctx) === 2 && near(num(v.share), m.n_active_params! / m.n_params!) ? true
      : "the model does not route 2 of 8";
  },
  "lesson.moe.params.mixtralOther": async (v, ctx) => {
    const E = await nExperts(ctx), k = await topK(ctx);
    return !(E === 8 && k === 2) && num(v.e) === E && num(v.k) === k ? true : `the model routes ${k} of ${E}`;
  },
  "lesson.moe.ablate.what": async (v, ctx) => {
    const { l, e } = removed(v), chosen = await recorded(ctx, l);
    const n = chosen.filter((row) => row.includes(e)).length;
    const r = await ablated(ctx, l, e);
    if (JSON.stringify(r.experts) !== JSON.stringify([[l, e]])) return `the ablation took out ${JSON.stringify(r.experts)}`;
    return num(v.n) === n && num(v.T) === chosen.length ? true : `${n} of ${chosen.length} tokens chose expert ${e} of block ${l}`;
  },
  "lesson.moe.ablate.busiest": async (v, ctx) => {
    const { l, e } = removed(v), top = await busiestOf(ctx, l);
    return e === top ? true : `expert ${top} of block ${l} is the busiest`;
  },
  "lesson.moe.ablate.notBusiest": async (v, ctx) => {
    const { l, e } = removed(v), top = await busiestOf(ctx, l);
    return e !== top && num(v["top.e"]) === top ? true : `expert ${top} of block ${l} is the busiest`;
  },
  "lesson.moe.ablate.worse": (v, ctx) => lossChange(v, ctx, true),
  "lesson.moe.ablate.better": (v, ctx) => lossChange(v, ctx, false),
  "lesson.moe.ablate.noLoss": (_v, ctx) => (ctx.trace.token_ids.length < 2 ? true : "the text has a next token to score"),
  "lesson.moe.ablate.sameTop": (v, ctx) => topChange(v, ctx, true),
  "lesson.moe.ablate.newTop": (v, ctx) => topChange(v, ctx, false),
};
