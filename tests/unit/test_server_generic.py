"""The app's API on decoders that run through transformers' own modules (issue 34): a hybrid of Gated DeltaNet and
full attention (qwen3_5_text) and one of short convolutions and attention (lfm2). Every core route answers with the
trace's own values; what such a model does not record (a pattern of a layer without attention, its weights) is
refused in one sentence."""

from __future__ import annotations

import base64

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
SHORT = "the cat sat"
MIXER = {"qwen3_5_text": ("linear_attention", "linear_attn.out"), "lfm2": ("short_conv", "conv.out")}


@pytest.fixture(scope="module", params=sorted(MIXER))
def served(request, tmp_path_factory):
    folder = write_checkpoint(request.param, tmp_path_factory.mktemp(request.param), tokenizer=True)
    model = load_model(str(folder), allow_download=False)
    static = tmp_path_factory.mktemp("static")
    (static / "index.html").write_text("<!doctype html><title>app</title>")
    with TestClient(create_app({"g": model}, ServerSettings(static_dir=static))) as c:
        yield request.param, model, c


def arr(t: dict) -> np.ndarray:
    return decode_array(t["data"], t["shape"], t["dtype"])


def test_models_say_how_the_model_runs(served):
    model_type, m, c = served
    r = c.get("/api/models")
    assert r.status_code == 200, r.text
    info = r.json()["models"][0]
    cfg, caps = info["config"], info["config"]["capabilities"]
    assert info["n_params"] == m.n_params and info["n_active_params"] is None
    assert cfg["family"] == "generic" and cfg["model_type"] == model_type
    assert cfg["architecture"] == type(m.hf).__name__
    assert caps["runs"] == "transformers"
    assert caps["attention_layers"] == list(m.config.attention_layers) == [1, 3]
    kind = MIXER[model_type][0]
    assert caps["mixers"] == [list(layer.kinds) for layer in m.config.layers]
    assert caps["mixers"][0] == [kind] and caps["layer_types"] == [None, "full_attention", None, "full_attention"]
    assert caps["windows"] == [None] * 4 and caps["sinks"] == [False] * 4
    assert caps["resid_mid"] == ["resid_mid" in layer.stages for layer in m.config.layers]
    assert caps["layer_stages"] == [list(layer.stages) for layer in m.config.layers]
    # what does not apply to a model that runs through transformers is null, not a guess
    assert caps["norm"] is None and caps["positions"] is None and caps["mlp"] is None and caps["attn_scale"] is None
    assert cfg["layer_norm_epsilon"] is None and cfg["activation"] is None and cfg["qkv_bias"] is None
    names = c.get("/api/names", params={"family": "generic"})
    assert names.status_code == 200 and "attn.pattern" in names.json()["block_activations"]


def test_trace_equals_the_models(served):
    model_type, m, c = served
    r = c.post("/api/trace", json={"text": TEXT, "top_n": 5, "include": [
        {"name": "blocks.1.attn.pattern", "head": 2, "dtype": "float32"},
        {"name": f"blocks.0.{MIXER[model_type][1]}", "dtype": "float32"}, {"name": "embed.token", "dtype": "float32"}]})
    assert r.status_code == 200, r.text
    d = r.json()
    tr = m.trace(TEXT)
    assert d["token_ids"] == tr.token_ids
    pat, mix, emb = d["tensors"]
    np.testing.assert_allclose(arr(pat), tr["blocks.1.attn.pattern"][2].numpy(), atol=1e-6)
    np.testing.assert_allclose(arr(mix), tr[f"blocks.0.{MIXER[model_type][1]}"].numpy(), atol=1e-6)
    np.testing.assert_allclose(arr(emb), tr["embed.token"].numpy(), atol=1e-6)
    assert d["cost"] is None  # not counted for transformers' modules, rather than a guess
    # the thumbnails: the attention layers only, exact up to 8-bit rounding (a text short enough not to be pooled)
    d = c.post("/api/trace", json={"text": SHORT, "top_n": 5}).json()
    tr = m.trace(SHORT)
    a = d["attention"]
    assert a["layers"] == [1, 3] and a["n_layer"] == 2 and not a["pooled"]
    T = len(tr.token_ids)
    u8 = np.frombuffer(base64.b64decode(a["data"]), np.uint8).reshape(a["n_layer"], a["n_head"], -1)
    rows, cols = np.tril_indices(T)
    np.testing.assert_allclose(u8[1, 3] / 255, tr["blocks.3.attn.pattern"][3].numpy()[rows, cols], atol=1 / 255)
    norms = arr(d["resid_norms"])
    np.testing.assert_allclose(norms[0], tr["blocks.0.resid_pre"].norm(dim=-1).numpy(), rtol=1e-3)
    np.testing.assert_allclose(norms[-1], tr["blocks.3.resid_post"].norm(dim=-1).numpy(), rtol=1e-3)
    dist = m.next_token(tr)
    assert [x["id"] for x in d["next"]["candidates"]] == dist.top(5)


def test_tensors_next_token_and_generate(served):
    model_type, m, c = served
    tr = m.trace(TEXT)
    r = c.post("/api/tensors", json={"text": TEXT, "tensors": [
        {"name": "blocks.3.attn.pattern", "head": 1, "triangle": True, "dtype": "float32"},
        {"name": "blocks.1.attn.masked_scores", "head": 0, "position": 4, "dtype": "float32"}]})
    assert r.status_code == 200, r.text
    pat, masked = r.json()["tensors"]
    assert pat["triangle"]
    T = len(tr.token_ids)
    tri = arr({**pat, "shape": [T * (T + 1) // 2]})
    rows, cols = np.tril_indices(T)
    np.testing.assert_allclose(tri, tr["blocks.3.attn.pattern"][1].numpy()[rows, cols], atol=1e-6)
    want = tr["blocks.1.attn.masked_scores"][0, 4].numpy()
    got = arr(masked)
    np.testing.assert_allclose(got[:5], want[:5], rtol=1e-5)  # the keys the query reads; after them the mask
    r = c.post("/api/next_token", json={"text": TEXT, "top_n": 3, "sampling": {"temperature": 0}})
    assert r.status_code == 200, r.text
    assert [x["id"] for x in r.json()["candidates"]] == m.next_token(tr).top(3)
    r = c.post("/api/generate", json={"text": TEXT, "sampling": {"temperature": 0},
                                      "include": [{"name": "blocks.1.attn.pattern", "head": 0}]})
    assert r.status_code == 200, r.text
    g = r.json()
    greedy = int(m.last_logits(tr.token_ids).argmax())
    assert g["token"]["id"] == greedy and g["trace"]["token_ids"] == [*tr.token_ids, greedy]
    assert g["trace"]["attention"]["layers"] == [1, 3]


def test_what_the_model_does_not_record_is_refused_in_a_sentence(served):
    model_type, _m, c = served
    kind = MIXER[model_type][0].replace("_", " ")
    for path in ("/api/tensors", "/api/trace"):
        key = "tensors" if path == "/api/tensors" else "include"
        r = c.post(path, json={"text": TEXT, key: [{"name": "blocks.0.attn.pattern", "head": 0}]})
        assert r.status_code == 422, r.text
        assert f"layer 0 of this {model_type} model is a {kind} layer" in r.json()["detail"]
        assert "attention layers: 1, 3" in r.json()["detail"]
    r = c.post("/api/weights", json={"tensors": [{"name": "blocks.1.attn.c_attn.weight"}]})
    assert r.status_code == 422, r.text
    assert "runs through transformers' own modules" in r.json()["detail"]


def test_windows_and_sinks_are_said_per_layer(tmp_path):
    """gpt-oss: alternating local and full layers, a learned sink per head. The capabilities say each layer's window
    (the keys a query reads, itself included: the pattern's nonzero entries) and sink, as the trace records them."""
    folder = write_checkpoint("gpt_oss", tmp_path / "gpt_oss", tokenizer=True)
    m = load_model(str(folder), allow_download=False)
    static = tmp_path / "static"
    static.mkdir()
    (static / "index.html").write_text("<!doctype html><title>app</title>")
    with TestClient(create_app({"g": m}, ServerSettings(static_dir=static))) as c:
        caps = c.get("/api/models").json()["models"][0]["config"]["capabilities"]
        assert caps["sinks"] == [True] * 4 and caps["attention_layers"] == [0, 1, 2, 3]
        assert caps["windows"] == [4, None, 4, None] and caps["local_window"] == 4
        assert caps["layer_types"] == ["sliding_attention", "full_attention"] * 2
        r = c.post("/api/tensors", json={"text": TEXT, "tensors": [
            {"name": "blocks.0.attn.pattern", "head": 1, "position": 10, "dtype": "float32"},
            {"name": "blocks.0.attn.sink_weight", "head": 1, "position": 10, "dtype": "float32"}]})
        assert r.status_code == 200, r.text
        row, sink = (arr(t) for t in r.json()["tensors"])
    assert list(np.flatnonzero(row)) == [7, 8, 9, 10]  # the window: the last 4 keys, itself included
    assert float(sink) == pytest.approx(1 - row.sum(), abs=1e-6) and 0 < float(sink) < 1


def test_head_importance_has_no_cells_for_layers_without_heads(served):
    """/api/analysis/importance on a model whose layers 0 and 2 mix tokens without attention: their rows have no value
    (null), the attention layers' heads have theirs, and the ranking is over those alone (a 500 before: the answer's
    schema had no room for a head a layer does not have)."""
    model_type, m, c = served
    r = c.post("/api/analysis/importance", json={"model": "g", "text": TEXT, "mode": "zero"})
    assert r.status_code == 200, r.text
    d = r.json()
    for key in ("loss_change", "kl"):
        rows = d[key]
        assert [all(v is None for v in row) for row in rows] == [True, False, True, False], key
        assert all(isinstance(v, float) for i in (1, 3) for v in rows[i]), key
    assert {layer for layer, _head in d["ranked"]} <= {1, 3} and len(d["ranked"]) > 0
