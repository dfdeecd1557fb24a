"""GPT-2 (`GPT2LMHeadModel`): LayerNorm, learned positions, one projection for q, k and v, a GELU MLP,
biases everywhere, the unembedding tied to the token embedding. HF stores its four projection matrices
as `Conv1D` weights, (in, out)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import hf as h
from .declaration import Architecture, Family


def read_hf(hf: Mapping[str, Any]) -> dict[str, Any]:
    for key, expected in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("reorder_and_upcast_attn", False),
        ("add_cross_attention", False),
    ):
        if hf.get(key, expected) != expected:
            raise ValueError(f"config option {key}={hf[key]!r} is not supported (expected {expected!r})")
    if hf.get("tie_word_embeddings", True) is not True:
        raise ValueError("untied output embeddings are not supported: GPT-2 ties lm_head to wte")
    return dict(
        vocab_size=h.whole(hf, "vocab_size"),
        block_size=h.whole(hf, "n_positions", hf.get("n_ctx", 1024)),
        n_layer=h.whole(hf, "n_layer"),
        n_head=h.whole(hf, "n_head"),
        n_embd=h.whole(hf, "n_embd"),
        d_mlp=h.whole(hf, "n_inner", None),
        layer_norm_epsilon=h.real(hf, "layer_norm_epsilon", 1e-5),
        activation=hf.get("activation_function", "gelu_new"),
    )


def write_hf(c: Any) -> dict[str, Any]:
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": c.vocab_size,
        "n_positions": c.block_size,
        "n_ctx": c.block_size,
        "n_embd": c.n_embd,
        "n_layer": c.n_layer,
        "n_head": c.n_head,
        "n_inner": c.d_mlp if c.d_mlp != 4 * c.n_embd else None,
        "activation_function": c.activation,
        "layer_norm_epsilon": c.layer_norm_epsilon,
        "resid_pdrop": c.dropout,
        "embd_pdrop": c.dropout,
        "attn_pdrop": c.dropout,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "bos_token_id": c.vocab_size - 1,
        "eos_token_id": c.vocab_size - 1,
    }


def check(c: Any) -> None:
    if (c.n_kv_heads != c.n_head or not c.tie_word_embeddings or c.head_dim * c.n_head != c.n_embd
            or c.activation == "silu" or c.layer_types is not None or c.query_pre_attn_scalar is not None):
        raise ValueError("GPT-2 has one key/value head per query head, tied embeddings, global attention and GELU")


GPT2 = Family(
    name="gpt2",
    label="GPT-2",
    architectures={"gpt2": "GPT2LMHeadModel"},
    arch=Architecture(norm="layer", positions="learned", qkv="fused", mlp="gelu"),
    hf_keys=(
        ("embed.", "transformer.wte."),
        ("pos_embed.", "transformer.wpe."),
        ("blocks.{i}.ln1.", "transformer.h.{i}.ln_1."),
        ("blocks.{i}.attn.qkv_proj.", "transformer.h.{i}.attn.c_attn."),
        ("blocks.{i}.attn.o_proj.", "transformer.h.{i}.attn.c_proj."),
        ("blocks.{i}.ln2.", "transformer.h.{i}.ln_2."),
        ("blocks.{i}.mlp.up_proj.", "transformer.h.{i}.mlp.c_fc."),
        ("blocks.{i}.mlp.down_proj.", "transformer.h.{i}.mlp.c_proj."),
        ("ln_final.", "transformer.ln_f."),
        ("unembed.", "lm_head."),
    ),
    read_hf=read_hf,
    write_hf=write_hf,
    check=check,
    config_keys={"block_size": "n_positions", "d_mlp": "n_inner"},
    transposed=("attn.qkv_proj.weight", "attn.o_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"),
    base_prefix="transformer.",
    ignored=(".attn.bias", ".attn.masked_bias"),  # HF's causal-mask buffers in old checkpoints
    special_tokens=False,
)
