"""What one client can take from the others on an exposed server, after a tester's measurements on 127.0.0.1: a
patching is an analysis (the client's share of one, the analysis lane); texts to tokenize are capped like every text
and long ones are tokenized outside the light lane; a model switch is a model call, one at a time per client, and a
lookup of a model in memory never waits for another's load; a request head is held to its 16 kB however it arrives;
the OpenAPI document defines everything it names; the Host check parses the Host. Calls are held with events, never
timed by sleeps."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest
from fastapi.testclient import TestClient

from transformer_explainer.server import AccessSettings, ModelRegistry, ServerSettings, create_app
from transformer_explainer.server import registry as registry_mod
from transformer_explainer.server.security import FairShare, loopback_hosts, split_host

TEXT = "The quick brown fox jumps over the lazy dog"  # 9 tokens
BASE = "http://127.0.0.1:8000"


class HeldAnalyses:
    """A downstream app whose POSTs wait until released, counting those that reached it."""

    def __init__(self) -> None:
        self.reached: list[str] = []
        self.release = asyncio.Event()

    async def __call__(self, scope, receive, send) -> None:
        if scope["method"] == "POST":
            self.reached.append(scope["path"])
            await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def test_a_patching_takes_the_clients_share_of_analyses():
    """One client sent six of the largest patchings the budget allows and four were admitted (two running, two
    waiting), and other clients' analyses waited behind them for most of a minute: a patching is an analysis, and a
    client has one at a time, whichever kind."""
    async def scenario() -> None:
        app = HeldAnalyses()
        share = FairShare(app, AccessSettings(client_calls=2, client_analyses=1))

        def for_client(ip: str) -> httpx.AsyncClient:
            return httpx.AsyncClient(transport=httpx.ASGITransport(share, client=(ip, 1)), base_url=BASE, timeout=10)

        async with for_client("10.0.0.1") as flooder, for_client("10.0.0.2") as other:
            first = asyncio.create_task(flooder.post("/api/attribution/patch"))
            while not app.reached:
                await asyncio.sleep(0.01)
            for path in ("/api/attribution/patch", "/api/analysis/importance", "/api/analysis/prune"):
                r = await asyncio.wait_for(flooder.post(path), 10)  # refused at once (not admitted to wait)
                assert r.status_code == 429 and r.json()["code"] == "too_many_analyses", (path, r.text)
                assert "patching" in r.json()["detail"] and r.headers["retry-after"] == "5"
            theirs = asyncio.create_task(other.post("/api/attribution/patch"))  # another client has its own share
            while len(app.reached) < 2:
                await asyncio.sleep(0.01)
            app.release.set()
            assert (await first).status_code == (await theirs).status_code == 200
            assert app.reached == ["/api/attribution/patch"] * 2
            assert share.clients["10.0.0.1"].analyses == 0
            assert (await flooder.post("/api/attribution/patch")).status_code == 200  # the share is free again

    asyncio.run(scenario())


# -- texts to tokenize -----------------------------------------------------------------------------


@pytest.fixture
def limited(tiny_model) -> Iterator[TestClient]:
    with TestClient(create_app({"tiny": tiny_model}, ServerSettings(max_tokens=8, request_timeout_s=5))) as c:
        yield c


def test_texts_to_tokenize_are_capped_like_every_text(limited, tiny_model):
    """`/api/attribution/tokens` answered 4 texts of 40,000 emoji with 640,000 tokens (8.3 MB); it holds each text
    to the tokens a request may hold, as every other text input does, and says so in one sentence."""
    ok = limited.post("/api/attribution/tokens", json={"texts": ["The quick brown", "fox"]})
    assert ok.status_code == 200 and ok.json()["texts"][0]["ids"] == tiny_model.encode("The quick brown")
    for texts, which in (([TEXT], "the text is 9 tokens"), (["fox", TEXT], "the text 2 is 9 tokens"),
                         (["\U0001f600" * 40_000], "the text is 80000 tokens")):
        r = limited.post("/api/attribution/tokens", json={"texts": texts})
        body = r.json()
        assert r.status_code == 422 and body["code"] == "prompt_too_long", r.text
        assert body["params"]["limit"] == 8 and which in body["detail"] and "shorten" in body["detail"]


def test_a_long_text_is_tokenized_outside_the_light_lane(limited):
    """Tokenizing 40,000 emoji takes a quarter of a second: done in the light lane, it held up every other client's
    views (4 ms -> 3.3 s). With the light lane held, a long text is still answered (from the model lane)."""
    pool = limited.app.state.pool
    gate, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait()

    with ThreadPoolExecutor(2) as ex:
        held = ex.submit(asyncio.run, pool.run(hold, light=True))
        assert started.wait(10)
        try:
            r = limited.post("/api/attribution/tokens", json={"texts": ["\U0001f600" * 40_000] * 4})
            assert r.status_code == 422 and r.json()["code"] == "prompt_too_long", r.text
            t = limited.post("/api/tensors", json={"text": "\U0001f600" * 40_000, "tensors": [{"name": "embed.sum"}]})
            assert t.status_code == 422 and t.json()["code"] == "text_too_long", t.text
        finally:
            gate.set()
        held.result(10)
    assert limited.post("/api/attribution/tokens", json={"texts": ["fox"]}).status_code == 200


def test_an_over_long_patch_prompt_says_what_this_request_can_do(limited, tiny_model):
    """A patched pair is not truncated (a `truncate` field is refused): its 422 says to shorten the prompt, not to
    ask for truncation; over the model's context as over the server's limit."""
    body = {"clean": TEXT, "corrupted": TEXT.replace("fox", "cat"), "answer": " the", "wrong": " a"}
    r = limited.post("/api/attribution/patch", json=body)
    d = r.json()
    assert r.status_code == 422 and d["code"] == "prompt_too_long" and d["params"] == {"tokens": 9, "limit": 8}
    assert "clean prompt" in d["detail"] and "shorten" in d["detail"] and "ask for truncation" not in d["detail"]
    assert limited.post("/api/attribution/patch", json={**body, "truncate": True}).status_code == 422
    with TestClient(create_app({"tiny": tiny_model})) as c:  # no server limit: the model's context (128)
        long = " ".join(["word"] * 200)
        d = c.post("/api/attribution/patch", json={**body, "clean": long, "corrupted": long}).json()
        assert d["code"] == "prompt_too_long" and d["params"]["limit"] == tiny_model.context_length
        assert "ask for truncation" not in d["detail"]


# -- model switches --------------------------------------------------------------------------------


@contextmanager
def loads_held(monkeypatch) -> Iterator[tuple[threading.Event, threading.Event, list[str]]]:
    """Every model load waits for the yielded gate; `started` is set as one begins; `loads` names them."""
    real = registry_mod.ExplainerModel.from_resolved
    gate, started, loads = threading.Event(), threading.Event(), []

    def held(resolved, *args, **kwargs):
        loads.append(resolved.name)
        started.set()
        gate.wait(30)
        return real(resolved, *args, **kwargs)

    monkeypatch.setattr(registry_mod.ExplainerModel, "from_resolved", held)
    try:
        yield gate, started, loads
    finally:
        gate.set()


def registry_of(tiny_model, tiny_gpt2_dir, *others: str) -> ModelRegistry:
    reg = ModelRegistry.from_models({"tiny": tiny_model})
    for name in others:
        reg.add_folder(name, tiny_gpt2_dir, "local")
    return reg


def test_a_lookup_of_a_loaded_model_does_not_wait_for_another_load(tiny_model, tiny_gpt2_dir, monkeypatch):
    """Loads ran under the registry's lock, so every lookup waited for them: one client loading models again and
    again took another's trace from 60 ms to 250 ms (2.3 s at worst)."""
    reg = registry_of(tiny_model, tiny_gpt2_dir, "other")
    with loads_held(monkeypatch) as (gate, started, loads), ThreadPoolExecutor(3) as ex:
        loading = ex.submit(reg.lookup, "other")
        assert started.wait(10)
        assert ex.submit(reg.lookup, "tiny").result(5) == ("tiny", tiny_model)  # at once, the load still held
        assert reg.in_memory("other") is None  # the light lane's lookup neither loads nor waits
        again = ex.submit(reg.lookup, "other")  # a second request for the model loading waits for that load
        gate.set()
        name, model = loading.result(10)
        assert again.result(10) == (name, model) and name == "other"
    assert loads == ["other"]


def test_a_client_switches_models_one_at_a_time(tiny_model, tiny_gpt2_dir, monkeypatch):
    """A model switch is a model call, within its client's share: while a client's load runs, its call for a third
    model is refused (429), its calls of the loaded model and other clients' calls are answered."""
    reg = registry_of(tiny_model, tiny_gpt2_dir, "other", "third")
    settings = ServerSettings(model_threads=2, request_timeout_s=10,
                              access=AccessSettings(client_calls=2, client_analyses=1))
    app = create_app(reg, settings)

    async def scenario(gate: threading.Event, started: threading.Event, loads: list[str]) -> None:
        def for_client(ip: str) -> httpx.AsyncClient:
            return httpx.AsyncClient(transport=httpx.ASGITransport(app, client=(ip, 1)), base_url=BASE, timeout=20)

        async with for_client("10.0.0.1") as switcher, for_client("10.0.0.2") as other:
            switch = asyncio.create_task(switcher.post("/api/trace", json={"text": "hi", "model": "other"}))
            while not started.is_set():
                await asyncio.sleep(0.01)
            r = await asyncio.wait_for(switcher.post("/api/trace", json={"text": "hi", "model": "third"}), 20)
            assert r.status_code == 429 and r.json()["code"] == "too_many_switches", r.text
            assert r.json()["params"] == {"model": "other"} and "retry-after" in r.headers
            for c in (switcher, other):  # the loaded model, at once
                assert (await c.post("/api/trace", json={"text": "hi"})).status_code == 200
            gate.set()
            assert (await switch).status_code == 200
            assert (await switcher.post("/api/trace", json={"text": "hi", "model": "third"})).status_code == 200
        assert loads == ["other", "third"]

    try:
        with loads_held(monkeypatch) as held:
            asyncio.run(scenario(*held))
    finally:
        app.state.pool.shutdown()


# -- request heads ---------------------------------------------------------------------------------


@contextmanager
def served(app) -> Iterator[int]:
    """`app` served by uvicorn over `serve`'s protocol (protocol.ServerConfig) on a free port, in a thread."""
    import uvicorn

    from transformer_explainer.server.protocol import ServerConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(ServerConfig(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the test server did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


RESET = -1  # the connection was reset before an answer came: the server closed it with the rest of the head unread


def status_of(port: int, head: bytes, pieces: int) -> int:
    """The status answered to `head` sent in `pieces` writes, or RESET."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        step = -(-len(head) // pieces)
        answer = b""
        try:
            for i in range(0, len(head), step):
                s.sendall(head[i : i + step])
            while b"\r\n" not in answer:
                got = s.recv(4096)
                if not got:
                    break
                answer += got
        except (ConnectionResetError, BrokenPipeError):
            pass
    return int(answer.split(b" ", 2)[1]) if b"\r\n" in answer else RESET


def test_a_request_head_over_16_kb_is_refused_however_it_arrives(tiny_model):
    """h11 bounds a head while it arrives in pieces; heads of 21-117 kB sent in one write were answered 200."""
    MAX_HEAD_BYTES = 16 * 1024  # docs/deploy.md's limit (protocol.MAX_HEAD_BYTES)

    def head(total: int) -> bytes:
        start = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "
        return start + b"a" * (total - len(start) - 4) + b"\r\n\r\n"

    with served(create_app({"tiny": tiny_model})) as port:
        assert len(head(MAX_HEAD_BYTES)) == MAX_HEAD_BYTES
        assert status_of(port, head(MAX_HEAD_BYTES), 1) == 200
        for size in (MAX_HEAD_BYTES + 1, 21_000):  # one read takes all of it: the answer comes before the close
            assert status_of(port, head(size), 1) == 400, size
        # more than one read may take: refused once 16 kB are in, and closed with the rest unread (the close may
        # reach this side first, as a reset)
        assert status_of(port, head(117_000), 1) in (400, RESET)
        assert status_of(port, head(40_000), 8) in (400, RESET)  # h11's own bound, as before
        assert status_of(port, head(MAX_HEAD_BYTES), 4) == 200


# -- the OpenAPI document --------------------------------------------------------------------------


def test_every_ref_of_the_openapi_document_resolves(tiny_model):
    """The patch stream's lines (PatchLine) were named by `$ref` and missing from the document."""
    with TestClient(create_app({"tiny": tiny_model})) as c:
        doc = c.get("/api/openapi.json").json()
    refs: list[str] = []

    def walk(x) -> None:
        if isinstance(x, dict):
            refs.extend([x["$ref"]] if isinstance(x.get("$ref"), str) else [])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    assert "#/components/schemas/PatchLine" in refs
    for ref in set(refs):
        assert ref.startswith("#/"), ref
        node = doc
        for part in ref[2:].split("/"):
            assert isinstance(node, dict) and part in node, f"{ref} does not resolve"
            node = node[part]


# -- the Host check --------------------------------------------------------------------------------


HOSTILE_HOSTS = ["[::1]evil.com", "[::1]evil.com:8000", "[::1]:8000evil.com", "[::1]@evil.com", "[::1]:80:80",
                 "localhost@evil.com", "localhost:8000@evil.com", "localhost:80:80", "localhost evil.com",
                 "localhost,evil.com", "localhost/evil.com", "localhost#evil.com", "localhost:evil.com",
                 "127.0.0.1:8000 evil.com", "127.0.0.1\tevil.com", "evil.com/127.0.0.1", "[127.0.0.1]",
                 "[::1", "::1", "[]", "localhost.evil.com", "evil.com#@localhost", "localhost\\evil.com"]


@pytest.mark.parametrize("host", HOSTILE_HOSTS)
def test_hostile_hosts_are_refused(tiny_model, host):
    app = create_app({"tiny": tiny_model}, ServerSettings(access=AccessSettings(allowed_hosts=loopback_hosts())))
    with TestClient(app, base_url=BASE) as c:
        r = c.get("/api/models", headers={"host": host})
        assert r.status_code == 403 and r.json()["code"] == "host_refused", (host, r.status_code)
        assert c.get("/api/models", headers={"host": "[::1]:8000"}).status_code == 200


def test_split_host_parses_the_host():
    assert split_host("[::1]evil.com")[0] != "[::1]" and split_host("localhost@evil.com")[0] != "localhost"
    assert split_host("[::1]:") == ("[::1]", None) and split_host("LOCALHOST:8000") == ("localhost", "8000")
    assert split_host("127.0.0.1") == ("127.0.0.1", None)
