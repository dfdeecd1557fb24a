// The Experiments panels' state and their answers from /api/analysis, kept outside the components so that the
// Experiments lesson (src/lessons/experiments.ts) reads the same numbers the panels show, and can put the panels
// in the state its text talks about (a map's metric, a head switched off, another text). Answers are kept by the
// input they were computed for (model and token ids), and one request serves the panel and the lesson alike.
import { asError } from "../../lib/errorText";
import type { AblateOut, AnalogyOut, HeadsOut, ImportanceOut, LensOut, PruneOut } from "../../lib/generated/api";
import { ABLATION_TOP, LENS_TOP, NEIGHBOURS } from "../../lib/generated/limits";
import { analysis, type TokenArg } from "./api";

export type XTab = "lens" | "heads" | "experts" | "embed" | "steer";
export type Metric = "loss" | "kl" | "previous_token" | "first_token" | "duplicate_token" | "induction" | "rare_token"
  | "entropy" | "distance";
export type Mode = "zero" | "mean";
/** The input an analysis runs on. */
export interface XInput { model: string; ids: number[] }
/** A text the lesson chose for the head experiments in place of the learner's, for as long as the learner's text
 *  is the one it was chosen for (`for`, an input key). */
export interface Example extends XInput { text: string; for: string; loss: number; learnerLoss: number }
/** How the lesson chose the text of the head experiments for the learner's text `key`: the losses it went by. */
export interface TextChoice { key: string; own: number; example: XInput | null; exampleLoss: number | null; used: "own" | "example" }
/** The lesson's word arithmetic for a model: the famous analogy (null when one of its words, listed in `split`, is
 *  not one token), whether "queen" is one token, and an analogy that the model gets right (the task), after trying
 *  `tried` of them. */
export interface Arithmetic { model: string; famous: AnalogyOut | null; split: string[]; queenIsToken: boolean;
  task: { a: string; b: string; c: string; d: string } | null; tried: number }

class ExperimentsStore {
  tab = $state<XTab>("lens");
  /** What the head map shows, where its role scores come from, and how a head is switched off (HeadsPanel). */
  metric = $state<Metric>("loss");
  source = $state<"text" | "reference">("reference");
  mode = $state<Mode>("zero");
  /** The lesson's text for the head experiments, when it chose one (HeadsPanel shows it and offers the learner's). */
  example = $state.raw<Example | null>(null);
  /** Answers by request (see `cached`). */
  results = $state.raw(new Map<string, unknown>());
  /** The head switched off, the input it was switched off on (an input key), and the answer (HeadsPanel). */
  ablated = $state.raw<[number, number] | null>(null);
  ablationKey = $state("");
  ablation = $state.raw<AblateOut | null>(null);
  ablationError = $state.raw<Error | null>(null);
  ablationBusy = $state(false);
  /** The expert taken out of the routing ([layer, expert]), the input it was taken out on, and the answer (ExpertsPanel). */
  expertAblated = $state.raw<[number, number] | null>(null);
  expertKey = $state("");
  expertAblation = $state.raw<AblateOut | null>(null);
  expertError = $state.raw<Error | null>(null);
  expertBusy = $state(false);
  /** The pruning curve for `pruneKey` (PrunePanel). */
  prune = $state.raw<PruneOut | null>(null);
  pruneKey = $state("");
  /** The embedding arithmetic a − b + c (EmbeddingPanel). */
  analogy = $state.raw<AnalogyOut | null>(null);
  /** The lesson's choice of text for the head experiments, and its word arithmetic. */
  textChoice = $state.raw<TextChoice | null>(null);
  arithmetic = $state.raw<Arithmetic | null>(null);
  /** The focus position when the lesson's logit-lens step opened (its task: move it). */
  lessonPos = $state(-1);
}

export const xp = new ExperimentsStore();

/** The key an answer is stored under: the model and the token ids it was computed for. */
export function inputKey(model: string, ids: number[]): string {
  return `${model}|${ids.join()}`;
}
const keyOf = (inp: XInput) => inputKey(inp.model, inp.ids);

/** What the head experiments run on: the lesson's example while it stands for the learner's text, else that text. */
export function headsInput(learner: XInput | null): XInput | null {
  if (!learner) return null;
  const ex = xp.example;
  return ex && ex.model === learner.model && ex.for === keyOf(learner) ? ex : learner;
}

const inflight = new Map<string, Promise<unknown>>();
const KEEP = 48; // answers kept (a text's importance, roles and pruning, for a few texts and modes)

/** One answer per request key: from the store, from the request already on its way, or a new request. */
async function cached<T>(k: string, ask: () => Promise<T>): Promise<T> {
  if (xp.results.has(k)) return xp.results.get(k) as T;
  let p = inflight.get(k) as Promise<T> | undefined;
  if (!p) {
    p = ask().finally(() => inflight.delete(k));
    inflight.set(k, p);
  }
  const v = await p;
  if (!xp.results.has(k)) {
    const m = new Map(xp.results);
    m.set(k, v);
    while (m.size > KEEP) m.delete(m.keys().next().value as string);
    xp.results = m;
  }
  return v;
}

const importanceKey = (inp: XInput, mode: Mode) => `importance|${mode}|${keyOf(inp)}`;
const headsKey = (inp: XInput) => `heads|${keyOf(inp)}`;
const pruneKey = (inp: XInput, mode: Mode) => `prune|${mode}|${keyOf(inp)}`;

/** Each head switched off alone: the loss change map (48 forward passes for 48 heads). */
export const loadImportance = (inp: XInput, mode: Mode): Promise<ImportanceOut> =>
  cached(importanceKey(inp, mode), () => analysis.importance({ model: inp.model, ids: inp.ids, mode }));
export const importanceOf = (inp: XInput | null, mode: Mode): ImportanceOut | undefined =>
  inp ? (xp.results.get(importanceKey(inp, mode)) as ImportanceOut | undefined) : undefined;

/** Head roles on the text and on the reference set, and attention statistics. */
export const loadHeads = (inp: XInput): Promise<HeadsOut> =>
  cached(headsKey(inp), () => analysis.heads({ model: inp.model, ids: inp.ids, reference: true }));
export const headsOf = (inp: XInput | null): HeadsOut | undefined =>
  inp ? (xp.results.get(headsKey(inp)) as HeadsOut | undefined) : undefined;

/** The whole pruning curve, least important head first (no re-scoring); shown by the pruning panel. */
export async function loadPrune(inp: XInput, mode: Mode): Promise<PruneOut> {
  const r = await cached(pruneKey(inp, mode), () =>
    analysis.prune({ model: inp.model, ids: inp.ids, mode, max_heads: null, recompute: false }));
  xp.prune = r;
  xp.pruneKey = keyOf(inp);
  return r;
}

const lensKey = (inp: XInput, pos: number) => `lens|${pos}|${keyOf(inp)}`;

/** The logit lens at one position of `inp` (the top LENS_TOP tokens per layer); the lens panel shows the answer
 *  for the focus token. */
export const loadLens = (inp: XInput, pos: number): Promise<LensOut> =>
  cached(lensKey(inp, pos), () => analysis.lens({ model: inp.model, ids: inp.ids, positions: [pos], top: LENS_TOP }));
export const lensOf = (inp: XInput | null, pos: number): LensOut | undefined =>
  inp ? (xp.results.get(lensKey(inp, pos)) as LensOut | undefined) : undefined;

const analogyKey = (model: string, pos: TokenArg[], neg: TokenArg[]) => `analogy|${model}|${JSON.stringify([pos, neg])}`;

/** Embedding arithmetic: the sum of `positive` minus `negative` (single tokens) and its NEIGHBOURS nearest tokens. */
export const loadAnalogy = (model: string, positive: TokenArg[], negative: TokenArg[]): Promise<AnalogyOut> =>
  cached(analogyKey(model, positive, negative), () => analysis.analogy({ model, positive, negative, n: NEIGHBOURS }));

/** Switch head (l, h) off on `inp` in the current mode; the panel shows the answer, and the rest of the app may
 *  follow the head (`follow`). Resolves when the answer is in (or the request failed). */
export async function ablateHead(inp: XInput, l: number, h: number): Promise<void> {
  const k = keyOf(inp), mode = xp.mode;
  xp.ablated = [l, h];
  xp.ablationKey = k;
  xp.ablationBusy = true;
  try {
    const r = await analysis.ablate({ model: inp.model, ids: inp.ids, heads: [[l, h]], mode, top: ABLATION_TOP });
    if (xp.ablationKey === k && xp.ablated?.[0] === l && xp.ablated?.[1] === h && xp.mode === mode) {
      xp.ablation = r;
      xp.ablationError = null;
    }
  } catch (e) {
    if (xp.ablationKey === k) { xp.ablation = null; xp.ablationError = asError(e); }
  } finally {
    if (xp.ablationKey === k) xp.ablationBusy = false;
  }
}

/** The ablation shown for `inp`, if the head switched off was switched off on it. */
export function ablationFor(inp: XInput | null): AblateOut | null {
  const a = xp.ablation, h = xp.ablated;
  return inp && a && h && xp.ablationKey === keyOf(inp) && a.heads[0]?.[0] === h[0] && a.heads[0]?.[1] === h[1]
    ? a : null;
}

/** A mixture of experts: expert `e` of block `l` taken out of the routing on `inp` (its tokens go to their next
 *  choice, the weights renormalised as the model does; analysis/ablation.py). The experts panel shows the answer. */
export async function ablateExpert(inp: XInput, l: number, e: number): Promise<void> {
  const k = keyOf(inp);
  xp.expertAblated = [l, e];
  xp.expertKey = k;
  xp.expertBusy = true;
  const current = () => xp.expertKey === k && xp.expertAblated?.[0] === l && xp.expertAblated?.[1] === e;
  try {
    const r = await analysis.ablate({ model: inp.model, ids: inp.ids, experts: [[l, e]], top: ABLATION_TOP });
    if (current()) { xp.expertAblation = r; xp.expertError = null; }
  } catch (err) {
    if (current()) { xp.expertAblation = null; xp.expertError = asError(err); }
  } finally {
    if (current()) xp.expertBusy = false;
  }
}

/** The expert ablation shown for `inp`, if the expert taken out was taken out on it. */
export function expertAblationFor(inp: XInput | null): AblateOut | null {
  const a = xp.expertAblation, x = xp.expertAblated;
  return inp && a && x && xp.expertKey === keyOf(inp) && a.experts?.[0]?.[0] === x[0] && a.experts?.[0]?.[1] === x[1]
    ? a : null;
}
