"""Compact tensor encodings for the JSON API: little-endian float16 or float32, base64, with the shape
and the dims from the name scheme, so a client can decode without guessing."""

from __future__ import annotations

import base64
import functools
import json
import threading
from collections import OrderedDict

import numpy as np
import torch
from torch import Tensor

DTYPES = {"float16": np.dtype("<f2"), "float32": np.dtype("<f4")}


def encode_array(t: Tensor | np.ndarray, dtype: str = "float16") -> str:
    """Base64 of the row-major little-endian bytes of `t` in `dtype`."""
    a = t.detach().to("cpu", torch.float32).numpy() if isinstance(t, Tensor) else np.asarray(t, np.float32)
    return _base64(np.ascontiguousarray(a, dtype=DTYPES[dtype]).tobytes())


# The bytes of the latest large encodings, by their base64 string: the binary answer (`pack_binary`) moves an array's
# bytes out of its JSON as they were, rather than decoding the base64 just written (an attention view's pattern at
# 1,000 tokens: 2.7 MB of base64, 6 ms). Each string is kept with its bytes, so that `is` tells it (an id is not reused
# while its object lives); a binary answer takes its own, and what a JSON answer leaves goes first once they hold
# more than RECENT_BYTES together.
RECENT_BYTES = 16 * 2**20
RECENT_MIN = 2**16  # smaller arrays are decoded again: cheap
_recent: OrderedDict[int, tuple[str, bytes]] = OrderedDict()
_recent_held = [0]
_recent_lock = threading.Lock()


def _base64(raw: bytes) -> str:
    """`raw` as base64, its bytes kept a while for `_raw_bytes` when they are many."""
    s = base64.b64encode(raw).decode("ascii")
    if RECENT_MIN <= len(raw) <= RECENT_BYTES:
        with _recent_lock:
            _recent[id(s)] = (s, raw)
            _recent_held[0] += len(raw)
            while _recent_held[0] > RECENT_BYTES:
                _recent_held[0] -= len(_recent.popitem(last=False)[1][1])
    return s


def _raw_bytes(s: str) -> bytes:
    """The bytes whose base64 is `s`: those `_base64` kept for this very string (taken: an answer is packed once),
    else decoded."""
    with _recent_lock:
        kept = _recent.get(id(s))
        if kept is not None and kept[0] is s:
            del _recent[id(s)]
            _recent_held[0] -= len(kept[1])
            return kept[1]
    return base64.b64decode(s)


def decode_array(data: str, shape: list[int] | tuple[int, ...], dtype: str = "float16") -> np.ndarray:
    """The inverse of `encode_array` (used by tests and Python clients), as float32."""
    a = np.frombuffer(base64.b64decode(data), dtype=DTYPES[dtype]).astype(np.float32)
    return a.reshape(shape)


def encode_u8(a: np.ndarray) -> str:
    return _base64(np.ascontiguousarray(a, dtype=np.uint8).tobytes())


def group_size(n: int, size: int) -> int:
    """Positions per thumbnail cell for `n` positions shown in at most `size` cells: ceil(n / size). Fixed per
    cell (not n / size), so a text that grows keeps its earlier cells, and a continued trace's overview is the
    beginning's rows and the new ones (`overview.key_sums_at`)."""
    return max(1, -(-n // size))


def key_group_sums(pattern: Tensor, g: int) -> Tensor:
    """(H, T, S) attention patterns -> (H, T, ceil(S / g)): the mass each query gives to each group of g keys.
    Row by row: a row's sums depend on that row alone, and a causal row's are 0 past its own group."""
    H, T, S = pattern.shape
    if g == 1:
        return pattern
    kb = torch.div(torch.arange(S, device=pattern.device), g, rounding_mode="floor")
    return torch.zeros(H, T, -(-S // g), device=pattern.device).index_add_(2, kb, pattern.to(torch.float32))


def query_group_means(key_sums: Tensor, g: int) -> Tensor:
    """(H, T, m) key-group sums -> (H, ceil(T / g), m): averaged over each group of g queries (rows still sum to 1)."""
    H, T, m = key_sums.shape
    if g == 1:
        return key_sums
    n, device = -(-T // g), key_sums.device
    qb = torch.div(torch.arange(T, device=device), g, rounding_mode="floor")  # group of each query
    q_sum = torch.zeros(H, n, m, device=device).index_add_(1, qb, key_sums)
    counts = torch.bincount(qb, minlength=n).clamp(min=1).to(torch.float32)
    return q_sum / counts[None, :, None]


def pooled_pattern(pattern: Tensor, size: int) -> Tensor:
    """Attention patterns (H, T, S) shrunk to at most (H, size, size) for an overview thumbnail.

    Cell (i, j) is the attention mass that the queries of group i give to the keys of group j, averaged over
    those queries (groups of `group_size` positions): rows still sum to 1. With T, S <= size the pattern as is.
    """
    H, T, S = pattern.shape
    g = group_size(max(T, S), size)
    return query_group_means(key_group_sums(pattern, g), g)


def lower_triangle(t: Tensor) -> Tensor:
    """(..., T, S) -> (..., n): the entries of each query row i up to its own position S - T + i (keys 0..i when S =
    T), row after row: all that a causal attention pattern can hold. `triangle_rows` reads them back."""
    T, S = t.shape[-2:]
    flat = _triangle_flat(T, S, t.device)  # one gather from the rows flattened: 1,000 x 1,000, 2.9 -> 0.8 ms
    return t.reshape(*t.shape[:-2], T * S).index_select(-1, flat)


@functools.lru_cache(maxsize=4)
def _triangle_flat(T: int, S: int, device: torch.device) -> Tensor:
    """The flat indices (row * S + col) of the lower triangle of a (T, S) matrix, row after row (`lower_triangle`),
    kept for the few shapes an edited text goes through."""
    rows, cols = torch.tril_indices(T, S, offset=S - T, device=device)
    return rows * S + cols


def triangle_rows(values: np.ndarray, shape: list[int] | tuple[int, ...]) -> np.ndarray:
    """The inverse of `lower_triangle` (tests and Python clients): the (..., T, S) array with zeros above."""
    T, S = shape[-2:]
    out = np.zeros(shape, np.float32)
    rows, cols = np.tril_indices(T, S - T, S)
    out[..., rows, cols] = values.reshape(*shape[:-2], -1)
    return out


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
            raw = _raw_bytes(node["data"])
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
