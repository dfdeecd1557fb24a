// State of the encoder-decoder page: which page is shown, the task and source text, the decode that
// every view reads, and the model it comes from (the shipped checkpoint or a live training run's).
import { asError } from "../../lib/errorText";
import type { DecodeOut, TaskInfo } from "../../lib/generated/api";
import { s2sApi } from "./api";

export type Tab = "encoder" | "decoder" | "compare" | "positions" | "training";
export const TABS: Tab[] = ["encoder", "decoder", "compare", "positions", "training"];

/** The pages the header's mode switch offers: the decoder explainer, this one (`?mode=seq2seq`) and "Watch it
 *  learn" (`?mode=learn`, pages/learn/). */
export type Mode = "gpt2" | "seq2seq" | "learn";
const asked = new URLSearchParams(location.search).get("mode");

/** Which page the app shows (one of `seq2seq` and `learn` at most is true; neither: the decoder explainer). */
export const mode = $state({ seq2seq: asked === "seq2seq", learn: asked === "learn" });

export function setMode(m: Mode): void {
  mode.seq2seq = m === "seq2seq";
  mode.learn = m === "learn";
  const u = new URL(location.href);
  if (m === "gpt2") u.searchParams.delete("mode");
  else u.searchParams.set("mode", m);
  history.replaceState(null, "", u);
}

/** Beam sizes a decode is also run with (untraced) while the decoder tab is shown, so that the page shows where
 *  a wider search writes something else: greedy up to the paper's 4. (Four more decodes: only where they show.) */
export const COMPARE_BEAMS = [1, 2, 3, 4];

class Seq2SeqState {
  tasks = $state.raw<TaskInfo[]>([]);
  maxTrainSteps = $state(1500);
  task = $state("reverse");
  text = $state("hello");
  /** The reference output typed on the compare tab ("" = the task's own answer). */
  reference = $state("");
  beam = $state(1);
  run = $state<string | null>(null); // decode with this live run's model instead of the shipped one
  tab = $state<Tab>("encoder");
  decoded = $state.raw<DecodeOut | null>(null);
  loading = $state(false);
  error = $state.raw<Error | null>(null);
  loaded = $state(false);
  // focus shared by the attention views
  encLayer = $state(0);
  encHead = $state(0);
  decLayer = $state(1);
  decHead = $state(0);

  #ctl: AbortController | null = null;
  #seq = 0;

  get info(): TaskInfo | undefined {
    return this.tasks.find((t) => t.name === this.task);
  }

  async load(): Promise<void> {
    if (this.loaded) return;
    try {
      const out = await s2sApi.tasks();
      this.tasks = out.tasks;
      this.maxTrainSteps = out.max_train_steps;
      const first = out.tasks.find((t) => t.name === this.task && t.has_checkpoint) ?? out.tasks.find((t) => t.has_checkpoint);
      if (first && first.name !== this.task) this.setTask(first.name);
      this.loaded = true;
      await this.decode();
    } catch (e) {
      this.error = asError(e);
    }
  }

  setTask(name: string): void {
    this.task = name;
    this.run = null;
    this.text = this.info?.examples[0] ?? "";
    this.reference = "";
  }

  /** The decode again with the beam comparisons, if the one shown was made without them (on another tab). */
  async ensureAlternatives(): Promise<void> {
    if (this.decoded && !this.error && !this.decoded.alternatives.length) await this.decode();
  }

  /** Decode the current text (greedy or beam); every view of the page reads the result. */
  async decode(): Promise<void> {
    const seq = ++this.#seq;
    this.#ctl?.abort();
    const ctl = (this.#ctl = new AbortController());
    this.loading = true;
    try {
      const out = await s2sApi.decode({ task: this.task, text: this.text, beam: this.beam, top_k: 5, run: this.run,
        compare_beams: this.tab === "decoder" ? COMPARE_BEAMS : [] }, ctl.signal);
      if (seq !== this.#seq) return;
      this.decoded = out;
      this.error = null;
      const L = out.n_decoder_layers;
      if (this.decLayer >= L) this.decLayer = L - 1;
      if (this.encLayer >= out.n_encoder_layers) this.encLayer = 0;
      if (this.decHead >= out.n_heads) this.decHead = 0;
      if (this.encHead >= out.n_heads) this.encHead = 0;
    } catch (e) {
      if (seq !== this.#seq || (e as Error).name === "AbortError") return;
      this.error = asError(e);
    } finally {
      if (seq === this.#seq) this.loading = false;
    }
  }
}

export const s2s = new Seq2SeqState();

/** Rows of nested lists as one row-major array (what the heat map draws). */
export function flat(m: number[][], cols?: number): Float32Array {
  const c = cols ?? Math.max(0, ...m.map((r) => r.length));
  const out = new Float32Array(m.length * c).fill(NaN);
  m.forEach((row, r) => row.forEach((v, j) => { out[r * c + j] = v; }));
  return out;
}
