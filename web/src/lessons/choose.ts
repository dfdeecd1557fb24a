// Which lesson the lesson button opens on the page the learner is on: the page bundles this, not the lessons
// (lessons/index.ts, loaded with the card when a lesson opens).
import type { Capabilities } from "../lib/family";
import type { StageId } from "../lib/pipeline";

/** The lessons' ids (each lesson's `id`; lessons/index.ts maps every one to its lesson). */
export type LessonId = "gpt2" | "seq2seq" | "experiments" | "modern" | "stable" | "why" | "moe";

/** The lesson of the page in view: the encoder-decoder page's, the Experiments area's, Why this token's, by the loaded
 *  model's capabilities the chapter on mixtures of experts (Mixtral, Qwen3-MoE, OLMoE: before the next rule, since a
 *  Qwen3-MoE has QK-norm too and its experts are what is new), the chapter on QK-norm, sandwich norms and local layers
 *  (Qwen3, Gemma 3), the chapter on today's models for the other rotary models (the Llama family), or GPT-2's. */
export function lessonFor(seq2seq: boolean, view: StageId, caps?: Capabilities): LessonId {
  if (seq2seq) return "seq2seq";
  if (view === "experiments") return "experiments";
  if (view === "attribution") return "why";
  if (caps?.mlp === "moe") return "moe";
  if (caps && (caps.qk_norm || caps.sandwich_norm || caps.local_window !== null)) return "stable";
  if (caps?.positions === "rope") return "modern";
  return "gpt2";
}
