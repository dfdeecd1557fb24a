// Opening the part of the model that a row or a cell of the "Why this token" views names: its own view of the
// pipeline at that layer, head and position. A patching cell belongs to the clean prompt: when the page shows
// another text, the clean prompt is traced first, so the view opens on the run the cell was taken from.
import { tick } from "svelte";
import { app } from "../../lib/state.svelte";
import { hasStage, type StageId } from "../../lib/pipeline";

export type Part = "embed" | "pos_embed" | "head" | "attn_bias" | "mlp" | "expert" | "mixer" | "resid_pre" | "attn_out"
  | "mlp_out";

const VIEW_OF: Record<Part, StageId> = {
  embed: "embedding", pos_embed: "embedding", head: "attention", attn_bias: "heads", mlp: "mlp", expert: "experts",
  resid_pre: "residual", attn_out: "heads", mlp_out: "mlp",
  mixer: "attention", // a layer's token mixer without attention: the attention stage draws it as what it is
};

/** Put the app's focus on `layer`, `head` and `pos` (those given) and open the view of `part`. */
export async function openPart(part: Part, at: { layer?: number | null; head?: number | null; pos?: number | null },
  text?: string): Promise<void> {
  if (text !== undefined && text !== app.text) {
    app.setText(text);
    await app.run();
  }
  if (at.layer != null) app.layer = at.layer;
  if (at.head != null) app.head = at.head;
  if (at.pos != null) app.pos = at.pos;
  // a view the model does not have (a model that runs through transformers: no MLP or heads view) opens the residual
  // stream at that layer, where the part's output is added
  app.view = hasStage(VIEW_OF[part], app.caps) ? VIEW_OF[part] : "residual";
  await tick();
  document.querySelector(`[data-view="${app.view}"]`)?.scrollIntoView({ block: "start", behavior: "instant" as ScrollBehavior });
}
