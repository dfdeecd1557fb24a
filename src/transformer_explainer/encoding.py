"""Compact tensor encodings for the JSON API: little-endian float16 or float32, base64, with the shape
and the dims from the name scheme, so a client can decode without guessing."""

from __future__ import annotations

import base64
import json

import numpy as np
import torch
from torch import Tensor

DTYPES = {"float16": np.dtype("<f2"), "float32": np.dtype("<f4")}


def encode_array(t: Tensor | np.ndarray, dtype: str = "float16") -> str:
    """Base64 of the row-major little-endian bytes of `t` in `dtype`."""
    a = t.detach().to("cpu", torch.float32).numpy() if isinstance(t, Tensor) else np.asarray(t, np.float32)
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
    n, device = min(size, T), pattern.device
    qb = torch.div(torch.arange(T, device=device) * n, T, rounding_mode="floor")  # group of each query
    kb = torch.div(torch.arange(S, device=device) * n, S, rounding_mode="floor")
    key_sum = torch.zeros(H, T, n, device=device).index_add_(2, kb, pattern.to(torch.float32))  # (H, T, n)
    q_sum = torch.zeros(H, n, n, device=device).index_add_(1, qb, key_sum)
    counts = torch.bincount(qb, minlength=n).clamp(min=1).to(torch.float32)
    return q_sum / counts[None, :, None]


def lower_triangle_u8(thumbs: Tensor) -> np.ndarray:
    """(L, H, n, n) values in [0, 1] -> uint8 (L, H, n(n+1)/2): row i keeps its entries 0..i, which is
    all a causal pattern has."""
    n = thumbs.shape[-1]
    a = thumbs.to("cpu", torch.float32).numpy()
    rows, cols = np.tril_indices(n)
    return np.rint(np.clip(a[..., rows, cols], 0, 1) * 255).astype(np.uint8)



# -- the binary answer -----------------------------------------------------------------------------
# An answer's JSON with its tensors' bytes moved out of the base64 strings into one binary body, so the
# browser neither parses megabytes of base64 inside JSON nor decodes it: it views the bytes in place.
#
#   b"TEB1" | u32 LE length of the header | header (UTF-8 JSON) | zero padding to a multiple of 8 | blobs
#
# The header is the JSON answer itself, except that each encoded array's "data" is "" and a "blob": [offset,
# length] (bytes from the start of the blobs, each blob starting at a multiple of 8) says where its bytes are.
# The values are the same bytes as the base64 would carry: nothing is rounded on the way. Its media type is
# BINARY_MEDIA_TYPE (media.py).

BINARY_MAGIC = b"TEB1"


def _move_blobs(node: object, blobs: list[bytes], size: list[int]) -> None:
    """Replace every encoded array's base64 "data" under `node` (the dumped answer) by a blob reference."""
    if isinstance(node, dict):
        if isinstance(node.get("data"), str) and ("shape" in node or node.get("encoding") == "uint8-lower-triangle"):
            raw = base64.b64decode(node["data"])
            pad = -size[0] % 8
            if pad:
                blobs.append(b"\0" * pad)
            node["blob"] = [size[0] + pad, len(raw)]
            node["data"] = ""
            blobs.append(raw)
            size[0] += pad + len(raw)
            return
        for v in node.values():
            _move_blobs(v, blobs, size)
    elif isinstance(node, list):
        for v in node:
            if isinstance(v, dict | list):
                _move_blobs(v, blobs, size)


def pack_binary(answer: dict) -> bytes:
    """The binary form of a dumped JSON answer (see above). `answer` is changed in place."""
    blobs: list[bytes] = []
    _move_blobs(answer, blobs, [0])
    header = json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode()
    pad = -(8 + len(header)) % 8
    return b"".join([BINARY_MAGIC, len(header).to_bytes(4, "little"), header, b" " * pad, *blobs])


def unpack_binary(body: bytes) -> dict:
    """The inverse of `pack_binary` (tests and Python clients): the JSON answer with base64 "data" again."""
    if body[:4] != BINARY_MAGIC:
        raise ValueError("not a binary answer (it does not start with TEB1)")
    n = int.from_bytes(body[4:8], "little")
    answer = json.loads(body[8:8 + n])
    start = 8 + n + (-(8 + n) % 8)

    def restore(node: object) -> None:
        if isinstance(node, dict):
            if "blob" in node:
                off, length = node.pop("blob")
                node["data"] = base64.b64encode(body[start + off:start + off + length]).decode("ascii")
            for v in node.values():
                restore(v)
        elif isinstance(node, list):
            for v in node:
                restore(v)

    restore(answer)
    return answer
