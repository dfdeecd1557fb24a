"""The GPT-2 building blocks, one small module per concept (nanoGPT's layout and parameter names).

Every module has one forward with an optional `rec`: with `rec=None` it takes the fast path (fused
kernels, nothing kept); with a `Recorder` it computes each step explicitly and records it by name.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import DecoderConfig
from .kv_cache import KV, KVSlot
from .recorder import Recorder

# MKL spreads a one-row product by an input-major matrix over torch's threads itself: measured with 2
# threads on GPT-2 small's shape (weights beyond the cache), one addmm per layer's four products took
# 1189 us against 1230 for the split below, the unembedding 5.3 against 5.8 ms, and greedy generation
# ran 2-4% faster (paired rounds). Other BLAS builds may multiply a single row on one thread.
_BLAS_SPLITS_ONE_ROW = torch.backends.mkl.is_available()


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`F.linear` (weight (out, in)), with one-row products (a generation step) read on every core.

    Some CPU BLAS builds multiply a single row by a matrix on one thread, and that product is bound
    by how fast the weight streams from memory. There, when the weight is input-major in memory (see
    `GPT.inference_layout_`), the product splits along the input dimension into equal slices,
    multiplied as one batched matmul that torch spreads over its threads; the partial sums are
    then added. Same values up to float rounding (the order of the additions changes). With MKL,
    which spreads such a product over the threads itself, it is one `F.linear`.
    """
    out_features = weight.shape[0]
    chunks = _row_chunks(x, weight)
    if chunks == 1:
        return F.linear(x, weight, bias)
    part = torch.bmm(x.reshape(chunks, 1, -1), weight.t().view(chunks, -1, out_features))
    y = part.sum(0) if bias is None else torch.add(bias, part.sum(0))
    return y.view(*x.shape[:-1], out_features)


def _row_chunks(x: Tensor, weight: Tensor) -> int:
    in_features = weight.shape[1]
    if x.numel() != in_features or x.device.type != "cpu" or weight.stride(0) != 1:
        return 1
    if weight.dtype != torch.float32:  # bf16 partial sums would each be rounded: keep one accumulation
        return 1
    threads = torch.get_num_threads()
    if threads < 2 or _BLAS_SPLITS_ONE_ROW:
        return 1
    chunks = 4 * threads  # a few slices per thread balance the load
    while in_features % chunks:
        chunks -= 1
    return chunks


class DecoderBase(nn.Module):
    """What both decoder families (`GPT`, `LlamaLM`) share beyond their maths."""

    def inference_layout_(self) -> DecoderBase:
        """Keep each projection matrix input-major in memory ((in, out), as HF's GPT-2 Conv1D stores it),
        the unembedding included: the same values and shapes, but one-row products, i.e. generation
        steps, run markedly faster on CPU BLAS and can be split over cores (see `Linear`). An embedding
        tied to the unembedding reads the same tensor through a transposed view. In place; returns the
        model."""
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    module.weight.data = module.weight.data.t().contiguous().t()
        return self

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


class Linear(nn.Linear):
    """`nn.Linear` through `linear`: generation steps use every core."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


class LayerNorm(nn.Module):
    """LayerNorm with a bias; records its mean, variance and normalised vector when asked."""

    def __init__(self, ndim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim))
        self.eps = eps

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


def causal_mask(t_query: int, t_key: int, device: torch.device | None = None) -> Tensor:
    """Boolean (t_query, t_key) mask, True where the key lies after the query and must be hidden.

    The queries are the last `t_query` positions of the `t_key` keys (a KV cache holds the rest).
    """
    offset = t_key - t_query
    q = torch.arange(t_query, device=device).unsqueeze(1) + offset
    k = torch.arange(t_key, device=device).unsqueeze(0)
    return k > q


def _query_blocks(T: int, S: int) -> int:
    """How many blocks of queries `recorded_attention` splits T queries into (1: no split). Each block
    multiplies only the keys its last query may see, so about (n + 1) / 2n of the full product is
    computed; blocks of at least 64 queries keep each product large enough to run at full rate."""
    return min(8, T // 64) if S >= T else 1


def recorded_attention(q: Tensor, k: Tensor, v: Tensor, rec: Recorder, *, softmax_in_float32: bool = False,
                       dropout: nn.Module | None = None) -> Tensor:
    """Causal attention step by step, recording the pattern (B, H, T, S) and the output `z` (B, H, T, Dh).

    q is (B, H, T, Dh); k and v are (B, G, S, Dh) with G dividing H: query head h reads key/value head
    h // (H / G) (G = H for GPT-2). The T queries are the last T of the S positions (a KV cache holds
    the others). Scores are scaled by 1/sqrt(Dh), masked with -inf above the diagonal, as transformers
    adds the mask, and softmaxed (in float32 with `softmax_in_float32`, as Llama's attention does).

    Long inputs go in blocks of queries: a block multiplies only the keys its queries may see, and the
    pattern above the diagonal is filled with the zeros softmax would give there; the same values up
    to float rounding, with about half the attention's work. Raw scores are not stored (the trace
    recomputes them from q and k) unless an experiment patches them, and a patch on `scores` or
    `pattern` takes the one-product path, so the patched values are what `z` is computed from.
    """
    B, H, T, Dh = q.shape
    G, S = k.shape[1], k.shape[2]
    R = H // G  # query heads per key/value head: heads g*R .. g*R+R-1 read key/value head g
    scale = 1.0 / math.sqrt(Dh)
    bias = torch.zeros(T, S, dtype=q.dtype, device=q.device).masked_fill_(causal_mask(T, S, q.device), float("-inf"))
    kg, vg = k.reshape(B * G, S, Dh), v.reshape(B * G, S, Dh)

    def softmax(scores: Tensor) -> Tensor:
        if not softmax_in_float32 or scores.dtype == torch.float32:
            return torch.softmax(scores, dim=-1)  # without the dtype argument: its kernel is 2.5x faster on CPU
        return torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)

    blocks = _query_blocks(T, S)
    if blocks < 2 or dropout is not None or rec.wants("scores") or rec.wants("pattern"):
        qg = q.reshape(B * G, R * T, Dh)  # each group's queries stacked: one product per key/value head
        if rec.wants("scores"):  # an experiment edits the raw scores
            scores = rec.derived("scores", torch.bmm(qg, kg.transpose(1, 2)).view(B, H, T, S))
            masked = scores * scale + bias
        else:  # scale and mask fused into the product: -inf + anything = -inf
            masked = torch.baddbmm(bias if R == 1 else bias.repeat(R, 1), qg, kg.transpose(1, 2),
                                   alpha=scale).view(B, H, T, S)
        pattern = rec("pattern", softmax(masked))
        if dropout is not None:
            pattern = dropout(pattern)
        z = torch.bmm(pattern.reshape(B * G, R * T, S), vg)
        return rec("z", z.view(B, H, T, Dh))

    pattern = torch.empty(B, H, T, S, dtype=q.dtype, device=q.device)
    z = torch.empty(B, H, T, Dh, dtype=q.dtype, device=q.device)
    pattern_g, z_g, q_g = pattern.view(B * G, R, T, S), z.view(B * G, R, T, Dh), q.reshape(B * G, R, T, Dh)
    size = -(-T // blocks)
    for a in range(0, T, size):
        b = min(T, a + size)
        n, seen = b - a, S - T + b  # this block's queries, and the keys the last of them sees
        qb = q_g[:, :, a:b].reshape(B * G, R * n, Dh)
        block_bias = bias[a:b, :seen]
        scores = torch.baddbmm(block_bias if R == 1 else block_bias.repeat(R, 1), qb, kg[:, :seen].transpose(1, 2),
                               alpha=scale)
        p = softmax(scores)  # (B*G, R*n, seen)
        pattern_g[:, :, a:b, :seen] = p.view(B * G, R, n, seen)
        pattern_g[:, :, a:b, seen:] = 0
        z_g[:, :, a:b] = torch.bmm(p, vg[:, :seen]).view(B * G, R, n, Dh)
    rec("pattern", pattern)
    return rec("z", z)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.c_attn = Linear(config.n_embd, 3 * config.n_embd)  # Q, K, V for all heads at once
        self.c_proj = Linear(config.n_embd, config.n_embd)  # W_O
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.dropout = config.dropout

    def forward(self, x: Tensor, rec: Recorder | None = None, past: KVSlot | None = None) -> tuple[Tensor, KV]:
        """`past`: this block's place in a KV cache, extended with this call's keys and values."""
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, H, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        if past is not None:
            k, v = past.extend(k, v)  # (B, H, S, hs): the cached positions, then these
        S = k.shape[2]
        if rec is None:
            p = self.dropout if self.training else 0.0
            if S == T:
                z = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
            elif T == 1:  # one new position after a cached prefix sees every key: no mask needed
                z = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
            else:  # queries continue a cached prefix: they may see every earlier key
                mask = ~causal_mask(T, S, x.device)
                z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        else:
            q, k, v = rec("q", q), rec("k", k), rec("v", v)
            z = recorded_attention(q, k, v, rec, dropout=self.attn_dropout if self.training else None)
        y = z.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again
        y = self.resid_dropout(self.c_proj(y))
        return y, (k, v)


class MLP(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.c_fc = Linear(config.n_embd, config.d_mlp)
        self.c_proj = Linear(config.d_mlp, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)
        self.approximate = "none" if config.activation == "gelu" else "tanh"

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        if rec is None:
            return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate=self.approximate)))
        pre = rec("pre", self.c_fc(x))
        post = rec("post", F.gelu(pre, approximate=self.approximate))
        return self.dropout(self.c_proj(post))


class Block(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, config.layer_norm_epsilon)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, config.layer_norm_epsilon)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, rec: Recorder | None = None, past: KVSlot | None = None) -> tuple[Tensor, KV]:
        if rec is None:
            attn_out, present = self.attn(self.ln_1(x), None, past)
            x = x + attn_out
            return x + self.mlp(self.ln_2(x)), present
        x = rec("resid_pre", x)
        attn_out, present = self.attn(self.ln_1(x, rec.scope("ln1")), rec.scope("attn"), past)
        resid_mid = rec("resid_mid", x + rec("attn_out", attn_out))
        mlp_out = rec("mlp_out", self.mlp(self.ln_2(resid_mid, rec.scope("ln2")), rec.scope("mlp")))
        return rec("resid_post", resid_mid + mlp_out), present
