"""Mixtral (`MixtralForCausalLM`, e.g. mistralai/Mixtral-8x7B-v0.1): the Llama family's attention (RMSNorm,
rotary positions, grouped-query attention, no biases) with a mixture of experts in place of the MLP. A
router scores the num_local_experts experts for each token (softmax over all of them, in float32), the
token goes to the num_experts_per_tok most probable (2 of 8), and their weights are those probabilities
renormalised to sum to 1. Each expert is a gated SiLU MLP; the checkpoint calls its matrices w1 (gate),
w3 (up) and w2 (down) under `block_sparse_moe`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import hf as h
from .declaration import Architecture, Family
from .llama import LLAMA_CONFIG_KEYS, rope, rope_to_hf, shape, shape_to_hf

MOE = "model.layers.{i}.block_sparse_moe."
MIXTRAL_KEYS: tuple[tuple[str, str], ...] = (
    ("embed.", "model.embed_tokens."),
    ("blocks.{i}.ln1.", "model.layers.{i}.input_layernorm."),
    ("blocks.{i}.attn.", "model.layers.{i}.self_attn."),
    ("blocks.{i}.ln2.", "model.layers.{i}.post_attention_layernorm."),
    ("blocks.{i}.mlp.router.", MOE + "gate."),
    ("blocks.{i}.mlp.experts.{e}.gate_proj.", MOE + "experts.{e}.w1."),
    ("blocks.{i}.mlp.experts.{e}.up_proj.", MOE + "experts.{e}.w3."),
    ("blocks.{i}.mlp.experts.{e}.down_proj.", MOE + "experts.{e}.w2."),
    ("ln_final.", "model.norm."),
    ("unembed.", "lm_head."),
)
MOE_CONFIG_KEYS = {"top_k": "num_experts_per_tok", "d_expert": "intermediate_size"}


def read_hf(hf: Mapping[str, Any]) -> dict[str, Any]:
    h.architecture(hf, "MixtralForCausalLM")
    fields = shape(hf, eps_default=1e-5)
    # a sliding window makes every layer local (transformers' Mixtral masks every layer by it)
    window = h.whole(hf, "sliding_window", None)
    return dict(
        **fields,
        **rope(hf),
        activation=h.activation(hf, "hidden_act", ("silu",)),
        model_type="mixtral",
        tie_word_embeddings=h.flag(hf, "tie_word_embeddings", False),
        qkv_bias=False,
        out_bias=False,
        mlp_bias=False,
        layer_types=None if window is None else (h.SLIDING,) * fields["n_layer"],
        sliding_window=window,
        n_experts=h.whole(hf, "num_local_experts", 8),
        top_k=h.whole(hf, "num_experts_per_tok", 2),
        norm_topk_prob=True,
    )


def write_hf(c: Any) -> dict[str, Any]:
    return {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        **shape_to_hf(c),
        "rope_parameters": rope_to_hf(c),
        "sliding_window": c.sliding_window if c.layer_types is not None else None,
        "num_local_experts": c.n_experts,
        "num_experts_per_tok": c.top_k,
        "output_router_logits": False,
        "router_jitter_noise": 0.0,
    }


def check(c: Any) -> None:
    if (c.activation != "silu" or c.qkv_bias or c.out_bias or c.mlp_bias or c.query_pre_attn_scalar is not None
            or c.rope_local_theta is not None):
        raise ValueError("Mixtral has gated SiLU experts, no biases and scores scaled by 1 / sqrt(head_dim)")
    if not c.norm_topk_prob or c.d_expert != c.d_mlp or c.dense_layers:
        raise ValueError("Mixtral renormalises the chosen experts' weights, and every block has experts of width "
                         "intermediate_size")
    if c.layer_types is not None and set(c.layer_types) != {h.SLIDING}:
        raise ValueError("Mixtral's sliding window applies to every layer")


MIXTRAL = Family(
    name="mixtral",
    label="Mixtral",
    architectures={"mixtral": "MixtralForCausalLM"},
    arch=Architecture(norm="rms", positions="rope", qkv="split", mlp="moe", softmax_in_float32=True,
                      expert_weights_in_float32=True),
    hf_keys=MIXTRAL_KEYS,
    read_hf=read_hf,
    write_hf=write_hf,
    check=check,
    config_keys={**LLAMA_CONFIG_KEYS, **MOE_CONFIG_KEYS, "n_experts": "num_local_experts"},
    base_prefix="model.",
)
