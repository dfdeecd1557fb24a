"""The app's API on a Gemma 4 model that runs through transformers: the capabilities name each layer's per-layer input
and its KV sharing (by hand from the checkpoint's shapes: P, the sliding window, the heads), and the stages the
per-layer lens derives are answered by name and position, equal to the Python API's. A model without per-layer
inputs has no table (an OLMo 3 gives its write bounds instead: its norms after each sublayer)."""

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


def _client(model, tmp_path) -> TestClient:
    static = tmp_path / "static"
    static.mkdir(exist_ok=True)
    (static / "index.html").write_text("<!doctype html><title>app</title>")
    return TestClient(create_app({"g": model}, ServerSettings(static_dir=static)))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = write_checkpoint("gemma4_text", tmp_path_factory.mktemp("gemma4"), tokenizer=True)
    model = load_model(str(folder), allow_download=False, dtype="float32")
    with _client(model, tmp_path_factory.mktemp("app")) as c:
        yield model, c


def test_capabilities_give_the_per_layer_inputs_and_kv_sharing(served):
    m, c = served
    caps = c.get("/api/models").json()["models"][0]["config"]["capabilities"]
    assert caps["mechanisms"] == ["per_layer_input"] * 4
    pl = caps["per_layer"]
    # the checkpoint: P = 8, 4 layers (sliding, full, sliding, full), the last 2 reuse keys and values; 2 key/value
    # heads of 16, a window of 4 (a sliding layer's cache keeps 3 positions), float32
    assert pl["d_per_layer"] == 8 and pl["per_layer_layers"] == [0, 1, 2, 3] and pl["dtype"] == "float32"
    assert pl["kv_sources"] == [0, 1, 0, 1]  # each shared layer: the last earlier one of its kind
    assert pl["per_layer_table_params"] == m.hf.config.vocab_size_per_layer_input * 4 * 8
    for n, unshared, shared in zip(pl["tokens"], pl["kv_unshared_bytes"], pl["kv_shared_bytes"], strict=True):
        sliding, full = 2 * min(n, 3) * 2 * 16 * 4, 2 * n * 2 * 16 * 4  # keys and values, heads, width, bytes
        assert unshared == 2 * (sliding + full) and shared == sliding + full
    assert pl["kv_saved_bytes"] == [u - s for u, s in zip(pl["kv_unshared_bytes"], pl["kv_shared_bytes"], strict=True)]
    assert pl["tokens"] == [1024, 32768, 1048576]
    assert "per_layer_out" in caps["layer_stages"][2] and "per_layer.gate" in caps["layer_stages"][2]


def test_the_per_layer_stages_are_answered_by_name_and_position(served):
    m, c = served
    tr = m.trace(TEXT)
    pos = tr.n_tokens - 1
    names = ["embed.per_layer_inputs", "blocks.2.per_layer.gate", "blocks.2.per_layer_out", "blocks.1.per_layer.post"]
    r = c.post("/api/tensors", json={"text": TEXT, "tensors": [
        {"name": n, "position": pos, "dtype": "float32"} for n in names]})
    assert r.status_code == 200, r.text
    for t, n in zip(r.json()["tensors"], names, strict=True):
        got = decode_array(t["data"], t["shape"], t["dtype"])
        np.testing.assert_allclose(got, tr[n][pos].numpy(), atol=1e-6)


def test_a_model_without_per_layer_inputs_has_no_table(tmp_path):
    folder = write_checkpoint("olmo3", tmp_path / "olmo3", tokenizer=True)
    model = load_model(str(folder), allow_download=False)
    with _client(model, tmp_path) as c:
        caps = c.get("/api/models").json()["models"][0]["config"]["capabilities"]
    assert caps["per_layer"] is None and caps["mechanisms"] == ["post_norm"] * 4  # (its norms after each sublayer)
    # each layer's write bounds, sqrt(D) * max|gamma| of its two norms after the sublayers
    want = [[64**0.5 * float(n.weight.abs().max()) for n in (layer.post_attention_layernorm,
                                                              layer.post_feedforward_layernorm)]
            for layer in model.hf.model.layers]
    assert np.allclose(caps["write_bounds"], want, rtol=1e-6)
