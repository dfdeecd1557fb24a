// Every guided lesson, by id, and which one the lesson button opens on the page the learner is on.
import type { Capabilities } from "../lib/family";
import type { Lesson } from "../lib/lesson";
import type { ViewId } from "../lib/views";
import { experimentsLesson } from "./experiments";
import { gpt2Lesson } from "./gpt2";
import { modernLesson } from "./modern";
import { seq2seqLesson } from "./seq2seq";
import { stableLesson } from "./stable";
import { whyLesson } from "./why";

export const LESSONS: Record<string, Lesson> = {
  [gpt2Lesson.id]: gpt2Lesson,
  [seq2seqLesson.id]: seq2seqLesson,
  [experimentsLesson.id]: experimentsLesson,
  [modernLesson.id]: modernLesson,
  [stableLesson.id]: stableLesson,
  [whyLesson.id]: whyLesson,
};

/** The lesson of the page in view: the encoder-decoder page's, the Experiments area's, Why this token's, by the loaded
 *  model's capabilities the chapter on QK-norm, sandwich norms and local layers (Qwen3, Gemma 3), the chapter on
 *  today's models for the other rotary models (the Llama family), or GPT-2's. */
export function lessonFor(seq2seq: boolean, view: ViewId, caps?: Capabilities): string {
  if (seq2seq && LESSONS.seq2seq) return "seq2seq";
  if (view === "experiments" && LESSONS.experiments) return "experiments";
  if (view === "attribution") return whyLesson.id;
  if (caps && (caps.qk_norm || caps.sandwich_norm || caps.local_window !== null)) return stableLesson.id;
  if (caps?.positions === "rope") return modernLesson.id;
  return gpt2Lesson.id;
}
