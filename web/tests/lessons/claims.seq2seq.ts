// What each claim of the encoder-decoder lesson (src/lessons/seq2seq.ts) means, checked on the page's API asked
// again here for the same task, source and model (ctx.seq2seq), not on the lesson's own reading: a weight is
// the largest of the rows fetched here, a cosine is recomputed from the embedding rows, a dot product of
// positional encodings from the encoding table, a beam's answer from a decode with that beam.
import { ApiError } from "../../src/lib/client";
import type { CompareOut, DecodeOut } from "../../src/lib/generated/api";
import type { MessageKey } from "../../src/lib/i18n";
import type { Value } from "../../src/lib/lesson";
import type { Check, ClaimContext, Seq2SeqClaimContext } from "./claims";

type V = Record<string, Value>;

function s2sOf(ctx: ClaimContext): Seq2SeqClaimContext {
  if (!ctx.seq2seq) throw new Error("an encoder-decoder claim checked without the encoder-decoder page's context");
  return ctx.seq2seq;
}

const num = (v: Value) => Number(v.raw);
/** The same number up to the server's rounding (6 decimals) and float noise. */
const same = (a: number, b: number) => Math.abs(a - b) <= 2e-6 + 1e-5 * Math.abs(b);
const norm = (v: number[]) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const dot = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x * b[i], 0);

/** Each condition with what the numbers show when it fails; true when all hold. */
function all(...conds: [boolean, string][]): true | string {
  const bad = conds.filter(([ok]) => !ok).map(([, why]) => why);
  return bad.length ? bad.join("; ") : true;
}

/** The decode the page showed (its beam), fetched again. */
const decodeShown = (c: Seq2SeqClaimContext) => c.decode(c.focus.beam);

/** The cosines of every pair of the source's distinct tokens' embedding rows. */
function cosines(d: DecodeOut) {
  const rows = new Map<string, number[]>();
  d.src_tokens.forEach((t, p) => { if (!rows.has(t)) rows.set(t, d.source!.embed[p]); });
  const list = [...rows];
  const out: { a: string; b: string; cos: number; dot: number; la: number; lb: number }[] = [];
  list.forEach(([a, ra], i) => list.slice(i + 1).forEach(([b, rb]) => {
    out.push({ a, b, dot: dot(ra, rb), la: norm(ra), lb: norm(rb), cos: dot(ra, rb) / (norm(ra) * norm(rb)) });
  }));
  return { distinct: list.length, pairs: out };
}

/** In head (l, h) of the encoder: the largest weight a query gives a later key, and where. */
function laterMax(d: DecodeOut, l: number, h: number) {
  let best = { q: -1, k: -1, w: -Infinity };
  d.encoder_attn[l][h].forEach((row, q) => row.forEach((w, k) => { if (k > q && w > best.w) best = { q, k, w }; }));
  return best;
}

function globalLaterMax(d: DecodeOut) {
  let best = { l: -1, h: -1, q: -1, k: -1, w: -Infinity };
  d.encoder_attn.forEach((heads, l) => heads.forEach((_, h) => {
    const b = laterMax(d, l, h);
    if (b.w > best.w) best = { l, h, ...b };
  }));
  return best;
}

/** The key each relative position picks for query q of S. */
const REL: Record<string, (q: number, S: number) => number> = {
  "lesson.seq2seq.heads.relSelf": (q) => q,
  "lesson.seq2seq.heads.relPrev": (q) => q - 1,
  "lesson.seq2seq.heads.relNext": (q) => q + 1,
  "lesson.seq2seq.heads.relMirror": (q, S) => S - 1 - q,
};

/** The mean weight head (l, h) gives each query's key at relative position `rel`, over the queries that have
 *  one; null with fewer than 2 such queries. */
function relMean(d: DecodeOut, l: number, h: number, rel: string): number | null {
  const S = d.src_tokens.length;
  const ws: number[] = [];
  for (let q = 0; q < S; q++) {
    const k = REL[rel](q, S);
    if (k >= 0 && k < S) ws.push(d.encoder_attn[l][h][q][k]);
  }
  return ws.length >= 2 ? ws.reduce((a, b) => a + b, 0) / ws.length : null;
}

function relBest(d: DecodeOut): number {
  let best = -Infinity;
  d.encoder_attn.forEach((heads, l) => heads.forEach((_, h) => {
    for (const rel of Object.keys(REL)) best = Math.max(best, relMean(d, l, h, rel) ?? -Infinity);
  }));
  return best;
}

/** The first output token's cross-attention row in the head the sentence names. */
async function crossRow(v: V, c: Seq2SeqClaimContext) {
  const d = await decodeShown(c);
  const row = d.steps[0]?.cross_attn[num(v.l)]?.[num(v.h)] ?? [];
  return { d, row, j: row.indexOf(Math.max(...row)) };
}

const crossFacts = (v: V, c: Seq2SeqClaimContext, x: Awaited<ReturnType<typeof crossRow>>): [boolean, string][] => [
  [num(v.l) === c.focus.decLayer && num(v.h) === c.focus.decHead, `the view showed layer ${c.focus.decLayer}, head ${c.focus.decHead}`],
  [c.focus.shown >= 1, "the map showed no row"],
  [x.row.length > 0 && num(v.j) === x.j && same(num(v.w), x.row[x.j]), `the row's largest weight is ${x.row[x.j]} at ${x.j}`],
  [v.src.raw === x.d.src_tokens[x.j] && v.out.raw === x.d.steps[0]?.token, "the tokens quoted are not the first step's"],
];

/** The compare answer for the reference the page had, and where free running leaves it. */
async function comparison(c: Seq2SeqClaimContext): Promise<{ cmp: CompareOut; N: number }> {
  const cmp = await c.compare(c.focus.reference.trim() || null);
  return { cmp, N: cmp.gold_tokens.length + 1 };
}

/** The positions after the divergence that are fed the reference, and how many of them teacher forcing gets right. */
function afterDivergence(cmp: CompareOut, N: number) {
  const j = cmp.first_divergence ?? N;
  const later = cmp.steps.filter((s) => s.step > j && s.step < N);
  return { j, later, right: later.filter((s) => s.teacher_token === s.gold).length };
}

/** True when the server refuses to compare this source with `target` (null: the task's own answer). */
async function refused(c: Seq2SeqClaimContext, target: string | null): Promise<true | string> {
  try {
    const cmp = await c.compare(target);
    return `the server compared it with ${cmp.target}`;
  } catch (e) {
    return e instanceof ApiError && e.status === 400 ? true : `the request failed otherwise: ${String(e)}`;
  }
}

async function leftAt(v: V, c: Seq2SeqClaimContext) {
  const { cmp, N } = await comparison(c);
  const j = cmp.first_divergence;
  const st = j === null ? null : cmp.steps[j];
  const facts: [boolean, string][] = [
    [j !== null && num(v.s) === j + 1, `free running leaves the reference at ${j === null ? "no step" : `step ${j + 1}`}`],
    [v.ref.raw === cmp.target, `the reference was ${cmp.target}`],
    [!!st && v.own.raw === st.free_token && v.gold.raw === st.gold,
      `at that step the model writes ${st?.free_token}, the reference has ${st?.gold}`],
    // teacher forcing, fed the same prefix there, predicts what free running wrote: the two inputs are equal up to j
    [!!st && st.teacher_token === st.free_token, "teacher forcing and free running disagree at the step where they part"],
  ];
  return { cmp, N, facts };
}

/** The greedy decode and the wider beams the page compares it with. */
async function beams(c: Seq2SeqClaimContext) {
  const widths = [1, 2, 3, 4];
  const runs = await Promise.all(widths.map((b) => c.decode(b)));
  const key = (d: DecodeOut) => d.tokens.join("\u0000");
  const greedy = runs[0];
  const differing = runs.slice(1).find((d) => key(d) !== key(greedy) || Math.abs(d.score - greedy.score) > 5e-4) ?? null;
  return { greedy, runs, differing };
}

async function ceiling(v: V, c: Seq2SeqClaimContext) {
  const d = await decodeShown(c);
  const V = d.tgt_vocab_size;
  const ceil = 0.9 + 0.1 / V;
  const p0 = d.steps[0].prob;
  return { p0, ceil, facts: [
    [num(v.v) === V, `the target vocabulary has ${V} tokens`],
    [same(num(v.ceil), ceil), `0.9 + 0.1/${V} = ${ceil}`],
    [same(num(v.p0), p0), `the first step gives ${p0}`],
  ] as [boolean, string][] };
}

async function encoderPositions(c: Seq2SeqClaimContext) {
  const d = await decodeShown(c);
  const P = await c.positions(c.focus.nPos);
  return { d, P };
}

async function embeddingFacts(v: V, c: Seq2SeqClaimContext) {
  const d = await decodeShown(c);
  const raw = norm(d.source!.embed[0]) / Math.sqrt(d.d_model);
  const pe = Math.sqrt(d.d_model / 2);
  const facts: [boolean, string][] = [
    [v.tok.raw === d.src_tokens[0], "not the first source token"],
    [same(num(v.scale), Math.sqrt(d.d_model)) && num(v.d) === d.d_model, `√${d.d_model} = ${Math.sqrt(d.d_model)}`],
    [same(num(v.raw), raw), `the row before the factor has length ${raw}`],
    [same(num(v.scaled), norm(d.source!.embed[0])), `the scaled row has length ${norm(d.source!.embed[0])}`],
    // "every positional encoding has length √(d_model/2)": each row of the source's encoding
    [d.source!.pos_encoding.every((r) => Math.abs(norm(r) - pe) < 1e-4) && same(num(v.pe), norm(d.source!.pos_encoding[0])),
      `positional encodings are not all of length √(d/2) = ${pe}`],
  ];
  return { raw, pe, scaled: norm(d.source!.embed[0]), facts };
}

export const CLAIMS: Partial<Record<MessageKey, Check>> = {
  // -- the model -------------------------------------------------------------------------------------------
  "lesson.seq2seq.task.smaller": async (v, ctx) => {
    const d = await decodeShown(s2sOf(ctx));
    return all([d.n_params < 65e6, `${d.n_params} parameters is not fewer than the paper's 65 million`],
      [Math.abs(65e6 / d.n_params - num(v.times)) <= 0.5, `65 million / ${d.n_params} = ${65e6 / d.n_params}`]);
  },
  "lesson.seq2seq.task.larger": async (v, ctx) => {
    const d = await decodeShown(s2sOf(ctx));
    return all([d.n_params >= 65e6, `${d.n_params} parameters is fewer than the paper's 65 million`],
      [Math.abs(d.n_params / 65e6 - num(v.times)) <= 0.01 * num(v.times), `${d.n_params} / 65 million`]);
  },
  "lesson.seq2seq.why.cheaper": async (v, ctx) => {
    const d = await decodeShown(s2sOf(ctx));
    const n = d.src_tokens.length;
    return all([num(v.n) === n && num(v.d) === d.d_model, `n = ${n}, d = ${d.d_model}`], [n < d.d_model, `${n} ≥ ${d.d_model}`]);
  },
  "lesson.seq2seq.why.dearer": async (v, ctx) => {
    const d = await decodeShown(s2sOf(ctx));
    const n = d.src_tokens.length;
    return all([num(v.n) === n && num(v.d) === d.d_model, `n = ${n}, d = ${d.d_model}`], [n >= d.d_model, `${n} < ${d.d_model}`]);
  },

  // -- embeddings --------------------------------------------------------------------------------------
  "lesson.seq2seq.cosine.pair": async (v, ctx) => {
    const { pairs } = cosines(await decodeShown(s2sOf(ctx)));
    if (!pairs.length) return "the source has fewer than two distinct tokens";
    const top = pairs.reduce((x, y) => (y.cos > x.cos ? y : x));
    const quoted = pairs.find((p) => (p.a === v.a.raw && p.b === v.b.raw) || (p.a === v.b.raw && p.b === v.a.raw));
    return all([!!quoted && same(quoted.cos, top.cos), `the most alike pair is ${top.a}, ${top.b} (cos ${top.cos})`],
      [same(num(v.cos), top.cos) && same(num(v.la) * num(v.lb), top.la * top.lb), "the cosine or the lengths differ"],
      // the identity the sentence shows: the dot product is the cosine times the two lengths
      [same(num(v.dot), top.dot) && Math.abs(top.dot - top.cos * top.la * top.lb) < 1e-6 * Math.max(1, Math.abs(top.dot)),
        `the dot product is ${top.dot}`]);
  },
  "lesson.seq2seq.cosine.orthogonal": async (v, ctx) => {
    const { pairs } = cosines(await decodeShown(s2sOf(ctx)));
    const cs = pairs.map((p) => p.cos);
    return all([pairs.length > 0 && cs.every((x) => Math.abs(x) <= 0.3), `cosines run from ${Math.min(...cs)} to ${Math.max(...cs)}`],
      [same(num(v.lo), Math.min(...cs)) && same(num(v.hi), Math.max(...cs)), "the range quoted is not the cosines'"]);
  },
  "lesson.seq2seq.cosine.spread": async (v, ctx) => {
    const { pairs } = cosines(await decodeShown(s2sOf(ctx)));
    const cs = pairs.map((p) => p.cos);
    return all([cs.some((x) => Math.abs(x) > 0.3), `every cosine is within ±0.3 (${Math.min(...cs)} … ${Math.max(...cs)})`],
      [same(num(v.lo), Math.min(...cs)) && same(num(v.hi), Math.max(...cs)), "the range quoted is not the cosines'"]);
  },
  "lesson.seq2seq.cosine.oneOrthogonal": async (_v, ctx) => {
    const { pairs } = cosines(await decodeShown(s2sOf(ctx)));
    return all([pairs.length === 1 && Math.abs(pairs[0].cos) <= 0.3, `${pairs.length} pairs, cosines ${pairs.map((p) => p.cos)}`]);
  },
  "lesson.seq2seq.cosine.oneApart": async (_v, ctx) => {
    const { pairs } = cosines(await decodeShown(s2sOf(ctx)));
    return all([pairs.length === 1 && Math.abs(pairs[0].cos) > 0.3, `${pairs.length} pairs, cosines ${pairs.map((p) => p.cos)}`]);
  },
  "lesson.seq2seq.cosine.one": async (v, ctx) => {
    const d = await decodeShown(s2sOf(ctx));
    const distinct = new Set(d.src_tokens);
    return all([distinct.size === 1 && distinct.has(String(v.a.raw)), `the source has ${distinct.size} distinct tokens`]);
  },
  "lesson.seq2seq.embedding.vocabDiffer": async (v, ctx) => {
    const c = s2sOf(ctx);
    const [d, tasks] = await Promise.all([decodeShown(c), c.tasks()]);
    const typed = tasks.tasks.find((t) => t.name === c.task)?.src_vocab.length;
    return all([num(v.vs) === d.src_vocab_size && num(v.vt) === d.tgt_vocab_size, "not the model's vocabulary sizes"],
      [typed === undefined || typed + 3 === d.src_vocab_size, `the task's ${typed} typeable tokens and 3 specials`],
      [d.src_vocab_size !== d.tgt_vocab_size, "the two vocabularies have the same size"]);
  },
  "lesson.seq2seq.embedding.vocabSame": async (v, ctx) => {
    const c = s2sOf(ctx);
    const [d, tasks] = await Promise.all([decodeShown(c), c.tasks()]);
    const typed = tasks.tasks.find((t) => t.name === c.task)?.src_vocab.length;
    return all([num(v.vs) === d.src_vocab_size, "not the model's vocabulary size"],
      [typed === undefined || typed + 3 === d.src_vocab_size, `the task's ${typed} typeable tokens and 3 specials`],
      [d.src_vocab_size === d.tgt_vocab_size, `${d.src_vocab_size} and ${d.tgt_vocab_size} tokens`]);
  },
  "lesson.seq2seq.embedding.scale": async (v, ctx) => {
    const e = await embeddingFacts(v, s2sOf(ctx));
    return all(...e.facts, [same(num(v.ratio), e.pe / e.raw), `√(d/2) / raw = ${e.pe / e.raw}`],
      [e.pe / e.raw >= 2, `before the factor the row (${e.raw}) is not much shorter than the encoding (${e.pe})`],
      [e.scaled / e.pe >= 0.5 && e.scaled / e.pe <= 2, `after it (${e.scaled}) it is not of the encoding's order (${e.pe})`]);
  },
  "lesson.seq2seq.embedding.scaleOther": async (v, ctx) => all(...(await embeddingFacts(v, s2sOf(ctx))).facts),

  // -- positions ------------------------------------------------------------------------------------------
  "lesson.seq2seq.sinusoids.dots": async (v, ctx) => {
    const { P } = await encoderPositions(s2sOf(ctx));
    const E = P.encoding;
    const a = dot(E[2], E[4]), b = dot(E[12], E[14]), c = dot(E[2], E[12]);
    return all([same(num(v.a), P.similarity[2][4]) && Math.abs(num(v.a) - a) < 1e-3, `PE[2]·PE[4] = ${a}`],
      [same(num(v.b), P.similarity[12][14]) && Math.abs(num(v.b) - b) < 1e-3, `PE[12]·PE[14] = ${b}`],
      [same(num(v.c), P.similarity[2][12]) && Math.abs(num(v.c) - c) < 1e-3, `PE[2]·PE[12] = ${c}`],
      [Math.abs(a - b) < 1e-3 * Math.abs(a), `${a} and ${b} differ`], [c < a, `${c} is not smaller than ${a}`]);
  },
  "lesson.seq2seq.sinusoids.dotsNot": async (v, ctx) => {
    const { P } = await encoderPositions(s2sOf(ctx));
    const E = P.encoding;
    const a = dot(E[2], E[4]), b = dot(E[12], E[14]), c = dot(E[2], E[12]);
    return all([same(num(v.a), P.similarity[2][4]) && same(num(v.b), P.similarity[12][14])
      && same(num(v.c), P.similarity[2][12]), "not the table's dot products"],
      [Math.abs(a - b) < 1e-3 * Math.abs(a), `${a} and ${b} differ`], [c >= a, `${c} is smaller than ${a}`]);
  },
  "lesson.seq2seq.beyond.past": async (v, ctx) => {
    const { d, P } = await encoderPositions(s2sOf(ctx));
    const pe = Math.sqrt(P.d_model / 2);
    return all([num(v.t) === P.trained_length && P.trained_length! >= d.max_src_len,
      `trained on ${P.trained_length} positions (sources up to ${d.max_src_len})`],
    [num(v.n) === P.n_positions && P.n_positions > P.trained_length!, `the table has ${P.n_positions} positions`],
    // "the waves carry on": the rows past the trained length are sinusoids of the same length
    [P.encoding.slice(P.trained_length!).every((r) => Math.abs(norm(r) - pe) < 1e-3), "rows past the line are not sinusoids"]);
  },
  "lesson.seq2seq.beyond.within": async (v, ctx) => {
    const { P } = await encoderPositions(s2sOf(ctx));
    return all([num(v.t) === P.trained_length, `trained on ${P.trained_length} positions`],
      [num(v.n) === P.n_positions && P.n_positions <= P.trained_length!, `the table has ${P.n_positions} positions`]);
  },

  // -- the encoder ---------------------------------------------------------------------------------------------
  "lesson.seq2seq.encoder.later": async (v, ctx) => {
    const c = s2sOf(ctx);
    const d = await decodeShown(c);
    const [l, h] = [num(v.l), num(v.h)];
    const b = laterMax(d, l, h);
    return all([l === c.focus.encLayer && h === c.focus.encHead, `the view showed layer ${c.focus.encLayer}, head ${c.focus.encHead}`],
      [num(v.ki) > num(v.qi), "the key is not after the query"],
      [same(num(v.w), d.encoder_attn[l][h][num(v.qi)][num(v.ki)]), "not that cell's weight"],
      [same(num(v.w), b.w), `the head's largest weight to a later token is ${b.w}`], [b.w >= 0.1, `only ${b.w}`],
      [v.q.raw === d.src_tokens[num(v.qi)] && v.k.raw === d.src_tokens[num(v.ki)], "not the tokens at those positions"]);
  },
  "lesson.seq2seq.encoder.laterSmall": async (v, ctx) => {
    const c = s2sOf(ctx);
    const d = await decodeShown(c);
    const here = laterMax(d, num(v.l), num(v.h));
    const cell = d.encoder_attn[num(v.bl)][num(v.bh)][num(v.qi)][num(v.ki)];
    return all([num(v.l) === c.focus.encLayer && num(v.h) === c.focus.encHead, "not the head the view showed"],
      [same(num(v.w), here.w) && here.w < 0.1, `the head's largest weight to a later token is ${here.w}`],
      [num(v.ki) > num(v.qi) && same(num(v.bw), cell) && cell >= 0.1, `that cell of layer ${num(v.bl)}, head ${num(v.bh)} is ${cell}`],
      [v.q.raw === d.src_tokens[num(v.qi)] && v.k.raw === d.src_tokens[num(v.ki)], "not the tokens at those positions"]);
  },
  "lesson.seq2seq.encoder.laterNone": async (v, ctx) => {
    const d = await decodeShown(s2sOf(ctx));
    const b = globalLaterMax(d);
    return all([d.src_tokens.length > 1, "a single token"], [same(num(v.w), b.w) && b.w < 0.1, `the largest is ${b.w}`]);
  },
  "lesson.seq2seq.encoder.single": async (v, ctx) => {
    const c = s2sOf(ctx);
    const d = await decodeShown(c);
    return all([d.src_tokens.length === 1, `${d.src_tokens.length} tokens`],
      [same(num(v.w), d.encoder_attn[c.focus.encLayer][c.focus.encHead][0][0]) && Math.abs(num(v.w) - 1) < 1e-5,
        "a lone token's weight on itself is 1"]);
  },
  "lesson.seq2seq.heads.position": async (v, ctx) => {
    const d = await decodeShown(s2sOf(ctx));
    const m = relMean(d, num(v.l), num(v.h), String(v.rel.raw));
    const best = relBest(d);
    return all([m !== null && same(num(v.w), m), `that head's mean weight there is ${m}`],
      [m !== null && same(m, best), `another head or position holds more: ${best}`], [(m ?? 0) >= 0.5, `${m} is under half`]);
  },
  "lesson.seq2seq.heads.mixed": async (v, ctx) => {
    const d = await decodeShown(s2sOf(ctx));
    const m = relMean(d, num(v.l), num(v.h), String(v.rel.raw));
    const best = relBest(d);
    return all([m !== null && same(num(v.w), m) && same(m, best), `the most any head holds is ${best}`],
      [best < 0.5, `a head holds ${best}`]);
  },
  "lesson.seq2seq.heads.single": async (_v, ctx) => {
    const d = await decodeShown(s2sOf(ctx));
    return all([d.src_tokens.length === 1, `${d.src_tokens.length} source tokens`]);
  },

  // -- the decoder --------------------------------------------------------------------------------------------
  "lesson.seq2seq.start.stops": async (v, ctx) => {
    const d = await decodeShown(s2sOf(ctx));
    return all([d.finished && d.steps.at(-1)?.token === "</s>", "decoding did not end with </s>"],
      [num(v.n) === d.steps.length, `${d.steps.length} steps`],
      [num(v.max) === d.max_output_len && d.steps.length <= d.max_output_len, `the limit is ${d.max_output_len}`]);
  },
  "lesson.seq2seq.start.limit": async (v, ctx) => {
    const d = await decodeShown(s2sOf(ctx));
    return all([!d.finished && !d.steps.some((s) => s.token === "</s>"), "it wrote </s>"],
      [num(v.n) === d.steps.length && d.steps.length === d.max_output_len, `${d.steps.length} steps of ${d.max_output_len}`],
      [num(v.max) === d.max_output_len, `the limit is ${d.max_output_len}`]);
  },
  "lesson.seq2seq.cross.sharp": async (v, ctx) => {
    const c = s2sOf(ctx);
    const x = await crossRow(v, c);
    return all(...crossFacts(v, c, x), [x.row[x.j] >= 0.5, `the largest weight is ${x.row[x.j]}, under half`]);
  },
  "lesson.seq2seq.cross.spread": async (v, ctx) => {
    const c = s2sOf(ctx);
    const x = await crossRow(v, c);
    return all(...crossFacts(v, c, x), [x.row[x.j] < 0.5, `the largest weight is ${x.row[x.j]}`]);
  },

  // -- teacher forcing, free running ------------------------------------------------------------------------
  "lesson.seq2seq.tf.agree": async (v, ctx) => {
    const { cmp, N } = await comparison(s2sOf(ctx));
    return all([v.ref.raw === cmp.target, `the reference was ${cmp.target}`],
      [cmp.first_divergence === null && cmp.free_correct && cmp.free_text === cmp.target, `free running wrote ${cmp.free_text}`],
      [num(v.n) === N && cmp.teacher_correct_steps === N, `teacher forcing got ${cmp.teacher_correct_steps} of ${N}`]);
  },
  "lesson.seq2seq.tf.noReference": async (_v, ctx) => refused(s2sOf(ctx), null),
  "lesson.seq2seq.tf.refused": async (v, ctx) => {
    const r = await refused(s2sOf(ctx), String(v.ref.raw));
    return r === true && v.ref.raw !== s2sOf(ctx).focus.reference.trim() ? "not the reference the page had" : r;
  },
  "lesson.seq2seq.tf.leave": async (v, ctx) => {
    const { cmp, N, facts } = await leftAt(v, s2sOf(ctx));
    const { later, right } = afterDivergence(cmp, N);
    return all(...facts, [num(v.m) === later.length && later.length > 0, `${later.length} later positions`],
      [num(v.r) === right, `teacher forcing predicts ${right} of them right`], [v.free.raw === cmp.free_text, `free running wrote ${cmp.free_text}`]);
  },
  "lesson.seq2seq.tf.last": async (v, ctx) => {
    const { cmp, N, facts } = await leftAt(v, s2sOf(ctx));
    return all(...facts, [afterDivergence(cmp, N).later.length === 0, "positions come after it"]);
  },
  "lesson.seq2seq.tf.recovers": async (_v, ctx) => {
    const { cmp, N } = await comparison(s2sOf(ctx));
    const { later, right } = afterDivergence(cmp, N);
    return all([cmp.first_divergence !== null && later.length > 0, "no later positions after a divergence"],
      [right === later.length, `teacher forcing misses ${later.length - right} of the ${later.length} later positions`]);
  },
  "lesson.seq2seq.tf.derails": async (v, ctx) => {
    const { cmp, N } = await comparison(s2sOf(ctx));
    const { later, right } = afterDivergence(cmp, N);
    return all([cmp.first_divergence !== null && right < later.length, "teacher forcing gets every later position right"],
      [num(v.miss) === later.length - right, `it misses ${later.length - right}`]);
  },

  // -- beam search -----------------------------------------------------------------------------------------
  "lesson.seq2seq.beam.same": async (v, ctx) => {
    const { greedy, runs, differing } = await beams(s2sOf(ctx));
    const pmin = Math.min(...greedy.steps.map((s) => s.prob));
    return all([differing === null, `beam ${differing?.beam} writes ${differing?.output} (${differing?.score})`],
      [num(v.maxb) === runs.at(-1)!.beam, `beams up to ${runs.at(-1)!.beam} were compared`],
      [v.out.raw === greedy.output && same(num(v.score), greedy.score), `greedy writes ${greedy.output} (${greedy.score})`],
      [same(num(v.pmin), pmin), `the least sure greedy step gives ${pmin}`]);
  },
  "lesson.seq2seq.beam.differs": async (v, ctx) => {
    const { greedy, differing } = await beams(s2sOf(ctx));
    return all([!!differing && num(v.b) === differing.beam, `the narrowest beam that differs is ${differing?.beam ?? "none"}`],
      [!!differing && v.bout.raw === differing.output && same(num(v.bscore), differing.score), "not that beam's output"],
      [v.gout.raw === greedy.output && same(num(v.gscore), greedy.score), "not greedy's output"],
      [!!differing && differing.score > greedy.score, "the beam's whole is not more probable"]);
  },
  "lesson.seq2seq.beam.differsLower": async (v, ctx) => {
    const { greedy, differing } = await beams(s2sOf(ctx));
    return all([!!differing && num(v.b) === differing.beam, `the narrowest beam that differs is ${differing?.beam ?? "none"}`],
      [!!differing && v.bout.raw === differing.output && same(num(v.bscore), differing.score), "not that beam's output"],
      [v.gout.raw === greedy.output && same(num(v.gscore), greedy.score), "not greedy's output"],
      [!!differing && differing.score <= greedy.score, "the beam's whole is more probable"]);
  },

  // -- training ---------------------------------------------------------------------------------------------
  "lesson.seq2seq.training.near": async (v, ctx) => {
    const { p0, ceil, facts } = await ceiling(v, s2sOf(ctx));
    return all(...facts, [Math.abs(p0 - ceil) <= 0.03, `${p0} is not near ${ceil}`]);
  },
  "lesson.seq2seq.training.below": async (v, ctx) => {
    const { p0, ceil, facts } = await ceiling(v, s2sOf(ctx));
    return all(...facts, [p0 < ceil - 0.03, `${p0} is not well below ${ceil}`]);
  },
  "lesson.seq2seq.training.above": async (v, ctx) => {
    const { p0, ceil, facts } = await ceiling(v, s2sOf(ctx));
    return all(...facts, [p0 > ceil + 0.03, `${p0} is not above ${ceil}`]);
  },
};
