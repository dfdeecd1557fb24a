"""The app's API on a hybrid of Gated DeltaNet and full attention that runs through transformers (qwen3_5_text): the
capabilities name each layer's mechanism and the memory table (by hand: the checkpoint's shapes), and the DeltaNet
internals the mechanism lens derives are answered by name, head by head, equal to the Python API's; asked of a
full-attention layer they are refused in a sentence."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("transformers")
from fastapi.testclient import TestClient  # noqa: E402

from tests.helpers.hf_checkpoints import write_checkpoint  # noqa: E402
from transformer_explainer.encoding import decode_array  # noqa: E402
from transformer_explainer.engine import load_model  # noqa: E402
from transformer_explainer.server import ServerSettings, create_app  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = write_checkpoint("qwen3_5_text", tmp_path_factory.mktemp("qwen3_5_text"), tokenizer=True)
    model = load_model(str(folder), allow_download=False, dtype="float32")
    static = tmp_path_factory.mktemp("static")
    (static / "index.html").write_text("<!doctype html><title>app</title>")
    with TestClient(create_app({"g": model}, ServerSettings(static_dir=static))) as c:
        yield model, c


def arr(t: dict) -> np.ndarray:
    return decode_array(t["data"], t["shape"], t["dtype"])


def test_capabilities_name_the_mechanism_and_the_memory(served):
    _m, c = served
    caps = c.get("/api/models").json()["models"][0]["config"]["capabilities"]
    assert caps["mechanisms"] == ["gated_deltanet", None, "gated_deltanet", None]
    mem = caps["state_memory"]
    # the checkpoint: 4 value heads of 16 on 2 key heads of 16, a kernel of 4; attention 2 kv heads of 16; float32
    assert mem["linear_layers"] == [0, 2] and mem["full_attention_layers"] == [1, 3] and mem["dtype"] == "float32"
    assert mem["state_bytes"] == 2 * (4 * 16 * 16 * 4)  # two layers' states, float32
    assert mem["conv_bytes"] == 2 * (3 * (2 * 2 * 16 + 4 * 16) * 4)  # two layers' last 3 positions of 128 channels
    assert mem["tokens"] == [1024, 32768, 1048576]
    per_token = 2 * (2 * 2 * 16 * 4)  # two full-attention layers: keys and values of 2 heads of 16, float32
    assert mem["kv_cache_bytes"] == [n * per_token for n in mem["tokens"]]


def test_a_model_without_deltanet_has_no_memory_table(tmp_path):
    folder = write_checkpoint("lfm2", tmp_path / "lfm2", tokenizer=True)
    static = tmp_path / "static"
    static.mkdir()
    (static / "index.html").write_text("<!doctype html><title>app</title>")
    with TestClient(create_app({"g": load_model(str(folder), allow_download=False)},
                               ServerSettings(static_dir=static))) as c:
        caps = c.get("/api/models").json()["models"][0]["config"]["capabilities"]
    assert caps["mechanisms"] == [None] * 4 and caps["state_memory"] is None


def test_the_internals_are_answered_by_name_and_head(served):
    m, c = served
    tr = m.trace(TEXT)
    T = tr.n_tokens
    r = c.post("/api/tensors", json={"text": TEXT, "tensors": [
        {"name": "blocks.2.linear_attn.implied_pattern", "head": 3, "triangle": True, "dtype": "float32"},
        {"name": "blocks.2.linear_attn.beta", "head": 3, "dtype": "float32"},
        {"name": "blocks.2.linear_attn.decay", "head": 3, "dtype": "float32"}]})
    assert r.status_code == 200, r.text
    pat, beta, decay = r.json()["tensors"]
    assert pat["triangle"] and pat["shape"] == [T, T]
    rows, cols = np.tril_indices(T)
    tri = arr({**pat, "shape": [T * (T + 1) // 2]})
    np.testing.assert_allclose(tri, tr["blocks.2.linear_attn.implied_pattern"][3].numpy()[rows, cols], atol=1e-6)
    np.testing.assert_allclose(arr(beta), tr["blocks.2.linear_attn.beta"][3].numpy(), atol=1e-7)
    np.testing.assert_allclose(arr(decay), tr["blocks.2.linear_attn.decay"][3].numpy(), atol=1e-7)
    r = c.post("/api/tensors", json={"text": TEXT, "tensors": [{"name": "blocks.1.linear_attn.beta", "head": 0}]})
    assert r.status_code == 422, r.text
    assert "blocks.1.linear_attn.beta" in r.json()["detail"]
