"""DeepSeek-V3's multi-head latent attention read by our own module: a mechanism of the lens (`bridge/mechanisms.py`).

transformers computes the layer (`DeepseekV3Attention`); the bridge records what its attention function sees (q, k,
v, the pattern, z: `bridge/attention.py`), not the latent the cache would keep. Our `models.latent_attention.
LatentAttention`, built on the module's own tensors (assigned, not copied: the parameter names are transformers'),
derives the inside on access: the query's latent, the key-value latent (normed) and the rotary key all heads share
(`attn.q_latent`, `attn.kv_latent`, `attn.k_rope`). Its input is the module's input: the decoder layer's own
`input_layernorm` applied to the recorded `resid_pre` (what the layer does before calling its attention), and its
rotation the model's own rotary embedding's, for positions 0 .. T-1 (a trace through transformers starts at its first
token). `derive` returns the module's output too (`attn_out`): the check that ours is the module's maths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ..models.latent_attention import LatentAttention, LatentAttentionConfig, kv_cache_bytes
from ..models.recorder import Recorder
from ..name_options import LATENT_ATTENTION_LENS

# the stages a latent-attention layer derives, in computation order (its declaration,
# name_options.LATENT_ATTENTION_LENS: MLA_ACTIVATIONS's latents; the query's latent only where the model has one)
LATENT_STAGES = LATENT_ATTENTION_LENS.stages


@dataclass(frozen=True)
class LatentAttentionLens:
    """A DeepSeek-V3 attention module (`module`) read by `LatentAttention`; `norm` is its decoder layer's
    input_layernorm, `rotary` a rotary embedding of the model's config (cos and sin per position)."""

    module: nn.Module
    norm: nn.Module
    rotary: nn.Module
    config: LatentAttentionConfig
    kind: str = "latent_attention"
    input_stage: str = "resid_pre"
    output_stage: str = "attn_out"
    stages: tuple[str, ...] = field(default=LATENT_STAGES)

    def ours(self) -> LatentAttention:
        """Our module on the transformers module's own tensors (assigned, not copied)."""
        with torch.device("meta"):
            attn = LatentAttention(self.config)
        state = {k: v for k, v in self.module.state_dict().items()}
        attn.load_state_dict(state, strict=True, assign=True)
        return attn.eval()

    @torch.no_grad()
    def run(self, resid_pre: Tensor) -> dict[str, Tensor]:
        """Every stage our module records (`attn.q_latent` ... `attn.z`, batch dropped) and `attn_out`, from the
        layer's input resid_pre (T, D): the layer's norm, then our attention at positions 0 .. T-1."""
        x = self.norm(resid_pre[None])  # (1, T, D): the attention module's input
        positions = torch.arange(x.shape[1], device=x.device)[None]
        cos, sin = self.rotary(x, positions)  # (1, T, Dr)
        rec = Recorder()
        out = self.ours()(x, (cos[0], sin[0]), rec.scope("attn"))
        values = {name: value[0] for name, value in rec.values.items()}
        values["attn_out"] = out[0]
        return values

    def derive(self, x: Tensor) -> dict[str, Tensor]:
        """q_latent (T, Rq), kv_latent (T, Rkv), k_rope (T, Dr) and attn_out (T, D) from resid_pre x (T, D)."""
        values = self.run(x)
        return {name: values[name] for name in (*self.stages, self.output_stage)}


def deepseek_v3_latent(module: nn.Module, config: Any, layer: nn.Module | None) -> LatentAttentionLens:
    """The lens of a DeepseekV3Attention `module` in decoder layer `layer` (whose input_layernorm makes its input)."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    if layer is None or not isinstance(getattr(layer, "input_layernorm", None), nn.Module):
        raise ValueError("a latent-attention lens reads its input through its decoder layer's input_layernorm")
    c = LatentAttentionConfig.from_hf(config)
    stages = LATENT_STAGES if c.q_lora_rank is not None else LATENT_STAGES[1:]
    weight = next(module.parameters())
    rotary = DeepseekV3RotaryEmbedding(config).to(weight.device)
    return LatentAttentionLens(module, layer.input_layernorm, rotary, c, stages=stages)


# -- memory: what a token costs the cache --------------------------------------------------------------------------


def comparison_kv_heads(n_heads: int) -> int:
    """The key/value heads of the grouped-query attention a latent is compared with: 8, as Llama 3 and Qwen3 share
    theirs, or for a model of fewer than 16 heads the largest divisor of its heads up to half of them (1 for one)."""
    cap = max(1, min(8, n_heads // 2))
    return max(g for g in range(1, cap + 1) if n_heads % g == 0)


@dataclass(frozen=True)
class LatentMemory:
    """What the KV cache of a model's latent-attention layers holds for one sequence, against multi-head and
    grouped-query attention of the same heads and widths (`models.latent_attention.kv_cache_bytes`): bytes a token
    costs one layer, and the cache of all those layers after each of `tokens`, in the model's dtype."""

    layers: tuple[int, ...]  # the latent-attention layers
    n_heads: int  # H
    kv_lora_rank: int  # d_c: the latent's width
    qk_rope_head_dim: int  # d_R: the rotary key's, shared by every head
    qk_nope_head_dim: int  # a head's key width without position
    v_head_dim: int  # a head's value width
    gqa_heads: int  # the key/value heads of the grouped-query attention compared with (`comparison_kv_heads`)
    mla_per_token: int  # bytes a token costs one layer: (d_c + d_R) values
    mha_per_token: int  # H * (Dn + Dr + Dv) values
    gqa_per_token: int  # gqa_heads * (Dn + Dr + Dv) values
    tokens: tuple[int, ...]
    mla_bytes: tuple[int, ...]  # every latent-attention layer's cache after each of `tokens`
    mha_bytes: tuple[int, ...]
    gqa_bytes: tuple[int, ...]
    dtype: str  # the model's


def latent_memory(mechanisms: Mapping[int, Any], dtype: torch.dtype, tokens: Sequence[int]) -> LatentMemory | None:
    """The cache table of a model whose latent-attention layers are `mechanisms`' of that kind (None where it has
    none); every such layer is built from the one text config, so they share one shape."""
    latent = {i: m for i, m in mechanisms.items() if isinstance(m, LatentAttentionLens)}
    if not latent:
        return None
    c = next(iter(latent.values())).config
    size = dtype.itemsize
    g = comparison_kv_heads(c.n_heads)
    per = kv_cache_bytes(c, gqa_heads=g, bytes_per_value=size)
    n = len(latent)
    return LatentMemory(tuple(sorted(latent)), c.n_heads, c.kv_lora_rank, c.qk_rope_dim, c.qk_nope_dim, c.v_dim, g,
                        per.mla, per.mha, per.gqa, tuple(tokens), tuple(n * per.mla * t for t in tokens),
                        tuple(n * per.mha * t for t in tokens), tuple(n * per.gqa * t for t in tokens),
                        str(dtype).removeprefix("torch."))
