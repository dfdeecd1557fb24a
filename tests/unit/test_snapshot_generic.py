"""The HTML snapshot and the notebook view of a decoder that runs through transformers' own modules (issue 34):
one self-contained page holding every value the trace records (an LFM2: short convolutions in layers 0 and 2,
attention in 1 and 3; a gpt-oss: attention with sinks in every layer), the analyses such a model answers, and the
size budget over its attention layers only."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.hf_checkpoints import write_checkpoint
from transformer_explainer import load_model
from transformer_explainer.analysis.ablation import ablate, head_importance
from transformer_explainer.analysis.answers import ablation_dict, finite, heads_json, importance_dict, lens_json
from transformer_explainer.analysis.roles import reference_head_roles
from transformer_explainer.encoding import triangle_rows
from transformer_explainer.limits import ABLATION_TOP, LENS_TOP
from transformer_explainer.notebook import SnapshotView, show, snapshot_data, snapshot_html, widget_class
from transformer_explainer.notebook.snapshot import _b64_size, _blocks_of

TEXT = "The cat sat on the mat, and then the cat slept."


@pytest.fixture(scope="module")
def lfm2(tmp_path_factory):
    folder = write_checkpoint("lfm2", tmp_path_factory.mktemp("lfm2") / "lfm2", tokenizer=True)
    return load_model(str(folder), allow_download=False)


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    folder = write_checkpoint("gpt_oss", tmp_path_factory.mktemp("gpt_oss") / "gpt_oss", tokenizer=True)
    return load_model(str(folder), allow_download=False)


@pytest.fixture(scope="module")
def hybrid_data(lfm2):
    trace = lfm2.trace(TEXT)
    return trace, *snapshot_data(lfm2, trace)


def stored(s: dict) -> np.ndarray:
    dtype = "<f4" if s["dtype"] == "float32" else "<f2"
    values = np.frombuffer(base64.b64decode(s["data"]), dtype)
    if s.get("triangle"):  # an attention pattern's lower triangle, zeros above
        return triangle_rows(values.astype(np.float32), s["shape"])
    return values.reshape(s["shape"])


def as_stored(t, dtype: str) -> np.ndarray:
    with np.errstate(over="ignore"):  # the mask's large negative numbers are -inf in float16
        return t.float().numpy().astype("<f4" if dtype == "float32" else "<f2")


def test_the_snapshot_holds_every_value_the_trace_records(lfm2, hybrid_data):
    trace, d, info = hybrid_data
    assert not info.omitted
    names = [n for n in trace.names() if n != "logits"]  # the page has the next-token answer, as for our families
    assert "blocks.0.conv.out" in names and "blocks.0.attn.pattern" not in names  # a short convolution: no pattern
    for name in names:
        key = d["aliases"].get(name, name)  # a layer's output stored once, as the next layer's input
        assert key in d["tensors"], name
        s = d["tensors"][key]
        np.testing.assert_array_equal(stored(s), as_stored(trace[name], s["dtype"]), err_msg=name)
    assert not [n for n in d["tensors"] if n not in names]
    # the attention grids are kept as the patterns are (float16); the weights have no names here
    for stage in ("attn.pattern", "attn.masked_scores", "attn.mask", "attn.v", "attn.z"):
        assert d["tensors"][f"blocks.1.{stage}"]["dtype"] == "float16", stage
    assert d["weights"] == {}
    assert d["aliases"] == {f"blocks.{i}.resid_post": f"blocks.{i + 1}.resid_pre" for i in range(3)}


def test_the_page_says_which_way_the_model_runs(lfm2, hybrid_data):
    _, d, _ = hybrid_data
    info = d["models"]["models"][0]
    assert info["n_params"] == lfm2.n_params and info["n_active_params"] is None
    config = d["trace"]["config"]
    assert config["family"] == "generic" and config["architecture"] == "Lfm2ForCausalLM"
    caps = config["capabilities"]
    assert caps["runs"] == "transformers" and caps["attention_layers"] == [1, 3]
    assert d["trace"]["attention"]["layers"] == [1, 3]  # the thumbnails: the attention layers only


def test_the_analyses_such_a_model_answers(lfm2, hybrid_data):
    trace, d, _ = hybrid_data
    a = d["analysis"]
    T = trace.n_tokens
    assert a["lens"]["out"] == finite(lens_json(lfm2, trace, list(range(T)), LENS_TOP))
    # head roles and attention statistics as the API answers them: a short convolution has no heads, so no values in
    # its rows; the heads of the attention layers are ablated one by one, as the API ablates them
    assert a["heads"] == finite(heads_json(trace, reference_head_roles(lfm2)))
    assert a["heads"]["text"]["scores"]["induction"][0] == [None] * 4 and None not in a["heads"]["stats"]["entropy"][1]
    assert sorted(a["ablations"]) == [f"{layer}.{h}" for layer in (1, 3) for h in range(4)]
    assert a["importance"] == finite(importance_dict(lfm2, head_importance(lfm2, trace.token_ids, mode="zero")))
    assert a["importance"]["loss_change"][0] == [None] * 4  # no heads in layer 0: no values
    assert a["ablations"]["3.1"] == finite(ablation_dict(lfm2, ablate(lfm2, trace.token_ids, [(3, 1)]), ABLATION_TOP))
    # the embedding explorer reads the token embedding by name, which such a model's weights do not have here
    assert a["neighbours"] == {}
    assert a["analogy"]["out"] is None and "transformers' own modules" in a["analogy"]["error"]
    assert a["projection"]["out"] is None and a["projection"]["error"] == a["analogy"]["error"]
    entries = d["attribution"]["entries"]
    assert sorted({e["position"] for e in entries}) == list(range(T)) and d["attribution"]["left_out"] == []
    last = lfm2.attribute(trace, position=T - 1)
    assert entries[0]["position"] == T - 1 and entries[0]["target"]["id"] == last.target
    assert entries[0]["values"] == pytest.approx([c.value for c in last.components], rel=1e-9, abs=1e-12)
    kinds = [p[0] for p in d["attribution"]["parts"]]
    assert [p[1] for p in d["attribution"]["parts"] if p[0] == "mixer"] == [0, 2]
    assert "head" in kinds


def test_a_model_whose_every_layer_attends_has_head_roles_and_ablations(gpt_oss):
    trace = gpt_oss.trace(TEXT)
    d, info = snapshot_data(gpt_oss, trace)
    c = gpt_oss.config
    a = d["analysis"]
    assert a["heads"] is not None and a["importance"] is not None
    assert len(a["ablations"]) == c.n_layer * c.n_head
    # a sink per head, and the weight it takes per query: a few values per token, kept in float32
    assert d["tensors"]["blocks.0.attn.sink"]["dtype"] == "float32"
    np.testing.assert_array_equal(stored(d["tensors"]["blocks.0.attn.sink_weight"]),
                                  as_stored(trace["blocks.0.attn.sink_weight"], "float32"))
    assert not info.omitted


def test_a_model_that_cannot_be_attributed_says_why(tmp_path):
    # Gemma 4: each layer also adds a gated per-layer input, neither its mixer's write nor its MLP's
    model = load_model(str(write_checkpoint("gemma4_text", tmp_path / "gemma4", tokenizer=True)),
                       allow_download=False)
    trace = model.trace(TEXT)
    d, info = snapshot_data(model, trace, ablations=False)
    record = d["attribution"]
    assert record["entries"] == [] and record["left_out"] == [] and "per_layer" in record["refused"]
    assert not [o for o in info.omitted if o.startswith("attribution")]
    for name in trace.names():  # every value is still there, stored or as the next layer's equal input
        if name != "logits":
            s = d["tensors"][d["aliases"].get(name, name)]
            np.testing.assert_array_equal(stored(s), as_stored(trace[name], s["dtype"]), err_msg=name)


def test_the_budget_keeps_the_first_attention_layers_patterns(lfm2):
    text = " ".join(["the cat sat on the mat"] * 8)
    trace = lfm2.trace(text)
    T, H, D = trace.n_tokens, lfm2.config.n_head, lfm2.config.n_embd
    # with nothing kept, what the page holds besides the tensors; then room for that, the two global activations
    # and one attention layer's pattern and masked scores: the patterns do not fit whole, the first layer's does
    _, nothing = snapshot_data(lfm2, trace, max_mb=0.001, ablations=False)
    room = nothing.nbytes + 2 * _b64_size(T * D) + 2 * _b64_size(H * T * T) + 100
    d, info = snapshot_data(lfm2, trace, max_mb=room / 1e6, ablations=False)
    assert "blocks.1.attn.pattern" in d["tensors"] and "blocks.1.attn.masked_scores" in d["tensors"]
    assert "blocks.3.attn.pattern" not in d["tensors"]
    assert {"blocks.1.attn.pattern", "blocks.1.attn.masked_scores"} <= set(info.kept)
    assert {"blocks.3.attn.pattern", "blocks.3.attn.masked_scores"} <= set(info.omitted)
    assert info.keep_mb is not None and info.keep_mb > room / 1e6


def test_blocks_that_are_not_a_run_are_listed_one_by_one():
    assert _blocks_of(["blocks.1.attn.pattern", "blocks.3.attn.pattern"]) == "blocks.1,3.attn.pattern"
    assert _blocks_of(["blocks.1.attn.pattern", "blocks.2.attn.pattern"]) == "blocks.1-2.attn.pattern"
    assert _blocks_of(["blocks.3.attn.pattern"]) == "blocks.3.attn.pattern"


@pytest.fixture(scope="module")
def static(tmp_path_factory) -> Path:
    """A stand-in for the built bundle (the page in a browser: tests/web/test_snapshot_generic.py)."""
    root = tmp_path_factory.mktemp("web_dist")
    (root / "assets").mkdir()
    (root / "assets" / "app.js").write_text('document.title = "app";')
    (root / "assets" / "app.css").write_text("body { color: red }")
    (root / "index.html").write_text(
        '<!doctype html><html><head><meta charset="utf-8"><title>x</title>'
        '<script type="module" crossorigin src="./assets/app.js"></script>'
        '<link rel="stylesheet" crossorigin href="./assets/app.css"></head><body><div id="app"></div></body></html>')
    return root


def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="te-snapshot">(.*?)</script>', page, re.S)
    assert m
    return json.loads(m.group(1))


def test_the_page_and_the_notebook_view_are_self_contained(lfm2, static, monkeypatch):
    page = snapshot_html(lfm2, TEXT, static_dir=static, languages=("en",))
    assert not re.search(r'\b(src|href)="\./', page)
    d = embedded(page)
    trace = lfm2.trace(TEXT)
    assert d["trace"]["token_ids"] == trace.token_ids
    assert d["tensors"]["blocks.2.conv.out"]["shape"] == list(trace["blocks.2.conv.out"].shape)
    import transformer_explainer.notebook.snapshot as snap

    monkeypatch.setattr(snap, "_bundle_dir", lambda: static)  # the stand-in bundle, as test_notebook's show tests
    view = show(TEXT, lfm2, widget=False, ablations=False, languages=("en",))
    assert isinstance(view, SnapshotView)
    assert embedded(view.html)["trace"]["token_ids"] == trace.token_ids
    assert 'sandbox="allow-scripts"' in view._repr_html_()
    cls = widget_class()
    if cls is None:
        pytest.skip("anywidget is not installed")
    w = show(trace, lfm2, ablations=False, languages=("en",))  # the anywidget, from a trace
    assert isinstance(w, cls) and embedded(w.html)["trace"]["token_ids"] == trace.token_ids
    assert embedded(w.html)["trace"]["config"]["capabilities"]["runs"] == "transformers"


def test_a_deltanet_layers_implied_attention_is_stored_in_float32(tmp_path):
    # its weights are products of decays, 1e-9 beside 1e-3 in a row: float16 flushes the small ones to 0 or its
    # subnormals, and the view counts their signs and orders them by size (tests/web/test_snapshot_new_views.py)
    model = load_model(str(write_checkpoint("qwen3_5_text", tmp_path / "hybrid", tokenizer=True)),
                       allow_download=False, dtype="float32")
    trace = model.trace(TEXT)
    d, _ = snapshot_data(model, trace, ablations=False, languages=("en",))
    for i in (0, 2):  # the checkpoint's Gated DeltaNet layers
        s = d["tensors"][f"blocks.{i}.linear_attn.implied_pattern"]
        assert s["dtype"] == "float32" and s["triangle"]  # causal: its lower triangle, as an attention pattern's
        np.testing.assert_array_equal(stored(s), trace[f"blocks.{i}.linear_attn.implied_pattern"].float().numpy())
