// Parameter counts of a GPT-2-shaped model, from its config: every weight and bias (GPT-2 ties the
// unembedding to W_E, so it adds none).

export interface ParamCounts {
  /** One block's MLP: W_in d×4d + b_in 4d + W_out 4d×d + b_out d = 8d² + 5d. */
  mlp: number;
  /** One block: the MLP + W_QKV d×3d + b 3d + W_O d×d + b d + two layer norms 4d = 12d² + 13d. */
  block: number;
  /** All the MLPs. */
  mlpAll: number;
  /** Token and position embeddings (W_E also serves as the unembedding). */
  embed: number;
  /** The model: the embeddings, the blocks, the final layer norm. */
  total: number;
}

export function paramCounts(c: { n_embd: number; n_layer: number; vocab_size: number; block_size: number }): ParamCounts {
  const d = c.n_embd;
  const mlp = 8 * d * d + 5 * d;
  const block = 12 * d * d + 13 * d;
  const embed = c.vocab_size * d + c.block_size * d;
  return { mlp, block, mlpAll: c.n_layer * mlp, embed, total: embed + c.n_layer * block + 2 * d };
}

/** The same counts for a model of a rotary family: per block W_Q d×H·Dh, W_K and W_V d×G·Dh (with Qwen2's q, k,
 *  v biases when it has them), W_O H·Dh×d, the gated MLP's three d×m matrices and two RMSNorm scales d (four with
 *  sandwich norms; QK-norm's two scales Dh where it has them); the token embedding V×d, the unembedding another
 *  V×d when it is not tied, the final RMSNorm d. No position table. */
export function llamaParamCounts(c: { n_embd: number; n_layer: number; vocab_size: number; n_head: number; head_dim: number;
  d_mlp: number; n_kv_heads?: number; qkv_bias?: boolean; tie_word_embeddings?: boolean;
  capabilities?: { qk_norm: boolean; sandwich_norm: boolean } }): ParamCounts {
  const d = c.n_embd, q = c.n_head * c.head_dim, kv = (c.n_kv_heads || c.n_head) * c.head_dim;
  const attn = d * q + 2 * d * kv + q * d + (c.qkv_bias ? q + 2 * kv : 0) + (c.capabilities?.qk_norm ? 2 * c.head_dim : 0);
  const mlp = 3 * d * c.d_mlp;
  const block = attn + mlp + (c.capabilities?.sandwich_norm ? 4 : 2) * d;
  const embed = c.vocab_size * d * (c.tie_word_embeddings === false ? 2 : 1);
  return { mlp, block, mlpAll: c.n_layer * mlp, embed, total: embed + c.n_layer * block + d };
}
