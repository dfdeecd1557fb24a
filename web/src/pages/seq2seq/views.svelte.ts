// What the positional-encoding and compare views ask the server and what they got, kept outside the
// components: the views call these loaders when their inputs change, and the page's lesson
// (src/lessons/seq2seq.ts) calls the same loaders when a step opens, so it reads the answers the views show
// whether or not a view has mounted.
import { asError } from "../../lib/errorText";
import type { CompareOut, PositionalOut } from "../../lib/generated/api";
import { s2sApi } from "./api";
import { s2s } from "./state.svelte";

/** A compare request the server refused (a source the task has no answer for, a reference outside its vocabulary). */
export interface CompareFailure { task: string; text: string; target: string | null; run: string | null; error: Error;
  message: string }

class Seq2SeqViews {
  /** Positions shown on the positional-encoding view (its slider). */
  nPos = $state(64);
  /** The positional-encoding view's last answer, and why the last request failed. */
  positions = $state.raw<PositionalOut | null>(null);
  positionsError = $state.raw<Error | null>(null);
  /** The compare view's last answer (teacher forcing vs free running), and the last request if it failed:
   *  for which source and reference, and why. */
  compare = $state.raw<CompareOut | null>(null);
  compareFailed = $state.raw<CompareFailure | null>(null);
  compareLoading = $state(false);
  /** Decoding steps revealed in the step-by-step decoder view (1 = the first output token). */
  shown = $state(1);
  /** What the learner had when a lesson step opened (its task is done once they change it). */
  entered = $state({ text: "", layer: 0, head: 0, shown: 1 });

  #posSeq = 0;
  #cmpSeq = 0;

  /** The sinusoid table of the current task's model for `nPos` positions. */
  async loadPositions(): Promise<void> {
    const mine = ++this.#posSeq;
    try {
      const r = await s2sApi.positions({ task: s2s.task, n_positions: this.nPos });
      if (mine !== this.#posSeq) return;
      this.positions = r;
      this.positionsError = null;
    } catch (e) {
      if (mine === this.#posSeq) this.positionsError = asError(e);
    }
  }

  /** The current source decoded with teacher forcing and free running against the typed reference. */
  async loadCompare(): Promise<void> {
    const mine = ++this.#cmpSeq;
    this.compareLoading = true;
    const asked = { task: s2s.task, text: s2s.text, target: s2s.reference.trim() || null, run: s2s.run };
    try {
      const r = await s2sApi.compare(asked);
      if (mine !== this.#cmpSeq) return;
      this.compare = r;
      this.compareFailed = null;
    } catch (e) {
      if (mine === this.#cmpSeq) this.compareFailed = { ...asked, error: asError(e), message: asError(e).message };
    } finally {
      if (mine === this.#cmpSeq) this.compareLoading = false;
    }
  }
}

export const s2sViews = new Seq2SeqViews();
