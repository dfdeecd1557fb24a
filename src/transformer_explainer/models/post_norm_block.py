"""OLMo 3's decoder block (OLMo 2's too), written to be read: the norm after each sublayer, before the addition.

A pre-norm block (GPT-2, Llama) normalises what a sublayer reads and adds what it writes as it comes out:

    x = x + attn(norm(x));   x = x + mlp(norm(x))

OLMo 2 and 3 read the residual stream as it is and normalise what each sublayer writes:

    x = x + norm(attn(x));   x = x + norm(mlp(x))        norm(y) = y / sqrt(mean(y^2) + eps) * gamma

so each write's size is set by its norm's weight gamma, not by the sublayer's: the normalised vector y / rms(y) has
length at most sqrt(D), so ||norm(y)|| <= sqrt(D) * max|gamma| (`write_bound`) whatever the sublayer's weights or
input, and the residual stream grows by at most that per sublayer. Multiplying o_proj or down_proj by any c > 0
changes nothing at all (norm(c y) = norm(y) up to eps); in a pre-norm block it multiplies that write by c
(`pre_norm_forward`, `residual_norms` compare the two on the same weights).

The attention normalises the queries and the keys too (QK-norm), over the whole projection: one RMSNorm over all H
heads' queries side by side (H * Dh values, one weight per value), one over all keys', before the split into heads
and the rotation (Qwen3 and Gemma 3 norm each head's Dh values on their own). Layers alternate a sliding window (a
query sees itself and `window` - 1 keys before it) with full causal attention, three sliding then one full in OLMo 3.
The MLP is SwiGLU, down(SiLU(gate(x)) * up(x)).

Parameter names are transformers' Olmo3DecoderLayer's (`self_attn.q_proj`, `k_proj`, `v_proj`, `o_proj`, `q_norm`,
`k_norm`; `mlp.gate_proj`, `up_proj`, `down_proj`; `post_attention_layernorm`, the norm after attention, which
in Llama's naming would be the one before the MLP; `post_feedforward_layernorm`), so its weights load key for key.
Numerics follow transformers: the norms in float32 with the weight multiplied before the cast back (OLMo's, not
Llama's), the rotation in float32, the softmax in float32.

Dims: B batch, T positions, D d_model, H query heads, G key/value heads (query head h reads h // (H / G)), Dh a
head's width, M the MLP's width. Recorded (`name_options.POST_NORM_BLOCK_ACTIVATIONS`), under the block's scope:
attn.q, attn.k, attn.q_norm.*, attn.k_norm.*, attn.v, attn.rot_q, attn.rot_k, attn.scores, attn.pattern, attn.z,
attn.out, ln1_post.*, attn_out, resid_mid, mlp.gate, mlp.up, mlp.act, mlp.post, mlp.out, ln2_post.*, mlp_out,
resid_post.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .kernels import Linear, hidden_keys
from .layers import apply_rope, record
from .recorder import Recorder, scope


@dataclass(frozen=True)
class PostNormConfig:
    """The shape of one OLMo 3 block (Olmo3Config's fields)."""

    d_model: int  # hidden_size (D)
    n_heads: int  # num_attention_heads (H)
    n_kv_heads: int  # num_key_value_heads (G)
    head_dim: int  # Dh
    d_mlp: int  # intermediate_size (M)
    window: int | None = None  # a sliding layer's window (a query sees itself and window - 1 keys); None: full
    eps: float = 1e-6  # rms_norm_eps, every norm's
    bias: bool = False  # attention_bias: biases on the four projections

    def __post_init__(self) -> None:
        if self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.n_heads} query heads cannot share {self.n_kv_heads} key/value heads evenly")
        if self.head_dim % 2:
            raise ValueError(f"a head of {self.head_dim} dimensions cannot be rotated: RoPE turns pairs")
        if self.window is not None and self.window < 1:
            raise ValueError(f"a window of {self.window} keys shows a query nothing, not even itself")

    @classmethod
    def from_hf(cls, config: Any, layer: int) -> PostNormConfig:
        """Layer `layer` of a transformers Olmo3Config (or Olmo2Config, whose layers are all full)."""
        types = getattr(config, "layer_types", None)
        sliding = types is not None and types[layer] == "sliding_attention"
        return cls(config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                   getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
                   config.intermediate_size, config.sliding_window if sliding else None, config.rms_norm_eps,
                   bool(config.attention_bias))


class RMSNorm(nn.Module):
    """y / sqrt(mean(y^2) + eps) * weight, in float32, cast back to y's dtype after the product (OLMo's order)."""

    def __init__(self, ndim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.eps = eps

    def forward(self, y: Tensor, rec: Recorder | None = None) -> Tensor:
        y32 = y.float()
        ms = y32.square().mean(dim=-1, keepdim=True)
        normalized = y32 * torch.rsqrt(ms + self.eps)
        if rec is not None:
            rec("rms", torch.sqrt(ms + self.eps).squeeze(-1).to(y.dtype))
            edited = rec("normalized", normalized.to(y.dtype))
            if rec.wants("normalized"):  # an experiment's edit flows on; otherwise the float32 value, unrounded
                normalized = edited.float()
        return record(rec, "out", (self.weight * normalized).to(y.dtype))


def write_bound(norm: RMSNorm) -> float:
    """The longest vector `norm` can output, whatever its input: sqrt(D) * max|weight| (y / rms(y) has length
    sqrt(D) * sqrt(mean(y^2) / (mean(y^2) + eps)) < sqrt(D))."""
    return math.sqrt(norm.weight.numel()) * norm.weight.detach().abs().max().item()


class WholeQKNormAttention(nn.Module):
    """Causal grouped-query attention with QK-norm over the whole projection: x (B, T, D) -> (B, T, D)."""

    def __init__(self, config: PostNormConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        H, G, Dh = c.n_heads, c.n_kv_heads, c.head_dim
        self.q_proj = Linear(c.d_model, H * Dh, bias=c.bias)
        self.k_proj = Linear(c.d_model, G * Dh, bias=c.bias)
        self.v_proj = Linear(c.d_model, G * Dh, bias=c.bias)
        self.o_proj = Linear(H * Dh, c.d_model, bias=c.bias)
        self.q_norm = RMSNorm(H * Dh, c.eps)  # one norm over every head's query together
        self.k_norm = RMSNorm(G * Dh, c.eps)

    def forward(self, x: Tensor, position_embeddings: tuple[Tensor, Tensor], rec: Recorder | None = None) -> Tensor:
        """`position_embeddings`: cos and sin (T, Dh) or (B, T, Dh) of this call's positions, pairs (i, i + Dh/2),
        as transformers' Olmo3 rotary embedding gives them (float32)."""
        B, T, _ = x.shape
        c = self.config

        def heads(y: Tensor) -> Tensor:  # (B, T, n * Dh) -> (B, n, T, Dh)
            return y.view(B, T, -1, c.head_dim).transpose(1, 2)

        def joined(y: Tensor) -> Tensor:  # (B, n, T, Dh) -> (B, T, n * Dh): the heads side by side
            return y.transpose(1, 2).reshape(B, T, -1)

        q = record(rec, "q", heads(self.q_proj(x)))  # (B, H, T, Dh)
        k = record(rec, "k", heads(self.k_proj(x)))  # (B, G, T, Dh)
        q = heads(self.q_norm(joined(q), scope(rec, "q_norm")))  # normed over all H * Dh values together
        k = heads(self.k_norm(joined(k), scope(rec, "k_norm")))
        v = record(rec, "v", heads(self.v_proj(x)))  # (B, G, T, Dh)
        cos, sin = (r.unsqueeze(-3) for r in position_embeddings)
        q = record(rec, "rot_q", apply_rope(q, cos, sin).to(x.dtype))  # rotated in float32, as transformers
        k = record(rec, "rot_k", apply_rope(k, cos, sin).to(x.dtype))
        z = self.attend(q, k, v, rec)  # (B, H, T, Dh)
        return self.o_proj(z.transpose(1, 2).reshape(B, T, c.n_heads * c.head_dim))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, rec: Recorder | None = None) -> Tensor:
        """softmax(q k^T / sqrt(Dh) + mask) v per head: q (B, H, T, Dh), k and v (B, G, S, Dh)."""
        H, T, S = q.shape[1], q.shape[2], k.shape[2]
        group = H // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # query head h reads h // group
        scores = record(rec, "scores", q @ k.transpose(-1, -2))  # (B, H, T, S)
        masked = (scores * self.config.head_dim**-0.5).masked_fill(
            hidden_keys(T, S, self.config.window, q.device), float("-inf"))
        pattern = record(rec, "pattern", torch.softmax(masked, dim=-1, dtype=torch.float32).to(q.dtype))
        return record(rec, "z", pattern @ v)


class SwiGLU(nn.Module):
    """down(SiLU(gate(x)) * up(x))."""

    def __init__(self, d_model: int, width: int) -> None:
        super().__init__()
        self.gate_proj = Linear(d_model, width, bias=False)
        self.up_proj = Linear(d_model, width, bias=False)
        self.down_proj = Linear(width, d_model, bias=False)

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        gate, up = record(rec, "gate", self.gate_proj(x)), record(rec, "up", self.up_proj(x))
        act = record(rec, "act", F.silu(gate))
        return self.down_proj(record(rec, "post", act * up))


class PostNormBlock(nn.Module):
    """x + norm(attn(x)), then + norm(mlp(x)): x (B, T, D) -> (B, T, D)."""

    def __init__(self, config: PostNormConfig) -> None:
        super().__init__()
        self.config = config
        self.self_attn = WholeQKNormAttention(config)
        self.mlp = SwiGLU(config.d_model, config.d_mlp)
        self.post_attention_layernorm = RMSNorm(config.d_model, config.eps)  # ln1_post: after attention
        self.post_feedforward_layernorm = RMSNorm(config.d_model, config.eps)  # ln2_post: after the MLP

    def forward(self, x: Tensor, position_embeddings: tuple[Tensor, Tensor], rec: Recorder | None = None) -> Tensor:
        attn = record(rec, "attn.out", self.self_attn(x, position_embeddings, scope(rec, "attn")))
        x = record(rec, "resid_mid", x + record(rec, "attn_out",
                                                self.post_attention_layernorm(attn, scope(rec, "ln1_post"))))
        mlp = record(rec, "mlp.out", self.mlp(x, scope(rec, "mlp")))
        return record(rec, "resid_post", x + record(rec, "mlp_out",
                                                    self.post_feedforward_layernorm(mlp, scope(rec, "ln2_post"))))


# -- what the norm's place changes ----------------------------------------------------------------------------


def pre_norm_forward(block: PostNormBlock, x: Tensor, position_embeddings: tuple[Tensor, Tensor]) -> Tensor:
    """The same weights with each norm moved before its sublayer, as GPT-2 and Llama place it:
    x + attn(norm1(x)), then + mlp(norm2(x)). For comparison only: no checkpoint was trained so."""
    x = x + block.self_attn(block.post_attention_layernorm(x), position_embeddings)
    return x + block.mlp(block.post_feedforward_layernorm(x))


def residual_norms(blocks: list[PostNormBlock], x: Tensor, position_embeddings: tuple[Tensor, Tensor],
                   *, post: bool = True) -> Tensor:
    """The residual stream's mean length over the positions, ||x||, before the first block and after each,
    (len(blocks) + 1,): through the blocks as they are (post-norm) or with their norms moved before (pre-norm)."""
    lengths = [x.float().norm(dim=-1).mean()]
    for block in blocks:
        x = block(x, position_embeddings) if post else pre_norm_forward(block, x, position_embeddings)
        lengths.append(x.float().norm(dim=-1).mean())
    return torch.stack(lengths)
