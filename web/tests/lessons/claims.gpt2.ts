// What each claim of the GPT-2 lesson (src/lessons/gpt2.ts) means, checked on numbers fetched here: the tensors
// again from the server (ctx.tensor), the weights, the tokenizer's answer for a single word (a trace of that word
// alone), and where a sentence states a computation, the computation redone here (q·k from q and k, the softmax from
// the masked scores, GELU from its formula, a layer norm's statistics from its input, a logit from the final
// vector and W_E, parameter counts from the weights' shapes). Each check returns true, or what the numbers show.
import { api } from "../../src/lib/client";
import type { TensorSpec, TokenOut } from "../../src/lib/generated/api";
import type { MessageKey } from "../../src/lib/i18n";
import type { Value } from "../../src/lib/lesson";
import { decodeTensor, type Tensor } from "../../src/lib/tensor";
import type { Check, ClaimContext } from "./claims";

type V = Record<string, Value>;

// -- comparing what a sentence quotes with what the numbers are ---------------------------------------------------

const num = (v: Value | undefined): number => (v ? Number(v.raw) : NaN);
/** The quoted value is the number `x` (the lesson's reading of the same float32 answer, so close to exact). */
function same(v: Value | undefined, x: number, what: string, tol = 1e-4): true | string {
  const q = num(v);
  return Math.abs(q - x) <= tol * Math.max(1, Math.abs(x)) ? true : `${what}: the text quotes ${v?.v} (${q}), the numbers say ${x}`;
}
/** The first of `checks` that failed, or true. */
function all(...checks: (true | string)[]): true | string {
  return checks.find((c) => c !== true) ?? true;
}
const fail = (cond: boolean, why: string): true | string => (cond ? true : why);

const ids = (ctx: ClaimContext) => ctx.trace.token_ids;
const T = (ctx: ClaimContext) => ctx.trace.token_ids.length;
/** The quoted token is the one at position `j` of the text. */
const tokenAt = (v: Value | undefined, ctx: ClaimContext, j: number, what: string) =>
  fail(num(v) === ids(ctx)[j], `${what}: the text quotes token ${v?.v} (id ${v?.raw}), position ${j} holds id ${ids(ctx)[j]}`);
/** The quoted layer and head are the app's focus (the views show what the text quotes). */
function inFocus(v: V, ctx: ClaimContext): true | string {
  return all(
    "layer" in v ? fail(num(v.layer) === ctx.focus.layer, `the text names block ${v.layer.v}, the focus is on ${ctx.focus.layer}`) : true,
    "head" in v ? fail(num(v.head) === ctx.focus.head, `the text names head ${v.head.v}, the focus is on ${ctx.focus.head}`) : true,
    "focus" in v ? tokenAt(v.focus, ctx, ctx.focus.pos, "the focus token") : true,
  );
}

const dot = (a: ArrayLike<number>, ao: number, b: ArrayLike<number>, bo: number, n: number) => {
  let s = 0;
  for (let i = 0; i < n; i++) s += a[ao + i] * b[bo + i];
  return s;
};
const norm = (a: ArrayLike<number>) => Math.sqrt(dot(a, 0, a, 0, a.length));
function argmax(a: ArrayLike<number>, n: number, sign = 1): number {
  let b = 0;
  for (let j = 1; j < n; j++) if (sign * a[j] > sign * a[b]) b = j;
  return b;
}

// -- the numbers, fetched again ----------------------------------------------------------------------------------

/** q·k of the focus query with every key it may see, computed here from the head's q and k. */
async function qk(ctx: ClaimContext, layer: number, head: number, p: number): Promise<number[]> {
  const q = await ctx.tensor({ name: `blocks.${layer}.attn.q`, head });
  const k = await ctx.tensor({ name: `blocks.${layer}.attn.k`, head });
  const d = q.shape[1];
  return Array.from({ length: p + 1 }, (_, j) => dot(q.data, p * d, k.data, j * d, d));
}
/** The head's attention weights for the query at `p`, computed here as the softmax of its masked scores. */
async function weights(ctx: ClaimContext, layer: number, head: number, p: number): Promise<number[]> {
  const m = (await ctx.tensor({ name: `blocks.${layer}.attn.masked_scores`, head, position: p })).data;
  const top = Math.max(...Array.from(m).slice(0, p + 1));
  const e = Array.from(m, (x, j) => (j <= p ? Math.exp(x - top) : 0));
  const z = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / z);
}
/** The largest weight, the next one, and where the largest is. */
function ranks(w: number[], n: number): { top: number; w1: number; w2: number } {
  const top = argmax(w, n);
  let w2 = 0;
  for (let j = 0; j < n; j++) if (j !== top) w2 = Math.max(w2, w[j]);
  return { top, w1: w[top], w2 };
}
const clear = (r: { w1: number; w2: number }, n: number) => n >= 2 && r.w1 >= 0.5 && r.w1 >= 2 * r.w2;

/** The tokens the model's tokenizer makes of `text` alone (a trace of that text). */
const tokenizeCache = new Map<string, TokenOut[]>();
async function tokenize(ctx: ClaimContext, text: string): Promise<TokenOut[]> {
  const key = `${ctx.trace.model}\u0000${text}`;
  if (!tokenizeCache.has(key)) tokenizeCache.set(key, (await api.trace({ model: ctx.trace.model, text })).tokens);
  return tokenizeCache.get(key)!;
}

/** A weight of the model (kept: weights do not change). */
const weightCache = new Map<string, Tensor>();
async function weight(ctx: ClaimContext, spec: TensorSpec): Promise<Tensor> {
  const key = `${ctx.trace.model}\u0000${JSON.stringify(spec)}`;
  if (!weightCache.has(key)) {
    const out = await api.weights({ model: ctx.trace.model, tensors: [{ ...spec, dtype: "float32" }] });
    weightCache.set(key, decodeTensor(out.tensors[0]));
  }
  return weightCache.get(key)!;
}
const size = (t: Tensor) => t.shape.reduce((a, b) => a * b, 1);
/** Block 0's parameters, counted from its weights' shapes: the MLP's and the whole block's. */
async function blockParams(ctx: ClaimContext): Promise<{ mlp: number; block: number }> {
  const c = ctx.trace.config;
  let mlp = 0, block = 0;
  for (const w of ["ln1.w", "ln1.b", "attn.W_Q", "attn.W_K", "attn.W_V", "attn.b_Q", "attn.b_K", "attn.b_V", "attn.W_O",
    "attn.b_O", "ln2.w", "ln2.b", "mlp.W_in", "mlp.b_in", "mlp.W_out", "mlp.b_out"]) {
    const perHead = w.startsWith("attn.") && w !== "attn.b_O";
    let n = 0;
    if (perHead) for (let h = 0; h < c.n_head; h++) n += size(await weight(ctx, { name: `blocks.0.${w}`, head: h }));
    else n = size(await weight(ctx, { name: `blocks.0.${w}` }));
    block += n;
    if (w.startsWith("mlp.")) mlp += n;
  }
  return { mlp, block };
}
const nParams = (ctx: ClaimContext) => ctx.model?.n_params ?? NaN;

/** GELU's tanh approximation (GPT-2's) and the exact form. */
const geluTanh = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
function erf(x: number): number { // Abramowitz & Stegun 7.1.26, |error| < 1.5e-7
  const s = Math.sign(x), a = Math.abs(x), t = 1 / (1 + 0.3275911 * a);
  const y = 1 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * Math.exp(-a * a);
  return s * y;
}
const geluExact = (x: number) => 0.5 * x * (1 + erf(x / Math.SQRT2));
const TANH_GELUS = ["gelu_new", "gelu_pytorch_tanh", "gelu_fast"];
const gelu = (ctx: ClaimContext) => (TANH_GELUS.includes(ctx.trace.config.activation) ? geluTanh : geluExact);

/** Latin-letter words of the text (not inside an identifier), with the positions of the tokens that spell them. */
function textWords(ctx: ClaimContext): { text: string; start: number; end: number; spaced: boolean }[] {
  const toks = ctx.trace.tokens, out: { text: string; start: number; end: number; spaced: boolean }[] = [];
  const joined = toks.map((t) => t.text).join("");
  const starts: number[] = [];
  let o = 0;
  for (const t of toks) { starts.push(o); o += t.text.length; }
  for (const m of joined.matchAll(/(?<![\p{L}\p{N}_])\p{Script=Latin}+(?![\p{L}\p{N}_])/gu)) {
    const a = m.index!, b = a + m[0].length;
    const lastAt = (f: (s: number) => boolean) => { let i = -1; starts.forEach((s, k) => { if (f(s)) i = k; }); return i; };
    const first = lastAt((s) => s <= a), last = lastAt((s) => s < b);
    // only words whose tokens hold the word alone (an optional leading space before it)
    const from = starts[first], to = last + 1 < toks.length ? starts[last + 1] : joined.length;
    const spaced = a - from === 1 && joined[from] === " ";
    if ((a === from || spaced) && to === b) out.push({ text: m[0], start: first, end: last + 1, spaced });
  }
  return out;
}
const visible = (s: string) => s.replace(/ /g, "␣").replace(/\n/g, "↵").replace(/\t/g, "⇥");
const piecesOf = (ctx: ClaimContext, a: number, b: number) => ctx.trace.tokens.slice(a, b).map((t) => visible(t.text)).join(" + ");

// -- the checks --------------------------------------------------------------------------------------------------

const GPT2_SMALL = { n_layer: 12, n_head: 12, n_embd: 768, d_mlp: 3072, block_size: 1024, vocab_size: 50257 };
const GPT2_SMALL_PARAMS = 124_439_808;

async function attnPositive(v: V, ctx: ClaimContext) {
  const p = ctx.focus.pos, s = await qk(ctx, ctx.focus.layer, ctx.focus.head, p);
  return all(inFocus(v, ctx), fail(p >= 1 && Math.max(...s) > 0, `the best q·k is ${Math.max(...s)} over ${p + 1} keys`));
}

async function bestMatch(v: V, ctx: ClaimContext, positive: boolean, self = false) {
  const p = ctx.focus.pos, s = await qk(ctx, num(v.layer), num(v.head), p), j = argmax(s, p + 1);
  return all(inFocus(v, ctx), fail(p >= 1, "the focus is the first token"), same(v.score, s[j], "the best q·k", 1e-3),
    tokenAt(v.key, ctx, j, "the best key"), fail((s[j] > 0) === positive, `the best q·k is ${s[j]}`),
    self ? fail(j === p, `the best key is at ${j}, not the token's own`) : true);
}

async function scoreRange(v: V, ctx: ClaimContext, lowSelf: boolean) {
  const p = ctx.focus.pos, s = await qk(ctx, num(v.layer), num(v.head), p);
  const hi = argmax(s, p + 1), lo = argmax(s, p + 1, -1);
  return all(inFocus(v, ctx), fail(p >= 1, "the focus is the first token"),
    same(v.highScore, s[hi], "the highest q·k", 1e-3), tokenAt(v.high, ctx, hi, "the highest key"),
    same(v.lowScore, s[lo], "the lowest q·k", 1e-3), tokenAt(v.low, ctx, lo, "the lowest key"),
    fail((lo === p) === lowSelf, lowSelf ? `the lowest score is at ${lo}, not the token itself` : "the lowest score is the token's own"));
}

/** The masked keys' weights are exactly 0 and their masked scores −∞, the others not. */
async function maskHolds(v: V, ctx: ClaimContext) {
  const { layer, head, pos } = ctx.focus;
  const w = (await ctx.tensor({ name: `blocks.${layer}.attn.pattern`, head, position: pos })).data;
  const m = (await ctx.tensor({ name: `blocks.${layer}.attn.masked_scores`, head, position: pos })).data;
  for (let j = 0; j < w.length; j++) {
    if (j > pos && (w[j] !== 0 || m[j] !== -Infinity)) return `key ${j} after the focus has weight ${w[j]}, masked score ${m[j]}`;
    if (j <= pos && !(m[j] > -Infinity)) return `key ${j} that the focus sees is masked`;
  }
  return all(inFocus(v, ctx), "pos" in v ? fail(num(v.pos) === pos, "the position") : true,
    "seen" in v ? fail(num(v.seen) === pos + 1, `it sees ${pos + 1} keys, the text says ${v.seen.v}`) : true,
    "masked" in v ? fail(num(v.masked) === T(ctx) - 1 - pos, `${T(ctx) - 1 - pos} keys are masked, the text says ${v.masked.v}`) : true);
}

async function softmaxRow(v: V, ctx: ClaimContext, wantClear: boolean) {
  const p = ctx.focus.pos, w = await weights(ctx, num(v.layer), num(v.head), p), r = ranks(w, p + 1);
  return all(inFocus(v, ctx), fail(p >= 1, "the focus is the first token"), same(v.weight, r.w1, "the largest weight", 1e-3),
    tokenAt(v.key, ctx, r.top, "the key with the largest weight"), fail(num(v.n) === p + 1, "the number of visible keys"),
    same(v.even, 1 / (p + 1), "the even share"),
    fail(clear(r, p + 1) === wantClear, `the largest weight is ${r.w1}, the next ${r.w2}: ${wantClear ? "no" : "a"} clear win`));
}

async function residAt(ctx: ClaimContext, l: number) {
  const p = ctx.focus.pos;
  const [a, b, c, d] = await Promise.all(["resid_pre", "attn_out", "mlp_out", "resid_post"]
    .map((s) => ctx.tensor({ name: `blocks.${l}.${s}`, position: p })));
  return { pre: norm(a.data), attn: norm(b.data), mlp: norm(c.data), post: norm(d.data), vec: [a, b, c, d].map((t) => t.data) };
}

async function gelUnit(v: V, ctx: ClaimContext, sign: 1 | -1, cond: (x: number, y: number) => true | string) {
  const { layer, pos } = ctx.focus;
  const pre = (await ctx.tensor({ name: `blocks.${layer}.mlp.pre`, position: pos })).data;
  const post = (await ctx.tensor({ name: `blocks.${layer}.mlp.post`, position: pos })).data;
  const u = argmax(pre, pre.length, sign), x = pre[u], y = post[u], f = gelu(ctx);
  return all(inFocus(v, ctx), fail(num(v.unit) === u, `the ${sign > 0 ? "largest" : "smallest"} input is unit ${u}, the text says ${v.unit.v}`),
    same(v.x, x, "the unit's input"), same(v.y, y, "the unit's output"),
    fail(Math.abs(f(x) - y) < 2e-3 * Math.max(1, Math.abs(x)), `GELU(${x}) = ${f(x)}, the model gives ${y}`), cond(x, y));
}

function cand(v: Value | undefined, ctx: ClaimContext, i: number, what: string): true | string {
  const c = ctx.next?.candidates[i];
  return fail(!!c && num(v) === c.id, `${what}: the text quotes ${v?.v}, candidate ${i} is ${c?.text}`);
}

async function final(v: V, ctx: ClaimContext) {
  const c = ctx.trace.config, p = ctx.focus.pos;
  const x = (await ctx.tensor({ name: `blocks.${c.n_layer - 1}.resid_post`, position: p })).data;
  const mean = x.reduce((a, b) => a + b, 0) / x.length;
  const variance = x.reduce((a, b) => a + (b - mean) ** 2, 0) / x.length;
  return all(inFocus(v, ctx), same(v.mean, mean, "the mean of the last block's output", 1e-3),
    same(v.var, variance, "its variance", 1e-3));
}

async function tail(v: V, ctx: ClaimContext, most: boolean) {
  const nx = ctx.next!, k = num(v.k), c = nx.candidates;
  if (nx.top_k !== k || k >= c.length) return `top-k is ${nx.top_k}, the text says ${k}`;
  const t = 1 - c.slice(0, k).reduce((s, x) => s + x.prob_no_cut, 0);
  return all(same(v.tail, t, "the probability outside the top k", 1e-3), fail((t > 0.5) === most, `the tail holds ${t}`),
    cand(v.next, ctx, k, "the likeliest cut token"), same(v.pNext, c[k].prob_no_cut, "its probability"),
    fail(c.slice(0, k).every((x) => x.kept) && c.slice(k).every((x) => !x.kept) || nx.top_p != null, "top-k keeps other tokens"));
}

export const CLAIMS: Partial<Record<MessageKey, Check>> = {
  // the model
  "lesson.gpt2.model.same": (v, ctx) => all(fail(v.model.raw === ctx.trace.model, "the model's name"),
    fail(Object.entries(GPT2_SMALL).every(([k, x]) => ctx.trace.config[k as keyof typeof GPT2_SMALL] === x), "not GPT-2 small's shape")),
  "lesson.gpt2.model.smaller": (v, ctx) => all(fail(v.model.raw === ctx.trace.model, "the model's name"),
    fail(nParams(ctx) <= GPT2_SMALL_PARAMS, `${nParams(ctx)} parameters`), same(v.ratio, GPT2_SMALL_PARAMS / nParams(ctx), "the ratio")),
  "lesson.gpt2.model.larger": (v, ctx) => all(fail(v.model.raw === ctx.trace.model, "the model's name"),
    fail(nParams(ctx) > GPT2_SMALL_PARAMS, `${nParams(ctx)} parameters`), same(v.ratio, nParams(ctx) / GPT2_SMALL_PARAMS, "the ratio")),
  "lesson.gpt2.tokens.vocabSame": (_v, ctx) => fail(ctx.trace.config.vocab_size === 50257, "the vocabulary is not 50,257"),
  "lesson.gpt2.tokens.vocabOther": (v, ctx) => all(fail(ctx.trace.config.vocab_size !== 50257, "the vocabulary is 50,257"),
    fail(num(v.vocab) === ctx.trace.config.vocab_size, "the vocabulary's size")),

  // tokenization: checked against the tokenizer's own answer for each string
  "lesson.gpt2.bpe.split": async (v, ctx) => {
    const w = textWords(ctx).find((x) => x.text === v.word.raw && x.end - x.start === num(v.n));
    if (!w) return `no word “${v.word.raw}” of ${v.n.v} tokens in the text`;
    const alone = await tokenize(ctx, ` ${w.text}`);
    return all(fail(alone.length > 1, `“ ${w.text}” is a single token`), fail(v.pieces.raw === piecesOf(ctx, w.start, w.end), "the pieces"));
  },
  "lesson.gpt2.bpe.noSplit": async (_v, ctx) => {
    for (const w of textWords(ctx).filter((x) => x.end - x.start > 1))
      if ((await tokenize(ctx, ` ${w.text}`)).length > 1) return `“${w.text}” is split even with a space before it`;
    return true;
  },
  "lesson.gpt2.bpe.spaceSplit": async (v, ctx) => {
    const w = textWords(ctx).find((x) => x.text === v.word.raw && !x.spaced && x.end - x.start > 1);
    if (!w) return `no unspaced split word “${v.word.raw}” in the text`;
    const alone = await tokenize(ctx, ` ${w.text}`);
    return all(fail(alone.length === 1 && alone[0].id === num(v.id) && num(v.spaced) === num(v.id), `“ ${w.text}” is ${alone.length} tokens`),
      fail(v.pieces.raw === piecesOf(ctx, w.start, w.end), "the pieces"));
  },
  "lesson.gpt2.bpe.spaceTwo": async (v, ctx) => {
    const t = ctx.trace.tokens.find((x) => x.id === num(v.tok));
    if (!t || !t.text.startsWith(" ") || num(v.id) !== t.id) return `no token ${v.tok.v} with a leading space in the text`;
    const alone = await tokenize(ctx, t.text.slice(1));
    return fail(alone.length === 1 && alone[0].id === num(v.bareId) && num(v.bare) === alone[0].id && alone[0].id !== t.id,
      `“${t.text.slice(1)}” is ${alone.length} tokens`);
  },
  "lesson.gpt2.bpe.spaceOnly": async (v, ctx) => {
    const t = ctx.trace.tokens.find((x) => x.id === num(v.tok));
    if (!t || !t.text.startsWith(" ") || v.bare.raw !== t.text.slice(1)) return `no token ${v.tok.v} with a leading space in the text`;
    const alone = await tokenize(ctx, t.text.slice(1));
    return fail(alone.length > 1, `“${t.text.slice(1)}” is one entry (${alone[0]?.id})`);
  },
  "lesson.gpt2.bpe.space": (v, ctx) => fail(ctx.trace.tokens.some((x) => x.id === num(v.tok) && x.text.startsWith(" ")),
    `no token ${v.tok.v} with a leading space`),
  "lesson.gpt2.bpe.noSpace": (_v, ctx) => fail(!ctx.trace.tokens.some((x) => x.text.startsWith(" ")), "a token starts with a space"),
  "lesson.gpt2.bpe.marker": (v, ctx) => fail(ctx.trace.tokens.some((x) => x.id === num(v.tok) && x.text.startsWith(" ")
    && x.raw === v.raw.raw && x.raw.startsWith("Ġ")), `${v.tok.v} is not stored as ${v.raw.v}`),
  "lesson.gpt2.bpe.bytes": (v, ctx) => fail(ctx.trace.char_groups.some((g) => g.text === v.text.raw && g.end - g.start === num(v.n)),
    `no character group “${v.text.raw}” of ${v.n.v} tokens`),

  "lesson.gpt2.embed-pos.ctxSame": (v, ctx) => fail(ctx.trace.config.block_size === 1024 && num(v.ctx) === 1024, "the context"),
  "lesson.gpt2.embed-pos.ctxOther": (v, ctx) => fail(ctx.trace.config.block_size !== 1024 && num(v.ctx) === ctx.trace.config.block_size,
    "the context"),

  // attention
  "lesson.gpt2.attn.movedPositive": attnPositive,
  "lesson.gpt2.attn.movedClear": async (v, ctx) => {
    const p = ctx.focus.pos, w = await weights(ctx, ctx.focus.layer, ctx.focus.head, p), r = ranks(w, p + 1);
    return all(inFocus(v, ctx), fail(clear(r, p + 1), `the largest weight is ${r.w1}, the next ${r.w2}`));
  },
  "lesson.gpt2.attn.sink": async (v, ctx) => {
    const { layer, head } = ctx.focus, n = T(ctx);
    const pat = (await ctx.tensor({ name: `blocks.${layer}.attn.pattern`, head })).data;
    let share = 0;
    for (let i = 1; i < n; i++) share += pat[i * n] / (n - 1);
    return all(inFocus(v, ctx), tokenAt(v.first, ctx, 0, "the first token"), fail(num(v.rows) === n - 1, "the rows after the first"),
      same(v.share, share, "the mean weight on position 0", 1e-3), fail(share >= 0.5, `the rows give position 0 ${share} on average`));
  },
  "lesson.gpt2.qkv.best": (v, ctx) => bestMatch(v, ctx, true),
  "lesson.gpt2.qkv.bestNeg": (v, ctx) => bestMatch(v, ctx, false),
  "lesson.gpt2.qkv.bestSelf": (v, ctx) => bestMatch(v, ctx, true, true),
  "lesson.gpt2.qkv.only": async (v, ctx) => {
    const s = await qk(ctx, ctx.focus.layer, ctx.focus.head, 0);
    return all(inFocus(v, ctx), fail(ctx.focus.pos === 0, "the focus is not the first token"), same(v.score, s[0], "q·k", 1e-3));
  },
  "lesson.gpt2.dot.range": (v, ctx) => scoreRange(v, ctx, false),
  "lesson.gpt2.dot.lowSelf": (v, ctx) => scoreRange(v, ctx, true),
  "lesson.gpt2.dot.only": async (v, ctx) => {
    const s = await qk(ctx, ctx.focus.layer, ctx.focus.head, 0);
    return all(inFocus(v, ctx), fail(ctx.focus.pos === 0, "the focus is not the first token"), same(v.score, s[0], "q·k", 1e-3));
  },
  "lesson.gpt2.mask.single": (v, ctx) => all(fail(T(ctx) === 1, "the text has several tokens"), inFocus(v, ctx)),
  "lesson.gpt2.mask.first": async (v, ctx) => all(fail(ctx.focus.pos === 0 && T(ctx) > 1, "not the first of several tokens"),
    await maskHolds(v, ctx)),
  "lesson.gpt2.mask.last": async (v, ctx) => all(fail(ctx.focus.pos === T(ctx) - 1 && T(ctx) > 1, "not the last token"),
    await maskHolds(v, ctx)),
  "lesson.gpt2.mask.count": async (v, ctx) => all(fail(ctx.focus.pos > 0 && ctx.focus.pos < T(ctx) - 1, "the first or the last token"),
    await maskHolds(v, ctx)),
  "lesson.gpt2.softmax.clear": (v, ctx) => softmaxRow(v, ctx, true),
  "lesson.gpt2.softmax.lead": (v, ctx) => softmaxRow(v, ctx, false),
  "lesson.gpt2.softmax.only": async (v, ctx) => {
    const w = await weights(ctx, ctx.focus.layer, ctx.focus.head, 0);
    return all(inFocus(v, ctx), fail(ctx.focus.pos === 0, "the focus is not the first token"), same(v.weight, w[0], "the weight", 1e-3));
  },
  "lesson.gpt2.softmax.negative": async (v, ctx) => {
    const { layer, head, pos } = ctx.focus;
    const s = (await ctx.tensor({ name: `blocks.${layer}.attn.scaled_scores`, head, position: pos })).data;
    return all(inFocus(v, ctx), fail(Array.from(s).slice(0, pos + 1).every((x) => x < 0), "a visible scaled score is not negative"));
  },
  "lesson.gpt2.softmax.noHead": async (v, ctx) => {
    const c = ctx.trace.config, p = ctx.focus.pos;
    for (let l = 0; l < c.n_layer; l++) for (let h = 0; h < c.n_head; h++) {
      const r = ranks(await weights(ctx, l, h, p), p + 1);
      if (clear(r, p + 1)) return `block ${l}, head ${h} gives ${r.w1} (next ${r.w2})`;
    }
    return inFocus(v, ctx);
  },
  "lesson.gpt2.softmax.noSearch": async (v, ctx) => {
    const c = ctx.trace.config, p = ctx.focus.pos;
    for (let l = 0; l < c.n_layer; l++) for (let h = 0; h < c.n_head; h++) {
      const r = ranks(await weights(ctx, l, h, p), p + 1);
      if (clear(r, p + 1) && r.top !== 0) return `block ${l}, head ${h} gives key ${r.top} ${r.w1} (next ${r.w2})`;
    }
    return all(inFocus(v, ctx), tokenAt(v.first, ctx, 0, "the first token"));
  },
  "lesson.gpt2.heads.only": (v, ctx) => all(inFocus(v, ctx), fail(ctx.focus.pos === 0, "the focus is not the first token")),
  "lesson.gpt2.heads.same": async (v, ctx) => {
    const { layer, pos } = ctx.focus;
    for (let h = 0; h < ctx.trace.config.n_head; h++) {
      const r = ranks(await weights(ctx, layer, h, pos), pos + 1);
      if (r.top !== num(v.kpos)) return `head ${h}'s largest weight is on position ${r.top}`;
    }
    return all(inFocus(v, ctx), tokenAt(v.key, ctx, num(v.kpos), "the key"));
  },
  "lesson.gpt2.heads.differ": async (v, ctx) => {
    const { layer, pos } = ctx.focus;
    const a = ranks(await weights(ctx, layer, num(v.head), pos), pos + 1), b = ranks(await weights(ctx, layer, num(v.head2), pos), pos + 1);
    return all(inFocus(v, ctx), fail(a.top === num(v.kpos) && b.top === num(v.kpos2) && a.top !== b.top, "the heads' favourite keys"),
      tokenAt(v.key, ctx, a.top, "head's key"), tokenAt(v.key2, ctx, b.top, "the other head's key"),
      same(v.weight, a.w1, "the weight", 1e-3), same(v.weight2, b.w1, "the other weight", 1e-3));
  },
  "lesson.gpt2.concat.fits": async (v, ctx) => {
    const c = ctx.trace.config, cat = await ctx.tensor({ name: `blocks.${ctx.focus.layer}.attn.concat`, position: ctx.focus.pos });
    return fail(cat.data.length === num(v.width) && num(v.width) === c.n_embd && num(v.width) === num(v.nHead) * num(v.dHead),
      `the concatenation has ${cat.data.length} numbers, the model width is ${c.n_embd}`);
  },
  "lesson.gpt2.concat.other": async (v, ctx) => {
    const c = ctx.trace.config, cat = await ctx.tensor({ name: `blocks.${ctx.focus.layer}.attn.concat`, position: ctx.focus.pos });
    return fail(cat.data.length === num(v.width) && num(v.width) !== c.n_embd, `the concatenation has ${cat.data.length} numbers`);
  },

  // the residual stream
  "lesson.gpt2.residual.moved": async (v, ctx) => {
    const r = await residAt(ctx, ctx.focus.layer);
    return all(inFocus(v, ctx), fail(r.attn < r.pre && r.mlp < r.pre, `edits of ${r.attn} and ${r.mlp} to a vector of ${r.pre}`));
  },
  "lesson.gpt2.residual.notAdd": async (v, ctx) => {
    const r = await residAt(ctx, ctx.focus.layer), [a, b, c, d] = r.vec;
    let worst = 0; // the stream is the sum of the vectors: resid_post = resid_pre + attn_out + mlp_out
    for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] + b[i] + c[i] - d[i]));
    return all(fail(worst < 1e-3 * Math.max(1, r.post), `resid_post differs from the sum by ${worst}`),
      same(v.post, r.post, "the length leaving", 1e-3), same(v.sum, r.pre + r.attn + r.mlp, "the sum of the lengths", 1e-3),
      fail(r.post < r.pre + r.attn + r.mlp, "the lengths add up"));
  },
  "lesson.gpt2.residual.small": async (_v, ctx) => {
    const r = await residAt(ctx, ctx.focus.layer);
    return fail(r.attn < r.pre && r.mlp < r.pre, `edits of ${r.attn} and ${r.mlp} to a vector of ${r.pre}`);
  },
  "lesson.gpt2.residual.large": async (v, ctx) => {
    const r = await residAt(ctx, ctx.focus.layer), big = Math.max(r.attn, r.mlp);
    return all(fail(big >= r.pre, "both edits are shorter than the vector"), same(v.ratio, big / r.pre, "the ratio", 1e-3));
  },
  "lesson.gpt2.residual.block0": async (v, ctx) => {
    const r = await residAt(ctx, 0);
    return all(fail(ctx.focus.layer !== 0, "the focus is on block 0"), same(v.ratio, r.mlp / r.pre, "block 0's ratio", 1e-3),
      fail(r.mlp > 3 * r.pre, `block 0's MLP adds ${r.mlp} to ${r.pre}`));
  },

  // the MLP
  "lesson.gpt2.gelu.tanh": (_v, ctx) => fail(TANH_GELUS.includes(ctx.trace.config.activation), ctx.trace.config.activation),
  "lesson.gpt2.gelu.exact": (_v, ctx) => fail(ctx.trace.config.activation === "gelu", ctx.trace.config.activation),
  "lesson.gpt2.gelu.other": (v, ctx) => fail(v.act.raw === ctx.trace.config.activation && !ctx.trace.config.activation.startsWith("gelu"),
    ctx.trace.config.activation),
  "lesson.gpt2.gelu.negFlat": (v, ctx) => gelUnit(v, ctx, -1, (x, y) => fail(x <= -2 && Math.abs(y) < 0.05, `GELU(${x}) = ${y}`)),
  "lesson.gpt2.gelu.negZero": (v, ctx) => gelUnit(v, ctx, -1, (x, y) => fail(x <= -2 && y === 0, `GELU(${x}) = ${y}`)),
  "lesson.gpt2.gelu.negBend": (v, ctx) => gelUnit(v, ctx, -1, (x) => fail(x > -2 && x < 0, `the most negative input is ${x}`)),
  "lesson.gpt2.gelu.posPass": (v, ctx) => gelUnit(v, ctx, 1, (x, y) => fail(x >= 2 && Math.abs(y - x) < 0.03 * x, `GELU(${x}) = ${y}`)),
  "lesson.gpt2.gelu.posBend": (v, ctx) => gelUnit(v, ctx, 1, (x, y) => fail(x > 0 && x < 2 && y < x, `the largest input is ${x}`)),
  "lesson.gpt2.params.block": async (v, ctx) => {
    const p = await blockParams(ctx);
    return all(same(v.mlp, p.mlp, "the MLP's parameters", 0), same(v.block, p.block, "the block's parameters", 0),
      same(v.share, p.mlp / p.block, "the share"), fail(Math.abs(p.mlp / p.block - 2 / 3) < 0.04, `the MLP holds ${p.mlp / p.block}`));
  },
  "lesson.gpt2.params.notMost": async (_v, ctx) => {
    const p = await blockParams(ctx), share = (ctx.trace.config.n_layer * p.mlp) / nParams(ctx);
    return fail(share < 0.5, `the MLPs hold ${share} of ${nParams(ctx)}`);
  },
  "lesson.gpt2.params.most": async (_v, ctx) => {
    const p = await blockParams(ctx), share = (ctx.trace.config.n_layer * p.mlp) / nParams(ctx);
    return fail(share >= 0.5, `the MLPs hold ${share} of ${nParams(ctx)}`);
  },

  // the stack and the output
  "lesson.gpt2.blocks.grows": async (v, ctx) => {
    const c = ctx.trace.config, p = ctx.focus.pos;
    const a = norm((await ctx.tensor({ name: "blocks.0.resid_pre", position: p })).data);
    const b = norm((await ctx.tensor({ name: `blocks.${c.n_layer - 1}.resid_post`, position: p })).data);
    return all(inFocus(v, ctx), same(v.first, a, "the length entering block 0", 2e-3), same(v.last, b, "the length at the end", 2e-3),
      fail(b > a, "it got shorter"));
  },
  "lesson.gpt2.blocks.shrinks": async (v, ctx) => {
    const c = ctx.trace.config, p = ctx.focus.pos;
    const a = norm((await ctx.tensor({ name: "blocks.0.resid_pre", position: p })).data);
    const b = norm((await ctx.tensor({ name: `blocks.${c.n_layer - 1}.resid_post`, position: p })).data);
    return all(inFocus(v, ctx), same(v.first, a, "the length entering block 0", 2e-3), same(v.last, b, "the length at the end", 2e-3),
      fail(b <= a, "it got longer"));
  },
  "lesson.gpt2.final-ln.last": async (v, ctx) => all(fail(ctx.focus.pos === T(ctx) - 1, "the focus is not on the last token"),
    await final(v, ctx)),
  "lesson.gpt2.final-ln.notLast": async (v, ctx) => all(fail(ctx.focus.pos !== T(ctx) - 1, "the focus is on the last token"),
    await final(v, ctx)),
  "lesson.gpt2.unembed.tied": async (v, ctx) => {
    const c = ctx.trace.config, top = ctx.next!.candidates[0];
    // a logit is the final vector's dot product with that token's row of W_E, with no bias
    const x = (await ctx.tensor({ name: "ln_final.out", position: T(ctx) - 1 })).data;
    const e = (await weight(ctx, { name: "embed.W_E", row: top.id })).data;
    const logit = dot(x, 0, e, 0, x.length);
    return all(fail(c.tie_word_embeddings !== false, "the model does not tie W_U to W_E"),
      fail(Math.abs(logit - top.logit) < 1e-3 * Math.max(1, Math.abs(top.logit)), `x · W_E[${top.id}] = ${logit}, the logit is ${top.logit}`),
      fail(num(v.vocab) === c.vocab_size && num(v.saved) === c.vocab_size * c.n_embd, "the sizes"));
  },
  "lesson.gpt2.unembed.untied": (_v, ctx) => fail(ctx.trace.config.tie_word_embeddings === false, "the model ties W_U to W_E"),
  "lesson.gpt2.probs.greedy": (v, ctx) => all(fail(!!ctx.next?.greedy, "not greedy"), cand(v.top, ctx, 0, "the top token")),
  "lesson.gpt2.probs.pair": (v, ctx) => {
    const nx = ctx.next!, [a, b] = nx.candidates, gap = a.logit - b.logit;
    return all(cand(v.top, ctx, 0, "the top token"), cand(v.second, ctx, 1, "the second token"),
      same(v.p1, a.prob_no_cut, "the top probability"), same(v.p2, b.prob_no_cut, "the second probability"),
      same(v.gap, gap, "the logit gap"), same(v.T, nx.temperature, "the temperature"),
      same(v.ratio, Math.exp(gap / nx.temperature), "e^(gap / T)", 2e-3), same(v.ratio, a.prob_no_cut / b.prob_no_cut, "the ratio", 2e-3));
  },
  "lesson.gpt2.probs.aboveEven": (v, ctx) => {
    const p = ctx.next!.candidates[0].prob_no_cut, V = ctx.trace.config.vocab_size;
    return all(cand(v.top, ctx, 0, "the top token"), same(v.times, p * V, "the times"), fail(p * V >= 20, `the top token has ${p}`));
  },
  "lesson.gpt2.probs.nearEven": (v, ctx) => {
    const p = ctx.next!.candidates[0].prob_no_cut, V = ctx.trace.config.vocab_size;
    return all(cand(v.top, ctx, 0, "the top token"), same(v.times, p * V, "the times"), fail(p * V < 20, `the top token has ${p}`));
  },
  "lesson.gpt2.probs.grey": (v, ctx) => {
    const c = ctx.next!.candidates, i = c.findIndex((x) => !x.kept);
    return all(fail(i >= 0 && c.slice(i).every((x) => !x.kept), "the grey rows are not the ones from the first cut on"),
      cand(v.cut, ctx, i, "the first cut row"));
  },
  "lesson.gpt2.probs.noGrey": (_v, ctx) => fail(ctx.next!.candidates.every((x) => x.kept), "a candidate is cut"),
  "lesson.gpt2.temperature.greedy": (v, ctx) => all(fail(!!ctx.next?.greedy, "not greedy"), cand(v.top, ctx, 0, "the top token")),
  "lesson.gpt2.temperature.cut": (v, ctx) => {
    const nx = ctx.next!, c = nx.candidates, kept = c.filter((x) => x.kept);
    // after the cut the kept tokens' probabilities are renormalised: p = p_no_cut / (the kept tokens' share)
    const renorm = kept.length === nx.n_kept ? c[0].prob_no_cut / kept.reduce((s, x) => s + x.prob_no_cut, 0) : c[0].prob;
    return all(cand(v.top, ctx, 0, "the top token"), fail(!nx.greedy && nx.n_kept < ctx.trace.config.vocab_size, "nothing is cut"),
      same(v.p, c[0].prob, "the probability after the cut"), same(v.p, renorm, "the renormalised probability", 1e-3),
      same(v.pNoCut, c[0].prob_no_cut, "the probability before the cut"), fail(num(v.kept) === nx.n_kept, "the kept count"));
  },
  "lesson.gpt2.temperature.noCut": (v, ctx) => all(cand(v.top, ctx, 0, "the top token"),
    fail(!ctx.next!.greedy && ctx.next!.n_kept === ctx.trace.config.vocab_size, "tokens are cut"), same(v.p, ctx.next!.candidates[0].prob, "p")),
  "lesson.gpt2.top-k.on": (v, ctx) => all(fail(ctx.next!.top_k === num(v.k), `top-k is ${ctx.next!.top_k}`),
    fail(ctx.next!.n_kept === num(v.kept) && num(v.kept) <= num(v.k), `${ctx.next!.n_kept} kept`)),
  "lesson.gpt2.top-k.tailMost": (v, ctx) => tail(v, ctx, true),
  "lesson.gpt2.top-k.tailLess": (v, ctx) => tail(v, ctx, false),
  "lesson.gpt2.top-k.greedy": (_v, ctx) => fail(!!ctx.next?.greedy, "not greedy"),
  "lesson.gpt2.top-k.off": (v, ctx) => all(fail(ctx.next!.top_k == null, "top-k is on"), fail(ctx.next!.n_kept === num(v.kept), "the kept count")),
  "lesson.gpt2.top-p.on": (v, ctx) => all(fail(ctx.next!.top_p === num(v.p), `top-p is ${ctx.next!.top_p}`),
    fail(ctx.next!.n_kept === num(v.kept), "the kept count")),
  "lesson.gpt2.top-p.off": (v, ctx) => all(fail(ctx.next!.top_p == null || ctx.next!.greedy, "top-p is on"),
    fail(ctx.next!.n_kept === num(v.kept), "the kept count")),
  "lesson.gpt2.sample.greedy": (_v, ctx) => fail(!!ctx.next?.greedy && ctx.next.sampled.id === ctx.next.candidates[0].id, "not greedy"),
  "lesson.gpt2.sample.one": (_v, ctx) => fail(ctx.next!.n_kept === 1, `${ctx.next!.n_kept} tokens kept`),
  "lesson.gpt2.sample.top": (_v, ctx) => fail(ctx.next!.sampled.id === ctx.next!.candidates[0].id && ctx.next!.n_kept > 1,
    "the draw is not the top token, or nothing else could come"),
  "lesson.gpt2.sample.notTop": (v, ctx) => all(fail(ctx.next!.sampled.id !== ctx.next!.candidates[0].id, "the draw is the top token"),
    cand(v.top, ctx, 0, "the top token"), same(v.pTop, ctx.next!.candidates[0].prob, "its probability")),
  "lesson.gpt2.kv-cache.just": (v, ctx) => {
    const [a, b] = ctx.trace.computed_positions;
    return fail(b - a === 1 && T(ctx) > 1 && a === num(v.pos) && a === T(ctx) - 1, `positions ${a}..${b - 1} were computed`);
  },
  "lesson.gpt2.kv-cache.try": (_v, ctx) => {
    const [a, b] = ctx.trace.computed_positions;
    return fail(!(b - a === 1 && T(ctx) > 1), "only one position was just computed");
  },
};
