// What each claim of the "Why this token" lesson (src/lessons/why.ts) means, checked on numbers fetched here: the
// trace's logits and embeddings again from the server (ctx.tensor), the weights (W_E, the final norm's scale and
// shift), the prompts' logits and tokens, the attribution and the patching asked for again through the plain JSON
// API, and where a sentence states a computation, the computation redone here (the token embedding's contribution
// from its vector and the weights, the constant from the norm's shift, the normalised grid from the two runs'
// logits). Each check returns true, or what the numbers show.
import { api, call } from "../../src/lib/client";
import type { AttributeOut, ModelConfigOut, PatchOut, TensorSpec } from "../../src/lib/generated/api";
import type { MessageKey } from "../../src/lib/i18n";
import type { Value } from "../../src/lib/lesson";
import { decodeTensor } from "../../src/lib/tensor";
import { PAIRS } from "../../src/pages/attribution/pairs";
import type { Check, ClaimContext } from "./claims";

type V = Record<string, Value>;

const num = (v: Value | undefined): number => (v ? Number(v.raw) : NaN);
function same(v: Value | undefined, x: number, what: string, tol = 1e-3): true | string {
  const q = num(v);
  return Math.abs(q - x) <= tol * Math.max(1, Math.abs(x)) ? true : `${what}: the text quotes ${v?.v} (${q}), the numbers say ${x}`;
}
function all(...checks: (true | string)[]): true | string {
  return checks.find((c) => c !== true) ?? true;
}
const fail = (cond: boolean, why: string): true | string => (cond ? true : why);
function argmax(a: ArrayLike<number>, n = a.length): number {
  let b = 0;
  for (let j = 1; j < n; j++) if (a[j] > a[b]) b = j;
  return b;
}

// -- the numbers, fetched again (memoised per input: many sentences read the same ones) ----------------------

const memo = new Map<string, Promise<unknown>>();
function once<T>(key: string, make: () => Promise<T>): Promise<T> {
  if (!memo.has(key)) memo.set(key, make());
  return memo.get(key) as Promise<T>;
}

/** The attribution of the learner's text at the focus, with the default token, through the plain API. */
const attribution = (ctx: ClaimContext) => once(`attr|${ctx.trace.model}|${ctx.trace.token_ids.join()}|${ctx.focus.pos}`,
  () => call<AttributeOut>("attribution/attribute", { model: ctx.trace.model, ids: ctx.trace.token_ids, position: ctx.focus.pos }));

async function weightRow(model: string, name: string, row?: number): Promise<Float32Array> {
  const spec: TensorSpec = row === undefined ? { name, dtype: "float32" } : { name, row, dtype: "float32" };
  return once(`w|${model}|${name}|${row}`, async () => decodeTensor((await api.weights({ model, tensors: [spec] })).tensors[0]).data);
}

const lastLogits = (model: string, text: string) => once(`logits|${model}|${text}`, async () =>
  decodeTensor((await api.tensors({ model, text, tensors: [{ name: "logits", position: -1, dtype: "float32" }] })).tensors[0]).data);

interface Tokens { bos_id: number | null; texts: { ids: number[] }[] }
const tokens = (model: string, texts: string[]) => once(`tok|${model}|${texts.join("\u0000")}`,
  () => call<Tokens>("attribution/tokens", { model, texts }));
const ownIds = (t: Tokens, i: number) => (t.bos_id !== null && t.texts[i].ids[0] === t.bos_id ? t.texts[i].ids.slice(1) : t.texts[i].ids);

/** The pair a patching sentence speaks of (its hidden values), and its grids through the plain JSON API. */
function pairOf(v: V): { clean: string; corrupted: string; answer: number; wrong: number } {
  return { clean: String(v.cleanText.raw), corrupted: String(v.corruptedText.raw), answer: num(v.answerId), wrong: num(v.wrongId) };
}
const patching = (model: string, v: V) => {
  const p = pairOf(v);
  return once(`patch|${model}|${p.clean}|${p.corrupted}|${p.answer}|${p.wrong}`, () =>
    call<PatchOut>("attribution/patch", { model, clean: p.clean, corrupted: p.corrupted, answer: p.answer, wrong: p.wrong }));
};
/** The two runs' metric, from their own logits. */
async function metrics(model: string, v: V): Promise<{ clean: number; corrupted: number; lc: Float32Array; lx: Float32Array }> {
  const p = pairOf(v);
  const [lc, lx] = await Promise.all([lastLogits(model, p.clean), lastLogits(model, p.corrupted)]);
  return { clean: lc[p.answer] - lc[p.wrong], corrupted: lx[p.answer] - lx[p.wrong], lc, lx };
}

/** The parts that write into the stream, counted from the config: the token embedding, the position embedding where
 *  positions are learned, and per block each head, the attention output's bias where there is one, the MLP. */
// the embeddings, and per block its heads, its output bias, and its MLP: one part, or one per expert chosen at the
// position where the block is a mixture of experts
const components = (c: ModelConfigOut) => {
  const cap = c.capabilities, moe = new Set(cap.mlp === "moe" ? cap.moe_layers ?? [] : []);
  let n = 1 + (cap.positions === "learned" ? 1 : 0);
  for (let l = 0; l < c.n_layer; l++) n += c.n_head + (c.out_bias ? 1 : 0) + (moe.has(l) ? cap.top_k ?? 1 : 1);
  return n;
};
const headName = (l: number, h: number) => `L${l} H${h}`;
function bestHead(a: AttributeOut): { l: number; h: number; v: number } | null {
  let best: { l: number; h: number; v: number } | null = null;
  a.heads.forEach((row, l) => row.forEach((x, h) => {
    if (x !== null && x > 0 && (!best || x > best.v)) best = { l, h, v: x };
  }));
  return best;
}

/** The token embedding's contribution to logit(t) at `pos`, redone here: its vector, centred where the norm centres,
 *  times the forward pass's divisor, times γ ⊙ W_U[:, t] (W_E's row t: the models here tie them). */
async function embedContribution(ctx: ClaimContext, pos: number, t: number): Promise<number | null> {
  const c = ctx.trace.config;
  if (!c.tie_word_embeddings) return null;
  const rms = c.capabilities.norm === "rms";
  // what the embedding put into the stream: the token's row, times sqrt(d_model) where the model scales it
  const x = (await ctx.tensor({ name: c.capabilities.embed_scale ? "embed.scaled" : "embed.token", position: pos })).data;
  const stat = (await ctx.tensor({ name: rms ? "ln_final.rms" : "ln_final.var" })).data[pos];
  const scale = rms ? 1 / stat : 1 / Math.sqrt(stat + c.layer_norm_epsilon);
  const [w, u] = await Promise.all([weightRow(ctx.trace.model, "ln_final.w"), weightRow(ctx.trace.model, "embed.W_E", t)]);
  const mean = rms ? 0 : x.reduce((s, y) => s + y, 0) / x.length;
  let s = 0;
  for (let i = 0; i < x.length; i++) s += (x[i] - mean) * w[i] * u[i];
  return s * scale;
}

// -- the sentences -------------------------------------------------------------------------------------------

async function predicted(v: V, ctx: ClaimContext, last: boolean): Promise<true | string> {
  const T = ctx.trace.token_ids.length, pos = num(v.pos);
  const logits = (await ctx.tensor({ name: "logits", position: pos })).data;
  const t = num(v.target);
  return all(
    fail(String(v.model.raw) === ctx.trace.model, `the text names ${v.model.v}, the trace is of ${ctx.trace.model}`),
    fail(pos === ctx.focus.pos, `the text explains position ${pos}, the focus is on ${ctx.focus.pos}`),
    fail(num(v.token) === ctx.trace.token_ids[pos], `the token at ${pos} is id ${ctx.trace.token_ids[pos]}, the text quotes ${v.token.v}`),
    last ? fail(pos === T - 1 && argmax(logits) === t, `the top prediction at ${pos} is id ${argmax(logits)}, the text says ${v.target.v}`)
      : fail(pos < T - 1 && ctx.trace.token_ids[pos + 1] === t, `the token after ${pos} is id ${ctx.trace.token_ids[pos + 1]}, the text says ${v.target.v}`),
    same(v.logit, logits[t], "the logit"),
  );
}

export const CLAIMS: Partial<Record<MessageKey, Check>> = {
  "lesson.why.sum.top": (v, ctx) => predicted(v, ctx, true),
  "lesson.why.sum.next": (v, ctx) => predicted(v, ctx, false),
  "lesson.why.sum.exact": async (v, ctx) => {
    const a = await attribution(ctx);
    const logit = (await ctx.tensor({ name: "logits", position: ctx.focus.pos })).data[a.target.id];
    const embed = await embedContribution(ctx, ctx.focus.pos, a.target.id);
    const given = a.components.find((c) => c.kind === "embed")!.value;
    return all(
      fail(num(v.n) === components(ctx.trace.config), `the model has ${components(ctx.trace.config)} parts, the text says ${v.n.v}`),
      same(v.logit, logit, "the logit of the forward pass"),
      // the sum the text states, with the numbers it quotes, is the logit
      fail(Math.abs(num(v.sum) + num(v.rest) - logit) <= 1e-3 * Math.max(1, Math.abs(logit)),
        `${v.sum.raw} + ${v.rest.raw} is not the logit ${logit}`),
      same(v.sum, a.components.reduce((s, c) => s + c.value, 0), "the sum of the contributions"),
      embed === null ? true : same({ v: "", id: "", raw: given }, embed, "the token embedding's contribution, redone here"),
    );
  },
  "lesson.why.sum.noRest": (v, ctx) => all(
    fail(ctx.trace.config.capabilities.norm === "rms", `this model's final norm is ${ctx.trace.config.capabilities.norm}, which has a shift`),
    fail(num(v.rest) === 0, `the constant is ${v.rest.raw}, not 0`)),
  "lesson.why.sum.someRest": async (v, ctx) => {
    const c = ctx.trace.config, a = await attribution(ctx);
    if (c.capabilities.norm !== "layer" || !c.tie_word_embeddings) return `the check needs a tied LayerNorm model, got ${c.capabilities.norm}`;
    const [b, u] = await Promise.all([weightRow(ctx.trace.model, "ln_final.b"), weightRow(ctx.trace.model, "embed.W_E", a.target.id)]);
    let s = 0;
    for (let i = 0; i < b.length; i++) s += b[i] * u[i];
    return all(fail(num(v.rest) !== 0, "the constant is 0"), same(v.rest, s, "β · W_U[:, t], redone here"));
  },
  "lesson.why.top.firstUp": (v, ctx) => firstCheck(v, ctx, true),
  "lesson.why.top.firstDown": (v, ctx) => firstCheck(v, ctx, false),
  "lesson.why.top.kinds": (v, ctx) => kindsCheck(v, ctx, true),
  "lesson.why.top.kindsNoBias": (v, ctx) => kindsCheck(v, ctx, false),
  "lesson.why.head.best": async (v, ctx) => {
    const a = await attribution(ctx), b = bestHead(a), c = ctx.trace.config;
    if (!b) return "no head adds to the logit";
    return all(fail(num(v.n) === c.n_layer * c.n_head, `${v.n.v} heads, the model has ${c.n_layer * c.n_head}`),
      fail(v.head.raw === headName(b.l, b.h), `the head adding most is ${headName(b.l, b.h)}, the text says ${v.head.v}`),
      same(v.v, b.v, "its contribution"));
  },
  "lesson.why.head.none": async (v, ctx) => {
    const a = await attribution(ctx);
    return fail(bestHead(a) === null, "a head adds to the logit");
  },
  "lesson.why.head.looks": async (v, ctx) => {
    const a = await attribution(ctx), b = bestHead(a), pos = ctx.focus.pos;
    if (!b) return "no head to look at";
    const pat = (await ctx.tensor({ name: `blocks.${b.l}.attn.pattern`, head: b.h, position: pos })).data;
    const j = argmax(pat, pos + 1);
    return all(fail(num(v.token) === ctx.trace.token_ids[pos], "the token quoted is not the focus token"),
      fail(num(v.j) === j, `${headName(b.l, b.h)} looks most at position ${j}, the text says ${v.j.v}`),
      fail(num(v.key) === ctx.trace.token_ids[j], `position ${j} holds id ${ctx.trace.token_ids[j]}, the text says ${v.key.v}`),
      same(v.w, pat[j], "the attention weight", 1e-4));
  },
  "lesson.why.head.copies": async (v, ctx) => {
    const a = await attribution(ctx);
    return all(fail(num(v.target) === a.target.id, "the target is not the attribution's"),
      fail(num(v.key) === a.target.id, `${v.key.v} is not ${a.target.text}`));
  },
  "lesson.why.head.other": async (v, ctx) => {
    const a = await attribution(ctx);
    return all(fail(num(v.target) === a.target.id, "the target is not the attribution's"),
      fail(num(v.key) !== a.target.id, `${v.key.v} is the target itself`));
  },
  "lesson.why.patch.metrics": async (v, ctx) => {
    const m = await metrics(ctx.trace.model, v), p = pairOf(v);
    return all(fail(String(v.model.raw) === ctx.trace.model, "another model"),
      fail(num(v.answer) === p.answer && num(v.wrong) === p.wrong, "the tokens quoted are not the pair's"),
      same(v.clean, m.clean, "the clean run's logit difference"), same(v.corrupted, m.corrupted, "the corrupted run's"));
  },
  "lesson.why.patch.moves": async (v, ctx) => {
    const m = await metrics(ctx.trace.model, v), p = pairOf(v);
    return all(fail(argmax(m.lc) === p.answer, `the clean prompt's top prediction is id ${argmax(m.lc)}, not the answer`),
      fail(argmax(m.lx) === p.wrong, `the corrupted prompt's top prediction is id ${argmax(m.lx)}, not the wrong token`),
      fail(num(v.answer) === p.answer && num(v.wrong) === p.wrong, "the tokens quoted are not the pair's"));
  },
  "lesson.why.patch.stays": async (v, ctx) => {
    const model = ctx.trace.model, m = await metrics(model, v), p = pairOf(v);
    const own = all(fail(num(v.topClean) === argmax(m.lc), `the clean prompt's top prediction is id ${argmax(m.lc)}`),
      fail(num(v.topCorrupted) === argmax(m.lx), `the corrupted prompt's top prediction is id ${argmax(m.lx)}`),
      fail(!(argmax(m.lc) === p.answer && argmax(m.lx) === p.wrong), "the answer does move"),
      fail(num(v.answer) === p.answer && num(v.wrong) === p.wrong, "the tokens quoted are not the pair's"),
      same(v.diff, m.clean - m.corrupted, "the change in the metric"));
    if (own !== true) return own;
    for (const q of PAIRS) { // "none of the page's example pairs moves this model's answer"
      const t = await tokens(model, [q.clean, q.corrupted, q.answer, q.wrong]);
      const [a, w] = [ownIds(t, 2), ownIds(t, 3)];
      if (t.texts[0].ids.length !== t.texts[1].ids.length || a.length !== 1 || w.length !== 1) continue;
      const [lc, lx] = await Promise.all([lastLogits(model, q.clean), lastLogits(model, q.corrupted)]);
      if (argmax(lc) === a[0] && argmax(lx) === w[0]) return `the pair ${JSON.stringify(q.clean)} does move the answer`;
    }
    return true;
  },
  "lesson.why.patch.noPair": async (v, ctx) => {
    for (const q of PAIRS) {
      const t = await tokens(ctx.trace.model, [q.clean, q.corrupted, q.answer, q.wrong]);
      if (t.texts[0].ids.length === t.texts[1].ids.length && ownIds(t, 2).length === 1 && ownIds(t, 3).length === 1) {
        return `the pair ${JSON.stringify(q.clean)} can be patched`;
      }
    }
    return true;
  },
  "lesson.why.pair.lines": async (v, ctx) => {
    const p = pairOf(v), t = await tokens(ctx.trace.model, [p.clean, p.corrupted]);
    const [c, x] = [t.texts[0].ids, t.texts[1].ids];
    const diff = c.flatMap((id, i) => (id !== x[i] ? [i] : []));
    return all(fail(c.length === x.length && c.length === num(v.n), `the prompts are ${c.length} and ${x.length} tokens`),
      fail(diff.length === 1 && diff[0] === num(v.pos), `they differ at ${diff.join(", ")}`),
      fail(num(v.a) === c[diff[0]] && num(v.b) === x[diff[0]], "the tokens quoted are not the ones there"));
  },
  "lesson.why.grid.start": async (v, ctx) => {
    const model = ctx.trace.model, [g, m] = await Promise.all([patching(model, v), metrics(model, v)]);
    const pos = num(v.pos), row = g.raw.resid_pre[0];
    const tol = (x: number) => 1e-3 * Math.max(1, Math.abs(x));
    const others = row.map((x, t) => (t === pos ? null : x)).filter((x): x is number => x !== null);
    return all(
      fail(Math.abs((row[pos] ?? NaN) - m.clean) <= tol(m.clean), `patched at ${pos} the metric is ${row[pos]}, the clean run's is ${m.clean}`),
      fail(others.every((x) => Math.abs(x - m.corrupted) <= tol(m.corrupted)), "another position changes the corrupted run"),
      same(v.v, (m.clean - m.corrupted) / (m.clean - m.corrupted), "the whole clean answer"),
      same(v.v, g.grids.resid_pre[0][pos] ?? NaN, "the grid's cell"));
  },
  "lesson.why.grid.moves": async (v, ctx) => {
    const g = (await patching(ctx.trace.model, v)).grids.resid_pre, L = g.length, last = g[0].length - 1;
    const l0 = num(v.layer), pos = num(v.pos), at = (l: number, t: number) => g[l][t] ?? NaN;
    for (let l = l0; l < L; l++) if (!(at(l, last) > at(l, pos))) return `in layer ${l} the last position carries less than ${pos}`;
    return all(fail(l0 === 1 || !(at(l0 - 1, last) > at(l0 - 1, pos)), `it already does so in layer ${l0 - 1}`),
      same(v.vLast, at(l0, last), "the last position's cell", 1e-4), same(v.vPos, at(l0, pos), "the changed position's", 1e-4));
  },
  "lesson.why.grid.stays": async (v, ctx) => {
    const g = (await patching(ctx.trace.model, v)).grids.resid_pre, L = g.length, last = g[0].length - 1;
    const pos = num(v.pos), at = (t: number) => g[L - 1][t] ?? NaN;
    return all(fail(num(v.layer) === L - 1, `layer ${v.layer.v} is not the last block's (${L - 1})`),
      fail(at(pos) >= at(last), `in layer ${L - 1} the last position carries more`),
      same(v.vLast, at(last), "the last position's cell", 1e-4), same(v.vPos, at(pos), "the changed position's", 1e-4));
  },
  "lesson.why.heads.top": async (v, ctx) => {
    const g = (await patching(ctx.trace.model, v)).grids.heads, c = ctx.trace.config;
    let b = { l: 0, h: 0 };
    g.forEach((row, l) => row.forEach((x, h) => { if ((x ?? -Infinity) > (g[b.l][b.h] ?? -Infinity)) b = { l, h }; }));
    return all(fail(num(v.n) === c.n_layer * c.n_head, "the number of heads"),
      fail(v.head.raw === headName(b.l, b.h), `the head recovering most is ${headName(b.l, b.h)}`),
      same(v.v, g[b.l][b.h] ?? NaN, "its cell", 1e-4));
  },
  "lesson.why.heads.one": async (v, ctx) => headShare(v, ctx, true),
  "lesson.why.heads.spread": async (v, ctx) => headShare(v, ctx, false),
  "lesson.why.heads.agree": (v, ctx) => directTop(v, ctx, true),
  "lesson.why.heads.disagree": (v, ctx) => directTop(v, ctx, false),
};

async function firstCheck(v: V, ctx: ClaimContext, up: boolean): Promise<true | string> {
  const a = await attribution(ctx);
  const first = [...a.components].sort((x, y) => Math.abs(y.value) - Math.abs(x.value))[0];
  const name = first.kind === "head" ? headName(first.layer!, first.head!) : first.kind === "mlp" ? `MLP ${first.layer}`
    : first.kind === "attn_bias" ? `b_O ${first.layer}` : first.kind === "embed" ? "W_E" : "W_pos";
  return all(fail(v.first.raw === name, `the largest is ${name}, the text says ${v.first.v}`), same(v.v, first.value, "its value"),
    fail(up === first.value > 0, `its sign is ${Math.sign(first.value)}`));
}

async function kindsCheck(v: V, ctx: ClaimContext, bias: boolean): Promise<true | string> {
  const a = await attribution(ctx);
  const sum = (k: string[]) => a.components.filter((x) => k.includes(x.kind)).reduce((s, x) => s + x.value, 0);
  const has = a.components.some((x) => x.kind === "attn_bias");
  return all(fail(has === bias, bias ? "the model has no attention biases" : "the model has attention biases"),
    same(v.heads, sum(["head"]), "the heads' sum"), same(v.mlps, sum(["mlp"]), "the MLPs' sum"),
    same(v.emb, sum(["embed", "pos_embed"]), "the embeddings' sum"), bias ? same(v.bias, sum(["attn_bias"]), "the biases' sum") : true);
}

async function headShare(v: V, ctx: ClaimContext, one: boolean): Promise<true | string> {
  const g = (await patching(ctx.trace.model, v)).grids.heads;
  const best = Math.max(...g.flat().map((x) => x ?? -Infinity));
  const [l, h] = String(v.head.raw).slice(1).split(" H").map(Number);
  return all(fail((g[l]?.[h] ?? NaN) === best, `${v.head.v} is not the head recovering most`),
    fail(one === best >= 0.5, `the largest head recovers ${best}`));
}

async function directTop(v: V, ctx: ClaimContext, agree: boolean): Promise<true | string> {
  const p = pairOf(v);
  const a = await once(`direct|${ctx.trace.model}|${p.clean}|${p.answer}|${p.wrong}`, () => call<AttributeOut>(
    "attribution/attribute", { model: ctx.trace.model, text: p.clean, target: p.answer, versus: p.wrong }));
  const top3 = a.components.filter((x) => x.kind === "head").sort((x, y) => y.value - x.value).slice(0, 3)
    .map((x) => headName(x.layer!, x.head!));
  return all(fail(num(v.answer) === p.answer && num(v.wrong) === p.wrong, "the tokens quoted are not the pair's"),
    fail(agree === top3.includes(String(v.head.raw)), `the three heads writing most are ${top3.join(", ")}`));
}
