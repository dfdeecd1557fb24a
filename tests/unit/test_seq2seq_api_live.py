"""The live training endpoints through FastAPI's TestClient: a run starts, streams its events as
server-sent events (loss falling over a few dozen steps), refuses a second run meanwhile, stops on
request, and leaves nothing behind."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pytest
import torch
from fastapi.testclient import TestClient

from transformer_explainer.seq2seq.live_training import LiveTraining
from transformer_explainer.server import create_app
from transformer_explainer.server.routes.seq2seq import live_training


@pytest.fixture
def runs() -> Iterator[LiveTraining]:
    r = LiveTraining()
    yield r
    r.shutdown()


@pytest.fixture
def client(runs: LiveTraining, tiny_model) -> TestClient:
    app = create_app({"tiny": tiny_model})
    app.dependency_overrides[live_training] = lambda: runs
    return TestClient(app)


def read_events(client: TestClient, run_id: str, after: int = 0, until: str = "done",
                headers: dict[str, str] | None = None) -> list[tuple[int, dict]]:
    """(id, event) pairs of the stream, up to the first event of kind `until`."""
    out: list[tuple[int, dict]] = []
    with client.stream("GET", f"/api/seq2seq/train/{run_id}/events", params={"after": after},
                       headers=headers or {}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        ev_id = None
        for line in r.iter_lines():
            if line.startswith("id: "):
                ev_id = int(line[4:])
            elif line.startswith("data: "):
                ev = json.loads(line[6:])
                out.append((ev_id, ev))
                if ev["kind"] == until:
                    break
    return out


def test_a_run_streams_falling_loss_and_sharper_attention(client: TestClient, runs: LiveTraining):
    threads = torch.get_num_threads()
    r = client.post("/api/seq2seq/train", json={"task": "reverse", "steps": 40, "example": "abcdef"})
    assert r.status_code == 202, r.text
    run_id = r.json()["run"]
    assert r.json()["reference"] == "fedcba"
    early = client.post("/api/seq2seq/decode", json={"task": "reverse", "text": "abc", "run": run_id})
    assert early.status_code == 409 and "not ended yet" in early.json()["detail"]
    busy = client.post("/api/seq2seq/train", json={"task": "dates", "steps": 40})
    assert busy.status_code == 409 and "already going" in busy.json()["detail"]
    assert client.get("/api/seq2seq/train").json()["run"]["run"] == run_id

    events = read_events(client, run_id)
    ids = [i for i, _ in events]
    assert ids == list(range(1, len(ids) + 1))  # numbered in order, none missing
    kinds = [e["kind"] for _, e in events]
    assert kinds[0] == "start" and kinds[-1] == "done"
    start, done = events[0][1], events[-1][1]
    assert start["src_tokens"] == list("abcdef") and start["rows"] == [*"fedcba", "</s>"]
    assert done["status"] == "finished" and done["step"] == 40 and "exact_match" in done

    losses = [e["loss"] for _, e in events if e["kind"] == "step"]
    assert [e["step"] for _, e in events if e["kind"] == "step"] == list(range(1, 41))
    assert all(math.isfinite(x) for x in losses)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3, losses  # it learns

    snaps = [e for _, e in events if e["kind"] == "snapshot"]
    assert snaps[0]["step"] == 0 and snaps[-1]["step"] == 40 and len(snaps) >= 5
    L, H = start["n_layers"], start["n_heads"]
    for s in snaps:
        cross = torch.tensor(s["cross_attn"])
        assert cross.shape == (L, H, 7, 6)  # rows: reference + end token, columns: source
        torch.testing.assert_close(cross.sum(-1), torch.ones(L, H, 7), atol=1e-3, rtol=0)
        assert len(s["gold_prob"]) == 7 and isinstance(s["output"], str)
    # the untrained model spreads its attention; training concentrates it somewhere
    entropy = [float(-(torch.tensor(s["cross_attn"]).clamp_min(1e-9).log() * torch.tensor(s["cross_attn"])).sum(-1)
                     .mean()) for s in (snaps[0], snaps[-1])]
    assert entropy[1] < entropy[0]
    assert any(e["kind"] == "eval" for _, e in events)

    run = runs.get(run_id)
    assert run is not None and run.join(10)
    assert run.workdir is not None and not run.workdir.exists()  # the checkpoints' temporary folder is gone
    assert torch.get_num_threads() == threads
    # the model the run ended with decodes and compares like a shipped one
    d = client.post("/api/seq2seq/decode", json={"task": "reverse", "text": "abc", "run": run_id})
    assert d.status_code == 200 and d.json()["run"] == run_id and d.json()["steps"]
    c = client.post("/api/seq2seq/compare", json={"task": "reverse", "text": "abc", "run": run_id})
    assert c.status_code == 200 and c.json()["gold_tokens"] == list("cba")
    wrong = client.post("/api/seq2seq/decode", json={"task": "dates", "text": "5 Mar 1999", "run": run_id})
    assert wrong.status_code == 400 and "learned the 'reverse' task" in wrong.json()["detail"]
    # asked again after the end, the stream says there is nothing more (EventSource stops reconnecting)
    assert client.get(f"/api/seq2seq/train/{run_id}/events", headers={"Last-Event-ID": str(len(events))}
                      ).status_code == 204
    # a reconnection resumes after the last event it saw
    tail = read_events(client, run_id, after=len(events) - 3)
    assert [i for i, _ in tail] == ids[-3:] and [e for _, e in tail] == [e for _, e in events[-3:]]


def test_stop_ends_the_run_cleanly(client: TestClient, runs: LiveTraining):
    r = client.post("/api/seq2seq/train", json={"task": "dates", "steps": 1500})
    assert r.status_code == 202, r.text
    run_id = r.json()["run"]
    first = read_events(client, run_id, until="step")  # training has begun
    assert first[-1][1]["step"] == 1
    s = client.post(f"/api/seq2seq/train/{run_id}/stop")
    assert s.status_code == 200 and s.json()["status"] in ("stopping", "stopped")
    events = read_events(client, run_id, after=len(first))
    done = events[-1][1]
    assert done["kind"] == "done" and done["status"] == "stopped" and done["step"] < 1500
    assert "exact_match" in done  # the trainer evaluated once more on its way out
    run = runs.get(run_id)
    assert run is not None and run.join(10) and not run.workdir.exists()
    assert client.get(f"/api/seq2seq/train/{run_id}").json()["status"] == "stopped"
    assert client.post(f"/api/seq2seq/train/{run_id}/stop").status_code == 200  # stopping twice is harmless
    again = client.post("/api/seq2seq/train", json={"task": "reverse", "steps": 10})
    assert again.status_code == 202  # the server is free again
    read_events(client, again.json()["run"])


@pytest.mark.parametrize("body, status, words", [
    ({"task": "nope", "steps": 20}, 400, "unknown task"),
    ({"task": "tsv", "steps": 20}, 400, "unknown task"),
    ({"task": "reverse", "steps": 5}, 422, "steps"),
    ({"task": "reverse", "steps": 100000}, 422, "steps"),
    ({"task": "reverse", "example": "ABC"}, 400, "vocabulary"),
    ({"task": "reverse", "example": "abcdefghijklmnopq"}, 400, "tokens long"),
    ({"task": "dates", "example": "31 Feb 2020"}, 400, "cannot work out"),
    ({"steps": 20}, 422, "task"),
])
def test_start_rejects_bad_requests(client: TestClient, runs: LiveTraining, body, status, words):
    r = client.post("/api/seq2seq/train", json=body)
    assert r.status_code == status, r.text
    assert words in json.dumps(r.json()["detail"])
    assert runs.current is None  # nothing started


def test_unknown_runs(client: TestClient):
    assert client.get("/api/seq2seq/train").json()["run"] is None
    for method, path in (("GET", "x1"), ("POST", "x1/stop"), ("GET", "x1/events")):
        r = client.request(method, f"/api/seq2seq/train/{path}")
        assert r.status_code == 404 and "start a new one" in r.json()["detail"]
