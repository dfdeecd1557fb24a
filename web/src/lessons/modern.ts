// The tour chapter for the Llama family (Llama, Qwen2, Mistral): what changed between GPT-2 and today's open
// decoders, and why, one change per step in the order of the computation. Every value is the loaded model's own:
// its config and size from /api/models, or the tensors of the text on screen, fetched through the views' API. The
// model that runs is named with its sizes; GPT-2's and other models' figures are given as theirs. A sentence that
// depends on the numbers is a claim (checked by web/tests/lessons/claims.modern.ts) with the other wording beside
// it; a paper's finding names the paper. The words are in the catalogue under lesson.modern.*.
import type { ModelConfigOut, TensorSpec } from "../lib/generated/api";
import type { LLAMA_BLOCK_ACTIVATIONS, LLAMA_GLOBAL_ACTIVATIONS } from "../lib/generated/names";
import type { MessageKey } from "../lib/i18n";
import { claim, either, say, val, type Lesson, type LessonStep, type Sentence, type Text, type Value } from "../lib/lesson";
import { dec, int, pct, token, word } from "../lib/lessonFormat";
import { app } from "../lib/state.svelte";
import type { Tensor } from "../lib/tensor";
import { ropeDemo } from "../stages/ropeDemo.svelte";
import {
  argAbsMax, argBest, bytesOf, cfg, dot, ensureInfo, focusToken, info, nTok, showLoaded, sigmoid, size, tokenAt,
} from "./reader";

// -- names, checked against the Llama family's tables (a misspelt name is a type error) ---------------

type LlamaBlock = keyof typeof LLAMA_BLOCK_ACTIVATIONS;
type LlamaGlobal = keyof typeof LLAMA_GLOBAL_ACTIVATIONS;
const blk = (s: LlamaBlock, layer = app.layer) => `blocks.${layer}.${s}` as `blocks.${number}.${LlamaBlock}`;

/** A tensor of the current trace, as a lesson step asks for it (see `needs`). */
interface Spec extends TensorSpec { name: ReturnType<typeof blk> | LlamaGlobal }
const spec = (s: Spec): TensorSpec => s;
const get = (s: Spec): Tensor | undefined => app.tensor(s);

// -- values -----------------------------------------------------------------------------------------

/** A flag of the config, as the config writes it. */
const flag = (id: string, b: boolean): Value => val(id, String(b), String(b));

// -- rotary positions ------------------------------------------------------------------------------------

const anglesSpec = (): Spec => ({ name: "rope.angles", dtype: "float32" });

/** Radians per position of each pair: row 1 of the angles (row p holds p × ω); null with a single position. */
function frequencies(angles: Tensor): Float32Array | null {
  const [T, R] = angles.shape;
  return T < 2 ? null : angles.data.slice(R, 2 * R);
}

/** Rotate a head vector the way this family does: dimension i pairs with i + Dh/2, turned by angle[i]. */
export function rotate(x: ArrayLike<number>, angle: ArrayLike<number>): Float64Array {
  const R = x.length / 2, out = new Float64Array(x.length);
  for (let i = 0; i < R; i++) {
    const c = Math.cos(angle[i]), s = Math.sin(angle[i]);
    out[i] = x[i] * c - x[i + R] * s;
    out[i + R] = x[i + R] * c + x[i] * s;
  }
  return out;
}

/** How far the relative-distance step moves the query and the key together: the view's demonstration shows this
 *  shift (less where the context ends sooner), and the text follows the demonstration when the learner moves it. */
export const ROPE_SHIFT = 100;
const shiftFor = () => Math.max(0, Math.min(ropeDemo.s, (cfg()?.block_size ?? 1) - 1 - app.pos));

/** The key the relative-distance step compares the focus query with: the token before it (itself at position 0). */
const prevPos = () => Math.max(0, app.pos - 1);

const ropeSpecs = (): TensorSpec[] => [
  spec(anglesSpec()),
  spec({ name: blk("attn.q"), head: app.head, position: app.pos, dtype: "float32" }),
  spec({ name: blk("attn.k"), position: prevPos(), dtype: "float32" }),
  spec({ name: blk("attn.kv_head") }),
  spec({ name: blk("attn.scores"), head: app.head, position: app.pos, dtype: "float32" }),
];

// -- the steps ---------------------------------------------------------------------------------------

const SOURCE: Record<string, MessageKey> = {
  builtin: "lesson.modern.source.builtin", local: "lesson.modern.source.local", hub: "lesson.modern.source.hub",
};

function bigPicture(): Text {
  const c = cfg(), f = focusToken(), m = info();
  if (!c || !f || m?.n_params == null) return [];
  const H = c.n_head, G = c.n_kv_heads || H;
  const out: Text = [say("lesson.modern.intro.model", {
    name: word("model-name", app.trace!.model), source: say(SOURCE[m.source] ?? "lesson.modern.source.given"),
    type: word("model-type", c.model_type ?? c.family ?? ""), layers: int("n-layer", c.n_layer), heads: int("n-head", H),
    d: int("d-model", c.n_embd), params: int("n-params", m.n_params), ctx: int("ctx", c.block_size) })];
  out.push(either(G < H, "lesson.modern.intro.gqa", "lesson.modern.intro.mha",
    { kv: int("n-kv-heads", G), per: int("group-size", H / G) }));
  out.push(say("lesson.modern.intro.gpt2"));
  out.push(say("lesson.modern.intro.same"));
  out.push(say("lesson.modern.intro.changed"));
  out.push(either(G < H, "lesson.modern.intro.changedGqa", "lesson.modern.intro.changedNoGqa"));
  out.push(biases(c));
  out.push(say("lesson.modern.intro.follow", { token: f }));
  return out;
}

/** Which biases the model has, as one claim: none, on queries, keys and values only, or more. */
function biases(c: ModelConfigOut): Sentence {
  const qkv = c.qkv_bias ?? false, other = (c.out_bias ?? false) || (c.mlp_bias ?? false);
  return claim(!qkv && !other ? "lesson.modern.bias.none" : qkv && !other ? "lesson.modern.bias.qkvOnly"
    : "lesson.modern.bias.more", { qkv: flag("qkv-bias", qkv) });
}

function noPositionTable(): Text {
  const f = focusToken(), we = get({ name: "embed.token", position: app.pos, dtype: "float32" });
  const x = get({ name: blk("resid_pre", 0), position: app.pos, dtype: "float32" });
  if (!f || !we || !x) return [];
  const same = we.data.length === x.data.length && we.data.every((v, i) => v === x.data[i]);
  return [
    say("lesson.modern.noPos.gpt2"),
    either(same, "lesson.modern.noPos.same", "lesson.modern.noPos.differs", {
      id: int("focus-id", app.trace!.token_ids[app.pos]), token: f,
      a: dec("we-0", we.data[0], "emb-token"), b: dec("resid0-0", x.data[0], "emb-token") }),
    say("lesson.modern.noPos.why", { rope: say("lesson.modern.ropeAngles.title") }),
  ];
}

function rmsnorm(): Text {
  const c = cfg(), f = focusToken(), x = get({ name: blk("resid_pre"), position: app.pos, dtype: "float32" });
  const rms = get({ name: blk("ln1.rms"), dtype: "float32" });
  if (!c || !f || !x || !rms) return [];
  const mean = x.data.reduce((s, v) => s + v, 0) / x.data.length;
  return [
    claim("lesson.modern.rms.divides", { layer: int("layer", app.layer), token: f, rms: dec("rms", rms.data[app.pos], "ln-rms") }),
    claim("lesson.modern.rms.noMean", { mean: dec("mean", mean, "ln-cmp-mean") }),
    say("lesson.modern.rms.paper"),
  ];
}

function qkvBias(): Text {
  const c = cfg();
  if (!c) return [];
  const G = c.n_kv_heads || c.n_head, qkv = c.qkv_bias ?? false, other = (c.out_bias ?? false) || (c.mlp_bias ?? false);
  const vars = { type: word("model-type", c.model_type ?? c.family ?? ""), qkv: flag("qkv-bias", qkv),
    n: int("n-qkv-bias", c.n_head * c.head_dim + 2 * G * c.head_dim) };
  const out: Text = [say("lesson.modern.qkv.same", { dh: int("d-head", c.head_dim) })];
  out.push(either(qkv, "lesson.modern.qkv.bias", "lesson.modern.qkv.noBias", vars));
  out.push(either(other, "lesson.modern.qkv.otherBias", "lesson.modern.qkv.noOtherBias"));
  out.push(say(qkv ? "lesson.modern.qkv.qwen" : "lesson.modern.qkv.palm"));
  out.push(say("lesson.modern.qkv.next"));
  return out;
}

function ropeAngles(): Text {
  const c = cfg(), f = focusToken(), angles = get(anglesSpec());
  if (!c || !f || !angles) return [];
  const R = angles.shape[1], row = angles.data.subarray(app.pos * R, (app.pos + 1) * R), theta = c.rope_theta ?? 10000;
  const out: Text = [say("lesson.modern.ropeAngles.what", { dh: int("d-head", c.head_dim), pairs: int("n-pairs", R),
    theta: int("rope-theta", theta) })];
  out.push(app.pos === 0 ? claim("lesson.modern.ropeAngles.atZero", { token: f })
    : claim("lesson.modern.ropeAngles.at", { pos: int("pos", app.pos), token: f, fast: dec("angle-fast", row[0], "rope-angles"),
      slow: dec("angle-slow", row[R - 1], "rope-angles"), last: int("slow-pair", R - 1) }));
  const w = frequencies(angles);
  if (w) {
    const formula = theta ** (-2 * (R - 1) / c.head_dim);
    out.push(c.rope_scaling
      ? claim("lesson.modern.ropeAngles.scaled", { kind: word("rope-scaling", c.rope_scaling),
        ratio: dec("slow-ratio", formula / w[R - 1]) })
      : claim("lesson.modern.ropeAngles.unscaled"));
    const period = (2 * Math.PI) / w[R - 1];
    out.push(either(period > c.block_size, "lesson.modern.ropeAngles.slowLong", "lesson.modern.ropeAngles.slowShort", {
      omega: dec("omega-fast", w[0]), period: dec("slow-period", period), ctx: int("ctx", c.block_size),
      turns: dec("slow-turns", c.block_size / period) }));
  } else out.push(say("lesson.modern.ropeAngles.speeds"));
  out.push(say("lesson.modern.ropeAngles.pairing", { pairs: int("n-pairs", R) }));
  return out;
}

function ropeRelative(): Text {
  const c = cfg(), f = focusToken(), angles = get(anglesSpec());
  const q = get({ name: blk("attn.q"), head: app.head, position: app.pos, dtype: "float32" });
  const k = get({ name: blk("attn.k"), position: prevPos(), dtype: "float32" });
  const kvh = get({ name: blk("attn.kv_head") });
  const scores = get({ name: blk("attn.scores"), head: app.head, position: app.pos, dtype: "float32" });
  if (!c || !f || !angles || !q || !k || !kvh || !scores) return [];
  const w = frequencies(angles), j = prevPos(), g = kvh.data[app.head];
  const other = tokenAt("key-token", j)!;
  const out: Text = [say("lesson.modern.ropeRel.why")];
  out.push(claim(app.pos === j ? "lesson.modern.ropeRel.scoreSelf" : "lesson.modern.ropeRel.score", { head: int("head", app.head),
    token: f, key: other, distance: int("distance", app.pos - j), score: dec("score-real", scores.data[j], "rope-real") }));
  const s = shiftFor();
  if (w && s > 0) {
    const kg = k.data.subarray(g * c.head_dim, (g + 1) * c.head_dim);
    const at = (pos: number) => Float64Array.from(w, (x) => (pos + s) * x);
    out.push(claim("lesson.modern.ropeRel.shifted", { shift: int("shift", s),
      moved: dec("score-shifted", dot(rotate(q.data, at(app.pos)), rotate(kg, at(j))), "rope-shifted") }));
  }
  out.push(say("lesson.modern.ropeRel.matters"));
  return out;
}

function gqa(): Text {
  const c = cfg(), kvh = get({ name: blk("attn.kv_head") });
  if (!c || !kvh) return [];
  const H = c.n_head, G = c.n_kv_heads || H, g = kvh.data[app.head];
  const mates = Array.from(kvh.data).map((x, i) => (x === g ? i : -1)).filter((i) => i >= 0);
  if (G === H) return [claim("lesson.modern.gqa.mha", { heads: int("n-head", H) }), say("lesson.modern.gqa.newer")];
  return [
    claim("lesson.modern.gqa.groups", { heads: int("n-head", H), kv: int("n-kv-heads", G), per: int("group-size", H / G),
      head: int("head", app.head), group: int("kv-head", g), mates: val("group-heads", mates.join(", "), mates.join(", ")),
      first: int("group-first", mates[0], "gqa-groups"), last: int("group-last", mates[mates.length - 1], "gqa-groups") }),
    say("lesson.modern.gqa.why"),
  ];
}

function kvCache(): Text {
  const c = cfg();
  if (!c) return [];
  const H = c.n_head, G = c.n_kv_heads || H, b = bytesOf(c.dtype), perTok = 2 * c.n_layer * G * c.head_dim * b;
  const out: Text = [say("lesson.modern.kv.what")];
  out.push(say("lesson.modern.kv.cost", { layers: int("n-layer", c.n_layer), kv: int("n-kv-heads", G),
    dh: int("d-head", c.head_dim), bytes: int("bytes-per-number", b), dtype: word("dtype", c.dtype ?? "float32"),
    perToken: size("cache-per-token", perTok, "gqa-memory"), ctx: int("ctx", c.block_size),
    full: size("cache-full", perTok * c.block_size, "gqa-memory") }));
  out.push(either(G < H, "lesson.modern.kv.saves", "lesson.modern.kv.noSaving", { times: int("group-size", H / G),
    mha: size("cache-full-mha", perTok * c.block_size * (H / G), "gqa-memory"), heads: int("n-head", H) }));
  out.push(say("lesson.modern.kv.llama3"));
  return out;
}

function attention(): Text {
  const c = cfg(), f = focusToken(), w = get({ name: blk("attn.pattern"), head: app.head, position: app.pos, dtype: "float32" });
  if (!c || !f || !w) return [];
  const best = argBest(w.data, app.pos);
  const out: Text = [say("lesson.modern.attn.same", { dh: int("d-head", c.head_dim) })];
  out.push(app.pos === 0 ? claim("lesson.modern.attn.onlySelf", { head: int("head", app.head), token: f,
    weight: dec("top-weight", w.data[0], "attn-pattern") })
    : claim("lesson.modern.attn.top", { head: int("head", app.head), token: f, key: tokenAt("top-key", best, "attn-pattern")!,
      weight: dec("top-weight", w.data[best], "attn-pattern") }));
  out.push(say("lesson.modern.attn.rest"));
  return out;
}

const MLP_PARTS = ["mlp.gate", "mlp.up", "mlp.act", "mlp.post"] as const;

function swiglu(): Text {
  const c = cfg(), f = focusToken();
  const [gate, up, act, post] = MLP_PARTS.map((s) => get({ name: blk(s), position: app.pos, dtype: "float32" }));
  if (!c || !f || !gate || !up || !act || !post) return [];
  const u = argAbsMax(post.data), g = gate.data[u], a = act.data[u];
  const out: Text = [say("lesson.modern.swiglu.what", { m: int("d-mlp", c.d_mlp), d: int("d-model", c.n_embd) })];
  out.push(claim("lesson.modern.swiglu.unit", { token: f, unit: int("unit", u), g: dec("gate", g, "mlp-pre"),
    sigma: dec("sigma", sigmoid(g), "mlp-act"), act: dec("act", a, "mlp-act"), up: dec("up", up.data[u], "mlp-up"),
    h: dec("post", post.data[u], "mlp-post") }));
  const vars = { act: dec("act", a, "mlp-act"), sigma: dec("sigma", sigmoid(g), "mlp-act") };
  out.push(claim(Math.abs(a) > 1 ? "lesson.modern.swiglu.amplifies" : a < 0 ? "lesson.modern.swiglu.flips"
    : "lesson.modern.swiglu.damps", vars));
  out.push(say("lesson.modern.swiglu.shazeer"));
  return out;
}

/** The multiple of a power of two (at least 8) that 8/3 d was rounded up to, to give `m`; null if none did. */
export function roundedFrom(d: number, m: number): number | null {
  const eight = (8 * d) / 3;
  let best: number | null = null;
  for (let k = 8; k <= m; k *= 2) if (m % k === 0 && m >= eight && m - eight < k) best = k;
  return best;
}

function mlpWidth(): Text {
  const c = cfg();
  if (!c) return [];
  const D = c.n_embd, M = c.d_mlp, eight = (8 * D) / 3, mult = roundedFrom(D, M);
  const vars = { d: int("d-model", D), m: int("d-mlp", M), ratio: dec("mlp-ratio", M / D), eight: dec("eight-thirds", eight),
    mult: int("mlp-multiple", mult ?? 0) };
  const out: Text = [say("lesson.modern.width.budget")];
  out.push(claim(M === eight ? "lesson.modern.width.exact" : mult ? "lesson.modern.width.rounded"
    : "lesson.modern.width.other", vars));
  const gated = 3 * D * M, gelu = 8 * D * D;
  out.push(claim(gated === gelu ? "lesson.modern.width.sameWeights" : gated < gelu ? "lesson.modern.width.fewer"
    : "lesson.modern.width.more", { gated: int("mlp-weights", gated), gelu: int("gelu-weights", gelu) }));
  return out;
}

function unembed(): Text {
  const c = cfg(), top = app.next?.candidates[0], N = info()?.n_params;
  if (!c || !top || N == null) return [];
  const tied = c.tie_word_embeddings ?? true;
  const vars = { vocab: int("vocab", c.vocab_size), vd: int("vd", c.vocab_size * c.n_embd),
    share: pct("vd-share", (c.vocab_size * c.n_embd) / N), params: int("n-params", N), tied: flag("tied", tied) };
  return [
    say("lesson.modern.unembed.final", { vocab: vars.vocab }),
    either(tied, "lesson.modern.unembed.tied", "lesson.modern.unembed.untied", vars),
    say("lesson.modern.unembed.others"),
    claim("lesson.modern.unembed.top", { token: token("top-token", top.text, top.id, "logits"),
      logit: dec("top-logit", top.logit, "logits") }),
    say("lesson.modern.unembed.sampling"),
  ];
}

function precision(): Text {
  const c = cfg(), N = info()?.n_params;
  if (!c || N == null) return [];
  const dt = c.dtype ?? "float32", file = c.file_dtype ?? null, b = bytesOf(dt);
  const out: Text = [];
  const name = word("model-name", app.trace!.model), params = int("n-params", N);
  if (file) {
    const fb = bytesOf(file);
    out.push(claim("lesson.modern.precision.file", { name, params, file: word("file-dtype", file),
      bytes: int("file-bytes", fb), size: size("file-size", N * fb) }));
    out.push(either(file === dt, "lesson.modern.precision.computeSame", "lesson.modern.precision.computeOther", {
      dtype: word("dtype", dt), bytes: int("bytes-per-number", b), size: size("weights-size", N * b) }));
  } else {
    out.push(claim("lesson.modern.precision.fileUnknown", { name, params, dtype: word("dtype", dt),
      bytes: int("bytes-per-number", b), size: size("weights-size", N * b) }));
  }
  out.push(say("lesson.modern.precision.formats"));
  out.push(say("lesson.modern.precision.why"));
  return out;
}

const steps: LessonStep[] = [
  { id: "big-picture", target: "", enter: ensureInfo, title: "lesson.modern.intro.title", body: bigPicture },
  {
    id: "no-position-table", target: "emb-token", enter: () => showLoaded("embedding"),
    needs: () => [spec({ name: "embed.token", position: app.pos, dtype: "float32" }),
      spec({ name: blk("resid_pre", 0), position: app.pos, dtype: "float32" })],
    title: "lesson.modern.noPos.title", body: noPositionTable,
  },
  {
    id: "rmsnorm", target: "ln-stats", enter: () => showLoaded("layernorm", "ln1"),
    needs: () => [spec({ name: blk("resid_pre"), position: app.pos, dtype: "float32" }), spec({ name: blk("ln1.rms"), dtype: "float32" })],
    title: "lesson.modern.rms.title", body: rmsnorm,
  },
  { id: "qkv-bias", target: "qkv-mats", enter: () => showLoaded("qkv"), title: "lesson.modern.qkv.title", body: qkvBias },
  {
    id: "rope-angles", target: "rope-angles", enter: () => showLoaded("rope"), needs: () => [spec(anglesSpec())],
    title: "lesson.modern.ropeAngles.title", body: ropeAngles,
  },
  {
    id: "rope-relative", target: "rope-demo",
    enter: async () => {
      // the view's demonstration shows the same pair, shifted by the same amount as the text
      ropeDemo.key = null;
      ropeDemo.m = app.pos;
      ropeDemo.n = prevPos();
      ropeDemo.s = ROPE_SHIFT;
      await showLoaded("rope");
    },
    needs: ropeSpecs, title: "lesson.modern.ropeRel.title", body: ropeRelative,
  },
  {
    id: "gqa", target: "gqa-groups", enter: () => showLoaded("gqa"), needs: () => [spec({ name: blk("attn.kv_head") })],
    title: "lesson.modern.gqa.title", body: gqa,
  },
  { id: "kv-cache", target: "gqa-memory", enter: () => showLoaded("gqa"), title: "lesson.modern.kv.title", body: kvCache },
  {
    id: "attention", target: "attn-pattern", enter: () => showLoaded("attention"),
    needs: () => [spec({ name: blk("attn.pattern"), head: app.head, position: app.pos, dtype: "float32" })],
    title: "lesson.modern.attn.title", body: attention,
  },
  {
    id: "swiglu", target: "mlp-pre", enter: () => showLoaded("mlp"),
    needs: () => MLP_PARTS.map((s) => spec({ name: blk(s), position: app.pos, dtype: "float32" })),
    title: "lesson.modern.swiglu.title", body: swiglu,
  },
  { id: "mlp-width", target: "mlp-pre", enter: () => showLoaded("mlp"), title: "lesson.modern.width.title", body: mlpWidth },
  {
    id: "unembed", target: "logits",
    enter: async () => { app.pos = Math.max(0, nTok() - 1); await showLoaded("output"); await ensureInfo(); },
    title: "lesson.modern.unembed.title", body: unembed,
  },
  { id: "precision", target: "", enter: async () => { await showLoaded("output"); await ensureInfo(); }, title: "lesson.modern.precision.title", body: precision },
];

export const modernLesson: Lesson = {
  id: "modern",
  title: "lesson.modern.title",
  steps,
};
