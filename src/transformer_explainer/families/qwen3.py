"""Qwen3 (`Qwen3ForCausalLM`, e.g. Qwen/Qwen3-0.6B): the Llama architecture plus an RMSNorm over each
head's query and key before the rotation (QK-norm), with a head width the config names (`head_dim`,
which need not be hidden_size / num_attention_heads)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import hf as h
from .declaration import Architecture, Family
from .llama import LLAMA_CONFIG_KEYS, LLAMA_KEYS, rope, rope_to_hf, shape, shape_to_hf


def read_hf(hf: Mapping[str, Any]) -> dict[str, Any]:
    h.architecture(hf, "Qwen3ForCausalLM")
    fields = shape(hf)
    n_layer = fields["n_layer"]
    # local layers only where use_sliding_window says so (transformers ignores the window otherwise):
    # those of `layer_types` marked sliding, by default the blocks from max_window_layers on
    window = h.whole(hf, "sliding_window", None) if h.flag(hf, "use_sliding_window", False) else None
    types = None
    if window is not None:
        if hf.get("layer_types") is not None:
            types = h.layer_types(hf, n_layer, None)
        else:
            first = h.whole(hf, "max_window_layers", n_layer)
            types = tuple(h.SLIDING if i >= first else h.FULL for i in range(n_layer))
        if h.SLIDING not in types:
            types, window = None, None
    bias = h.flag(hf, "attention_bias", False)
    return dict(
        **fields,
        **rope(hf),
        activation=h.activation(hf, "hidden_act", ("silu",)),
        model_type="qwen3",
        tie_word_embeddings=h.flag(hf, "tie_word_embeddings", False),
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=False,
        layer_types=types,
        sliding_window=window,
    )


def write_hf(c: Any) -> dict[str, Any]:
    local = c.layer_types is not None
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **shape_to_hf(c),
        "rope_parameters": rope_to_hf(c),
        "attention_bias": c.qkv_bias,
        "use_sliding_window": local,
        "sliding_window": c.sliding_window,
        **({"layer_types": list(c.layer_types)} if local else {}),
    }


def check(c: Any) -> None:
    if c.activation != "silu" or c.query_pre_attn_scalar is not None or c.mlp_bias or c.qkv_bias != c.out_bias:
        raise ValueError("Qwen3 has a gated SiLU MLP without biases, the same bias setting on q, k, v and o, "
                         "and scores scaled by 1 / sqrt(head_dim)")


QWEN3 = Family(
    name="qwen3",
    label="Qwen3",
    architectures={"qwen3": "Qwen3ForCausalLM"},
    arch=Architecture(norm="rms", positions="rope", qkv="split", mlp="gated", qk_norm=True, softmax_in_float32=True),
    hf_keys=LLAMA_KEYS,  # q_norm and k_norm sit inside self_attn, under the same names on both sides
    read_hf=read_hf,
    write_hf=write_hf,
    check=check,
    config_keys=LLAMA_CONFIG_KEYS,
    base_prefix="model.",
    biases={"qkv": "with attention_bias", "o": "with attention_bias"},
)
