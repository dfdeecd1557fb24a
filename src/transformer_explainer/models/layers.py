"""The parts a decoder block is built from, one small module per concept: the two norms, rotary positions,
attention, the two MLPs and the mixture of experts. Which of them a family uses, and with which options, its
declaration says (`families/`); `decoder.py` composes them.

Every module has one forward with an optional `rec`: with `rec=None` it takes the fast path (fused
kernels, nothing kept); with a `Recorder` it computes each step explicitly and records it by name.
The attention maths is `Attention.attend`; the speed-only code (the one-row product, fused and blocked
attention, and `attention_variant`, which chooses between them) is in `kernels.py`.

Numerics follow transformers' implementation of each family, so the numbers agree in float32 and in
bfloat16: RMSNorm and the rotation angles are computed in float32 and cast back; softmax runs in
float32 for the rotary families; Gemma's norm multiplies by 1 + weight before the cast.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import DecoderConfig, RopeScaling
from .kernels import Linear, attention_variant, blocked_attention, fused_attention, hidden_keys
from .kv_cache import KV, KVSlot
from .recorder import Recorder, scope


def record(rec: Recorder | None, name: str, value: Tensor) -> Tensor:
    """`rec(name, value)`, or `value` itself on the fast path."""
    return value if rec is None else rec(name, value)


# -- norms -------------------------------------------------------------------------------------------------


class LayerNorm(nn.Module):
    """LayerNorm with a bias (GPT-2); records its mean, variance and normalised vector when asked."""

    def __init__(self, ndim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim))
        self.eps = eps

    @property
    def scale(self) -> Tensor:
        return self.weight

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        if rec is None:
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        mean = x.mean(dim=-1, keepdim=True)  # (B, T, 1)
        centered = x - mean
        var = centered.square().mean(dim=-1, keepdim=True)  # biased, as LayerNorm uses
        rec("mean", mean.squeeze(-1))
        rec("var", var.squeeze(-1))
        normalized = rec("normalized", centered * torch.rsqrt(var + self.eps))
        return rec("out", torch.addcmul(self.bias, normalized, self.weight))


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * scale, computed in float32 as transformers does. The scale is the weight
    (Llama, Qwen), or 1 + weight with `offset` (Gemma, whose weights start at 0), multiplied before the
    cast back to the input's dtype."""

    def __init__(self, ndim: int, eps: float, offset: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(ndim) if offset else torch.ones(ndim))
        self.eps = eps
        self.offset = offset

    @property
    def scale(self) -> Tensor:
        """What the normalised vector is multiplied by (Gemma's 1 + weight in float32, as the forward has it)."""
        return 1.0 + self.weight.to(torch.float32) if self.offset else self.weight

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        dtype = x.dtype
        x32 = x.to(torch.float32)
        ms = x32.square().mean(dim=-1, keepdim=True)
        normalized32 = x32 * torch.rsqrt(ms + self.eps)
        if rec is not None:
            rec("rms", torch.sqrt(ms + self.eps).squeeze(-1).to(dtype))
            normalized = rec("normalized", normalized32.to(dtype))
            if rec.wants("normalized"):  # an experiment's edit flows on
                normalized32 = normalized.to(torch.float32)
        if self.offset:
            out = (normalized32 * (1.0 + self.weight.to(torch.float32))).to(dtype)
        else:
            out = self.weight * (normalized32.to(dtype) if rec is None else normalized)
        return record(rec, "out", out)


def make_norm(config: DecoderConfig, ndim: int | None = None) -> LayerNorm | RMSNorm:
    """The family's norm over `ndim` values (default: the residual stream's width)."""
    n = config.n_embd if ndim is None else ndim
    if config.arch.norm == "layer":
        return LayerNorm(n, config.layer_norm_epsilon)
    return RMSNorm(n, config.layer_norm_epsilon, config.arch.norm_offset)


# -- rotary positions ----------------------------------------------------------------------------------------


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling | None = None) -> Tensor:
    """The rotation frequency of each pair of a head's dimensions, theta^(-2i/Dh); Llama 3.1's scaling
    (transformers' `_compute_llama3_parameters`) or a linear one where the config has it."""
    # on the default device: built under `torch.device("meta")` (loading), it costs nothing until
    # `finish_loading_` computes it for a config whose shapes the weight files have confirmed
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=torch.get_default_device()).to(torch.float32)
    exponents = exponents / head_dim
    inv_freq = 1.0 / (theta**exponents)
    s = scaling
    if s is None:
        return inv_freq
    if s.rope_type == "linear":
        return inv_freq / s.factor
    assert s.low_freq_factor is not None and s.high_freq_factor is not None
    assert s.original_max_position_embeddings is not None
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor
                                                                                  - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension: dimension i pairs with i + Dh/2."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each (i, i + Dh/2) pair of x (B, heads, T, Dh) by its position's angle."""
    return x * cos + rotate_half(x) * sin


Rotation = tuple[Tensor, Tensor]  # cos and sin (T, Dh) of the positions of one call


def rotation(inv_freq: Tensor, start: int, T: int, dtype: torch.dtype, device: torch.device
             ) -> tuple[Tensor, Rotation]:
    """Angles (T, Dh/2) of positions start..start+T-1, and their cos and sin (T, Dh) in `dtype`."""
    pos = torch.arange(start, start + T, device=device, dtype=torch.float32)
    angles = pos[:, None] * inv_freq.to(device)[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    return angles, (emb.cos().to(dtype), emb.sin().to(dtype))


# -- attention -------------------------------------------------------------------------------------------------


class Attention(nn.Module):
    """Causal self-attention. Queries, keys and values per head from one projection (GPT-2) or three;
    grouped-query heads (n_head // n_kv_heads query heads share each key/value head: query head h reads
    key/value head h // group); with the family's options an RMSNorm over each head's query and key
    (QK-norm), rotary positions, and a local window in the layers the config marks local."""

    def __init__(self, config: DecoderConfig, layer: int) -> None:
        super().__init__()
        a = config.arch
        D, H, G, Dh = config.n_embd, config.n_head, config.n_kv_heads, config.head_dim
        assert G is not None and Dh is not None
        self.n_head, self.n_kv_heads, self.head_dim = H, G, Dh
        if a.qkv == "fused":
            self.qkv_proj = Linear(D, (H + 2 * G) * Dh, bias=config.qkv_bias)  # Q, K, V for all heads at once
        else:
            self.q_proj = Linear(D, H * Dh, bias=config.qkv_bias)
            self.k_proj = Linear(D, G * Dh, bias=config.qkv_bias)
            self.v_proj = Linear(D, G * Dh, bias=config.qkv_bias)
        if a.qk_norm:  # over each head's Dh values, or (OLMoE) over all heads' together
            whole = a.qk_norm_scope == "projection"
            self.q_norm = make_norm(config, H * Dh if whole else Dh)
            self.k_norm = make_norm(config, G * Dh if whole else Dh)
        self.qk_norm_over_heads = a.qk_norm and a.qk_norm_scope == "projection"
        self.o_proj = Linear(H * Dh, D, bias=config.out_bias)
        self.rotary = a.positions == "rope"
        self.window = config.window(layer)  # None: every earlier position
        self.attn_scale = config.attn_scale  # 1 / sqrt(Dh), or Gemma's 1 / sqrt(query_pre_attn_scalar)
        self.scale = None if config.query_pre_attn_scalar is None else config.attn_scale  # the fused kernel's: None
        self.softmax_in_float32 = a.softmax_in_float32
        self.dropout = config.dropout  # training only (GPT-2's); inactive at inference
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries (B, H, T, Dh), keys and values (B, G, T, Dh) of the input x (B, T, D)."""
        B, T, _ = x.shape
        H, G, Dh = self.n_head, self.n_kv_heads, self.head_dim
        if hasattr(self, "qkv_proj"):
            q, k, v = self.qkv_proj(x).split((H * Dh, G * Dh, G * Dh), dim=2)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return (q.view(B, T, H, Dh).transpose(1, 2), k.view(B, T, G, Dh).transpose(1, 2),
                v.view(B, T, G, Dh).transpose(1, 2))

    def norm_qk(self, q: Tensor, k: Tensor, rec: Recorder | None = None) -> tuple[Tensor, Tensor]:
        """The queries and keys after the family's QK-norm (as they are without one)."""
        if self.qk_norm_over_heads:  # OLMoE: all heads' queries normed together, all keys together
            q = _split_heads(self.q_norm(_join_heads(q), scope(rec, "q_norm")), self.n_head)
            k = _split_heads(self.k_norm(_join_heads(k), scope(rec, "k_norm")), self.n_kv_heads)
        elif hasattr(self, "q_norm"):  # QK-norm: each head's query and key to a fixed size
            q, k = self.q_norm(q, scope(rec, "q_norm")), self.k_norm(k, scope(rec, "k_norm"))
        return q, k

    def forward(self, x: Tensor, rope: Rotation | None, rec: Recorder | None = None,
                past: KVSlot | None = None) -> tuple[Tensor, KV]:
        """`rope`: cos and sin of this call's positions (rotary families); `past`: this block's place in a
        KV cache, extended with this call's keys and values."""
        B, T, _ = x.shape
        q, k, v = self.project(x)
        q = record(rec, "q", q)
        if self.rotary:  # the keys of the new positions as projected (GPT-2 records them with the cached ones)
            k = record(rec, "k", k)
        q, k = self.norm_qk(q, k, rec)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if past is not None:
            k, v = past.extend(k, v)  # (B, G, S, Dh): the cached positions, then these
        variant = attention_variant(rec, T, k.shape[2], training=self.training)
        if variant == "fused":
            z = fused_attention(q, k, v, window=self.window, scale=self.scale,
                                dropout_p=self.dropout if self.training else 0.0)
        else:
            assert rec is not None
            if self.rotary:
                q, k = rec("rot_q", q), rec("rot_k", k)
            else:
                k = rec("k", k)
            v = rec("v", v)
            if variant == "blocked":
                z = blocked_attention(q, k, v, rec, scale=self.attn_scale, window=self.window,
                                      softmax_in_float32=self.softmax_in_float32)
            else:
                z = self.attend(q, k, v, rec)
        y = self.o_proj(z.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim))  # heads side by side
        if self.training and self.dropout:
            y = self.resid_dropout(y)
        return y, (k, v)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, rec: Recorder) -> Tensor:
        """softmax(q k^T * scale + mask) v, each step recorded: the attention maths. q is (B, H, T, Dh); k and
        v are (B, G, S, Dh), query head h reading key/value head h // (H / G). The T queries are the last T of
        the S positions (a KV cache holds the others). Raw scores are not stored (the trace recomputes them
        from q and k) unless an experiment patches them. `kernels.blocked_attention` computes the same for
        long texts, faster."""
        B, H, T, Dh = q.shape
        G, S = k.shape[1], k.shape[2]
        # each key/value head's H / G query heads stacked: one product per key/value head
        qg, kg, vg = q.reshape(B * G, H // G * T, Dh), k.reshape(B * G, S, Dh), v.reshape(B * G, S, Dh)
        # 0 where the query sees the key; -inf where the key lies after it, or outside a local window
        mask = torch.zeros(T, S, dtype=q.dtype, device=q.device).masked_fill_(
            hidden_keys(T, S, self.window, q.device), float("-inf"))
        if q.dtype != torch.float32 or rec.wants("scores"):
            scores = rec.derived("scores", torch.bmm(qg, kg.transpose(1, 2)).view(B, H, T, S))  # q k^T, (B, H, T, S)
            masked = scores * self.attn_scale + mask  # rounded step by step, as transformers' eager attention is
        else:  # float32: the same in one product, the scale and the mask fused in
            masked = torch.baddbmm(mask.repeat(H // G, 1), qg, kg.transpose(1, 2), alpha=self.attn_scale)
        masked = masked.view(B, H, T, S)
        if self.softmax_in_float32 and q.dtype != torch.float32:  # the rotary families, as transformers has it
            pattern = torch.softmax(masked, dim=-1, dtype=torch.float32).to(q.dtype)
        else:
            pattern = torch.softmax(masked, dim=-1)
        pattern = rec("pattern", pattern)  # (B, H, T, S): each row sums to 1
        if self.training:
            pattern = self.attn_dropout(pattern)
        z = torch.bmm(pattern.reshape(B * G, H // G * T, S), vg)  # each query's weighted sum of the values
        return rec("z", z.view(B, H, T, Dh))


def _join_heads(x: Tensor) -> Tensor:
    """(B, heads, T, Dh) -> (B, T, heads * Dh): the heads side by side, as the projection made them."""
    B, n, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, n * Dh)


def _split_heads(x: Tensor, n: int) -> Tensor:
    """(B, T, n * Dh) -> (B, n, T, Dh)."""
    B, T, _ = x.shape
    return x.view(B, T, n, -1).transpose(1, 2)


# -- MLPs ------------------------------------------------------------------------------------------------------


class GeluMLP(nn.Module):
    """down(GELU(up(x))) (GPT-2)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        assert config.d_mlp is not None
        self.up_proj = Linear(config.n_embd, config.d_mlp, bias=config.mlp_bias)
        self.down_proj = Linear(config.d_mlp, config.n_embd, bias=config.mlp_bias)
        self.dropout = nn.Dropout(config.dropout)
        self.approximate = "none" if config.activation == "gelu" else "tanh"

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        if rec is None:
            y = self.down_proj(F.gelu(self.up_proj(x), approximate=self.approximate))
        else:
            pre = rec("pre", self.up_proj(x))
            y = self.down_proj(rec("post", F.gelu(pre, approximate=self.approximate)))
        return self.dropout(y) if self.training else y


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)): the gate decides, per hidden unit, how much of `up` passes. act is SiLU
    (SwiGLU: Llama, Qwen, and every expert of a mixture) or tanh-GELU (GeGLU: Gemma). `width`: the hidden
    layer's (default the config's d_mlp)."""

    def __init__(self, config: DecoderConfig, width: int | None = None) -> None:
        super().__init__()
        M = width or config.d_mlp
        assert M is not None
        self.gate_proj = Linear(config.n_embd, M, bias=config.mlp_bias)
        self.up_proj = Linear(config.n_embd, M, bias=config.mlp_bias)
        self.down_proj = Linear(M, config.n_embd, bias=config.mlp_bias)
        self.gelu = config.activation != "silu"

    def act(self, gate: Tensor) -> Tensor:
        return F.gelu(gate, approximate="tanh") if self.gelu else F.silu(gate)

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        if rec is None:
            return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
        gate = rec("gate", self.gate_proj(x))
        up = rec("up", self.up_proj(x))
        act = rec("act", self.act(gate))
        return self.down_proj(rec("post", act * up))


class MoeMLP(nn.Module):
    """A mixture of experts (Mixtral, Qwen3-MoE, OLMoE): `n_experts` gated MLPs and a router. For each token
    the router scores every expert (a linear map of the token's vector), a softmax over all experts turns the
    scores into probabilities, and the token goes to the `top_k` most probable experts only. Their outputs
    are added, each times its weight: its probability, renormalised over the chosen experts to sum to 1
    where the model does so (`norm_topk_prob`; Mixtral always). The other experts do no work for that token.

    Computed as transformers does, so the numbers agree: softmax in float32, top-k of the probabilities, the
    weighted outputs summed over each token's chosen experts in the order top-k lists them (the model's
    dtype for the weights, or float32 for Mixtral's). The tokens are gathered expert by expert, so each expert
    multiplies the tokens sent to it in one product, and its outputs go back to their (token, choice) slot:
    `expert_out`, (B, T, top_k, D)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        assert config.n_experts is not None and config.top_k is not None
        self.router = Linear(config.n_embd, config.n_experts, bias=False)
        self.experts = nn.ModuleList([GatedMLP(config, config.d_expert) for _ in range(config.n_experts)])
        self.top_k = config.top_k
        self.renormalise = config.norm_topk_prob
        self.weights_in_float32 = config.arch.expert_weights_in_float32

    def route(self, x: Tensor, rec: Recorder | None = None) -> tuple[Tensor, Tensor]:
        """The experts each token of x (B, T, D) goes to, (B, T, top_k), most probable first, and their weights."""
        logits = record(rec, "router_logits", self.router(x))  # (B, T, E)
        probs = record(rec, "router_probs", torch.softmax(logits.float(), dim=-1))
        top, chosen = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalise:
            top = top / top.sum(dim=-1, keepdim=True)
        weights = top if self.weights_in_float32 else top.to(x.dtype)
        return record(rec, "expert_indices", chosen), record(rec, "expert_weights", weights)

    def expert_outputs(self, x: Tensor, chosen: Tensor) -> Tensor:
        """Each (token, choice) pair's expert output, (N * top_k, D), for tokens x (N, D) and their experts
        `chosen` (N * top_k,): the pairs grouped by expert, one product per expert on the tokens it got."""
        order = torch.argsort(chosen, stable=True)
        counts = torch.bincount(chosen, minlength=len(self.experts)).tolist()
        out = x.new_empty(chosen.shape[0], x.shape[-1])
        start = 0
        for expert, n in zip(self.experts, counts, strict=True):
            if n:
                pairs = order[start:start + n]
                out[pairs] = expert(x[pairs // self.top_k])
                start += n
        return out

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        B, T, D = x.shape
        chosen, weights = self.route(x, rec)
        out = self.expert_outputs(x.reshape(B * T, D), chosen.reshape(-1)).view(B, T, self.top_k, D)
        out = record(rec, "expert_out", out)
        y = (out * weights.unsqueeze(-1)).sum(dim=2)  # each token's chosen experts, weighted
        return record(rec, "out", y.to(x.dtype))


def make_mlp(config: DecoderConfig, layer: int) -> GeluMLP | GatedMLP | MoeMLP:
    """Block `layer`'s MLP: the family's kind (a mixture of experts where the config gives the block experts)."""
    if config.arch.mlp == "gelu":
        return GeluMLP(config)
    return MoeMLP(config) if config.has_experts(layer) else GatedMLP(config)
