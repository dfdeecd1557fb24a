// The lesson "What the model represents": why one MLP neuron of the learner's text is hard to read, what the sparse
// autoencoder the model ships does with the residual stream, the text's most active feature and its page, guess then
// reveal, steering with its decoder direction as a test of cause, and what the features miss. Told with the numbers
// of /api/features, /api/features/{hook}/{id} and /api/steer for the learner's text (the Features page's own
// requests, so the page shows the same answers), and the MLP's hidden layer from the trace. Opened from the Features
// page (lessons/choose.ts), which the app offers only where the model ships an autoencoder. Its words are in the
// catalogues ("lesson.features.*"); web/tests/lessons/claims.features.ts checks every claim on many texts.
import { tick } from "svelte";
import { SvelteMap } from "svelte/reactivity";
import { call } from "../lib/client";
import { visible } from "../lib/format";
import type { FeatureHookOut, FeatureHooksOut, FeaturePageOut, FeaturesOut, SteerIn, SteerOut, TensorSpec } from "../lib/generated/api";
import { claim, either, say, val, type Lesson, type LessonStep, type Text, type Value } from "../lib/lesson";
import { dec, int, pct, sig3, token, word } from "../lib/lessonFormat";
import { app } from "../lib/state.svelte";
import { features } from "../pages/features/api";
import { steerApi, steerLayerOf } from "../pages/features/steerApi";
import { steerStore } from "../pages/features/steerStore.svelte";
import { featureKey, fx } from "../pages/features/store.svelte";
import { errorSummary, firesAt, listsAll, textFeatures } from "../pages/features/words";
import { idVal, tokAt as traceTok } from "./reader";

/** The steering strength the lesson asks for, in units of the feature's largest activation on the text: the decoder
 *  row has length 1, so this adds the feature as if it fired STEER_TIMES as strongly as it does here. */
export const STEER_TIMES = 4;
/** How many of the tokens a neuron fires on the text names. */
const LIST = 4;

/** A share that may pass 100% or fall below 0 (an error longer than its vector, a variance explained below zero). */
const share = (id: string, x: number): Value => val(id, `${sig3(x * 100)}%`, x);

const modelName = () => app.trace?.model ?? "";
const ids = () => app.trace?.token_ids ?? [];

// -- the answers, kept by what they were asked for (reactive: the text reads them) ------------------------------

const hooks = new SvelteMap<string, FeatureHookOut[]>();
const outs = new SvelteMap<string, FeaturesOut>();
const pages = new SvelteMap<string, FeaturePageOut>();
const steers = new SvelteMap<string, SteerOut>();

/** The autoencoder in view: the one chosen on the page, else the model's default (its middle one). */
function hook(): FeatureHookOut | null {
  const hs = hooks.get(modelName()) ?? [];
  return hs.find((h) => h.hook === fx.hook) ?? hs.find((h) => h.default) ?? hs[0] ?? null;
}
const outKey = (h: FeatureHookOut) => `${modelName()}|${h.hook}|${ids().join()}`;
/** The features of the learner's text at the autoencoder in view (every active one: top = k), once asked. */
function current(): FeaturesOut | null {
  const h = hook();
  return h ? outs.get(outKey(h)) ?? null : null;
}
/** The feature the lesson reads: the text's most active one among those that do not fire at every token (a feature
 *  active everywhere picks out no token; on explainer-small the most active is often one such), else the most active. */
function best(): { id: number; tokens: number; max: number; at: number } | null {
  const o = current();
  if (!o) return null;
  const all = textFeatures(o);
  return all.find((f) => f.tokens < o.positions.length) ?? all[0] ?? null;
}
const pageOf = (h: FeatureHookOut, id: number) => pages.get(`${modelName()}|${h.hook}|${id}`) ?? null;

/** The request the lesson steers with: the best feature's direction at STEER_TIMES its largest activation here. */
function steerRequest(): SteerIn | null {
  const h = hook(), b = best(), layer = h ? steerLayerOf(h.hook) : null;
  if (!h || !b || layer === null || !app.trace) return null;
  return { model: modelName(), text: app.text, strength: STEER_TIMES * b.max, feature: { layer, id: b.id } };
}
const steerKey = (r: SteerIn) => JSON.stringify(r);

/** Ask which autoencoders the model ships and the text's features at the one in view (the page's own request). */
async function load(): Promise<void> {
  const m = modelName();
  if (!m) return;
  if (!hooks.has(m)) hooks.set(m, (await call<FeatureHooksOut>(`features/hooks?model=${encodeURIComponent(m)}`)).hooks);
  const h = hook();
  if (!h || !app.trace) return;
  const key = outKey(h);
  if (!outs.has(key)) outs.set(key, await features.ofText({ model: m, ids: app.trace.token_ids, hook: h.hook, top: h.k ?? undefined }));
}

/** Open the Features page with the autoencoder in view, and the page of the text's most active feature when `open`. */
async function openFeatures(open: boolean): Promise<void> {
  app.view = "features";
  await tick();
  try {
    await load();
  } catch {
    return; // the page shows the error
  }
  const h = hook(), b = best();
  fx.hovered = null;
  if (!open || !h || !b) return;
  fx.pos = b.at;
  fx.open = { hook: h.hook, id: b.id };
  const key = `${modelName()}|${h.hook}|${b.id}`;
  if (h.pages && !pages.has(key)) {
    try {
      pages.set(key, await features.page(modelName(), h.hook, b.id));
    } catch {
      // the feature's page shows the error
    }
  }
}

/** Steer as the lesson does, and show the answer in the page's steering panel. */
async function openSteer(): Promise<void> {
  await openFeatures(true);
  const r = steerRequest();
  if (!r || !r.feature) return;
  steerStore.mode = "feature";
  steerStore.featureLayer = r.feature.layer;
  steerStore.featureId = r.feature.id;
  steerStore.prompt = r.text ?? "";
  steerStore.strength = r.strength;
  const key = steerKey(r);
  try {
    if (!steers.has(key)) steers.set(key, await steerApi.steer(r));
  } catch {
    return;
  }
  steerStore.result = steers.get(key)!;
  steerStore.asked = r;
}

// -- the MLP neuron of the first step ---------------------------------------------------------------------------

const mlpSpec = (l: number): TensorSpec => ({ name: `blocks.${l}.mlp.post` });

/** Block L's MLP neuron with the largest activation on the text, and the positions where it is above half of it. */
export function loudestNeuron(data: ArrayLike<number>, T: number, M: number): { j: number; max: number; at: number; over: number[] } {
  let j = 0, at = 0, max = -Infinity;
  for (let t = 0; t < T; t++) for (let i = 0; i < M; i++) if (data[t * M + i] > max) { max = data[t * M + i]; j = i; at = t; }
  const over: number[] = [];
  for (let t = 0; t < T; t++) if (data[t * M + j] > max / 2) over.push(t);
  return { j, max, at, over };
}

const tokAt = (id: string, p: number): ReturnType<typeof token> =>
  token(id, current()?.positions[p]?.token ?? "", app.trace?.token_ids[p] ?? -1);
/** A context of a feature page as a short line (CONTEXT tokens before its centre token, bracketed, and 2 after), spaces
 *  shown as the page shows them. */
export const CONTEXT = 3;
function contextLine(c: FeaturePageOut["top_contexts"][number]): string {
  const from = Math.max(0, c.center - CONTEXT);
  return c.tokens.slice(from, c.center + 3).map((s, i) => (from + i === c.center ? `[${visible(s)}]` : visible(s))).join(" ");
}

/** How many tokens of a continuation the card quotes (the panel shows them all). */
export const QUOTE = 6;
/** A continuation's first QUOTE tokens, each with its spaces visible, separated by spaces, "…" where more follow. */
export function quoted(tokens: string[]): string {
  return tokens.slice(0, QUOTE).map(visible).join(" ") + (tokens.length > QUOTE ? " …" : "");
}

// -- the steps --------------------------------------------------------------------------------------------------

const steps: LessonStep[] = [
  {
    id: "neuron",
    target: "mlp-pre",
    enter: async () => {
      try {
        await load();
      } catch {
        return;
      }
      const h = hook();
      if (h) app.layer = h.layer;
      app.view = "mlp";
    },
    needs: () => {
      const h = hook();
      return h ? [mlpSpec(h.layer)] : [];
    },
    title: "lesson.features.neuron.title",
    body: () => {
      const h = hook(), tr = app.trace;
      const x = h ? app.tensor(mlpSpec(h.layer)) : undefined;
      if (!h || !tr || !x) return [];
      const [T, M] = x.shape;
      const n = loudestNeuron(x.data, T, M);
      const distinct = new Set(n.over.map((p) => tr.token_ids[p])).size;
      const listed = n.over.slice(0, LIST).map((p) => traceTok(`neuron-tok-${p}`, p));
      const toks = word("neuron-tokens", listed.map((v) => v.v).join(", "));
      const vars = { layer: int("layer", h.layer), neuron: idVal("neuron", n.j), m: int("m-neurons", M),
        max: dec("neuron-max", n.max), tok: traceTok("neuron-at", n.at), pos: int("neuron-pos", n.at),
        over: int("neuron-over", n.over.length), n: int("n-tokens", T), toks, distinct: int("neuron-distinct", distinct),
        hook: word("hook", h.hook) };
      const out: Text = [
        claim("lesson.features.neuron.loudest", vars),
        n.over.length === 1 ? claim("lesson.features.neuron.one", vars)
          : claim(n.over.length > LIST ? "lesson.features.neuron.manyListed" : "lesson.features.neuron.many", vars),
      ];
      if (n.over.length > 1) out.push(either(distinct > 1, "lesson.features.neuron.different", "lesson.features.neuron.same", vars));
      out.push(say("lesson.features.neuron.hypothesis"));
      return out;
    },
    task: () => [say("lesson.features.neuron.task")],
  },
  {
    id: "sae",
    target: "features-summary",
    enter: () => openFeatures(false),
    title: "lesson.features.sae.title",
    body: () => {
      const h = hook(), o = current(), c = app.trace?.config;
      if (!h || !o || !c) return [];
      const s = errorSummary(o), distinct = textFeatures(o).length;
      const vars = { layer: int("layer", h.layer), din: int("d-in", c.n_embd), dsae: int("d-sae", o.d_sae),
        ratio: dec("ratio", o.d_sae / c.n_embd), k: int("k", o.k ?? 0), lo: int("active-lo", s?.lo ?? 0),
        hi: int("active-hi", s?.hi ?? 0), distinct: int("distinct", distinct), n: int("n-tokens", o.positions.length),
        hook: word("hook", o.hook) };
      return [
        claim("lesson.features.sae.widths", vars),
        say("lesson.features.sae.what"),
        o.k !== null ? claim("lesson.features.sae.topk", vars) : say("lesson.features.sae.relu"),
        claim(!listsAll(o) ? "lesson.features.sae.activeListed" : s && s.lo === s.hi ? "lesson.features.sae.activeSame"
          : "lesson.features.sae.active", vars),
      ];
    },
  },
  {
    id: "feature",
    target: "feat-page",
    enter: () => openFeatures(true),
    title: "lesson.features.feature.title",
    body: () => {
      const h = hook(), o = current(), b = best();
      if (!h || !o) return [];
      if (!b) return [claim("lesson.features.feature.none", { hook: word("hook", h.hook) })];
      const fires = firesAt(o, b.id).size, T = o.positions.length;
      const vars = { id: idVal("feature", b.id), max: dec("feature-max", b.max), tok: tokAt("feature-at", b.at),
        pos: int("feature-pos", b.at), fires: int("fires", fires), n: int("n-tokens", T), hook: word("hook", h.hook) };
      const first = textFeatures(o)[0];
      const out: Text = [first.id === b.id ? claim("lesson.features.feature.best", vars)
        : claim("lesson.features.feature.bestSparse", { ...vars, top: idVal("feature-top", first.id) }),
        claim(fires === 1 ? "lesson.features.feature.firesOne" : "lesson.features.feature.fires", vars)];
      if (fires === T && T > 1) out.push(claim("lesson.features.feature.everywhere", vars));
      if (!h.pages) return [...out, say("lesson.features.feature.noPages")];
      const p = pageOf(h, b.id);
      if (!p) return [];
      const top = p.top_contexts[0];
      // the page's lines these numbers are read from: never under the card (the page is taller than a screen)
      // (the largest activation is its strongest context's, shown on that context's line)
      const pv = { ...vars, density: pct("density", p.density, "feat-density"),
        corpus: int("corpus-tokens", p.corpus_tokens, "feat-density"),
        cmax: dec("corpus-max", p.max_activation, top ? "feat-top" : "feat-density"),
        ctx: top ? contextLine(top) : "" }; // plain words: a line that wraps on a phone
      out.push(claim("lesson.features.feature.corpus", pv));
      if (top) out.push(claim("lesson.features.feature.top", pv));
      out.push(either(b.max >= p.max_activation / 2, "lesson.features.feature.strong", "lesson.features.feature.weak", pv));
      return out;
    },
  },
  {
    id: "guess",
    target: "feat-guess",
    enter: () => openFeatures(true),
    title: "lesson.features.guess.title",
    body: () => {
      const h = hook(), b = best();
      if (!h || !current()) return [];
      if (!b) return [claim("lesson.features.feature.none", { hook: word("hook", h.hook) })];
      if (!h.pages) return [say("lesson.features.feature.noPages")];
      const p = pageOf(h, b.id);
      if (!p) return [];
      const out: Text = [say("lesson.features.guess.why")];
      if (!fx.revealed.has(featureKey(h.hook, b.id))) return [...out, say("lesson.features.guess.hidden")];
      // the answer the page has just revealed: the card moves off it
      const promoted = word("promoted", p.promoted.slice(0, 3).map((l) => token(`promoted-${l.id}`, l.token, l.id).v).join(", "),
        "feat-answer");
      const vars = { id: idVal("feature", b.id), promoted, hook: word("hook", h.hook) };
      if (p.promoted.length) out.push(claim("lesson.features.guess.promoted", vars));
      out.push(p.description ? claim("lesson.features.guess.written", { ...vars, desc: word("description", p.description, "feat-answer") })
        : claim("lesson.features.guess.unwritten", vars));
      return out;
    },
    task: () => [say(hook()?.pages === false ? "lesson.features.guess.taskNoPages" : "lesson.features.guess.task")],
    done: () => {
      const h = hook(), b = best();
      return !!h && !!b && fx.revealed.has(featureKey(h.hook, b.id));
    },
  },
  {
    id: "steer",
    target: "steer-panel",
    controls: ["steer-strength"],
    enter: openSteer,
    title: "lesson.features.steer.title",
    body: () => {
      const h = hook(), b = best();
      if (!h || !current()) return [];
      if (!b) return [claim("lesson.features.feature.none", { hook: word("hook", h.hook) })];
      const r = steerRequest();
      if (!r) return [claim("lesson.features.steer.notPost", { hook: word("hook", h.hook) })];
      const s = steers.get(steerKey(r));
      if (!s) return [];
      // plain words (a line that wraps): the first QUOTE tokens, spaces shown as the panel shows them
      const cont = (ts: SteerOut["plain"]) => quoted(ts.map((x) => x.text));
      // the strength is in the steered side's title: the two continuations stay clear of the card
      const vars = { id: idVal("feature", b.id), layer: int("layer", s.direction.layer), s: dec("strength", s.strength, "steer-sides"),
        times: int("times", STEER_TIMES), max: dec("feature-max", b.max), plain: cont(s.plain),
        steered: cont(s.steered), at: int("changed-at", s.changed_at ?? -1),
        b: dec("breakdown", s.breakdown ?? 0), hook: word("hook", h.hook) };
      return [
        claim("lesson.features.steer.how", vars),
        claim(s.changed_at === null ? "lesson.features.steer.same"
          : s.changed_at === 0 ? "lesson.features.steer.differFirst" : s.changed_at === 1 ? "lesson.features.steer.differOne"
            : "lesson.features.steer.differ", vars),
        s.changed_at === null ? say("lesson.features.steer.sameMeans") : say("lesson.features.steer.cause"),
        either(s.breakdown !== null, "lesson.features.steer.breaks", "lesson.features.steer.holds", vars),
        // the lesson's own strength (STEER_TIMES the feature's activation) can be past the point where the text breaks
        ...(s.steered_broken ? [claim("lesson.features.steer.brokenHere", vars)] : []),
      ];
    },
    task: () => [say("lesson.features.steer.task")],
  },
  {
    id: "miss",
    target: "feat-tokens",
    enter: () => openFeatures(false),
    title: "lesson.features.miss.title",
    body: () => {
      const o = current();
      if (!o) return [];
      const s = errorSummary(o), ev = o.explained_variance;
      if (!s || ev === null) return [claim("lesson.features.miss.one", { hook: word("hook", o.hook) })];
      const vars = { ev: share("ev", ev), mean: share("error-mean", s.mean), worst: tokAt("error-worst", s.worst.position),
        pos: int("error-pos", s.worst.position), max: share("error-max", s.worst.relative_error ?? 0),
        n: int("n-tokens", o.positions.length), hook: word("hook", o.hook) };
      return [
        say("lesson.features.miss.what"),
        claim("lesson.features.miss.numbers", vars),
        claim(ev >= 0.7 ? "lesson.features.miss.good" : ev >= 0 ? "lesson.features.miss.low" : "lesson.features.miss.none", vars),
        say("lesson.features.miss.why"),
      ];
    },
  },
  {
    id: "end",
    target: "",
    enter: () => openFeatures(false),
    title: "lesson.features.end.title",
    body: () => [say("lesson.features.end.body")],
  },
];

export const featuresLesson: Lesson = { id: "features", title: "lesson.features.title", steps };
