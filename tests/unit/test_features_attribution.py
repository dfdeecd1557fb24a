"""Why this token, by features (features/attribution.py, POST /api/attribution/features): a block's output at a
position split into its autoencoder's features plus the error, each part's direct effect on the logit through the
final norm frozen as the attribution view freezes it. The parts add up to the whole; one feature's effect equals a
computation written out here from the weights; at the last block the whole is the logit less the norm's shift term,
elsewhere the whole is the attribution view's components up to that block; bad input is one sentence."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file

from tests.unit.test_features_encode import TEXT, independent, one_sentence, write_sae
from transformer_explainer import load_model
from transformer_explainer.errors import InputError
from transformer_explainer.features.attribution import feature_attribution
from transformer_explainer.server import create_app

LAST, MIDDLE, PRE = "blocks.1.hook_resid_post", "blocks.0.hook_resid_post", "blocks.1.hook_resid_pre"


@pytest.fixture(scope="module")
def shipping(tiny_gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The tiny GPT-2 (2 blocks) laid out as a built-in model shipping autoencoders at both blocks' outputs and one
    at block 1's input."""
    folder = tmp_path_factory.mktemp("fa") / "tiny-fa"
    shutil.copytree(tiny_gpt2_dir, folder)
    for i, hook in enumerate((MIDDLE, PRE, LAST)):
        write_sae(folder / "saes" / hook, hook, seed=20 + i)
    m = load_model(str(folder), allow_download=False)
    m.source = "builtin"
    return m, folder


@pytest.fixture(scope="module")
def client(shipping):
    with TestClient(create_app({"tiny": shipping[0]})) as c:
        yield c


def parts(a) -> float:
    return a.bias + a.error + sum(f.effect for f in a.features) + a.others


@pytest.mark.parametrize("hook", [MIDDLE, LAST])
def test_the_parts_add_up_to_the_whole(shipping, hook: str) -> None:
    model, _ = shipping
    trace = model.trace(TEXT)
    a = feature_attribution(model, trace, hook, top=3)
    assert a.active > 3 and len(a.features) == 3  # the rest in `others`
    assert abs(parts(a) - a.whole) < 1e-4
    assert abs(a.total() - a.whole) < 1e-4
    assert abs(a.whole + a.later + a.rest - a.metric) < 1e-4
    assert [abs(f.effect) for f in a.features] == sorted((abs(f.effect) for f in a.features), reverse=True)
    assert a.position == trace.n_tokens - 1


def test_one_feature_equals_an_independent_computation(shipping, hf_tiny) -> None:
    """f_i * LayerNorm's linear part at the frozen scale (1/sqrt(var(x) + eps) of the last block's output, which the
    final norm reads) of W_dec[i], times ln_f's weight, dotted with the unembedding's row: written out from the
    transformers checkpoint's weights and the autoencoder's file."""
    model, folder = shipping
    trace = model.trace(TEXT)
    a = feature_attribution(model, trace, MIDDLE, top=64)
    w = load_file(str(folder / "saes" / MIDDLE / "sae_weights.safetensors"))
    x = trace["blocks.0.resid_post"][-1:].double()
    rows, _ = independent(x, folder / "saes" / MIDDLE)
    assert [i for i, _ in rows[0]] == sorted((f.id for f in a.features), key=[i for i, _ in rows[0]].index)
    final = trace["blocks.1.resid_post"][-1].double()
    eps = model.config.layer_norm_epsilon
    scale = 1 / torch.sqrt(final.var(unbiased=False) + eps)
    ln_w = hf_tiny.transformer.ln_f.weight.detach().double()
    W_U = hf_tiny.lm_head.weight.detach().double().T  # (D, V)
    for fid, act in rows[0][:3]:
        d = w["W_dec"][fid].double()
        want = act * float(((d - d.mean()) * scale * ln_w) @ W_U[:, a.target])
        got = next(f for f in a.features if f.id == fid)
        assert got.activation == pytest.approx(act, rel=1e-5)
        assert got.effect == pytest.approx(want, rel=1e-4, abs=1e-6)


def test_at_the_last_block_the_whole_is_the_logit_less_the_norm_shift(shipping) -> None:
    model, _ = shipping
    trace = model.trace(TEXT)
    a = feature_attribution(model, trace, LAST, " cat", " mat")
    logits = trace["logits"][-1].double()
    assert a.target_text.strip() == "cat" and a.versus_text.strip() == "mat"
    assert a.metric == pytest.approx(float(logits[a.target] - logits[a.versus]), abs=1e-5)
    assert a.later == pytest.approx(0.0, abs=1e-4)
    assert abs(a.whole - (a.metric - a.rest)) < 1e-4


def test_in_a_middle_block_the_whole_is_the_attribution_up_to_that_block(shipping) -> None:
    """The same frozen-norm convention as the attribution view: block 0's output's effect is the sum of the
    view's components written up to block 0 (embeddings, its heads, its bias, its MLP)."""
    model, _ = shipping
    trace = model.trace(TEXT)
    a = feature_attribution(model, trace, MIDDLE, position=3)
    dla = model.attribute(trace, a.target, position=3)
    upto = sum(c.value for c in dla.components if c.layer is None or c.layer <= 0)
    after = sum(c.value for c in dla.components if c.layer is not None and c.layer > 0)
    assert a.whole == pytest.approx(upto, abs=1e-4)
    assert a.later == pytest.approx(after, abs=1e-4)
    assert a.rest == pytest.approx(dla.rest) and a.metric == pytest.approx(dla.metric)


def test_the_default_is_the_middle_shipped_block_output(shipping) -> None:
    model, _ = shipping
    a = feature_attribution(model, model.trace(TEXT))
    assert a.hook == MIDDLE  # of blocks.0/1 hook_resid_post; the resid_pre one is not a block's output


def test_python_bad_input(shipping, tiny_model) -> None:
    model, _ = shipping
    trace = model.trace(TEXT)
    with pytest.raises(InputError, match="not a block's output"):
        feature_attribution(model, trace, PRE)
    with pytest.raises(InputError, match="ships no sparse autoencoder"):
        feature_attribution(tiny_model, tiny_model.trace(TEXT))


def test_api_equals_python(client, shipping) -> None:
    model, _ = shipping
    r = client.post("/api/attribution/features", json={"text": TEXT, "hook": LAST, "target": " cat", "top": 5})
    assert r.status_code == 200, r.text
    got = r.json()
    a = feature_attribution(model, model.trace(TEXT), LAST, model.token_id(" cat"), top=5)
    assert got["target"]["id"] == a.target and got["versus"] is None
    assert [f["id"] for f in got["features"]] == [f.id for f in a.features]
    assert [f["effect"] for f in got["features"]] == pytest.approx([f.effect for f in a.features], abs=1e-6)
    for key in ("whole", "later", "rest", "metric", "bias", "error", "others"):
        assert got[key] == pytest.approx(getattr(a, key), abs=1e-6), key
    assert got["layer"] == 1 and got["n_layer"] == 2
    assert got["target"]["logit"] == pytest.approx(got["metric"], abs=1e-5)


@pytest.mark.parametrize(("body", "phrase"), [
    ({"hook": "blocks.7.hook_resid_post"}, "none at blocks.7.hook_resid_post"),  # a hook the model lacks
    ({"hook": "blocks.1.resid_post"}, "is not a hook point"),  # misspelt
    ({"hook": PRE}, "not a block's output"),  # shipped, but not a block's output
    ({"target": " cat", "versus": " cat"}, "same token"),
    ({"target": 10**6}, "outside the vocabulary"),
    ({"position": 99}, "outside the"),
])
def test_api_bad_input_is_one_sentence(client, body: dict, phrase: str) -> None:
    r = client.post("/api/attribution/features", json={"text": TEXT, **body})
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    one_sentence(r.json()["detail"])
    assert phrase in r.json()["detail"]


@pytest.mark.parametrize("body", [{"top": 0}, {"top": 65}, {"text": TEXT, "ids": [1]}])
def test_api_refuses_malformed_requests(client, body: dict) -> None:
    r = client.post("/api/attribution/features", json={"text": TEXT, **body})
    assert r.status_code == 422, r.text
