"""Multi-head latent attention (MLA; DeepSeek-V2 and V3), written to be read.

Multi-head attention caches, for every token, one key and one value per head: 2 * H * Dh values a token and a
layer. MLA caches one small vector per token instead, shared by all heads, and rebuilds each head's key and value
from it:

    c_kv = RMSNorm(x W_DKV)                       # (Rkv,): the key-value latent, what the cache keeps
    k_nope_h = c_kv W_UK_h,  v_h = c_kv W_UV_h    # each head's key (without position) and value, up-projected

Positions cannot go through the latent: a rotation by the key's position applied to c_kv W_UK_h would sit between
the query and W_UK_h, so the up-projection could no longer be folded into the query (`absorbed_scores`). So each
key gets a second, small part that carries the position, computed beside the latent and shared by all heads
(the "decoupled" rotary key), and each query a rotary part of its own:

    k_rope = RoPE(x W_KR)                         # (Dr,): one per token for all heads, cached beside c_kv
    c_q = RMSNorm(x W_DQ)                         # (Rq,): the query's latent (low rank; not cached)
    [q_nope_h, q_rope_h] = c_q W_UQ_h, then q_rope_h rotated
    score_h(t, s) = (q_nope_h(t) . k_nope_h(s) + q_rope_h(t) . k_rope(s)) * scale
    z_h(t) = sum_{s <= t} softmax_s(score_h(t, s)) v_h(s);   out = [z_1 ... z_H] W_O

The cache holds Rkv + Dr values a token and a layer (`kv_cache_bytes`): 512 + 64 = 576 in DeepSeek-V3, against
128 heads * (192 + 128) = 40,960 for multi-head attention with the same heads. Where the model has no query latent
(q_lora_rank None, DeepSeek-V2-Lite) the query is x W_Q directly.

scale = 1 / sqrt(Dn + Dr), times mscale^2 where the rotary embedding is stretched with YaRN and `mscale_all_dim` is
set (`softmax_scale`). YaRN sharpens the softmax of a stretched context; DeepSeek's checkpoints (factor 40,
mscale = mscale_all_dim = 1) put all of it in the scale, mscale = 0.1 * ln(40) + 1 = 1.37 squared, so that it applies
to the scores' part without position too (their cos and sin carry mscale / mscale_all_dim = 1).

Parameter names are transformers' (`q_a_proj`, `q_a_layernorm`, `q_b_proj` or `q_proj`, `kv_a_proj_with_mqa`, which
projects the latent and the rotary key in one matrix, `kv_a_layernorm`, `kv_b_proj`, which up-projects k_nope and
v of every head in one matrix, `o_proj`), so DeepseekV3Attention's weights load key for key. The rotary part's
dimensions are paired (0, 1), (2, 3), ... in DeepSeek's checkpoints (`rope_interleave`), or (i, i + Dr/2) as in
Llama: with interleaving they are laid out evens then odds before the rotation, as transformers does, so the
recorded q and k are in transformers' layout. Numerics follow transformers' eager path: the norms in float32, the
softmax in float32.

Dims: B batch, T positions, D d_model, H heads, Rq the query latent's width (q_lora_rank), Rkv the key-value
latent's (kv_lora_rank), Dn a head's key/query width without position (qk_nope_head_dim), Dr the rotary part's
(qk_rope_head_dim), Dv a head's value width. Recorded (`name_options.MLA_ACTIVATIONS`, under the scope a block
gives attention, `attn.`): q_latent (where the model has one), kv_latent, k_rope, q, k, v, scores, pattern, z.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .kernels import Linear
from .layers import RMSNorm, apply_rope, record
from .recorder import Recorder


def softmax_scale(qk_head_dim: int, rope_parameters: Mapping[str, Any] | None = None) -> float:
    """What the scores are multiplied by: 1 / sqrt(Dn + Dr), times mscale^2 with a scaled rotary embedding whose
    parameters set `mscale_all_dim` (YaRN: mscale = 0.1 * mscale_all_dim * ln(factor) + 1 for a factor above 1),
    as transformers' `yarn_apply_mscale` has it."""
    scale = qk_head_dim**-0.5
    p = rope_parameters or {}
    if p.get("rope_type", "default") != "default" and p.get("mscale_all_dim"):
        factor = p["factor"]
        mscale = 1.0 if factor <= 1 else 0.1 * p["mscale_all_dim"] * math.log(factor) + 1.0
        scale *= mscale * mscale
    return scale


@dataclass(frozen=True)
class LatentAttentionConfig:
    """The shape of one MLA layer (DeepSeek-V3's config fields)."""

    d_model: int  # hidden_size
    n_heads: int  # num_attention_heads (H)
    q_lora_rank: int | None  # Rq: the query latent's width; None: queries projected from x directly (q_proj)
    kv_lora_rank: int  # Rkv: the key-value latent's width, what the cache keeps beside k_rope
    qk_nope_dim: int  # qk_nope_head_dim (Dn): a head's query/key part without position
    qk_rope_dim: int  # qk_rope_head_dim (Dr): the rotary part, one key shared by all heads
    v_dim: int  # v_head_dim (Dv): a head's value width
    scale: float | None = None  # the scores' factor; None: 1 / sqrt(Dn + Dr)
    rope_interleave: bool = True  # rotary pairs (0, 1), (2, 3), ... (DeepSeek's); False: (i, i + Dr/2)
    bias: bool = False  # attention_bias: biases on q_a_proj, kv_a_proj_with_mqa and o_proj
    eps: float = 1e-6  # the latents' RMSNorms' (transformers builds them with its default, not rms_norm_eps)

    def __post_init__(self) -> None:
        if self.qk_rope_dim % 2:
            raise ValueError(f"a rotary key of {self.qk_rope_dim} dimensions cannot be rotated: RoPE turns pairs")
        if self.q_lora_rank is not None and self.q_lora_rank < 1:
            raise ValueError(f"a query latent of width {self.q_lora_rank} holds nothing: use None for a full query "
                             "projection")
        if min(self.d_model, self.n_heads, self.kv_lora_rank, self.qk_nope_dim + self.qk_rope_dim, self.v_dim) < 1:
            raise ValueError("an attention layer needs at least one head, one latent dimension and one query/key and "
                             "value dimension")

    @property
    def qk_dim(self) -> int:
        """A head's query and key width, Dn + Dr."""
        return self.qk_nope_dim + self.qk_rope_dim

    @property
    def softmax_scale(self) -> float:
        return self.qk_dim**-0.5 if self.scale is None else self.scale

    @classmethod
    def from_hf(cls, config: Any) -> LatentAttentionConfig:
        """From a transformers DeepseekV3Config (or DeepSeek-V2's)."""
        qk = config.qk_nope_head_dim + config.qk_rope_head_dim
        return cls(config.hidden_size, config.num_attention_heads, config.q_lora_rank, config.kv_lora_rank,
                   config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim,
                   softmax_scale(qk, getattr(config, "rope_parameters", None)),
                   bool(getattr(config, "rope_interleave", False)), bool(config.attention_bias))


class LatentAttention(nn.Module):
    """Multi-head latent attention, causal: x (B, T, D) -> (B, T, D); see the module's docstring for the maths."""

    def __init__(self, config: LatentAttentionConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        H = c.n_heads
        if c.q_lora_rank is None:
            self.q_proj = Linear(c.d_model, H * c.qk_dim, bias=False)
        else:
            self.q_a_proj = Linear(c.d_model, c.q_lora_rank, bias=c.bias)  # W_DQ: down to the query latent
            self.q_a_layernorm = RMSNorm(c.q_lora_rank, c.eps)
            self.q_b_proj = Linear(c.q_lora_rank, H * c.qk_dim, bias=False)  # W_UQ: up to every head's query
        # W_DKV and W_KR side by side: the latent (Rkv) and the shared rotary key (Dr), "with MQA" as one key for all
        self.kv_a_proj_with_mqa = Linear(c.d_model, c.kv_lora_rank + c.qk_rope_dim, bias=c.bias)
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, c.eps)
        # W_UK and W_UV of each head: rows h * (Dn + Dv) ... the head's Dn key rows, then its Dv value rows
        self.kv_b_proj = Linear(c.kv_lora_rank, H * (c.qk_nope_dim + c.v_dim), bias=False)
        self.o_proj = Linear(H * c.v_dim, c.d_model, bias=c.bias)

    def rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """RoPE on the rotary part x (B, heads, T, Dr); cos and sin (T, Dr) or (B, T, Dr), transformers' layout
        (each pair's angle twice, [angles, angles]). DeepSeek's pairs are (0, 1), (2, 3), ...: laid out evens then
        odds first, they become (i, i + Dr/2) pairs, which `apply_rope` turns."""
        if self.config.rope_interleave:
            x = torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)
        return apply_rope(x, cos.unsqueeze(-3), sin.unsqueeze(-3))

    def query(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        """Every head's query (B, H, T, Dn + Dr) before its rotation; through the query latent where there is one."""
        B, T, _ = x.shape
        if self.config.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            c_q = record(rec, "q_latent", self.q_a_layernorm(self.q_a_proj(x)))  # (B, T, Rq)
            q = self.q_b_proj(c_q)
        return q.view(B, T, self.config.n_heads, self.config.qk_dim).transpose(1, 2)

    def latent(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """What the cache keeps for each token: the key-value latent c_kv (B, T, Rkv), normed, and the rotary key
        (B, T, Dr) before its rotation."""
        c_kv, k_pe = self.kv_a_proj_with_mqa(x).split((self.config.kv_lora_rank, self.config.qk_rope_dim), dim=-1)
        return self.kv_a_layernorm(c_kv), k_pe

    def up_project(self, c_kv: Tensor) -> tuple[Tensor, Tensor]:
        """Each head's key without position (B, H, S, Dn) and value (B, H, S, Dv) from the latents (B, S, Rkv)."""
        B, S, _ = c_kv.shape
        c = self.config
        kv = self.kv_b_proj(c_kv).view(B, S, c.n_heads, c.qk_nope_dim + c.v_dim).transpose(1, 2)
        k_nope, v = kv.split((c.qk_nope_dim, c.v_dim), dim=-1)
        return k_nope, v

    def forward(self, x: Tensor, position_embeddings: tuple[Tensor, Tensor], rec: Recorder | None = None) -> Tensor:
        """`position_embeddings`: cos and sin (T, Dr) or (B, T, Dr) of this call's positions, as transformers'
        rotary embedding module gives them (YaRN's attention factor included)."""
        B, T, _ = x.shape
        c = self.config
        cos, sin = position_embeddings
        q = self.query(x, rec)  # (B, H, T, Dn + Dr)
        q_nope, q_rope = q.split((c.qk_nope_dim, c.qk_rope_dim), dim=-1)
        c_kv, k_pe = self.latent(x)
        c_kv = record(rec, "kv_latent", c_kv)  # (B, T, Rkv)
        k_rope = record(rec, "k_rope", self.rotate(k_pe.unsqueeze(1), cos, sin).squeeze(1))  # (B, T, Dr), all heads'
        k_nope, v = self.up_project(c_kv)  # (B, H, T, Dn), (B, H, T, Dv)
        q = record(rec, "q", torch.cat((q_nope, self.rotate(q_rope, cos, sin)), dim=-1))  # (B, H, T, Dn + Dr)
        k = torch.cat((k_nope, k_rope.unsqueeze(1).expand(B, c.n_heads, T, c.qk_rope_dim)), dim=-1)
        k, v = record(rec, "k", k), record(rec, "v", v)
        z = self.attend(q, k, v, rec)  # (B, H, T, Dv)
        return self.o_proj(z.transpose(1, 2).reshape(B, T, c.n_heads * c.v_dim))  # heads side by side

    def attend(self, q: Tensor, k: Tensor, v: Tensor, rec: Recorder | None = None) -> Tensor:
        """softmax(q k^T * scale + causal mask) v per head: q and k (B, H, T, Dn + Dr), v (B, H, T, Dv). q k^T is
        q_nope . k_nope + q_rope . k_rope: what the token is about, and where it is."""
        T = q.shape[2]
        scores = record(rec, "scores", q @ k.transpose(-1, -2))  # (B, H, T, T)
        later = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)  # keys after the query
        masked = (scores * self.config.softmax_scale).masked_fill(later, float("-inf"))
        pattern = record(rec, "pattern", torch.softmax(masked, dim=-1, dtype=torch.float32).to(q.dtype))
        return record(rec, "z", pattern @ v)


def absorbed_scores(attn: LatentAttention, q: Tensor, c_kv: Tensor, k_rope: Tensor) -> Tensor:
    """The raw scores q k^T (B, H, T, S) read from the cache itself, without rebuilding any key: each head's key
    part is c_kv W_UK_h, so q_nope . (c_kv W_UK_h) = (q_nope W_UK_h^T) . c_kv, the up-projection folded into the
    query. From the recorded q (B, H, T, Dn + Dr), kv_latent (B, S, Rkv) and k_rope (B, S, Dr). This is why the
    position is kept apart: a rotation between W_UK_h and the query could not be folded so."""
    c = attn.config
    w_uk = attn.kv_b_proj.weight.view(c.n_heads, c.qk_nope_dim + c.v_dim, c.kv_lora_rank)[:, :c.qk_nope_dim]
    q_nope, q_rope = q.split((c.qk_nope_dim, c.qk_rope_dim), dim=-1)
    q_latent = torch.einsum("bhtn,hnr->bhtr", q_nope, w_uk)  # (B, H, T, Rkv): the query in the latent's space
    return q_latent @ c_kv.unsqueeze(1).transpose(-1, -2) + q_rope @ k_rope.unsqueeze(1).transpose(-1, -2)


# -- memory: what a token costs in the cache ---------------------------------------------------------------------

@dataclass(frozen=True)
class KVCacheBytes:
    """Bytes that one token adds to one layer's cache: MLA's latent and rotary key, against multi-head attention
    (a key of Dn + Dr and a value of Dv for every head) and grouped-query attention (the same for `gqa_heads`
    key/value heads) of the same heads and widths."""

    mla: int  # (Rkv + Dr) values
    mha: int  # H * (Dn + Dr + Dv) values
    gqa: int  # gqa_heads * (Dn + Dr + Dv) values
    gqa_heads: int

    def per_model(self, layers: int, tokens: int = 1) -> dict[str, int]:
        """Bytes of `tokens` tokens' cache over `layers` layers, for each kind."""
        return {kind: getattr(self, kind) * layers * tokens for kind in ("mla", "mha", "gqa")}


def kv_cache_bytes(config: LatentAttentionConfig, gqa_heads: int = 8, bytes_per_value: int = 2) -> KVCacheBytes:
    """What one token costs one layer's cache (`bytes_per_value` 2: bfloat16): MLA caches its key-value latent and
    its rotary key, Rkv + Dr values whatever the number of heads; multi-head attention of the same shape caches every
    head's key (Dn + Dr) and value (Dv); grouped-query attention `gqa_heads` heads' of each."""
    c = config
    if not 1 <= gqa_heads <= c.n_heads or c.n_heads % gqa_heads:
        raise ValueError(f"{c.n_heads} query heads cannot share {gqa_heads} key/value heads evenly")
    per_head = c.qk_dim + c.v_dim
    return KVCacheBytes(mla=(c.kv_lora_rank + c.qk_rope_dim) * bytes_per_value,
                        mha=c.n_heads * per_head * bytes_per_value, gqa=gqa_heads * per_head * bytes_per_value,
                        gqa_heads=gqa_heads)
