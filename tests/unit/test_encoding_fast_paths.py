"""The encodings' fast paths at the full context give the plain paths' results (issue 40): a lower triangle gathered
by cached flat indices, an overview's rows unpacked by an indexed copy, and a binary answer that moves an array's
kept bytes rather than decoding the base64 just written, the same bytes whether they were kept or not."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import torch

from transformer_explainer import encoding
from transformer_explainer.encoding import encode_array, encode_u8, lower_triangle, pack_binary, unpack_binary
from transformer_explainer.memo.summaries import key_sums_at


@pytest.mark.parametrize("shape", [(12, 100, 100), (100, 100), (3, 5, 9), (2, 3, 7, 7), (4, 1, 6), (0, 3, 3),
                                   (1, 1)])
def test_lower_triangle_is_the_rows_up_to_their_own_key(shape):
    x = torch.randn(*shape)
    T, S = shape[-2:]
    rows, cols = torch.tril_indices(T, S, offset=S - T)
    assert torch.equal(lower_triangle(x), x[..., rows, cols])
    y = torch.randn(*shape[:-2], S, T).transpose(-1, -2)  # not contiguous
    assert torch.equal(lower_triangle(y), y[..., rows, cols])


@pytest.mark.parametrize(("g", "T", "start"), [(32, 1000, 0), (1, 7, 0), (3, 10, 5), (4, 129, 0), (5, 3, 20),
                                               (2, 0, 4)])
def test_unpacked_rows_are_the_rows_packed(g, T, start):
    fn = key_sums_at(g)
    rows = fn(torch.softmax(torch.randn(3, T, start + T), -1))
    kept = fn._kept(start, T, rows.device)
    want = torch.where(kept, rows, torch.zeros(()))  # the packed columns, 0 past each row's own group
    assert torch.equal(fn.unpack(fn.pack(rows, start), start, T), want)


def _answer(*arrays: np.ndarray) -> dict:
    return {"tensors": [{"name": f"t{i}", "shape": list(a.shape), "dtype": "float32",
                         "data": encode_array(a, "float32")} for i, a in enumerate(arrays)],
            "attention": {"encoding": "uint8-lower-triangle", "data": encode_u8(np.arange(300_000) % 251)}}


def _copy(answer: dict) -> dict:
    """The answer before `pack_binary` changes it in place (the same strings)."""
    return {"tensors": [dict(t) for t in answer["tensors"]], "attention": dict(answer["attention"])}


def test_binary_answer_moves_the_kept_bytes_without_decoding(monkeypatch):
    """A large array's bytes go into the binary answer as they were encoded: no base64 is decoded (it was, 6 ms for
    an attention view's pattern at 1,000 tokens)."""
    rng = np.random.default_rng(0)
    answer = _answer(rng.standard_normal((400, 400)).astype(np.float32), np.float32([1.5, -2.0]))
    plain = _copy(answer)
    decoded: list[int] = []
    real = base64.b64decode
    monkeypatch.setattr(encoding.base64, "b64decode", lambda s: decoded.append(len(s)) or real(s))
    body = pack_binary(answer)
    monkeypatch.setattr(encoding.base64, "b64decode", real)
    assert decoded == [len(plain["tensors"][1]["data"])]  # the small array only
    assert unpack_binary(body) == plain


def test_binary_answer_has_the_same_bytes_once_they_are_no_longer_kept():
    """Arrays encoded for JSON answers (their bytes never taken) push older ones out, at most RECENT_BYTES kept; a
    binary answer of an array pushed out decodes its base64: the same bytes. An answer packed twice is the same."""
    rng = np.random.default_rng(1)
    first = _answer(rng.standard_normal((300, 300)).astype(np.float32))
    plain = _copy(first)
    for _ in range(encoding.RECENT_BYTES // (400 * 400 * 4) + 2):
        encode_array(rng.standard_normal((400, 400)).astype(np.float32), "float32")
    assert 0 < encoding._recent_held[0] <= encoding.RECENT_BYTES
    assert sum(len(raw) for _, raw in encoding._recent.values()) == encoding._recent_held[0]
    assert id(first["tensors"][0]["data"]) not in encoding._recent
    assert unpack_binary(pack_binary(first)) == plain
    second = _answer(rng.standard_normal((300, 300)).astype(np.float32))
    copy = _copy(second)
    assert pack_binary(second) == pack_binary(copy)  # the kept bytes taken, then the base64 decoded
    assert id(copy["tensors"][0]["data"]) not in encoding._recent
