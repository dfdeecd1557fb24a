"""The ASGI app: the JSON API over a `memo.TraceStore`, and the packaged web UI.

`create_app({"name": model})` serves models already loaded (tests, notebooks); the CLI passes a
`ModelRegistry` that also lists the built-in and cached models and loads them on first use.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..engine import ExplainerModel
from ..errors import CheckpointError, ExplainerError, InputError, ModelNotFoundError, ParamValue, coded, error_answer
from ..memo.store import TraceStore
from ..schemas import ErrorOut
from ..training.induction_live import LiveInduction, LiveInductions
from ..web_bundle import package_static_dir
from . import defaults
from .context import ServerContext
from .downloads import downloads_router
from .pages import (
    CSP,
    NOT_BUILT,
    BodyLimit,
    BodyTooLarge,
    SecurityHeaders,
    accepts_gzip,
    middleware,
    page_response,
    safe_static_path,
)
from .pool import Busy, ModelPool
from .registry import ModelRegistry
from .routes import analysis, attribution, core, features, induction, seq2seq, steering
from .security import AccessSettings

log = logging.getLogger(__name__)

__all__ = ["CSP", "NOT_BUILT", "BodyLimit", "SecurityHeaders", "ServerSettings", "create_app", "safe_static_path"]


@dataclass(frozen=True)
class ServerSettings:
    model_threads: int = 1  # forward passes at once per process
    light_threads: int = 1  # answers from traces in memory at once (the light lane; torch releases the lock in its
    # products, so a second one runs beside the first on another core)
    thread_budget: int | None = None  # torch threads shared out among the running passes; None: torch's setting
    max_queue: int = defaults.QUEUE  # calls waiting beyond those (per lane); more get 503 + Retry-After
    request_timeout_s: float = defaults.TIMEOUT_S
    trace_cache_mb: int = defaults.CACHE_MB  # recent traces kept for lazy tensor requests
    max_body_bytes: int = defaults.MAX_BODY_BYTES
    max_tokens: int | None = None  # tokens per request; None: the model's context length
    max_analysis_gflop: float | None = defaults.ANALYSIS_GFLOP  # the largest analysis (analysis/cost.py); None: any
    static_dir: Path | None = None  # the built UI; None: the package's web_dist/
    downloads: bool = False  # may the app's download panel fetch known GPT-2 checkpoints (see downloads.py)
    access: AccessSettings = AccessSettings()  # token, Host and Origin checks, per-client limits (security.py)
    live_training: bool = True  # may a client train the induction run live (routes/induction.py); off: it replays


# -- errors ----------------------------------------------------------------------------------------


def _error(status: int, detail: str, code: str, params: Mapping[str, ParamValue] | None = None,
           errors: list[dict] | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    """An error answer (ErrorOut): the English `detail`, and the `code` and `params` the UI words it with."""
    extra = {"errors": errors} if errors is not None else {}
    return JSONResponse(error_answer(detail, code, params, **extra), status_code=status, headers=headers)


def _coded_error(status: int, exc: BaseException, **kwargs: Any) -> JSONResponse:
    code, params = coded(exc) or ("error", {})
    return _error(status, str(exc), code, params, **kwargs)


# pydantic's error types -> (our code, the name of the bound in the error's ctx)
FIELD_CODES: dict[str, tuple[str, str | None]] = {
    "missing": ("field_missing", None),
    "extra_forbidden": ("field_unknown", None),
    "greater_than_equal": ("number_too_small", "ge"),
    "greater_than": ("number_not_above", "gt"),
    "less_than_equal": ("number_too_large", "le"),
    "less_than": ("number_not_below", "lt"),
    "finite_number": ("number_not_finite", None),
    "string_too_long": ("field_too_long", "max_length"),
    "too_long": ("field_too_long", "max_length"),
    "string_too_short": ("field_too_short", "min_length"),
    "too_short": ("field_too_short", "min_length"),
    **{t: ("field_type", None) for t in ("int_type", "int_parsing", "int_from_float", "float_type", "float_parsing",
                                         "string_type", "bool_type", "bool_parsing", "list_type", "dict_type",
                                         "model_type", "model_attributes_type", "literal_error")},
}


def _validation_code(e: dict) -> tuple[str, dict[str, ParamValue]]:
    """The code and params of one pydantic error: an InputError raised by a validator keeps its own."""
    cause = e.get("ctx", {}).get("error")
    if isinstance(cause, BaseException) and (c := coded(cause)) is not None:
        return c
    if e.get("type") == "json_invalid":
        return "body_unreadable", {}
    code, bound = FIELD_CODES.get(str(e.get("type")), ("request_invalid", None))
    if code == "request_invalid":
        return code, {}
    params: dict[str, ParamValue] = {"field": _field(e, tags=False)}
    if bound is not None:
        value = e.get("ctx", {}).get(bound)
        params["limit"] = value if isinstance(value, int | float) else str(value)
    if code == "field_too_short" and params["field"] == "text" and params["limit"] == 1:
        return "text_empty", {}  # the text of every request: a learner's empty text box
    return code, params


# the parts of a location that name a member of a union ("token.constrained-str"), not a field
UNION_TAGS = frozenset({"int", "float", "str", "bool", "list", "dict", "none"})


def _field(e: dict, *, tags: bool = True) -> str:
    parts = [str(x) for x in e.get("loc", ()) if x != "body"]
    if not tags:
        parts = [x for x in parts if x not in UNION_TAGS and "-" not in x and "[" not in x]
    return ".".join(parts)


def _validation_message(errors: list[dict]) -> tuple[int, str]:
    if any(e.get("type") == "json_invalid" for e in errors):
        ctx = next(e.get("ctx", {}) for e in errors if e.get("type") == "json_invalid")
        return 400, f"the request body is not valid JSON ({ctx.get('error', 'parse error')})"
    parts = []
    for e in errors[:5]:
        loc = _field(e)
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return 422, "; ".join(parts)


def body_error_message(cause: BaseException) -> str:
    """Why a request body could not be read as JSON, in words (FastAPI only says it could not)."""
    if isinstance(cause, UnicodeDecodeError):
        return (f"the request body is not valid UTF-8 (byte 0x{cause.object[cause.start]:02x} at offset "
                f"{cause.start}); send JSON encoded as UTF-8")
    if isinstance(cause, RecursionError):
        return "the request body nests arrays or objects too deeply to be read; send a flat JSON object"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return "a number in the request body has too many digits to be read"
    return f"the request body could not be read as JSON ({type(cause).__name__})"


# the code of an HTTPException raised without a coded error behind it (by a route, or by FastAPI: 405)
HTTP_CODES = {403: "forbidden", 404: "model_not_found", 405: "request_invalid"}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _http(req: Request, exc: StarletteHTTPException) -> Response:
        # FastAPI turns a body it cannot read into a bare 400: one over the limit (streamed, so BodyLimit
        # saw it only while FastAPI read it), or one it cannot decode (bad UTF-8, deep nesting, huge numbers)
        if exc.status_code == 400 and isinstance(exc.__cause__, BodyTooLarge):
            return _error(413, str(exc.__cause__), "body_too_large", {"limit": exc.__cause__.limit})
        if exc.status_code == 400 and exc.__cause__ is not None:
            return _error(400, body_error_message(exc.__cause__), "body_unreadable")
        # a route that answers an error of ours with its own status (`raise HTTPException(...) from None`
        # while handling it) keeps that error's code
        behind = exc.__cause__ or exc.__context__
        code, params = (coded(behind) if behind is not None else None) or (HTTP_CODES.get(exc.status_code, (
            "input_invalid" if exc.status_code < 500 else "error")), {})
        if exc.status_code < 400:
            return await http_exception_handler(req, exc)
        return _error(exc.status_code, str(exc.detail), code, params, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        raw = list(exc.errors())
        errs = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in raw]
        status, msg = _validation_message(raw)
        # the answer's code is the first error's; a value that fits no member of a union (a token as an id
        # or a string) gets an error per member, and those of the members of another type say least
        first = next((e for e in raw if e.get("type") == "json_invalid"), None) or next(
            (e for e in raw if FIELD_CODES.get(str(e.get("type")), ("",))[0] != "field_type"), raw[0] if raw else {})
        code, params = _validation_code(first)
        return _error(status, msg, code, params, errs)

    @app.exception_handler(InputError)
    async def _input(_req: Request, exc: InputError) -> JSONResponse:
        return _coded_error(422, exc)

    @app.exception_handler(ModelNotFoundError)
    async def _no_model(_req: Request, exc: ModelNotFoundError) -> JSONResponse:
        return _coded_error(404, exc)

    @app.exception_handler(CheckpointError)
    async def _broken(_req: Request, exc: CheckpointError) -> JSONResponse:
        return _error(503, f"the model could not be loaded: {exc}", "model_unusable", {"reason": str(exc)})

    @app.exception_handler(ExplainerError)
    async def _other(_req: Request, exc: ExplainerError) -> JSONResponse:
        return _coded_error(400, exc)

    @app.exception_handler(Busy)
    async def _busy(_req: Request, exc: Busy) -> JSONResponse:
        return _coded_error(exc.status, exc, headers={"Retry-After": str(exc.retry_after)})

    @app.exception_handler(Exception)
    async def _unexpected(_req: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _error(500, f"internal error ({type(exc).__name__}); the server logged the details", "internal",
                      {"kind": type(exc).__name__})


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "the body cannot be read (malformed JSON, not UTF-8), or the input "
                                           "cannot be used"},
    404: {"model": ErrorOut, "description": "unknown model (or task)"},
    413: {"model": ErrorOut, "description": "request body too large"},
    422: {"model": ErrorOut, "description": "invalid input: the message says what to change"},
    503: {"model": ErrorOut, "description": "busy (see Retry-After) or timed out"},
}


def add_schemas(app: FastAPI, models: list[type[BaseModel]]) -> None:
    """Add `models` (and the models they hold) to the app's OpenAPI components: answers that are not a route's
    `response_model` (a stream's lines) name them by `$ref`, and the document must define what it names."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = base()
            _, defs = models_json_schema([(m, "serialization") for m in models],
                                         ref_template="#/components/schemas/{model}")
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            for name, schema in defs.get("$defs", {}).items():
                schemas.setdefault(name, schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def offer_live_model(registry: ModelRegistry, run: LiveInduction) -> None:
    """A live induction run's final model, in the app's models from now on (until the server exits)."""
    name = f"induction-live-{run.id}"
    registry.add_folder(name, run.model_folder, "local")
    run.model_name = name


# -- the UI ----------------------------------------------------------------------------------------

def static_routes(app: FastAPI, root: Path) -> None:
    """The page and its files (pages.py; StartingApp answers the same while the model loads). GET only, as
    FastAPI's GET routes are: a HEAD gets 405."""

    @app.get("/", include_in_schema=False)
    async def home() -> Response:
        r = page_response(root, "")
        assert r is not None
        return r

    @app.get("/{path:path}", include_in_schema=False)
    async def static(path: str, request: Request) -> Response:
        if path.startswith("api/"):
            return _error(404, f"no API endpoint /{path}", "not_found", {"path": f"/{path}"})
        found = page_response(root, path, gzip_ok=accepts_gzip(request.scope))
        return found or _error(404, f"no file /{path}", "not_found", {"path": f"/{path}"})


# -- factory ---------------------------------------------------------------------------------------


def create_app(models: dict[str, ExplainerModel] | ModelRegistry, settings: ServerSettings | None = None,
               *, default: str | None = None) -> FastAPI:
    """The app serving `models` (name -> loaded model, or a registry) and the packaged UI."""
    settings = settings or ServerSettings()
    registry = models if isinstance(models, ModelRegistry) else ModelRegistry.from_models(models, default)
    pool = ModelPool(settings.model_threads, settings.max_queue, settings.request_timeout_s,
                     light_workers=settings.light_threads, thread_budget=settings.thread_budget)
    traces = TraceStore(settings.trace_cache_mb * 2**20)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        pool.shutdown()
        inductions.shutdown()

    app = FastAPI(title="transformer-explainer", version="1", docs_url=None, redoc_url=None, lifespan=lifespan,
                  openapi_url="/api/openapi.json",
                  description="Every intermediate value of a GPT-2 or Llama-family model for your text, by name.")
    app.state.context = ServerContext(registry, pool, traces, settings.max_tokens, settings.max_analysis_gflop)
    app.state.registry, app.state.pool, app.state.traces = registry, pool, traces
    inductions = LiveInductions(on_end=lambda run: offer_live_model(registry, run))
    app.state.inductions, app.state.live_training = inductions, settings.live_training
    install_error_handlers(app)
    app.include_router(core.router, prefix="/api", responses=ERRORS)
    app.include_router(analysis.router, prefix="/api/analysis", responses=ERRORS)
    app.include_router(attribution.router, prefix="/api/attribution", responses=ERRORS)
    app.include_router(seq2seq.router, prefix="/api/seq2seq", responses=ERRORS)
    app.include_router(features.router, prefix="/api/features", responses=ERRORS)
    app.include_router(steering.router, prefix="/api", responses=ERRORS)
    app.include_router(induction.router, prefix="/api/induction", responses=ERRORS)
    app.include_router(downloads_router(registry, settings.downloads), responses=ERRORS)
    add_schemas(app, attribution.EXTRA_SCHEMAS)
    static_routes(app, settings.static_dir or package_static_dir())
    for cls, kwargs in reversed(middleware(settings.access, settings.max_body_bytes)):  # outermost last
        app.add_middleware(cls, **kwargs)
    return app
