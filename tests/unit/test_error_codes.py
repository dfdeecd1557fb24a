"""Every error answer carries a code from errors.ERROR_CODES and the params that code declares, beside the
English `detail`: the errors a learner meets in the web app (an over-long text with the number of tokens
that fit, an empty text, an unknown model, the model loading, a busy or rate-limited server, bad sampling
parameters, a token id outside the vocabulary, the downloads, the encoder-decoder's inputs, the analyses),
and, read from the source, every error raised with a code names exactly that code's params."""

from __future__ import annotations

import ast
import asyncio
import threading
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")
from fastapi import FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from transformer_explainer.errors import ERROR_CODES, CheckpointError, ExplainerError, InputError, coded  # noqa: E402
from transformer_explainer.loading import download  # noqa: E402
from transformer_explainer.loading.download import DownloadJob, DownloadManager  # noqa: E402
from transformer_explainer.schemas import ErrorOut  # noqa: E402
from transformer_explainer.seq2seq.config import PRESETS  # noqa: E402
from transformer_explainer.seq2seq.engine import Seq2SeqModel  # noqa: E402
from transformer_explainer.seq2seq.model import EncoderDecoder  # noqa: E402
from transformer_explainer.seq2seq.tasks import ReverseTask  # noqa: E402
from transformer_explainer.server import ServerSettings, create_app  # noqa: E402
from transformer_explainer.server.app import install_error_handlers  # noqa: E402
from transformer_explainer.server.downloads import job_out  # noqa: E402
from transformer_explainer.server.pool import Busy, ModelPool  # noqa: E402
from transformer_explainer.server.routes.seq2seq import model_loader  # noqa: E402
from transformer_explainer.server.security import AccessSettings  # noqa: E402
from transformer_explainer.server.starting import StartingApp  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer"
CONTEXT = 128  # the tiny model's (tests/conftest.py)
MAX_TOKENS = 16  # the server's limit per request in `limited`


def answer(r: httpx.Response, status: int, code: str) -> dict:
    """The error answer `r`: its status and code as expected, valid as ErrorOut, with the code's params."""
    assert r.status_code == status, r.text
    body = r.json()
    ErrorOut.model_validate(body)
    assert body["code"] == code, body
    assert set(body["params"]) == set(ERROR_CODES[code].params), body
    assert body["detail"] and isinstance(body["detail"], str)
    return body["params"]


@pytest.fixture(scope="module")
def client(tiny_model):
    with TestClient(create_app({"tiny": tiny_model})) as c:
        yield c


@pytest.fixture(scope="module")
def limited(tiny_model):
    with TestClient(create_app({"tiny": tiny_model}, ServerSettings(max_tokens=MAX_TOKENS))) as c:
        yield c


# -- the text ----------------------------------------------------------------------------------------


def test_over_long_text_says_how_many_tokens_fit(client, limited, tiny_model):
    text = "word " * 200
    n = len(tiny_model.tokenizer.encode(text))
    assert n > CONTEXT
    p = answer(client.post("/api/trace", json={"text": text}), 422, "text_too_long")
    assert p == {"tokens": n, "limit": CONTEXT, "context": CONTEXT}
    # the server's own limit per request, below the model's context
    short = "word " * 30
    m = len(tiny_model.tokenizer.encode(short))
    p = answer(limited.post("/api/trace", json={"text": short}), 422, "text_too_long")
    assert p == {"tokens": m, "limit": MAX_TOKENS, "context": CONTEXT}
    # the number the UI offers to keep is the number the server then keeps
    kept = limited.post("/api/trace", json={"text": short, "truncate": True}).json()
    assert kept["truncated"] and len(kept["token_ids"]) == p["limit"]
    # ids alike
    p = answer(client.post("/api/trace", json={"ids": [5] * (CONTEXT + 3)}), 422, "text_too_long")
    assert p == {"tokens": CONTEXT + 3, "limit": CONTEXT, "context": CONTEXT}


def test_text_errors(client):
    answer(client.post("/api/trace", json={"text": ""}), 422, "text_empty")
    answer(client.post("/api/trace", json={"ids": []}), 422, "ids_empty")
    p = answer(client.post("/api/trace", json={"text": "a\x07b"}), 422, "text_control_char")
    assert p == {"char": "U+0007", "index": 1}
    full = client.post("/api/trace", json={"ids": [5] * CONTEXT}).json()["token_ids"]
    p = answer(client.post("/api/generate", json={"ids": full}), 422, "context_full")
    assert p == {"limit": CONTEXT}


def test_a_token_id_outside_the_vocabulary(client, tiny_model):
    V = tiny_model.config.vocab_size
    p = answer(client.post("/api/trace", json={"ids": [1, V + 7]}), 422, "token_id_out_of_range")
    assert p == {"id": V + 7, "max": V - 1}


def test_unknown_model(client):
    p = answer(client.post("/api/trace", json={"model": "gpt-9", "text": "hi"}), 404, "model_unknown")
    assert p == {"model": "gpt-9", "offered": "tiny"}


# -- sampling ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling, code, params", [
    ({"temperature": -1}, "number_too_small", {"field": "sampling.temperature", "limit": 0}),
    ({"top_k": 0}, "number_too_small", {"field": "sampling.top_k", "limit": 1}),
    ({"top_p": 1.5}, "number_too_large", {"field": "sampling.top_p", "limit": 1}),
    ({"top_p": 0}, "number_not_above", {"field": "sampling.top_p", "limit": 0}),
    ({"temperature": "warm"}, "field_type", {"field": "sampling.temperature"}),
    ({"temp": 1}, "field_unknown", {"field": "sampling.temp"}),
])
def test_bad_sampling_parameters_name_the_field_and_the_bound(client, sampling, code, params):
    r = client.post("/api/next_token", json={"text": "hello there", "sampling": sampling})
    assert answer(r, 422, code) == params


def test_sampling_parameters_the_schema_lets_through(client, tiny_model):
    V = tiny_model.config.vocab_size
    r = client.post("/api/next_token", json={"text": "hello there", "sampling": {"top_k": V + 1}})
    assert answer(r, 422, "top_k_too_large") == {"value": V + 1, "vocab": V}
    r = client.post("/api/next_token", json={"text": "hello there", "sampling": {"temperature": 1e-9}})
    p = answer(r, 422, "temperature_too_low")
    assert p["value"] == 1e-9 and 0 < p["min"] < 1


# -- the request -------------------------------------------------------------------------------------


def test_request_errors(client):
    answer(client.post("/api/trace", json={}), 422, "request_invalid")  # neither text nor ids
    assert answer(client.post("/api/tensors", json={"text": "hi"}), 422, "field_missing") == {"field": "tensors"}
    r = client.post("/api/trace", content=b"{not json", headers={"content-type": "application/json"})
    answer(r, 400, "body_unreadable")
    r = client.post("/api/trace", content=b'{"text": "\xff"}', headers={"content-type": "application/json"})
    answer(r, 400, "body_unreadable")
    assert answer(client.get("/api/nothing"), 404, "not_found") == {"path": "/api/nothing"}
    r = client.post("/api/trace", content=b"x" * 1_000_001, headers={"content-type": "application/json"})
    assert answer(r, 413, "body_too_large") == {"limit": 1_000_000}


# -- the server's state ------------------------------------------------------------------------------


def test_busy_and_timed_out():
    async def scenario() -> None:
        pool = ModelPool(workers=1, max_queue=0, timeout_s=0.2)
        release = threading.Event()
        first = asyncio.ensure_future(pool.run(release.wait, 5))
        await asyncio.sleep(0.05)
        with pytest.raises(Busy) as busy:
            await pool.run(lambda: None)
        assert coded(busy.value) == ("busy", {"ahead": 1})
        with pytest.raises(Busy) as late:
            await first
        assert coded(late.value) == ("timed_out", {"seconds": 0.2})
        release.set()
        pool.shutdown()

    asyncio.run(scenario())
    # the handler answers them with their code, 503 and Retry-After
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/busy")
    async def _busy() -> None:
        raise Busy("the server is busy (3 requests ahead of this one); try again shortly", retry_after=2, ahead=3)

    r = TestClient(app).get("/busy")
    assert answer(r, 503, "busy") == {"ahead": 3} and r.headers["retry-after"] == "2"


def test_rate_limited(tiny_model):
    app = create_app({"tiny": tiny_model}, ServerSettings(access=AccessSettings(client_rate=0.5, client_burst=1)))
    with TestClient(app, base_url="http://127.0.0.1:8000") as c:
        assert c.post("/api/trace", json={"text": "one"}).status_code == 200
        p = answer(c.post("/api/trace", json={"text": "two"}), 429, "rate_limited")
        assert p["rate"] == 0.5 and 1 <= p["wait"] <= 2


def test_model_loading_and_a_failed_load():
    gate = threading.Event()

    def build():
        assert gate.wait(10)
        raise CheckpointError("model.safetensors is corrupt or truncated")

    async def scenario() -> None:
        app = StartingApp(build)
        started = asyncio.Event()
        queue: asyncio.Queue = asyncio.Queue()
        await queue.put({"type": "lifespan.startup"})

        async def send(msg) -> None:
            if msg["type"] == "lifespan.startup.complete":
                started.set()

        lifespan = asyncio.ensure_future(app({"type": "lifespan"}, queue.get, send))
        await started.wait()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            r = await c.get("/api/health")
            answer(r, 503, "model_loading")
            assert r.json()["status"] == "loading"
            gate.set()
            r = await c.get("/api/models")
            p = answer(r, 503, "model_load_failed")
            assert "corrupt" in p["reason"]
        await queue.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(lifespan, 10)

    asyncio.run(scenario())


# -- downloads ---------------------------------------------------------------------------------------


def test_download_answers(tiny_model):
    with TestClient(create_app({"tiny": tiny_model}, ServerSettings(downloads=False))) as c:
        answer(c.post("/api/downloads", json={"model": "gpt2"}), 403, "downloads_off")
    with TestClient(create_app({"tiny": tiny_model}, ServerSettings(downloads=True))) as c:
        p = answer(c.post("/api/downloads", json={"model": "llama-7b"}), 404, "download_not_offered")
        assert p["model"] == "llama-7b" and "gpt2" in p["offered"].split(", ")
        assert answer(c.post("/api/downloads/x-1/cancel"), 404, "download_not_found") == {"id": "x-1"}


@pytest.mark.parametrize("error, total, failure, code, params", [
    (ConnectionError("refused"), None, "offline", "download_offline", {}),
    (TimeoutError("slow"), 1000, "interrupted", "download_interrupted", {"done": 400, "total": 1000}),
    (ExplainerError("gpt2.bin arrived damaged", code="download_damaged", file="gpt2.bin"), 1000, "error",
     "download_damaged", {"file": "gpt2.bin"}),
    (OSError("No space left on device"), 1000, "error", "download_failed",
     {"reason": "OSError: No space left on device"}),
])
def test_a_failed_download_job_carries_its_code(tmp_path, monkeypatch, error, total, failure, code, params):
    job = DownloadJob(id="gpt2-1", model="gpt2", repo="openai-community/gpt2", bytes_total=total, bytes_done=400)
    manager = DownloadManager(cache_dir=tmp_path)

    def fails(*_args, **_kwargs):  # the transfer fails with `error`
        raise error

    monkeypatch.setattr(download, "fetch_repo", fails)
    manager._run(job, None)
    out = job_out(job)
    assert out.state == "failed" and out.failure == failure
    assert out.error_code == code and out.error_params == params and out.error
    assert set(params) == set(ERROR_CODES[code].params)


# -- the encoder-decoder page and the analyses -------------------------------------------------------


@pytest.fixture(scope="module")
def s2s_client(tiny_model):
    task = ReverseTask(max_len=6, alphabet="abcdef")
    net = EncoderDecoder(PRESETS["tiny"].with_vocab(len(task.src_vocab), len(task.tgt_vocab)))
    model = Seq2SeqModel.for_task(net, task)

    def load(name: str) -> Seq2SeqModel:
        if name != "reverse":
            raise InputError(f"no shipped checkpoint for task {name!r}", code="s2s_unknown_task", task=name,
                             tasks="reverse")
        return model

    app = create_app({"tiny": tiny_model})
    app.dependency_overrides[model_loader] = lambda: load
    with TestClient(app) as c:
        yield c


def test_seq2seq_input_errors(s2s_client):
    def decode(**body):
        return s2s_client.post("/api/seq2seq/decode", json={"task": "reverse", **body})

    answer(decode(text=""), 422, "text_empty")
    answer(decode(text="   "), 422, "text_empty")
    p = answer(decode(text="xyz"), 400, "s2s_out_of_vocabulary")
    assert p["what"] == "input" and p["level"] == "char" and "x" in p["pieces"]
    assert answer(decode(text="abcdefab"), 400, "s2s_text_too_long") == {"tokens": 8, "limit": 6}
    assert answer(decode(text="abc", beam=99), 422, "number_too_large")["field"] == "beam"
    r = s2s_client.post("/api/seq2seq/decode", json={"task": "dates", "text": "March 5"})
    assert answer(r, 404, "s2s_unknown_task") == {"task": "dates", "tasks": "reverse"}
    r = s2s_client.post("/api/seq2seq/compare", json={"task": "reverse", "text": "abc", "target": "cbz"})
    assert answer(r, 400, "s2s_out_of_vocabulary")["what"] == "target"


def test_analysis_errors(client):
    p = answer(client.post("/api/analysis/neighbours", json={"token": "xqzvvbwk"}), 422, "not_one_token")
    assert p["token"] == "xqzvvbwk" and p["count"] > 1
    p = answer(client.post("/api/analysis/neighbours", json={"token": ""}), 422, "field_too_short")
    assert p == {"field": "token", "limit": 1}  # not "token.constrained-str": the union's member is no field
    answer(client.post("/api/analysis/importance", json={"text": "a"}), 422, "loss_needs_two_tokens")
    r = client.post("/api/analysis/ablate", json={"text": "a b c", "heads": [[0, 99]]})
    assert answer(r, 422, "head_out_of_range") == {"head": 99, "max": 3}


def test_an_analysis_over_the_servers_budget_says_what_would_fit(tiny_model):
    from transformer_explainer.analysis.cost import importance_passes, pass_gflop

    passes = importance_passes(tiny_model.config)
    budget = passes * pass_gflop(tiny_model.config, 10)  # the importance map of a 10-token text, no more
    text = " ".join(f"w{i}" for i in range(40))
    n = len(tiny_model.tokenizer.encode(text))
    with TestClient(create_app({"tiny": tiny_model}, ServerSettings(max_analysis_gflop=budget))) as c:
        p = answer(c.post("/api/analysis/importance", json={"text": text}), 422, "analysis_too_large_text")
        assert p == {"passes": passes, "tokens": n, "fits": 10}
        kept = " ".join(text.split()[:4])
        assert c.post("/api/analysis/importance", json={"text": kept}).status_code == 200
    with TestClient(create_app({"tiny": tiny_model}, ServerSettings(max_analysis_gflop=budget / 1e4))) as c:
        p = answer(c.post("/api/analysis/importance", json={"text": text}), 422, "analysis_too_large")
        assert p == {"passes": passes, "tokens": n}  # not even a 2-token text fits: no shorter text to offer


# -- the table and the source ------------------------------------------------------------------------


def _calls_with_a_code() -> list[tuple[str, int, str, set[str]]]:
    """(file, line, code, the other keyword names) of every call in the source with a literal `code=`."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        if "web_dist" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg is not None}
            if isinstance(kw.get("code"), ast.Constant) and isinstance(kw["code"].value, str):
                others = set(kw) - {"code", "retry_after"}
                out.append((str(path.relative_to(SRC)), node.lineno, kw["code"].value, others))
    return out


def test_every_code_raised_is_in_the_table_with_its_params():
    calls = _calls_with_a_code()
    assert len(calls) > 60, "the scan finds the errors raised with a code"
    wrong = [(f, line, code, sorted(kw)) for f, line, code, kw in calls
             if code not in ERROR_CODES or kw != set(ERROR_CODES[code].params)]
    assert not wrong, wrong


def test_the_error_classes_carry_their_codes():
    for cls in (ExplainerError, InputError, CheckpointError):
        assert cls.code in ERROR_CODES
    assert coded(InputError("x")) == ("input_invalid", {})
    assert coded(CheckpointError("bad file")) == ("model_unusable", {"reason": "bad file"})
    assert coded(ValueError("x")) is None
    assert all(code.isidentifier() and code == code.lower() for code in ERROR_CODES)
