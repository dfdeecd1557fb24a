"""What keeps one server up for a classroom: limits (body size, tokens per request), bodies that
cannot be read, model choice limited to the registry (no paths, downloads off unless switched on),
the bounded pool's two lanes and its Retry-After, and traces computed once for many clients or
from a cached prefix holding the same values as a trace computed alone."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
import torch
from fastapi.testclient import TestClient

from transformer_explainer.memo.block_cache import storage_nbytes
from transformer_explainer.memo.store import TraceStore
from transformer_explainer.server import ModelRegistry, ServerSettings, create_app
from transformer_explainer.server.pool import Busy, ModelPool

TEXT = "The quick brown fox jumps over the lazy dog"
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def client(tiny_model):
    with TestClient(create_app({"tiny": tiny_model}, ServerSettings(max_tokens=8, max_body_bytes=20_000))) as c:
        yield c


def in_thread(coro):
    """Run `coro` in a fresh event loop on its own thread (a test client's loop may be running here)."""
    with ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()


# -- bodies that cannot be read: 400 with the reason -----------------------------------------------


@pytest.mark.parametrize(("raw", "words"), [
    (b'{"text": "caf\xe9"}', "not valid UTF-8"),  # Latin-1, as an old client might send
    (b'{"text": "a\xffb"}', "byte 0xff"),
    (b'{"text": "hi", "sampling": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nests"),
    (b'{"text": "hi", "top_n": ' + b"9" * 5000 + b"}", "digits"),
    (b'{"text": "hi"', "not valid JSON"),
])
def test_unreadable_bodies_say_why(client, raw, words):
    r = client.post("/api/trace", content=raw, headers=JSON)
    assert r.status_code == 400, r.text
    assert words in r.json()["detail"]


def test_body_limit_is_a_setting(client):
    r = client.post("/api/trace", content=b'{"text": "' + b"a" * 30_000 + b'"}', headers=JSON)
    assert r.status_code == 413 and "20,000 bytes" in r.json()["detail"]


# -- tokens per request ----------------------------------------------------------------------------


def test_token_limit_refuses_or_truncates(client):
    r = client.post("/api/trace", json={"text": TEXT})  # 9 tokens, the server allows 8
    assert r.status_code == 422
    assert "limit of 8 tokens per request" in r.json()["detail"] and "truncation" in r.json()["detail"]
    ok = client.post("/api/trace", json={"text": TEXT, "truncate": True}).json()
    assert ok["truncated"] and len(ok["token_ids"]) == 8
    ids = ok["token_ids"]
    assert client.post("/api/tensors", json={"ids": ids + [11], "tensors": [{"name": "embed.sum"}]}).status_code == 422
    g = client.post("/api/generate", json={"ids": ids})
    assert g.status_code == 422 and "limit per request (8 tokens)" in g.json()["detail"]
    assert client.post("/api/generate", json={"ids": ids[:7]}).status_code == 200


def test_no_generation_length_to_abuse(client):
    # one token per request: a length parameter is an unknown field, refused by name
    for extra in ({"max_new_tokens": 10**9}, {"n": 10**9}, {"steps": -1}):
        r = client.post("/api/generate", json={"ids": [464, 2068], **extra})
        assert r.status_code == 422 and next(iter(extra)) in r.json()["detail"], r.text


# -- model choice: names in the registry only ------------------------------------------------------


def test_a_model_folder_path_is_not_a_model_name(client, tiny_gpt2_dir):
    # the folder exists and holds a loadable model: still only registry names are accepted
    for spec in (str(tiny_gpt2_dir), str(tiny_gpt2_dir / "config.json"), "../" + tiny_gpt2_dir.name, "gpt2"):
        r = client.post("/api/trace", json={"text": "hi", "model": spec})
        assert r.status_code == 404, r.text
        assert "unknown model" in r.json()["detail"]
    r = client.post("/api/trace", json={"text": "hi", "model": "gpt2-medium"})
    assert "downloads from the API are off" in r.json()["detail"]


def test_api_downloads_only_when_switched_on(tiny_model, tiny_gpt2_dir, monkeypatch):
    from transformer_explainer.loading.resolve import ResolvedModel
    from transformer_explainer.server import registry as registry_mod

    fetched = []

    def fake_resolve(spec, *, allow_download):
        assert allow_download
        fetched.append(spec)
        return ResolvedModel(spec, tiny_gpt2_dir, "hub")

    monkeypatch.setattr(registry_mod, "resolve", fake_resolve)
    monkeypatch.setattr(registry_mod, "builtin_models", dict)
    monkeypatch.setattr(registry_mod, "cached_gpt2_models", dict)
    monkeypatch.setattr(registry_mod, "builtin_run_models", dict)

    off = ModelRegistry.from_models({"tiny": tiny_model})
    off.discover()
    assert off.names() == ["tiny"]
    with TestClient(create_app(off)) as c:
        assert c.post("/api/trace", json={"text": "hi", "model": "distilgpt2"}).status_code == 404
    assert fetched == []

    on = ModelRegistry.from_models({"tiny": tiny_model})
    on.api_downloads = True
    on.discover()
    assert "distilgpt2" in on.names() and "gpt2-xl" in on.names()
    with TestClient(create_app(on)) as c:
        listed = {m["name"]: m for m in c.get("/api/models").json()["models"]}
        assert listed["distilgpt2"]["source"] == "hub" and not listed["distilgpt2"]["loaded"]
        r = c.post("/api/trace", json={"text": "hi", "model": "distilgpt2"})
        assert r.status_code == 200 and r.json()["model"] == "distilgpt2"
        assert c.post("/api/trace", json={"text": "hi", "model": "/etc"}).status_code == 404  # still names only
    assert fetched == ["distilgpt2"]


# -- the pool ----------------------------------------------------------------------------------------


def test_light_lane_is_not_held_up_by_model_calls():
    async def scenario() -> None:
        gate = threading.Event()
        pool = ModelPool(workers=1, max_queue=0, timeout_s=10)
        slow = asyncio.ensure_future(pool.run(gate.wait))
        await asyncio.sleep(0.05)
        with pytest.raises(Busy):
            await pool.run(lambda: 1)  # the model lane is full
        assert await pool.run(lambda: 2, light=True) == 2  # a light call still goes through
        gate.set()
        await slow
        assert pool.pending == 0 and pool.pending_light == 0
        pool.shutdown()

    in_thread(scenario())


def test_the_light_lane_queues_light_queue_factor_times_as_many_calls_as_the_model_lane():
    """A class's views come in bursts of calls of milliseconds: the light lane lets 4 x --queue of them wait (answered
    sooner than a refusal's Retry-After of a second or more), and refuses the next; the model lane keeps --queue."""
    from transformer_explainer.server import defaults

    async def scenario() -> None:
        gate = threading.Event()
        pool = ModelPool(workers=1, max_queue=2, timeout_s=10)
        n_light = 1 + 2 * defaults.LIGHT_QUEUE_FACTOR  # one running, the rest waiting
        light = [asyncio.ensure_future(pool.run(gate.wait, light=True)) for _ in range(n_light)]
        heavy = [asyncio.ensure_future(pool.run(gate.wait)) for _ in range(1 + 2)]
        await asyncio.sleep(0.05)
        assert pool.pending_light == n_light and pool.pending == 3
        with pytest.raises(Busy):
            await pool.run(lambda: 1, light=True)
        with pytest.raises(Busy):
            await pool.run(lambda: 1)
        gate.set()
        await asyncio.gather(*light, *heavy)
        assert pool.pending_light == 0 and pool.pending == 0
        pool.shutdown()

    assert defaults.LIGHT_QUEUE_FACTOR > 1
    in_thread(scenario())
    with pytest.raises(ValueError):
        ModelPool(light_queue_factor=0)


def test_the_light_lane_runs_as_many_answers_at_once_as_the_model_lane_passes(monkeypatch):
    """`serve` gives the light lane (answers from traces in memory) as many threads as the model lane: on two cores,
    two views' blocks run again at once. Each light call here waits until the other has started: with one thread,
    the second would wait behind the first until its time limit."""
    from transformer_explainer.server.run import ServeConfig, server_settings

    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0, 1})
    settings = server_settings(ServeConfig())
    assert settings.model_threads == settings.light_threads == 2
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0})
    assert server_settings(ServeConfig()).light_threads == 1

    async def scenario() -> None:
        pool = ModelPool(workers=1, light_workers=settings.light_threads, max_queue=4, timeout_s=10)
        both = threading.Barrier(2, timeout=5)
        assert await asyncio.gather(pool.run(both.wait, light=True), pool.run(both.wait, light=True)) is not None
        pool.shutdown()

    in_thread(scenario())


def test_retry_after_follows_the_rate_calls_finish_at():
    async def scenario() -> None:
        pool = ModelPool(workers=1, max_queue=2, timeout_s=10)
        for _ in range(4):  # calls of ~0.1 s: a queue of 3 drains in well under 2 s
            await pool.run(lambda: threading.Event().wait(0.1))
        gate = threading.Event()
        held = [asyncio.ensure_future(pool.run(gate.wait)) for _ in range(3)]
        await asyncio.sleep(0.05)
        with pytest.raises(Busy) as e:
            await pool.run(lambda: 1)
        assert 1 <= e.value.retry_after <= 2
        gate.set()
        await asyncio.gather(*held)
        pool.shutdown()

    in_thread(scenario())


def test_timed_out_call_frees_its_place_when_it_finishes():
    async def scenario() -> None:
        gate = threading.Event()
        pool = ModelPool(workers=1, max_queue=1, timeout_s=0.2)
        with pytest.raises(Busy) as e:
            await pool.run(gate.wait)
        assert "longer than 0.2 s" in str(e.value)
        assert pool.pending == 1  # still running: it still counts, so memory stays bounded
        gate.set()
        await asyncio.sleep(0.1)
        assert pool.pending == 0
        pool.shutdown()

    in_thread(scenario())


def long_analysis(passes: list[int], n: int = 1000):
    """An analysis of `n` passes of 10 ms that records each pass it starts."""
    def analysis(between_passes) -> int:
        for i in range(n):
            between_passes()
            passes.append(i)
            time.sleep(0.01)
        return n

    return analysis


def test_an_analysis_stops_at_its_next_pass_once_its_request_timed_out():
    async def scenario() -> None:
        pool = ModelPool(workers=1, max_queue=0, timeout_s=0.3)
        passes: list[int] = []
        with pytest.raises(Busy):
            await pool.run_passes(long_analysis(passes))
        at_answer = len(passes)
        while pool.pending:
            await asyncio.sleep(0.01)
        assert 0 < at_answer < 1000 and len(passes) - at_answer <= 1  # at most the pass under way when answered
        pool.shutdown()

    in_thread(scenario())


def test_an_analysis_stops_when_nobody_waits_for_it_any_more():
    """The request's handler is cancelled (CancelOnDisconnect, when the client goes away)."""
    async def scenario() -> None:
        pool = ModelPool(workers=1, max_queue=0, timeout_s=30)
        passes: list[int] = []
        waiting = asyncio.ensure_future(pool.run_passes(long_analysis(passes)))
        while len(passes) < 5:
            await asyncio.sleep(0.01)
        waiting.cancel()
        at_cancel = len(passes)
        while pool.pending:
            await asyncio.sleep(0.01)
        assert len(passes) - at_cancel <= 1
        pool.shutdown()

    in_thread(scenario())


def test_analyses_have_a_lane_of_their_own():
    """However many analyses run or wait, the model lane's workers stay free for traces."""
    async def scenario() -> None:
        gate = threading.Event()
        pool = ModelPool(workers=1, max_queue=1, timeout_s=10)
        held = [asyncio.ensure_future(pool.run_passes(lambda _between: gate.wait())) for _ in range(2)]
        await asyncio.sleep(0.05)
        with pytest.raises(Busy, match="analyses ahead"):
            await pool.run_passes(lambda _between: 1)  # the analysis lane is full
        assert await pool.run(lambda: 2) == 2  # a trace still has the model lane
        assert pool.pending == 2 and pool.pending_analyses == 2
        gate.set()
        await asyncio.gather(*held)
        pool.shutdown()

    in_thread(scenario())


# -- forward passes --------------------------------------------------------------------------------


def assert_same_trace(a, b, atol=1e-5):
    assert a.token_ids == b.token_ids and a.tokens == b.tokens and a.text == b.text and a.start == b.start == 0
    assert a.names() == b.names() and a.memory.kept.keys() == b.memory.kept.keys()
    for name in b.names():
        assert a[name].shape == b[name].shape, name
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=1e-4, msg=name)


def test_same_text_at_once_is_computed_once(tiny_model, monkeypatch):
    explainer = TraceStore(2**28)
    calls = []
    started, release = threading.Event(), threading.Event()
    real = tiny_model.trace_ids

    def slow_trace(ids, **kw):
        calls.append(list(ids))
        started.set()
        release.wait(10)
        return real(ids, **kw)

    monkeypatch.setattr(tiny_model, "trace_ids", slow_trace)
    ids = tiny_model.encode(TEXT)
    with ThreadPoolExecutor(3) as ex:
        first = ex.submit(explainer.get, "tiny", tiny_model, ids)
        started.wait(10)
        others = [ex.submit(explainer.get, "tiny", tiny_model, ids) for _ in range(2)]
        threading.Event().wait(0.1)
        release.set()
        results = [first.result(), *(f.result() for f in others)]
    assert len(calls) == 1
    assert all(tr is results[0][0] for tr, _ in results)
    assert results[0][1] == [0, len(ids)] and results[1][1] == [len(ids), len(ids)]


def test_a_longer_text_reuses_the_trace_of_its_prefix(client, tiny_model):
    explainer = client.app.state.traces
    include = [{"name": "blocks.1.attn.pattern", "head": 0, "dtype": "float32"}]
    short = client.post("/api/trace", json={"text": "The quick brown", "include": include}).json()
    n0 = len(short["token_ids"])
    runs = explainer.blocks.misses
    assert runs == 0  # the pass handed the included block over
    longer = client.post("/api/trace", json={"text": "The quick brown fox jumps"}).json()
    assert longer["computed_positions"] == [n0, len(longer["token_ids"])]  # only the new positions
    assert explainer.blocks.misses == runs  # the overview's patterns: each block run only as far as its pattern
    got = explainer.cache.get(("tiny", tuple(longer["token_ids"])))
    assert got.memory.kv is not None  # to be continued in turn
    assert_same_trace(got, tiny_model.trace_ids(longer["token_ids"]), atol=1e-4)


def test_an_edited_end_continues_the_trace_of_the_shared_beginning(client, tiny_model):
    """Typing over the last word: the cached trace is cut to the ids both texts share, and only the
    positions after them are computed; every value equals the edited text's own trace."""
    first = client.post("/api/trace", json={"text": "The quick brown fox jumps"}).json()
    edited = client.post("/api/trace", json={"text": "The quick brown fox sleeps"}).json()
    shared = next(i for i, (a, b) in enumerate(zip(first["token_ids"], edited["token_ids"], strict=False)) if a != b)
    assert 2 * shared >= len(edited["token_ids"])
    assert edited["computed_positions"] == [shared, len(edited["token_ids"])]
    got = client.app.state.traces.cache.get(("tiny", tuple(edited["token_ids"])))
    assert_same_trace(got, tiny_model.trace_ids(edited["token_ids"]), atol=1e-4)
    # a text that shares less than half of its ids (here 2 of 5) is traced whole
    other = client.post("/api/trace", json={"text": "The quick cat sat down"}).json()
    assert other["computed_positions"] == [0, len(other["token_ids"])]
    # the original is still answered from the cache, whole
    again = client.post("/api/trace", json={"text": "The quick brown fox jumps"}).json()
    assert again["computed_positions"] == [len(first["token_ids"])] * 2


def test_a_trace_continued_often_is_made_one_pass_and_one_without_its_keys_and_values_is_continued_where_cheaper(
        tiny_model):
    """Each view of a continued trace runs each of its passes again: the continuation that would make MAX_PASSES
    passes is made one pass instead (the store flattens the chain; tests/unit/test_trace_store_passes.py), and the
    next edit continues that. Without its keys and values a beginning is continued where that costs less than tracing
    the text whole (each block of the beginning run as far as its values, in each of its passes:
    `continuation_cost`): one of a single pass is, one of many is not; either way the values equal the text's own
    trace."""
    from transformer_explainer.memo.costs import MAX_PASSES

    with TestClient(create_app({"tiny": tiny_model}, ServerSettings())) as client:  # no token limit: long texts
        explainer = client.app.state.traces
        text, cached = "A red", []
        words = " apple fell from a tree in the old garden of the house by the river".split(" ")[1:]
        assert len(words) > MAX_PASSES
        for word in (" " + w for w in words[: MAX_PASSES + 1]):
            text += word
            d = client.post("/api/trace", json={"text": text}).json()
            assert "token_ids" in d, d
            assert (d["computed_positions"][0] > 0) == bool(cached)  # after the first, continued every time
            cached.append(explainer.cache.get(("tiny", tuple(d["token_ids"]))))
        # passes 1 .. MAX_PASSES - 1, then the chain made one pass, then continued from it
        assert [t.memory.blocks.passes for t in cached] == [*range(1, MAX_PASSES), 1, 2]
        assert_same_trace(cached[-1], tiny_model.trace_ids(cached[-1].token_ids), atol=1e-4)

    with TestClient(create_app({"tiny": tiny_model}, ServerSettings())) as client:
        explainer = client.app.state.traces
        text, cached = "A red", []
        for word in (" " + w for w in words[: MAX_PASSES - 1]):  # a chain one pass short of being made one
            text += word
            d = client.post("/api/trace", json={"text": text}).json()
            cached.append(explainer.cache.get(("tiny", tuple(d["token_ids"]))))
        long_chain = cached[-1]
        assert long_chain.memory.blocks.passes == MAX_PASSES - 1
        for t in cached:
            t.memory.drop_kv()  # as the cache does under pressure
        # many passes without keys and values: dearer than a shorter beginning of fewer passes, or the whole text
        d = client.post("/api/trace", json={"text": text + " now"}).json()
        assert d["computed_positions"][0] < len(long_chain.token_ids)
        assert_same_trace(explainer.cache.get(("tiny", tuple(d["token_ids"]))),
                          tiny_model.trace_ids(d["token_ids"]), atol=1e-4)

    with TestClient(create_app({"tiny": tiny_model}, ServerSettings())) as client:
        explainer = client.app.state.traces
        d = client.post("/api/trace", json={"text": text}).json()
        n = len(d["token_ids"])
        assert d["computed_positions"] == [0, n]
        whole = explainer.cache.get(("tiny", tuple(d["token_ids"])))
        assert whole.memory.blocks.passes == 1
        whole.memory.drop_kv()
        # one pass without them: continued, each block of the beginning run as far as its values
        d = client.post("/api/trace", json={"text": text + " now and then"}).json()
        m = len(d["token_ids"])
        assert d["computed_positions"] == [n, m] and m > n
        got = explainer.cache.get(("tiny", tuple(d["token_ids"])))
        assert got.memory.blocks.passes == 2
        assert_same_trace(got, tiny_model.trace_ids(d["token_ids"]), atol=1e-4)


def test_health_reports_the_bounded_state(client):
    h = client.get("/api/health").json()
    assert h["status"] == "ok" and h["pending"] == 0
    assert h["cache"]["mb"] <= h["cache"]["max_mb"] and {"hits", "misses", "traces"} <= h["cache"].keys()


# -- serve options ---------------------------------------------------------------------------------


def test_serve_flags_reach_the_settings(monkeypatch):
    from transformer_explainer.cli import build_parser
    from transformer_explainer.server import run

    got = {}
    monkeypatch.setattr(run, "serve", lambda cfg, open_browser=False: got.setdefault("cfg", cfg))
    args = build_parser().parse_args(["serve", "--max-tokens", "256", "--max-body-bytes", "50000",
                                      "--torch-threads", "1", "--model-threads", "2", "--queue", "4",
                                      "--api-downloads"])
    assert args.func(args) == 0
    cfg = got["cfg"]
    assert (cfg.max_tokens, cfg.max_body_bytes, cfg.torch_threads, cfg.model_threads, cfg.max_queue,
            cfg.api_downloads) == (256, 50_000, 1, 2, 4, True)
    defaults = build_parser().parse_args(["serve"])
    assert not defaults.api_downloads and defaults.host == "127.0.0.1" and defaults.max_tokens is None


def test_serve_defaults_are_written_once(monkeypatch):
    """No flag means ServeConfig's default, and the app's settings default to the same values."""
    from transformer_explainer.cli import build_parser
    from transformer_explainer.server import run
    from transformer_explainer.server.cli import TOKEN_ENV

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    got = {}
    monkeypatch.setattr(run, "serve", lambda cfg, open_browser=False: got.setdefault("cfg", cfg))
    args = build_parser().parse_args(["serve"])
    assert args.func(args) == 0
    # the command line downloads a named --model unless --offline; a ServeConfig built in code does not
    assert replace(got["cfg"], allow_download=False) == run.ServeConfig()
    app, cfg = ServerSettings(), run.ServeConfig()
    assert (app.max_queue, app.request_timeout_s, app.trace_cache_mb, app.max_body_bytes, app.max_analysis_gflop) == (
        cfg.max_queue, cfg.request_timeout_s, cfg.trace_cache_mb, cfg.max_body_bytes, run.analysis_gflop(cfg))
    assert run.analysis_gflop(replace(cfg, request_timeout_s=120)) == 2 * app.max_analysis_gflop  # follows --timeout
    assert run.analysis_gflop(replace(cfg, analysis_gflop=0)) is None  # 0: no limit


@pytest.mark.parametrize("bad", [["--model-threads", "0"], ["--max-tokens", "0"], ["--queue", "-1"],
                                 ["--timeout", "0"], ["--read-timeout", "0"], ["--max-connections", "0"],
                                 ["--analysis-gflop", "-1"]])
def test_serve_refuses_nonsense_limits(bad, capsys):
    from transformer_explainer.cli import main

    assert main(["serve", *bad]) == 2  # refused while the arguments are read, before anything starts
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and bad[0] in err[0], err


def test_thread_budget_is_the_cores_of_each_process(monkeypatch):
    from transformer_explainer.server.run import ServeConfig, model_threads, thread_budget

    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: set(range(8)))
    assert model_threads(ServeConfig()) == 2 and thread_budget(ServeConfig()) == 8
    assert thread_budget(ServeConfig(workers=4)) == 2 and model_threads(ServeConfig(workers=4)) == 2
    assert thread_budget(ServeConfig(workers=16)) == 1 and model_threads(ServeConfig(workers=16)) == 1
    assert thread_budget(ServeConfig(torch_threads=3)) is None  # fixed threads per pass instead
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0})
    assert model_threads(ServeConfig()) == 1 and thread_budget(ServeConfig()) == 1


async def a_model_call_held(pool: ModelPool) -> tuple[asyncio.Future, threading.Event]:
    """A model call started and held until the returned gate is set; it answers its torch threads then."""
    import torch

    gate, started = threading.Event(), threading.Event()

    def held() -> int:
        started.set()
        gate.wait()
        return torch.get_num_threads()

    first = asyncio.ensure_future(pool.run(held))
    while not started.is_set():
        await asyncio.sleep(0.01)
    return first, gate


def test_model_calls_share_the_thread_budget():
    """A lone call runs on the whole budget; calls running together split it (at least 1 each)."""
    import torch

    async def scenario() -> None:
        pool = ModelPool(workers=2, max_queue=0, timeout_s=10, thread_budget=2)
        assert await pool.run(torch.get_num_threads) == 2
        first, gate = await a_model_call_held(pool)
        assert await pool.run(torch.get_num_threads) == 1  # one other call running: half the budget
        gate.set()
        assert await first == 2  # set when it started, alone
        assert await pool.run(torch.get_num_threads) == 2
        pool.shutdown()

    in_thread(scenario())


def test_blocks_run_again_keep_what_the_traces_leave_of_the_budget(tiny_model):
    """One budget for traces and blocks: the blocks may use what the traces do not (a class viewing a dozen texts block
    by block asks for more blocks than a fixed quarter holds), and give it back as traces come; together they stay
    within the budget."""
    long_ids = tiny_model.encode(" ".join([TEXT] * 10))[:100]
    short_ids = tiny_model.encode("Once upon a time")
    alone = TraceStore(2**30)
    tr, _ = alone.get("tiny", tiny_model, long_ids)
    long_bytes, block_bytes = alone.cache.nbytes, storage_nbytes(list(tr.block(0).values()))
    alone.get("tiny", tiny_model, short_ids)
    short_bytes = alone.cache.nbytes - long_bytes
    n = tiny_model.config.n_layer
    budget = long_bytes + n * block_bytes + short_bytes // 2  # room for every block of the long text's trace
    assert budget // 4 < n * block_bytes  # more than a quarter of the budget: a fixed share held fewer
    explainer = TraceStore(budget)
    tr, _ = explainer.get("tiny", tiny_model, long_ids)
    for layer in range(n):
        tr.block(layer)
    assert len(explainer.blocks) == n and explainer.blocks.nbytes == n * block_bytes
    explainer.get("tiny", tiny_model, short_ids)  # traces come: the blocks give their room back
    assert explainer.cache.nbytes == long_bytes + short_bytes  # both traces kept
    assert explainer.blocks.max_bytes == budget - explainer.cache.nbytes
    assert len(explainer.blocks) == n - 1
    assert explainer.cache.nbytes + explainer.blocks.nbytes <= budget


def test_light_calls_share_the_thread_budget_too():
    """A view's block run again takes its share of the cores like a forward pass: alone, all of them; beside a running
    model call, its half (two threads each on two cores left both waiting for each other)."""
    import torch

    async def scenario() -> None:
        pool = ModelPool(workers=1, light_workers=1, max_queue=0, timeout_s=10, thread_budget=2)
        assert await pool.run(torch.get_num_threads, light=True) == 2
        first, gate = await a_model_call_held(pool)
        try:
            beside = await pool.run(torch.get_num_threads, light=True)
        finally:
            gate.set()
            await first
            pool.shutdown()
        assert beside == 1

    in_thread(scenario())
