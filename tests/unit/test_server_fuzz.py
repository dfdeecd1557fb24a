"""Property-based fuzzing of the JSON API (hypothesis): whatever a client sends, the answer is a
success or a 4xx with a readable message, never a 500."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_explainer.server import create_app

ENDPOINTS = ["/api/trace", "/api/tensors", "/api/next_token", "/api/generate", "/api/weights"]

wild_number = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 0.5, 1.0000001, 2**63, 50257, 50256, 128, 127]),
)
wild_text = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["", " ", "\x00", "a\x07b", "\ud800", "hello world", "人工智能", " a" * 200]),
)
scalar = st.one_of(st.none(), st.booleans(), wild_number, wild_text)
json_value = st.recursive(scalar, lambda c: st.one_of(st.lists(c, max_size=4),
                                                      st.dictionaries(st.text(max_size=8), c, max_size=4)),
                          max_leaves=10)
tensor_name = st.one_of(st.sampled_from(["blocks.0.attn.pattern", "blocks.1.mlp.post", "logits", "embed.W_E",
                                         "blocks.0.attn.W_Q", "blocks.9.attn.q", "../x", "embed.sum", ""]), wild_text)
tensor_spec = st.fixed_dictionaries({"name": tensor_name}, optional={
    "head": wild_number, "position": wild_number, "row": wild_number,
    "dtype": st.sampled_from(["float16", "float32", "int8"])})
sampling = st.fixed_dictionaries({}, optional={"temperature": wild_number, "top_k": wild_number,
                                               "top_p": wild_number, "seed": wild_number})
body = st.fixed_dictionaries({}, optional={
    "text": wild_text,
    "ids": st.lists(wild_number, max_size=6),
    "model": st.one_of(st.none(), st.sampled_from(["tiny", "default", "/etc/passwd", "gpt2"]), wild_text),
    "truncate": st.booleans(),
    "top_n": wild_number,
    "sampling": st.one_of(sampling, json_value),
    "include": st.lists(tensor_spec, max_size=3),
    "tensors": st.lists(tensor_spec, max_size=3),
    "token_id": wild_number,
    "extra": json_value,
})


@pytest.fixture(scope="module")
def client(tiny_model):
    with TestClient(create_app({"tiny": tiny_model})) as c:
        yield c


def check(r) -> None:
    assert r.status_code < 500 or r.status_code == 503, (r.status_code, r.text[:500])
    if r.status_code >= 400:
        detail = r.json()["detail"]
        assert isinstance(detail, str) and detail


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(ENDPOINTS), data=body)
def test_structured_bodies_never_500(client, path, data):
    # json.dumps, not the client's encoder: NaN and lone surrogates must reach the server as a browser could send them
    r = client.post(path, content=json.dumps(data).encode(), headers={"content-type": "application/json"})
    check(r)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(ENDPOINTS), raw=st.one_of(st.binary(max_size=80), json_value.map(
    lambda v: json.dumps(v).encode())))
def test_arbitrary_bytes_never_500(client, path, raw):
    check(client.post(path, content=raw, headers={"content-type": "application/json"}))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.text(max_size=40))
def test_arbitrary_get_paths_never_500(client, path):
    from urllib.parse import quote

    r = client.get("/" + quote(path, safe="/%.~"))
    assert r.status_code in (200, 404, 405), (path, r.status_code)


@pytest.mark.parametrize(("path", "body"), [
    ("/api/trace", {"ids": [False]}),  # what schemathesis found: `false` read as the token id 0
    ("/api/trace", {"text": "a", "top_n": True}),
    ("/api/trace", {"text": "a", "top_n": "3"}),
    ("/api/trace", {"text": "a", "truncate": 1}),
    ("/api/trace", {"text": "a", "sampling": {"temperature": True}}),
    ("/api/next_token", {"text": "a", "sampling": {"seed": "7"}}),
    ("/api/analysis/ablate", {"text": "a", "heads": [[True, 0]]}),
    ("/api/seq2seq/decode", {"task": "reverse", "text": "abc", "beam": True}),
    ("/api/seq2seq/decode", {"task": "reverse", "text": "abc", "unknown": 1}),
])
def test_values_are_taken_as_the_schema_types_them(client, path, body):
    r = client.post(path, json=body)
    assert r.status_code == 422, (path, body, r.status_code, r.text[:300])
    assert r.json()["code"] in ("request_invalid", "field_type", "field_unknown") and r.json()["detail"]
