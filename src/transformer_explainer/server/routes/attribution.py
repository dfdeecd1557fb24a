"""The "Why this token" API under /api/attribution: direct logit attribution from the cached trace (no
forward pass when the page has traced the text already), activation patching of a prompt pair, and the
tokens of a few texts.

A patching is many forward passes. Before any runs, its cost is checked against a budget (what would fit
is said when it does not); it runs in the bounded pool, and stops between two batches of patched runs once
nobody waits for it: its client went away (a cancelled fetch closes the connection) or its time ran out.
Asked with `Accept: application/x-ndjson`, the answer streams a progress line after each batch and then
the result; the status is decided before the stream starts, so a refused pair is an ordinary 4xx answer."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

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
from ...errors import ExplainerError
from ...patching import Cancelled, PatchingCost
from ...schemas import InputIn
from ..context import Context
from ..pool import Busy
from .core import Traced, with_trace

router = APIRouter(tags=["attribution"])
log = logging.getLogger(__name__)

NDJSON = "application/x-ndjson"
# The arithmetic one patching may take: the same figure as the analyses' default budget (50 GFLOP/s for
# the 60 s of a request), about the four grids of a 20-token pair on GPT-2 small, or 125 tokens on the
# built-in models. A server setting once the server's analysis budget is on main.
PATCH_MAX_GFLOP = 3000.0


@router.post("/attribute", response_model=AttributeOut)
async def attribute(body: AttributeIn, ctx: Context) -> AttributeOut:
    """Direct logit attribution: the logit (or a difference of two) as the sum of what every embedding, head,
    output bias and MLP wrote, plus a constant. From the server's cached trace of the text when it has one."""

    def finish(t: Traced) -> AttributeOut:
        a = t.model.attribute(t.trace, body.target, body.versus, position=body.position)
        return attribute_out(t.name, a, t.trace.token_ids)

    return await with_trace(ctx, body, finish)


@router.post("/tokens", response_model=TokensOut)
async def tokens(body: TokensIn, ctx: Context) -> TokensOut:
    """The tokens of each text as the model reads it (a BOS first where the model expects one); no forward
    pass. A page checks with it that a clean and a corrupted prompt have the same number of tokens."""

    def work() -> TokensOut:
        name, m = ctx.registry.lookup(body.model)
        ids = [m.tokenizer.encode(t) for t in body.texts]
        return TokensOut(model=name, bos_id=m.tokenizer.bos_id,
                         texts=[{"ids": i, "tokens": m.tokenizer.token_texts(i)} for i in ids])

    return await ctx.pool.run(work, light=ctx.is_loaded(body.model))


def _line(line: PatchLine) -> bytes:
    return (line.model_dump_json(exclude_none=True) + "\n").encode()


def _error_status(e: BaseException) -> tuple[int, str]:
    if isinstance(e, Busy):
        return 503, str(e)
    if isinstance(e, ExplainerError):
        return 422, str(e)
    return 500, f"internal error ({type(e).__name__}); the server logged the details"


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone away (the body has been read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


@router.post("/patch", response_model=PatchOut,
             responses={200: {"content": {NDJSON: {"schema": {"$ref": "#/components/schemas/PatchLine"}}},
                              "description": "the result; with Accept: application/x-ndjson, progress lines "
                                             "(PatchLine) and then the result"}})
async def patch(body: PatchIn, request: Request, ctx: Context) -> Response:
    """Activation patching: each activation of `what` from the clean run into the corrupted one, one cell at a
    time; the logit difference answer - wrong at the last position, normalised so that 0 is the corrupted run
    and 1 the clean one (TransformerLens's `get_act_patch_*` semantics)."""
    stream = NDJSON in request.headers.get("accept", "")
    loop = asyncio.get_running_loop()
    stop = threading.Event()  # set once nobody waits for the answer: checked between batches
    progress: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

    def report(done: int, total: int) -> None:
        loop.call_soon_threadsafe(progress.put_nowait, (done, total))

    def work() -> PatchOut:
        name, m = ctx.registry.lookup(body.model)
        c_ids = ctx.resolve(m, InputIn(model=body.model, text=body.clean)).ids
        x_ids = ctx.resolve(m, InputIn(model=body.model, text=body.corrupted)).ids
        m.patch_inputs(c_ids, x_ids, body.answer, body.wrong, body.what)  # a pair that cannot be patched: why
        cost = PatchingCost(m.config, len(c_ids), tuple(body.what))
        cost.check(PATCH_MAX_GFLOP)
        p = m.patch(c_ids, x_ids, body.answer, body.wrong, body.what, progress=report if stream else None,
                    cancelled=stop.is_set)
        return patch_out(name, p, c_ids, x_ids, cost.runs)

    task = asyncio.ensure_future(ctx.pool.run(work))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved, whoever stopped waiting
    gone = asyncio.ensure_future(_disconnected(request))
    first = asyncio.ensure_future(progress.get()) if stream else None
    try:
        waiting: set[asyncio.Future[Any]] = {task, gone} | ({first} if first else set())
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()  # from here on the stream's own disconnect watcher (StreamingResponse's) takes over
        if first is not None and not first.done():
            first.cancel()
    came = [first.result()] if first is not None and first.done() and not first.cancelled() else []
    if task.done() and (task.exception() is not None or not stream):
        if isinstance(task.exception(), Busy):
            stop.set()  # timed out: the pool answers 503, and the run stops at its next batch
        return task.result()  # or raises the refusal: the app's handlers answer it (422, 503, ...)
    if not task.done() and not came:  # the client went away before anything came
        stop.set()
        return JSONResponse({"detail": "the request was cancelled by its client"}, status_code=503)
    return StreamingResponse(_stream(came, progress, task, stop.set), media_type=NDJSON)


async def _stream(came: list[tuple[int, int]], progress: asyncio.Queue[tuple[int, int]],
                  task: asyncio.Future[PatchOut], stop: Callable[[], None]) -> AsyncIterator[bytes]:
    """Progress lines as the batches finish (`came` first: what arrived before the stream began), then the
    result, or the error that ended the work. Cancelled when the client disconnects (Starlette's
    StreamingResponse): then the work is told to stop."""
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
        else:
            if isinstance(e, Busy):
                stop()
            if not isinstance(e, Cancelled):
                status, detail = _error_status(e)
                if status == 500:
                    log.error("patching failed", exc_info=e)
                yield _line(PatchLine(error={"status": status, "detail": detail}))
    finally:
        if nxt is not None:
            nxt.cancel()
        if not task.done():
            stop()


