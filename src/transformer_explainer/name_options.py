"""What each option of a family's declaration adds to or changes in the Llama family's names: QK-norm (per head,
or over the whole projection), the biases a checkpoint may have, Gemma 3's sandwich and 1 + weight norms, scaled
embedding, local layers, attention scale and GeGLU, and a mixture of experts' router and experts.
`names.name_table` composes them into a family's table; nothing here is a table of its own.

And what each mechanism of the lens (`bridge/`: our code explaining a transformers module) answers, declared once
(`LensNames`, `LENS_NAMES`): `names.GENERIC_BLOCK_ACTIVATIONS` is composed from these, and each lens derives the
stages its declaration names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Entry = tuple[tuple[str, ...], str]  # (dims, what it is)

# Tensors with a G (key/value head) dim are sliced by query head, as the attention reads them: asking
# for head h gives key/value head h // (H / G), the one query head h shares with its group.
KV_SLICE = "; asking for head h gives key/value head h // (H / G), the one query head h reads"
# attention's z where the output projection is the model's own (the lens's families, the generic table's)
Z_BEFORE_PROJECTION = "pattern @ V: each head's weighted sum of values, before the output projection"


# QK-norm: an RMSNorm over each head's query and key (Qwen3, Gemma 3), before the rotation
QK_NORM_ACTIVATIONS: dict[str, Entry] = {
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
# OLMoE's QK-norm is one RMSNorm over the whole query projection (all heads side by side), one over the keys'
QK_NORM_OVER_PROJECTION_ACTIVATIONS: dict[str, Entry] = {
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
QK_NORMED_QKV: dict[str, Entry] = {  # the queries and keys around the norm
    "attn.q": (("H", "T", "Dh"), "queries, ln1.out @ W_Q, split into heads, before their norm and the rotation"),
    "attn.k": (("G", "T", "Dh"), "keys of the new positions before their norm and the rotation, one set per "
                                 "key/value head" + KV_SLICE),
    "attn.rot_q": (("H", "T", "Dh"), "the normed queries rotated by their position's angles (RoPE)"),
    "attn.rot_k": (("G", "S", "Dh"), "the normed keys rotated by their position's angles (RoPE): what the cache "
                                     "keeps" + KV_SLICE),
}
QK_NORM_WEIGHTS: dict[str, Entry] = {
    "attn.q_norm.w": (("Dh",), "QK-norm's scale of the queries, the same for every head"),
    "attn.k_norm.w": (("Dh",), "QK-norm's scale of the keys, the same for every head"),
}
QK_NORM_OVER_PROJECTION_WEIGHTS: dict[str, Entry] = {
    "attn.q_norm.w": (("H*Dh",), "QK-norm's scale of the queries, one per value of the whole projection"),
    "attn.k_norm.w": (("G*Dh",), "QK-norm's scale of the keys, one per value of the whole projection"),
}

# the biases a family's checkpoints may have (`Family.biases`): each with the option that adds it
BIASES: dict[str, dict[str, Entry]] = {
    "qkv": {"attn.b_Q": (("H", "Dh"), "query bias per head"),
            "attn.b_K": (("G", "Dh"), "key bias per key/value head"),
            "attn.b_V": (("G", "Dh"), "value bias per key/value head")},
    "o": {"attn.b_O": (("D",), "output projection bias")},
    "mlp": {"mlp.b_gate": (("M",), "MLP gate bias"), "mlp.b_in": (("M",), "MLP up bias"),
            "mlp.b_out": (("D",), "MLP down bias")},
}
BIAS_AFTER = {"attn.b_Q": "attn.W_V", "attn.b_O": "attn.W_O", "mlp.b_gate": "mlp.W_gate", "mlp.b_in": "mlp.W_in",
              "mlp.b_out": "mlp.W_out"}  # where each group's first bias goes (the next ones follow it)
ATTN_BIASES = ("attn.b_Q", "attn.b_K", "attn.b_V", "attn.b_O")
MLP_BIASES = ("mlp.b_gate", "mlp.b_in", "mlp.b_out")
DENSE_MLP_WEIGHTS = ("mlp.W_gate", "mlp.W_in", "mlp.W_out")


# Gemma 3: norms that scale by 1 + weight, a norm after attention and after the MLP (sandwich), the scaled
# embedding, local layers with their own rotation, scores scaled by query_pre_attn_scalar, GeGLU
def _rms_stages(prefix: str, what: str) -> dict[str, Entry]:
    return {
        f"{prefix}.rms": (("T",), f"root mean square of each position's vector, {what}"),
        f"{prefix}.normalized": (("T", "D"), "x / rms"),
        f"{prefix}.out": (("T", "D"), "normalized * (1 + weight)"),
    }


SANDWICH_AFTER_ATTENTION: dict[str, Entry] = {
    "attn.out": (("T", "D"), "concat @ W_O: attention's output, before its norm (ln1_post)"),
    **_rms_stages("ln1_post", "the norm after attention"),
}
SANDWICH_AFTER_MLP: dict[str, Entry] = {
    "mlp.out": (("T", "D"), "mlp.post @ W_out: the MLP's output, before its norm (ln2_post)"),
    **_rms_stages("ln2_post", "the norm after the MLP"),
}
SANDWICH_OUTPUTS: dict[str, Entry] = {
    "attn_out": (("T", "D"), "ln1_post.out: what attention adds to the residual stream"),
    "mlp_out": (("T", "D"), "ln2_post.out: what the MLP adds to the residual stream"),
}
OFFSET_NORM_OUTPUTS: dict[str, Entry] = {
    "ln1.out": (("T", "D"), "normalized * (1 + weight): the attention input"),
    "ln2.out": (("T", "D"), "normalized * (1 + weight): the MLP input"),
}
OFFSET_QK_NORM_OUTPUTS: dict[str, Entry] = {
    "attn.q_norm.out": (("H", "T", "Dh"), "q / rms * (1 + weight): each head's query brought to a fixed size, "
                                          "before the rotation"),
    "attn.k_norm.out": (("G", "T", "Dh"), "k / rms * (1 + weight): each key brought to a fixed size, before the "
                                          "rotation" + KV_SLICE),
}
OFFSET_NORM_WEIGHTS: dict[str, Entry] = {
    "ln1.w": (("D",), "first RMSNorm: its effective scale, 1 + weight (the checkpoint stores the weight)"),
    "ln2.w": (("D",), "the norm before the MLP: its effective scale, 1 + weight"),
    "attn.q_norm.w": (("Dh",), "QK-norm's effective scale of the queries, 1 + weight, the same for every head"),
    "attn.k_norm.w": (("Dh",), "QK-norm's effective scale of the keys, 1 + weight, the same for every head"),
}
SCALED_BY_QUERY_PRE_ATTN_SCALAR: Entry = (("H", "T", "S"), "scores / sqrt(query_pre_attn_scalar)")
MASKED_IN_LOCAL_LAYERS: Entry = (("H", "T", "S"), "scaled scores with -inf where the key is after the query, and "
                                                  "in a local layer where it is sliding_window or more positions "
                                                  "before it")
GEGLU_ACT: Entry = (("T", "M"), "GELU(gate), tanh approximation: GeGLU's gate")
LOCAL_ANGLES: dict[str, Entry] = {
    "rope.local_angles": (("T", "R"), "the same for the local (sliding-window) layers, whose rotary base is their "
                                      "own (rope_local_base_freq)"),
}
GLOBAL_LAYERS_ANGLES: Entry = (("T", "R"), "rotation angle of each position for each pair of a head's dimensions, "
                                           "in the global layers: position * frequency (base rope_theta)")
SCALED_EMBEDDING: dict[str, Entry] = {
    "embed.scaled": (("T", "D"), "embed.token * sqrt(d_model), rounded to the model's dtype: the input of block 0"),
}
TOKEN_BEFORE_SCALING: Entry = (("T", "D"), "row of the token embedding matrix W_E for each token, before the scaling")
OFFSET_FINAL_NORM_OUT: Entry = (("T", "D"), "normalized * (1 + weight): the unembedding input")
OFFSET_FINAL_NORM_WEIGHT: Entry = (("D",), "final RMSNorm: its effective scale, 1 + weight")


# mixtures of experts (Mixtral, Qwen3-MoE, OLMoE): the router and the experts in place of the dense MLP
ROUTED_SUM = "the sum over the chosen experts of expert_weights * expert_out"  # every mixture's
MOE_ACTIVATIONS: dict[str, Entry] = {
    "mlp.router_logits": (("T", "E"), "ln2.out @ W_router: the router's score of each expert for each token"),
    "mlp.router_probs": (("T", "E"), "softmax over all experts of the router logits, in float32: each token's "
                                     "probability of each expert"),
    "mlp.expert_indices": (("T", "K"), "the top_k experts each token is sent to, the most probable first"),
    "mlp.expert_weights": (("T", "K"), "what each chosen expert's output is multiplied by: its probability, "
                                       "renormalised over the chosen experts to sum to 1 where the model does so "
                                       "(norm_topk_prob; Mixtral always)"),
    "mlp.expert_out": (("T", "K", "D"), "each chosen expert's output before its weight: down(SiLU(gate(x)) * up(x)) "
                                        "with that expert's matrices, x = ln2.out"),
    "mlp.out": (("T", "D"), ROUTED_SUM),
}
MOE_STAGES = tuple(MOE_ACTIVATIONS)
DENSE_MLP_STAGES = ("mlp.gate", "mlp.up", "mlp.act", "mlp.post")
MOE_WEIGHTS: dict[str, Entry] = {
    "mlp.W_router": (("D", "E"), "the router: ln2.out @ W_router gives each expert's score (router_logits)"),
    "mlp.experts.W_gate": (("E", "D", "M"), "each expert's gate projection (M: an expert's width)"),
    "mlp.experts.W_in": (("E", "D", "M"), "each expert's up projection (the linear branch)"),
    "mlp.experts.W_out": (("E", "M", "D"), "each expert's down projection back to d_model"),
}
MOE_MLP_OUT: Entry = (("T", "D"), "mlp.out: what the mixture of experts adds to the residual stream")
# a mixture some of whose blocks have a dense MLP (Qwen3-MoE): the dense stages and weights say so
DENSE_BLOCKS_STAGES: dict[str, Entry] = {
    "mlp.gate": (("T", "M"), "blocks without experts: ln2.out @ W_gate, the gate before its activation"),
    "mlp.up": (("T", "M"), "blocks without experts: ln2.out @ W_in, the linear branch"),
    "mlp.act": (("T", "M"), "blocks without experts: SiLU(gate) = gate * sigmoid(gate)"),
    "mlp.post": (("T", "M"), "blocks without experts: act * up, the gated hidden layer"),
    "mlp_out": (("T", "D"), "what the MLP adds to the residual stream: mlp.out in a block with experts, "
                            "mlp.post @ W_out in one without"),
}
DENSE_BLOCKS_WEIGHTS: dict[str, Entry] = {
    "mlp.W_gate": (("D", "M"), "blocks without experts: the MLP's gate projection"),
    "mlp.W_in": (("D", "M"), "blocks without experts: the MLP's up projection"),
    "mlp.W_out": (("M", "D"), "blocks without experts: the MLP's down projection"),
}


# Gated DeltaNet (Qwen3.5, Qwen3-Next; models/gated_deltanet.py): a linear-attention layer's stages, for a family whose
# blocks have one. H: its value heads (the heads of the states and the output), G: its query/key heads (value head h
# reads query/key head h // (H / G)), Dk and Dv a key's and a value's width. The state is recorded only where a
# recorder asks for it by name: it is H * T * Dk * Dv values.
KEY_HEAD_SLICE = "; asking for head h gives query/key head h // (H / G), the one value head h reads"
GATED_DELTANET_ACTIVATIONS: dict[str, Entry] = {
    "linear_attn.q": (("G", "T", "Dk"), "queries after the short convolution and SiLU, scaled to length 1 / sqrt(Dk)"
                                        + KEY_HEAD_SLICE),
    "linear_attn.k": (("G", "T", "Dk"), "keys after the short convolution and SiLU, of length 1" + KEY_HEAD_SLICE),
    "linear_attn.v": (("H", "T", "Dv"), "values after the short convolution and SiLU"),
    "linear_attn.beta": (("H", "T"), "write strength, sigmoid(b) in (0, 1): how much of its error a token writes into "
                                     "the state (1: its value replaces what the state held at its key)"),
    "linear_attn.decay": (("H", "T"), "g = -exp(A_log) * softplus(a + dt_bias) < 0: before the token writes, the state "
                                      "is multiplied by exp(g), forgetting a little of everything"),
    "linear_attn.state": (("H", "T", "Dk", "Dv"), "the state after each token, one Dk x Dv matrix per head: "
                                                  "S_t = S' + beta k (v - S'^T k)^T with S' = exp(g) S_{t-1}"),
    "linear_attn.o": (("H", "T", "Dv"), "the read S_t^T q: what the state holds in the query's direction, before the "
                                        "norm and the gate"),
    "linear_attn.gate": (("H", "T", "Dv"), "SiLU(z), z the output gate's projection: what each normed read is "
                                           "multiplied by"),
    "linear_attn.out": (("T", "D"), "RMSNorm(o) * weight * gate, heads side by side, @ W_out: what the layer adds to "
                                    "the residual stream"),
}


# Multi-head latent attention (DeepSeek-V3; models/latent_attention.py): an MLA layer's stages, under the scope a block
# gives attention. Keys and values are per query head (H): each head's are up-projected from the one latent. Rq and
# Rkv: the query's and the key-value latent's widths; Dn + Dr: a head's query/key width, Dn without position and Dr
# the rotary part; Dv a value's width. q_latent exists only where the model has a query latent (q_lora_rank set).
MLA_ACTIVATIONS: dict[str, Entry] = {
    "attn.q_latent": (("T", "Rq"), "RMSNorm(x @ W_DQ): the query's low-rank latent, from which every head's query is "
                                   "up-projected (not cached)"),
    "attn.kv_latent": (("S", "Rkv"), "RMSNorm(x @ W_DKV): the key-value latent, one vector per token for all heads: "
                                     "what the cache keeps, beside k_rope"),
    "attn.k_rope": (("S", "Dr"), "RoPE(x @ W_KR): the rotary part of the key, one per token shared by every head, "
                                 "cached beside the latent"),
    "attn.q": (("H", "T", "Dn+Dr"), "each head's query as attention uses it: [q_nope, RoPE(q_rope)], up-projected "
                                    "from q_latent"),
    "attn.k": (("H", "S", "Dn+Dr"), "each head's key as attention uses it: [kv_latent @ W_UK of the head, k_rope]"),
    "attn.v": (("H", "S", "Dv"), "each head's value, kv_latent @ W_UV of the head"),
    "attn.scores": (("H", "T", "S"), "q @ k^T = q_nope . k_nope (what the tokens are) + q_rope . k_rope (where they "
                                     "are), before the scale"),
    "attn.pattern": (("H", "T", "S"), "softmax over keys of scores * scale with -inf after the query; rows sum to 1"),
    "attn.z": (("H", "T", "Dv"), Z_BEFORE_PROJECTION),
}

# DeepSeek-V3's mixture of experts (models/deepseek_moe.py), under the scope a block gives its MLP. E routed experts in
# Ng groups, Kg of them chosen per token, K experts chosen from those; not G, which names key/value heads.
DEEPSEEK_MOE_ACTIVATIONS: dict[str, Entry] = {
    "mlp.router_logits": (("T", "E"), "x @ W_router in float32: the router's score of each routed expert"),
    "mlp.router_scores": (("T", "E"), "sigmoid(router_logits): each expert's affinity in (0, 1), on its own, not a "
                                      "softmax over the experts"),
    "mlp.group_scores": (("T", "Ng"), "the sum of each group's 2 highest router_scores + e_score_correction_bias: how "
                                      "the groups are ranked"),
    "mlp.chosen_groups": (("T", "Kg"), "the topk_group groups a token's experts may come from, the best first"),
    "mlp.expert_indices": (("T", "K"), "the top_k experts of the chosen groups by router_scores + "
                                       "e_score_correction_bias (the bias steers the choice only), the highest first"),
    "mlp.expert_weights": (("T", "K"), "each chosen expert's router_score (without the bias), divided by the chosen "
                                       "ones' sum where norm_topk_prob, times routed_scaling_factor"),
    "mlp.expert_out": (("T", "K", "D"), "each chosen expert's output before its weight: down(SiLU(gate(x)) * up(x))"),
    "mlp.routed_out": (("T", "D"), ROUTED_SUM),
    "mlp.shared_out": (("T", "D"), "the shared expert's output, down(SiLU(gate(x)) * up(x)), which every token gets"),
    "mlp.out": (("T", "D"), "routed_out + shared_out: what the mixture adds to the residual stream"),
}

# gpt-oss's attention with a learned sink logit per head (models/sink_attention.py), under the scope a block gives
# attention: the sink joins each query's softmax as one more key with no value, so a row of the pattern sums to less
# than 1. Local layers use a sliding window.
SINK_ATTENTION_ACTIVATIONS: dict[str, Entry] = {
    "attn.q": (("H", "T", "Dh"), "queries, x @ W_Q + b_Q, split into heads, before the rotation"),
    "attn.k": (("G", "T", "Dh"), "keys of the new positions, x @ W_K + b_K, before the rotation" + KV_SLICE),
    "attn.v": (("G", "S", "Dh"), "values, x @ W_V + b_V, one set per key/value head" + KV_SLICE),
    "attn.rot_q": (("H", "T", "Dh"), "the queries rotated by their position's angles (RoPE)"),
    "attn.rot_k": (("G", "S", "Dh"), "the keys rotated by their position's angles (RoPE)" + KV_SLICE),
    "attn.scores": (("H", "T", "S"), "rot_q @ rot_k^T, before the scale"),
    "attn.sink": (("H",), "each head's learned sink logit: one more entry in every query's softmax, a key with no "
                          "value"),
    "attn.pattern": (("H", "T", "S"), "exp(scores * scale) / (exp(sink) + the sum over the visible keys), 0 after the "
                                      "query and, in a sliding layer, sliding_window or more positions before it: "
                                      "each row sums to 1 - sink_weight"),
    "attn.sink_weight": (("H", "T"), "exp(sink) / the same denominator: the share of its attention a query gives to "
                                     "no key (1 - the row's sum of pattern)"),
    "attn.z": (("H", "T", "Dh"), Z_BEFORE_PROJECTION),
}

# gpt-oss's mixture (models/sink_attention.py), under the scope a block gives its MLP: the top_k router logits with a
# softmax over those alone, each expert a clamped SwiGLU with biases. The stages (T, K, M) are per (token, choice).
CLAMPED_MOE_ACTIVATIONS: dict[str, Entry] = {
    "mlp.router_logits": (("T", "E"), "x @ W_router + b_router: the router's score of each expert"),
    "mlp.expert_indices": (("T", "K"), "the top_k experts by router logit, the highest first"),
    "mlp.expert_weights": (("T", "K"), "softmax over the chosen experts' logits alone: they sum to 1"),
    "mlp.gate": (("T", "K", "M"), "the even columns of x @ W_gate_up + b of each chosen expert: the gate"),
    "mlp.up": (("T", "K", "M"), "the odd columns of x @ W_gate_up + b of each chosen expert: the linear branch"),
    "mlp.gate_clamped": (("T", "K", "M"), "min(gate, swiglu_limit): the gate clamped above only"),
    "mlp.up_clamped": (("T", "K", "M"), "up clamped to [-swiglu_limit, swiglu_limit]"),
    "mlp.act": (("T", "K", "M"), "gate_clamped * sigmoid(swiglu_alpha * gate_clamped), swiglu_alpha = 1.702: a "
                                 "sigmoid approximation of GELU"),
    "mlp.post": (("T", "K", "M"), "(up_clamped + 1) * act: the gated hidden layer"),
    "mlp.expert_out": (("T", "K", "D"), "each chosen expert's output before its weight: post @ W_down + b_down"),
    "mlp.out": (("T", "D"), ROUTED_SUM),
}

# OLMo 2 / 3's block (models/post_norm_block.py): no norm before a sublayer, one after each (ln1_post, ln2_post, the
# names Gemma 3's sandwich uses), so the sublayers read the residual stream as it is; QK-norm over the whole
# projection (QK_NORM_OVER_PROJECTION_ACTIVATIONS's attn.q_norm.* and attn.k_norm.*).
# what each post-norm write is (the own block's attn_out and mlp_out; the lens's ln1_post.out and ln2_post.out, which it
# derives from the module outputs that the bridge names attn_out and mlp_out)
POST_NORM_ATTN_WRITE = "what attention adds to the residual stream, of length at most sqrt(D) * max|weight|"
POST_NORM_MLP_WRITE = "what the MLP adds to the residual stream, of length at most sqrt(D) * max|weight|"
POST_NORM_BLOCK_ACTIVATIONS: dict[str, Entry] = {
    "attn.q": (("H", "T", "Dh"), "queries, resid_pre @ W_Q (no norm before attention), split into heads, before "
                                 "QK-norm and the rotation"),
    "attn.k": (("G", "T", "Dh"), "keys, resid_pre @ W_K, before QK-norm and the rotation" + KV_SLICE),
    **QK_NORM_OVER_PROJECTION_ACTIVATIONS,
    "attn.v": (("G", "S", "Dh"), "values, resid_pre @ W_V, one set per key/value head" + KV_SLICE),
    "attn.rot_q": (("H", "T", "Dh"), "the normed queries rotated by their position's angles (RoPE)"),
    "attn.rot_k": (("G", "S", "Dh"), "the normed keys rotated by their position's angles (RoPE)" + KV_SLICE),
    "attn.scores": (("H", "T", "S"), "rot_q @ rot_k^T, before the scale"),
    "attn.pattern": (("H", "T", "S"), "softmax over keys of scores / sqrt(Dh), 0 after the query and, in a sliding "
                                      "layer, sliding_window or more positions before it; rows sum to 1"),
    "attn.z": (("H", "T", "Dh"), Z_BEFORE_PROJECTION),
    "attn.out": (("T", "D"), "concat @ W_O: attention's output, before its norm (ln1_post)"),
    "ln1_post.rms": (("T",), "root mean square of attn.out at each position: what the norm after attention divides "
                             "it by"),
    "ln1_post.normalized": (("T", "D"), "attn.out / rms: length at most sqrt(D), whatever attention's scale"),
    "ln1_post.out": (("T", "D"), "normalized * weight"),
    "attn_out": (("T", "D"), f"ln1_post.out: {POST_NORM_ATTN_WRITE}"),
    "resid_mid": (("T", "D"), "resid_pre + attn_out: the MLP's input, as it is (no norm before the MLP)"),
    "mlp.gate": (("T", "M"), "resid_mid @ W_gate, the gate before its activation"),
    "mlp.up": (("T", "M"), "resid_mid @ W_in, the linear branch"),
    "mlp.act": (("T", "M"), "SiLU(gate) = gate * sigmoid(gate)"),
    "mlp.post": (("T", "M"), "act * up, the gated hidden layer"),
    "mlp.out": (("T", "D"), "mlp.post @ W_out: the MLP's output, before its norm (ln2_post)"),
    "ln2_post.rms": (("T",), "root mean square of mlp.out at each position: what the norm after the MLP divides it "
                             "by"),
    "ln2_post.normalized": (("T", "D"), "mlp.out / rms"),
    "ln2_post.out": (("T", "D"), "normalized * weight"),
    "mlp_out": (("T", "D"), f"ln2_post.out: {POST_NORM_MLP_WRITE}"),
    "resid_post": (("T", "D"), "resid_mid + mlp_out: the block's output"),
}

# Gemma 4's per-layer embeddings (models/per_layer_embeddings.py): L layers, P the per-layer width
# (hidden_size_per_layer_input). The embedding's three (under embed.), then what one block adds from its slice, under
# the block's scope, after the MLP's write and before the block's layer_scalar.
PER_LAYER_EMBEDDING_ACTIVATIONS: dict[str, Entry] = {
    "embed.per_layer": (("T", "L", "P"), "E_per_layer[token] * sqrt(P): the token's own per-layer values, L slices of "
                                         "P"),
    "embed.per_layer_projected": (("T", "L", "P"), "rmsnorm(embed.scaled @ W_per_layer / sqrt(D)) over each slice of "
                                                   "P: the per-layer values the main embedding gives"),
    "embed.per_layer_inputs": (("T", "L", "P"), "(per_layer_projected + per_layer) / sqrt(2): what each layer reads, "
                                                "slice l for layer l"),
}
PER_LAYER_GATE_ACTIVATIONS: dict[str, Entry] = {
    "per_layer.input": (("T", "P"), "this layer's slice of embed.per_layer_inputs"),
    "per_layer.gate": (("T", "P"), "x @ W_gate: the residual stream after the MLP's write, narrowed to P"),
    "per_layer.act": (("T", "P"), "GELU (tanh approximation) of gate"),
    "per_layer.post": (("T", "P"), "act * input: the per-layer values, gated by what the stream holds"),
    "per_layer.out": (("T", "D"), "post @ W_proj: back to the residual stream's width, before its norm"),
    "per_layer_out": (("T", "D"), "rmsnorm(per_layer.out) * weight: what the per-layer input adds to the residual "
                                  "stream"),
}


# -- the lens (bridge/): what each mechanism our code explains in a transformers model answers ------------------------

@dataclass(frozen=True)
class LensNames:
    """The names one mechanism of the lens answers (`bridge/mechanisms.py`), declared once: `entries`, its stages in
    computation order, each (dims, what it is), and `after`, where they go among the stages the bridge records (a
    recorded stage -> the mechanism's stages that follow it). `models` says whose mechanism it is, for a description
    that another mechanism's stage of the same name shares."""

    models: str
    entries: Mapping[str, Entry]
    after: Mapping[str, tuple[str, ...]]

    def __post_init__(self) -> None:
        placed = [s for stages in self.after.values() for s in stages]
        if sorted(placed) != sorted(self.entries):
            raise ValueError(f"{self.models}: `after` places {placed}, the entries are {list(self.entries)}")

    @property
    def stages(self) -> tuple[str, ...]:
        """What the lens derives, in computation order."""
        return tuple(self.entries)


def _lens(models: str, entries: Mapping[str, Entry], after: str) -> LensNames:
    """A mechanism whose stages all follow one recorded stage."""
    return LensNames(models, dict(entries), {after: tuple(entries)})


# Gated DeltaNet read by our module from the layer's input (bridge/mechanisms.py): GATED_DELTANET_ACTIVATIONS without
# the state per token (H * T * Dk * Dv values), with the attention matrix the recurrence implies
DELTANET_LENS = _lens("Qwen3.5, Qwen3-Next", {
    **{f"linear_attn.{s}": GATED_DELTANET_ACTIVATIONS[f"linear_attn.{s}"] for s in ("q", "k", "v", "beta", "decay")},
    "linear_attn.implied_pattern": (("H", "T", "S"), "the attention matrix the recurrence implies: o_t = sum_s "
                                    "w[t, s] v_s exactly; weights may be negative and rows need not sum to 1 (not a "
                                    "softmax): models.gated_deltanet.implied_attention"),
    **{f"linear_attn.{s}": GATED_DELTANET_ACTIVATIONS[f"linear_attn.{s}"] for s in ("o", "gate")},
}, after="linear_attn.in")
# multi-head latent attention's latents, from the layer's input through its own norm (bridge/latent_lens.py); q_latent
# only where the model has a query latent
LATENT_ATTENTION_LENS = _lens("DeepSeek-V3", {s: MLA_ACTIVATIONS[s] for s in (
    "attn.q_latent", "attn.kv_latent", "attn.k_rope")}, after="resid_pre")
# the norm after each sublayer (bridge/post_norm_lens.py): our norms on the module outputs the bridge records
POST_NORM_LENS = LensNames("OLMo 2, 3", {
    "ln1_post.out": (("T", "D"), f"the norm after attention applied to attn_out: {POST_NORM_ATTN_WRITE}"),
    "ln2_post.out": (("T", "D"), f"the norm after the MLP applied to mlp_out: {POST_NORM_MLP_WRITE}"),
}, {"attn_out": ("ln1_post.out",), "mlp_out": ("ln2_post.out",)})
# the mixtures of experts (bridge/moe_lens.py), from resid_mid through the layer's post_attention_layernorm (x)
DEEPSEEK_MOE_LENS = _lens("DeepSeek-V3", DEEPSEEK_MOE_ACTIVATIONS, after="resid_mid")
CLAMPED_MOE_LENS = _lens("gpt-oss", CLAMPED_MOE_ACTIVATIONS, after="resid_mid")
# Gemma 4's per-layer write (bridge/per_layer_lens.py), from resid_mid, mlp_out and the layer's slice of
# embed.per_layer_inputs: the stream the gate reads, then what it writes
PER_LAYER_GATE_LENS = _lens("Gemma 4", {
    "per_layer.resid": (("T", "D"), "the residual stream after the MLP's write: what the per-layer gate reads, "
                        "resid_mid + the layer's norm of mlp_out"),
    **PER_LAYER_GATE_ACTIVATIONS,
}, after="mlp_out")
# and its per-layer embeddings, global (bridge/per_layer_lens.py), from the token ids and the recorded embed.token: the
# scaled embedding that PER_LAYER_EMBEDDING_ACTIVATIONS calls embed.scaled
PER_LAYER_INPUTS_LENS = _lens("Gemma 4", {
    name: (dims, text.replace("embed.scaled", "embed.token"))
    for name, (dims, text) in PER_LAYER_EMBEDDING_ACTIVATIONS.items()}, after="embed.token")

# Every mechanism of the lens, a block's and the model's (global): `names.GENERIC_BLOCK_ACTIVATIONS` and
# `GENERIC_GLOBAL_ACTIVATIONS` place their stages in this order where two follow the same recorded stage
LENS_NAMES: tuple[LensNames, ...] = (LATENT_ATTENTION_LENS, DELTANET_LENS, POST_NORM_LENS, DEEPSEEK_MOE_LENS,
                                     CLAMPED_MOE_LENS, PER_LAYER_GATE_LENS)
GLOBAL_LENS_NAMES: tuple[LensNames, ...] = (PER_LAYER_INPUTS_LENS,)
