// Which lesson the lesson button opens on the page the learner is on: the page bundles this, not the lessons
// (lessons/index.ts, loaded with the card when a lesson opens).
import type { ViewId } from "../lib/views";

/** The lessons' ids (each lesson's `id`; lessons/index.ts maps every one to its lesson). */
export type LessonId = "gpt2" | "seq2seq" | "experiments" | "modern" | "why";

/** The lesson of the page in view: the encoder-decoder page's, the Experiments area's, Why this token's, the chapter on
 *  today's models when the loaded model is of the Llama family (`family` from its config), or GPT-2's. */
export function lessonFor(seq2seq: boolean, view: ViewId, family?: string): LessonId {
  if (seq2seq) return "seq2seq";
  if (view === "experiments") return "experiments";
  if (view === "attribution") return "why";
  if (family === "llama") return "modern";
  return "gpt2";
}
