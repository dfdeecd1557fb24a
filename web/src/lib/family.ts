// The model families the app explains, each declared once in Python (src/transformer_explainer/families/) and
// exported to generated/names.ts (FAMILIES): GPT-2, the Llama family (Llama, Qwen2, Mistral), Qwen3 and Gemma 3.
// Views and lessons branch on a model's capabilities (its config's `capabilities`: the norm's kind, the position
// scheme, QK-norm, sandwich norms, local layers, ...), never on the family's name.
import type { CapabilitiesOut, ModelConfigOut } from "./generated/api";
import { FAMILIES, type FamilyDeclaration } from "./generated/names";

/** A family's name, as the server sends it ("gpt2", "llama", "qwen3", "gemma3", or one this page was built without). */
export type Family = string;
/** The capabilities' family fields (its norm, positions, MLP, ...): null for a model that runs through
 *  transformers' own modules, which has no declaration. */
type FamilyFields = "norm" | "norm_offset" | "positions" | "qkv" | "mlp" | "qk_norm" | "sandwich_norm" | "embed_scale"
  | "attn_scale";
/** A model's capabilities as the views read them: the family fields typed as an own-code model has them. A model that
 *  runs through transformers (`runsThrough`) has them null, and no view or lesson that reads them is offered for it
 *  (pipeline.hasStage, lessons/choose.ts): those read its own values, which exist only for our code. */
export type Capabilities = Omit<CapabilitiesOut, FamilyFields> & { [K in FamilyFields]: NonNullable<CapabilitiesOut[K]> };
/** A config as the lessons read it: the fields an own-code model always has (norm epsilon, activation, MLP width). */
export type OwnConfig = Omit<ModelConfigOut, "capabilities" | "layer_norm_epsilon" | "activation" | "d_mlp" | "qkv_bias"
  | "out_bias" | "mlp_bias" | "tie_word_embeddings"> & { capabilities: Capabilities; layer_norm_epsilon: number;
  activation: string; d_mlp: number; qkv_bias?: boolean; out_bias?: boolean; mlp_bias?: boolean;
  tie_word_embeddings?: boolean };

/** Whether the model runs through transformers' own modules (a decoder no family of ours declares): its trace holds
 *  each layer's input and output, its attention's queries, keys, values, scores and pattern, and each mixer's and
 *  MLP's output, not the insides of its norms, projections and MLP. */
export function runsThrough(caps: Pick<CapabilitiesOut, "runs"> | null | undefined): boolean {
  return caps?.runs === "transformers";
}

/** The layers with attention (every layer of an own-code model). */
export function attentionLayers(caps: CapabilitiesOut, nLayer: number): number[] {
  return caps.runs === "transformers" ? (caps.attention_layers ?? []) : Array.from({ length: nLayer }, (_, i) => i);
}

/** Whether layer `layer`'s trace records `stage` (every stage of its family's table for an own-code model). */
export function layerHas(caps: CapabilitiesOut, layer: number, stage: string): boolean {
  return caps.layer_stages?.[layer]?.includes(stage) ?? true;
}

/** What a layer of a model that runs through transformers mixes its tokens with: its first mixer that is not
 *  attention ("linear_attention", "short_conv", "state_space", "mixer"), or "attention". */
export function mixerOf(caps: CapabilitiesOut, layer: number): string {
  const kinds = caps.mixers?.[layer] ?? ["attention"];
  return kinds.find((k) => k !== "attention") ?? "attention";
}

/** The stage names of that mixer's input and output (linear_attn.in / .out, conv.*, ssm.*, mixer.*, attn_out). */
export const MIXER_STAGES: Readonly<Record<string, { in: string; out: string }>> = {
  linear_attention: { in: "linear_attn.in", out: "linear_attn.out" }, short_conv: { in: "conv.in", out: "conv.out" },
  state_space: { in: "ssm.in", out: "ssm.out" }, mixer: { in: "mixer.in", out: "mixer.out" },
};

/** The model's family's name, as its config says; null before a config is known. A family missing from FAMILIES (a
 *  server newer than this page) keeps its own name: it is never taken for another family, and the views follow its
 *  capabilities, which the config carries. */
export function familyOf(cfg: Pick<ModelConfigOut, "family"> | null | undefined): Family | null {
  return cfg?.family || null;
}

/** The family's declaration (label, model types, parts), or null for a family this page does not know. */
export function declarationOf(cfg: Pick<ModelConfigOut, "family"> | null | undefined): FamilyDeclaration | null {
  const f = familyOf(cfg);
  return f !== null && Object.hasOwn(FAMILIES, f) ? FAMILIES[f] : null;
}

/** The family's name as people write it ("Gemma 3"); a family this page does not know, by the name the server gives. */
export function familyLabel(cfg: Pick<ModelConfigOut, "family"> | null | undefined): string {
  return declarationOf(cfg)?.label ?? familyOf(cfg) ?? "";
}

/** GPT-2's capabilities: what the page assumes before a model's config is known. */
export const GPT2_CAPABILITIES: Capabilities = {
  ...FAMILIES.gpt2.arch, kv_groups: 1, local_window: null, layer_types: [], attn_scale: 0, rope_local_theta: null,
};

/** A model's capabilities (GPT-2's when its config is not known yet). */
export function capsOf(cfg: Pick<ModelConfigOut, "capabilities"> | null | undefined): Capabilities {
  return (cfg?.capabilities as Capabilities | undefined) ?? GPT2_CAPABILITIES;
}

/** Whether block `layer` is a local one (attends to a sliding window of keys). */
export function isLocal(caps: Capabilities, layer: number): boolean {
  return caps.layer_types[layer] === "sliding_attention";
}

/** How a mixture's router chooses and weighs: "softmax" (over every expert, then its top-k: the own mixtures),
 *  "sigmoid_grouped" (DeepSeek-V3), "softmax_topk" (gpt-oss); null where the model has no experts whose routing its
 *  trace shows (a dense model, or experts that run in transformers' code alone). */
export type RouterKind = NonNullable<CapabilitiesOut["router"]>;
export function routerOf(caps: Pick<CapabilitiesOut, "router" | "mlp">): RouterKind | null {
  return caps.router ?? (caps.mlp === "moe" ? "softmax" : null);
}

/** Whether block `layer` routes its tokens to experts whose routing the trace shows (a mixture of experts; Qwen3-MoE
 *  and DeepSeek-V3 may keep dense blocks). */
export function hasExperts(caps: Pick<CapabilitiesOut, "router" | "mlp" | "moe_layers">, layer: number): boolean {
  return routerOf(caps) !== null && (caps.moe_layers ?? []).includes(layer);
}

/** Key/value heads (G): n_head for GPT-2, fewer under grouped-query attention. */
export function kvHeads(cfg: Pick<ModelConfigOut, "n_head" | "n_kv_heads">): number {
  return cfg.n_kv_heads || cfg.n_head;
}

/** The key/value head query head `h` reads: h // (H / G), as attn.kv_head says. */
export function kvHeadOf(h: number, nHead: number, nKv: number): number {
  return Math.floor(h / Math.max(1, Math.floor(nHead / Math.max(1, nKv))));
}

/** What LayerNorm would compute on `x` (no learned scale or shift): mean, biased variance, (x − μ)/√(σ² + ε).
 *  The RMSNorm view shows it beside the model's own step, for comparison. */
export function layerNormOf(x: ArrayLike<number>, eps: number): { mean: number; variance: number; normalized: Float32Array } {
  const n = x.length;
  let s = 0;
  for (let i = 0; i < n; i++) s += x[i];
  const mean = s / n;
  let v = 0;
  for (let i = 0; i < n; i++) v += (x[i] - mean) ** 2;
  const variance = v / n;
  const inv = 1 / Math.sqrt(variance + eps);
  const normalized = new Float32Array(n);
  for (let i = 0; i < n; i++) normalized[i] = (x[i] - mean) * inv;
  return { mean, variance, normalized };
}

/** Cosine of the angle between two vectors (1: same direction). */
export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) { ab += a[i] * b[i]; aa += a[i] * a[i]; bb += b[i] * b[i]; }
  return ab / Math.sqrt(aa * bb || 1);
}
