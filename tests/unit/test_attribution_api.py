"""The "Why this token" API (/api/attribution): its values equal `model.attribute` and `model.patch`, the
components plus the constant add up to the metric in the JSON, an attribution of a text the page has traced runs
no forward pass, a patching streams its progress and stops once its client goes away, and bad pairs get a 4xx
with one sentence (never a 500 or a division by zero)."""

from __future__ import annotations

import json
import threading
import time
import typing

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from transformer_explainer import attribution, patching
from transformer_explainer.analysis.attribution_schemas import PATCH_KINDS, ComponentKind, PatchKind
from transformer_explainer.server import ServerSettings, create_app
from transformer_explainer.server.routes import attribution as route

TEXT = "The cat sat on the mat, and then the cat slept on the"
CLEAN = "The cat sat on the mat and the dog sat on the"
CORRUPTED = "The cat sat on the rug and the dog sat on the"


@pytest.fixture(scope="module")
def client(tiny_model):
    with TestClient(create_app({"tiny": tiny_model})) as c:
        yield c


def post(client, path: str, **body) -> dict:
    r = client.post(f"/api/attribution/{path}", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def refused(client, path: str, **body) -> str:
    r = client.post(f"/api/attribution/{path}", json=body)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    detail = r.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail and "Traceback" not in detail
    return detail


def same(a, b) -> None:
    """JSON-equal: the API sends the Python results' own numbers (through a JSON round trip)."""
    assert json.loads(json.dumps(a)) == json.loads(json.dumps(b))


def answer_and_wrong(model, clean: str, corrupted: str) -> tuple[int, int]:
    """The tokens whose logit difference the corruption moves most: random weights predict nothing, and a large
    span keeps the normalised grid clear of float rounding."""
    d = model.last_logits(model.encode(clean)) - model.last_logits(model.encode(corrupted))
    return int(torch.argmax(d)), int(torch.argmin(d))


def test_the_schemas_kinds_are_the_engines() -> None:
    assert typing.get_args(ComponentKind) == typing.get_args(attribution.Kind)
    assert typing.get_args(PatchKind) == PATCH_KINDS == patching.KINDS


@pytest.mark.parametrize("position", [None, 3, -2])
def test_attribute_equals_model_attribute_and_sums_to_the_metric(client, tiny_model, position) -> None:
    d = post(client, "attribute", text=TEXT, position=position)
    a = tiny_model.attribute(TEXT, position=position)
    assert d["model"] == "tiny" and d["token_ids"] == tiny_model.encode(TEXT)
    same({k: d[k] for k in a.to_dict()}, a.to_dict())
    # the lesson of the page: the contributions plus the constant are the logit
    assert sum(c["value"] for c in d["components"]) + d["rest"] == pytest.approx(d["metric"], abs=1e-4)
    logits = tiny_model.trace(TEXT)["logits"][d["position"]]
    assert d["metric"] == pytest.approx(float(logits[d["target"]["id"]]), abs=1e-4)
    L, H = tiny_model.config.n_layer, tiny_model.config.n_head
    assert [c["kind"] for c in d["components"]].count("head") == L * H
    assert len(d["heads"]) == L and all(len(row) == H for row in d["heads"])


def test_attribute_at_an_earlier_position_explains_the_next_token(client, tiny_model) -> None:
    ids = tiny_model.encode(TEXT)
    d = post(client, "attribute", text=TEXT, position=2)
    assert d["position"] == 2 and d["target"]["id"] == ids[3] and d["versus"] is None
    last = post(client, "attribute", text=TEXT)
    top = int(torch.argmax(tiny_model.trace(TEXT).next_token_logits()))
    assert last["position"] == len(ids) - 1 and last["target"]["id"] == top


def test_attribute_a_difference_of_two_tokens(client, tiny_model) -> None:
    d = post(client, "attribute", text=TEXT, target=" cat", versus=" dog")
    a = tiny_model.attribute(TEXT, " cat", " dog")
    same({k: d[k] for k in a.to_dict()}, a.to_dict())
    assert d["versus"] == {"id": tiny_model.token_id(" dog"), "text": " dog"}
    logits = tiny_model.trace(TEXT).next_token_logits().double()
    assert d["metric"] == pytest.approx(float(logits[a.target] - logits[a.versus]), abs=1e-4)
    assert sum(c["value"] for c in d["components"]) + d["rest"] == pytest.approx(d["metric"], abs=1e-4)
    by_id = post(client, "attribute", text=TEXT, target=a.target, versus=a.versus)
    assert by_id["metric"] == d["metric"]


def test_attribute_of_a_traced_text_runs_no_forward_pass(client) -> None:
    text = "A text the page has traced already, and the attribution reads"
    assert client.post("/api/trace", json={"text": text}).status_code == 200
    before = client.get("/api/health").json()["cache"]
    post(client, "attribute", text=text)
    post(client, "attribute", text=text, position=3)
    after = client.get("/api/health").json()["cache"]
    assert after["misses"] == before["misses"] and after["hits"] == before["hits"] + 2


def test_attribute_bad_input_gets_a_sentence(client) -> None:
    assert "same token" in refused(client, "attribute", text=TEXT, target=" cat", versus=" cat")
    assert "not one token" in refused(client, "attribute", text=TEXT, target=" catastrophically")
    assert "outside" in refused(client, "attribute", text=TEXT, position=200)
    refused(client, "attribute", text=TEXT, target=10**6)


def test_patch_equals_model_patch(client, tiny_model) -> None:
    a, w = answer_and_wrong(tiny_model, CLEAN, CORRUPTED)
    d = post(client, "patch", clean=CLEAN, corrupted=CORRUPTED, answer=a, wrong=w)
    p = tiny_model.patch(CLEAN, CORRUPTED, a, w)
    same({k: d[k] for k in p.to_dict()}, p.to_dict())
    L, H, T = tiny_model.config.n_layer, tiny_model.config.n_head, len(d["clean_ids"])
    assert d["clean_ids"] == tiny_model.encode(CLEAN) and d["corrupted_ids"] == tiny_model.encode(CORRUPTED)
    assert set(d["grids"]) == set(PATCH_KINDS) and d["runs"] == 3 * L * T + L * H
    for kind in ("resid_pre", "attn_out", "mlp_out"):
        assert len(d["grids"][kind]) == L and all(len(row) == T for row in d["grids"][kind])  # [layer][position]
    assert len(d["grids"]["heads"]) == L and all(len(row) == H for row in d["grids"]["heads"])  # [layer][head]
    # normalised: each raw value is the corrupted run's metric plus its share of the span to the clean run's
    span = d["clean"] - d["corrupted"]
    for kind, grid in d["grids"].items():
        for g_row, r_row in zip(grid, d["raw"][kind], strict=True):
            for g, r in zip(g_row, r_row, strict=True):
                assert g == pytest.approx((r - d["corrupted"]) / span, abs=1e-4)


def test_patch_some_grids_only(client, tiny_model) -> None:
    a, w = answer_and_wrong(tiny_model, CLEAN, CORRUPTED)
    d = post(client, "patch", clean=CLEAN, corrupted=CORRUPTED, answer=a, wrong=w, what=["heads", "heads"])
    assert list(d["grids"]) == ["heads"]
    assert d["runs"] == tiny_model.config.n_layer * tiny_model.config.n_head
    p = tiny_model.patch(CLEAN, CORRUPTED, a, w, what=["heads"])
    same(d["grids"]["heads"], p.to_dict()["grids"]["heads"])


def test_patch_streams_progress_then_the_result(client, tiny_model) -> None:
    a, w = answer_and_wrong(tiny_model, CLEAN, CORRUPTED)
    body = {"clean": CLEAN, "corrupted": CORRUPTED, "answer": a, "wrong": w}
    r = client.post("/api/attribution/patch", json=body, headers={"accept": route.NDJSON})
    assert r.status_code == 200 and r.headers["content-type"].startswith(route.NDJSON)
    lines = [json.loads(x) for x in r.text.splitlines()]
    progress = [x["progress"] for x in lines[:-1]]
    assert progress and all(set(x) == {"progress"} for x in lines[:-1])
    done = [x["done"] for x in progress]
    assert done == sorted(done) and done[-1] == progress[-1]["total"] == lines[-1]["result"]["runs"]
    plain = post(client, "patch", **body)
    same(lines[-1]["result"], plain)


def test_patch_bad_pairs_get_a_sentence(client, tiny_model) -> None:
    a, w = answer_and_wrong(tiny_model, CLEAN, CORRUPTED)
    detail = refused(client, "patch", clean=CLEAN, corrupted="The cat sat on the big red mat and the dog sat on the",
                     answer=a, wrong=w)
    assert "same number of tokens" in detail
    assert "not one token but" in refused(client, "patch", clean=CLEAN, corrupted=CORRUPTED, answer=" catastrophically",
                                          wrong=w)
    assert "same tokens" in refused(client, "patch", clean=CLEAN, corrupted=CLEAN, answer=a, wrong=w)
    assert "same token" in refused(client, "patch", clean=CLEAN, corrupted=CORRUPTED, answer=a, wrong=a)
    assert "resid_pre" in refused(client, "patch", clean=CLEAN, corrupted=CORRUPTED, answer=a, wrong=w, what=["z"])
    refused(client, "patch", clean="", corrupted=CORRUPTED, answer=a, wrong=w)
    # streamed or not, a refusal is an ordinary 4xx answer: the stream starts only once the pair is accepted
    r = client.post("/api/attribution/patch", json={"clean": CLEAN, "corrupted": CLEAN, "answer": a, "wrong": w},
                    headers={"accept": route.NDJSON})
    assert r.status_code == 422 and "same tokens" in r.json()["detail"]


def test_patch_over_the_budget_says_what_fits(tiny_model) -> None:
    """The server's analysis budget bounds a patching as it bounds the analyses."""
    a, w = answer_and_wrong(tiny_model, CLEAN, CORRUPTED)
    T = len(tiny_model.encode(CLEAN))
    cost = patching.PatchingCost(tiny_model.config, T, patching.KINDS)
    with TestClient(create_app({"tiny": tiny_model}, ServerSettings(max_analysis_gflop=cost.gflop / 2))) as client:
        detail = refused(client, "patch", clean=CLEAN, corrupted=CORRUPTED, answer=a, wrong=w)
        fits = cost.longest_prompt_within(cost.gflop / 2)
        assert 2 <= fits < T and f"at most {fits} tokens" in detail and f"{cost.runs:,} patched runs" in detail
        assert "heads alone" in detail
        # and what it says fits, fits
        post(client, "patch", clean=CLEAN, corrupted=CORRUPTED, answer=a, wrong=w, what=["heads"])


def test_tokens_of_texts(client, tiny_model) -> None:
    d = post(client, "tokens", texts=[CLEAN, "人工智能"])
    assert d["bos_id"] is None  # GPT-2 puts nothing before a text
    assert d["texts"][0]["ids"] == tiny_model.encode(CLEAN)
    assert d["texts"][1]["tokens"] == tiny_model.tokenizer.token_texts(tiny_model.encode("人工智能"))
    refused(client, "tokens", texts=[])


def test_llama_family_attribute_and_patch(llama_family_dir) -> None:
    from transformer_explainer import load_model

    model = load_model(str(llama_family_dir), allow_download=False)
    with TestClient(create_app({"m": model})) as c:
        assert post(c, "tokens", texts=[TEXT])["bos_id"] == model.tokenizer.bos_id
        d = post(c, "attribute", text=TEXT)
        assert {x["kind"] for x in d["components"]} <= {"embed", "head", "attn_bias", "mlp"}  # no position table
        assert sum(x["value"] for x in d["components"]) + d["rest"] == pytest.approx(d["metric"], abs=1e-4)
        n = len(model.encode(CLEAN))  # a corruption of the same length in this small vocabulary
        corrupted = next(x for x in (CLEAN.replace("mat", w) for w in ("hat", "cat", "dog", "rat", "sat"))
                         if len(model.encode(x)) == n and x != CLEAN)
        a, w = answer_and_wrong(model, CLEAN, corrupted)
        p = post(c, "patch", clean=CLEAN, corrupted=corrupted, answer=a, wrong=w, what=["resid_pre", "heads"])
        same(p["grids"], model.patch(CLEAN, corrupted, a, w, what=["resid_pre", "heads"]).to_dict()["grids"])


def test_a_cancelled_patching_stops_its_passes(tiny_model, monkeypatch) -> None:
    """The page's cancel aborts the fetch: the connection closes, the server sees the disconnect, and the
    patching stops at its next batch instead of running the rest of its passes for nobody."""
    from tests.web.conftest import LiveServer

    batches = []
    real = patching.patched_metrics

    def slow(*args, **kwargs):  # each batch takes a while, so the request is still running when it is cancelled
        batches.append(threading.get_ident())
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(patching, "patched_metrics", slow)
    a, w = answer_and_wrong(tiny_model, CLEAN, CORRUPTED)
    body = {"clean": CLEAN, "corrupted": CORRUPTED, "answer": a, "wrong": w}
    total_batches = 4 * tiny_model.config.n_layer  # one per grid and layer: the prompts are short
    with LiveServer(create_app({"tiny": tiny_model})) as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as http:
            with http.stream("POST", "api/attribution/patch", json=body,
                             headers={"accept": route.NDJSON}) as r:
                assert r.status_code == 200
                first = json.loads(next(r.iter_lines()))
                assert first["progress"]["done"] < first["progress"]["total"]
            # the stream is closed here, long before the end of the work
            time.sleep(0.5)
            stopped_at = len(batches)
            time.sleep(0.5)
            assert len(batches) == stopped_at, "the patching went on after its client had gone"
            assert http.get("api/health").json()["pending"] == 0
    assert stopped_at < total_batches
