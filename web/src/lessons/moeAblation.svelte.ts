// The MoE chapter's one experiment (lessons/moe.ts): an expert taken out of the routing by /api/analysis/ablate, kept
// here so that the card's text follows the answer when it arrives (a rune, hence a .svelte.ts file of its own).
import type { AblateOut } from "../lib/generated/api";
import { analysis } from "../views/experiments/api";

/** What was asked (model, ids, layer, expert) and the answer. */
export const expertAblation = $state<{ key: string; result: AblateOut | null }>({ key: "", result: null });

export const ablationKey = (model: string, ids: number[], layer: number, expert: number) =>
  `${model}|${ids.join(",")}|${layer}|${expert}`;

/** Remove expert `expert` of block `layer` from the routing of the text `ids` (its tokens go to their next choice). */
export async function ablateExpert(model: string, ids: number[], layer: number, expert: number): Promise<void> {
  const key = ablationKey(model, ids, layer, expert);
  if (expertAblation.key === key && expertAblation.result) return;
  expertAblation.key = key;
  expertAblation.result = null;
  const out = await analysis.ablate({ model, ids, experts: [[layer, expert]], top: 5 });
  if (expertAblation.key === key) expertAblation.result = out;
}
