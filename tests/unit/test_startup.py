"""Fast start: commands that need no model do not import torch or the web framework, and `serve`
answers while its app is built (StartingApp): health says "loading", other requests wait for the
real app and get its answer, a failed build is reported and stops the server."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import httpx

from transformer_explainer.server.starting import StartingApp

HEAVY = ("torch", "fastapi", "transformers", "numpy")


def _imported_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=120).stdout.split()
    return {m for m in HEAVY if m in out}


def test_cli_parser_and_serve_setup_import_no_heavy_library():
    # (numpy comes with the seq2seq tasks' names, a fifth of a second; the rest takes seconds)
    assert _imported_after("from transformer_explainer.cli import build_parser\nbuild_parser()") <= {"numpy"}
    assert _imported_after("import transformer_explainer.server.run") == set()


def test_cli_help_imports_no_torch():
    code = "from transformer_explainer.cli import main\nassert main(['--help']) == 0"
    assert not {"torch", "fastapi", "transformers"} & _imported_after(code)


class Inner:
    """The real app, as far as StartingApp can tell: answers with the path; records its lifespan."""

    def __init__(self) -> None:
        self.events: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                self.events.append(msg["type"])
                await send({"type": msg["type"] + ".complete"})
                if msg["type"] == "lifespan.shutdown":
                    return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": scope["path"].encode()})


async def _lifespan(app):
    inbox: asyncio.Queue = asyncio.Queue()
    outbox: asyncio.Queue = asyncio.Queue()
    task = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"

    async def stop() -> None:
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await task

    return stop


def test_requests_wait_for_the_app_and_health_says_loading():
    inner, gate = Inner(), threading.Event()
    ready = []

    def build():
        assert gate.wait(10)
        return inner

    async def scenario() -> None:
        app = StartingApp(build, on_ready=lambda: ready.append(True))
        stop = await _lifespan(app)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            r = await c.get("/api/health")
            assert r.status_code == 503 and r.json()["status"] == "loading" and r.headers["retry-after"] == "1"
            waiting = asyncio.ensure_future(c.get("/api/models"))
            await asyncio.sleep(0.1)
            assert not waiting.done()  # held until the app is built, not refused
            gate.set()
            r = await asyncio.wait_for(waiting, 10)
            assert r.status_code == 200 and r.text == "/api/models"
            assert (await c.get("/api/health")).text == "/api/health"  # now the real app's answer
        assert ready == [True] and inner.events == ["lifespan.startup"]
        await stop()
        assert inner.events == ["lifespan.startup", "lifespan.shutdown"]

    asyncio.run(scenario())


def test_a_failed_build_is_reported_and_answered():
    errors: list[BaseException] = []

    def build():
        raise ValueError("weights are broken")

    async def scenario() -> None:
        app = StartingApp(build, on_error=errors.append)
        stop = await _lifespan(app)
        for _ in range(200):
            if errors:
                break
            await asyncio.sleep(0.01)
        assert isinstance(app.error, ValueError) and errors == [app.error]
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            r = await c.get("/api/models")
            assert r.status_code == 503 and "weights are broken" in r.json()["detail"]
        await stop()

    asyncio.run(scenario())
