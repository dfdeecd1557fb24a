// The chapter on the attention of 2025-26 (issue 34): "Attention that forgets, compresses and sinks". For a model
// that runs through transformers and has a layer that is not attention (Gated DeltaNet: Qwen3.5, Qwen3-Next, the
// built-in explainer-hybrid), learned sinks (gpt-oss) or latent attention (DeepSeek-V3): what a Gated DeltaNet layer's
// state forgets (each token's write strength beta and decay exp(g), compounded over the text) and the memory it saves,
// where a full-attention layer recalls what the state lost (its weight on an earlier token against the weight the
// recurrence implies), why latent attention caches a latent (bytes per token per layer), what a sink is for, and
// Gemma 4's per-layer embeddings (each layer's per-layer write against its MLP's at the focus token) and KV sharing
// (which layers reuse which layer's keys and values, and what that saves). Every value is the loaded model's own (its config and capabilities,
// the trace's tensors through the views' API); a model without a mechanism gets the sentence that says so, or a
// what-if at its own width that says it is one. A sentence that depends on the numbers is a claim, checked by
// web/tests/lessons/claims.hybrid.ts, with the other wording beside it. The words are under lesson.hybrid.*.
import type { CapabilitiesOut, TensorSpec } from "../lib/generated/api";
import { attentionLayers } from "../lib/family";
import type { MessageKey } from "../lib/i18n";
import { claim, either, say, type Lesson, type LessonStep, type Sentence, type Text, type Var } from "../lib/lesson";
import { dec, int, word } from "../lib/lessonFormat";
import { app } from "../lib/state.svelte";
import type { Tensor } from "../lib/tensor";
import { bytesOf, cfg, fetched, focusToken, norm, nTok, showLoaded, size, tokenAt } from "./reader";

// -- what the model has -------------------------------------------------------------------------------------------

type Caps = CapabilitiesOut;
const caps = (): Caps => app.caps;
const nLayer = () => cfg()?.n_layer ?? 0;
/** The layers whose mixer is Gated DeltaNet linear attention. */
export const linearLayers = (c: Caps = caps()): number[] =>
  (c.mixers ?? []).flatMap((m, l) => (m.includes("linear_attention") ? [l] : []));
const attnLayers = () => attentionLayers(caps(), nLayer());
/** The kinds of token mixer other than attention and Gated DeltaNet, in this order, that the chapter names. */
const OTHER_KINDS = ["short_conv", "state_space", "mixer"] as const;
/** The layers with a mixer of kind `kind`. */
const layersOf = (kind: string): number[] => (caps().mixers ?? []).flatMap((m, l) => (m.includes(kind) ? [l] : []));
export const sinkLayers = (c: Caps = caps()): number[] => (c.sinks ?? []).flatMap((s, l) => (s ? [l] : []));
/** Whether layer `l`'s trace answers `stage` (a model that runs through transformers lists each layer's). */
const records = (l: number, stage: string) => caps().layer_stages?.[l]?.includes(stage) ?? false;
/** The first Gated DeltaNet layer whose write strengths and decays the trace answers (-1: none). */
const deltaLayer = () => linearLayers().find((l) => records(l, "linear_attn.decay") && records(l, "linear_attn.beta")) ?? -1;
/** The attention layer the recall step compares with: the first after the DeltaNet layer, else the first. */
function recallLayer(dl: number): number {
  const a = attnLayers();
  return a.find((l) => l > dl) ?? a[0] ?? -1;
}

// -- words ----------------------------------------------------------------------------------------------------

/** Items joined as a list: "a and b", "a, b and c" (the language's own way). */
function list(items: Var[]): Var {
  if (items.length === 1) return items[0];
  if (items.length === 2) return say("lesson.hybrid.and", { a: items[0], b: items[1] });
  return say("lesson.hybrid.comma", { a: items[0], b: list(items.slice(1)) });
}
const nOf = (id: string, n: number, one: MessageKey, many: MessageKey): Sentence => say(n === 1 ? one : many, { n: int(id, n) });

// -- the tensors ----------------------------------------------------------------------------------------------

const b = (l: number, s: string) => `blocks.${l}.${s}`;
const S = {
  beta: (l: number): TensorSpec => ({ name: b(l, "linear_attn.beta") }), // (H, T)
  decay: (l: number): TensorSpec => ({ name: b(l, "linear_attn.decay") }), // (H, T): g < 0, the state times exp(g)
  implied: (l: number, h: number): TensorSpec => ({ name: b(l, "linear_attn.implied_pattern"), head: h, position: app.pos }),
  pattern: (l: number, h: number): TensorSpec => ({ name: b(l, "attn.pattern"), head: h, position: app.pos }),
  patternAll: (l: number): TensorSpec => ({ name: b(l, "attn.pattern"), triangle: true }), // (H, T, S), half of it sent
  sink: (l: number): TensorSpec => ({ name: b(l, "attn.sink_weight") }), // (H, T)
};
const get = (s: TensorSpec): Tensor | undefined => app.tensor(s);
/** Value heads of a (H, T) tensor, and its row for head h. */
const heads = (t: Tensor) => t.shape[0];
const at = (t: Tensor, h: number, p: number) => t.data[h * t.shape[1] + p];

/** The head of a DeltaNet layer the text follows: the focus head, within the layer's heads. */
const deltaHead = (t: Tensor) => app.head % heads(t);

/** Each head's mean keep factor exp(g) over the text. */
export function meanKeep(decay: Tensor): number[] {
  const H = decay.shape[0], T = decay.shape[1];
  return Array.from({ length: H }, (_, h) => {
    let s = 0;
    for (let t = 0; t < T; t++) s += Math.exp(decay.data[h * T + t]);
    return s / T;
  });
}
/** The product of exp(g_r) for r in (from, to]: what the decays alone leave of what token `from` wrote, by token `to`. */
export function keptBetween(decay: Tensor, h: number, from: number, to: number): number {
  let s = 0;
  for (let r = from + 1; r <= to; r++) s += at(decay, h, r);
  return Math.exp(s);
}
/** How far back the compounding sentence looks: 20 tokens, or to the text's start. */
export const LOOK_BACK = 20;

// -- the steps ------------------------------------------------------------------------------------------------

function intro(): Text {
  const c = cfg(), f = focusToken();
  if (!c || !f) return [];
  const lin = linearLayers(), att = attnLayers(), sinks = sinkLayers();
  // each kind of mixer the model has, counted: attention, Gated DeltaNet, then the others
  const kinds: Var[] = [];
  if (att.length) kinds.push(nOf("n-attention", att.length, "lesson.hybrid.nAttnOne", "lesson.hybrid.nAttn"));
  if (lin.length) kinds.push(nOf("n-linear", lin.length, "lesson.hybrid.nLinearOne", "lesson.hybrid.nLinear"));
  for (const k of OTHER_KINDS) {
    const n = layersOf(k).length;
    if (n) kinds.push(nOf(`n-${k}`, n, `lesson.hybrid.nKindOne.${k}`, `lesson.hybrid.nKind.${k}`));
  }
  const out: Text = [
    say("lesson.hybrid.intro.model", { name: word("model-name", app.trace!.model), type: word("model-type", c.model_type ?? ""),
      layers: int("n-layer", c.n_layer), d: int("d-model", c.n_embd) }),
    att.length === c.n_layer && kinds.length === 1 ? claim("lesson.hybrid.intro.allAttention", { layers: int("n-layer", c.n_layer) })
      : claim("lesson.hybrid.intro.kinds", { list: list(kinds) }),
  ];
  if (sinks.length) out.push(claim("lesson.hybrid.intro.sinks", { n: nOf("n-sink", sinks.length, "lesson.hybrid.nSinkOne", "lesson.hybrid.nSink") }));
  if (caps().kv_latent) out.push(claim("lesson.hybrid.intro.latent"));
  out.push(say("lesson.hybrid.intro.plan"), say("lesson.hybrid.intro.follow", { token: f }));
  return out;
}

/** Step 1: what a Gated DeltaNet layer keeps and forgets, in the focus token's numbers. */
function forget(): Text {
  const c = cfg(), f = focusToken();
  if (!c || !f) return [];
  if (!linearLayers().length) {
    const others = (["short_conv", "state_space"] as const).filter((k) => layersOf(k).length);
    if (!others.length && attnLayers().length === c.n_layer)
      return [say("lesson.hybrid.forget.what"), claim("lesson.hybrid.forget.none", { layers: int("n-layer", c.n_layer) })];
    return [say("lesson.hybrid.forget.what"), claim("lesson.hybrid.forget.noDeltaNet"),
      ...others.map((k) => claim(`lesson.hybrid.forget.${k}`, { n: int(`n-${k}`, layersOf(k).length) }))];
  }
  const l = deltaLayer();
  if (l < 0) return [say("lesson.hybrid.forget.what"), claim("lesson.hybrid.forget.notRecorded", { layer: int("layer", linearLayers()[0]) })];
  const beta = get(S.beta(l)), decay = get(S.decay(l));
  if (!beta || !decay) return [];
  const p = app.pos, h = deltaHead(decay), H = heads(decay);
  const keep = meanKeep(decay), fast = keep.indexOf(Math.min(...keep));
  const out: Text = [
    say("lesson.hybrid.forget.what"),
    claim("lesson.hybrid.forget.here", { layer: int("layer", l), head: int("head", h), token: f,
      beta: dec("beta", at(beta, h, p)), keep: dec("keep", Math.exp(at(decay, h, p))) }),
  ];
  if (H > 1) out.push(claim("lesson.hybrid.forget.fastest", { fast: int("fast-head", fast), n: int("n-heads", H),
    mean: dec("fast-mean-keep", keep[fast]), most: dec("slow-mean-keep", Math.max(...keep)) }));
  const back = Math.min(LOOK_BACK, p);
  if (back === 0) out.push(claim("lesson.hybrid.forget.first", { token: f }));
  else {
    const kept = keptBetween(decay, fast, p - back, p);
    out.push(claim(kept < 0.01 ? "lesson.hybrid.forget.gone" : kept < 0.5 ? "lesson.hybrid.forget.fades" : "lesson.hybrid.forget.lasts", { fast: int("fast-head", fast),
      earlier: tokenAt("earlier-token", p - back)!, n: int("look-back", back), token: f, kept: dec("kept", kept) }));
  }
  return out;
}

/** The type the bytes are counted in: the model's as it runs here (the file's may be smaller: a float16 file runs in
 *  float32 on a CPU), the states in float32 whatever it is. */
const dtypeSaid = (dtype: string, states = false): Sentence =>
  claim(states ? "lesson.hybrid.dtypeMem" : "lesson.hybrid.dtype", { dtype: word("dtype", dtype) });

/** Step 1, the memory: the states' fixed bytes against the KV cache of the model's full-attention layers. */
function memory(): Text {
  const c = cfg(), m = caps().state_memory;
  if (!c) return [];
  if (!m) return [say("lesson.hybrid.mem.what"), claim("lesson.hybrid.mem.unknown")];
  const lin = m.linear_layers.length, full = m.full_attention_layers.length, fixed = m.state_bytes + m.conv_bytes;
  const [n1, n2, n3] = m.tokens, [k1, k2, k3] = m.kv_cache_bytes;
  const count = { lin: nOf("n-linear", lin, "lesson.hybrid.nLinearOne", "lesson.hybrid.nLinear"),
    attn: nOf("n-full", full, "lesson.hybrid.nFullOne", "lesson.hybrid.nFull") };
  const out: Text = [
    say("lesson.hybrid.mem.what"),
    claim("lesson.hybrid.mem.state", { lin: count.lin, all: size("fixed-bytes", fixed), state: size("state-bytes", m.state_bytes),
      conv: size("conv-bytes", m.conv_bytes) }),
  ];
  if (!full) return [...out, claim("lesson.hybrid.mem.noCache")];
  out.push(claim("lesson.hybrid.mem.cache", { attn: count.attn, n1: int("tokens-1", n1), n2: int("tokens-2", n2), n3: int("tokens-3", n3),
    k1: size("kv-1", k1), k2: size("kv-2", k2), k3: size("kv-3", k3) }));
  out.push(dtypeSaid(m.dtype, true));
  // a model of the same width with full attention in every layer would cache what one full-attention layer does in each
  if (full === attnLayers().length) {
    const all = (c.n_layer * k2) / full, hybrid = k2 + fixed;
    out.push(either(hybrid < all, "lesson.hybrid.mem.saves", "lesson.hybrid.mem.noSaving", { layers: int("n-layer", c.n_layer),
      n: int("tokens-2", n2), all: size("kv-all", all), hybrid: size("hybrid-bytes", hybrid), r: dec("mem-ratio", all / hybrid) }));
  }
  return out;
}

/** The earlier token the recall step speaks of: the last earlier occurrence of the focus token, else the earlier token
 *  the attention head weighs most (ties: the earlier one); null at the text's first token. */
export function recallExample(ids: number[], p: number, attnRow: ArrayLike<number>): { j: number; repeat: boolean } | null {
  if (p === 0) return null;
  for (let j = p - 1; j >= 0; j--) if (ids[j] === ids[p]) return { j, repeat: true };
  let best = 0;
  for (let j = 1; j < p; j++) if (attnRow[j] > attnRow[best]) best = j;
  return { j: best, repeat: false };
}

/** The keys attention layer `l` reads from the query at position p: every earlier token and itself, or its window. */
export function visibleKeys(l: number, p: number): number {
  const w = caps().windows?.[l] ?? null;
  return w === null ? p + 1 : Math.min(w, p + 1);
}

/** A weight at least this many times an even share singles its token out (below it, the head barely prefers it). */
export const SINGLED_OUT = 2;

/** Below this size an implied weight is said to be practically nothing (a thousandth of a value). */
export const GONE = 1e-3;

/** Step 2: where the full-attention layer recalls what the state lost. */
function recall(): Text {
  const f = focusToken(), dl = deltaLayer(), al = recallLayer(dl);
  if (!f || dl < 0 || al < 0) return [];
  const ids = app.trace!.token_ids, p = app.pos;
  const decay = get(S.decay(dl));
  if (!decay) return [];
  const hd = deltaHead(decay), ha = app.head;
  const imp = get(S.implied(dl, hd)), row = get(S.pattern(al, ha));
  if (!imp || !row) return [];
  const ex = recallExample(ids, p, row.data);
  const out: Text = [say("lesson.hybrid.recall.what")];
  if (!ex) return [...out, claim("lesson.hybrid.recall.first", { token: f })];
  const vars = { token: f, earlier: tokenAt("recall-token", ex.j)!, pos: int("recall-pos", ex.j), n: int("recall-back", p - ex.j),
    al: int("attn-layer", al), ha: int("attn-head", ha), dl: int("delta-layer", dl), hd: int("delta-head", hd),
    full: dec("attn-weight", row.data[ex.j], "attn-pattern"), implied: dec("implied-weight", imp.data[ex.j]) };
  out.push(either(ex.repeat, "lesson.hybrid.recall.repeat", "lesson.hybrid.recall.largest", vars));
  const full = row.data[ex.j], w = imp.data[ex.j], gone = dec("gone", GONE);
  if (Math.abs(full) < GONE && Math.abs(w) < GONE) out.push(claim("lesson.hybrid.recall.neither", { ...vars, gone }));
  else {
    out.push(either(full > w, "lesson.hybrid.recall.attnMore", "lesson.hybrid.recall.stateMore", vars));
    // against an even spread over the keys the attention head sees: whether it singles the token out (twice that or more)
    const k = visibleKeys(al, p);
    out.push(either(full * k >= SINGLED_OUT, "lesson.hybrid.recall.aboveEven", "lesson.hybrid.recall.notAboveEven",
      { ...vars, k: int("visible-keys", k), even: dec("even-weight", 1 / k), x: dec("even-times", full * k) }));
    if (Math.abs(w) < GONE) out.push(claim("lesson.hybrid.recall.gone", { ...vars, gone }));
    else if (w < 0) out.push(claim("lesson.hybrid.recall.negative", vars));
  }
  out.push(say("lesson.hybrid.recall.why"));
  return out;
}

/** DeepSeek-V2's proportions for a latent at a head width d_h: d_c = 4 d_h, d_R = d_h / 2. */
export const latentWhatIf = (dh: number) => ({ dc: 4 * dh, dr: Math.ceil(dh / 2) });

/** Step 3: why multi-head latent attention caches a latent, in bytes per token per layer. */
function compress(): Text {
  const c = cfg();
  if (!c) return [];
  const H = c.n_head, G = c.n_kv_heads || H, bv = bytesOf(c.dtype), lat = caps().kv_latent;
  const out: Text = [say("lesson.hybrid.mla.what")];
  if (lat) {
    const mha = lat.mha_per_token, gqa = lat.gqa_per_token, mla = lat.mla_per_token;
    const vars = { heads: int("n-head", lat.n_heads), dn: int("d-nope", lat.qk_nope_head_dim), dr: int("d-rope", lat.qk_rope_head_dim),
      dv: int("d-v", lat.v_head_dim), dc: int("d-latent", lat.kv_lora_rank), kv: int("n-kv-heads", lat.gqa_heads),
      mha: size("mha-bytes", mha), gqa: size("gqa-bytes", gqa), mla: size("mla-bytes", mla), r: dec("mla-ratio", mha / mla) };
    out.push(claim("lesson.hybrid.mla.own", vars),
      either(mla < gqa, "lesson.hybrid.mla.belowGqaOf", "lesson.hybrid.mla.aboveGqaOf", vars), dtypeSaid(c.dtype ?? "float32"),
      say("lesson.hybrid.mla.cost"));
    return out;
  }
  const dh = c.head_dim, { dc, dr } = latentWhatIf(dh);
  const mha = 2 * H * dh * bv, gqa = 2 * G * dh * bv, mla = (dc + dr) * bv;
  const vars = { heads: int("n-head", H), kv: int("n-kv-heads", G), dh: int("d-head", dh), dc: int("d-latent", dc),
    dr: int("d-rope", dr), mha: size("mha-bytes", mha), gqa: size("gqa-bytes", gqa), mla: size("mla-bytes", mla),
    r: dec("mla-ratio", mha / mla) };
  out.push(claim(G < H ? "lesson.hybrid.mla.whatIfGqa" : "lesson.hybrid.mla.whatIfMha", vars));
  if (G < H) out.push(either(mla < gqa, "lesson.hybrid.mla.belowGqa", "lesson.hybrid.mla.aboveGqa", vars));
  out.push(dtypeSaid(c.dtype ?? "float32"), say("lesson.hybrid.mla.cost"));
  return out;
}

/** The layer the sink step shows: the focus layer where it has a learned sink, else the first that has one. */
const sinkLayer = () => (sinkLayers().includes(app.layer) ? app.layer : sinkLayers()[0] ?? -1);

/** Each head's mean weight on the first token over the queries after it, and what spreading each query's weight evenly
 *  over the keys it sees would give (a window hides the first token from the queries past it). */
export function firstTokenWeights(pattern: Tensor, window: number | null): { mean: number[]; even: number } {
  const [H, T] = pattern.shape;
  let even = 0;
  // a query t sees min(t + 1, w) keys, the first among them while t < w
  for (let t = 1; t < T; t++) even += window === null || t < window ? 1 / (t + 1) : 0;
  const mean = Array.from({ length: H }, (_, h) => {
    let s = 0;
    for (let t = 1; t < T; t++) s += pattern.data[(h * T + t) * T];
    return s / (T - 1);
  });
  return { mean, even: even / (T - 1) };
}

/** The attention head that puts the most weight on the first token over the text (ties: the earlier layer and head),
 *  with that mean and the even spread's; null where the model has no attention layer, undefined until the patterns
 *  are here. */
function firstTokenBest(): { l: number; h: number; m: number; even: number } | null | undefined {
  let best: { l: number; h: number; m: number; even: number } | null = null;
  for (const al of attnLayers()) {
    const pat = get(S.patternAll(al));
    if (!pat) return undefined;
    const { mean, even } = firstTokenWeights(pat, caps().windows?.[al] ?? null);
    mean.forEach((m, h) => { if (!best || m > best.m) best = { l: al, h, m, even }; });
  }
  return best;
}

/** Step 4: what a sink is for; the model's learned sinks, or its heads' weight on the first token. */
function sinks(): Text {
  const c = cfg(), f = focusToken();
  if (!c || !f) return [];
  const out: Text = [];
  const l = sinkLayer();
  if (l >= 0) {
    const t = get(S.sink(l));
    if (!t) return [];
    const H = heads(t), p = app.pos, w = Array.from({ length: H }, (_, h) => at(t, h, p));
    const top = w.indexOf(Math.max(...w));
    out.push(claim("lesson.hybrid.sink.learned", { layer: int("sink-layer", l), token: f,
      list: list(w.map((x, h) => say("lesson.hybrid.sink.headWeight", { h: int(`sink-head-${h}`, h), w: dec(`sink-weight-${h}`, x) }))) }));
    out.push(claim("lesson.hybrid.sink.top", { h: int("sink-top-head", top), w: dec("sink-top", w[top]) }));
    return out;
  }
  const T = nTok();
  if (T < 2) return [...out, claim("lesson.hybrid.sink.tooShort", { n: int("n-tokens", T) })];
  const best = firstTokenBest();
  if (best === undefined) return [];
  if (best === null) return [claim("lesson.hybrid.sink.noAttention")];
  out.push(either(best.m > 0.5, "lesson.hybrid.sink.firstLike", "lesson.hybrid.sink.firstNone", { layer: int("first-layer", best.l),
    head: int("first-head", best.h), m: dec("first-weight", best.m, app.layer === best.l && app.head === best.h ? "attn-pattern" : undefined),
    even: dec("first-even", best.even), n: int("n-queries", T - 1) }));
  return out;
}

/** Whether the model has per-layer inputs: a Gemma 4 (or Gemma 3n, where they began), or a trace that answers them. */
const PER_LAYER_TYPES = /^gemma(4|3n)/;
const perLayerStages = () => PER_LAYER_TYPES.test(cfg()?.model_type ?? "")
  || (caps().layer_stages ?? []).some((s) => s.some((x) => x.startsWith("per_layer")));
/** The per-layer inputs our module explains and the KV sharing (capabilities.per_layer: Gemma 4), or null. */
const perLayerCaps = () => (caps().per_layer?.per_layer_layers.length ? caps().per_layer! : null);

/** At the focus token, layer l's two last writes: what its per-layer input adds, and the stream after and before the
 *  MLP's write (their difference is what the MLP adds, after the layer's norm of it). Each (D,). */
const PL = {
  write: (l: number): TensorSpec => ({ name: b(l, "per_layer_out"), position: app.pos }),
  after: (l: number): TensorSpec => ({ name: b(l, "per_layer.resid"), position: app.pos }),
  before: (l: number): TensorSpec => ({ name: b(l, "resid_mid"), position: app.pos }),
};
const perLayerSpecs = (): TensorSpec[] => (perLayerCaps()?.per_layer_layers ?? []).flatMap((l) => [PL.write(l), PL.after(l), PL.before(l)]);

/** A layer's per-layer write and its MLP's write at one token: their lengths. */
export interface LayerWrite { l: number; write: number; mlp: number }
/** The lengths, from the write (D,) and the stream after and before the MLP's write (D,) of one layer. */
export function layerWrite(l: number, write: ArrayLike<number>, after: ArrayLike<number>, before: ArrayLike<number>): LayerWrite {
  return { l, write: norm(write), mlp: norm(Array.from(after, (x, i) => x - before[i])) };
}
/** Every per-layer layer's at the focus token; undefined until the tensors are here. */
function layerWrites(): LayerWrite[] | undefined {
  const out: LayerWrite[] = [];
  for (const l of perLayerCaps()?.per_layer_layers ?? []) {
    const w = get(PL.write(l)), a = get(PL.after(l)), bf = get(PL.before(l));
    if (!w || !a || !bf) return undefined;
    out.push(layerWrite(l, w.data, a.data, bf.data));
  }
  return out;
}
/** The layer whose per-layer write is longest against its MLP's (ties: the earlier layer). */
export const heaviest = (ws: LayerWrite[]): LayerWrite => ws.reduce((best, w) => (w.write * best.mlp > best.write * w.mlp ? w : best));
/** The layers that attend with an earlier layer's keys and values, grouped by that layer (in its order). */
export function kvGroups(sources: readonly number[]): { src: number; layers: number[] }[] {
  const out: { src: number; layers: number[] }[] = [];
  sources.forEach((src, l) => {
    if (src === l) return;
    const g = out.find((x) => x.src === src);
    if (g) g.layers.push(l);
    else out.push({ src, layers: [l] });
  });
  return out.sort((a, b) => a.src - b.src);
}

/** Step 5: per-layer embeddings; on a model that has them, each layer's write against its MLP's at the focus token. */
function perLayer(): Text {
  const c = cfg(), pl = perLayerCaps();
  if (!c) return [];
  if (!pl) return [
    say("lesson.hybrid.ple.what"),
    say("lesson.hybrid.ple.kvShare"),
    either(perLayerStages(), "lesson.hybrid.ple.here", "lesson.hybrid.ple.none", { type: word("model-type", c.model_type ?? "") }),
  ];
  const f = focusToken(), ws = layerWrites();
  if (!f || !ws) return [];
  const n = ws.length, k = ws.filter((w) => w.write > w.mlp).length, top = heaviest(ws);
  const count = { token: f, n: int("ple-layers", n), k: int("ple-longer", k) };
  return [
    say("lesson.hybrid.ple.what"),
    claim("lesson.hybrid.ple.own", { type: word("model-type", c.model_type ?? ""), p: int("ple-width", pl.d_per_layer),
      n: int("ple-layers", n), params: int("ple-params", pl.per_layer_table_params) }),
    say("lesson.hybrid.ple.compare"),
    claim(k === n ? "lesson.hybrid.ple.longerAll" : k === 0 ? "lesson.hybrid.ple.longerNone" : "lesson.hybrid.ple.longerSome", count),
    either(top.write > top.mlp, "lesson.hybrid.ple.mostLonger", "lesson.hybrid.ple.mostShorter", { layer: int("ple-top-layer", top.l),
      write: dec("ple-top-write", top.write), mlp: dec("ple-top-mlp", top.mlp), r: dec("ple-top-ratio", top.write / top.mlp) }),
  ];
}

/** Step 6 (a model with per-layer inputs): which layers reuse which layer's keys and values, and what that saves. */
function kvShare(): Text {
  const pl = perLayerCaps();
  if (!pl) return [];
  const groups = kvGroups(pl.kv_sources), L = pl.kv_sources.length;
  if (!groups.length) return [claim("lesson.hybrid.kv.none", { layers: int("kv-layers", L) })];
  const shared = groups.reduce((s, g) => s + g.layers.length, 0);
  const at = Math.max(0, pl.tokens.indexOf(32768));
  return [
    claim("lesson.hybrid.kv.shared", { n: int("kv-shared-layers", shared), layers: int("kv-layers", L),
      list: list(groups.map((g) => say(g.layers.length === 1 ? "lesson.hybrid.kv.reusesOne" : "lesson.hybrid.kv.reuses", {
        layers: list(g.layers.map((l) => int(`kv-layer-${l}`, l))), src: int(`kv-source-of-${g.layers[0]}`, g.src) }))) }),
    claim("lesson.hybrid.kv.saves", { n: int("kv-tokens", pl.tokens[at]), shared: size("kv-shared", pl.kv_shared_bytes[at]),
      unshared: size("kv-unshared", pl.kv_unshared_bytes[at]), saved: size("kv-saved", pl.kv_saved_bytes[at]) }),
    dtypeSaid(pl.dtype),
  ];
}

// -- the lesson -----------------------------------------------------------------------------------------------

const attnView = async (layer: number, head?: number) => {
  if (layer >= 0) app.layer = layer;
  if (head !== undefined) app.head = head;
  await showLoaded("attention");
};

const STEPS: LessonStep[] = [
  { id: "intro", target: "arch", title: "lesson.hybrid.intro.title", enter: () => showLoaded("overview"), body: intro },
  { id: "forget", get target() { return deltaLayer() >= 0 ? "deltanet-gates" : ""; }, title: "lesson.hybrid.forget.title",
    enter: () => attnView(deltaLayer() >= 0 ? deltaLayer() : linearLayers()[0] ?? -1),
    needs: () => (deltaLayer() >= 0 ? [S.beta(deltaLayer()), S.decay(deltaLayer())] : []), body: forget },
  { id: "memory", get target() { return caps().state_memory ? "deltanet-memory" : ""; }, title: "lesson.hybrid.mem.title", enter: () => attnView(deltaLayer() >= 0 ? deltaLayer() : linearLayers()[0] ?? -1),
    body: memory },
  { id: "recall", target: "attn-pattern", title: "lesson.hybrid.recall.title",
    enter: () => attnView(recallLayer(deltaLayer())),
    needs: () => {
      const dl = deltaLayer(), al = recallLayer(dl);
      if (dl < 0 || al < 0) return [];
      const d = get(S.decay(dl));
      return [S.decay(dl), S.pattern(al, app.head), ...(d ? [S.implied(dl, deltaHead(d))] : [])];
    },
    body: recall },
  { id: "compress", get target() { return caps().kv_latent?.layers.length ? "latent-cache" : ""; }, title: "lesson.hybrid.mla.title", body: compress,
    // the Attention view of a latent-attention layer shows what its cache holds (stages/LatentCache.svelte)
    enter: async () => { const lat = caps().kv_latent; if (lat?.layers.length) await attnView(lat.layers[0]); } },
  { id: "sink-why", target: "", title: "lesson.hybrid.sink.title", body: () => [say("lesson.hybrid.sink.what")] },
  { id: "sinks", get target() { return attnLayers().length ? "attn-pattern" : ""; }, title: "lesson.hybrid.sinkHere.title",
    // the layer with learned sinks; else the head that weighs the first token most, once the patterns are here
    enter: async () => {
      if (sinkLayer() >= 0 || nTok() < 2) return attnView(sinkLayer() >= 0 ? sinkLayer() : attnLayers()[0] ?? -1);
      await fetched(attnLayers().map(S.patternAll));
      const best = firstTokenBest();
      await attnView(best ? best.l : attnLayers()[0] ?? -1, best ? best.h : undefined);
    },
    needs: () => (sinkLayer() >= 0 ? [S.sink(sinkLayer())] : nTok() >= 2 ? attnLayers().map(S.patternAll) : []), body: sinks },
  { id: "per-layer", get target() { return perLayerCaps() ? "per-layer-write" : ""; }, title: "lesson.hybrid.ple.title",
    // the residual view of the layer where the per-layer write weighs most against the MLP's, once the writes are here
    enter: async () => {
      if (!perLayerCaps()) return;
      await fetched(perLayerSpecs());
      const ws = layerWrites();
      if (ws?.length) app.layer = heaviest(ws).l;
      await showLoaded("residual");
    },
    needs: perLayerSpecs, body: perLayer },
  { id: "kv-share", get target() { return perLayerCaps() ? "per-layer-inputs" : ""; }, title: "lesson.hybrid.kv.title",
    enter: () => showLoaded("embedding"), body: kvShare },
  { id: "summary", target: "", title: "lesson.hybrid.end.title", body: () => [say("lesson.hybrid.end.body")] },
];

export const hybridLesson: Lesson = {
  id: "hybrid",
  title: "lesson.hybrid.title",
  // the memory and the recall only where the model has Gated DeltaNet layers (the first step says when it has none), the
  // shared keys and values only where it has per-layer inputs (the per-layer step says what they are where it has none)
  get steps() {
    return STEPS.filter((s) => (s.id !== "memory" || linearLayers().length > 0)
      && (s.id !== "recall" || (deltaLayer() >= 0 && attnLayers().length > 0))
      && (s.id !== "kv-share" || perLayerCaps() !== null));
  },
};
