"""The induction run's API (/api/induction) through FastAPI's TestClient, on short live runs (width 16, 40 steps,
a record every 10): the events stream and replay, a second run is refused (409), another client may watch but not
steer (403), pause / step / resume, the owner's stream as the lease, values out of range (400, one sentence), a server
that does not train live (403), and the shipped recorded run served as its log says."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from transformer_explainer.server import create_app
from transformer_explainer.server.app import ServerSettings, offer_live_model
from transformer_explainer.server.registry import ModelRegistry, builtin_run_models
from transformer_explainer.server.routes.induction import recorded_folder, recorded_log_gzip
from transformer_explainer.server.run import ServeConfig, live_training
from transformer_explainer.training.induction import SYMBOLS, read_log
from transformer_explainer.training.induction_live import DEFAULTS, LiveInduction, LiveInductions, live_config

BASE = replace(DEFAULTS, record_every=10, heldout=32, checkpoint_every=1000)
OWNER, OTHER = ("10.0.0.1", 1000), ("10.0.0.2", 1000)


def make_app(tiny_model, *, lease_s: float = 60.0, live: bool = True):
    app = create_app({"tiny": tiny_model}, ServerSettings(live_training=live))
    registry = app.state.registry
    app.state.inductions = LiveInductions(lease_s=lease_s, defaults=BASE,
                                          on_end=lambda run: offer_live_model(registry, run))
    return app


@pytest.fixture
def app(tiny_model) -> Iterator:
    app = make_app(tiny_model)
    yield app
    app.state.inductions.shutdown()


def read_events(client: TestClient, run_id: str, after: int = 0, headers: dict[str, str] | None = None
                ) -> list[tuple[int, dict]]:
    """(id, event) pairs of the stream up to its end (the `done` event)."""
    out: list[tuple[int, dict]] = []
    with client.stream("GET", f"/api/induction/train/{run_id}/events", params={"after": after},
                       headers=headers or {}) as r:
        assert r.status_code == 200, r.read()
        ident = None
        for line in r.iter_lines():
            if line.startswith("id: "):
                ident = int(line[4:])
            elif line.startswith("data: "):
                out.append((ident, json.loads(line[6:])))
                if out[-1][1]["kind"] == "done":
                    break
    return out


def wait_for(test, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_a_live_run_streams_its_records_and_any_client_replays_them(app):
    owner = TestClient(app, client=OWNER)
    r = owner.post("/api/induction/train", json={"steps": 40, "width": 16, "control": True})
    assert r.status_code == 202, r.text
    run = r.json()
    assert run["owner_is_you"] and run["config"]["width"] == 16 and run["steps"] == 40
    events = read_events(owner, run["id"])
    assert [i for i, _ in events] == list(range(1, len(events) + 1))
    kinds = [e["kind"] for _, e in events]
    assert kinds[0] == "start" and kinds[-1] == "done"
    assert events[0][1]["config"]["width"] == 16
    steps = {name: [e["record"]["step"] for _, e in events if e["kind"] == "record" and e["run"] == name]
             for name in ("main", "control")}
    assert steps == {"main": [0, 10, 20, 30, 40], "control": [0, 10, 20, 30, 40]}
    rec = next(e["record"] for _, e in events if e["kind"] == "record")
    assert len(rec["induction"]) == 2 and len(rec["induction"][0]) == 4  # two layers of four heads
    row = rec["example_attention"][1][2][20][:21]  # layer 1, head 2, query 20: keys 0..20
    assert all(len(json.dumps(v)) <= 4 for v in row) and abs(sum(row) - 1) < 0.2  # 2 decimals, written short
    assert any(e["kind"] == "status" and e["run"] == "control" for _, e in events)
    done = events[-1][1]
    assert done["status"] == "finished" and done["summary"]["main"]["steps"] == 40
    assert done["summary"]["control"]["layers"] == 1
    # another client replays the same events, from any point; after the end the stream answers 204
    other = TestClient(app, client=OTHER)
    assert read_events(other, run["id"]) == events
    assert read_events(other, run["id"], after=3) == events[3:]
    assert read_events(other, run["id"], headers={"Last-Event-ID": "5"}) == events[5:]
    assert other.get(f"/api/induction/train/{run['id']}/events", params={"after": len(events)}).status_code == 204
    seen = other.get(f"/api/induction/train/{run['id']}").json()
    assert seen["status"] == "finished" and not seen["owner_is_you"] and seen["step"] == 40
    # its final model opens in the main app: a trace of the task's symbols
    name = done["model"]
    assert name and name in [m["name"] for m in owner.get("/api/models").json()["models"]]
    t = owner.post("/api/trace", json={"model": name, "text": "A B C D E A B C D E"})
    assert t.status_code == 200, t.text
    assert [t["text"] for t in t.json()["tokens"][:3]] == ["A", "B", "C"]
    info = owner.get("/api/induction").json()
    assert info["current"]["id"] == run["id"] and info["live_training"]


def test_one_run_at_a_time_and_only_its_owner_steers_it(app):
    owner, other = TestClient(app, client=OWNER), TestClient(app, client=OTHER)
    run = owner.post("/api/induction/train", json={"steps": 5000, "width": 16, "control": False}).json()
    second = other.post("/api/induction/train", json={"steps": 40})
    assert second.status_code == 409 and second.json()["code"] == "training_busy"
    assert run["id"] in second.json()["detail"]
    for what in ("pause", "resume", "step", "stop"):
        r = other.post(f"/api/induction/train/{run['id']}/{what}")
        assert r.status_code == 403 and r.json()["code"] == "induction_not_owner", what
        assert r.json()["params"] == {"run": run["id"]}
    assert other.get(f"/api/induction/train/{run['id']}").json()["owner_is_you"] is False
    stopped = owner.post(f"/api/induction/train/{run['id']}/stop")
    assert stopped.status_code == 200
    done = read_events(owner, run["id"])[-1][1]
    assert done["status"] == "stopped" and done["model"] is not None  # what it trained is kept
    assert done["summary"]["main"]["steps"] < 5000
    assert owner.post(f"/api/induction/train/{run['id']}/pause").status_code == 409  # it has ended
    assert owner.post("/api/induction/train/ffffffff/pause").status_code == 404


def records_of(run: LiveInduction) -> list[dict]:
    return [e for e in run.events() if e["kind"] == "record"]


def test_pause_holds_the_run_step_trains_to_the_next_record_and_resume_ends_it(app):
    owner = TestClient(app, client=OWNER)
    rid = owner.post("/api/induction/train", json={"steps": 60, "width": 16, "control": False}).json()["id"]
    assert owner.post(f"/api/induction/train/{rid}/pause").json()["status"] == "paused"
    run = app.state.inductions.get(rid)
    held = run.step
    time.sleep(1.0)
    assert run.step in (held, held + 1) and run.status == "paused"  # at most the step it was taking
    held, n = run.step, len(records_of(run))
    time.sleep(0.8)
    assert run.step == held and len(records_of(run)) == n  # nothing trains while paused
    # step: up to the next record, then paused again
    r = owner.post(f"/api/induction/train/{rid}/step")
    assert r.status_code == 200, r.text
    wait_for(lambda: len(records_of(run)) == n + 1)
    time.sleep(0.8)
    last = records_of(run)[-1]["record"]
    assert len(records_of(run)) == n + 1 and run.status == "paused" and run.step == last["step"]
    assert last["step"] % 10 == 0
    # paused time is not training time
    pause_s = 2.0
    assert owner.post(f"/api/induction/train/{rid}/step").status_code == 200
    wait_for(lambda: len(records_of(run)) == n + 2)
    time.sleep(pause_s)
    t0 = time.monotonic()
    assert owner.post(f"/api/induction/train/{rid}/resume").json()["status"] == "running"
    assert owner.post(f"/api/induction/train/{rid}/step").status_code == 409  # only while paused
    done = read_events(owner, rid)[-1][1]
    wall_after = time.monotonic() - t0
    assert done["status"] == "finished" and done["summary"]["main"]["steps"] == 60
    recs = [e["record"] for e in records_of(run)]
    paused_at = next(i for i, r in enumerate(recs) if r["step"] == last["step"] + 10)
    assert recs[-1]["elapsed_s"] - recs[paused_at]["elapsed_s"] < pause_s + wall_after - 0.5 * pause_s


def test_a_run_whose_owner_left_stops_and_keeps_its_model(tiny_model):
    app = make_app(tiny_model, lease_s=1.0)
    try:
        owner = TestClient(app, client=OWNER)
        run = owner.post("/api/induction/train", json={"steps": 20000, "width": 16, "control": True}).json()
        live = app.state.inductions.get(run["id"])
        assert live.join(60), "the run kept going for nobody"
        done = live.events()[-1]
        assert done["kind"] == "done" and done["status"] == "stopped"
        assert "watched it for 1 s" in done["message"]
        assert "control" not in done["summary"]  # it stopped in the main run
        assert done["model"] and live.model_folder.joinpath("config.json").is_file()
        assert owner.post("/api/trace", json={"model": done["model"], "text": "A B A B"}).status_code == 200
    finally:
        app.state.inductions.shutdown()


def test_an_open_stream_of_the_owner_holds_the_lease(tmp_path):
    run = LiveInduction(live_config(steps=400, width=16, control=False, base=BASE), tmp_path, "me", lease_s=0.5)
    assert not run.stream_opened("someone else")  # a watcher's stream holds no lease
    assert run.stream_opened("me")
    run.start()
    try:
        run.pause()
        time.sleep(1.5)
        assert run.status == "paused"  # three leases long, with the owner's stream open
        run.stream_closed()
        assert run.join(30)
        assert run.status == "stopped" and "watched it" in run.message
    finally:
        run.stop()
        run.join(30)


@pytest.mark.parametrize(("body", "name"), [
    ({"steps": 0}, "steps"), ({"steps": 20001}, "steps"), ({"width": 8}, "width"), ({"width": 1024}, "width"),
    ({"lr": 0.5}, "lr"), ({"lr": 0.0}, "lr"), ({"seed": -1}, "seed"), ({"seed": 2**31}, "seed"),
])
def test_a_value_out_of_range_gets_one_sentence_with_the_range(app, body, name):
    r = TestClient(app).post("/api/induction/train", json=body)
    assert r.status_code == 400, r.text
    out = r.json()
    assert out["code"] == "induction_limit" and out["params"]["name"] == name
    assert out["detail"].count(". ") == 0 and "from" in out["detail"] and "\n" not in out["detail"]
    assert app.state.inductions.current is None  # nothing started


def test_other_bad_bodies(app):
    client = TestClient(app)
    r = client.post("/api/induction/train", json={"width": 18})
    assert r.status_code == 400 and r.json()["code"] == "induction_width"
    assert r.json()["params"] == {"width": 18, "heads": 4}
    assert client.post("/api/induction/train", json={"steps": "40"}).status_code == 422  # strict types
    assert client.post("/api/induction/train", json={"layers": 3}).status_code == 422  # not a live setting
    assert client.get("/api/induction/train/" + "a" * 40).status_code == 422
    assert client.get("/api/induction/train/abc/events", params={"after": -1}).status_code == 422
    assert app.state.inductions.current is None


def test_a_server_that_does_not_train_live_says_why_and_refuses(tiny_model):
    app = make_app(tiny_model, live=False)
    client = TestClient(app)
    info = client.get("/api/induction").json()
    assert info["live_training"] is False and info["live_reason_code"] == "live_training_off"
    assert "--live-training" in info["live_reason"]
    r = client.post("/api/induction/train", json={"steps": 40})
    assert r.status_code == 403 and r.json()["code"] == "live_training_off"
    assert r.json()["detail"] == info["live_reason"]
    assert app.state.inductions.current is None
    # serve's default: live on a loopback bind, replayed on an exposed one, as --[no-]live-training says otherwise
    assert live_training(ServeConfig(host="127.0.0.1")) and not live_training(ServeConfig(host="0.0.0.0"))
    assert live_training(ServeConfig(host="0.0.0.0", live_training=True))
    assert not live_training(ServeConfig(host="127.0.0.1", live_training=False))


def test_the_serve_flag():
    from transformer_explainer.cli import build_parser

    p = build_parser()
    assert p.parse_args(["serve"]).live_training is None
    assert p.parse_args(["serve", "--no-live-training"]).live_training is False
    assert p.parse_args(["serve", "--live-training"]).live_training is True


def test_the_recorded_run_is_served_as_its_log_and_run_json_say(app):
    client = TestClient(app)
    info = client.get("/api/induction").json()
    run = json.loads((recorded_folder() / "run.json").read_text())
    assert info["recorded"]["config"] == run["config"]
    assert info["recorded"]["runs"]["main"]["induction_head"] == run["runs"]["main"]["induction_head"]
    assert info["defaults"]["width"] == DEFAULTS.width and info["limits"]["steps"] == [1, 20000]
    assert len(info["example"]["tokens"]) == 32 and info["example"]["prefix"] == 3
    tokens, s, n = info["example"]["tokens"], info["example"]["prefix"], info["example"]["segment"]
    assert tokens[s:s + n] == tokens[s + n:s + 2 * n]
    for name in ("main", "control"):
        log = read_log(recorded_folder() / name / "log.jsonl")
        r = client.get(f"/api/induction/recorded/{name}", headers={"Accept-Encoding": "gzip"})
        assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
        assert r.json()["records"] == log
        hits = recorded_log_gzip.cache_info().hits
        with client.stream("GET", f"/api/induction/recorded/{name}", headers={"Accept-Encoding": "gzip"}) as raw:
            assert b"".join(raw.iter_raw()) == recorded_log_gzip(name)
        assert recorded_log_gzip.cache_info().hits == hits + 2  # gzipped once, not by each request
        plain = client.get(f"/api/induction/recorded/{name}", headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers and plain.json()["records"] == log
    assert client.get("/api/induction/recorded/other").status_code == 404


def test_the_shipped_runs_model_opens_in_the_app():
    models = builtin_run_models()
    assert set(models) >= {"induction-run"}
    reg = ModelRegistry(default="induction-run")
    reg.discover()
    assert "induction-run" in reg.names()
    m = reg.get("induction-run")
    tr = m.trace("A B C D E F G A B C D E F G")
    assert tr.tokens == list("ABCDEFGABCDEFG")
    # the recorded model copies: within the repeat, the symbol after the earlier occurrence is its top guess
    guesses = [SYMBOLS[g] for g in tr.logits.argmax(-1).tolist()]
    assert guesses[8:13] == list("CDEFG")
