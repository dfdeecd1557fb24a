// Every guided lesson, by id (loaded with the lesson card, components/LessonCard.svelte, a chunk of its own:
// src/parts.ts). Which one the lesson button opens: lessons/choose.ts, which the page bundles.
import type { Lesson } from "../lib/lesson";
import type { LessonId } from "./choose";
import { experimentsLesson } from "./experiments";
import { featuresLesson } from "./features";
import { gpt2Lesson } from "./gpt2";
import { hybridLesson } from "./hybrid";
import { inductionLesson } from "./induction";
import { modernLesson } from "./modern";
import { moeLesson } from "./moe";
import { seq2seqLesson } from "./seq2seq";
import { stableLesson } from "./stable";
import { whyLesson } from "./why";

export const LESSONS: Record<LessonId, Lesson> = {
  gpt2: gpt2Lesson,
  seq2seq: seq2seqLesson,
  experiments: experimentsLesson,
  modern: modernLesson,
  stable: stableLesson,
  why: whyLesson,
  moe: moeLesson,
  hybrid: hybridLesson,
  features: featuresLesson,
  induction: inductionLesson,
};
