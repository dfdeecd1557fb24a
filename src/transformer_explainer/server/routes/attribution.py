"""The "Why this token" API under /api/attribution: direct logit attribution from the cached trace (no
forward pass when the page has traced the text already), activation patching of a prompt pair, and the
tokens of a few texts.

A patching is many forward passes. Before any runs, its cost is checked against the server's analysis budget
(what would fit is said when it does not); it runs in the pool's analysis lane, and stops between two batches
of patched runs once nobody waits for it: its client went away (a cancelled fetch closes the connection) or its
time ran out.
Asked with `Accept: application/x-ndjson`, the answer streams a progress line after each batch and then
the result; the status is decided before the stream starts, so a refused pair is an ordinary 4xx answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from ...analysis.attribution_schemas import (
    AttributeIn,
    AttributeOut,
    PatchIn,
    PatchLine,
    PatchOut,
    TokensIn,
    TokensOut,
    attribute_out,
    patch_out,
)
from ...engine import ExplainerModel
from ...errors import ExplainerError, InputError, coded, error_answer
from ...features.attribution import feature_attribution
from ...features.schemas import FeatureAttributionIn, FeatureAttributionOut, feature_attribution_out
from ...generic import GenericModel
from ...patching import PatchingCost
from ..context import Context
from ..pool import Abandoned, BetweenPasses, Busy
from .core import Traced, with_trace

router = APIRouter(tags=["attribution"])
Model = ExplainerModel | GenericModel  # our own families' code, or a decoder through transformers' modules
log = logging.getLogger(__name__)

NDJSON = "application/x-ndjson"
# the models that answers name by `$ref` beside their response_model (the patch stream's lines): the app adds them
# to its OpenAPI document's components
EXTRA_SCHEMAS: list[type[BaseModel]] = [PatchLine]


@router.post("/attribute", response_model=AttributeOut)
async def attribute(body: AttributeIn, ctx: Context) -> AttributeOut:
    """Direct logit attribution: the logit (or a difference of two) as the sum of what every embedding, head,
    output bias and MLP wrote, plus a constant. From the server's cached trace of the text when it has one."""

    def finish(t: Traced) -> AttributeOut:
        a = t.model.attribute(t.trace, body.target, body.versus, position=body.position)
        return attribute_out(t.name, a, t.trace.token_ids)

    return await with_trace(ctx, body, finish)


@router.post("/features", response_model=FeatureAttributionOut)
async def features(body: FeatureAttributionIn, ctx: Context) -> FeatureAttributionOut:
    """Why this token, by features: the output of the block the shipped autoencoder at `hook` reads, split into its
    features plus the error, each part's direct effect on the logit (difference) through the frozen final norm;
    beside it what the blocks after that one wrote. From the server's cached trace of the text when it has one
    (one trace and one encoding, as POST /api/features: no analysis lane)."""

    def finish(t: Traced) -> FeatureAttributionOut:
        a = feature_attribution(t.model, t.trace, body.hook, body.target, body.versus, position=body.position,
                                top=body.top)
        row = t.trace["logits"][a.position]
        logits = [float(row[a.target])] + ([float(row[a.versus])] if a.versus is not None else [])
        return feature_attribution_out(t.name, a, logits)

    return await with_trace(ctx, body, finish)


@router.post("/tokens", response_model=TokensOut)
async def tokens(body: TokensIn, ctx: Context) -> TokensOut:
    """The tokens of each text as the model reads it (a BOS first where the model expects one); no forward
    pass. A page checks with it that a clean and a corrupted prompt have the same number of tokens."""

    def work(name: str, m: Model) -> TokensOut:
        ids = [m.tokenizer.encode(t) for t in body.texts]
        for i, one in enumerate(ids):
            ctx.check_prompt(m, one, f"text {i + 1}" if len(ids) > 1 else "text")
        return TokensOut(model=name, bos_id=m.tokenizer.bos_id,
                         texts=[{"ids": i, "tokens": m.tokenizer.token_texts(i)} for i in ids])

    return await ctx.with_model(body.model, work, *body.texts)


def _line(line: PatchLine) -> bytes:
    return (line.model_dump_json(exclude_none=True) + "\n").encode()


def _error_line(e: BaseException) -> PatchLine:
    """An error that ended the work after the stream began, as the app's handlers would have answered it."""
    status = e.status if isinstance(e, Busy) else 422 if isinstance(e, InputError) else 400 if isinstance(
        e, ExplainerError) else 500
    code, params = coded(e) or ("internal", {"kind": type(e).__name__})
    detail = str(e) if status != 500 else f"internal error ({type(e).__name__}); the server logged the details"
    return PatchLine(error={"status": status, **error_answer(detail, code, params)})


@router.post("/patch", response_model=PatchOut,
             responses={200: {"content": {NDJSON: {"schema": {"$ref": "#/components/schemas/PatchLine"}}},
                              "description": "the result; with Accept: application/x-ndjson, progress lines "
                                             "(PatchLine) and then the result"}})
async def patch(body: PatchIn, request: Request, ctx: Context) -> Response:
    """Activation patching: each activation of `what` from the clean run into the corrupted one, one cell at a
    time; the logit difference answer - wrong at the last position, normalised so that 0 is the corrupted run
    and 1 the clean one (TransformerLens's `get_act_patch_*` semantics). Priced before it waits for the analysis
    lane, as the analyses are (the server's analysis budget), and stopped between batches of patched runs once
    nobody waits for it."""
    stream = NDJSON in request.headers.get("accept", "")
    loop = asyncio.get_running_loop()
    progress: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

    def pair(name: str, m: Model) -> tuple[str, Model, list[int], list[int], PatchingCost]:
        c_ids = ctx.prompt_ids(m, body.clean, "clean prompt")
        x_ids = ctx.prompt_ids(m, body.corrupted, "corrupted prompt")
        m.patch_inputs(c_ids, x_ids, body.answer, body.wrong, body.what)  # a pair that cannot be patched: why
        return name, m, c_ids, x_ids, PatchingCost(m.config, len(c_ids), tuple(body.what))

    def price(name: str, m: Model) -> None:
        pair(name, m)[-1].check(ctx.max_analysis_gflop)

    def report(done: int, total: int) -> None:
        loop.call_soon_threadsafe(progress.put_nowait, (done, total))

    def work(between_passes: BetweenPasses) -> PatchOut:
        name, m, c_ids, x_ids, cost = pair(*ctx.lookup(body.model))

        def cancelled() -> bool:
            between_passes()  # raises Abandoned once nobody waits for the answer
            return False

        p = m.patch(c_ids, x_ids, body.answer, body.wrong, body.what, progress=report if stream else None,
                    cancelled=cancelled)
        return patch_out(name, p, c_ids, x_ids, cost.runs)

    await ctx.with_model(body.model, price, body.clean, body.corrupted)  # a refusal is an ordinary 4xx answer
    task = asyncio.ensure_future(ctx.pool.run_passes(work))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved, whoever stopped waiting
    first = asyncio.ensure_future(progress.get()) if stream else None
    try:
        await asyncio.wait({task} | ({first} if first else set()), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the client went away (CancelOnDisconnect): the pool stops the runs
        task.cancel()
        raise
    finally:
        if first is not None and not first.done():
            first.cancel()
    came = [first.result()] if first is not None and first.done() and not first.cancelled() else []
    if task.done() and (task.exception() is not None or not stream):
        return task.result()  # or raises it: the app's handlers answer it (422, 503, ...)
    return StreamingResponse(_stream(came, progress, task), media_type=NDJSON)


async def _stream(came: list[tuple[int, int]], progress: asyncio.Queue[tuple[int, int]],
                  task: asyncio.Future[PatchOut]) -> AsyncIterator[bytes]:
    """Progress lines as the batches finish (`came` first: what arrived before the stream began), then the
    result, or the error that ended the work. Cancelled when the client disconnects: then the work is told to
    stop, at its next batch."""
    nxt: asyncio.Future[tuple[int, int]] | None = None
    try:
        for done, total in came:
            yield _line(PatchLine(progress={"done": done, "total": total}))
        while not task.done() or not progress.empty():
            if not progress.empty():
                done, total = progress.get_nowait()
                yield _line(PatchLine(progress={"done": done, "total": total}))
                continue
            nxt = asyncio.ensure_future(progress.get())
            await asyncio.wait({nxt, task}, return_when=asyncio.FIRST_COMPLETED)
            if nxt.done():
                done, total = nxt.result()
                yield _line(PatchLine(progress={"done": done, "total": total}))
            else:
                nxt.cancel()
        e = task.exception()
        if e is None:
            yield _line(PatchLine(result=task.result()))
        elif not isinstance(e, Abandoned):
            if not isinstance(e, ExplainerError | Busy):
                log.error("patching failed", exc_info=e)
            yield _line(_error_line(e))
    finally:
        if nxt is not None:
            nxt.cancel()
        if not task.done():
            task.cancel()  # the pool tells the runs to stop
