"""Trace export: .npz round-trips every tensor exactly; JSON is strict and carries the metadata."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_explainer import InputError
from transformer_explainer.analysis import load_npz, save_json, save_npz, trace_to_json
from transformer_explainer.models.kv_cache import KVCache

TEXT = "The king said hello — 数据 🙂"


@pytest.fixture(scope="module")
def trace(tiny_model):
    return tiny_model.trace(TEXT)


def test_npz_round_trip_is_exact(trace, tmp_path: Path):
    path = save_npz(trace, tmp_path / "t.npz")
    back = load_npz(path)
    assert (back.model_name, back.text, back.token_ids, back.tokens) == (
        trace.model_name, trace.text, trace.token_ids, trace.tokens)
    assert back.config == trace.config and back.start == 0
    for name in trace.names():
        assert back[name].dtype == trace[name].dtype and torch.equal(back[name], trace[name]), name


def test_npz_is_plain_numpy(trace, tmp_path: Path):
    path = save_npz(trace, tmp_path / "plain.npz", ["blocks.*.attn.pattern", "logits"], compress=False)
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["__meta__"]))
        assert set(data.files) == {"__meta__", "logits"} | {f"blocks.{i}.attn.pattern" for i in range(2)}
        np.testing.assert_array_equal(data["blocks.1.attn.pattern"], trace["blocks.1.attn.pattern"].numpy())
    assert meta["tokens"] == trace.tokens and meta["tensors"]["logits"]["dims"] == ["T", "V"]
    partial = load_npz(path)
    assert torch.equal(partial["logits"], trace["logits"])


def test_cached_continuation_round_trips(tiny_model, tmp_path: Path):
    ids = tiny_model.encode("one two three four")
    cache = KVCache()
    tiny_model.trace_ids(ids[:2], cache=cache)
    cont = tiny_model.trace_ids(ids[2:], cache=cache)
    back = load_npz(save_npz(cont, tmp_path / "cont.npz"))
    assert back.start == 2 and back.prefix_ids == ids[:2]
    assert torch.equal(back["blocks.0.attn.pattern"], cont["blocks.0.attn.pattern"])


def test_json_export(trace, tmp_path: Path):
    d = trace_to_json(trace)
    assert set(d["values"]) == {"blocks.0.attn.pattern", "blocks.1.attn.pattern"}
    torch.testing.assert_close(torch.tensor(d["values"]["blocks.0.attn.pattern"]), trace["blocks.0.attn.pattern"])
    path = save_json(trace, tmp_path / "t.json", ["blocks.0.attn.masked_scores"])

    def no_constants(c: str) -> None:
        raise AssertionError(f"non-standard JSON constant {c}")

    loaded = json.loads(path.read_text(encoding="utf-8"), parse_constant=no_constants)
    scores = loaded["values"]["blocks.0.attn.masked_scores"]
    assert scores[0][0][1] is None and scores[0][0][0] is not None  # -inf above the diagonal becomes null
    assert loaded["text"] == TEXT


def test_bad_exports(trace, tmp_path: Path):
    with pytest.raises(InputError):
        trace_to_json(trace, ["no.such.thing"])
    np.savez(tmp_path / "other.npz", x=np.zeros(2))
    with pytest.raises(InputError):
        load_npz(tmp_path / "other.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError):
        load_npz(tmp_path / "junk.npz")
