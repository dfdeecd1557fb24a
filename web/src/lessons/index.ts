// Every guided lesson, by id, and which one the lesson button opens on the page the learner is on.
import type { Lesson } from "../lib/lesson";
import type { ViewId } from "../lib/views";
import { experimentsLesson } from "./experiments";
import { gpt2Lesson } from "./gpt2";
import { seq2seqLesson } from "./seq2seq";

export const LESSONS: Record<string, Lesson> = {
  [gpt2Lesson.id]: gpt2Lesson,
  [seq2seqLesson.id]: seq2seqLesson,
  [experimentsLesson.id]: experimentsLesson,
};

/** The lesson of the page in view: the encoder-decoder page's, the Experiments area's, or GPT-2's. */
export function lessonFor(seq2seq: boolean, view: ViewId): string {
  if (seq2seq && LESSONS.seq2seq) return "seq2seq";
  if (view === "experiments" && LESSONS.experiments) return "experiments";
  return gpt2Lesson.id;
}
