// The chapter on mixtures of experts (Mixtral, Qwen3-MoE, OLMoE, the built-in explainer-moe): "many parameters, few
// used per token". What the experts cost against a dense MLP, the router (a linear map and a softmax), the top-k
// choice and its renormalisation as the loaded model does it, the weighted sum of the chosen experts' real outputs,
// each expert's load over the learner's text and the Switch Transformer's load-balancing loss, what the routing of
// this text shows about kinds of token, the token's path through the blocks, total against used parameters and the
// arithmetic of one token, and what taking an expert out does. Every value is the loaded model's own (its config and
// sizes from /api/models, the trace's tensors through the views' API, one ablation from /api/analysis/ablate). A
// sentence that depends on the numbers is a claim, checked by web/tests/lessons/claims.moe.ts, with the other wording
// beside it; a paper's finding names the paper. The words are under lesson.moe.*.
import type { ModelConfigOut, TensorSpec } from "../lib/generated/api";
import type { MessageKey } from "../lib/i18n";
import { claim, either, say, val as value, type Lesson, type LessonStep, type Sentence, type Text, type Value, type Var } from "../lib/lesson";
import { dec, int, percent, token, word } from "../lib/lessonFormat";
import { app } from "../lib/state.svelte";
import type { Tensor } from "../lib/tensor";
import type { StageId } from "../lib/pipeline";
import { ablateExpert, expertAblationFor, xp } from "../pages/experiments/store.svelte";
import { argBest, cfg, ensure, ensureInfo, focusToken, info, norm, nTok, ranked, showLoaded } from "./reader";

const caps = () => app.caps;
const E = () => caps().n_experts ?? 0;
const K = () => caps().top_k ?? 0;
const moeLayers = (): number[] => caps().moe_layers ?? [];
const isMoe = (l: number) => moeLayers().includes(l);
/** The block the text speaks of: the focus block when it has experts (a Qwen3-MoE may have dense blocks). */
const layer = (): number | null => (isMoe(app.layer) ? app.layer : null);

/** The experts view, where the model has it (the chapter opens only for models with experts). */
const EXPERTS = "experts" satisfies StageId;
/** `at` only while the experts view shows block `l` (the view follows the focus block). */
const atIf = (l: number, name: string) => (app.view === EXPERTS && app.layer === l ? name : undefined);

/** Put the focus on a block with experts (the first) when it is on one without. */
function toMoeBlock(): void {
  if (!isMoe(app.layer) && moeLayers().length) app.layer = moeLayers()[0];
}

// -- the tensors -------------------------------------------------------------------------------------------

const b = (l: number, s: string) => `blocks.${l}.${s}`;
const S = {
  logits: (l: number): TensorSpec => ({ name: b(l, "mlp.router_logits"), position: app.pos }),
  probs: (l: number): TensorSpec => ({ name: b(l, "mlp.router_probs"), position: app.pos }),
  probsAll: (l: number): TensorSpec => ({ name: b(l, "mlp.router_probs") }),
  chosen: (l: number): TensorSpec => ({ name: b(l, "mlp.expert_indices") }),
  weights: (l: number): TensorSpec => ({ name: b(l, "mlp.expert_weights") }),
  out: (l: number): TensorSpec => ({ name: b(l, "mlp.expert_out"), position: app.pos }),
  mlpOut: (l: number): TensorSpec => ({ name: b(l, "mlp_out"), position: app.pos }),
};
const get = (s: TensorSpec): Tensor | undefined => app.tensor(s);
/** The tensors a step on block `l` reads at the focus token and over the text. */
const blockSpecs = (l: number | null): TensorSpec[] => (l === null ? [] : [S.logits(l), S.probs(l), S.probsAll(l),
  S.chosen(l), S.weights(l), S.out(l), S.mlpOut(l)]);
const allChosen = (): TensorSpec[] => moeLayers().map(S.chosen);

/** How many of the text's (token, choice) pairs each expert got in block `l`. */
function counts(chosen: Tensor): number[] {
  const c = new Array<number>(E()).fill(0);
  for (const e of chosen.data) c[e]++;
  return c;
}
/** Every expert with the largest count (a tie gives several), in order. */
const tops = (xs: number[]) => xs.flatMap((x, i) => (x === Math.max(...xs) ? [i] : []));
/** The share of block `l`'s choices on the text that its busiest expert got (NaN before the tensor is here). */
function busiestShare(l: number): number {
  const idx = get(S.chosen(l));
  return idx ? Math.max(...counts(idx)) / idx.data.length : NaN;
}
/** The block with experts whose choices on the text are least even: its busiest expert's share is the largest
 *  (ties: the earlier block); null until every block's choices are here. */
function leastEven(): number | null {
  const ml = moeLayers(), shares = ml.map(busiestShare);
  if (!ml.length || shares.some(Number.isNaN)) return null;
  return ml[argBest(shares)];
}
/** A share as a percentage to 3 significant digits, trailing zeros kept ("25.0%" where the panel shows "24.95%"). */
const pct = (id: string, p: number, at?: string): Value =>
  value(id, p > 1e-4 && p < 0.9995 ? `${(p * 100).toPrecision(3)}%` : percent(p), p, at);

// -- words -------------------------------------------------------------------------------------------------

const expert = (id: string, e: number, at?: string): Sentence => say("lesson.moe.expert", { e: int(id, e, at) });
/** Items joined as a list: "a and b", "a, b and c" (the language's own way). */
function list(items: Var[]): Var {
  if (items.length === 1) return items[0];
  if (items.length === 2) return say("lesson.moe.and", { a: items[0], b: items[1] });
  return say("lesson.moe.comma", { a: items[0], b: list(items.slice(1)) });
}
/** Items joined by semicolons (items that are lists themselves). */
function semi(items: Var[]): Var {
  return items.length === 1 ? items[0] : say("lesson.moe.semi", { a: items[0], b: semi(items.slice(1)) });
}
/** Items joined by " + ". */
function plus(items: Var[]): Var {
  return items.length === 1 ? items[0] : say("lesson.moe.plus", { a: items[0], b: plus(items.slice(1)) });
}
const dense = (l: number): Text => [claim("lesson.moe.dense", { layer: int("layer", l) })];

// -- the steps ---------------------------------------------------------------------------------------------

function intro(): Text {
  const c = cfg(), m = info(), f = focusToken();
  if (!c || !f || m?.n_params == null) return [];
  const ml = moeLayers(), L = c.n_layer;
  const denseBlocks = Array.from({ length: L }, (_, l) => l).filter((l) => !isMoe(l));
  return [
    say("lesson.moe.intro.model", { name: word("model-name", app.trace!.model), type: word("model-type", c.model_type ?? ""),
      layers: int("n-layer", L), d: int("d-model", c.n_embd), params: int("n-params", m.n_params) }),
    claim("lesson.moe.intro.experts", { e: int("n-experts", E()), m: int("d-expert", caps().d_expert ?? 0), k: int("top-k", K()) }),
    denseBlocks.length
      ? claim("lesson.moe.intro.someDense", { n: int("n-moe", ml.length), dense: list(denseBlocks.map((l, i) => int(`dense-${i}`, l))) })
      : claim("lesson.moe.intro.allBlocks"),
    say("lesson.moe.intro.shazeer"),
    say("lesson.moe.intro.follow", { token: f }),
  ];
}

/** One expert's parameters: its gate, up and down matrices (and their biases where the family has them). */
function perExpert(c: ModelConfigOut): number {
  const D = c.n_embd, M = caps().d_expert ?? 0;
  return 3 * D * M + (c.mlp_bias ? 2 * M + D : 0);
}

function cost(): Text {
  const c = cfg(), l = layer();
  if (!c) return [];
  if (l === null) return dense(app.layer);
  const D = c.n_embd, M = caps().d_expert ?? 0, per = perExpert(c), e = E(), k = K();
  return [
    claim("lesson.moe.cost.expert", { d: int("d-model", D), m: int("d-expert", M), per: int("per-expert", per, atIf(l, "experts-params")) }),
    claim("lesson.moe.cost.block", { e: int("n-experts", e), all: int("block-experts", e * per, atIf(l, "experts-params")),
      router: int("router-params", D * e), k: int("top-k", k), used: int("used-experts", k * per, atIf(l, "experts-params")) }),
    claim("lesson.moe.cost.dense", { k: int("top-k", k), km: int("k-width", k * M), used: int("used-experts", k * per),
      r: dec("held-ratio", e / k) }),
  ];
}

function router(): Text {
  const c = cfg(), f = focusToken(), l = layer();
  if (!c || !f) return [];
  if (l === null) return dense(app.layer);
  const z = get(S.logits(l)), p = get(S.probs(l));
  if (!z || !p) return [];
  const order = ranked(p.data), [e1, e2] = order, low = order[order.length - 1], at = atIf(l, "experts-path");
  return [
    say("lesson.moe.router.what", { d: int("d-model", c.n_embd), e: int("n-experts", E()) }),
    claim("lesson.moe.router.here", { layer: int("layer", l), token: f, e1: expert("e1", e1), z1: dec("z1", z.data[e1], at),
      p1: dec("p1", p.data[e1], at), e2: expert("e2", e2), z2: dec("z2", z.data[e2], at), p2: dec("p2", p.data[e2], at),
      low: expert("e-low", low), pl: dec("p-low", p.data[low], at) }),
    say("lesson.moe.router.softmax"),
  ];
}

function topk(): Text {
  const f = focusToken(), l = layer();
  if (!f) return [];
  if (l === null) return dense(app.layer);
  const p = get(S.probs(l)), idx = get(S.chosen(l)), w = get(S.weights(l));
  if (!p || !idx || !w) return [];
  const k = K(), at = atIf(l, "experts-path");
  const chosen = Array.from(idx.data.slice(app.pos * k, (app.pos + 1) * k));
  const weights = Array.from(w.data.slice(app.pos * k, (app.pos + 1) * k));
  const kept = chosen.reduce((s, e) => s + p.data[e], 0), wsum = weights.reduce((s, x) => s + x, 0);
  const out: Text = [
    claim("lesson.moe.topk.chosen", { k: int("top-k", k), token: f,
      experts: list(chosen.map((e, i) => say("lesson.moe.expertProb", { e: int(`chosen-${i}`, e, at), p: dec(`chosen-p-${i}`, p.data[e], at) }))),
      kept: dec("kept-prob", kept), rest: int("n-rest", E() - k) }),
  ];
  const ws = list(weights.map((x, i) => dec(`weight-${i}`, x, at)));
  if (caps().norm_topk_prob) {
    out.push(claim("lesson.moe.topk.renorm", { kept: dec("kept-prob", kept), weights: ws }));
    out.push(say("lesson.moe.topk.mixtral"));
  } else {
    out.push(claim("lesson.moe.topk.raw", { weights: ws, sum: dec("weight-sum", wsum) }));
  }
  return out;
}

function sum(): Text {
  const f = focusToken(), l = layer(), c = cfg();
  if (!f || !c) return [];
  if (l === null) return dense(app.layer);
  const out = get(S.out(l)), w = get(S.weights(l)), idx = get(S.chosen(l)), y = get(S.mlpOut(l));
  if (!out || !w || !idx || !y) return [];
  const k = K(), D = c.n_embd, at = atIf(l, "experts-path");
  const chosen = Array.from(idx.data.slice(app.pos * k, (app.pos + 1) * k));
  const weights = Array.from(w.data.slice(app.pos * k, (app.pos + 1) * k));
  const total = new Float64Array(D);
  for (let j = 0; j < k; j++) for (let i = 0; i < D; i++) total[i] += weights[j] * out.data[j * D + i];
  let diff = 0;
  for (let i = 0; i < D; i++) diff = Math.max(diff, Math.abs(total[i] - y.data[i]));
  const terms = plus(chosen.map((e, j) => say("lesson.moe.sum.term", { w: dec(`weight-${j}`, weights[j], at),
    e: int(`chosen-${j}`, e, at), n: dec(`out-len-${j}`, norm(out.data, j * D, (j + 1) * D), at) })));
  const yLen = norm(y.data);
  return [
    say("lesson.moe.sum.what"),
    either(diff <= 1e-4 * Math.max(1, yLen), "lesson.moe.sum.equal", "lesson.moe.sum.differs", { layer: int("layer", l), token: f,
      terms, len: dec("sum-len", yLen, at), diff: dec("sum-diff", diff) }),
    say("lesson.moe.sum.rest", { rest: int("n-rest", E() - k) }),
  ];
}

/** "expert 3 with 2.10": an expert and its summed weight. */
const withWeight = (id: string, e: number, w: number, at?: string): Sentence =>
  say("lesson.moe.expertWith", { e: int(id, e, at), w: dec(`${id}-weight`, w, at) });

function load(): Text {
  const l = layer(), T = nTok();
  if (!cfg() || !T) return [];
  if (l === null) return dense(app.layer);
  const idx = get(S.chosen(l)), w = get(S.weights(l));
  if (!idx || !w) return [];
  const k = K(), e = E(), n = counts(idx), N = T * k, at = atIf(l, "experts-load");
  const most = tops(n), top = most[0], unused = n.flatMap((x, i) => (x === 0 ? [i] : []));
  const summed = new Array<number>(e).fill(0);
  for (let j = 0; j < idx.data.length; j++) summed[idx.data[j]] += w.data[j];
  const heavy = argBest(summed);
  const base = { n: int("n-tokens", T), layer: int("layer", l), pairs: int("n-pairs", N), k: int("top-k", k),
    fair: dec("fair-share", N / e), got: int("busiest-count", n[top], at), share: pct("busiest-share", n[top] / N, at) };
  const out: Text = [
    most.length === 1 ? claim("lesson.moe.load.counts", { ...base, e: expert("busiest", top) })
      : claim("lesson.moe.load.countsTie", { ...base, experts: list(most.map((x, i) => int(`tied-${i}`, x, at))) }),
    unused.length
      ? claim("lesson.moe.load.unused", { u: int("n-unused", unused.length), e: int("n-experts", e), experts: list(unused.map((x, i) => int(`unused-${i}`, x, at))) })
      : claim("lesson.moe.load.allUsed", { e: int("n-experts", e) }),
  ];
  if (most.length === 1) {
    out.push(heavy === top
      ? claim("lesson.moe.load.weightSame", { e: expert("heaviest", heavy), w: dec("heaviest-weight", summed[heavy], at) })
      : claim("lesson.moe.load.weightOther", { e: expert("heaviest", heavy), w: dec("heaviest-weight", summed[heavy], at),
        top: expert("busiest", top), wt: dec("busiest-weight", summed[top], at) }));
  } else if (most.includes(heavy)) {
    const rest = most.filter((x) => x !== heavy), next = rest.reduce((b, x) => (summed[x] > summed[b] ? x : b), rest[0]);
    out.push(claim("lesson.moe.load.weightBreaksTie", { e: expert("heaviest", heavy), w: dec("heaviest-weight", summed[heavy], at),
      other: withWeight("runner-up", next, summed[next], at) }));
  } else {
    out.push(claim("lesson.moe.load.weightOtherTie", { e: expert("heaviest", heavy), w: dec("heaviest-weight", summed[heavy], at),
      top: list(most.map((x, i) => withWeight(`tied-w-${i}`, x, summed[x], at))) }));
  }
  const ml = moeLayers();
  if (ml.length > 1) {
    const shares = ml.map(busiestShare);
    if (!shares.some(Number.isNaN)) {
      const hi = argBest(shares), lo = argBest(shares.map((x) => -x));
      out.push(shares[hi] === shares[lo]
        ? claim("lesson.moe.load.blocksSame", { m: int("n-moe", ml.length), share: pct("blocks-share", shares[hi]) })
        : claim("lesson.moe.load.blocks", { m: int("n-moe", ml.length), lo: pct("blocks-lo", shares[lo]),
          bl: int("blocks-lo-layer", ml[lo]), hi: pct("blocks-hi", shares[hi]), bh: int("blocks-hi-layer", ml[hi]) }));
    }
  }
  return out;
}

/** The Switch Transformer's loss on the text in block `l`: E Σ f_e P_e, f_e the share of tokens that chose e
 *  (summing to k), P_e e's mean router probability (as transformers computes it for Mixtral). */
function balanceLoss(idx: Tensor, probs: Tensor): { f: number[]; P: number[]; loss: number } {
  const T = probs.shape[0], e = E(), n = counts(idx);
  const f = n.map((x) => x / T), P = new Array<number>(e).fill(0);
  for (let t = 0; t < T; t++) for (let j = 0; j < e; j++) P[j] += probs.data[t * e + j] / T;
  return { f, P, loss: e * f.reduce((s, x, j) => s + x * P[j], 0) };
}

function balance(): Text {
  const l = layer();
  if (!cfg()) return [];
  if (l === null) return dense(app.layer);
  const idx = get(S.chosen(l)), probs = get(S.probsAll(l));
  if (!idx || !probs) return [];
  const { f, P, loss } = balanceLoss(idx, probs), top = argBest(counts(idx)), k = K(), e = E();
  const out: Text = [
    say("lesson.moe.balance.what", { e: int("n-experts", e), k: int("top-k", k) }),
    claim("lesson.moe.balance.here", { layer: int("layer", l), x: expert("busiest", top), f: dec("busiest-f", f[top]),
      p: dec("busiest-P", P[top]), loss: dec("balance-loss", loss) }),
    either(loss > k * (1 + 1e-3), "lesson.moe.balance.above", "lesson.moe.balance.notAbove",
      { k: int("top-k", k), even: dec("even-f", k / e), evenP: dec("even-P", 1 / e), loss: dec("balance-loss", loss) }),
    say("lesson.moe.balance.grad"),
  ];
  if (app.trace?.model === "explainer-moe" && info()?.source === "builtin") out.push(claim("lesson.moe.balance.trained"));
  return out;
}

// -- kinds of token ------------------------------------------------------------------------------------------

const KINDS = ["digit", "punct", "space", "word"] as const;
type Kind = (typeof KINDS)[number];
const KIND_WORDS: Record<Kind, MessageKey> = { digit: "lesson.moe.kind.digit", punct: "lesson.moe.kind.punct",
  space: "lesson.moe.kind.space", word: "lesson.moe.kind.word" };
/** A kind of token, by its text: whitespace only, digits, punctuation, or a word with its leading space. */
export function kindOf(text: string): Kind | null {
  if (/^\s+$/u.test(text)) return "space";
  if (/^\s?\p{Nd}+$/u.test(text)) return "digit";
  if (/^\s?\p{P}+$/u.test(text)) return "punct";
  if (/^ \p{L}+$/u.test(text)) return "word";
  return null;
}
/** Fewest tokens of a kind (and of the rest) for the step to speak of it. */
export const MIN_KIND = 3;
/** A kind goes "mostly" to one expert when at least this share of its tokens choose it first, and at most
 *  OTHERS_AT_MOST of the other tokens do. */
export const MOSTLY = 0.75;
export const OTHERS_AT_MOST = 0.25;
/** An expert that is the first choice of at least this share of the other tokens too is busy with every kind: an
 *  uneven load, not a kind's own. */
export const BUSY = 0.5;
/** Below "mostly", a gap of at least this much between the kind's share and the others' is a lean towards the kind. */
export const LEAN = 0.25;

interface KindCase { kind: Kind; layer: number; e: number; n: number; m: number; no: number; mo: number }

/** Over the blocks with experts and the kinds of token with enough tokens in the text, the case where one expert
 *  is most a kind's own: the largest gap between the share of the kind's tokens that choose it first and the share
 *  of the other tokens that do (ties: the earlier block, then the kinds' order). */
function clearestKind(): KindCase | null | undefined {
  const tokens = app.trace?.tokens;
  if (!tokens) return undefined;
  const kinds = tokens.map((t) => kindOf(t.text)), T = tokens.length, k = K();
  let best: KindCase | null = null, gap = -Infinity;
  for (const l of moeLayers()) {
    const idx = get(S.chosen(l));
    if (!idx) return undefined;
    for (const kind of KINDS) {
      const mine = kinds.flatMap((x, t) => (x === kind ? [t] : []));
      if (mine.length < MIN_KIND || T - mine.length < MIN_KIND) continue;
      const firsts = new Array<number>(E()).fill(0);
      for (const t of mine) firsts[idx.data[t * k]]++;
      const e = argBest(firsts);
      let mo = 0;
      for (let t = 0; t < T; t++) if (kinds[t] !== kind && idx.data[t * k] === e) mo++;
      const c = { kind, layer: l, e, n: mine.length, m: firsts[e], no: T - mine.length, mo };
      const g = c.m / c.n - c.mo / c.no;
      if (g > gap + 1e-12) { gap = g; best = c; }
    }
  }
  return best;
}

function special(): Text {
  if (!cfg()) return [];
  const c = clearestKind();
  if (c === undefined) return [];
  const out: Text = [];
  if (c === null) out.push(claim("lesson.moe.special.none", { min: int("min-kind", MIN_KIND) }));
  else {
    const at = atIf(c.layer, "experts-routing");
    const vars = { kind: say(KIND_WORDS[c.kind]), n: int("kind-n", c.n, at), layer: int("kind-layer", c.layer),
      e: expert("kind-expert", c.e), m: int("kind-m", c.m, at), no: int("others-n", c.no), mo: int("others-m", c.mo, at) };
    const mine = c.m / c.n, others = c.mo / c.no;
    out.push(say("lesson.moe.special.measure"));
    out.push(claim(mine >= MOSTLY && others <= OTHERS_AT_MOST ? "lesson.moe.special.mostly"
      : others >= BUSY ? "lesson.moe.special.busy" : mine - others >= LEAN ? "lesson.moe.special.lean" : "lesson.moe.special.weak", vars));
  }
  out.push(say("lesson.moe.special.mixtral"));
  return out;
}

function layersStep(): Text {
  const f = focusToken(), ml = moeLayers(), k = K();
  if (!f || !ml.length) return [];
  const idx = ml.map((l) => get(S.chosen(l)));
  if (idx.some((t) => !t)) return [];
  const sets = idx.map((t) => Array.from(t!.data.slice(app.pos * k, (app.pos + 1) * k)));
  const keys = new Set(sets.map((s) => [...s].sort((a, c) => a - c).join(",")));
  const path = semi(ml.map((l, i) => say("lesson.moe.layers.block", { layer: int(`path-layer-${i}`, l),
    experts: list(sets[i].map((e, j) => int(`path-${i}-${j}`, e))) })));
  const e = E();
  let combos = 1;
  for (let j = 0; j < k; j++) combos = (combos * (e - j)) / (j + 1);
  const out: Text = [claim("lesson.moe.layers.path", { token: f, path })];
  if (ml.length > 1) {
    out.push(keys.size === 1 ? claim("lesson.moe.layers.same", { n: int("n-moe", ml.length) })
      : claim("lesson.moe.layers.differ", { d: int("n-distinct", keys.size), n: int("n-moe", ml.length) }));
  }
  out.push(say("lesson.moe.layers.unrelated"));
  out.push(claim("lesson.moe.layers.combos", { e: int("n-experts", e), k: int("top-k", k), c: int("n-sets", combos),
    n: int("n-moe", ml.length), all: dec("n-paths", combos ** ml.length) }));
  return out;
}

/** Floating-point operations of one token's weight products (2 per multiply-add): every block's attention
 *  projections, the router and top_k experts where the block has experts (all E with `all`), the dense MLP
 *  elsewhere, and the unembedding. The attention scores, which grow with the context, are left out. */
function tokenFlops(c: ModelConfigOut, all = false): number {
  const D = c.n_embd, q = c.n_head * c.head_dim, kv = (c.n_kv_heads || c.n_head) * c.head_dim;
  const M = caps().d_expert ?? 0, ml = moeLayers().length, L = c.n_layer;
  const attn = 2 * D * (2 * q + 2 * kv);
  const experts = 2 * D * E() + (all ? E() : K()) * 3 * 2 * D * M;
  const denseMlp = 3 * 2 * D * (c.d_mlp ?? 0);
  return L * attn + ml * experts + (L - ml) * denseMlp + 2 * D * c.vocab_size;
}

function params(): Text {
  const c = cfg(), m = info();
  if (!c || m?.n_params == null || m.n_active_params == null) return [];
  const N = m.n_params, A = m.n_active_params, at = app.view === EXPERTS ? "experts-params" : undefined;
  const f = tokenFlops(c), fAll = tokenFlops(c, true), cost = app.trace?.cost;
  const same = E() === 8 && K() === 2;
  return [
    claim("lesson.moe.params.total", { name: word("model-name", app.trace!.model), total: int("n-params", N, at),
      active: int("n-active", A, at), share: pct("active-share", A / N), rest: int("n-rest", E() - K()), n: int("n-moe", moeLayers().length) }),
    cost && cost.n_tokens > 0
      ? claim("lesson.moe.params.flopsPass", { t: int("n-tokens", cost.n_tokens), g: dec("pass-gflop", cost.gflop, at),
        per: dec("pass-flops-per-token", (cost.gflop * 1e9) / cost.n_tokens, at), f: dec("token-flops", f),
        all: dec("token-flops-all", fAll), e: int("n-experts", E()) })
      : claim("lesson.moe.params.flops", { f: dec("token-flops", f, at), all: dec("token-flops-all", fAll), e: int("n-experts", E()) }),
    same ? claim("lesson.moe.params.mixtralSame", { share: pct("active-share", A / N) })
      : claim("lesson.moe.params.mixtralOther", { e: int("n-experts", E()), k: int("top-k", K()) }),
  ];
}

/** The expert of block `l` the text sends most tokens to (the one whose removal moves most of them). */
function busiest(l: number): number | null {
  const idx = get(S.chosen(l));
  return idx ? argBest(counts(idx)) : null;
}

/** Open the experts view on the block whose load on the text is least even (the loss that follows is about load). */
async function toLeastEven(): Promise<void> {
  await ensure(allChosen());
  const l = leastEven();
  if (l !== null) app.layer = l; else toMoeBlock();
  await showLoaded(EXPERTS);
}

/** The text as the Experiments area's analyses take it. */
const input = () => (app.trace ? { model: app.trace.model, ids: app.trace.token_ids } : null);

/** Open the Experiments area's experts panel with the busiest expert of the focus block taken out (the panel and the
 *  card show one answer, pages/experiments/store.svelte.ts); an expert the learner took out since is kept. */
async function enterAblate(): Promise<void> {
  toMoeBlock();
  const l = layer(), inp = input();
  if (l === null || !inp) return;
  await ensure([S.chosen(l)]);
  xp.tab = "experts";
  app.view = "experiments";
  const e = busiest(l);
  if (e !== null && !expertAblationFor(inp)) await ablateExpert(inp, l, e);
}

function ablate(): Text {
  const tr = app.trace, inp = input(), r = expertAblationFor(inp), x = xp.expertAblated;
  if (!tr || !cfg() || !r || !x) return [];
  const [l, e] = x, idx = get(S.chosen(l)), top = busiest(l);
  if (!idx || top === null) return [];
  const k = K();
  let n = 0;
  for (let t = 0; t < tr.token_ids.length; t++) if (Array.from(idx.data.slice(t * k, (t + 1) * k)).includes(e)) n++;
  const which = { layer: int("layer", l), e: expert("removed", e, "exp-experts") };
  const out: Text = [
    claim("lesson.moe.ablate.what", { ...which, n: int("n-moved", n, "exp-experts"), T: int("n-tokens", tr.token_ids.length) }),
    e === top ? claim("lesson.moe.ablate.busiest", which) : claim("lesson.moe.ablate.notBusiest", { ...which, top: expert("busiest", top) }),
  ];
  const at = "exp-expert-ablation";
  if (r.loss_before !== null && r.loss_after !== null && r.loss_change !== null) {
    out.push(either(r.loss_change > 0, "lesson.moe.ablate.worse", "lesson.moe.ablate.better", { ...which,
      before: dec("loss-before", r.loss_before, at), after: dec("loss-after", r.loss_after, at), change: dec("loss-change", r.loss_change, at) }));
  } else out.push(claim("lesson.moe.ablate.noLoss"));
  const b0 = r.before[0], a0 = r.after[0];
  if (b0 && a0) {
    const vars = { ...which, before: token("top-before", b0.token, b0.id, at), pb: pct("top-before-p", b0.prob, at),
      after: token("top-after", a0.token, a0.id, at), pa: pct("top-after-p", a0.prob, at) };
    out.push(b0.id === a0.id ? claim("lesson.moe.ablate.sameTop", vars) : claim("lesson.moe.ablate.newTop", vars));
  }
  return out;
}

/** The summary, with what the load-balancing loss did and did not do on this text: the block that left most experts
 *  idle (ties: the less even one), else the least even block. */
function summary(): Text {
  const ml = moeLayers(), e = E();
  const idx = ml.map((l) => get(S.chosen(l)));
  if (!cfg() || !ml.length || idx.some((t) => !t)) return [];
  const n = idx.map((t) => counts(t!)), idle = n.map((c) => c.filter((x) => x === 0).length);
  const share = n.map((c, i) => Math.max(...c) / idx[i]!.data.length);
  const score = ml.map((_, i) => idle[i] * 2 + share[i]); // most idle experts first, then the largest busiest share
  const i = argBest(score), vars = { layer: int("end-layer", ml[i]), share: pct("end-share", share[i]), even: pct("even-share", 1 / e),
    u: int("end-idle", idle[i]), e: int("n-experts", e) };
  return [
    say("lesson.moe.end.papers"),
    say("lesson.moe.end.body"),
    idle[i] > 0 ? claim("lesson.moe.end.idle", vars) : claim("lesson.moe.end.noIdle", vars),
  ];
}

/** A step whose target and controls are read when the card asks (they follow the loaded model). */
function step(s: Omit<LessonStep, "target" | "controls"> & { target: string; controls?: () => string[] }): LessonStep {
  const { controls, ...rest } = s;
  return { ...rest, get controls() { return controls?.(); } };
}

const STEPS: LessonStep[] = [
  step({ id: "intro", target: "arch", title: "lesson.moe.intro.title", enter: async () => { await ensureInfo("n_active_params"); await showLoaded("overview"); },
    body: intro }),
  step({ id: "cost", target: "experts-params", title: "lesson.moe.cost.title",
    enter: async () => { toMoeBlock(); await showLoaded(EXPERTS); }, body: cost }),
  step({ id: "router", target: "experts-path", title: "lesson.moe.router.title",
    enter: async () => { app.layer = moeLayers()[0] ?? 0; await showLoaded(EXPERTS); }, needs: () => blockSpecs(layer()), body: router }),
  step({ id: "topk", target: "experts-path", title: "lesson.moe.topk.title",
    enter: async () => { toMoeBlock(); await showLoaded(EXPERTS); }, needs: () => blockSpecs(layer()), body: topk }),
  step({ id: "sum", target: "experts-path", title: "lesson.moe.sum.title",
    enter: async () => { toMoeBlock(); await showLoaded(EXPERTS); }, needs: () => blockSpecs(layer()), body: sum }),
  step({ id: "load", target: "experts-load", title: "lesson.moe.load.title", enter: toLeastEven,
    needs: () => [...allChosen(), ...blockSpecs(layer())], body: load }),
  step({ id: "balance", target: "experts-load", title: "lesson.moe.balance.title",
    enter: async () => { await toLeastEven(); await ensureInfo("n_active_params"); }, needs: () => blockSpecs(layer()), body: balance }),
  step({ id: "special", target: "experts-routing", title: "lesson.moe.special.title",
    enter: async () => {
      await ensure(allChosen());
      const c = clearestKind();
      if (c) app.layer = c.layer; else toMoeBlock();
      await showLoaded(EXPERTS);
    },
    needs: allChosen, body: special, task: () => [say("lesson.moe.special.task")] }),
  step({ id: "layers", target: "experts-layer", title: "lesson.moe.layers.title",
    enter: async () => { toMoeBlock(); await showLoaded(EXPERTS); }, needs: () => [...allChosen(), ...blockSpecs(layer())], body: layersStep,
    task: () => [say("lesson.moe.layers.task")] }),
  step({ id: "params", target: "experts-params", title: "lesson.moe.params.title",
    enter: async () => { await ensureInfo("n_active_params"); toMoeBlock(); await showLoaded(EXPERTS); }, body: params }),
  step({ id: "ablate", target: "exp-expert-ablation", title: "lesson.moe.ablate.title", enter: enterAblate,
    needs: () => (xp.expertAblated ? [S.chosen(xp.expertAblated[0])] : []), body: ablate,
    controls: () => ["exp-experts"], task: () => [say("lesson.moe.ablate.task")] }),
  step({ id: "summary", target: "", title: "lesson.moe.end.title", needs: allChosen, body: summary }),
];

export const moeLesson: Lesson = { id: "moe", title: "lesson.moe.title", steps: STEPS };
