"""OLMoE (`OlmoeForCausalLM`, e.g. allenai/OLMoE-1B-7B-0924): Llama-style blocks whose QK-norm is one
RMSNorm over all heads' queries together (and one over all keys), as the projections make them, before
the split into heads and the rotation; and a mixture of experts in place of the MLP: a router scores
num_experts experts (64) for each token (softmax over all of them, in float32), the token goes to the
num_experts_per_tok most probable (8), weighted by those probabilities, renormalised to sum to 1 when
norm_topk_prob says so. Each expert is a gated SiLU MLP of width intermediate_size."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import hf as h
from .declaration import Architecture, Family
from .llama import LLAMA_CONFIG_KEYS, LLAMA_KEYS, rope, rope_to_hf, shape, shape_to_hf
from .mixtral import MOE_CONFIG_KEYS
from .qwen3_moe import with_router


def read_hf(hf: Mapping[str, Any]) -> dict[str, Any]:
    h.architecture(hf, "OlmoeForCausalLM")
    if hf.get("clip_qkv") is not None:
        raise ValueError("clip_qkv is not supported (OLMoE-1B-7B has none)")
    fields = shape(hf, eps_default=1e-5)
    # transformers sizes the key norm by hidden_size // num_attention_heads whatever head_dim says
    if fields["head_dim"] is not None and fields["head_dim"] * fields["n_head"] != fields["n_embd"]:
        raise ValueError(f"head_dim ({fields['head_dim']}) must be hidden_size / num_attention_heads in OLMoE")
    bias = h.flag(hf, "attention_bias", False)
    experts_key = "num_experts" if hf.get("num_experts") is not None else "num_local_experts"
    return dict(
        **fields,
        **rope(hf),
        activation=h.activation(hf, "hidden_act", ("silu",)),
        model_type="olmoe",
        tie_word_embeddings=h.flag(hf, "tie_word_embeddings", False),
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=False,
        n_experts=h.whole(hf, experts_key, 64),
        top_k=h.whole(hf, "num_experts_per_tok", 8),
        norm_topk_prob=h.flag(hf, "norm_topk_prob", False),
    )


def write_hf(c: Any) -> dict[str, Any]:
    out = {"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", **shape_to_hf(c)}
    out.pop("head_dim")  # OLMoE's is hidden_size / num_attention_heads
    return {
        **out,
        "rope_parameters": rope_to_hf(c),
        "attention_bias": c.qkv_bias,
        "clip_qkv": None,
        "num_experts": c.n_experts,
        "num_experts_per_tok": c.top_k,
        "norm_topk_prob": c.norm_topk_prob,
        "output_router_logits": False,
    }


def check(c: Any) -> None:
    if (c.activation != "silu" or c.query_pre_attn_scalar is not None or c.mlp_bias or c.qkv_bias != c.out_bias
            or c.layer_types is not None or c.rope_local_theta is not None):
        raise ValueError("OLMoE has gated SiLU experts without biases, the same bias setting on q, k, v and o, "
                         "global attention and scores scaled by 1 / sqrt(head_dim)")
    if c.head_dim * c.n_head != c.n_embd or c.d_expert != c.d_mlp or c.dense_layers:
        raise ValueError("OLMoE's heads split hidden_size evenly, and every block has experts of width "
                         "intermediate_size")


OLMOE = Family(
    name="olmoe",
    label="OLMoE",
    architectures={"olmoe": "OlmoeForCausalLM"},
    arch=Architecture(norm="rms", positions="rope", qkv="split", mlp="moe", qk_norm=True,
                      qk_norm_scope="projection", softmax_in_float32=True),
    hf_keys=with_router(LLAMA_KEYS),
    read_hf=read_hf,
    write_hf=write_hf,
    check=check,
    config_keys={**LLAMA_CONFIG_KEYS, **MOE_CONFIG_KEYS, "n_experts": "num_experts"},
    base_prefix="model.",
    biases={"qkv": "with attention_bias", "o": "with attention_bias"},
)
