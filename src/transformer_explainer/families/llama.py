"""The Llama family: Llama, Qwen2 and Mistral, one architecture (RMSNorm, rotary positions, grouped-query
attention, a gated SiLU MLP). Qwen2 adds biases on q, k and v; Llama may have biases (attention_bias,
mlp_bias) and Llama 3.1's rope scaling; Mistral a sliding window."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import hf as h
from .declaration import Architecture, Family

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}

# our parameter names <- HF's for every model laid out as Llama is (`model.layers.N.self_attn.q_proj`, ...)
LLAMA_KEYS: tuple[tuple[str, str], ...] = (
    ("embed.", "model.embed_tokens."),
    ("blocks.{i}.ln1.", "model.layers.{i}.input_layernorm."),
    ("blocks.{i}.attn.", "model.layers.{i}.self_attn."),
    ("blocks.{i}.ln2.", "model.layers.{i}.post_attention_layernorm."),
    ("blocks.{i}.mlp.", "model.layers.{i}.mlp."),
    ("ln_final.", "model.norm."),
    ("unembed.", "lm_head."),
)
# config.json's names of our fields, for messages
LLAMA_CONFIG_KEYS = {"block_size": "max_position_embeddings", "n_layer": "num_hidden_layers",
                     "n_head": "num_attention_heads", "n_embd": "hidden_size", "d_mlp": "intermediate_size",
                     "n_kv_heads": "num_key_value_heads", "layer_norm_epsilon": "rms_norm_eps"}


def shape(hf: Mapping[str, Any], eps_default: float = 1e-6) -> dict[str, Any]:
    """The sizes every Llama-like config names the same way."""
    n_kv_heads = h.whole(hf, "num_key_value_heads", None)  # absent: one key/value head per query head
    return dict(
        vocab_size=h.whole(hf, "vocab_size"),
        block_size=h.whole(hf, "max_position_embeddings", 2048),
        n_layer=h.whole(hf, "num_hidden_layers"),
        n_head=h.whole(hf, "num_attention_heads"),
        n_embd=h.whole(hf, "hidden_size"),
        d_mlp=h.whole(hf, "intermediate_size"),
        layer_norm_epsilon=h.real(hf, "rms_norm_eps", eps_default),
        n_kv_heads=n_kv_heads if n_kv_heads is not None else h.whole(hf, "num_attention_heads"),
        head_dim=h.whole(hf, "head_dim", None) or None,
    )


def rope(hf: Mapping[str, Any]) -> dict[str, Any]:
    theta, scaling = h.rope_settings(hf.get("rope_parameters") or {}, hf)
    return dict(rope_theta=theta, rope_scaling=scaling)


def read_hf(hf: Mapping[str, Any]) -> dict[str, Any]:
    model_type = hf["model_type"]
    h.architecture(hf, ARCHITECTURES[model_type])
    act = h.activation(hf, "hidden_act", ("silu",))
    if h.whole(hf, "pretraining_tp", 1) != 1:
        raise ValueError("pretraining_tp above 1 is not supported")
    fields = {**shape(hf), **rope(hf)}
    # A sliding window (Mistral 7B v0.1, Qwen2 with use_sliding_window) only changes attention beyond
    # its width: the context is capped at the window, inside which the maths is exactly causal attention.
    window = h.whole(hf, "sliding_window", None)
    if window is not None and (model_type == "mistral" or h.flag(hf, "use_sliding_window", False)):
        fields["block_size"] = min(fields["block_size"], window)
    llama = model_type == "llama"
    return dict(
        **fields,
        activation=act,
        model_type=model_type,
        tie_word_embeddings=h.flag(hf, "tie_word_embeddings", False),  # transformers' default for all three
        qkv_bias=h.flag(hf, "attention_bias", False) if llama else model_type == "qwen2",
        out_bias=h.flag(hf, "attention_bias", False) if llama else False,
        mlp_bias=h.flag(hf, "mlp_bias", False) if llama else False,
    )


def rope_to_hf(c: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling is not None:
        out = {**out, **c.rope_scaling.to_hf()}
    return out


def shape_to_hf(c: Any) -> dict[str, Any]:
    return {
        "vocab_size": c.vocab_size,
        "max_position_embeddings": c.block_size,
        "hidden_size": c.n_embd,
        "intermediate_size": c.d_mlp,
        "num_hidden_layers": c.n_layer,
        "num_attention_heads": c.n_head,
        "num_key_value_heads": c.n_kv_heads,
        "head_dim": c.head_dim,
        "hidden_act": c.activation,
        "rms_norm_eps": c.layer_norm_epsilon,
        "tie_word_embeddings": c.tie_word_embeddings,
    }


def write_hf(c: Any) -> dict[str, Any]:
    return {
        "architectures": [ARCHITECTURES[c.model_type]],
        "model_type": c.model_type,
        **shape_to_hf(c),
        "rope_parameters": rope_to_hf(c),
        **({"attention_bias": c.qkv_bias, "mlp_bias": c.mlp_bias} if c.model_type == "llama" else {}),
    }


def check(c: Any) -> None:
    if c.activation != "silu" or c.layer_types is not None or c.query_pre_attn_scalar is not None:
        raise ValueError("the Llama family has a gated SiLU MLP and global attention")


LLAMA = Family(
    name="llama",
    label="Llama",
    architectures=ARCHITECTURES,
    arch=Architecture(norm="rms", positions="rope", qkv="split", mlp="gated", softmax_in_float32=True),
    hf_keys=LLAMA_KEYS,
    read_hf=read_hf,
    write_hf=write_hf,
    check=check,
    config_keys=LLAMA_CONFIG_KEYS,
    base_prefix="model.",
    ignored=("rotary_emb.inv_freq",),  # an old buffer
    biases={"qkv": "Qwen2", "o": "Llama with attention_bias", "mlp": "Llama with mlp_bias"},
)
