"""Qwen3-MoE (`Qwen3MoeForCausalLM`, e.g. Qwen/Qwen3-30B-A3B): Qwen3's attention (QK-norm over each head,
a head width the config names) with a mixture of experts in place of the MLP. A router scores num_experts
experts for each token (softmax over all of them, in float32), the token goes to the num_experts_per_tok
most probable, and their weights are those probabilities, renormalised to sum to 1 when norm_topk_prob
says so. Each expert is a gated SiLU MLP of width moe_intermediate_size. Blocks listed in mlp_only_layers,
and with decoder_sparse_step above 1 those whose number is not a multiple of it, have a dense gated MLP
of width intermediate_size instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import hf as h
from .declaration import Architecture, Family
from .llama import LLAMA_CONFIG_KEYS, LLAMA_KEYS, rope, rope_to_hf, shape, shape_to_hf
from .mixtral import MOE_CONFIG_KEYS


def with_router(keys: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """Llama's key map with the router (the checkpoint's `mlp.gate`, our `mlp.router`) ahead of the MLP's
    entry, which maps the experts (`mlp.experts.N.gate_proj`: the same names on both sides)."""
    router = ("blocks.{i}.mlp.router.", "model.layers.{i}.mlp.gate.")
    out: list[tuple[str, str]] = []
    for ours, theirs in keys:
        if ours == "blocks.{i}.mlp.":
            out.append(router)
        out.append((ours, theirs))
    return tuple(out)


def dense_layers(hf: Mapping[str, Any], n_layer: int) -> tuple[int, ...]:
    """The blocks transformers gives a dense MLP: those in mlp_only_layers, and those whose number (from 1)
    is not a multiple of decoder_sparse_step."""
    only = hf.get("mlp_only_layers") or []
    if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise ValueError(f"mlp_only_layers must be a list of block indices, got {only!r}")
    if any(not 0 <= i < n_layer for i in only):
        raise ValueError(f"mlp_only_layers names a block outside 0..{n_layer - 1}: {only!r}")
    step = h.whole(hf, "decoder_sparse_step", 1)
    if step < 1:
        raise ValueError(f"decoder_sparse_step must be at least 1, got {step}")
    return tuple(i for i in range(n_layer) if i in only or (i + 1) % step)


def read_hf(hf: Mapping[str, Any]) -> dict[str, Any]:
    h.architecture(hf, "Qwen3MoeForCausalLM")
    fields = shape(hf)
    # transformers writes num_experts as num_local_experts (an attribute alias); hub configs say num_experts
    experts_key = "num_experts" if hf.get("num_experts") is not None else "num_local_experts"
    # a sliding window (with use_sliding_window) makes every layer local, as transformers' Qwen3-MoE masks them
    window = h.whole(hf, "sliding_window", None) if h.flag(hf, "use_sliding_window", False) else None
    bias = h.flag(hf, "attention_bias", False)
    return dict(
        **fields,
        **rope(hf),
        activation=h.activation(hf, "hidden_act", ("silu",)),
        model_type="qwen3_moe",
        tie_word_embeddings=h.flag(hf, "tie_word_embeddings", False),
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=False,
        layer_types=None if window is None else (h.SLIDING,) * fields["n_layer"],
        sliding_window=window,
        n_experts=h.whole(hf, experts_key, 128),
        top_k=h.whole(hf, "num_experts_per_tok", 8),
        d_expert=h.whole(hf, "moe_intermediate_size", 768),
        norm_topk_prob=h.flag(hf, "norm_topk_prob", False),
        dense_layers=dense_layers(hf, fields["n_layer"]),
    )


def write_hf(c: Any) -> dict[str, Any]:
    local = c.layer_types is not None
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        **shape_to_hf(c),
        "rope_parameters": rope_to_hf(c),
        "attention_bias": c.qkv_bias,
        "use_sliding_window": local,
        "sliding_window": c.sliding_window if local else None,
        "num_experts": c.n_experts,
        "num_experts_per_tok": c.top_k,
        "moe_intermediate_size": c.d_expert,
        "norm_topk_prob": c.norm_topk_prob,
        "decoder_sparse_step": 1,
        "mlp_only_layers": list(c.dense_layers),
        "output_router_logits": False,
    }


def check(c: Any) -> None:
    if (c.activation != "silu" or c.query_pre_attn_scalar is not None or c.mlp_bias or c.qkv_bias != c.out_bias
            or c.rope_local_theta is not None):
        raise ValueError("Qwen3-MoE has gated SiLU experts without biases, the same bias setting on q, k, v and o, "
                         "and scores scaled by 1 / sqrt(head_dim)")
    if c.layer_types is not None and set(c.layer_types) != {h.SLIDING}:
        raise ValueError("Qwen3-MoE's sliding window applies to every layer")


QWEN3_MOE = Family(
    name="qwen3_moe",
    label="Qwen3-MoE",
    architectures={"qwen3_moe": "Qwen3MoeForCausalLM"},
    arch=Architecture(norm="rms", positions="rope", qkv="split", mlp="moe", qk_norm=True, softmax_in_float32=True),
    hf_keys=with_router(LLAMA_KEYS),
    read_hf=read_hf,
    write_hf=write_hf,
    check=check,
    config_keys={**LLAMA_CONFIG_KEYS, **MOE_CONFIG_KEYS, "n_experts": "num_experts",
                 "d_expert": "moe_intermediate_size"},
    base_prefix="model.",
    biases={"qkv": "with attention_bias", "o": "with attention_bias"},
    dense_blocks=True,  # mlp_only_layers
)
