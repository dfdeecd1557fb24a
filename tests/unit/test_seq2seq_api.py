"""The seq2seq JSON API through FastAPI's TestClient, on a tiny random model."""

from __future__ import annotations

import math

import pytest
import torch
from fastapi.testclient import TestClient

from transformer_explainer.errors import InputError
from transformer_explainer.seq2seq.config import PRESETS
from transformer_explainer.seq2seq.decoding import greedy_decode
from transformer_explainer.seq2seq.engine import Seq2SeqModel
from transformer_explainer.seq2seq.model import EncoderDecoder, positional_encoding
from transformer_explainer.seq2seq.tasks import ReverseTask
from transformer_explainer.server import create_app
from transformer_explainer.server.routes.seq2seq import model_loader


@pytest.fixture(scope="module")
def model() -> Seq2SeqModel:
    task = ReverseTask(max_len=6, alphabet="abcdef")
    torch.manual_seed(0)
    net = EncoderDecoder(PRESETS["tiny"].with_vocab(len(task.src_vocab), len(task.tgt_vocab)))
    return Seq2SeqModel.for_task(net, task)


@pytest.fixture(scope="module")
def client(model: Seq2SeqModel, tiny_model) -> TestClient:
    def load(task: str) -> Seq2SeqModel:
        if task != "reverse":
            raise InputError(f"no shipped checkpoint for task {task!r}")
        return model

    app = create_app({"tiny": tiny_model})
    app.dependency_overrides[model_loader] = lambda: load
    return TestClient(app)


def test_tasks(client: TestClient):
    r = client.get("/api/seq2seq/tasks")
    assert r.status_code == 200
    tasks = {t["name"]: t for t in r.json()["tasks"]}
    assert set(tasks) == {"reverse", "number_words", "number_words_zh", "dates"}
    assert tasks["number_words"]["tgt_level"] == "word" and tasks["reverse"]["examples"]
    assert tasks["number_words"]["src_vocab"] == list("0123456789")  # what may be typed, specials left out
    card = tasks["reverse"]["checkpoint"]  # the shipped one's shape and accuracy, from its config.json
    assert card["d_model"] > 0 and card["exact_match"] >= 0.99


def test_decode_shows_the_source_entering_the_encoder(client: TestClient, model: Seq2SeqModel):
    d = client.post("/api/seq2seq/decode", json={"task": "reverse", "text": "bead"}).json()
    ids = model.encode_source("bead")
    assert d["src_ids"] == ids and d["embed_scale"] == pytest.approx(math.sqrt(model.config.d_model))
    embed = torch.tensor(d["source"]["embed"])
    pe = torch.tensor(d["source"]["pos_encoding"])
    with torch.no_grad():
        expected = model.net.src_embed.lut.weight[ids] * math.sqrt(model.config.d_model)
    torch.testing.assert_close(embed, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pe, positional_encoding(4, model.config.d_model), atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.tensor(d["source"]["embed_sum"]), embed + pe, atol=1e-5, rtol=1e-5)


def test_decode_greedy_with_step_traces(client: TestClient, model: Seq2SeqModel):
    r = client.post("/api/seq2seq/decode", json={"task": "reverse", "text": "cafe"})
    assert r.status_code == 200
    d = r.json()
    expected = greedy_decode(model, model.encode_source("cafe"))
    assert d["tokens"] == expected.tokens and d["output"] == expected.text
    assert d["src_tokens"] == list("cafe")
    L, H = model.config.n_decoder_layers, model.config.n_head
    assert len(d["steps"]) == len(expected.steps)
    assert len(d["encoder_attn"]) == model.config.n_encoder_layers
    for s in d["steps"]:
        assert s["input_tokens"][0] == "<s>" and len(s["input_tokens"]) == s["step"] + 1
        assert len(s["cross_attn"]) == L and len(s["cross_attn"][0]) == H
        assert len(s["cross_attn"][0][0]) == 4  # one weight per source token
        assert len(s["self_attn"][0][0]) == s["step"] + 1  # the growing decoder input
        for layer in s["cross_attn"] + s["self_attn"]:
            for head in layer:
                assert math.isclose(sum(head), 1.0, abs_tol=1e-4)
        assert s["top"][0]["prob"] >= s["top"][-1]["prob"]


def test_decode_beam(client: TestClient):
    d = client.post("/api/seq2seq/decode", json={"task": "reverse", "text": "abc", "beam": 3}).json()
    assert d["beam"] == 3 and d["beams"] and all(len(b["alive"]) <= 3 for b in d["beams"])
    g = client.post("/api/seq2seq/decode", json={"task": "reverse", "text": "abc", "beam": 1}).json()
    assert g["beams"] == []
    if d["finished"] and g["finished"]:
        assert d["score"] >= g["score"] - 1e-4


def test_decode_names_the_model_and_compares_beam_sizes(client: TestClient, model: Seq2SeqModel):
    d = client.post("/api/seq2seq/decode", json={"task": "reverse", "text": "abca", "beam": 2,
                                                 "compare_beams": [1, 2, 3]}).json()
    c = model.config
    assert (d["d_ff"], d["src_vocab_size"], d["tgt_vocab_size"]) == (c.d_ff, c.src_vocab_size, c.tgt_vocab_size)
    assert d["n_params"] == sum(p.numel() for p in model.net.parameters())
    # the matrices the paper shares (its section 3.4) are three here, as the lesson says
    shared = {model.net.src_embed.lut.weight.data_ptr(), model.net.tgt_embed.lut.weight.data_ptr(),
              model.net.generator.proj.weight.data_ptr()}
    assert len(shared) == 3
    assert d["max_output_len"] == model.max_decode_len
    assert [a["beam"] for a in d["alternatives"]] == [1, 2, 3]
    greedy = greedy_decode(model, model.encode_source("abca"))
    assert d["alternatives"][0]["tokens"] == greedy.tokens
    assert d["alternatives"][0]["score"] == pytest.approx(greedy.score, abs=1e-5)
    # the request's own beam size is the traced decode itself
    assert d["alternatives"][1]["output"] == d["output"] and d["alternatives"][1]["score"] == d["score"]
    assert client.post("/api/seq2seq/decode", json={"task": "reverse", "text": "abc"}).json()["alternatives"] == []
    for bad in ([0], [99], list(range(1, 10))):
        assert client.post("/api/seq2seq/decode", json={"task": "reverse", "text": "abc",
                                                        "compare_beams": bad}).status_code == 422


@pytest.mark.parametrize("body, status", [
    ({"task": "reverse", "text": ""}, 422),
    ({"task": "reverse", "text": "   "}, 422),
    ({"task": "reverse", "text": "x" * 500}, 422),
    ({"task": "reverse", "text": "abc", "beam": 0}, 422),
    ({"task": "reverse", "text": "abc", "beam": 99}, 422),
    ({"task": "reverse"}, 422),
    ({"task": "reverse", "text": "xyz"}, 400),  # outside the vocabulary
    ({"task": "reverse", "text": "abcdefab"}, 400),  # longer than trained
    ({"task": "dates", "text": "March 5, 2021"}, 404),  # no checkpoint behind this loader
])
def test_decode_rejects_bad_input(client: TestClient, body, status):
    r = client.post("/api/seq2seq/decode", json=body)
    assert r.status_code == status, r.text
    if status == 400:
        assert "vocabulary" in r.json()["detail"] or "at most" in r.json()["detail"]


def test_positional_encoding_beyond_the_trained_length(client: TestClient, model: Seq2SeqModel):
    r = client.post("/api/seq2seq/positional-encoding", json={"task": "reverse", "n_positions": 40})
    assert r.status_code == 200
    d = r.json()
    assert d["d_model"] == model.config.d_model and d["trained_length"] == 7 and d["n_positions"] == 40
    pe = torch.tensor(d["encoding"])
    sim = torch.tensor(d["similarity"])
    assert pe.shape == (40, model.config.d_model) and sim.shape == (40, 40)
    torch.testing.assert_close(sim, pe @ pe.T, atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(torch.diagonal(sim), torch.full((40,), d["norm"] ** 2), atol=1e-3, rtol=1e-4)
    r = client.post("/api/seq2seq/positional-encoding", json={"d_model": 16, "n_positions": 5})
    assert r.status_code == 200 and r.json()["trained_length"] is None
    for body in ({"d_model": 15}, {"n_positions": 0, "d_model": 8}, {"n_positions": 100000, "d_model": 8}):
        assert client.post("/api/seq2seq/positional-encoding", json=body).status_code == 422
    assert client.post("/api/seq2seq/positional-encoding", json={}).status_code == 400


def test_compare_teacher_forced_and_free_running(client: TestClient):
    r = client.post("/api/seq2seq/compare", json={"task": "reverse", "text": "abcd"})
    assert r.status_code == 200
    d = r.json()
    assert d["target"] == "dcba" and d["gold_tokens"] == list("dcba")  # the task's own answer
    assert len(d["teacher_tokens"]) == 5
    for s in d["steps"]:
        if s["teacher_input"]:
            assert s["teacher_input"] == ["<s>", *"dcba"][: s["step"] + 1]
    r = client.post("/api/seq2seq/compare", json={"task": "reverse", "text": "abcd", "target": "ddd"})
    assert r.status_code == 200 and r.json()["gold_tokens"] == ["d", "d", "d"]
    assert client.post("/api/seq2seq/compare", json={"task": "reverse", "text": "abcd", "target": "dxz"}
                       ).status_code == 400


def test_model_calls_wait_in_the_servers_bounded_pool(client: TestClient):
    """Decoding runs a model: with the pool's model lane full it is refused (503, Retry-After) like
    the core's traces, instead of piling up in FastAPI's own thread pool."""
    pool = client.app.state.context.pool
    pool._heavy.pending = pool.workers + pool.max_queue  # as if every worker and queue place were taken
    try:
        r = client.post("/api/seq2seq/decode", json={"task": "reverse", "text": "bead"})
        assert r.status_code == 503 and "Retry-After" in r.headers and "busy" in r.json()["detail"]
        assert client.get("/api/seq2seq/tasks").status_code == 200  # listing tasks runs no model: the light lane
    finally:
        pool._heavy.pending = 0
    assert client.post("/api/seq2seq/decode", json={"task": "reverse", "text": "bead"}).status_code == 200
