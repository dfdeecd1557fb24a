"""What the live-run routes (routes/seq2seq.py, routes/induction.py) share: the client a request comes from, a run
found by its id, and a run's events as server-sent events.

Each event goes out as one JSON object with `id:` = its number (from 1), so a reconnecting EventSource (Last-Event-ID)
or `?after=N` resumes where it left off; a comment line keeps a quiet stream open through proxies; the stream ends
after the run's last event, and asked again after that it answers 204 (EventSource then stops reconnecting).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.responses import StreamingResponse

from ..training.live_run import LiveRunBase, LiveRuns, RunT

STREAM_POLL_S = 0.2  # how often the event stream looks for new events
KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing a quiet stream


def client_of(request: Request) -> str | None:
    """The client as the per-client limits know it: its address (the proxy's X-Forwarded-For behind one)."""
    return request.client.host if request.client is not None else None


def run_or_404(runs: LiveRuns[RunT], run_id: str, what: str) -> RunT:
    """The run `run_id` of `runs`, or a 404 that says why it may be gone (`what`: the page's name for such a run)."""
    run = runs.get(run_id)
    if run is None:
        raise HTTPException(404, f"no {what} {run_id!r} on this server (it may have ended long ago, or the server "
                                 "restarted): start a new one")
    return run


def resume_from(after: int, last_event_id: str | None) -> int:
    """The number of events the client has: `?after=N`, or its Last-Event-ID where that is further on."""
    if last_event_id is not None and last_event_id.strip().isdigit():
        return max(after, int(last_event_id))
    return after


def event_response(run: LiveRunBase, after: int, last_event_id: str | None,
                   hold: AbstractContextManager[Any] | None = None) -> Response:
    """The run's events after the client's last one as a stream; 204 for a run that has ended with none left.
    `hold` is entered while the stream is open (e.g. the owner's lease on the run)."""
    start = resume_from(after, last_event_id)
    if run.finished and start >= run.n_events:
        return Response(status_code=204)
    return StreamingResponse(event_stream(run, start, hold), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def event_stream(run: LiveRunBase, start: int,
                       hold: AbstractContextManager[Any] | None = None) -> AsyncIterator[str]:
    """The text of the stream: the events from number `start + 1` on, until the run has ended and all are sent."""
    with hold if hold is not None else nullcontext():
        sent = start
        last = time.monotonic()
        yield "retry: 1000\n\n"
        while True:
            finished = run.finished  # read before the events: the last ones are in by the time it is set
            for ev in run.events(sent):
                sent += 1
                last = time.monotonic()
                yield f"id: {sent}\ndata: {json.dumps(ev, separators=(',', ':'))}\n\n"
            if finished:
                return
            if time.monotonic() - last > KEEPALIVE_S:
                last = time.monotonic()
                yield ": keep-alive\n\n"
            await asyncio.sleep(STREAM_POLL_S)
