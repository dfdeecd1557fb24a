// The model families the app explains, read from the model's config (`family`, as in
// src/transformer_explainer/config.py): GPT-2 (LayerNorm, learned positions, GELU MLP) and the Llama
// family (Llama, Qwen2, Mistral: RMSNorm, rotary positions, grouped-query attention, gated MLP).
import type { ModelConfigOut } from "./generated/api";

export type Family = "gpt2" | "llama";

export function familyOf(cfg: Pick<ModelConfigOut, "family"> | null | undefined): Family {
  return cfg?.family === "llama" ? "llama" : "gpt2";
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
