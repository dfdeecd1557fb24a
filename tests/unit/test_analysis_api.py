"""The analysis API (/api/analysis): its values equal the Python functions', models come only from
the server's registry, and bad input gets a 4xx with a message (never a 500)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_explainer.analysis import (
    ablate,
    analogy,
    attention_stats,
    head_importance,
    head_roles,
    logit_lens,
    nearest_tokens,
    project_2d,
    prune_heads,
    reference_head_roles,
)
from transformer_explainer.server import create_app

TEXT = "The cat sat on the mat, and then the cat slept."


@pytest.fixture(scope="module")
def client(tiny_model):
    with TestClient(create_app({"tiny": tiny_model})) as c:
        yield c


def post(client, path: str, **body) -> dict:
    r = client.post(f"/api/analysis/{path}", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def same(a, b) -> None:
    """JSON-equal: the API sends the Python results' own numbers (through a JSON round trip)."""
    assert json.loads(json.dumps(a)) == json.loads(json.dumps(b))


def test_lens_equals_logit_lens(client, tiny_model):
    d = post(client, "lens", text=TEXT, positions=[2, -1], top=4)
    trace = tiny_model.trace(TEXT)
    lens = logit_lens(tiny_model, trace, top=4, positions=[2, -1]).to_dict()
    assert d["model"] == "tiny"
    assert d["tokens"] == trace.tokens and d["token_ids"] == trace.token_ids
    same({k: d[k] for k in lens}, lens)
    # the last row is the model's own output: rank 1 for the final prediction
    assert all(col["target_rank"] == 1 for col in d["layers"][-1]["positions"])
    assert d["positions"] == [2, trace.n_tokens - 1]


def test_ablate_equals_python(client, tiny_model):
    d = post(client, "ablate", text=TEXT, heads=[[1, 2]], top=6)
    ids = tiny_model.encode(TEXT)
    ref = ablate(tiny_model, ids, [(1, 2)]).to_dict(tiny_model.tokenizer.token_text, 6)
    same({k: d[k] for k in ref}, ref)
    assert d["kl"] > 0 and d["before"] != d["after"]


def test_ablate_whole_layer_and_mean_mode(client, tiny_model):
    d = post(client, "ablate", text=TEXT, layers=[0], mode="mean")
    assert d["heads"] == [[0, h] for h in range(tiny_model.config.n_head)]
    ref = ablate(tiny_model, TEXT, [(0, h) for h in range(tiny_model.config.n_head)], mode="mean")
    assert d["loss_after"] == pytest.approx(ref.ablated_loss, rel=1e-6)


def test_importance_and_prune_equal_python(client, tiny_model):
    d = post(client, "importance", text=TEXT)
    ref = head_importance(tiny_model, TEXT)
    same(d["loss_change"], ref.loss_change.tolist())
    same(d["kl"], ref.kl.tolist())
    assert d["n_layer"] == 2 and d["n_head"] == 4
    assert d["ranked"][0] == list(ref.ranked("loss")[0][0])
    p = post(client, "prune", text=TEXT, max_heads=3)
    same(p["steps"], prune_heads(tiny_model, TEXT, max_heads=3, recompute=False).to_dict()["steps"])


def test_heads_equal_python(client, tiny_model):
    d = post(client, "heads", text=TEXT)
    trace = tiny_model.trace(TEXT)
    same(d["text"], head_roles(trace).to_dict())
    same(d["stats"], attention_stats(trace).to_dict())
    same(d["reference"], reference_head_roles(tiny_model).to_dict())
    assert len(d["text_role_of"]) == 2 and len(d["text_role_of"][0]) == 4
    d = post(client, "heads", text=TEXT, reference=False)
    assert d["reference"] is None


def test_one_token_text_gives_nulls_not_nan(client):
    d = post(client, "heads", text="Hello", reference=False)
    assert d["stats"]["entropy"][0][0] is None  # no query sees two keys: nothing to average


def test_embeddings_equal_python(client, tiny_model):
    d = post(client, "neighbours", token=" cat", n=5)
    ref = nearest_tokens(tiny_model, " cat", 5)
    assert [(x["id"], x["similarity"]) for x in d["neighbours"]] == [(n.id, n.similarity) for n in ref]
    assert d["token"]["token"] == " cat"
    d = post(client, "analogy", positive=[" king", " woman"], negative=[" man"], n=5)
    same(d["neighbours"], analogy(tiny_model, [" king", " woman"], [" man"], 5).to_dict(
        tiny_model.tokenizer.token_text)["neighbours"])
    d = post(client, "project", tokens=[" cat", " dog", " king", 42])
    same(d["points"], project_2d(tiny_model, [" cat", " dog", " king", 42]).to_dict()["points"])


@pytest.mark.parametrize(("path", "body", "status"), [
    ("lens", {"text": TEXT, "model": "/etc/passwd"}, 404),  # only the server's models, by name
    ("lens", {"text": TEXT, "model": "gpt2"}, 404),
    ("lens", {"text": TEXT, "positions": [99]}, 422),
    ("lens", {"text": TEXT, "top": 0}, 422),
    ("lens", {"text": ""}, 422),
    ("lens", {"text": TEXT, "ids": [1]}, 422),
    ("lens", {"text": TEXT, "surprise": 1}, 422),
    ("ablate", {"text": TEXT}, 422),
    ("ablate", {"text": TEXT, "heads": [[5, 0]]}, 422),
    ("ablate", {"text": TEXT, "heads": [[0, 9]]}, 422),
    ("ablate", {"text": TEXT, "layers": [7]}, 422),
    ("ablate", {"text": TEXT, "heads": [[0, 0]], "mode": "random"}, 422),
    ("importance", {"text": "Hi"}, 422),  # one token: no loss to compare
    ("neighbours", {"token": " a b c d"}, 422),  # not one token
    ("neighbours", {"token": 10**9}, 422),
    ("neighbours", {"token": ""}, 422),
    ("analogy", {"positive": []}, 422),
    ("project", {"tokens": [" cat"]}, 422),
])
def test_bad_input_is_4xx_with_message(client, path, body, status):
    r = client.post(f"/api/analysis/{path}", json=body)
    assert r.status_code == status, r.text
    assert r.json()["detail"]


def test_malformed_json_is_400(client):
    r = client.post("/api/analysis/lens", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400


wild = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True),
                 st.text(max_size=12), st.lists(st.integers(-3, 9), max_size=3))
fuzz_body = st.fixed_dictionaries({}, optional={
    "text": st.one_of(st.text(max_size=20), st.sampled_from(["the cat", "\x00", "\ud800"])), "ids": wild,
    "model": st.sampled_from([None, "tiny", "nope"]), "positions": st.lists(wild, max_size=3), "top": wild,
    "heads": st.lists(st.lists(st.integers(-2, 6), max_size=3), max_size=2), "layers": wild, "mode": wild,
    "token": wild, "positive": st.lists(wild, max_size=2), "negative": wild, "tokens": wild, "n": wild,
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["lens", "ablate", "heads", "neighbours", "analogy", "project"]), body=fuzz_body)
def test_fuzz_never_500(client, path, body):
    r = client.post(f"/api/analysis/{path}", content=json.dumps(body), headers={"content-type": "application/json"})
    assert r.status_code < 500, (r.status_code, r.text[:300])
    if r.status_code >= 400:
        assert r.json()["detail"]
