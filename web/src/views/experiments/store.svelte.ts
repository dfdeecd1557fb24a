// The Experiments panels' latest answers from /api/analysis, kept outside the components so that the
// Experiments lesson (src/lessons/experiments.ts) reads the same numbers the panels show. Each answer
// carries the input it was computed for (`key`: model and token ids), so a stale one can be told apart.
import type { AblateOut, AnalogyOut, HeadsOut, ImportanceOut, LensOut, PruneOut } from "../../lib/generated/api";

export type XTab = "lens" | "heads" | "embed";

class ExperimentsStore {
  tab = $state<XTab>("lens");
  /** The logit lens at the focus token (LensPanel). */
  lens = $state.raw<LensOut | null>(null);
  /** Head importance for `importanceKey` (HeadsPanel). */
  importance = $state.raw<ImportanceOut | null>(null);
  importanceKey = $state("");
  /** Head roles and attention statistics for `headsKey` (HeadsPanel). */
  heads = $state.raw<HeadsOut | null>(null);
  headsKey = $state("");
  /** The last single-head ablation and the head it switched off (HeadsPanel). */
  ablation = $state.raw<AblateOut | null>(null);
  ablated = $state.raw<[number, number] | null>(null);
  /** The pruning curve for `pruneKey` (PrunePanel). */
  prune = $state.raw<PruneOut | null>(null);
  pruneKey = $state("");
  /** The embedding arithmetic a − b + c (EmbeddingPanel). */
  analogy = $state.raw<AnalogyOut | null>(null);
  /** The focus position when the lesson's logit-lens step opened (its task: move it). */
  lessonPos = $state(-1);
}

export const xp = new ExperimentsStore();

/** The key an answer is stored under: the model and the token ids it was computed for. */
export function inputKey(model: string, ids: number[]): string {
  return `${model}|${ids.join()}`;
}
