"""The one naming scheme for every recorded value and every weight matrix.

Names follow TransformerLens (`blocks.3.attn.pattern`, `blocks.3.resid_post`, `logits`). The same
table feeds the Python trace, the JSON API and the TypeScript types of the web app, so nothing else
builds a name by hand.

One table per model family (`FAMILY_NAMES`, the key its declaration in `families/` has): GPT-2 (the
tables without a prefix), the Llama family (Llama, Qwen2, Mistral; `LLAMA_`: RMSNorm, rotary positions,
grouped-query attention, the gated MLP), Qwen3 (`QWEN3_`: the Llama family's names and QK-norm's) and
Gemma 3 (`GEMMA3_`: Qwen3's and the sandwich norms', the scaled embedding, the local layers' rotation), and
the mixtures of experts: Mixtral (`MIXTRAL_`: the Llama family's attention, the router and the experts in
place of the MLP), Qwen3-MoE (`QWEN3_MOE_`: Qwen3's, the router and the experts, and the dense MLP's names
for its blocks without experts) and OLMoE (`OLMOE_`: Mixtral's, with QK-norm over all heads together).
Stages the families share keep one name.
"""

from __future__ import annotations

from dataclasses import dataclass

# Per-block activations: suffix -> (dims, what it is). Dims use: T query positions, S key positions
# (S = T without a cache), H heads, G key/value heads, D d_model, Dh head dim, R = Dh/2 rotation
# pairs, M MLP width (an expert's, in an expert's weights), V vocabulary, P positions, E experts, K the
# experts chosen per token (top_k).
BLOCK_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "resid_pre": (("T", "D"), "residual stream entering the block"),
    "ln1.mean": (("T",), "mean of each position's vector, first LayerNorm"),
    "ln1.var": (("T",), "variance (biased) of each position's vector, first LayerNorm"),
    "ln1.normalized": (("T", "D"), "(x - mean) / sqrt(var + eps)"),
    "ln1.out": (("T", "D"), "normalized * scale + shift: the attention input"),
    "attn.q": (("H", "T", "Dh"), "queries, ln1.out @ W_Q + b_Q, split into heads"),
    "attn.k": (("H", "S", "Dh"), "keys, split into heads"),
    "attn.v": (("H", "S", "Dh"), "values, split into heads"),
    "attn.scores": (("H", "T", "S"), "raw attention scores Q @ K^T"),
    "attn.scaled_scores": (("H", "T", "S"), "scores / sqrt(head_dim)"),
    "attn.masked_scores": (("H", "T", "S"), "scaled scores with -inf where the key is after the query"),
    "attn.pattern": (("H", "T", "S"), "softmax over keys of the masked scores; rows sum to 1"),
    "attn.z": (("H", "T", "Dh"), "pattern @ V: each head's weighted sum of values"),
    "attn.concat": (("T", "D"), "the heads' z side by side, the input of the output projection"),
    "attn_out": (("T", "D"), "concat @ W_O + b_O: what attention adds to the residual stream"),
    "resid_mid": (("T", "D"), "resid_pre + attn_out"),
    "ln2.mean": (("T",), "mean of each position's vector, second LayerNorm"),
    "ln2.var": (("T",), "variance (biased), second LayerNorm"),
    "ln2.normalized": (("T", "D"), "(x - mean) / sqrt(var + eps)"),
    "ln2.out": (("T", "D"), "normalized * scale + shift: the MLP input"),
    "mlp.pre": (("T", "M"), "ln2.out @ W_in + b_in: the expanded hidden layer before GELU"),
    "mlp.post": (("T", "M"), "GELU(mlp.pre)"),
    "mlp_out": (("T", "D"), "mlp.post @ W_out + b_out: what the MLP adds to the residual stream"),
    "resid_post": (("T", "D"), "resid_mid + mlp_out: the block's output"),
}

GLOBAL_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "embed.token": (("T", "D"), "row of the token embedding matrix W_E for each token"),
    "embed.position": (("T", "D"), "row of the position embedding matrix W_pos for each position"),
    "embed.sum": (("T", "D"), "token + position embedding: the input of block 0"),
    "ln_final.mean": (("T",), "mean, final LayerNorm"),
    "ln_final.var": (("T",), "variance (biased), final LayerNorm"),
    "ln_final.normalized": (("T", "D"), "(x - mean) / sqrt(var + eps)"),
    "ln_final.out": (("T", "D"), "normalized * scale + shift: the unembedding input"),
    "logits": (("T", "V"), "ln_final.out @ W_U: one score per vocabulary entry (GPT-2 has no bias here)"),
}

# Stages computed on request from recorded ones instead of being stored: the rule (`Derivation`) that
# the trace follows, and the offline snapshot page too (web/src/snapshot/derive.ts, from the generated
# TypeScript of this table).
@dataclass(frozen=True)
class Derivation:
    """A stage computed by `op` (one of `DERIVATION_OPS`) from `sources`: stages of the same block,
    or full names where the stage is a global one."""

    op: str
    sources: tuple[str, ...]


DERIVATION_OPS: dict[str, str] = {
    "same": "the source itself, under a second name",
    "scores": "queries @ keys^T, each query head against the keys of the key/value head it reads",
    "scale": "the source times the attention scale: 1 / sqrt(head_dim), or 1 / sqrt(query_pre_attn_scalar) "
             "where the model names one",
    "causal_mask": "the source with -inf where the key lies after the query, and in a layer with a local window "
                   "where it lies `sliding_window` or more positions before it",
    "concat_heads": "(H, T, Dh) -> (T, H*Dh): each position's heads side by side",
    "kv_head_index": "for each query head h (of the source's H), the key/value head it reads: h // (H / G)",
}

DERIVATIONS: dict[str, Derivation] = {
    # q @ k^T: recomputing it costs less than keeping (H, T, S) per block
    "attn.scores": Derivation("scores", ("attn.q", "attn.k")),
    "attn.scaled_scores": Derivation("scale", ("attn.scores",)),
    "attn.masked_scores": Derivation("causal_mask", ("attn.scaled_scores",)),
    "attn.concat": Derivation("concat_heads", ("attn.z",)),
    "embed.sum": Derivation("same", ("blocks.0.resid_pre",)),
}


def recorded_sources(derivations: dict[str, Derivation]) -> dict[str, str]:
    """Each derived stage's first recorded source (what /api/names calls `derived`): the first source,
    followed through the stages that are derived themselves."""
    out = {}
    for stage, d in derivations.items():
        src = d.sources[0]
        while src in derivations:
            src = derivations[src].sources[0]
        out[stage] = src
    return out


DERIVED: dict[str, str] = recorded_sources(DERIVATIONS)

BLOCK_WEIGHTS: dict[str, tuple[tuple[str, ...], str]] = {
    "ln1.w": (("D",), "first LayerNorm scale"),
    "ln1.b": (("D",), "first LayerNorm shift"),
    "attn.W_Q": (("H", "D", "Dh"), "query weights per head"),
    "attn.W_K": (("H", "D", "Dh"), "key weights per head"),
    "attn.W_V": (("H", "D", "Dh"), "value weights per head"),
    "attn.b_Q": (("H", "Dh"), "query bias per head"),
    "attn.b_K": (("H", "Dh"), "key bias per head"),
    "attn.b_V": (("H", "Dh"), "value bias per head"),
    "attn.W_O": (("H", "Dh", "D"), "output projection, rows grouped by head"),
    "attn.b_O": (("D",), "output projection bias"),
    "ln2.w": (("D",), "second LayerNorm scale"),
    "ln2.b": (("D",), "second LayerNorm shift"),
    "mlp.W_in": (("D", "M"), "MLP expansion"),
    "mlp.b_in": (("M",), "MLP expansion bias"),
    "mlp.W_out": (("M", "D"), "MLP projection back to d_model"),
    "mlp.b_out": (("D",), "MLP projection bias"),
}

GLOBAL_WEIGHTS: dict[str, tuple[tuple[str, ...], str]] = {
    "embed.W_E": (("V", "D"), "token embedding matrix"),
    "embed.W_pos": (("P", "D"), "position embedding matrix"),
    "ln_final.w": (("D",), "final LayerNorm scale"),
    "ln_final.b": (("D",), "final LayerNorm shift"),
    "unembed.W_U": (("D", "V"), "unembedding: the transpose of W_E (tied), no bias"),
}


# -- the Llama family (Llama, Qwen2, Mistral) ----------------------------------------------------------

# Tensors with a G (key/value head) dim are sliced by query head, as the attention reads them: asking
# for head h gives key/value head h // (H / G), the one query head h shares with its group.
KV_SLICE = "; asking for head h gives key/value head h // (H / G), the one query head h reads"

LLAMA_BLOCK_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "resid_pre": (("T", "D"), "residual stream entering the block"),
    "ln1.rms": (("T",), "root mean square of each position's vector, sqrt(mean(x^2) + eps), first RMSNorm"),
    "ln1.normalized": (("T", "D"), "x / rms: no mean is subtracted"),
    "ln1.out": (("T", "D"), "normalized * scale (no shift): the attention input"),
    "attn.q": (("H", "T", "Dh"), "queries, ln1.out @ W_Q (+ b_Q), split into heads, before rotation"),
    "attn.k": (("G", "T", "Dh"), "keys of the new positions before rotation, one set per key/value head"
                                 + KV_SLICE),
    "attn.v": (("G", "S", "Dh"), "values, one set per key/value head (never rotated)" + KV_SLICE),
    "attn.rot_q": (("H", "T", "Dh"), "queries rotated by their position's angles (RoPE)"),
    "attn.rot_k": (("G", "S", "Dh"), "keys rotated by their position's angles (RoPE): what the cache keeps"
                                     + KV_SLICE),
    "attn.kv_head": (("H",), "the key/value head each query head reads: h // (H / G)"),
    "attn.scores": (("H", "T", "S"), "raw attention scores rot_q @ rot_k^T of the head's key/value head"),
    "attn.scaled_scores": (("H", "T", "S"), "scores / sqrt(head_dim)"),
    "attn.masked_scores": (("H", "T", "S"), "scaled scores with -inf where the key is after the query"),
    "attn.pattern": (("H", "T", "S"), "softmax over keys of the masked scores; rows sum to 1"),
    "attn.z": (("H", "T", "Dh"), "pattern @ V of the head's key/value head: each head's weighted sum"),
    "attn.concat": (("T", "H*Dh"), "the heads' z side by side, the input of the output projection"),
    "attn_out": (("T", "D"), "concat @ W_O: what attention adds to the residual stream"),
    "resid_mid": (("T", "D"), "resid_pre + attn_out"),
    "ln2.rms": (("T",), "root mean square of each position's vector, second RMSNorm"),
    "ln2.normalized": (("T", "D"), "x / rms"),
    "ln2.out": (("T", "D"), "normalized * scale: the MLP input"),
    "mlp.gate": (("T", "M"), "ln2.out @ W_gate: the gate, before its activation"),
    "mlp.up": (("T", "M"), "ln2.out @ W_in: the linear branch"),
    "mlp.act": (("T", "M"), "SiLU(gate) = gate * sigmoid(gate)"),
    "mlp.post": (("T", "M"), "act * up: the gated hidden layer"),
    "mlp_out": (("T", "D"), "mlp.post @ W_out: what the MLP adds to the residual stream"),
    "resid_post": (("T", "D"), "resid_mid + mlp_out: the block's output"),
}

LLAMA_GLOBAL_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "embed.token": (("T", "D"), "row of the token embedding matrix W_E for each token: the input of block 0"),
    "rope.angles": (("T", "R"), "rotation angle of each position for each pair of a head's dimensions: "
                                "position * frequency; shared by every block and head"),
    "ln_final.rms": (("T",), "root mean square, final RMSNorm"),
    "ln_final.normalized": (("T", "D"), "x / rms"),
    "ln_final.out": (("T", "D"), "normalized * scale: the unembedding input"),
    "logits": (("T", "V"), "ln_final.out @ W_U: one score per vocabulary entry (no bias)"),
}

LLAMA_DERIVATIONS: dict[str, Derivation] = {
    "attn.scores": Derivation("scores", ("attn.rot_q", "attn.rot_k")),  # the rotated queries and keys
    "attn.scaled_scores": Derivation("scale", ("attn.scores",)),
    "attn.masked_scores": Derivation("causal_mask", ("attn.scaled_scores",)),
    "attn.concat": Derivation("concat_heads", ("attn.z",)),
    "attn.kv_head": Derivation("kv_head_index", ("attn.rot_q",)),  # from the model's shape
}
LLAMA_DERIVED: dict[str, str] = recorded_sources(LLAMA_DERIVATIONS)

LLAMA_BLOCK_WEIGHTS: dict[str, tuple[tuple[str, ...], str]] = {
    "ln1.w": (("D",), "first RMSNorm scale"),
    "attn.W_Q": (("H", "D", "Dh"), "query weights per head"),
    "attn.W_K": (("G", "D", "Dh"), "key weights per key/value head" + KV_SLICE),
    "attn.W_V": (("G", "D", "Dh"), "value weights per key/value head" + KV_SLICE),
    "attn.b_Q": (("H", "Dh"), "query bias per head (Qwen2; absent where the model has none)"),
    "attn.b_K": (("G", "Dh"), "key bias per key/value head (Qwen2)" + KV_SLICE),
    "attn.b_V": (("G", "Dh"), "value bias per key/value head (Qwen2)" + KV_SLICE),
    "attn.W_O": (("H", "Dh", "D"), "output projection, rows grouped by head"),
    "attn.b_O": (("D",), "output projection bias (Llama with attention_bias; absent where the model has none)"),
    "ln2.w": (("D",), "second RMSNorm scale"),
    "mlp.W_gate": (("D", "M"), "MLP gate projection"),
    "mlp.b_gate": (("M",), "MLP gate bias (Llama with mlp_bias; absent where the model has none)"),
    "mlp.W_in": (("D", "M"), "MLP up projection (the linear branch)"),
    "mlp.b_in": (("M",), "MLP up bias (Llama with mlp_bias)"),
    "mlp.W_out": (("M", "D"), "MLP down projection back to d_model"),
    "mlp.b_out": (("D",), "MLP down bias (Llama with mlp_bias)"),
}

LLAMA_GLOBAL_WEIGHTS: dict[str, tuple[tuple[str, ...], str]] = {
    "embed.W_E": (("V", "D"), "token embedding matrix"),
    "ln_final.w": (("D",), "final RMSNorm scale"),
    "unembed.W_U": (("D", "V"), "unembedding: the transpose of W_E when tied, its own matrix when not"),
}


# -- Qwen3: the Llama family's names, and QK-norm's ------------------------------------------------------

def _with(table: dict[str, tuple[tuple[str, ...], str]], after: str | None = None,
          add: dict[str, tuple[tuple[str, ...], str]] | None = None,
          replace: dict[str, tuple[tuple[str, ...], str]] | None = None) -> dict[str, tuple[tuple[str, ...], str]]:
    """A copy of `table` (its order kept) with entries replaced, and `add` inserted after `after` (at the end
    when None): the tables of a family that grows out of another."""
    out: dict[str, tuple[tuple[str, ...], str]] = {}
    for key, entry in table.items():
        out[key] = (replace or {}).get(key, entry)
        if key == after:
            out.update(add or {})
    if after is None:
        out.update(add or {})
    return out


QK_NORM_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "attn.q_norm.rms": (("H", "T"), "root mean square of each head's query at each position, sqrt(mean(q^2) + eps): "
                                    "what QK-norm divides it by"),
    "attn.q_norm.normalized": (("H", "T", "Dh"), "q / rms"),
    "attn.q_norm.out": (("H", "T", "Dh"), "q / rms * scale: each head's query brought to a fixed size, "
                                          "before the rotation"),
    "attn.k_norm.rms": (("G", "T"), "root mean square of each key/value head's key at each new position" + KV_SLICE),
    "attn.k_norm.normalized": (("G", "T", "Dh"), "k / rms" + KV_SLICE),
    "attn.k_norm.out": (("G", "T", "Dh"), "k / rms * scale: each key brought to a fixed size, before the rotation"
                                          + KV_SLICE),
}
QWEN3_BLOCK_ACTIVATIONS = _with(LLAMA_BLOCK_ACTIVATIONS, after="attn.k", add=QK_NORM_ACTIVATIONS, replace={
    "attn.q": (("H", "T", "Dh"), "queries, ln1.out @ W_Q, split into heads, before their norm and the rotation"),
    "attn.k": (("G", "T", "Dh"), "keys of the new positions before their norm and the rotation, one set per "
                                 "key/value head" + KV_SLICE),
    "attn.rot_q": (("H", "T", "Dh"), "the normed queries rotated by their position's angles (RoPE)"),
    "attn.rot_k": (("G", "S", "Dh"), "the normed keys rotated by their position's angles (RoPE): what the cache "
                                     "keeps" + KV_SLICE),
})
QWEN3_GLOBAL_ACTIVATIONS = LLAMA_GLOBAL_ACTIVATIONS
def _without(table: dict[str, tuple[tuple[str, ...], str]], *keys: str) -> dict[str, tuple[tuple[str, ...], str]]:
    return {k: v for k, v in table.items() if k not in keys}


MLP_BIASES = ("mlp.b_gate", "mlp.b_in", "mlp.b_out")
QWEN3_BLOCK_WEIGHTS = _with(_without(LLAMA_BLOCK_WEIGHTS, *MLP_BIASES), after="attn.b_V", add={
    "attn.q_norm.w": (("Dh",), "QK-norm's scale of the queries, the same for every head"),
    "attn.k_norm.w": (("Dh",), "QK-norm's scale of the keys, the same for every head"),
}, replace={
    "attn.b_Q": (("H", "Dh"), "query bias per head (with attention_bias; absent where the model has none)"),
    "attn.b_K": (("G", "Dh"), "key bias per key/value head (with attention_bias)" + KV_SLICE),
    "attn.b_V": (("G", "Dh"), "value bias per key/value head (with attention_bias)" + KV_SLICE),
    "attn.b_O": (("D",), "output projection bias (with attention_bias)"),
})
QWEN3_GLOBAL_WEIGHTS = LLAMA_GLOBAL_WEIGHTS
QWEN3_DERIVATIONS = LLAMA_DERIVATIONS


# -- Gemma 3: Qwen3's names, the sandwich norms', the scaled embedding, the local layers' rotation -----------

def _rms_stages(prefix: str, what: str) -> dict[str, tuple[tuple[str, ...], str]]:
    return {
        f"{prefix}.rms": (("T",), f"root mean square of each position's vector, {what}"),
        f"{prefix}.normalized": (("T", "D"), "x / rms"),
        f"{prefix}.out": (("T", "D"), "normalized * (1 + weight)"),
    }


GEMMA3_BLOCK_ACTIVATIONS = _with(
    _with(
        _with(QWEN3_BLOCK_ACTIVATIONS, after="attn.concat", add={
            "attn.out": (("T", "D"), "concat @ W_O: attention's output, before its norm (ln1_post)"),
            **_rms_stages("ln1_post", "the norm after attention"),
        }),
        after="mlp.post", add={
            "mlp.out": (("T", "D"), "mlp.post @ W_out: the MLP's output, before its norm (ln2_post)"),
            **_rms_stages("ln2_post", "the norm after the MLP"),
        }),
    replace={
        "ln1.out": (("T", "D"), "normalized * (1 + weight): the attention input"),
        "ln2.out": (("T", "D"), "normalized * (1 + weight): the MLP input"),
        "attn.q_norm.out": (("H", "T", "Dh"), "q / rms * (1 + weight): each head's query brought to a fixed size, "
                                              "before the rotation"),
        "attn.k_norm.out": (("G", "T", "Dh"), "k / rms * (1 + weight): each key brought to a fixed size, before the "
                                              "rotation" + KV_SLICE),
        "attn.scaled_scores": (("H", "T", "S"), "scores / sqrt(query_pre_attn_scalar)"),
        "attn.masked_scores": (("H", "T", "S"), "scaled scores with -inf where the key is after the query, and in a "
                                                "local layer where it is sliding_window or more positions before it"),
        "attn_out": (("T", "D"), "ln1_post.out: what attention adds to the residual stream"),
        "mlp.act": (("T", "M"), "GELU(gate), tanh approximation: GeGLU's gate"),
        "mlp_out": (("T", "D"), "ln2_post.out: what the MLP adds to the residual stream"),
    })
GEMMA3_GLOBAL_ACTIVATIONS = _with(LLAMA_GLOBAL_ACTIVATIONS, after="rope.angles", add={
    "rope.local_angles": (("T", "R"), "the same for the local (sliding-window) layers, whose rotary base is their "
                                      "own (rope_local_base_freq)"),
    "embed.scaled": (("T", "D"), "embed.token * sqrt(d_model), rounded to the model's dtype: the input of block 0"),
}, replace={
    "embed.token": (("T", "D"), "row of the token embedding matrix W_E for each token, before the scaling"),
    "rope.angles": (("T", "R"), "rotation angle of each position for each pair of a head's dimensions, in the "
                                "global layers: position * frequency (base rope_theta)"),
    "ln_final.out": (("T", "D"), "normalized * (1 + weight): the unembedding input"),
})
GEMMA3_BLOCK_WEIGHTS = _with(_with(_without(QWEN3_BLOCK_WEIGHTS, "attn.b_Q", "attn.b_K", "attn.b_V", "attn.b_O"),
                                   after="attn.W_O", add={
    "ln1_post.w": (("D",), "the norm after attention: its effective scale, 1 + weight"),
}), add={"ln2_post.w": (("D",), "the norm after the MLP: its effective scale, 1 + weight")}, replace={
    "ln1.w": (("D",), "first RMSNorm: its effective scale, 1 + weight (the checkpoint stores the weight)"),
    "ln2.w": (("D",), "the norm before the MLP: its effective scale, 1 + weight"),
    "attn.q_norm.w": (("Dh",), "QK-norm's effective scale of the queries, 1 + weight, the same for every head"),
    "attn.k_norm.w": (("Dh",), "QK-norm's effective scale of the keys, 1 + weight, the same for every head"),
})
GEMMA3_GLOBAL_WEIGHTS = _with(LLAMA_GLOBAL_WEIGHTS, replace={
    "ln_final.w": (("D",), "final RMSNorm: its effective scale, 1 + weight"),
})
GEMMA3_DERIVATIONS: dict[str, Derivation] = {
    **LLAMA_DERIVATIONS,
    "embed.scaled": Derivation("same", ("blocks.0.resid_pre",)),
}


# -- mixtures of experts: Mixtral (the Llama family's attention), Qwen3-MoE (Qwen3's), OLMoE -------------------

MOE_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "mlp.router_logits": (("T", "E"), "ln2.out @ W_router: the router's score of each expert for each token"),
    "mlp.router_probs": (("T", "E"), "softmax over all experts of the router logits, in float32: each token's "
                                     "probability of each expert"),
    "mlp.expert_indices": (("T", "K"), "the top_k experts each token is sent to, the most probable first"),
    "mlp.expert_weights": (("T", "K"), "what each chosen expert's output is multiplied by: its probability, "
                                       "renormalised over the chosen experts to sum to 1 where the model does so "
                                       "(norm_topk_prob; Mixtral always)"),
    "mlp.expert_out": (("T", "K", "D"), "each chosen expert's output before its weight: down(SiLU(gate(x)) * up(x)) "
                                        "with that expert's matrices, x = ln2.out"),
    "mlp.out": (("T", "D"), "the sum over the chosen experts of expert_weights * expert_out"),
}
MOE_STAGES = tuple(MOE_ACTIVATIONS)
DENSE_MLP_STAGES = ("mlp.gate", "mlp.up", "mlp.act", "mlp.post")
MOE_WEIGHTS: dict[str, tuple[tuple[str, ...], str]] = {
    "mlp.W_router": (("D", "E"), "the router: ln2.out @ W_router gives each expert's score (router_logits)"),
    "mlp.experts.W_gate": (("E", "D", "M"), "each expert's gate projection (M: an expert's width)"),
    "mlp.experts.W_in": (("E", "D", "M"), "each expert's up projection (the linear branch)"),
    "mlp.experts.W_out": (("E", "M", "D"), "each expert's down projection back to d_model"),
}
MOE_MLP_OUT = (("T", "D"), "mlp.out: what the mixture of experts adds to the residual stream")
ALL_MLP_WEIGHTS = ("mlp.W_gate", "mlp.b_gate", "mlp.W_in", "mlp.b_in", "mlp.W_out", "mlp.b_out")
ATTN_BIASES = ("attn.b_Q", "attn.b_K", "attn.b_V", "attn.b_O")

MIXTRAL_BLOCK_ACTIVATIONS = _with(_without(LLAMA_BLOCK_ACTIVATIONS, *DENSE_MLP_STAGES), after="ln2.out",
                                  add=MOE_ACTIVATIONS, replace={"mlp_out": MOE_MLP_OUT})
MIXTRAL_BLOCK_WEIGHTS = _with(_without(LLAMA_BLOCK_WEIGHTS, *ALL_MLP_WEIGHTS, *ATTN_BIASES), add=MOE_WEIGHTS)

QWEN3_MOE_BLOCK_ACTIVATIONS = _with(QWEN3_BLOCK_ACTIVATIONS, after="mlp.post", add=MOE_ACTIVATIONS, replace={
    "mlp.gate": (("T", "M"), "blocks without experts: ln2.out @ W_gate, the gate before its activation"),
    "mlp.up": (("T", "M"), "blocks without experts: ln2.out @ W_in, the linear branch"),
    "mlp.act": (("T", "M"), "blocks without experts: SiLU(gate) = gate * sigmoid(gate)"),
    "mlp.post": (("T", "M"), "blocks without experts: act * up, the gated hidden layer"),
    "mlp_out": (("T", "D"), "what the MLP adds to the residual stream: mlp.out in a block with experts, "
                            "mlp.post @ W_out in one without"),
})
QWEN3_MOE_BLOCK_WEIGHTS = _with(QWEN3_BLOCK_WEIGHTS, add=MOE_WEIGHTS, replace={
    "mlp.W_gate": (("D", "M"), "blocks without experts: the MLP's gate projection"),
    "mlp.W_in": (("D", "M"), "blocks without experts: the MLP's up projection"),
    "mlp.W_out": (("M", "D"), "blocks without experts: the MLP's down projection"),
})

# OLMoE's QK-norm is one RMSNorm over the whole query projection (all heads side by side), one over the keys'
OLMOE_QK_NORM_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "attn.q_norm.rms": (("T",), "root mean square of all heads' queries together at each position, over the "
                                "H*Dh values: what QK-norm divides them by"),
    "attn.q_norm.normalized": (("T", "H*Dh"), "the queries / rms, the heads side by side"),
    "attn.q_norm.out": (("T", "H*Dh"), "normalized * scale: every head's query brought to a fixed size together, "
                                       "before the split into heads and the rotation"),
    "attn.k_norm.rms": (("T",), "root mean square of all key/value heads' keys together at each new position"),
    "attn.k_norm.normalized": (("T", "G*Dh"), "the keys / rms, the key/value heads side by side"),
    "attn.k_norm.out": (("T", "G*Dh"), "normalized * scale: the keys brought to a fixed size together, before the "
                                       "rotation"),
}
OLMOE_BLOCK_ACTIVATIONS = _with(MIXTRAL_BLOCK_ACTIVATIONS, after="attn.k", add=OLMOE_QK_NORM_ACTIVATIONS, replace={
    "attn.q": QWEN3_BLOCK_ACTIVATIONS["attn.q"],
    "attn.k": QWEN3_BLOCK_ACTIVATIONS["attn.k"],
    "attn.rot_q": QWEN3_BLOCK_ACTIVATIONS["attn.rot_q"],
    "attn.rot_k": QWEN3_BLOCK_ACTIVATIONS["attn.rot_k"],
})
OLMOE_BLOCK_WEIGHTS = _with(_without(QWEN3_BLOCK_WEIGHTS, *ALL_MLP_WEIGHTS), add=MOE_WEIGHTS, replace={
    "attn.q_norm.w": (("H*Dh",), "QK-norm's scale of the queries, one per value of the whole projection"),
    "attn.k_norm.w": (("G*Dh",), "QK-norm's scale of the keys, one per value of the whole projection"),
})


@dataclass(frozen=True)
class NameTable:
    """The names one model family answers."""

    block_activations: dict[str, tuple[tuple[str, ...], str]]
    global_activations: dict[str, tuple[tuple[str, ...], str]]
    block_weights: dict[str, tuple[tuple[str, ...], str]]
    global_weights: dict[str, tuple[tuple[str, ...], str]]
    derivations: dict[str, Derivation]  # stages computed from recorded ones
    globals_before_blocks: tuple[str, ...]  # the global activations computed before block 0
    # a family whose blocks may have experts or a dense MLP (Qwen3-MoE): the stages only the one kind has
    moe_stages: tuple[str, ...] = ()
    dense_mlp_stages: tuple[str, ...] = ()

    def block_stages(self, has_experts: bool) -> list[str]:
        """The stages a block answers, in computation order: with experts, or with a dense MLP."""
        skip = self.dense_mlp_stages if has_experts else self.moe_stages
        return [s for s in self.block_activations if s not in skip]

    @property
    def derived(self) -> dict[str, str]:
        """Each derived stage's recorded source."""
        return recorded_sources(self.derivations)


FAMILY_NAMES: dict[str, NameTable] = {
    "gpt2": NameTable(BLOCK_ACTIVATIONS, GLOBAL_ACTIVATIONS, BLOCK_WEIGHTS, GLOBAL_WEIGHTS, DERIVATIONS,
                      ("embed.token", "embed.position", "embed.sum")),
    "llama": NameTable(LLAMA_BLOCK_ACTIVATIONS, LLAMA_GLOBAL_ACTIVATIONS, LLAMA_BLOCK_WEIGHTS, LLAMA_GLOBAL_WEIGHTS,
                       LLAMA_DERIVATIONS, ("embed.token", "rope.angles")),
    "qwen3": NameTable(QWEN3_BLOCK_ACTIVATIONS, QWEN3_GLOBAL_ACTIVATIONS, QWEN3_BLOCK_WEIGHTS, QWEN3_GLOBAL_WEIGHTS,
                       QWEN3_DERIVATIONS, ("embed.token", "rope.angles")),
    "gemma3": NameTable(GEMMA3_BLOCK_ACTIVATIONS, GEMMA3_GLOBAL_ACTIVATIONS, GEMMA3_BLOCK_WEIGHTS,
                        GEMMA3_GLOBAL_WEIGHTS, GEMMA3_DERIVATIONS,
                        ("embed.token", "rope.angles", "rope.local_angles", "embed.scaled")),
    "mixtral": NameTable(MIXTRAL_BLOCK_ACTIVATIONS, LLAMA_GLOBAL_ACTIVATIONS, MIXTRAL_BLOCK_WEIGHTS,
                         LLAMA_GLOBAL_WEIGHTS, LLAMA_DERIVATIONS, ("embed.token", "rope.angles"), MOE_STAGES),
    "qwen3_moe": NameTable(QWEN3_MOE_BLOCK_ACTIVATIONS, QWEN3_GLOBAL_ACTIVATIONS, QWEN3_MOE_BLOCK_WEIGHTS,
                           QWEN3_GLOBAL_WEIGHTS, QWEN3_DERIVATIONS, ("embed.token", "rope.angles"), MOE_STAGES,
                           DENSE_MLP_STAGES),
    "olmoe": NameTable(OLMOE_BLOCK_ACTIVATIONS, LLAMA_GLOBAL_ACTIVATIONS, OLMOE_BLOCK_WEIGHTS, LLAMA_GLOBAL_WEIGHTS,
                       LLAMA_DERIVATIONS, ("embed.token", "rope.angles"), MOE_STAGES),
}

# How `head` (query head h of the model's H) slices a tensor: at the first of these dims the tensor
# has, by the rule named. "query_head": index h itself; "kv_head_of_query": the key/value head that
# query head h reads under grouped-query attention, `kv_head_of(h, H, G)`. The server's slicing and the
# offline snapshot page (web/src/snapshot/slicing.ts, from the generated TypeScript) both follow it.
HEAD_DIMS: dict[str, str] = {"H": "query_head", "G": "kv_head_of_query"}
# `position` slices at the first of these dims a tensor has: its query positions, else its key positions.
POSITION_DIMS: tuple[str, ...] = ("T", "S")


def kv_head_of(head: int, n_head: int, n_kv_heads: int) -> int:
    """The key/value head that query head `head` (0 <= head < n_head) reads: query heads
    g*H/G .. (g+1)*H/G - 1 share key/value head g."""
    return head // (n_head // n_kv_heads)


def names_for(family: str) -> NameTable:
    if family not in FAMILY_NAMES:
        raise KeyError(f"unknown model family {family!r}; expected one of {sorted(FAMILY_NAMES)}")
    return FAMILY_NAMES[family]


def block_name(layer: int, suffix: str) -> str:
    """`block_name(3, "attn.pattern") -> "blocks.3.attn.pattern"`."""
    if not any(suffix in t.block_activations or suffix in t.block_weights for t in FAMILY_NAMES.values()):
        raise KeyError(f"unknown block stage {suffix!r}")
    return f"blocks.{layer}.{suffix}"


def block_part(layer: int) -> str:
    """`block_part(3) -> "blocks.3"`: block 3 as one part of the model (a recorder's scope, a device map's key)."""
    return f"blocks.{layer}"


def blocks_label(layers: str, suffix: str) -> str:
    """A stage of several blocks, as a list shows it: `blocks_label("*", "attn.q") -> "blocks.*.attn.q"`,
    `blocks_label("1-5", "attn.q") -> "blocks.1-5.attn.q"`."""
    return f"blocks.{layers}.{suffix}"


def block_prefix(layer: int) -> str:
    """`block_prefix(3) -> "blocks.3."`: what every name of block 3 begins with (a recorder's scope)."""
    return f"blocks.{layer}."


def layer_of(name: str) -> int | None:
    """The block a full name belongs to (`"blocks.3.attn.pattern" -> 3`), in any family's scheme; None for a name
    outside the blocks (or no name at all: the caller refuses those in a sentence of its own)."""
    parts = name.split(".", 2)
    return int(parts[1]) if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit() else None


@dataclass(frozen=True)
class ParsedName:
    layer: int | None  # None for names outside the blocks
    suffix: str  # the stage, e.g. "attn.pattern", or the whole name for global ones


def parse_name(name: str, family: str = "gpt2") -> ParsedName:
    """Split a full name into its layer and stage; raise KeyError for names outside the family's scheme."""
    t = names_for(family)
    if name.startswith("blocks."):
        parts = name.split(".", 2)
        if len(parts) != 3 or not parts[1].isdigit() or (
                parts[2] not in t.block_activations and parts[2] not in t.block_weights):
            raise KeyError(f"unknown name {name!r}")
        return ParsedName(int(parts[1]), parts[2])
    if name in t.global_activations or name in t.global_weights:
        return ParsedName(None, name)
    raise KeyError(f"unknown name {name!r}")


def activation_names(n_layer: int, family: str = "gpt2", dense_layers: tuple[int, ...] = ()) -> list[str]:
    """All activation names of a model with `n_layer` blocks, in computation order; in a mixture of experts,
    the blocks `dense_layers` have a dense MLP's stages and the others the experts'."""
    t = names_for(family)
    out = list(t.globals_before_blocks)
    for i in range(n_layer):
        out += [f"blocks.{i}.{s}" for s in t.block_stages(i not in dense_layers)]
    out += [n for n in t.global_activations if n not in t.globals_before_blocks]
    return out


def weight_names(n_layer: int, family: str = "gpt2") -> list[str]:
    """All weight names of a model with `n_layer` blocks (for the Llama family, biases only where
    the model has them: see the model's `weight_names`)."""
    t = names_for(family)
    after = ("ln_final.w", "ln_final.b", "unembed.W_U")
    out = [n for n in t.global_weights if n not in after]
    for i in range(n_layer):
        out += [f"blocks.{i}.{s}" for s in t.block_weights]
    out += [n for n in after if n in t.global_weights]
    return out


def is_weight(suffix: str, family: str = "gpt2") -> bool:
    """Whether a stage (`attn.W_Q`) or a global name (`embed.W_E`) is a weight of the family."""
    t = names_for(family)
    return suffix in t.block_weights or suffix in t.global_weights


def describe(name: str, family: str = "gpt2") -> tuple[tuple[str, ...], str]:
    """(dims, description) of any activation or weight name."""
    t = names_for(family)
    p = parse_name(name, family)
    if p.layer is None:
        return t.global_activations.get(name) or t.global_weights[name]
    return t.block_activations.get(p.suffix) or t.block_weights[p.suffix]
