// Which lesson the lesson button opens on the page the learner is on: the page bundles this, not the lessons
// (lessons/index.ts, loaded with the card when a lesson opens).
import type { Capabilities } from "../lib/family";
import type { StageId } from "../lib/pipeline";

/** Whether a model has the mechanisms of the chapter "Attention that forgets, compresses and sinks": a layer that mixes
 *  its tokens other than by attention (Gated DeltaNet, a short convolution, a state-space layer), a learned sink,
 *  latent attention (the capabilities' `kv_latent`), or per-layer inputs with their KV sharing (`per_layer`: Gemma 4,
 *  whose layers are all attention). */
export function newAttention(caps: Capabilities): boolean {
  return !!caps.mixers?.some((m) => m.some((k) => k !== "attention")) || !!caps.sinks?.some(Boolean) || !!caps.kv_latent
    || !!caps.per_layer?.per_layer_layers.length;
}

/** The lessons' ids (each lesson's `id`; lessons/index.ts maps every one to its lesson). */
export type LessonId = "gpt2" | "seq2seq" | "experiments" | "modern" | "stable" | "why" | "moe" | "hybrid" | "features"
  | "induction"; // the "Watch it learn" page's, which its own lesson button opens

/** The lesson of the page in view: the encoder-decoder page's, the Experiments area's, Why this token's, by the loaded
 *  model's capabilities the chapter on mixtures of experts (Mixtral, Qwen3-MoE, OLMoE: before the next rule, since a
 *  Qwen3-MoE has QK-norm too and its experts are what is new), the chapter on QK-norm, sandwich norms and local layers
 *  (Qwen3, Gemma 3), the chapter on today's models for the other rotary models (the Llama family), or GPT-2's. Before
 *  those, the chapter on attention that forgets, compresses and sinks for a model with a layer that is not attention
 *  (Gated DeltaNet: Qwen3.5; LFM2's convolutions, Falcon-H1's state-space layers), learned sinks (gpt-oss), latent
 *  attention (DeepSeek-V3) or per-layer inputs (Gemma 4): such a model runs through
 *  transformers, where the other chapters, which read our own code's intermediates, are not offered. */
export function lessonFor(seq2seq: boolean, view: StageId, caps?: Capabilities): LessonId {
  if (seq2seq) return "seq2seq";
  if (view === "experiments") return "experiments";
  if (view === "attribution") return "why";
  if (view === "features") return "features"; // the app offers the Features page only where the model ships an autoencoder
  if (caps && newAttention(caps)) return "hybrid";
  if (caps?.mlp === "moe") return "moe";
  if (caps && (caps.qk_norm || caps.sandwich_norm || caps.local_window !== null)) return "stable";
  if (caps?.positions === "rope") return "modern";
  return "gpt2";
}
