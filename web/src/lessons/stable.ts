// The tour chapter for the families after the Llama family (Qwen3, Gemma 3): "small changes that keep training
// stable". QK-norm (both), the norms after each branch (Gemma's sandwich norms), local and global layers and the
// memory the window saves at long context (Gemma). Every value is the loaded model's own, from its config and size
// (/api/models) and from the tensors of the text on screen, through the views' API; what a model lacks, the step
// says so of the model that runs. A sentence that depends on the numbers is a claim, checked by
// web/tests/lessons/claims.stable.ts, with the other wording beside it; a paper's finding names the paper. Which
// lesson a model opens is its capabilities' choice (lessons/index.ts). The words are under lesson.stable.*.
import type { TensorSpec } from "../lib/generated/api";
import { isLocal } from "../lib/family";
import type { MessageKey } from "../lib/i18n";
import { claim, either, say, type Lesson, type LessonStep, type Sentence, type Text } from "../lib/lesson";
import { dec, int, word } from "../lib/lessonFormat";
import { app } from "../lib/state.svelte";
import type { Tensor } from "../lib/tensor";
import { specsFor, stageSpecs, type StageId } from "../lib/pipeline";
import { absMax, bytesOf, cfg, ensureWeights, focusToken, info, norm, nTok, showLoaded, size } from "./reader";

const caps = () => app.caps;
const nLocal = () => caps().layer_types.filter((k) => k === "sliding_attention").length;
const firstLocal = () => Math.max(0, caps().layer_types.indexOf("sliding_attention"));
/** "3 local layers", "1 global layer": a count of layers with its noun agreeing (the catalogue's own forms). */
const nLayers = (id: string, n: number, one: MessageKey, many: MessageKey): Sentence =>
  say(n === 1 ? one : many, { n: int(id, n) });
const localGlobal = (nl: number, ng: number) => ({
  local: nLayers("n-local", nl, "lesson.stable.nLocalOne", "lesson.stable.nLocal"),
  global: nLayers("n-global", ng, "lesson.stable.nGlobalOne", "lesson.stable.nGlobal"),
});

/** A view's tensor by its name in stageSpecs (the focus as it is now). */
const get = (view: StageId, key: string): Tensor | undefined => {
  const spec = stageSpecs(view, app.focus())[key];
  return spec ? app.tensor(spec) : undefined;
};

/** The length of row `row` of a tensor (along its last dimension); NaN before the tensor is here. */
function len(t: Tensor | undefined, row = 0): number {
  if (!t) return NaN;
  const d = t.shape[t.shape.length - 1];
  return norm(t.data, row * d, (row + 1) * d);
}
const ratio = (xs: number[]) => Math.max(...xs) / Math.max(1e-30, Math.min(...xs));

// -- the steps ---------------------------------------------------------------------------------------------

function intro(): Text {
  const c = cfg(), m = info(), f = focusToken();
  if (!c || !f || m?.n_params == null) return [];
  const k = caps(), nl = nLocal();
  return [
    say("lesson.stable.intro.model", { name: word("model-name", app.trace!.model), type: word("model-type", c.model_type ?? ""),
      layers: int("n-layer", c.n_layer), heads: int("n-head", c.n_head), kv: int("n-kv-heads", c.n_kv_heads || c.n_head),
      d: int("d-model", c.n_embd), params: int("n-params", m.n_params) }),
    either(k.norm === "rms" && k.positions === "rope" && k.mlp === "gated", "lesson.stable.intro.base",
      "lesson.stable.intro.baseOther"),
    either(k.qk_norm, "lesson.stable.intro.qkNorm", "lesson.stable.intro.noQkNorm"),
    either(k.sandwich_norm, "lesson.stable.intro.sandwich", "lesson.stable.intro.noSandwich"),
    nl ? claim("lesson.stable.intro.local", { ...localGlobal(nl, c.n_layer - nl), w: int("window", k.local_window ?? 0) })
      : claim("lesson.stable.intro.noLocal"),
    say("lesson.stable.intro.why"),
    say("lesson.stable.intro.numbers", { name: word("model-name", app.trace!.model) }),
    say("lesson.stable.intro.follow", { token: f }),
  ];
}

function qkNorm(): Text {
  const c = cfg(), f = focusToken();
  if (c && f && !caps().qk_norm) return [claim("lesson.stable.qk.none")];
  const q = get("qknorm", "q"), qn = get("qknorm", "qNormed"), rms = get("qknorm", "qRms");
  if (!c || !f || !q || !qn || !rms) return [];
  const p = app.pos, T = q.shape[0];
  const before = Array.from({ length: T }, (_, i) => len(q, i)), after = Array.from({ length: T }, (_, i) => len(qn, i));
  const spreadB = ratio(before), spreadA = ratio(after);
  const out: Text = [
    say("lesson.stable.qk.what", { dh: int("d-head", c.head_dim) }),
    say("lesson.stable.qk.here", { layer: int("layer", app.layer), head: int("head", app.head), token: f,
      before: dec("q-len", before[p], "qk-query"), rms: dec("q-rms", rms.data[p], "qk-query"),
      after: dec("q-normed-len", after[p], "qk-query") }),
  ];
  if (T >= 2) out.push(either(spreadA < spreadB, "lesson.stable.qk.closer", "lesson.stable.qk.notCloser",
    { n: int("n-tokens", T), before: dec("spread-before", spreadB, "qk-lengths"), after: dec("spread-after", spreadA, "qk-lengths") }));
  return out;
}

/** The effective scales of block `layer`'s QK-norms (Gemma's: 1 + weight), one per head dimension, shared by the heads. */
const normScales = (layer: number): TensorSpec[] =>
  ["attn.q_norm.w", "attn.k_norm.w"].map((w) => ({ name: `blocks.${layer}.${w}` }));

/** The attention scale as the model sets it: 1/√d_head, or 1/√s with Gemma's query_pre_attn_scalar s. */
function scaleIs(a: number, dh: number): Sentence {
  const s = 1 / (a * a);
  return Math.abs(s - dh) <= 1e-6 * dh ? claim("lesson.stable.qk.scaleHead", { dh: int("d-head", dh) })
    : claim("lesson.stable.qk.scaleScalar", { s: dec("query-pre-attn-scalar", s) });
}

function qkBound(): Text {
  const c = cfg(), f = focusToken(), qn = get("qknorm", "qNormed"), kn = get("qknorm", "kNormed"), sc = get("qknorm", "scaled");
  const [wq, wk] = normScales(app.layer).map((s) => app.weight(s));
  if (!c || !f || !qn || !kn || !sc || !wq || !wk || !caps().qk_norm) return [];
  const p = app.pos, a = caps().attn_scale, dh = c.head_dim;
  const largest = Math.max(...Array.from({ length: p + 1 }, (_, s) => Math.abs(sc.data[s])));
  const bound = a * len(qn, p) * Math.max(...Array.from({ length: p + 1 }, (_, s) => len(kn, s)));
  // x / rms(x) is at most √Dh long (the norm's epsilon only shortens it), and the learned scale g stretches no dimension
  // by more than max|g|: a normed query is at most max|g_q| √Dh long, a key max|g_k| √Dh, whatever W_q and W_k are
  const gq = absMax(wq), gk = absMax(wk), qMax = gq * Math.sqrt(dh), kMax = gk * Math.sqrt(dh), cap = a * qMax * kMax;
  const q = get("qknorm", "q"), k = get("qknorm", "k");
  if (!q || !k) return [];
  const raw = a * len(q, p) * Math.max(...Array.from({ length: p + 1 }, (_, s) => len(k, s))); // the same, before the norm
  return [
    either(largest <= bound * (1 + 1e-6), "lesson.stable.qk.bound", "lesson.stable.qk.boundBroken",
      { token: f, largest: dec("largest-score", largest, "qk-bound"), bound: dec("score-bound", bound, "qk-bound") }),
    either(bound <= cap * (1 + 1e-6), "lesson.stable.qk.cap", "lesson.stable.qk.capBroken",
      { layer: int("layer", app.layer), dh: int("d-head", dh), root: dec("root-d-head", Math.sqrt(dh)),
        gq: dec("q-scale-max", gq), gk: dec("k-scale-max", gk), qmax: dec("q-len-max", qMax), kmax: dec("k-len-max", kMax),
        a: dec("attn-scale", a), is: scaleIs(a, dh), cap: dec("score-cap", cap, "qk-bound") }),
    either(raw > bound, "lesson.stable.qk.rawAbove", "lesson.stable.qk.rawBelow", { raw: dec("score-bound-raw", raw, "qk-bound") }),
  ];
}

function sandwich(): Text {
  const c = cfg(), f = focusToken();
  if (!c || !f) return [];
  if (!caps().sandwich_norm) return [claim("lesson.stable.sw.none", { type: word("model-type", c.model_type ?? "") })];
  const raw = get("residual", "attnRaw"), normed = get("residual", "attn"), pre = get("residual", "pre");
  if (!raw || !normed || !pre) return [];
  const vars = { layer: int("layer", app.layer), token: f, raw: dec("attn-raw-len", len(raw), "resid-attnRaw"),
    normed: dec("attn-normed-len", len(normed), "resid-attn"), stream: dec("resid-pre-len", len(pre), "resid-pre") };
  return [
    say("lesson.stable.sw.what"),
    either(len(normed) < len(raw), "lesson.stable.sw.shrinks", "lesson.stable.sw.grows", vars),
  ];
}

/** The same for the MLP's branch, and why the norms are there (only where the model has them). */
function sandwichMlp(): Text {
  const f = focusToken(), raw = get("residual", "mlpRaw"), normed = get("residual", "mlp");
  if (!f || !raw || !normed || !caps().sandwich_norm) return [];
  return [
    either(len(normed) < len(raw), "lesson.stable.sw.mlpShrinks", "lesson.stable.sw.mlpGrows", { layer: int("layer", app.layer),
      token: f, raw: dec("mlp-raw-len", len(raw), "resid-mlpRaw"), normed: dec("mlp-normed-len", len(normed), "resid-mlp") }),
    say("lesson.stable.sw.why"),
  ];
}

/** The focus head's attention row at the focus token in block `layer`. */
const rowSpec = (layer: number): TensorSpec => ({ name: `blocks.${layer}.attn.pattern`, head: app.head, position: app.pos });
/** The global layer the window view's button beside the pattern switches to from the first local layer: the first
 *  global one after it, else the first global one (-1: none). */
function globalAfterLocal(): number {
  const types = caps().layer_types, lo = firstLocal();
  const after = types.findIndex((k, l) => l > lo && k === "full_attention");
  return after >= 0 ? after : types.indexOf("full_attention");
}
/** The weight a row puts on the keys `w` or more positions before position `p` (those a window of `w` hides). */
function beyond(row: Tensor, p: number, w: number): number {
  let s = 0;
  for (let j = 0; j <= p - w; j++) s += row.data[j];
  return s;
}

function windowStep(): Text {
  const c = cfg(), f = focusToken();
  if (!c || !f) return [];
  const k = caps(), nl = nLocal(), T = nTok();
  if (!nl || k.local_window === null) return [claim("lesson.stable.win.none", { layers: int("n-layer", c.n_layer) })];
  const w = k.local_window;
  return [
    claim("lesson.stable.win.what", { ...localGlobal(nl, c.n_layer - nl), w: int("window", w) }),
    T > w
      ? claim("lesson.stable.win.hides", { n: int("n-tokens", T), w: int("window", w), hidden: int("hidden-pairs",
        ((T - w) * (T - w + 1)) / 2, "window-sliding") })
      : claim("lesson.stable.win.short", { n: int("n-tokens", T), w: int("window", w) }),
    nl < c.n_layer ? claim("lesson.stable.win.global") : claim("lesson.stable.win.noGlobal", { w: int("window", w) }),
  ];
}

/** The focus head's real pattern in the first local layer and in the global layer after it, whichever layer the
 *  learner has switched to since: what the first puts beyond the window (nothing), what the second puts there. */
function patternStep(): Text {
  const f = focusToken(), k = caps(), w = k.local_window;
  if (!f || w === null) return [];
  if (app.pos < w) {
    return [claim("lesson.stable.win.nearStart", { token: f, pos: int("pos", app.pos), w: int("window", w) })];
  }
  const lo = firstLocal(), gl = globalAfterLocal();
  const lr = app.tensor(rowSpec(lo)), gr = gl >= 0 ? app.tensor(rowSpec(gl)) : undefined;
  if (!lr || (gl >= 0 && !gr)) return [];
  const out: Text = [claim("lesson.stable.win.outside", { layer: int("local-layer", lo), head: int("head", app.head),
    token: f, w: int("window", w), v: dec("outside-weight", beyond(lr, app.pos, w), app.layer === lo ? "window-pattern" : undefined) })];
  if (gr) out.push(claim("lesson.stable.win.globalReach", { layer: int("global-layer", gl), head: int("head", app.head),
    v: dec("global-outside-weight", beyond(gr, app.pos, w), app.layer === gl ? "window-pattern" : undefined) }));
  return out;
}

function memory(): Text {
  const c = cfg();
  if (!c) return [];
  const k = caps(), nl = nLocal(), L = c.n_layer, G = c.n_kv_heads || c.n_head, b = bytesOf(c.dtype);
  const per = 2 * G * c.head_dim * b, n = c.block_size;
  if (!nl || k.local_window === null) {
    return [claim("lesson.stable.mem.noWindow", { per: size("per-token", L * per, "gqa-memory"), ctx: int("ctx", n),
      total: size("ctx-bytes", L * per * n, "gqa-memory") })];
  }
  const w = k.local_window, all = L * n * per, windowed = ((L - nl) * n + nl * Math.min(n, w)) * per;
  return [
    say("lesson.stable.mem.what", { w: int("window", w) }),
    either(windowed < all, "lesson.stable.mem.saves", "lesson.stable.mem.same", { ctx: int("ctx", n),
      all: size("ctx-all", all, "window-memory"), windowed: size("ctx-windowed", windowed, "window-memory"),
      r: dec("ctx-ratio", all / windowed, "window-memory") }),
    claim("lesson.stable.mem.report", { ...localGlobal(nl, L - nl), w: int("window", w) }),
    nl < L ? claim("lesson.stable.mem.globalGrows") : claim("lesson.stable.mem.allLocal"),
  ];
}

/** A step whose target, controls and task follow the loaded model's capabilities (read when the card asks): a task
 *  with nothing to do on this model is no task, so the card shows none. */
function step(s: Omit<LessonStep, "target" | "controls" | "title"> & { target: () => string; controls?: () => string[];
  title: MessageKey | (() => MessageKey) }): LessonStep {
  const { target, controls, task, title, ...rest } = s;
  return {
    ...rest,
    get title() { return typeof title === "function" ? title() : title; },
    get target() { return target(); },
    get controls() { return controls?.(); },
    get task() { return task && task().length ? task : undefined; },
  };
}

const local = () => nLocal() > 0 && caps().local_window !== null;

const STEPS: LessonStep[] = [
  step({ id: "intro", target: () => "arch", title: "lesson.stable.intro.title", enter: () => showLoaded("overview"),
    body: intro }),
  step({ id: "qk-norm", target: () => (caps().qk_norm ? "qk-query" : "qkv-mats"), title: "lesson.stable.qk.title",
    enter: async () => { app.layer = 0; app.head = 0; await showLoaded(caps().qk_norm ? "qknorm" : "qkv"); },
    needs: () => (caps().qk_norm ? specsFor("qknorm", app.focus()) : []), body: qkNorm }),
  step({ id: "qk-bound", target: () => (caps().qk_norm ? "qk-bound" : "qkv-mats"), title: "lesson.stable.qkBound.title",
    enter: async () => {
      await showLoaded(caps().qk_norm ? "qknorm" : "qkv");
      if (caps().qk_norm) await ensureWeights(normScales(app.layer));
    },
    needs: () => (caps().qk_norm ? specsFor("qknorm", app.focus()) : []),
    body: () => (cfg() && !caps().qk_norm ? [claim("lesson.stable.qk.none")] : qkBound()),
    controls: () => (caps().qk_norm ? ["qk-lengths"] : []),
    task: () => (caps().qk_norm ? [say("lesson.stable.qk.task")] : []) }),
  step({ id: "qk-why", target: () => "", title: "lesson.stable.qkWhy.title",
    body: () => [say("lesson.stable.qk.preNorm"), say("lesson.stable.qk.papers")] }),
  step({ id: "sandwich", target: () => "resid-attn", title: "lesson.stable.sw.title",
    enter: async () => { app.layer = 0; await showLoaded("residual"); }, needs: () => specsFor("residual", app.focus()),
    body: sandwich }),
  step({ id: "sandwich-mlp", target: () => "resid-mlp", title: "lesson.stable.swMlp.title",
    enter: async () => { app.layer = 0; await showLoaded("residual"); }, needs: () => specsFor("residual", app.focus()),
    body: sandwichMlp }),
  step({ id: "window", target: () => (local() ? "window-sliding" : "attn-pattern"), title: "lesson.stable.win.title",
    enter: async () => { if (local()) { app.layer = firstLocal(); await showLoaded("window"); } else await showLoaded("attention"); },
    body: windowStep }),
  step({ id: "window-pattern", target: () => "window-pattern", title: "lesson.stable.winPattern.title",
      enter: async () => { app.layer = firstLocal(); await showLoaded("window"); },
      needs: () => [...specsFor("window", app.focus()), rowSpec(firstLocal()),
        ...(globalAfterLocal() >= 0 ? [rowSpec(globalAfterLocal())] : [])],
      body: patternStep,
      controls: () => (globalAfterLocal() >= 0 ? ["window-flip"] : []),
      task: () => (globalAfterLocal() >= 0 && app.pos >= (caps().local_window ?? Infinity)
        ? [say("lesson.stable.win.task", { button: say("fam.showGlobal", { l: int("flip-layer", globalAfterLocal()) }) })]
        : []),
      done: () => !isLocal(caps(), app.layer) }),
  step({ id: "memory", target: () => (local() ? "window-memory" : "gqa-memory"), title: () => (local() ? "lesson.stable.mem.title" : "lesson.stable.mem.titleNoWindow"),
    enter: () => showLoaded(local() ? "window" : "gqa"), body: memory }),
  step({ id: "summary", target: () => "", title: "lesson.stable.end.title", body: () => [say("lesson.stable.end.body")] }),
];

export const stableLesson: Lesson = {
  id: "stable",
  title: "lesson.stable.title",
  // the real pattern of a local layer and the MLP's norm only where the model has them (the other steps say what it lacks)
  get steps() { return STEPS.filter((s) => (s.id !== "window-pattern" || local()) && (s.id !== "sandwich-mlp" || caps().sandwich_norm)); },
};
