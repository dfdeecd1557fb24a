// How a lesson reads the live model: the trace and the model on screen, the tensors it quotes (fetched in requests
// the server accepts: at most MAX_TENSORS_PER_REQUEST each, the generated limit), the vocabulary, the focus a step
// moves to, and the few numbers the steps compute from tensors (norms, dot products, the index of the largest).
// Everything fetched is kept where the views keep it (app.tensor, app.weight), so a lesson and the views it points at
// read one answer; the vocabulary answers are kept here, per model. The lesson files (lessons/*.ts) hold their steps;
// their wording helpers are in lib/lesson.ts and their number formats in lib/lessonFormat.ts.
import { tick } from "svelte";
import { SvelteMap } from "svelte/reactivity";
import { call } from "../lib/client";
import type { DecodeOut, ModelConfigOut, ModelInfo, TensorSpec, TokensOut } from "../lib/generated/api";
import type { OwnConfig } from "../lib/family";
import { MAX_TENSORS_PER_REQUEST } from "../lib/generated/limits";
import { formatBytes, bytesPerValue } from "../lib/rope";
import { say, val, type Text, type Value } from "../lib/lesson";
import { int, token, word } from "../lib/lessonFormat";
import { app } from "../lib/state.svelte";
import type { Tensor } from "../lib/tensor";
import { specsFor, stageSpecs, type LnWhich, type StageId } from "../lib/pipeline";
import { s2s, type Tab } from "../pages/seq2seq/state.svelte";

// -- the trace and the model ----------------------------------------------------------------------------------

// a lesson is opened on a model with code of our own only (App.svelte offers no tour for one that runs through
// transformers): its config has every field
export const cfg = (): OwnConfig | undefined => app.trace?.config as OwnConfig | undefined;
/** Tokens of the text on screen. */
export const nTok = (): number => app.trace?.token_ids.length ?? 0;
/** The loaded model as /api/models describes it (its source and parameter counts). */
export const info = (): ModelInfo | undefined => app.models.find((m) => m.name === app.trace?.model);
/** /api/models again when it does not yet know the loaded model's `count` (a model loaded after the page). */
export async function ensureInfo(count: "n_params" | "n_active_params" = "n_params"): Promise<void> {
  if (app.trace && info()?.[count] == null) await app.loadModels();
}

/** Token `i` of the text as a value (its spaces visible, `raw` its id); null past the text's end. */
export function tokenAt(id: string, i: number, at?: string): Value | null {
  const t = app.trace?.tokens[i];
  return t ? token(id, t.text, t.id, at) : null;
}
/** The same, an empty word past the text's end (for text that is only read once the trace is here). */
export const tokAt = (id: string, i: number, at?: string): Value => tokenAt(id, i, at) ?? word(id, "");
/** The focus token, as `tokenAt` and as `tokAt`. */
export const focusToken = (id = "focus-token"): Value | null => tokenAt(id, app.pos);
export const focusTok = (id = "focus-token"): Value => tokAt(id, app.pos);
/** A token id as the token bar and the tables print it (no thousands separator: it is a name, not a count). */
export const idVal = (id: string, n: number, at?: string): Value => val(id, String(n), n, at);
export const layerVal = (): Value => int("layer", app.layer);
export const headVal = (): Value => int("head", app.head);
/** A size in bytes, as the views print it (binary units). */
export const size = (id: string, b: number, at?: string): Value => val(id, formatBytes(b), b, at);
/** Bytes of one number in the model's dtype (the KV cache is kept in it too). */
export const bytesOf = (dtype: string | undefined): number => bytesPerValue(dtype) ?? 4;

// -- fetching tensors -----------------------------------------------------------------------------------------

/** `a` in runs of at most `n`. */
export function chunks<T>(a: T[], n = MAX_TENSORS_PER_REQUEST): T[][] {
  return Array.from({ length: Math.ceil(a.length / n) }, (_, i) => a.slice(i * n, (i + 1) * n));
}

/** Fetch those of `specs` the trace does not have, in requests the server accepts (app.ensure for each). */
export async function ensure(specs: TensorSpec[]): Promise<void> {
  await Promise.all(chunks(specs.filter((s) => !app.tensor(s))).map((c) => app.ensure(c)));
}
/** The same for weights (app.ensureWeights: kept per model). */
export async function ensureWeights(specs: TensorSpec[]): Promise<void> {
  await Promise.all(chunks(specs.filter((s) => !app.weight(s))).map((c) => app.ensureWeights(c)));
}

/** Fetch `specs` for the current trace, in requests the server accepts, waiting for those another caller has
 *  already asked for. False when the trace changed or the server did not answer. */
export async function fetched(specs: TensorSpec[]): Promise<boolean> {
  const tr = app.trace;
  for (let k = 0; k < 100 && tr && app.trace === tr; k++) {
    const missing = specs.filter((s) => !app.tensor(s));
    if (!missing.length) return true;
    await ensure(missing);
    if (specs.every((s) => app.tensor(s))) return true;
    await new Promise((r) => setTimeout(r, 25));
  }
  return false;
}
/** Ask for `specs` without waiting (a text read while the learner moves the focus): the text follows once they
 *  are here. */
export function request(specs: TensorSpec[]): void {
  const missing = specs.filter((s) => !app.tensor(s));
  if (missing.length) queueMicrotask(() => void ensure(missing));
}

/** The tensors of a stage for the current focus, by their names in `stageSpecs` (the same specs as the stage's, so
 *  the same cached answers). */
export function stageTensors(view: StageId, ln?: LnWhich): Record<string, Tensor | undefined> {
  const f = app.focus();
  return Object.fromEntries(Object.entries(stageSpecs(view, ln ? { ...f, ln } : f)).map(([k, s]) => [k, app.tensor(s)]));
}

// -- the focus: what a step remembers from when it opened, and where its `enter` moved ----------------------------

/** The focus and the text's length when the last step opened with `show` (tasks compare against it). */
export const opened = { pos: 0, head: 0, nTok: 0 };

/** Open `view` (and the norm `ln` a layer-norm view shows), and remember the focus as the step opens. */
export function show(view: StageId, ln?: LnWhich): void {
  app.view = view;
  if (ln) app.ln = ln;
  opened.pos = app.pos;
  opened.head = app.head;
  opened.nTok = nTok();
}
/** `show`, then wait for the tensors the view shows: the card places itself once the view has its final size. */
export async function showLoaded(view: StageId, ln?: LnWhich): Promise<void> {
  show(view, ln);
  if (app.trace) await ensure(specsFor(view, app.focus()));
}

/** The focus a step's `enter` moved to, to say so while the focus is still there. */
let moved: { step: string; layer: number; head: number; pos: number; trace: unknown } | null = null;
/** Put the focus on block `layer`, head `head` for step `step` (nothing when it is there already). */
export function moveTo(step: string, layer: number, head: number): void {
  if (layer === app.layer && head === app.head) return;
  moved = { step, layer, head, pos: app.pos, trace: app.trace };
  app.layer = layer;
  app.head = head;
  opened.head = head;
}
/** Step `step` moved the focus and it is still there. */
export const movedHere = (step: string): boolean => !!moved && moved.step === step && moved.layer === app.layer
  && moved.head === app.head && moved.pos === app.pos && moved.trace === app.trace;

// -- the vocabulary: whether a string is one entry --------------------------------------------------------------

/** Whether a string is one entry of a model's vocabulary: its id, null when it is not, "unknown" when the server
 *  could not say (an offline snapshot, a failed request). Asked of /api/attribution/tokens, which tokenizes any text:
 *  one token (after the BOS some models prepend) is one entry. Kept per model. */
const entries = new SvelteMap<string, number | null | "unknown">();
const asking = new Map<string, Promise<void>>();
const entryKey = (model: string, s: string) => `${model}\u0000${s}`;

/** Ask whether `s` is one entry of `model`'s vocabulary (once per model and string); settles with the answer. */
export function lookUp(s: string, model = app.trace?.model): Promise<void> {
  if (!model || !s) return Promise.resolve();
  const key = entryKey(model, s);
  if (entries.has(key)) return Promise.resolve();
  let p = asking.get(key);
  if (!p) {
    p = (async () => {
      try {
        const out = await call<TokensOut>("attribution/tokens", { model, texts: [s] });
        const ids = out.texts[0].ids;
        const own = out.bos_id !== null && ids[0] === out.bos_id ? ids.slice(1) : ids;
        entries.set(key, own.length === 1 ? own[0] : null);
      } catch {
        entries.set(key, "unknown");
      } finally {
        asking.delete(key);
      }
    })();
    asking.set(key, p);
  }
  return p;
}
/** The answer for `s` (see `entries`); undefined while it is asked. */
export const entry = (s: string, model = app.trace?.model): number | null | "unknown" | undefined =>
  model ? entries.get(entryKey(model, s)) : undefined;
/** Ask about every one of `strings` and wait for the answers (at most 10 seconds: a text waits no longer); `again`
 *  asks again about those the server could not answer before. */
export async function lookUpAll(strings: string[], model = app.trace?.model, again = false): Promise<void> {
  if (again && model) for (const s of strings) if (entry(s, model) === "unknown") entries.delete(entryKey(model, s));
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([Promise.all(strings.map((s) => lookUp(s, model))),
    new Promise((r) => { timer = setTimeout(r, 10_000); })]);
  clearTimeout(timer);
}

// -- the encoder-decoder page: the decode it shows -------------------------------------------------------------

/** The decode the page shows, once loaded and without an error. */
export function decoded(): DecodeOut | null {
  return s2s.error ? null : s2s.decoded;
}
/** Open a tab of the encoder-decoder page. */
export async function showTab(tab: Tab): Promise<void> {
  s2s.tab = tab;
  await tick();
}
/** Layer and head names as the encoder-decoder views write them. */
export const lh = (l: number, h: number, p = "s2s"): { l: Value; h: Value } => ({ l: int(`${p}-layer`, l), h: int(`${p}-head`, h) });
/** The note that says what ∅ is, where a text quotes an empty output (lessonFormat's `outputText`). */
export const emptyNote = (...texts: string[]): Text => (texts.some((t) => !t) ? [say("lesson.seq2seq.empty")] : []);

// -- numbers --------------------------------------------------------------------------------------------------

/** The first index of the largest (sign 1) or smallest (sign −1) of a[0..upto]. */
export function argBest(a: ArrayLike<number>, upto = a.length - 1, sign = 1): number {
  let best = 0;
  for (let j = 1; j <= upto && j < a.length; j++) if (sign * a[j] > sign * a[best]) best = j;
  return best;
}
/** The first index of the largest |a[j]|. */
export function argAbsMax(a: ArrayLike<number>): number {
  let best = 0;
  for (let j = 1; j < a.length; j++) if (Math.abs(a[j]) > Math.abs(a[best])) best = j;
  return best;
}
/** The indices of `xs` in order of their values, largest first (ties: the lower index first). */
export const ranked = (xs: ArrayLike<number>): number[] => Array.from(xs, (_, i) => i).sort((i, j) => xs[j] - xs[i] || i - j);
/** The largest |x| of a tensor. */
export const absMax = (t: Tensor): number => t.data.reduce((m, x) => Math.max(m, Math.abs(x)), 0);

/** The length of a[from..to). */
export function norm(a: ArrayLike<number>, from = 0, to = a.length): number {
  let s = 0;
  for (let i = from; i < to; i++) s += a[i] * a[i];
  return Math.sqrt(s);
}
export function dot(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}
export const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));
