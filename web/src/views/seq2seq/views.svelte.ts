// What the positional-encoding and compare views computed last, kept outside the components so that
// the page's lesson (src/lessons/seq2seq.ts) reads the same answers the views show.
import type { CompareOut, PositionalOut } from "../../lib/generated/api";

class Seq2SeqViews {
  /** Positions shown on the positional-encoding view (its slider). */
  nPos = $state(64);
  /** The positional-encoding view's last answer. */
  positions = $state.raw<PositionalOut | null>(null);
  /** The compare view's last answer (teacher forcing vs free running). */
  compare = $state.raw<CompareOut | null>(null);
  /** Decoding steps revealed in the step-by-step decoder view (1 = the first output token). */
  shown = $state(1);
  /** What the learner had when a lesson step opened (its task is done once they change it). */
  entered = $state({ text: "", layer: 0, head: 0 });
}

export const s2sViews = new Seq2SeqViews();
