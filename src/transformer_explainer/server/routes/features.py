"""The features API under /api/features: a text's features at one hook, from the cached trace when the page has
traced the text already (no forward pass then), the autoencoders a model ships, and one feature's page.

Only the autoencoders a model ships are offered: a request names a hook, never a file. The POST is a model call
like the others (the per-client fair share counts it, its text is capped as a trace's is); the GETs read files
the package ships and load no model."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from pydantic_core import to_json

from ...encoding import BINARY_MAGIC
from ...engine import ExplainerModel
from ...errors import CheckpointError, InputError
from ...features.encode import check_top, default_hook, depth, text_features
from ...features.pages import PAGES_FILE, shipped_page
from ...features.sae import CFG_FILE, SAEConfig, builtin_saes, parse_hook
from ...features.schemas import (
    FEATURES_TOP,
    FeatureHookOut,
    FeatureHooksOut,
    FeaturePageOut,
    FeaturesIn,
    FeaturesOut,
    features_answer,
    page_out,
)
from ...generic import GenericModel
from ...loading.files import read_json
from ...loading.tokenizer import TextTokenizer
from ...media import BINARY_MEDIA_TYPE
from ..context import Context, ServerContext
from .core import Traced, with_trace

router = APIRouter(tags=["features"])
Model = ExplainerModel | GenericModel

ModelQuery = Annotated[str | None, Query(max_length=200)]


@router.post("", response_model=FeaturesOut)
async def features(body: FeaturesIn, request: Request, ctx: Context) -> Response:
    """The features of the text at `hook` (default: the model's middle shipped autoencoder): per position the
    `top` most active by decreasing activation, the reconstruction error's size, the variance explained."""
    if body.hook is not None:
        parse_hook(body.hook)  # a hook no trace answers: refused before any pass
    name, folders, _ = _shipped(ctx, body.model)  # a hook the model does not ship, or a top out of range: the same
    if not folders:
        others = _shipping(ctx)
        raise InputError(f"{name} ships no sparse autoencoder" + (
            f"; on this server {', '.join(others)} {'does' if len(others) == 1 else 'do'}" if others
            else ", nor does any other model on this server"))
    hook = body.hook or default_hook(list(folders))
    if hook not in folders:
        raise InputError(f"{name} ships autoencoders at {', '.join(folders)}, none at {hook}")
    cfg = _cfg(name, hook, folders[hook])
    top = check_top(body.top, cfg.k, cfg.d_sae, FEATURES_TOP)

    def finish(t: Traced) -> Response:
        t0 = time.perf_counter()
        out = features_answer(t.name, text_features(t.model, t.trace, hook), top)
        return _answer(out, request, {"model": (t.t_traced - t.t0) * 1e3, "encode": (time.perf_counter() - t0) * 1e3})

    return await with_trace(ctx, body, finish)


def _answer(out: dict[str, Any], request: Request, timings_ms: dict[str, float]) -> Response:
    """`out` (`features_answer`, FeaturesOut's fields) as JSON written by pydantic's serialiser, without building the
    pydantic objects; where the request accepts the binary form (the app's requests do), in that form: the answer
    holds no arrays, so it is the same JSON as the header and no blobs (encoding.pack_binary, without its walk over
    the answer and Python's json), sent as it is (the gzip middleware leaves the binary media type alone). On a
    128-token answer (77 KB) here: 0.8 ms, against 4.0 ms for pack_binary of the validated answer and 2.1 ms + 1.6 ms
    of gzip for its JSON (fastest of 100 rounds, one thread). Server-Timing as `core.answer`'s."""
    t = time.perf_counter()
    body = to_json(out)
    if BINARY_MEDIA_TYPE in request.headers.get("accept", ""):
        pad = b" " * (-(8 + len(body)) % 8)
        body, media = BINARY_MAGIC + len(body).to_bytes(4, "little") + body + pad, BINARY_MEDIA_TYPE
    else:
        media = "application/json"
    timing = {**timings_ms, "serialise": (time.perf_counter() - t) * 1e3}
    return Response(body, media_type=media, headers={
        "Server-Timing": ", ".join(f"{k};dur={v:.2f}" for k, v in timing.items()), "Vary": "Accept"})


def _shipped(ctx: ServerContext, model: str | None) -> tuple[str, dict[str, Path], Model | None]:
    """(the model's name here, its shipped autoencoders, the model if it is in memory); loads nothing."""
    name = ctx.registry.known(model)
    m = ctx.registry.loaded_model(name)
    if m is not None:
        return name, builtin_saes(m), m
    return name, builtin_saes(name) if ctx.registry.source(name) == "builtin" else {}, None


def _cfg(name: str, hook: str, folder: Path) -> SAEConfig:
    """The cfg.json of an autoencoder the package ships; damaged, the server's fault, said as such (503)."""
    try:
        return SAEConfig.from_json(read_json(folder / CFG_FILE), str(folder / CFG_FILE))
    except CheckpointError as e:
        raise HTTPException(503, f"the autoencoder of {name} at {hook} cannot be read: {e}") from None


def _shipping(ctx: ServerContext) -> list[str]:
    """The models of this server that ship autoencoders (loading none)."""
    return [name for name in ctx.registry.names() if _shipped(ctx, name)[1]]


@router.get("/hooks", response_model=FeatureHooksOut)
def hooks(ctx: Context, model: ModelQuery = None) -> FeatureHooksOut:
    """The autoencoders `model` (default: the server's) ships, by depth, with whether their feature pages ship."""
    name, folders, _ = _shipped(ctx, model)
    default = default_hook(list(folders)) if folders else None
    out = []
    for hook, folder in sorted(folders.items(), key=lambda kv: depth(kv[0])):  # first to last
        cfg = _cfg(name, hook, folder)
        out.append(FeatureHookOut(hook=hook, layer=cfg.layer, d_sae=cfg.d_sae, k=cfg.k, default=hook == default,
                           pages=(folder / PAGES_FILE).is_file()))
    return FeatureHooksOut(model=name, hooks=out)


@functools.lru_cache(maxsize=4)
def _tokenizer(folder: str) -> TextTokenizer:
    return TextTokenizer.from_folder(Path(folder))


@router.get("/{hook}/{feature}", response_model=FeaturePageOut)
def page(hook: Annotated[str, PathParam(max_length=64)], feature: int, ctx: Context,
         model: ModelQuery = None) -> FeaturePageOut:
    """Feature `feature` of the autoencoder `model` ships at `hook`: its page, computed once on the corpus."""
    parse_hook(hook)
    name, folders, m = _shipped(ctx, model)

    def token_text(i: int) -> str:  # the built-in model's tokenizer, read from its folder when it is not in memory
        tokenizer = m.tokenizer if m is not None else _tokenizer(str(folders[hook].parent.parent))
        return tokenizer.token_text(i)

    try:
        return page_out(name, shipped_page(name, folders, hook, feature, token_text))
    except CheckpointError as e:  # the package's files are damaged: the server's fault, said as such
        raise HTTPException(503, f"the feature pages of {name} at {hook} cannot be read: {e}") from None
