"""The app while it is being built: `serve` listens at once and loads the model behind it.

Building the real app imports torch and the web framework and loads the default model's weights,
which takes seconds. `StartingApp` answers from the moment the socket listens:
- the page (GET of / and of the web app's files) at once, with the real app's own code (pages.py:
  the same files, headers, access checks and gzip), so a browser that opens the URL early draws the
  app and says that the model is loading;
- `/api/health`: 503 `{"status": "loading"}` with Retry-After, until the model is loaded;
- every other request waits for the real app and is then answered by it, exactly as it would have
  been.
If the build fails, waiting requests get 503 with the reason and the server stops, so `serve` exits
with that error.

Plain ASGI (no web framework imported, only Starlette's responses: ~30 ms), so that listening does
not wait for those imports.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..errors import error_answer
from .pages import accepts_gzip, is_page, page_response

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEALTH_PATH = "/api/health"
BUILD_SWITCH_INTERVAL_S = 0.0005


class StartingApp:
    """An ASGI app that builds the real one (`build`, run in a thread) and then hands every request
    to it. `on_ready` / `on_error` are called on the event loop when the build ends.

    Meanwhile it answers /api/health itself, and, given `static_dir` (the built web app), the page's
    files too; `wrap` puts the real app's middleware around those answers (pages.middleware), so
    that they carry the same headers and pass the same checks. Without `wrap` they go bare."""

    def __init__(self, build: Callable[[], ASGIApp], *, static_dir: Path | None = None,
                 wrap: Callable[[ASGIApp], ASGIApp] | None = None, on_ready: Callable[[], None] | None = None,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        self._build = build
        self._static_dir = static_dir
        self._early: ASGIApp = wrap(self._answer_early) if wrap is not None else self._answer_early
        self._on_ready, self._on_error = on_ready, on_error
        self.app: ASGIApp | None = None
        self.error: BaseException | None = None
        self._done: asyncio.Event | None = None  # made on the server's loop, at lifespan startup
        self._lifespan_in: asyncio.Queue[Message] | None = None
        self._lifespan_out: asyncio.Queue[Message] | None = None
        self._lifespan_task: asyncio.Task | None = None
        self._started = time.monotonic()

    # -- building ----------------------------------------------------------------------------------

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self._done = asyncio.Event()

        # the build (imports, reading weights) holds the GIL most of the time; the server's thread gets it
        # back at each switch interval, so with Python's 5 ms every step of an early page answer waits up
        # to 5 ms: a shorter interval while building keeps the page quick
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, BUILD_SWITCH_INTERVAL_S))

        def build() -> None:
            try:
                app: ASGIApp | None = self._build()
                error = None
            except BaseException as e:  # reported on the loop: the server stops with it
                app, error = None, e
            finally:
                sys.setswitchinterval(switch)
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._finish(app, error)))

        threading.Thread(target=build, name="build-app", daemon=True).start()

    async def _finish(self, app: ASGIApp | None, error: BaseException | None) -> None:
        if app is not None:
            try:
                await self._start_lifespan(app)
            except BaseException as e:
                app, error = None, e
        self.app, self.error = app, error
        assert self._done is not None
        self._done.set()
        if error is not None:
            if self._on_error is not None:
                self._on_error(error)
        else:
            log.info("ready (model loaded %.1f s after the server started listening)",
                     time.monotonic() - self._started)
            if self._on_ready is not None:
                self._on_ready()

    async def _start_lifespan(self, app: ASGIApp) -> None:
        """Run the real app's lifespan startup now (it was built after the server's own)."""
        inbox: asyncio.Queue[Message] = asyncio.Queue()
        outbox: asyncio.Queue[Message] = asyncio.Queue()
        self._lifespan_in, self._lifespan_out = inbox, outbox
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        self._lifespan_task = asyncio.ensure_future(app(scope, inbox.get, outbox.put))
        await inbox.put({"type": "lifespan.startup"})
        msg = await outbox.get()
        if msg["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"the app did not start: {msg.get('message', msg['type'])}")

    async def _stop_lifespan(self) -> None:
        if self._lifespan_in is None or self._lifespan_out is None:
            return
        await self._lifespan_in.put({"type": "lifespan.shutdown"})
        try:
            await asyncio.wait_for(self._lifespan_out.get(), timeout=10)
        except TimeoutError:
            log.warning("the app's shutdown did not finish within 10 s")

    # -- ASGI --------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        if self.app is not None:
            return await self.app(scope, receive, send)
        if scope["type"] == "http" and self.error is None and self._answers_early(scope):
            return await self._early(scope, receive, send)
        if self._done is not None:
            await self._done.wait()
        if self.app is not None:
            return await self.app(scope, receive, send)
        if scope["type"] == "http":
            reason = f"the server could not load its model: {self.error}" if self.error else "the server is starting"
            code, params = ("model_load_failed", {"reason": str(self.error)}) if self.error else ("server_starting", {})
            return await _json(send, 503, error_answer(reason, code, params))

    async def _warm_up(self) -> None:
        """Answer the page once, to nobody, before the build starts: the first answer imports and starts
        what it needs (anyio's worker thread and backend modules: ~45 ms on an idle machine), which the
        build thread, importing torch beside it, would make the first real request pay several times
        over (measured before `serve` preloaded torch's libraries: the first request 0.36 s, the next
        ones 3-15 ms)."""
        if self._static_dir is None:
            return
        scope: Scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "query_string": b""}

        async def receive() -> Message:
            return {"type": "http.disconnect"}

        async def send(_msg: Message) -> None:
            pass

        try:
            await self._answer_early(scope, receive, send)
        except Exception:  # only a head start: the real requests say what is wrong
            log.debug("warming up the page's answer failed", exc_info=True)

    def _answers_early(self, scope: Scope) -> bool:
        path = scope.get("path", "")
        if path == HEALTH_PATH:
            return True
        return self._static_dir is not None and is_page(self._static_dir, scope)

    async def _answer_early(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if path == HEALTH_PATH:
            loading = error_answer("the model is loading", "model_loading")
            return await _json(send, 503, {"status": "loading", **loading}, retry_after=True)
        assert self._static_dir is not None
        response = page_response(self._static_dir, path[1:], gzip_ok=accepts_gzip(scope))
        if response is None:  # the file went between the check and now
            return await _json(send, 404, error_answer(f"no file {path}", "not_found", {"path": path}))
        await response(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await self._warm_up()
                self._start()
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await self._stop_lifespan()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _json(send: Send, status: int, body: dict[str, Any], *, retry_after: bool = False) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
               (b"cache-control", b"no-store")]
    if retry_after:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
