"""Gemma 3, text only (`Gemma3ForCausalLM`, model_type gemma3_text, e.g. google/gemma-3-270m): the token
embedding times sqrt(hidden_size); RMSNorm scaled by 1 + weight; four norms per block (before and after
attention, before and after the MLP: sandwich norms); QK-norm; a GeGLU MLP (the gate through tanh-GELU);
interleaved local layers (a sliding window) and global ones, each kind with its own rotary base; scores
scaled by 1 / sqrt(query_pre_attn_scalar)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import hf as h
from .declaration import Architecture, Family
from .llama import LLAMA_CONFIG_KEYS, shape, shape_to_hf

GEMMA3_KEYS: tuple[tuple[str, str], ...] = (
    ("embed.", "model.embed_tokens."),
    ("blocks.{i}.ln1.", "model.layers.{i}.input_layernorm."),
    ("blocks.{i}.attn.", "model.layers.{i}.self_attn."),
    ("blocks.{i}.ln1_post.", "model.layers.{i}.post_attention_layernorm."),  # Gemma's: after attention
    ("blocks.{i}.ln2.", "model.layers.{i}.pre_feedforward_layernorm."),
    ("blocks.{i}.mlp.", "model.layers.{i}.mlp."),
    ("blocks.{i}.ln2_post.", "model.layers.{i}.post_feedforward_layernorm."),
    ("ln_final.", "model.norm."),
    ("unembed.", "lm_head."),
)


def _rope(hf: Mapping[str, Any]) -> dict[str, Any]:
    """Global and local rotary bases: transformers 5 writes `rope_parameters` per kind of layer; hub
    configs have rope_theta, rope_local_base_freq and a rope_scaling for the global layers."""
    params = hf.get("rope_parameters") or {}
    if not isinstance(params, Mapping):
        raise ValueError("rope_parameters must be an object")
    per_kind = h.FULL in params or h.SLIDING in params
    full = params.get(h.FULL) if per_kind else params
    local = params.get(h.SLIDING) if per_kind else None
    theta, scaling = h.rope_settings(full or {}, hf, default_theta=1_000_000.0)
    local_theta, local_scaling = h.rope_settings(local or {}, {"rope_theta": h.real(hf, "rope_local_base_freq",
                                                                                     10_000.0)})
    if local_scaling is not None:
        raise ValueError("rope scaling on Gemma 3's local layers is not supported")
    return dict(rope_theta=theta, rope_scaling=scaling, rope_local_theta=local_theta)


def read_hf(hf: Mapping[str, Any]) -> dict[str, Any]:
    h.architecture(hf, "Gemma3ForCausalLM")
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if hf.get(key) is not None:
            raise ValueError(f"{key} is not supported (Gemma 3 has none)")
    if h.flag(hf, "use_bidirectional_attention", False):
        raise ValueError("use_bidirectional_attention is not supported: a causal LM attends to earlier tokens only")
    if h.flag(hf, "attention_bias", False):
        raise ValueError("attention_bias is not supported (Gemma 3 has none)")
    fields = {**shape(hf), "head_dim": h.whole(hf, "head_dim", 256)}
    types = h.layer_types(hf, fields["n_layer"], 6)
    window = h.whole(hf, "sliding_window", 4096) if h.SLIDING in types else None
    return dict(
        **fields,
        **_rope(hf),
        activation=h.activation(hf, "hidden_activation", ("gelu_pytorch_tanh",)),
        model_type="gemma3_text",
        tie_word_embeddings=h.flag(hf, "tie_word_embeddings", True),
        qkv_bias=False,
        out_bias=False,
        mlp_bias=False,
        layer_types=types,
        sliding_window=window,
        query_pre_attn_scalar=h.real(hf, "query_pre_attn_scalar", 256),
    )


def write_hf(c: Any) -> dict[str, Any]:
    full: dict[str, Any] = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling is not None:
        full = {**full, **c.rope_scaling.to_hf()}
    out = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", **shape_to_hf(c)}
    out.pop("hidden_act")
    return {
        **out,
        "hidden_activation": c.activation,
        "rope_parameters": {h.FULL: full, h.SLIDING: {"rope_type": "default", "rope_theta": c.rope_local_theta}},
        "layer_types": list(c.layer_types or (h.FULL,) * c.n_layer),
        "sliding_window": c.sliding_window or 4096,
        "query_pre_attn_scalar": c.query_pre_attn_scalar,
        "attention_bias": False,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
    }


def check(c: Any) -> None:
    if c.activation != "gelu_pytorch_tanh" or c.qkv_bias or c.out_bias or c.mlp_bias or c.rope_local_theta is None:
        raise ValueError("Gemma 3 has a tanh-GELU gated MLP, no biases and a rotary base for its local layers")


GEMMA3 = Family(
    name="gemma3",
    label="Gemma 3",
    architectures={"gemma3_text": "Gemma3ForCausalLM"},
    arch=Architecture(norm="rms", positions="rope", qkv="split", mlp="gated", norm_offset=True, qk_norm=True,
                      sandwich_norm=True, embed_scale=True, softmax_in_float32=True),
    hf_keys=GEMMA3_KEYS,
    read_hf=read_hf,
    write_hf=write_hf,
    check=check,
    config_keys={**LLAMA_CONFIG_KEYS, "rope_local_theta": "rope_local_base_freq"},
    base_prefix="model.",
    gated_activation="gelu_tanh",
    scores_scaled_by="query_pre_attn_scalar",
    local_layers=True,
)
