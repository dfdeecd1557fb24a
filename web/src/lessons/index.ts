// Every guided lesson, by id, and which one the lesson button opens on the page the learner is on.
import type { Lesson } from "../lib/lesson";
import type { ViewId } from "../lib/views";
import { experimentsLesson } from "./experiments";
import { gpt2Lesson } from "./gpt2";
import { modernLesson } from "./modern";
import { seq2seqLesson } from "./seq2seq";
import { whyLesson } from "./why";

export const LESSONS: Record<string, Lesson> = {
  [gpt2Lesson.id]: gpt2Lesson,
  [seq2seqLesson.id]: seq2seqLesson,
  [experimentsLesson.id]: experimentsLesson,
  [modernLesson.id]: modernLesson,
  [whyLesson.id]: whyLesson,
};

/** The lesson of the page in view: the encoder-decoder page's, the Experiments area's, Why this token's, the chapter on
 *  today's models when the loaded model is of the Llama family (`family` from its config), or GPT-2's. */
export function lessonFor(seq2seq: boolean, view: ViewId, family?: string): string {
  if (seq2seq && LESSONS.seq2seq) return "seq2seq";
  if (view === "experiments" && LESSONS.experiments) return "experiments";
  if (view === "attribution") return whyLesson.id;
  if (family === "llama") return modernLesson.id;
  return gpt2Lesson.id;
}
