"""Compact tensor encodings for the JSON API: little-endian float16 or float32, base64, with the shape
and the dims from the name scheme, so a client can decode without guessing."""

from __future__ import annotations

import base64

import numpy as np
import torch
from torch import Tensor

DTYPES = {"float16": np.dtype("<f2"), "float32": np.dtype("<f4")}


def encode_array(t: Tensor | np.ndarray, dtype: str = "float16") -> str:
    """Base64 of the row-major little-endian bytes of `t` in `dtype`."""
    a = t.detach().to(torch.float32).cpu().numpy() if isinstance(t, Tensor) else np.asarray(t, np.float32)
    return base64.b64encode(np.ascontiguousarray(a, dtype=DTYPES[dtype]).tobytes()).decode("ascii")


def decode_array(data: str, shape: list[int] | tuple[int, ...], dtype: str = "float16") -> np.ndarray:
    """The inverse of `encode_array` (used by tests and Python clients), as float32."""
    a = np.frombuffer(base64.b64decode(data), dtype=DTYPES[dtype]).astype(np.float32)
    return a.reshape(shape)


def encode_u8(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype=np.uint8).tobytes()).decode("ascii")


def pooled_pattern(pattern: Tensor, size: int) -> Tensor:
    """Attention patterns (H, T, S) shrunk to at most (H, size, size) for an overview thumbnail.

    Cell (i, j) is the attention mass that the queries of group i give to the keys of group j,
    averaged over those queries: rows still sum to 1. With T <= size the pattern is returned as is.
    """
    H, T, S = pattern.shape
    if T <= size and S <= size:
        return pattern
    n = min(size, T)
    qb = torch.div(torch.arange(T) * n, T, rounding_mode="floor")  # group of each query
    kb = torch.div(torch.arange(S) * n, S, rounding_mode="floor")
    key_sum = torch.zeros(H, T, n).index_add_(2, kb, pattern.to(torch.float32))  # (H, T, n)
    q_sum = torch.zeros(H, n, n).index_add_(1, qb, key_sum)
    counts = torch.bincount(qb, minlength=n).clamp(min=1).to(torch.float32)
    return q_sum / counts[None, :, None]


def lower_triangle_u8(thumbs: Tensor) -> np.ndarray:
    """(L, H, n, n) values in [0, 1] -> uint8 (L, H, n(n+1)/2): row i keeps its entries 0..i, which is
    all a causal pattern has."""
    n = thumbs.shape[-1]
    a = thumbs.to(torch.float32).numpy()
    rows, cols = np.tril_indices(n)
    return np.rint(np.clip(a[..., rows, cols], 0, 1) * 255).astype(np.uint8)

