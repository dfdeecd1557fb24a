"""Gated DeltaNet (Yang et al. 2024), the linear attention of Qwen3.5 and Qwen3-Next, written to be read.

Attention keeps every earlier key and value and reads them all again for each new token. A Gated DeltaNet
layer keeps one matrix per head instead, the state S (Dk x Dv), and updates it token by token:

    S' = exp(g_t) * S_{t-1}                        # decay: the whole memory fades by exp(g_t) in (0, 1)
    S_t = S' + beta_t * k_t (v_t - S'^T k_t)^T      # the delta rule: write the error of what S' recalls at k_t
    o_t = S_t^T q_t                                # read: what the state holds at the query's direction

with k_t and q_t of unit length (q_t then times 1 / sqrt(Dk)), beta_t = sigmoid(b_t) in (0, 1) how strongly
the token writes, and g_t = -exp(A_log) * softplus(a_t + dt_bias) < 0 how much it forgets. S'^T k_t is what the
state already recalls for this key, so a token rewrites the value stored at its key rather than adding a second
one; beta_t = 1 replaces it outright. The state's size is fixed: the memory does not grow with the text,
and what it cannot hold is lost (`state_memory`). Unrolled, o_t is a weighted sum of the earlier values, as an
attention output is (`implied_attention`), with weights that need not be positive nor sum to 1.

Around the recurrence: q, k and v come from one projection through a short causal convolution (each channel a
weighted sum of its last `conv_kernel` positions) and SiLU; value head h reads key head h // (H / G) (fewer
query/key heads than value heads, as grouped-query attention shares keys); the read o_t goes through an RMSNorm
per head, times SiLU of the output gate z_t, then the output projection.

Parameter names are Qwen3.5's (`in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`, `conv1d`, `dt_bias`, `A_log`,
`norm`, `out_proj`), so its weights load key for key; Qwen3-Next's, which project q, k, v, z and b, a in two
interleaved matrices, through `qwen3_next_weights`. Numerics follow transformers' torch reference
(`torch_recurrent_gated_delta_rule`, `Qwen3_5RMSNormGated`): the normalisation and the recurrence in float32, the
norm's weight applied in the input's dtype. transformers computes the same sums in chunks for speed
(`torch_chunk_gated_delta_rule`); here the recurrence runs token by token, the form it is defined in.

Dims: B batch, T positions, D d_model, H value heads (the layer's heads), G query/key heads, Dk a key's width,
Dv a value's width. Recorded (`name_options.GATED_DELTANET_ACTIVATIONS`): q, k, v, beta, decay, state (only where
the recorder asks for it by name: it is H * T * Dk * Dv values), o, gate, out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .kernels import Linear
from .layers import record
from .recorder import Recorder


@dataclass(frozen=True)
class GatedDeltaNetConfig:
    """The shape of one Gated DeltaNet layer (Qwen3.5's `linear_*` config fields)."""

    d_model: int  # hidden_size: the residual stream's width
    n_key_heads: int  # linear_num_key_heads (G): heads of queries and keys
    n_value_heads: int  # linear_num_value_heads (H): heads of values, states and outputs; a multiple of G
    key_dim: int  # linear_key_head_dim (Dk): a state's rows
    value_dim: int  # linear_value_head_dim (Dv): a state's columns
    conv_kernel: int = 4  # linear_conv_kernel_dim: positions each convolution channel sums over
    eps: float = 1e-6  # rms_norm_eps: the output norm's

    def __post_init__(self) -> None:
        if self.n_value_heads % self.n_key_heads:
            raise ValueError(f"{self.n_value_heads} value heads cannot share {self.n_key_heads} key heads evenly")

    @classmethod
    def from_hf(cls, config: Any) -> GatedDeltaNetConfig:
        """From a transformers Qwen3.5 / Qwen3-Next text config."""
        return cls(config.hidden_size, config.linear_num_key_heads, config.linear_num_value_heads,
                   config.linear_key_head_dim, config.linear_value_head_dim, config.linear_conv_kernel_dim,
                   config.rms_norm_eps)


def l2_normalize(x: Tensor, eps: float = 1e-6) -> Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim: unit length (transformers' and FLA's `l2norm`)."""
    return x * torch.rsqrt(x.square().sum(dim=-1, keepdim=True) + eps)


def delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, decay: Tensor, keep_states: bool = False
               ) -> tuple[Tensor, Tensor | None]:
    """The gated delta rule, token by token, from a zero state: q and k (B, H, T, Dk), v (B, H, T, Dv), beta and
    decay (B, H, T), in float32. Returns the reads o (B, H, T, Dv) and, with `keep_states`, the state after each
    token (B, H, T, Dk, Dv)."""
    B, H, T, Dk = k.shape
    S = q.new_zeros(B, H, Dk, v.shape[-1])  # (B, H, Dk, Dv): one matrix per head
    reads, states = [], []
    for t in range(T):
        k_t, v_t = k[:, :, t], v[:, :, t]
        S = S * decay[:, :, t].exp()[..., None, None]  # forget a little of everything
        recalled = torch.einsum("bhkv,bhk->bhv", S, k_t)  # S'^T k_t: what the state holds at this key
        write = beta[:, :, t, None] * (v_t - recalled)  # (B, H, Dv): the error, times the write strength
        S = S + k_t[..., :, None] * write[..., None, :]  # outer product k_t write^T
        reads.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))  # S_t^T q_t
        if keep_states:
            states.append(S)
    o = torch.stack(reads, dim=2) if T else v.new_zeros(v.shape)
    return o, (torch.stack(states, dim=2) if keep_states and T else None)


def asks_for(rec: Recorder | None, name: str) -> bool:
    """Whether a recorder asks for `name` by name: its `keep` names it, an observer watches it or a patch edits it.
    A recorder that keeps everything (keep=None) does not ask for the states, which hold H * T * Dk * Dv values."""
    if rec is None:
        return False
    full = rec.prefix + name
    return full in rec.patches or full in rec.observers or (rec.store and rec.keep is not None and rec.keep(full))


class GatedRMSNorm(nn.Module):
    """RMSNorm over each head's read (Dv values), times its gate: x / rms(x) * weight * gate, the norm in float32
    and the weight applied in x's dtype (transformers' `Qwen3_5RMSNormGated`)."""

    def __init__(self, ndim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.eps = eps

    def forward(self, x: Tensor, gate: Tensor) -> Tensor:
        x32 = x.float()
        normalized = (x32 * torch.rsqrt(x32.square().mean(dim=-1, keepdim=True) + self.eps)).to(x.dtype)
        return (self.weight * normalized * gate.float()).to(x.dtype)


class GatedDeltaNet(nn.Module):
    """A Gated DeltaNet layer: x (B, T, D) -> (B, T, D); see the module's docstring for the maths."""

    def __init__(self, config: GatedDeltaNetConfig) -> None:
        super().__init__()
        c = config
        self.n_key_heads, self.n_value_heads = c.n_key_heads, c.n_value_heads
        self.key_dim, self.value_dim = c.key_dim, c.value_dim
        qk_width, v_width = c.n_key_heads * c.key_dim, c.n_value_heads * c.value_dim
        self.in_proj_qkv = Linear(c.d_model, 2 * qk_width + v_width, bias=False)  # q, k, v of every head at once
        self.in_proj_z = Linear(c.d_model, v_width, bias=False)  # the output gate
        self.in_proj_b = Linear(c.d_model, c.n_value_heads, bias=False)  # write strength, before its sigmoid
        self.in_proj_a = Linear(c.d_model, c.n_value_heads, bias=False)  # forgetting, before its softplus
        width = 2 * qk_width + v_width
        # depthwise: each of the q, k, v channels its own kernel over its own last conv_kernel positions
        self.conv1d = nn.Conv1d(width, width, c.conv_kernel, groups=width, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(c.n_value_heads))
        self.A_log = nn.Parameter(torch.zeros(c.n_value_heads))  # exp(A_log): each head's rate of forgetting
        self.norm = GatedRMSNorm(c.value_dim, c.eps)
        self.out_proj = Linear(v_width, c.d_model, bias=False)

    def short_conv(self, x: Tensor) -> Tensor:
        """Causal depthwise convolution, then SiLU: (B, T, C) -> (B, T, C); position t mixes positions t-K+1..t of
        its own channel (zeros before the text)."""
        K = self.conv1d.kernel_size[0]
        y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), self.conv1d.weight, groups=x.shape[-1])
        return F.silu(y).transpose(1, 2)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries and keys (B, G, T, Dk), unit length (queries then times 1 / sqrt(Dk)), and values (B, H, T, Dv)."""
        B, T, _ = x.shape
        G, H, Dk, Dv = self.n_key_heads, self.n_value_heads, self.key_dim, self.value_dim
        q, k, v = self.short_conv(self.in_proj_qkv(x)).split((G * Dk, G * Dk, H * Dv), dim=-1)
        q = l2_normalize(q.view(B, T, G, Dk).transpose(1, 2).float()) * Dk**-0.5
        k = l2_normalize(k.view(B, T, G, Dk).transpose(1, 2).float())
        return q, k, v.view(B, T, H, Dv).transpose(1, 2)

    def gates(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Per token and value head (B, H, T): the write strength beta = sigmoid(b) in (0, 1), and the decay
        g = -exp(A_log) * softplus(a + dt_bias) < 0 (the state is multiplied by exp(g))."""
        beta = torch.sigmoid(self.in_proj_b(x)).transpose(1, 2)
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias)
        return beta, g.transpose(1, 2)

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        B, T, _ = x.shape
        q, k, v = self.project(x)
        q, k, v = record(rec, "q", q), record(rec, "k", k), record(rec, "v", v)
        beta, decay = self.gates(x)
        beta, decay = record(rec, "beta", beta), record(rec, "decay", decay)
        group = self.n_value_heads // self.n_key_heads  # value head h reads query/key head h // group
        qh, kh = q.repeat_interleave(group, dim=1), k.repeat_interleave(group, dim=1)
        wants_states = asks_for(rec, "state")
        o, states = delta_rule(qh.float(), kh.float(), v.float(), beta.float(), decay.float(), wants_states)
        if states is not None:
            assert rec is not None
            states = rec("state", states)  # (B, H, T, Dk, Dv); the reads are taken from the states as recorded
            o = torch.einsum("bhtkv,bhtk->bhtv", states, qh.float())
        o = record(rec, "o", o.to(x.dtype))  # (B, H, T, Dv): each head's read, before the norm and the gate
        z = self.in_proj_z(x).view(B, T, self.n_value_heads, self.value_dim).transpose(1, 2)  # (B, H, T, Dv)
        gate = record(rec, "gate", F.silu(z.float()))  # how much of each normed read passes
        gated = self.norm(o, gate)  # (B, H, T, Dv)
        return record(rec, "out", self.out_proj(gated.transpose(1, 2).reshape(B, T, -1)))


def implied_attention(q: Tensor, k: Tensor, beta: Tensor, decay: Tensor) -> Tensor:
    """The attention matrix the recurrence implies: w (..., H, T, T) with o_t = sum_{s <= t} w[t, s] v_s exactly,
    from the recorded q and k (..., G, T, Dk) and beta and decay (..., H, T) (any leading dims, e.g. a batch).

    Unrolling S_t = A_t S_{t-1} + beta_t k_t v_t^T, with A_t = exp(g_t) (I - beta_t k_t k_t^T), from S_0 = 0:
        S_t = sum_{s <= t} A_t A_{t-1} ... A_{s+1} beta_s k_s v_s^T,
    so o_t = S_t^T q_t = sum_s w[t, s] v_s with
        w[t, s] = beta_s * q_t^T A_t A_{t-1} ... A_{s+1} k_s.
    Each later token s < r <= t fades the weight by exp(g_r) and removes the part of the query's direction that it
    wrote over (I - beta_r k_r k_r^T). Weights may be negative and rows need not sum to 1: this is not a softmax.
    Computed for every query at once, sweeping s from the last token back: row t holds q_t^T A_t ... A_{s+1}.
    O(H T^2 Dk)."""
    G, H = k.shape[-3], beta.shape[-2]
    q = q.float().repeat_interleave(H // G, dim=-3)
    k = k.float().repeat_interleave(H // G, dim=-3)
    beta, fade = beta.float(), decay.float().exp()
    T = k.shape[-2]
    u = q.clone()  # (..., H, T, Dk): row t is q_t^T A_t ... A_{s+1} once the sweep reaches s
    w = q.new_zeros(*q.shape[:-1], T)
    for s in reversed(range(T)):
        k_s = k[..., s, None, :]  # (..., H, 1, Dk)
        along = (u[..., s:, :] * k_s).sum(-1)  # (..., H, T - s): the queries t >= s, at key s
        w[..., s:, s] = beta[..., s, None] * along
        # apply A_s to the rows t >= s: fade, and remove what token s wrote over
        u[..., s:, :] = fade[..., s, None, None] * (u[..., s:, :] - beta[..., s, None, None] * along[..., None] * k_s)
    return w


def qwen3_next_weights(state_dict: Mapping[str, Tensor], config: GatedDeltaNetConfig) -> dict[str, Tensor]:
    """A Qwen3-Next Gated DeltaNet layer's weights under Qwen3.5's names, the layout this module has. Qwen3-Next
    projects q, k, v and z in one matrix and b and a in another, their rows grouped by key head: for each of the G
    key heads its q (Dk rows), k (Dk), the v of its H / G value heads, then their z; and its value heads' b, then
    their a. Qwen3.5 keeps q, k and v (each heads in order), z, b and a apart. The other weights are the same."""
    c = config
    r = c.n_value_heads // c.n_key_heads  # value heads per key head
    out = {name: w for name, w in state_dict.items() if name not in ("in_proj_qkvz.weight", "in_proj_ba.weight")}
    qkvz = state_dict["in_proj_qkvz.weight"]
    q, k, v, z = qkvz.view(c.n_key_heads, -1, qkvz.shape[-1]).split(
        (c.key_dim, c.key_dim, r * c.value_dim, r * c.value_dim), dim=1)  # each (G, rows, D)
    out["in_proj_qkv.weight"] = torch.cat([part.flatten(0, 1) for part in (q, k, v)])
    out["in_proj_z.weight"] = z.flatten(0, 1)
    ba = state_dict["in_proj_ba.weight"]
    b, a = ba.view(c.n_key_heads, 2 * r, ba.shape[-1]).split((r, r), dim=1)
    out["in_proj_b.weight"], out["in_proj_a.weight"] = b.flatten(0, 1), a.flatten(0, 1)
    return out


# -- memory: the state's fixed size against a full-attention layer's KV cache -------------------------------------

@dataclass(frozen=True)
class StateMemory:
    """Bytes one layer keeps between tokens: a Gated DeltaNet layer's state and convolution window, whatever the
    text's length, against one full-attention layer's KV cache at each length."""

    state_bytes: int  # H * Dk * Dv values: the recurrent states
    conv_bytes: int  # (conv_kernel - 1) positions of every q, k, v channel: what the next token's convolution reads
    kv_cache_bytes: dict[int, int]  # tokens -> 2 (keys and values) * n_kv_heads * head_dim * tokens values

    @property
    def fixed_bytes(self) -> int:
        """What a Gated DeltaNet layer keeps in all: the state and the convolution window."""
        return self.state_bytes + self.conv_bytes


def state_memory(config: GatedDeltaNetConfig, n_kv_heads: int, head_dim: int,
                 tokens: Sequence[int] = (1024, 32768, 1048576), *, state_bytes_per_value: int = 4,
                 bytes_per_value: int = 2) -> StateMemory:
    """A layer's memory between tokens (one sequence): the Gated DeltaNet layer's fixed state against a
    full-attention layer's KV cache (`n_kv_heads` key/value heads of `head_dim`) after each of `tokens`
    (default 1k, 32k and 1M, as powers of two). The state in float32 by default (transformers' recurrence keeps
    it so), the convolution window and the KV cache in `bytes_per_value` (2: bfloat16)."""
    c = config
    state = c.n_value_heads * c.key_dim * c.value_dim * state_bytes_per_value
    channels = 2 * c.n_key_heads * c.key_dim + c.n_value_heads * c.value_dim
    conv = (c.conv_kernel - 1) * channels * bytes_per_value
    per_token = 2 * n_kv_heads * head_dim * bytes_per_value
    return StateMemory(state, conv, {n: n * per_token for n in tokens})
