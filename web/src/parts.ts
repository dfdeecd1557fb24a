// The parts of the page that are chunks of their own, loaded on first use (lib/part.svelte.ts): the first page
// carries and runs only its shell (header, text box, the notice while the model loads) and what draws a trace.
// The rest (the lesson card with every lesson, the encoder-decoder page, Experiments, Why this token, Features, Watch it learn) comes when
// the learner opens it; other languages' catalogues when picked (lib/i18n.ts).
import { Part } from "./lib/part.svelte";

export const PARTS = {
  lesson: new Part(() => import("./components/LessonCard.svelte")),
  seq2seq: new Part(() => import("./pages/seq2seq/Seq2SeqPage.svelte")),
  experiments: new Part(() => import("./pages/experiments/ExperimentsPage.svelte")),
  attribution: new Part(() => import("./pages/attribution/AttributionPage.svelte")),
  features: new Part(() => import("./pages/features/FeaturesPage.svelte")),
  learn: new Part(() => import("./pages/learn/LearnPage.svelte")),
};
