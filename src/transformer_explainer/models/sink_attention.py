"""gpt-oss's attention and mixture of experts, written to be read.

Attention with a sink. Each head h has one learned logit s_h (`sinks`) that joins every query's softmax as if it
were one more key, a key with no value:

    a_h(t, j) = exp(l_h(t, j)) / (exp(s_h) + sum_{j' visible} exp(l_h(t, j'))),   l = q k^T * scale
    z_h(t) = sum_j a_h(t, j) v_h(j)

so a row of the pattern over the keys sums to 1 - w_h(t), where w_h(t) = exp(s_h) / (the same denominator) is the
sink's weight (`attn.sink_weight`): the share of its attention a query gives to nothing. A head with nothing to
read in its window can put its weight on the sink rather than on some key. Layers alternate between a sliding
window (a query sees itself and the `window` - 1 keys before it) and full causal attention.

The mixture: the router's logits x W_r + b_r, the top_k of them per token, a softmax over those k alone (not over
all experts) for the weights. Each expert e is a clamped SwiGLU with biases:

    [gate, up] = x W_e + b_e          gate: the even columns, up: the odd ones (interleaved, not two halves)
    gate_c = min(gate, limit),  up_c = clamp(up, -limit, limit)        limit = swiglu_limit (7.0)
    act = gate_c * sigmoid(alpha * gate_c)                              alpha = swiglu_alpha (1.702)
    post = (up_c + 1) * act;   expert_out = post W_down_e + b_down_e

(gate * sigmoid(1.702 * gate) is the sigmoid approximation of GELU; the clamps keep one large activation from
dominating in low precision.)

Parameter names are transformers' (GptOssAttention: `q_proj`, `k_proj`, `v_proj`, `o_proj` with biases, `sinks`;
GptOssMLP: `router.weight`, `router.bias`, `experts.gate_up_proj` (E, D, 2M), `experts.gate_up_proj_bias`,
`experts.down_proj` (E, M, D), `experts.down_proj_bias`), so their weights load key for key. Numerics follow
transformers' eager path: the softmax over keys and sink in the model's dtype after subtracting the row's maximum,
the router in the model's dtype, each weighted expert output rounded to it and added in the order of the experts'
ids.

Dims: B batch, T positions, S keys, D d_model, H query heads, G key/value heads (query head h reads h // (H / G)),
Dh a head's width, E experts, K chosen per token, M an expert's width. Recorded (`name_options.SINK_ATTENTION_
ACTIVATIONS` under `attn.`, `name_options.CLAMPED_MOE_ACTIVATIONS` under `mlp.`): q, k, v, rot_q, rot_k, scores,
sink, pattern, sink_weight, z; router_logits, expert_indices, expert_weights, gate, up, gate_clamped, up_clamped,
act, post, expert_out, out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .kernels import Linear, hidden_keys
from .layers import apply_rope, record
from .recorder import Recorder


@dataclass(frozen=True)
class SinkAttentionConfig:
    """The shape of one gpt-oss attention layer (GptOssConfig's fields)."""

    d_model: int  # hidden_size
    n_heads: int  # num_attention_heads (H)
    n_kv_heads: int  # num_key_value_heads (G)
    head_dim: int  # Dh
    window: int | None = None  # a sliding layer's window (a query sees itself and window - 1 keys); None: full
    bias: bool = True  # attention_bias: biases on the four projections

    def __post_init__(self) -> None:
        if self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.n_heads} query heads cannot share {self.n_kv_heads} key/value heads evenly")
        if self.head_dim % 2:
            raise ValueError(f"a head of {self.head_dim} dimensions cannot be rotated: RoPE turns pairs")
        if self.window is not None and self.window < 1:
            raise ValueError(f"a window of {self.window} keys shows a query nothing, not even itself")

    @property
    def scale(self) -> float:
        return self.head_dim**-0.5

    @classmethod
    def from_hf(cls, config: Any, layer: int) -> SinkAttentionConfig:
        """Layer `layer` of a transformers GptOssConfig: its window where the layer is a sliding one."""
        sliding = config.layer_types[layer] == "sliding_attention"
        return cls(config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim,
                   config.sliding_window if sliding else None, bool(config.attention_bias))


class SinkAttention(nn.Module):
    """Causal grouped-query attention with a learned sink logit per head: x (B, T, D) -> (B, T, D)."""

    def __init__(self, config: SinkAttentionConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        self.q_proj = Linear(c.d_model, c.n_heads * c.head_dim, bias=c.bias)
        self.k_proj = Linear(c.d_model, c.n_kv_heads * c.head_dim, bias=c.bias)
        self.v_proj = Linear(c.d_model, c.n_kv_heads * c.head_dim, bias=c.bias)
        self.o_proj = Linear(c.n_heads * c.head_dim, c.d_model, bias=c.bias)
        self.sinks = nn.Parameter(torch.zeros(c.n_heads))  # s_h: one logit per query head

    def forward(self, x: Tensor, position_embeddings: tuple[Tensor, Tensor], rec: Recorder | None = None) -> Tensor:
        """`position_embeddings`: cos and sin (T, Dh/2) or (B, T, Dh/2), one per pair, as transformers' GptOss
        rotary embedding gives them (pairs (i, i + Dh/2))."""
        B, T, _ = x.shape
        c = self.config
        q = record(rec, "q", self.q_proj(x).view(B, T, c.n_heads, c.head_dim).transpose(1, 2))  # (B, H, T, Dh)
        k = record(rec, "k", self.k_proj(x).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2))  # (B, G, T, Dh)
        v = record(rec, "v", self.v_proj(x).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2))
        cos, sin = (torch.cat((r, r), dim=-1).unsqueeze(-3) for r in position_embeddings)  # each angle twice
        q, k = record(rec, "rot_q", apply_rope(q, cos, sin)), record(rec, "rot_k", apply_rope(k, cos, sin))
        z = self.attend(q, k, v, rec)  # (B, H, T, Dh)
        return self.o_proj(z.transpose(1, 2).reshape(B, T, c.n_heads * c.head_dim))  # heads side by side

    def attend(self, q: Tensor, k: Tensor, v: Tensor, rec: Recorder | None = None) -> Tensor:
        """softmax over [the visible keys' scaled scores, the head's sink] per head, the sink's column dropped
        before the values are read: q (B, H, T, Dh), k and v (B, G, S, Dh)."""
        B, H, T, _ = q.shape
        S = k.shape[2]
        group = H // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # query head h reads h // group
        scores = record(rec, "scores", q @ k.transpose(-1, -2))  # (B, H, T, S)
        logits = (scores * self.config.scale).masked_fill(hidden_keys(T, S, self.config.window, q.device),
                                                          float("-inf"))
        sink = record(rec, "sink", self.sinks.to(q.dtype))  # (H,)
        combined = torch.cat((logits, sink.view(1, H, 1, 1).expand(B, H, T, 1)), dim=-1)  # (B, H, T, S + 1)
        combined = combined - combined.max(dim=-1, keepdim=True).values  # as transformers: no overflow in bf16
        probs = torch.softmax(combined, dim=-1)
        pattern = record(rec, "pattern", probs[..., :-1].to(v.dtype))  # (B, H, T, S): rows sum to 1 - sink_weight
        record(rec, "sink_weight", probs[..., -1])  # (B, H, T): the share each query gives to no key
        return record(rec, "z", pattern @ v)


# -- the mixture of experts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClampedMoEConfig:
    """The shape of gpt-oss's mixture (GptOssConfig's fields)."""

    d_model: int  # hidden_size
    n_experts: int  # num_local_experts (E)
    top_k: int  # num_experts_per_tok (K)
    d_expert: int  # intermediate_size (M): an expert's width
    alpha: float = 1.702  # swiglu_alpha: the sigmoid's slope in gate * sigmoid(alpha * gate)
    limit: float = 7.0  # swiglu_limit: gate clamped above at it, up to [-limit, limit]

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"{self.top_k} experts cannot be chosen from {self.n_experts}")
        if self.limit <= 0:
            raise ValueError(f"a clamp limit of {self.limit} leaves the up branch no room")

    @classmethod
    def from_hf(cls, config: Any) -> ClampedMoEConfig:
        return cls(config.hidden_size, config.num_local_experts, config.num_experts_per_tok,
                   config.intermediate_size, float(config.swiglu_alpha), float(config.swiglu_limit))


class TopKRouter(nn.Module):
    """One logit per expert, x W_r^T + b_r, in the model's dtype."""

    def __init__(self, d_model: int, n_experts: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_experts, d_model))
        self.bias = nn.Parameter(torch.zeros(n_experts))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)


class ClampedExperts(nn.Module):
    """E clamped-SwiGLU experts with biases, their matrices stacked as x @ W (not W x): expert e's gate and up
    projections are the even and odd columns of gate_up_proj[e] (D, 2M), its down projection down_proj[e] (M, D)."""

    def __init__(self, d_model: int, n_experts: int, width: int, alpha: float, limit: float) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.zeros(n_experts, d_model, 2 * width))
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(n_experts, 2 * width))
        self.down_proj = nn.Parameter(torch.zeros(n_experts, width, d_model))
        self.down_proj_bias = nn.Parameter(torch.zeros(n_experts, d_model))
        self.alpha, self.limit = alpha, limit

    def forward(self, x: Tensor, expert: int) -> dict[str, Tensor]:
        """Expert `expert` on the tokens x (N, D): each stage (N, M), and its output `expert_out` (N, D)."""
        gate_up = x @ self.gate_up_proj[expert] + self.gate_up_proj_bias[expert]  # (N, 2M)
        gate, up = gate_up[..., 0::2], gate_up[..., 1::2]
        gate_c = gate.clamp(max=self.limit)  # only above: a very negative gate already gives act ~ 0
        up_c = up.clamp(-self.limit, self.limit)
        act = gate_c * torch.sigmoid(gate_c * self.alpha)
        post = (up_c + 1) * act
        out = post @ self.down_proj[expert] + self.down_proj_bias[expert]
        return {"gate": gate, "up": up, "gate_clamped": gate_c, "up_clamped": up_c, "act": act, "post": post,
                "expert_out": out}


EXPERT_STAGES = ("gate", "up", "gate_clamped", "up_clamped", "act", "post")  # (N, M) each, per (token, choice)


class ClampedMoE(nn.Module):
    """gpt-oss's mixture of experts: x (B, T, D) -> (B, T, D); see the module's docstring for the maths."""

    def __init__(self, config: ClampedMoEConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        self.router = TopKRouter(c.d_model, c.n_experts)
        self.experts = ClampedExperts(c.d_model, c.n_experts, c.d_expert, c.alpha, c.limit)

    def route(self, x: Tensor, rec: Recorder | None = None) -> tuple[Tensor, Tensor]:
        """The experts each token goes to (B, T, K), the highest logit first, and their weights (B, T, K): a softmax
        over the K chosen logits alone, so they sum to 1 whatever the other experts' logits."""
        logits = record(rec, "router_logits", self.router(x))  # (B, T, E)
        top, chosen = torch.topk(logits, self.config.top_k, dim=-1)
        weights = torch.softmax(top, dim=-1)
        return record(rec, "expert_indices", chosen), record(rec, "expert_weights", weights)

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        B, T, D = x.shape
        K, M = self.config.top_k, self.config.d_expert
        chosen, weights = self.route(x, rec)
        flat, pairs_expert = x.reshape(B * T, D), chosen.reshape(-1)  # pair p = token p // K, choice p % K
        stages = {name: x.new_zeros(B * T * K, M) for name in (EXPERT_STAGES if rec is not None else ())}
        expert_out = x.new_zeros(B * T * K, D)
        order = torch.argsort(pairs_expert, stable=True)
        start = 0
        for expert, n in enumerate(torch.bincount(pairs_expert, minlength=self.config.n_experts).tolist()):
            if n:  # one product per expert, on the tokens sent to it
                pairs = order[start:start + n]
                got = self.experts(flat[pairs // K], expert)
                expert_out[pairs] = got["expert_out"]
                for name, value in stages.items():
                    value[pairs] = got[name]
                start += n
        for name, value in stages.items():
            record(rec, name, value.view(B, T, K, M))
        expert_out = record(rec, "expert_out", expert_out.view(B, T, K, D))
        return record(rec, "out", weighted_sum(expert_out, weights, chosen))


def weighted_sum(expert_out: Tensor, weights: Tensor, chosen: Tensor) -> Tensor:
    """sum_k weights[k] * expert_out[k] per token, (B, T, D), added as transformers adds them so that bfloat16
    agrees too: each term rounded to the model's dtype, the experts in the order of their ids."""
    terms = (expert_out * weights.unsqueeze(-1)).to(expert_out.dtype)  # (B, T, K, D)
    terms = terms.gather(2, chosen.argsort(dim=-1).unsqueeze(-1).expand_as(terms))
    total = terms[:, :, 0]
    for k in range(1, terms.shape[2]):
        total = total + terms[:, :, k]
    return total
