// Which component draws each stage of the pipeline (lib/pipeline.ts lists the stages in order, which ones a model
// has, and the tensors each one shows). A stage's component takes no props: it reads the focus and the trace from
// the app state (lib/state.svelte.ts). App.svelte draws the one for the stage in view. Experiments and Why this
// token are pages of their own, chunks loaded on first use (src/parts.ts): their entry is that part.
//
// A new stage: its id in STAGES (lib/pipeline.ts, its tensors in stageSpecs), its component in this folder, and
// its line below.
import type { Component } from "svelte";
import type { StageId } from "../lib/pipeline";
import type { Part } from "../lib/part.svelte";
import { PARTS } from "../parts";
import Attention from "./AttentionOrMixer.svelte";
import Blocks from "./Blocks.svelte";
import Embedding from "./Embedding.svelte";
import Experts from "./Experts.svelte";
import Gqa from "./Gqa.svelte";
import Heads from "./Heads.svelte";
import LayerNorm from "./LayerNorm.svelte";
import Mlp from "./Mlp.svelte";
import Output from "./Output.svelte";
import Overview from "./Overview.svelte";
import QkNorm from "./QkNorm.svelte";
import Qkv from "./Qkv.svelte";
import Residual from "./Residual.svelte";
import Rope from "./Rope.svelte";
import Tokens from "./Tokens.svelte";
import Window from "./Window.svelte";

/** A stage's component (drawn with no props), or the part that holds it. */
export type StageComponent = Component<Record<string, never>> | Part;

export const STAGE_COMPONENTS: Record<StageId, StageComponent> = {
  overview: Overview,
  tokens: Tokens,
  embedding: Embedding,
  blocks: Blocks,
  layernorm: LayerNorm,
  qkv: Qkv,
  qknorm: QkNorm,
  rope: Rope,
  gqa: Gqa,
  attention: Attention,
  window: Window,
  heads: Heads,
  residual: Residual,
  mlp: Mlp,
  experts: Experts,
  output: Output,
  experiments: PARTS.experiments,
  attribution: PARTS.attribution,
  features: PARTS.features,
};
