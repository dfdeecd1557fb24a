// The app's state: the input, the current trace overview, the focus (layer, head, token, view), the
// sampling settings, and the tensors fetched for the current trace.
import { tick } from "svelte";
import { APP_TOP_K, APP_TOP_N, DEFAULT_SEED } from "./generated/limits";
import { api, callTimings, specKey } from "./client";
import { asError, errorText, overLong } from "./errorText";
import type { ModelInfo, NextTokenOut, SamplingIn, TensorSpec, TraceOut } from "./generated/api";
import { translate, type Lang, type MessageKey } from "./i18n";
import { capsOf, familyOf, type Capabilities, type Family } from "./family";
import { decodeTensor, type Tensor } from "./tensor";
import { hasStage, normsOf, specsFor, type LnWhich, type StageId } from "./pipeline";
import { snapshot } from "../snapshot/static";
import examples from "./examples.json";
import type { LessonId } from "../lessons/choose";

/** Tensors are asked for as float32: every value a readout shows (4 decimals) is the trace's own. With
 *  binary answers float32 costs 4 bytes a value, against 2.7 for float16 as base64. The map of tensors is
 *  keyed without the dtype, so a view's spec finds its tensor whatever dtype it names. */
const wire = (s: TensorSpec): TensorSpec => ({ ...s, dtype: "float32" });
const key = (s: TensorSpec): string => specKey({ ...s, dtype: undefined });

/** When the parts of the last run() ended (performance.now() ms), with its trace call's timings: for the
 *  benchmarks (window.__teRun). */
export interface RunTiming {
  start: number; // run() began (the request goes out at once)
  traced: number; // the trace answer was parsed
  decoded: number; // its tensors decoded and the state set
  ensured: number; // any tensors the view still lacked fetched (a second round trip, normally none)
  updated: number; // the DOM updated (Svelte's effects ran: canvases drawn)
  call: import("./client").CallTiming | null;
}

/** The example texts under the text box (a file of their own: the page's inline CJK glyphs are built from them,
 *  scripts/build_cjk_font.py). */
export const EXAMPLES: readonly string[] = examples;

/** How the next token is drawn when the page opens: top-k with k = 10 at temperature 1. A choice, not
 *  a rule (the output view and the lesson say why): from the whole vocabulary the long tail of
 *  unlikely tokens wins now and then; greedy decoding repeats itself; with k = 10 every token that
 *  can be drawn is among the 15 candidates listed. APP_TOP_K is shared with Python (limits.py). */
export const DEFAULT_SAMPLING: Readonly<SamplingIn> = { temperature: 1, top_k: APP_TOP_K, top_p: null, seed: DEFAULT_SEED };

class AppState {
  lang = $state<Lang>("en");
  text = $state(EXAMPLES[0]);
  models = $state.raw<ModelInfo[]>([]);
  model = $state<string | null>(null);
  trace = $state.raw<TraceOut | null>(null);
  next = $state.raw<NextTokenOut | null>(null);
  view = $state<StageId>("tokens");
  layer = $state(0);
  head = $state(0);
  pos = $state(0);
  ln = $state<LnWhich>("ln1");
  sampling = $state<SamplingIn>({ ...DEFAULT_SAMPLING });
  loading = $state(false);
  /** The failure the page shows (worded in the current language by tError): the last trace's, the model
   *  list's, sampling's or generation's (set here), else a view's fetch that failed, while the page still shows
   *  what it failed for: the view's error clears once the view, layer, head, token or trace changes, or its
   *  tensors arrive after all. */
  get error(): Error | null {
    const v = this.#viewError;
    return this.#runError ?? (v && v.trace === this.trace && v.at === this.#at() ? v.error : null);
  }
  set error(error: Error | null) {
    this.#runError = error;
  }
  /** The last error was an over-long input: the page offers to keep its last `fit` tokens (null: count unknown). */
  overLong = $state<{ fit: number | null } | null>(null);
  /** Keep the last tokens of an over-long text (the user asked for it); dropped once a text fits again. */
  truncate = $state(false);
  tensors = $state.raw(new Map<string, Tensor>());
  weightCache = $state.raw(new Map<string, Tensor>());
  generating = $state(false);
  /** The guided lesson that is open, if any (src/lessons/). */
  lesson = $state<LessonId | null>(null);
  lastUpdateMs = $state<number | null>(null);
  /** The server is still loading its model (it serves the page at once, the API once the model is in):
   *  the seconds since this page opened, for the notice; null when it is not (or no longer) loading. */
  serverLoading = $state<number | null>(null);

  #textIsIds = false; // the text came from generation: continue from its token ids, not a re-tokenization
  #traceCtl: AbortController | null = null;
  #nextCtl: AbortController | null = null;
  #pending = new Set<string>();
  #seq = 0;
  #runError = $state.raw<Error | null>(null);
  #viewError = $state.raw<{ error: Error; trace: TraceOut; at: string; keys: string[] } | null>(null);

  /** What a view's fetch is for, besides the trace: the view and its focus. */
  #at(): string {
    return [this.view, this.layer, this.head, this.pos, this.ln].join("|");
  }

  /** A view's fetch of `keys` failed: the page says so while it shows that view of this trace. */
  #viewFailed(error: Error, trace: TraceOut, at: string, keys: string[]): void {
    this.#viewError = { error, trace, at, keys };
  }

  /** Tensors arrived: a view error about them (and nothing else) is over. Its keys are the tensors' (`key`),
   *  and the weights' with "w|" before them. */
  #arrived(): void {
    const model = this.trace?.model;
    const has = (k: string) => (k.startsWith("w|") ? this.weightCache.has(`${model}|${k.slice(2)}`) : this.tensors.has(k));
    if (this.#viewError?.keys.every(has)) this.#viewError = null;
  }

  get ids(): number[] | null {
    return this.trace?.token_ids ?? null;
  }

  get nLayer(): number {
    return this.trace?.config.n_layer ?? 0;
  }

  /** The traced model's family's name (families/), null before a trace: for labels; the views branch on `caps`. */
  get family(): Family | null {
    return familyOf(this.trace?.config);
  }

  /** What the traced model's blocks are made of: which views it has, which names hold each stage. */
  get caps(): Capabilities {
    return capsOf(this.trace?.config);
  }

  focus() {
    return { layer: this.layer, head: this.head, pos: this.pos, nTokens: this.trace?.token_ids.length ?? 0,
      nLayer: this.nLayer, ln: this.ln, caps: this.caps, nHead: this.trace?.config.n_head,
      nKvHeads: this.trace?.config.n_kv_heads || this.trace?.config.n_head };
  }

  async loadModels(): Promise<void> {
    try {
      const list = await api.models();
      this.models = list.models;
      this.model ??= list.default;
      this.serverLoading = null;
    } catch (e) {
      this.error = asError(e);
    }
  }

  /** While the server says its model is loading (/api/health: 503 {"status": "loading"}), keep
   *  `serverLoading` counting the seconds, asking again at its Retry-After interval; ends once the model
   *  list is here or the server says anything else. Runs beside loadModels, whose request simply waits
   *  for the model: a server that is ready costs one extra small request, and no delay. */
  async watchServer(): Promise<void> {
    if (snapshot) return;
    const seconds = () => Math.floor(performance.now() / 1000);
    let ticker: ReturnType<typeof setInterval> | undefined;
    try {
      while (!this.models.length) {
        const res = await fetch("api/health", { cache: "no-store" });
        const body = res.status === 503 ? ((await res.json().catch(() => null)) as { status?: string } | null) : null;
        if (body?.status !== "loading" || this.models.length) return;
        if (ticker === undefined) {
          this.serverLoading = seconds();
          ticker = setInterval(() => { if (!this.models.length) this.serverLoading = seconds(); }, 1000);
        }
        const wait = Math.min(5, Math.max(0.25, Number(res.headers.get("retry-after")) || 1));
        await new Promise((r) => setTimeout(r, wait * 1000));
      }
    } catch {
      /* the server is gone: the waiting API calls say why */
    } finally {
      clearInterval(ticker);
      this.serverLoading = null;
    }
  }

  /** The user typed: forget the generated ids and trace the text. */
  setText(text: string): void {
    this.text = text;
    this.#textIsIds = false;
  }

  /** Trace the current text (or ids) with the current view's tensors; the view updates in one round trip. */
  async run(): Promise<void> {
    const t0 = performance.now();
    const seq = ++this.#seq;
    this.#traceCtl?.abort();
    const ctl = (this.#traceCtl = new AbortController());
    this.loading = true;
    try {
      const input = this.#textIsIds && this.trace ? { ids: this.trace.token_ids } : { text: this.text };
      // a new text puts the focus on its last token (position -1), whose tensors come with the trace
      // (the names depend on the family: when the chosen model's config is not known yet, nothing comes
      // along and the view asks for its tensors once the trace is here; a view the chosen model lacks,
      // e.g. RoPE before a switch to GPT-2, asks for nothing in advance)
      const cfg = this.models.find((m) => m.name === (this.model ?? this.trace?.model))?.config
        ?? (this.trace && this.trace.model === this.model ? this.trace.config : null);
      const include = cfg && hasStage(this.view, capsOf(cfg))
        ? specsFor(this.view, { ...this.focus(), pos: -1, nTokens: 0, caps: capsOf(cfg) }).map(wire) : [];
      const tr = await api.trace({ model: this.model, ...input, truncate: this.truncate, sampling: this.sampling,
        top_n: APP_TOP_N, include }, ctl.signal);
      if (seq !== this.#seq) return;
      const traced = performance.now();
      this.#apply(tr, true);
      this.error = null;
      this.overLong = null;
      if (!tr.truncated) this.truncate = false;
      const decoded = performance.now();
      await this.ensure(specsFor(this.view, this.focus()));
      const ensured = performance.now();
      await tick();
      const updated = performance.now();
      await new Promise((r) => requestAnimationFrame(() => r(null)));
      if (seq === this.#seq) {
        const call = [...callTimings].reverse().find((c) => c.path === "trace" && c.start >= t0) ?? null;
        (globalThis as { __teRun?: RunTiming }).__teRun = { start: t0, traced, decoded, ensured, updated, call };
        this.lastUpdateMs = performance.now() - t0;
        // for benchmarks and tests: how many runs have finished, and how long the last one took
        document.body.dataset.updates = String(Number(document.body.dataset.updates ?? 0) + 1);
        document.body.dataset.lastUpdateMs = this.lastUpdateMs.toFixed(1);
      }
    } catch (e) {
      if ((e as Error).name === "AbortError") return;
      if (seq === this.#seq) this.#fail(asError(e));
    } finally {
      if (seq === this.#seq) this.loading = false;
    }
  }

  /** Keep the last tokens that fit (the answer to an over-long input) and trace again. */
  async runTruncated(): Promise<void> {
    this.truncate = true;
    await this.run();
  }

  /** The text could not be traced: the old tokens and views no longer belong to it, so they go. */
  #fail(error: Error): void {
    this.error = error;
    this.trace = null;
    this.next = null;
    this.tensors = new Map();
    this.overLong = overLong(error);
  }

  #apply(tr: TraceOut, keepLast: boolean): void {
    const same = this.trace && this.trace.model === tr.model && this.trace.token_ids.join() === tr.token_ids.join();
    const map = same ? new Map(this.tensors) : new Map<string, Tensor>();
    const T = tr.token_ids.length;
    for (const t of tr.tensors) {
      const position = t.position != null && t.position < 0 ? T + t.position : t.position;
      map.set(key({ ...t, position }), decodeTensor(t));
    }
    this.trace = tr;
    this.next = tr.next;
    if (!hasStage(this.view, capsOf(tr.config))) this.view = "attention"; // e.g. RoPE, and now a GPT-2 model
    if (!normsOf(capsOf(tr.config)).includes(this.ln)) this.ln = "ln1"; // a sandwich norm, and now a model without
    this.tensors = map;
    if (keepLast || this.pos >= T) this.pos = T - 1;
    if (this.layer >= tr.config.n_layer) this.layer = tr.config.n_layer - 1;
    if (this.head >= tr.config.n_head) this.head = tr.config.n_head - 1;
  }

  tensor(spec: TensorSpec): Tensor | undefined {
    return this.tensors.get(key(spec));
  }

  /** Fetch the tensors among `specs` that this trace does not have yet. */
  async ensure(specs: TensorSpec[]): Promise<void> {
    const tr = this.trace;
    if (!tr) return;
    const missing = specs.filter((s) => !this.tensors.has(key(s)) && !this.#pending.has(key(s)));
    if (!missing.length) return;
    missing.forEach((s) => this.#pending.add(key(s)));
    const at = this.#at();
    try {
      const out = await api.tensors({ model: tr.model, ids: tr.token_ids, tensors: missing.map(wire) });
      if (this.trace !== tr) return;
      const map = new Map(this.tensors);
      for (const t of out.tensors) map.set(key(t), decodeTensor(t));
      this.tensors = map;
      this.#arrived();
    } catch (e) {
      if (this.trace === tr) this.#viewFailed(asError(e), tr, at, missing.map(key));
    } finally {
      missing.forEach((s) => this.#pending.delete(key(s)));
    }
  }

  /** Weights are fixed per model: fetched once and kept (they are small slices). */
  weight(spec: TensorSpec): Tensor | undefined {
    return this.weightCache.get(`${this.trace?.model}|${key(spec)}`);
  }

  async ensureWeights(specs: TensorSpec[]): Promise<void> {
    const model = this.trace?.model;
    if (!model) return;
    const missing = specs.filter((s) => !this.weightCache.has(`${model}|${key(s)}`)
      && !this.#pending.has(`w|${model}|${key(s)}`));
    if (!missing.length) return;
    missing.forEach((s) => this.#pending.add(`w|${model}|${key(s)}`));
    const tr = this.trace!, at = this.#at();
    try {
      const out = await api.weights({ model, tensors: missing.map(wire) });
      const map = new Map(this.weightCache);
      for (const t of out.tensors) map.set(`${model}|${key(t)}`, decodeTensor(t));
      this.weightCache = map;
      this.#arrived();
    } catch (e) {
      this.#viewFailed(asError(e), tr, at, missing.map((s) => `w|${key(s)}`));
    } finally {
      missing.forEach((s) => this.#pending.delete(`w|${model}|${key(s)}`));
    }
  }

  /** New sampling settings: only the next-token distribution changes, not the trace. */
  async resample(): Promise<void> {
    const tr = this.trace;
    if (!tr) return;
    this.#nextCtl?.abort();
    const ctl = (this.#nextCtl = new AbortController());
    try {
      const nx = await api.nextToken({ model: tr.model, ids: tr.token_ids, sampling: this.sampling, top_n: APP_TOP_N },
        ctl.signal);
      if (this.trace === tr) {
        this.next = nx;
        this.error = null;
      }
    } catch (e) {
      if ((e as Error).name !== "AbortError") this.error = asError(e);
    }
  }

  /** Append a token (the sampled one, or `tokenId`) and trace the longer text; only the new position is computed. */
  async generate(tokenId: number | null = null): Promise<void> {
    const tr = this.trace;
    if (!tr || this.generating) return;
    this.generating = true;
    const wasLast = this.pos >= tr.token_ids.length - 1;
    try {
      const out = await api.generate({ model: tr.model, ids: tr.token_ids, sampling: this.sampling, top_n: APP_TOP_N,
        token_id: tokenId });
      this.#textIsIds = true;
      this.text = out.trace.text;
      this.#apply(out.trace, wasLast);
      this.error = null;
      if (this.sampling.seed !== null && this.sampling.seed !== undefined) {
        this.sampling = { ...this.sampling, seed: (this.sampling.seed + 1) % 2 ** 31 }; // a fresh draw next time
        await this.resample();
      }
      await this.ensure(specsFor(this.view, this.focus()));
    } catch (e) {
      this.error = asError(e);
    } finally {
      this.generating = false;
    }
  }
}

export const app = new AppState();

/** A UI string in the current language (reactive: components re-render when the language changes). */
export function t(key: MessageKey, vars?: Record<string, string | number>): string {
  return translate(app.lang, key, vars);
}

/** An error in the current language (reactive, as t). */
export function tError(e: unknown): string {
  return errorText(app.lang, e);
}
