// What each claim of the Llama-family chapter (src/lessons/modern.ts) means, checked on numbers fetched here: the
// model's description from /api/models (not the trace the lesson read), its weights from /api/weights, and the
// tensors of the text again from /api/tensors. Rotations, norms, SiLU and the widths are recomputed from those.
import { api } from "../../src/lib/client";
import type { ModelConfigOut, TensorSpec } from "../../src/lib/generated/api";
import type { MessageKey } from "../../src/lib/i18n";
import type { Value } from "../../src/lib/lesson";
import { decodeTensor } from "../../src/lib/tensor";
import type { Check, ClaimContext } from "./claims";

const num = (v: Value | undefined) => Number(v?.raw);
/** `shown` agrees with `x` to the 3 significant digits prose carries (or to `abs` near zero). */
const near = (shown: number, x: number, rel = 6e-3, abs = 1e-6) => Math.abs(shown - x) <= Math.max(abs, rel * Math.abs(x));
const fail = (what: string): string => what;

/** The model as /api/models describes it (a request of its own). */
async function described(ctx: ClaimContext): Promise<ModelConfigOut> {
  const info = await api.model(ctx.trace.model);
  if (!info.config) throw new Error(`/api/models/${ctx.trace.model} has no config`);
  return info.config;
}

/** Whether the model has the weight `name` (the server refuses the names a model lacks). */
async function hasWeight(ctx: ClaimContext, name: string): Promise<boolean> {
  try {
    await api.weights({ model: ctx.trace.model, tensors: [{ name }] });
    return true;
  } catch {
    return false;
  }
}

async function weightSize(ctx: ClaimContext, name: string): Promise<number> {
  const out = await api.weights({ model: ctx.trace.model, tensors: [{ name, dtype: "float32" }] });
  return decodeTensor(out.tensors[0]).data.length;
}

const at = (ctx: ClaimContext, name: string, extra: Partial<TensorSpec> = {}) =>
  ctx.tensor({ name, position: ctx.focus.pos, ...extra });
const block = (ctx: ClaimContext, s: string) => `blocks.${ctx.focus.layer}.${s}`;

async function kvHeads(ctx: ClaimContext): Promise<Float32Array> {
  return (await ctx.tensor({ name: block(ctx, "attn.kv_head") })).data;
}

async function gqaCheck(v: Record<string, Value>, ctx: ClaimContext, shares: boolean): Promise<true | string> {
  const c = await described(ctx), kv = await kvHeads(ctx), G = new Set(kv).size, H = kv.length;
  if (H !== c.n_head || G !== (c.n_kv_heads || c.n_head)) return fail(`kv_head has ${H} heads on ${G} key/value heads, the config ${c.n_head} on ${c.n_kv_heads}`);
  if (shares !== G < H) return fail(`${H} query heads on ${G} key/value heads`);
  if ("kv" in v && num(v.kv) !== G) return fail(`says ${v.kv.v} key/value heads, the trace has ${G}`);
  if ("per" in v && shares && num(v.per) !== H / G) return fail(`says ${v.per.v} per group, ${H / G}`);
  return true;
}

async function biasCheck(ctx: ClaimContext): Promise<{ qkv: boolean; other: boolean }> {
  const [q, k, vb, o, gate, up, down] = await Promise.all(["attn.b_Q", "attn.b_K", "attn.b_V", "attn.b_O", "mlp.b_gate",
    "mlp.b_in", "mlp.b_out"].map((s) => hasWeight(ctx, `blocks.0.${s}`)));
  return { qkv: q && k && vb, other: o || gate || up || down };
}

async function angles(ctx: ClaimContext) {
  const a = await ctx.tensor({ name: "rope.angles" });
  const [T, R] = a.shape;
  return { a, T, R, row: (p: number) => a.data.subarray(p * R, (p + 1) * R),
    omega: T >= 2 ? a.data.slice(R, 2 * R) : null };
}

/** The Llama family's rotation (Hugging Face's rotate_half pairing: dimension i with i + Dh/2). */
function turned(x: ArrayLike<number>, angle: ArrayLike<number>): Float64Array {
  const R = x.length / 2, out = new Float64Array(x.length);
  for (let i = 0; i < R; i++) {
    const c = Math.cos(angle[i]), s = Math.sin(angle[i]);
    out[i] = x[i] * c - x[i + R] * s;
    out[i + R] = x[i + R] * c + x[i] * s;
  }
  return out;
}
const dot = (a: ArrayLike<number>, b: ArrayLike<number>) => { let s = 0; for (let i = 0; i < a.length; i++) s += a[i] * b[i]; return s; };

/** The focus query and the key of position `j` (of the query head's key/value head), before rotation. */
async function qk(ctx: ClaimContext, j: number) {
  const q = (await at(ctx, block(ctx, "attn.q"), { head: ctx.focus.head })).data;
  const k = await ctx.tensor({ name: block(ctx, "attn.k"), position: j });
  const g = (await kvHeads(ctx))[ctx.focus.head], dh = q.length;
  return { q, k: k.data.subarray(g * dh, (g + 1) * dh) };
}

async function swigluUnit(ctx: ClaimContext) {
  const [gate, up, act, post] = await Promise.all(["mlp.gate", "mlp.up", "mlp.act", "mlp.post"].map((s) => at(ctx, block(ctx, s))));
  let u = 0;
  for (let i = 1; i < post.data.length; i++) if (Math.abs(post.data[i]) > Math.abs(post.data[u])) u = i;
  return { u, g: gate.data[u], up: up.data[u], act: act.data[u], h: post.data[u] };
}

async function mlpWidth(ctx: ClaimContext): Promise<{ D: number; M: number }> {
  const c = await described(ctx);
  const M = (await api.weights({ model: ctx.trace.model, tensors: [{ name: "blocks.0.mlp.W_gate", row: 0 }] })).tensors[0].shape[0];
  return { D: c.n_embd, M };
}

const bytesOf = (dtype: string | null | undefined) => (dtype === "float32" ? 4 : dtype === "float64" ? 8 : 2);

async function nParams(ctx: ClaimContext): Promise<number> {
  const n = (await api.model(ctx.trace.model)).n_params;
  if (n == null) throw new Error("/api/models does not give the parameter count");
  return n;
}

export const CLAIMS: Partial<Record<MessageKey, Check>> = {
  "lesson.modern.intro.gqa": (v, ctx) => gqaCheck(v, ctx, true),
  "lesson.modern.intro.mha": (v, ctx) => gqaCheck(v, ctx, false),
  "lesson.modern.intro.changedGqa": (v, ctx) => gqaCheck(v, ctx, true),
  "lesson.modern.intro.changedNoGqa": (v, ctx) => gqaCheck(v, ctx, false),
  "lesson.modern.gqa.mha": (v, ctx) => gqaCheck(v, ctx, false),
  "lesson.modern.bias.none": async (v, ctx) => {
    const b = await biasCheck(ctx);
    return !b.qkv && !b.other && v.qkv.raw === "false" ? true : fail(`the model has biases: ${JSON.stringify(b)}`);
  },
  "lesson.modern.bias.qkvOnly": async (v, ctx) => {
    const b = await biasCheck(ctx);
    return b.qkv && !b.other && v.qkv.raw === "true" ? true : fail(`biases: ${JSON.stringify(b)}`);
  },
  "lesson.modern.bias.more": async (_v, ctx) => ((await biasCheck(ctx)).other ? true : fail("no bias beyond queries, keys and values")),
  "lesson.modern.qkv.bias": async (v, ctx) => {
    if (!(await biasCheck(ctx)).qkv) return fail("no query/key/value bias among the weights");
    const n = (await Promise.all(["attn.b_Q", "attn.b_K", "attn.b_V"].map((s) => weightSize(ctx, `blocks.0.${s}`)))).reduce((a, b) => a + b);
    return n === num(v.n) ? true : fail(`the biases hold ${n} numbers, the text says ${v.n.v}`);
  },
  "lesson.modern.qkv.noBias": async (v, ctx) => (!(await biasCheck(ctx)).qkv && v.qkv.raw === "false" ? true
    : fail("the model has query/key/value biases")),
  "lesson.modern.qkv.otherBias": async (_v, ctx) => ((await biasCheck(ctx)).other ? true : fail("no output or MLP bias")),
  "lesson.modern.qkv.noOtherBias": async (_v, ctx) => {
    if ((await biasCheck(ctx)).other) return fail("the model has an output or MLP bias");
    const c = await described(ctx);
    return c.capabilities.norm === "rms" ? true : fail(`its norms are ${c.capabilities.norm}, with a shift`);
  },
  "lesson.modern.noPos.same": async (v, ctx) => {
    const we = (await at(ctx, "embed.token")).data, x = (await at(ctx, "blocks.0.resid_pre")).data;
    if (num(v.id) !== ctx.trace.token_ids[ctx.focus.pos]) return fail(`row ${v.id.v} is not the focus token's id`);
    if (we.length !== x.length || we.some((a, i) => a !== x[i])) return fail("the vector entering block 0 differs from the embedding row");
    return near(num(v.a), we[0]) && near(num(v.b), x[0]) ? true : fail(`first numbers ${we[0]}, ${x[0]}`);
  },
  "lesson.modern.noPos.differs": async (_v, ctx) => {
    const we = (await at(ctx, "embed.token")).data, x = (await at(ctx, "blocks.0.resid_pre")).data;
    return we.length !== x.length || we.some((a, i) => a !== x[i]) ? true : fail("the two are equal");
  },
  "lesson.modern.rms.divides": async (v, ctx) => {
    const c = await described(ctx), x = (await at(ctx, block(ctx, "resid_pre"))).data;
    const r = Math.sqrt(x.reduce((s, a) => s + a * a, 0) / x.length + c.layer_norm_epsilon);
    if (num(v.layer) !== ctx.focus.layer) return fail(`block ${v.layer.v} is not the focus block ${ctx.focus.layer}`);
    return near(num(v.rms), r, 5e-3) ? true : fail(`√(mean(x²) + ε) = ${r}, the text says ${v.rms.v}`);
  },
  "lesson.modern.rms.noMean": async (v, ctx) => {
    const c = await described(ctx), x = (await at(ctx, block(ctx, "resid_pre"))).data;
    const n = (await at(ctx, block(ctx, "ln1.normalized"))).data;
    const mean = x.reduce((s, a) => s + a, 0) / x.length;
    const r = Math.sqrt(x.reduce((s, a) => s + a * a, 0) / x.length + c.layer_norm_epsilon);
    const worst = Math.max(...Array.from(x, (a, i) => Math.abs(n[i] - a / r)));
    if (worst > 1e-3 * Math.max(1, ...Array.from(n, Math.abs))) return fail(`normalized differs from x / rms by ${worst}: a mean was subtracted?`);
    return near(num(v.mean), mean, 6e-3, 1e-6) ? true : fail(`the mean is ${mean}, the text says ${v.mean.v}`);
  },
  "lesson.modern.ropeAngles.atZero": async (_v, ctx) => {
    const { row } = await angles(ctx);
    return ctx.focus.pos === 0 && row(0).every((a) => a === 0) ? true : fail("position 0's angles are not all 0");
  },
  "lesson.modern.ropeAngles.at": async (v, ctx) => {
    const { row, R, omega } = await angles(ctx), r = row(ctx.focus.pos);
    if (num(v.pos) !== ctx.focus.pos || num(v.last) !== R - 1) return fail("wrong position or pair");
    if (omega && (Math.max(...omega) !== omega[0] || Math.min(...omega) !== omega[R - 1])) return fail("pair 0 is not the fastest or the last not the slowest");
    return near(num(v.fast), r[0]) && near(num(v.slow), r[R - 1]) ? true : fail(`angles ${r[0]}, ${r[R - 1]}`);
  },
  "lesson.modern.ropeAngles.scaled": async (v, ctx) => {
    const c = await described(ctx), { omega, R } = await angles(ctx);
    if (!c.rope_scaling || !omega) return fail("no rope scaling in the config, or no second position");
    const theta = c.rope_theta ?? 10000, formula = (i: number) => theta ** (-2 * i / c.head_dim);
    if (!near(omega[0], formula(0), 1e-3)) return fail(`the fastest pair turns ${omega[0]}, the formula ${formula(0)}`);
    return near(num(v.ratio), formula(R - 1) / omega[R - 1]) && formula(R - 1) / omega[R - 1] > 1 ? true
      : fail(`the slowest pair is ${formula(R - 1) / omega[R - 1]} times slower than the formula`);
  },
  "lesson.modern.ropeAngles.unscaled": async (_v, ctx) => {
    const c = await described(ctx), { omega } = await angles(ctx);
    if (!omega) return fail("no second position");
    const theta = c.rope_theta ?? 10000;
    const off = Array.from(omega).findIndex((w, i) => !near(w, theta ** (-2 * i / c.head_dim), 1e-3));
    return off < 0 && !c.rope_scaling ? true : fail(`pair ${off} turns ${omega[off]}, not the formula's`);
  },
  "lesson.modern.ropeAngles.slowLong": async (v, ctx) => {
    const c = await described(ctx), { omega, R } = await angles(ctx);
    const period = (2 * Math.PI) / omega![R - 1];
    return period > c.block_size && near(num(v.period), period) && near(num(v.omega), omega![0]) ? true
      : fail(`one turn takes ${period} positions, the context is ${c.block_size}`);
  },
  "lesson.modern.ropeAngles.slowShort": async (v, ctx) => {
    const c = await described(ctx), { omega, R } = await angles(ctx);
    const period = (2 * Math.PI) / omega![R - 1];
    return period <= c.block_size && near(num(v.turns), c.block_size / period) && near(num(v.period), period) ? true
      : fail(`one turn takes ${period} positions, the context is ${c.block_size}`);
  },
  "lesson.modern.ropeRel.score": async (v, ctx) => {
    const j = ctx.focus.pos - num(v.distance);
    if (j < 0 || j >= ctx.focus.pos || num(v.key) !== ctx.trace.token_ids[j]) return fail(`no key ${v.key.v} ${v.distance.v} back`);
    const s = (await at(ctx, block(ctx, "attn.scores"), { head: ctx.focus.head })).data[j];
    const { q, k } = await qk(ctx, j), { row } = await angles(ctx);
    const mine = dot(turned(q, row(ctx.focus.pos)), turned(k, row(j)));
    return near(num(v.score), s) && near(mine, s, 1e-3, 1e-4) ? true : fail(`score ${s}, rotated q·k ${mine}`);
  },
  "lesson.modern.ropeRel.scoreSelf": async (v, ctx) => {
    const s = (await at(ctx, block(ctx, "attn.scores"), { head: ctx.focus.head })).data[ctx.focus.pos];
    return ctx.focus.pos === 0 && num(v.distance) === 0 && near(num(v.score), s) ? true : fail(`score ${s}`);
  },
  "lesson.modern.ropeRel.shifted": async (v, ctx) => {
    const j = Math.max(0, ctx.focus.pos - 1), s = num(v.shift), { omega } = await angles(ctx);
    if (!omega) return fail("no second position");
    const { q, k } = await qk(ctx, j);
    const ang = (p: number) => Float64Array.from(omega, (w) => p * w);
    const moved = dot(turned(q, ang(ctx.focus.pos + s)), turned(k, ang(j + s)));
    const real = (await at(ctx, block(ctx, "attn.scores"), { head: ctx.focus.head })).data[j];
    return near(num(v.moved), moved) && near(moved, real, 1e-3, 1e-3) ? true : fail(`shifted ${moved}, real ${real}`);
  },
  "lesson.modern.gqa.groups": async (v, ctx) => {
    const kv = await kvHeads(ctx), h = ctx.focus.head, g = kv[h];
    const mates = Array.from(kv).map((x, i) => (x === g ? i : -1)).filter((i) => i >= 0).join(", ");
    const G = new Set(kv).size;
    if (num(v.head) !== h || num(v.group) !== g || v.mates.raw !== mates) return fail(`head ${h} reads ${g}, shared by ${mates}`);
    // the group is the run of heads from {first} to {last}, none missing
    const f = num(v.first), l = num(v.last), run = Array.from({ length: l - f + 1 }, (_, i) => f + i).join(", ");
    if (run !== mates) return fail(`heads ${f} to ${l} are not the group ${mates}`);
    return G < kv.length && num(v.kv) === G && num(v.per) === kv.length / G ? true : fail(`${kv.length} heads on ${G}`);
  },
  "lesson.modern.kv.saves": async (v, ctx) => {
    const c = await described(ctx), G = c.n_kv_heads || c.n_head;
    const full = 2 * c.n_layer * c.n_head * c.head_dim * bytesOf(c.dtype) * c.block_size;
    return G < c.n_head && num(v.mha) === full && num(v.times) === c.n_head / G ? true : fail(`multi-head cache ${full}`);
  },
  "lesson.modern.kv.noSaving": async (_v, ctx) => {
    const c = await described(ctx);
    return (c.n_kv_heads || c.n_head) === c.n_head ? true : fail("the model shares key/value heads");
  },
  "lesson.modern.attn.onlySelf": async (v, ctx) => {
    const w = (await at(ctx, block(ctx, "attn.pattern"), { head: ctx.focus.head })).data;
    return ctx.focus.pos === 0 && near(num(v.weight), w[0]) && Math.abs(w[0] - 1) < 1e-3 ? true : fail(`weight ${w[0]}`);
  },
  "lesson.modern.attn.top": async (v, ctx) => {
    const w = (await at(ctx, block(ctx, "attn.pattern"), { head: ctx.focus.head })).data;
    const visible = Array.from(w.subarray(0, ctx.focus.pos + 1)), best = Math.max(...visible);
    const ids = visible.map((x, j) => (x === best ? ctx.trace.token_ids[j] : -1));
    return near(num(v.weight), best) && ids.includes(num(v.key)) ? true
      : fail(`the largest weight is ${best}, to ${ids.filter((i) => i >= 0)}`);
  },
  "lesson.modern.swiglu.unit": async (v, ctx) => {
    const s = await swigluUnit(ctx), sig = 1 / (1 + Math.exp(-s.g));
    if (num(v.unit) !== s.u) return fail(`the largest |h| is unit ${s.u}`);
    if (!near(s.act, s.g * sig, 5e-3, 1e-3) || !near(s.h, s.act * s.up, 5e-3, 1e-3)) return fail("h is not SiLU(g) × u");
    return near(num(v.g), s.g) && near(num(v.sigma), sig) && near(num(v.act), s.act) && near(num(v.up), s.up)
      && near(num(v.h), s.h) ? true : fail(`g ${s.g}, act ${s.act}, u ${s.up}, h ${s.h}`);
  },
  "lesson.modern.swiglu.amplifies": async (v, ctx) => {
    const s = await swigluUnit(ctx);
    return Math.abs(s.act) > 1 && near(num(v.act), s.act) ? true : fail(`SiLU(g) = ${s.act}`);
  },
  "lesson.modern.swiglu.damps": async (v, ctx) => {
    const s = await swigluUnit(ctx);
    return s.act >= 0 && s.act <= 1 && near(num(v.act), s.act) ? true : fail(`SiLU(g) = ${s.act}`);
  },
  "lesson.modern.swiglu.flips": async (v, ctx) => {
    const s = await swigluUnit(ctx);
    return s.act < 0 && near(num(v.act), s.act) ? true : fail(`SiLU(g) = ${s.act}`);
  },
  "lesson.modern.width.exact": async (v, ctx) => {
    const { D, M } = await mlpWidth(ctx);
    return M * 3 === 8 * D && num(v.m) === M ? true : fail(`h = ${M}, 8/3 d = ${(8 * D) / 3}`);
  },
  "lesson.modern.width.rounded": async (v, ctx) => {
    const { D, M } = await mlpWidth(ctx), k = num(v.mult), eight = (8 * D) / 3;
    return num(v.m) === M && M % k === 0 && M > eight && M - eight < k && near(num(v.eight), eight) && near(num(v.ratio), M / D)
      ? true : fail(`h = ${M} is not 8/3 d = ${eight} rounded up to a multiple of ${k}`);
  },
  "lesson.modern.width.other": async (v, ctx) => {
    const { D, M } = await mlpWidth(ctx), eight = (8 * D) / 3;
    // not 8/3 d, nor 8/3 d rounded up to the next multiple of 8 or more
    let rounded = false;
    for (let k = 8; k <= M; k *= 2) if (M % k === 0 && M >= eight && M - eight < k) rounded = true;
    return num(v.m) === M && M * 3 !== 8 * D && !rounded ? true : fail(`h = ${M} is 8/3 d = ${eight}, rounded`);
  },
  "lesson.modern.width.sameWeights": async (v, ctx) => {
    const { D, M } = await mlpWidth(ctx);
    return 3 * D * M === 8 * D * D && num(v.gated) === 3 * D * M ? true : fail(`${3 * D * M} vs ${8 * D * D}`);
  },
  "lesson.modern.width.fewer": async (v, ctx) => {
    const { D, M } = await mlpWidth(ctx);
    return 3 * D * M < 8 * D * D && num(v.gated) === 3 * D * M && num(v.gelu) === 8 * D * D ? true : fail(`${3 * D * M} vs ${8 * D * D}`);
  },
  "lesson.modern.width.more": async (v, ctx) => {
    const { D, M } = await mlpWidth(ctx);
    return 3 * D * M > 8 * D * D && num(v.gated) === 3 * D * M && num(v.gelu) === 8 * D * D ? true : fail(`${3 * D * M} vs ${8 * D * D}`);
  },
  "lesson.modern.unembed.tied": async (v, ctx) => {
    const c = await described(ctx), N = await nParams(ctx);
    return c.tie_word_embeddings && near(num(v.share), (c.vocab_size * c.n_embd) / N)
      ? true : fail(`tie_word_embeddings = ${c.tie_word_embeddings}`);
  },
  "lesson.modern.unembed.untied": async (v, ctx) => {
    const c = await described(ctx), N = await nParams(ctx);
    return !c.tie_word_embeddings && near(num(v.share), (c.vocab_size * c.n_embd) / N) ? true
      : fail(`tie_word_embeddings = ${c.tie_word_embeddings}`);
  },
  "lesson.modern.unembed.top": async (v, ctx) => {
    const last = ctx.trace.token_ids.length - 1;
    const logits = (await ctx.tensor({ name: "logits", position: last })).data;
    let best = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
    return best === num(v.token) && near(num(v.logit), logits[best], 1e-3) ? true : fail(`the top logit is ${logits[best]}, token ${best}`);
  },
  "lesson.modern.precision.file": async (v, ctx) => {
    const c = await described(ctx), N = await nParams(ctx);
    return c.file_dtype === v.file.raw && num(v.size) === N * bytesOf(c.file_dtype) && num(v.params) === N ? true
      : fail(`the file stores ${c.file_dtype}`);
  },
  "lesson.modern.precision.computeSame": async (v, ctx) => {
    const c = await described(ctx);
    return c.file_dtype === c.dtype && v.dtype.raw === c.dtype ? true : fail(`file ${c.file_dtype}, compute ${c.dtype}`);
  },
  "lesson.modern.precision.computeOther": async (v, ctx) => {
    const c = await described(ctx), N = await nParams(ctx);
    return c.file_dtype !== c.dtype && v.dtype.raw === c.dtype && num(v.size) === N * bytesOf(c.dtype) ? true
      : fail(`file ${c.file_dtype}, compute ${c.dtype}`);
  },
  "lesson.modern.precision.fileUnknown": async (_v, ctx) => ((await described(ctx)).file_dtype == null ? true
    : fail("the file's type is known")),
};
