"""The ASGI app: the JSON API over an `Explainer`, and the packaged web UI.

`create_app({"name": model})` serves models already loaded (tests, notebooks); the CLI passes a
`ModelRegistry` that also lists the built-in and cached models and loads them on first use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..engine import ExplainerModel
from ..errors import CheckpointError, ExplainerError, InputError, ModelNotFoundError
from . import service
from .pool import Busy, ModelPool
from .registry import ModelRegistry
from .schemas import (
    ErrorOut,
    GenerateIn,
    GenerateOut,
    ModelInfo,
    ModelList,
    NamesOut,
    NextTokenIn,
    NextTokenOut,
    TensorsIn,
    TensorsOut,
    TraceIn,
    TraceOut,
    WeightIn,
)

log = logging.getLogger(__name__)

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


@dataclass(frozen=True)
class ServerSettings:
    model_threads: int = 1  # model calls run at once per process (torch already uses every core per call)
    max_queue: int = 16  # calls waiting beyond those; more get 503 + Retry-After
    request_timeout_s: float = 60.0
    trace_cache_mb: int = 256  # recent traces kept for lazy tensor requests
    max_body_bytes: int = 1_000_000
    static_dir: Path | None = None  # the built UI; None: the package's web_dist/


def package_static_dir() -> Path:
    return Path(str(resources.files("transformer_explainer") / "web_dist"))


# -- small ASGI middlewares ------------------------------------------------------------------------


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
                    raise _BodyTooLarge
            return msg

        try:
            await self.app(scope, limited, send)
        except _BodyTooLarge:
            await _too_large(self.max_bytes)(scope, receive, send)


class _BodyTooLarge(Exception):
    pass


def _too_large(limit: int) -> Response:
    return JSONResponse({"detail": f"the request body is larger than {limit:,} bytes"}, status_code=413)


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                headers = list(msg.get("headers", []))
                headers += [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                            (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY")]
                msg = {**msg, "headers": headers}
            await send(msg)

        await self.app(scope, receive, send_with_headers)


# -- errors ----------------------------------------------------------------------------------------


def _error(status: int, detail: str, errors: list[dict] | None = None, headers: dict[str, str] | None = None
           ) -> JSONResponse:
    body: dict[str, Any] = {"detail": detail}
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, headers=headers)


def _validation_message(errors: list[dict]) -> tuple[int, str]:
    if any(e.get("type") == "json_invalid" for e in errors):
        ctx = next(e.get("ctx", {}) for e in errors if e.get("type") == "json_invalid")
        return 400, f"the request body is not valid JSON ({ctx.get('error', 'parse error')})"
    parts = []
    for e in errors[:5]:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return 422, "; ".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        errs = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        status, msg = _validation_message(list(exc.errors()))
        return _error(status, msg, errs)

    @app.exception_handler(InputError)
    async def _input(_req: Request, exc: InputError) -> JSONResponse:
        return _error(422, str(exc))

    @app.exception_handler(ModelNotFoundError)
    async def _no_model(_req: Request, exc: ModelNotFoundError) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(CheckpointError)
    async def _broken(_req: Request, exc: CheckpointError) -> JSONResponse:
        return _error(503, f"the model could not be loaded: {exc}")

    @app.exception_handler(ExplainerError)
    async def _other(_req: Request, exc: ExplainerError) -> JSONResponse:
        return _error(400, str(exc))

    @app.exception_handler(Busy)
    async def _busy(_req: Request, exc: Busy) -> JSONResponse:
        return _error(503, str(exc), headers={"Retry-After": str(exc.retry_after)})

    @app.exception_handler(Exception)
    async def _unexpected(_req: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _error(500, f"internal error ({type(exc).__name__}); the server logged the details")


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "malformed JSON"},
    404: {"model": ErrorOut, "description": "unknown model"},
    413: {"model": ErrorOut, "description": "request body too large"},
    422: {"model": ErrorOut, "description": "invalid input: the message says what to change"},
    503: {"model": ErrorOut, "description": "busy (see Retry-After) or timed out"},
}


# -- the API ---------------------------------------------------------------------------------------


def api_router(registry: ModelRegistry, explainer: service.Explainer, pool: ModelPool) -> APIRouter:
    r = APIRouter(prefix="/api", responses=ERRORS)

    def model_info(name: str) -> ModelInfo:
        m = registry.loaded_model(name)
        return ModelInfo(name=name, source=registry.source(name), loaded=m is not None,
                         default=name == registry.default, config=service.config_out(m) if m else None,
                         n_params=m.gpt.num_params() if m else None)

    @r.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "pending": pool.pending}

    @r.get("/models", response_model=ModelList)
    async def models() -> ModelList:
        return ModelList(default=registry.default, models=[model_info(n) for n in registry.names()])

    @r.get("/models/{name}", response_model=ModelInfo)
    async def model(name: str) -> ModelInfo:
        canonical, _ = await pool.run(registry.lookup, name)
        return model_info(canonical)

    @r.get("/names", response_model=NamesOut)
    async def names() -> NamesOut:
        return service.names_out()

    @r.post("/trace", response_model=TraceOut)
    async def trace(body: TraceIn) -> TraceOut:
        def work() -> TraceOut:
            t0 = time.perf_counter()
            name, m = registry.lookup(body.model)
            res = service.resolve_input(m, body)
            tr, computed = explainer.trace(name, m, res.ids)
            t1 = time.perf_counter()
            return explainer.overview(name, m, tr, truncated=res.truncated, sampling=body.sampling, top_n=body.top_n,
                                      include=body.include, computed=computed, t0=t0, t_traced=t1)

        return await pool.run(work)

    @r.post("/tensors", response_model=TensorsOut)
    async def tensors(body: TensorsIn) -> TensorsOut:
        def work() -> TensorsOut:
            name, m = registry.lookup(body.model)
            res = service.resolve_input(m, body)
            tr, _ = explainer.trace(name, m, res.ids)
            return TensorsOut(model=name, token_ids=tr.token_ids,
                              tensors=[service.activation_tensor(tr, s) for s in body.tensors])

        return await pool.run(work)

    @r.post("/weights", response_model=TensorsOut)
    async def weights(body: WeightIn) -> TensorsOut:
        def work() -> TensorsOut:
            name, m = registry.lookup(body.model)
            return TensorsOut(model=name, token_ids=[], tensors=[service.weight_tensor(m, s) for s in body.tensors])

        return await pool.run(work)

    @r.post("/next_token", response_model=NextTokenOut)
    async def next_token(body: NextTokenIn) -> NextTokenOut:
        def work() -> NextTokenOut:
            name, m = registry.lookup(body.model)
            res = service.resolve_input(m, body)
            cached = explainer.cache.get((name, tuple(res.ids)))
            logits = cached.next_token_logits() if cached is not None else service.last_logits(m, res.ids)
            return service.next_token_out(m, logits, body.sampling, body.top_n, len(res.ids) - 1)

        return await pool.run(work)

    @r.post("/generate", response_model=GenerateOut)
    async def generate(body: GenerateIn) -> GenerateOut:
        def work() -> GenerateOut:
            t0 = time.perf_counter()
            name, m = registry.lookup(body.model)
            res = service.resolve_input(m, body)
            if len(res.ids) >= m.context_length:
                raise InputError(f"the text already fills the context of {m.name} ({m.context_length} tokens): "
                                 f"nothing more can be generated")
            prefix, prefix_computed = explainer.trace(name, m, res.ids)
            tok = service.choose_next(m, prefix.next_token_logits(), body.sampling, body.token_id)
            merged = explainer.extend(name, m, prefix, tok.id)
            t1 = time.perf_counter()
            n = len(res.ids)
            # normally only the new position; all of them when the prefix was no longer cached
            computed = [n, n + 1] if prefix_computed[0] == prefix_computed[1] else [0, n + 1]
            out = explainer.overview(name, m, merged, truncated=res.truncated, sampling=body.sampling, top_n=body.top_n,
                                     include=body.include, computed=computed, t0=t0, t_traced=t1)
            return GenerateOut(token=tok, chosen=body.token_id is not None, trace=out)

        return await pool.run(work)

    return r


# -- the UI ----------------------------------------------------------------------------------------

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


def static_routes(app: FastAPI, root: Path) -> None:
    def index() -> Response:
        f = root / "index.html"
        if not f.is_file():
            return HTMLResponse(NOT_BUILT)
        return FileResponse(f, headers={"Cache-Control": "no-cache"})

    @app.get("/", include_in_schema=False)
    async def home() -> Response:
        return index()

    @app.get("/{path:path}", include_in_schema=False)
    async def static(path: str) -> Response:
        if path.startswith("api/"):
            return _error(404, f"no API endpoint /{path}")
        f = safe_static_path(root, path)
        if f is None:
            return _error(404, f"no file /{path}")
        cache = "public, max-age=31536000, immutable" if path.startswith("assets/") else "no-cache"
        return FileResponse(f, headers={"Cache-Control": cache})


# -- factory ---------------------------------------------------------------------------------------


def _mount_optional_routers(app: FastAPI) -> None:
    from importlib import import_module

    mod_name = "transformer_explainer.seq2seq.api"
    try:
        mod = import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name and mod_name.startswith(e.name):
            return
        raise
    router = getattr(mod, "router", None)
    if router is not None:
        app.include_router(router, prefix="/api/seq2seq")


def create_app(models: dict[str, ExplainerModel] | ModelRegistry, settings: ServerSettings | None = None,
               *, default: str | None = None) -> FastAPI:
    """The app serving `models` (name -> loaded model, or a registry) and the packaged UI."""
    settings = settings or ServerSettings()
    registry = models if isinstance(models, ModelRegistry) else ModelRegistry.from_models(models, default)
    pool = ModelPool(settings.model_threads, settings.max_queue, settings.request_timeout_s)
    explainer = service.Explainer(settings.trace_cache_mb * 2**20)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        pool.shutdown()

    app = FastAPI(title="transformer-explainer", version="1", docs_url=None, redoc_url=None, lifespan=lifespan,
                  openapi_url="/api/openapi.json",
                  description="Every intermediate value of a GPT-2-family model for your text, by name.")
    app.state.registry, app.state.pool, app.state.explainer = registry, pool, explainer
    install_error_handlers(app)
    app.include_router(api_router(registry, explainer, pool))
    _mount_optional_routers(app)
    from ..analysis.api import router as analysis_router  # here: the analysis package imports server.schemas
    app.include_router(analysis_router, prefix="/api/analysis")
    static_routes(app, settings.static_dir or package_static_dir())
    app.add_middleware(GZipMiddleware, minimum_size=2048)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(SecurityHeaders)
    return app
