"""The page: the built web app's files (index.html and its assets), and the middleware that every
answer of the server passes through (security headers, access checks, per-client limits, body limit,
gzip).

One implementation for two apps: the real one (app.py) and `StartingApp` (starting.py), which answers
the page with exactly these headers and checks while the model is still loading. So this module is
light: Starlette's responses and gzip only, no FastAPI, no torch (importing it takes ~30 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import mimetypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.middleware.gzip import DEFAULT_EXCLUDED_CONTENT_TYPES, GZipMiddleware
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import error_answer
from ..media import BINARY_MEDIA_TYPE
from .security import AccessGuard, AccessSettings, FairShare

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY")]
PAGE_METHODS = ("GET",)  # the page's files answer GET; others (HEAD included) get the real app's 405


# -- middleware ------------------------------------------------------------------------------------


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                msg = {**msg, "headers": [*msg.get("headers", []), *SECURITY_HEADERS]}
            await send(msg)

        await self.app(scope, receive, send_with_headers)


class CancelOnDisconnect:
    """Cancel the handling of an API request whose client goes away before its answer, so that the
    work behind it stops: a call still waiting for the pool is dropped, and an analysis stops between
    two forward passes (pool.py). The client's going is noticed once the app has read the whole body:
    from then on this middleware alone listens to the connection (the app's own later `receive()`
    waits for what it hears)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith("/api/"):
            return await self.app(scope, receive, send)
        body_read, gone = asyncio.Event(), asyncio.Event()
        answered = False

        async def app_receive() -> Message:
            if body_read.is_set():
                await gone.wait()
                return {"type": "http.disconnect"}
            msg = await receive()
            if msg["type"] == "http.disconnect":
                gone.set()
            elif not msg.get("more_body", False):
                body_read.set()
            return msg

        async def app_send(msg: Message) -> None:
            nonlocal answered
            if msg["type"] == "http.response.body" and not msg.get("more_body", False):
                answered = True
            await send(msg)

        handler = asyncio.ensure_future(self.app(scope, app_receive, app_send))

        async def listen() -> None:
            await body_read.wait()
            msg = await receive()  # the server answers this only when the client has gone (or the answer is out)
            if msg["type"] == "http.disconnect":
                gone.set()
                if not answered:
                    handler.cancel()

        listener = asyncio.ensure_future(listen())
        try:
            await handler
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this request's own task is being cancelled (the server stops): not ours to swallow
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener


class BodyLimit:
    """Refuse request bodies over `max_bytes` (413), whether announced by Content-Length or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", []):
            if k == b"content-length" and (not v.isdigit() or int(v) > self.max_bytes):
                return await _too_large(self.max_bytes)(scope, receive, send)
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return msg

        try:
            await self.app(scope, limited, send)
        except BodyTooLarge:  # an app that lets it through (FastAPI answers it: app.install_error_handlers)
            await _too_large(self.max_bytes)(scope, receive, send)


class BodyTooLarge(Exception):
    """A streamed (chunked) body went over the limit while it was read."""

    def __init__(self, limit: int) -> None:
        super().__init__(too_large_message(limit))
        self.limit = limit


def too_large_message(limit: int) -> str:
    return f"the request body is larger than {limit:,} bytes"


def _too_large(limit: int) -> Response:
    return JSONResponse(error_answer(too_large_message(limit), "body_too_large", {"limit": limit}), status_code=413)


def middleware(access: AccessSettings, max_body_bytes: int) -> list[tuple[Callable[..., ASGIApp], dict[str, Any]]]:
    """Every answer's way out, outermost first: security headers on everything; the access guard (Host,
    Origin, token) before the limits, so strangers are not counted; the per-client limits (API calls
    only); cancelling what a client that went away asked for; the body limit; gzip. Binary answers are
    raw floats: gzip shrinks them by ~10-15 % at 100-230 ms per MB, so they go as they are. Level 6,
    not Starlette's 9: the 419 kB bundle compresses in 22 ms instead of 35 to within 0.1 % of the size
    (measured, Python's gzip)."""
    return [(SecurityHeaders, {}), (AccessGuard, {"settings": access}), (FairShare, {"settings": access}),
            (CancelOnDisconnect, {}), (BodyLimit, {"max_bytes": max_body_bytes}),
            (GZipMiddleware, {"minimum_size": 2048, "compresslevel": 6,
                              "exclude_content_types": (*DEFAULT_EXCLUDED_CONTENT_TYPES, BINARY_MEDIA_TYPE)})]


def wrapped(app: ASGIApp, layers: list[tuple[Callable[..., ASGIApp], dict[str, Any]]]) -> ASGIApp:
    """`app` inside `layers` (outermost first), as Starlette's add_middleware would stack them."""
    for cls, kwargs in reversed(layers):
        app = cls(app, **kwargs)
    return app


# -- the web app's files ---------------------------------------------------------------------------

NOT_BUILT = """<!doctype html><meta charset="utf-8"><title>transformer-explainer</title>
<p>The web UI is not built in this installation. Build it with <code>cd web && npm ci && npm run build</code>;
the JSON API is at <a href="/api/openapi.json">/api/openapi.json</a>.</p>"""


def safe_static_path(root: Path, rel: str) -> Path | None:
    """The file under `root` that `rel` names, or None if it is not one (missing, a folder, or a
    path that tries to leave `root`)."""
    if not rel or "\\" in rel or "\0" in rel or rel.startswith("/") or ":" in rel:
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return None
    path = (root / rel).resolve()
    try:
        path.relative_to(root.resolve())
    except ValueError:
        return None
    return path if path.is_file() else None


def is_page(root: Path, scope: Scope) -> bool:
    """Does the request `scope` ask for one of the web app's files, as the real app serves them: a GET
    of "/" (index.html, or the page saying it is not built) or of a file of the bundle (never anything
    under /api/)?"""
    path = scope.get("path", "")
    if scope.get("type") != "http" or scope.get("method") not in PAGE_METHODS:
        return False
    return path == "/" or (not path.startswith("/api/") and safe_static_path(root, path[1:]) is not None)


def accepts_gzip(scope: Scope) -> bool:
    """Whether the request `scope` says that its client takes gzip-encoded answers."""
    return any(k == b"accept-encoding" and b"gzip" in v.lower() for k, v in scope.get("headers", []))


def page_response(root: Path, rel: str, *, gzip_ok: bool = False) -> Response | None:
    """The answer for the web app's file `rel` (the URL path without its leading /; "" is the page), or
    None when there is no such file. index.html and the other unhashed files are revalidated each time
    (no-cache); assets/ have hashed names and are kept for a year.

    An asset the build compressed beside itself (`X.js.gz`, web/vite.config.ts) goes as those bytes to a
    client that takes gzip (`gzip_ok`), in one piece: compressing the bundle here took the server ~35 ms a
    visit, more while the model loads beside it (the loading thread holds the GIL), and the page waits for
    its bundle. The middleware's gzip leaves an answer that is already encoded as it is."""
    if rel == "":
        f = root / "index.html"
        if not f.is_file():
            return HTMLResponse(NOT_BUILT)
        # a few hundred bytes, read here: a FileResponse hops to a worker thread for the file's stat and for
        # each read, and while the model loads each hop waits for the GIL
        return HTMLResponse(f.read_bytes(), headers={"Cache-Control": "no-cache"})
    f = safe_static_path(root, rel)
    if f is None:
        return None
    if not rel.startswith("assets/"):
        return FileResponse(f, headers={"Cache-Control": "no-cache"})
    cache = {"Cache-Control": "public, max-age=31536000, immutable"}
    packed = f.with_name(f.name + ".gz")
    if gzip_ok and packed.is_file():
        media_type = mimetypes.guess_type(f.name)[0] or "application/octet-stream"
        # a few hundred kB from the page cache: reading it here costs less than a hop to a worker thread
        return Response(packed.read_bytes(), media_type=media_type,
                        headers={**cache, "Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
    return FileResponse(f, headers=cache)  # gzipped by the middleware where it is worth it
