"""The speed-only code, kept out of the model a learner reads (`layers.py`, `decoder.py`): the same numbers
as the plain maths, computed faster. The plain attention is `layers.Attention.attend`; `attention_variant`
is the one place that chooses a faster one.

- `linear` / `Linear`: a one-row product (a generation step) split over the cores where the BLAS would
  run it on one, with the weights kept input-major in memory (`inference_layout_`);
- `fused_attention`: attention through torch's fused kernel (nothing recorded);
- `blocked_attention`: a long text's attention recorded in blocks of queries that each multiply only the
  keys they may see.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

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
    `inference_layout_`), the product splits along the input dimension into equal slices,
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
    if _BLAS_SPLITS_ONE_ROW:  # first: it decides alone, and every product of every step asks
        return 1
    in_features = weight.shape[1]
    if x.numel() != in_features or x.device.type != "cpu" or weight.stride(0) != 1:
        return 1
    if weight.dtype != torch.float32:  # bf16 partial sums would each be rounded: keep one accumulation
        return 1
    threads = torch.get_num_threads()
    if threads < 2:
        return 1
    chunks = 4 * threads  # a few slices per thread balance the load
    while in_features % chunks:
        chunks -= 1
    return chunks


class Linear(nn.Linear):
    """`nn.Linear` through `linear`: generation steps use every core."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


def inference_layout_(model: nn.Module) -> None:
    """Keep each projection matrix input-major in memory ((in, out), as HF's GPT-2 Conv1D stores it), the
    unembedding included: the same values and shapes, but one-row products, i.e. generation steps, run
    markedly faster on CPU BLAS and can be split over cores (see `linear`). An embedding tied to the
    unembedding reads the same tensor through a transposed view. In place."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.weight.data = module.weight.data.t().contiguous().t()


def hidden_keys(t_query: int, t_key: int, window: int | None = None, device: torch.device | None = None) -> Tensor:
    """Boolean (t_query, t_key) mask, True where a query may not see the key: the key lies after it, or,
    with a local `window`, `window` or more positions before it (a query sees itself and window - 1 keys
    before). The queries are the last `t_query` positions of the `t_key` keys (a KV cache holds the rest)."""
    offset = t_key - t_query
    q = torch.arange(t_query, device=device).unsqueeze(1) + offset
    k = torch.arange(t_key, device=device).unsqueeze(0)
    hidden = k > q
    if window is not None:
        hidden |= k <= q - window
    return hidden


def fused_attention(q: Tensor, k: Tensor, v: Tensor, *, window: int | None = None, scale: float | None = None,
                    dropout_p: float = 0.0) -> Tensor:
    """softmax(q k^T * scale + mask) v through torch's fused kernel: q (B, H, T, Dh), k and v (B, G, S, Dh),
    G dividing H (query head h reads key/value head h // (H / G)); the T queries are the last of the S
    positions. `scale` None: 1 / sqrt(Dh)."""
    T, S = q.shape[2], k.shape[2]
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    if window is None or S <= window:  # the window hides nothing here: plain causal attention
        if S == T:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale, **gqa)
        if T == 1:  # one new position after a cached prefix sees every key: no mask needed
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale, **gqa)
    visible = ~hidden_keys(T, S, window, q.device)  # queries continue a cached prefix, or a window hides keys
    return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, dropout_p=dropout_p, scale=scale, **gqa)


def _query_blocks(T: int, S: int) -> int:
    """How many blocks of queries `blocked_attention` splits T queries into (1: no split). Each block
    multiplies only the keys its last query may see, so about (n + 1) / 2n of the full product is
    computed; blocks of at least 64 queries keep each product large enough to run at full rate."""
    return min(8, T // 64) if S >= T else 1


AttentionVariant = Literal["fused", "blocked", "plain"]


def attention_variant(rec: Recorder | None, T: int, S: int, *, training: bool) -> AttentionVariant:
    """How attention computes T queries against S keys, the one place that chooses:

    - "fused": nothing to record or patch, so torch's fused kernel (`fused_attention`);
    - "blocked": a long text recorded, so blocks of queries against only the keys they see
      (`blocked_attention`: the same numbers up to float rounding, about half the work);
    - "plain": the maths step by step (`layers.Attention.attend`), whenever an experiment patches the
      scores or the pattern, dropout is on (training), or the text is short.
    """
    if rec is None:
        return "fused"
    if _query_blocks(T, S) > 1 and not training and not rec.wants("scores") and not rec.wants("pattern"):
        return "blocked"
    return "plain"


def blocked_attention(q: Tensor, k: Tensor, v: Tensor, rec: Recorder, *, scale: float,
                      window: int | None = None, softmax_in_float32: bool = False) -> Tensor:
    """`Attention.attend`'s maths for a long text, recording the pattern (B, H, T, S) and `z` (B, H, T, Dh)
    (`attention_variant` says when). q (B, H, T, Dh); k and v (B, G, S, Dh), query head h reading key/value
    head h // (H / G); the T queries are the last T of the S positions.

    The queries go in blocks: a block multiplies only the keys its queries may see, and the pattern
    elsewhere is filled with the zeros softmax would give there; the same values up to float rounding. The
    whole pattern is written only where the record keeps, observes or patches it: z needs only each block's
    part. No patch reaches the scores or the pattern here (those take the plain path).
    """
    B, H, T, Dh = q.shape
    G, S = k.shape[1], k.shape[2]
    R = H // G  # query heads per key/value head: heads g*R .. g*R+R-1 read key/value head g
    bias = torch.zeros(T, S, dtype=q.dtype, device=q.device).masked_fill_(hidden_keys(T, S, window, q.device),
                                                                         float("-inf"))
    kg, vg = k.reshape(B * G, S, Dh), v.reshape(B * G, S, Dh)

    def softmax(scores: Tensor) -> Tensor:
        if not softmax_in_float32 or scores.dtype == torch.float32:
            return torch.softmax(scores, dim=-1)  # without the dtype argument: its kernel is 2.5x faster on CPU
        return torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)

    def masked_scores(qg: Tensor, keys: Tensor, mask: Tensor) -> Tensor:
        """qg @ keys^T * scale + mask, one query head group per key/value head (mask repeated per head)."""
        mask = mask if R == 1 else mask.repeat(R, 1)
        if q.dtype == torch.float32:  # scale and mask fused into the product: -inf + anything = -inf
            return torch.baddbmm(mask, qg, keys.transpose(1, 2), alpha=scale)
        # bfloat16: round where transformers' eager attention rounds (the product, then the scaled product)
        return torch.bmm(qg, keys.transpose(1, 2)) * scale + mask

    pattern = torch.empty(B, H, T, S, dtype=q.dtype, device=q.device) if rec.records("pattern") else None
    z = torch.empty(B, H, T, Dh, dtype=q.dtype, device=q.device)
    z_g, q_g = z.view(B * G, R, T, Dh), q.reshape(B * G, R, T, Dh)
    size = -(-T // _query_blocks(T, S))
    for a in range(0, T, size):
        b = min(T, a + size)
        n, seen = b - a, S - T + b  # this block's queries, and the keys the last of them sees
        first = 0 if window is None else max(0, S - T + a - window + 1)  # the first key its first query sees
        qb = q_g[:, :, a:b].reshape(B * G, R * n, Dh)
        p = softmax(masked_scores(qb, kg[:, first:seen], bias[a:b, first:seen]))  # (B*G, R*n, seen - first)
        if pattern is not None:
            pattern_g = pattern.view(B * G, R, T, S)
            pattern_g[:, :, a:b, :first] = 0
            pattern_g[:, :, a:b, first:seen] = p.view(B * G, R, n, seen - first)
            pattern_g[:, :, a:b, seen:] = 0
        z_g[:, :, a:b] = torch.bmm(p, vg[:, first:seen]).view(B * G, R, n, Dh)
    if pattern is not None:
        rec("pattern", pattern)
    return rec("z", z)
