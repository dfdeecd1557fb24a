"""The induction run's API under /api/induction ("Watch it learn"): the recorded run the package ships, and a live run
(training/induction_live.py) whose records stream to the page as server-sent events.

Whether this server trains live is the app's setting (`ServerSettings.live_training`: `serve` turns it on for a server
bound to this machine, off for one that others reach, which replays the shipped run). One live run at a time; the
client that starts it owns it: only it may pause, step, resume or stop it, and its event stream is the run's lease.
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Request, Response

from ...errors import InputError
from ...loading.resolve import builtin_root
from ...schemas import ErrorOut
from ...training.induction import EXAMPLE, InductionConfig, example_sequence, read_log, text_of
from ...training.induction_limits import LIMITS
from ...training.induction_live import MAX_SEED, LiveInduction, LiveInductions, live_config
from ...training.induction_schemas import (
    InductionInfo,
    InductionLiveRun,
    InductionRecordsOut,
    InductionTextRunOut,
    InductionTrainIn,
)
from ...training.live_run import TrainingBusy
from ..live_runs import client_of, event_response, run_or_404
from ..pages import accepts_gzip

router = APIRouter(tags=["induction"])

RECORDED = "induction-run"  # the shipped run's folder under builtin/, and its final model's name in the app
RUN_NAMES = ("main", "control")
TEXT_RUN = "induction-text-run"  # the shipped run on text: its folder under builtin/, and its final model's name
LIVE_OFF = ("this server does not train models live (a server shared by a class replays the recorded run; whoever "
            "starts it can turn live training on with `serve --live-training`): watch the recorded run")
MAX_EVENT = 10**7  # `after` beyond any run's events
RunId = Annotated[str, Path(min_length=1, max_length=32, pattern=r"^[0-9a-f]+$")]


def recorded_folder() -> FilePath:
    return builtin_root() / RECORDED


@lru_cache(maxsize=1)
def recorded_run() -> dict[str, Any]:
    return json.loads((recorded_folder() / "run.json").read_text())


@lru_cache(maxsize=2)
def recorded_log_body(name: str) -> bytes:
    """The shipped log as the answer's JSON (read and serialised once: 2.4 MB for the main run)."""
    records = read_log(recorded_folder() / name / "log.jsonl")
    return json.dumps({"records": records}, separators=(",", ":")).encode()


@lru_cache(maxsize=1)
def text_run_body(model: str | None) -> bytes:
    """The shipped text run (training/induction_text.py) as the answer's JSON, read and serialised once."""
    folder = builtin_root() / TEXT_RUN
    run = json.loads((folder / "run.json").read_text())
    body = {"config": run["config"], "summary": run["summary"], "records": read_log(folder / "log.jsonl"),
            "model": model}
    return json.dumps(body, separators=(",", ":")).encode()


def live_inductions(request: Request) -> LiveInductions:
    runs: LiveInductions = request.app.state.inductions
    return runs


def live_allowed(request: Request) -> bool:
    allowed: bool = request.app.state.live_training
    return allowed


Runs = Annotated[LiveInductions, Depends(live_inductions)]
Allowed = Annotated[bool, Depends(live_allowed)]


def _defaults(config: InductionConfig) -> dict[str, Any]:
    return {k: getattr(config, k) for k in ("steps", "width", "heads", "lr", "seed", "record_every", "control")}


def _example(config: InductionConfig) -> dict[str, Any]:
    s, L, _ = EXAMPLE
    return {"tokens": text_of(config, example_sequence(config).ids[0]).split(" "), "prefix": s, "segment": L}


@router.get("", response_model=InductionInfo)
async def info(runs: Runs, allowed: Allowed, request: Request) -> dict[str, Any]:
    """May this server train live (and why not), the limits and defaults of a live run, the example, the shipped run
    and the live run going now (else the latest)."""
    current = runs.current
    recorded = recorded_run()
    return {"live_training": allowed, "live_reason": None if allowed else LIVE_OFF,
            "live_reason_code": None if allowed else "live_training_off",
            "limits": {**{k: LIMITS[k] for k in ("steps", "width", "lr")}, "seed": (0, MAX_SEED)},
            "defaults": _defaults(runs.defaults), "example": _example(runs.defaults),
            "recorded": {"config": recorded["config"], "runs": recorded["runs"]},
            "recorded_model": RECORDED if request.app.state.registry.has_files(RECORDED) else None,
            "current": current.describe(client_of(request)) if current is not None else None}


@lru_cache(maxsize=2)
def recorded_log_gzip(name: str) -> bytes:
    """The log's answer gzipped once (2.1 MB -> 0.12 MB in 75 ms of CPU, which the server's gzip middleware would
    spend again, in a worker thread, for each page that opens)."""
    return gzip.compress(recorded_log_body(name), 6, mtime=0)


@router.get("/recorded/{name}", responses={200: {"model": InductionRecordsOut}, 404: {"model": ErrorOut}})
async def recorded(name: Annotated[str, Path(max_length=16)], request: Request) -> Response:
    """Every record of the shipped run `name` (main, or its one-layer control), in order."""
    if name not in RUN_NAMES:
        raise HTTPException(404, f"the recorded run has no {name[:16]!r} part: choose main or control")
    headers = {"Cache-Control": "public, max-age=3600", "Vary": "Accept-Encoding"}
    if accepts_gzip(request.scope):
        return Response(recorded_log_gzip(name), media_type="application/json",
                        headers={**headers, "Content-Encoding": "gzip"})
    return Response(recorded_log_body(name), media_type="application/json", headers=headers)


@router.get("/text-run", responses={200: {"model": InductionTextRunOut}})
async def text_run(request: Request) -> Response:
    """The recorded run of the same small decoder on the corpus: its config, summary and every record (held-out
    loss, every head's role scores), and its final model's name where the app has it."""
    model = TEXT_RUN if request.app.state.registry.has_files(TEXT_RUN) else None
    return Response(text_run_body(model), media_type="application/json",
                    headers={"Cache-Control": "public, max-age=3600"})


def _run(runs: LiveInductions, run_id: str) -> LiveInduction:
    return run_or_404(runs, run_id, "live induction run")


def _owned(runs: LiveInductions, run_id: str, request: Request) -> LiveInduction:
    run = _run(runs, run_id)
    if not run.may_steer(client_of(request)):
        err = InputError(f"another client started the live run {run.id}: only it may pause, step, resume or stop "
                         f"it; watch it here", code="induction_not_owner", run=run.id)
        raise HTTPException(403, str(err)) from err
    return run


OWNER_ONLY: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorOut, "description": "another client started this run"},
    409: {"model": ErrorOut, "description": "the run cannot do that in its state"},
}


@router.post("/train", status_code=202, response_model=InductionLiveRun,
             responses={403: {"model": ErrorOut, "description": "this server does not train live"},
                        409: {"model": ErrorOut, "description": "a live run is going"}})
async def train(req: InductionTrainIn, runs: Runs, allowed: Allowed, request: Request) -> dict[str, Any]:
    """Start a live run (and its one-layer control, with `control`); 409 while one is going, 403 on a server that
    does not train live, 400 for a value out of range."""
    if not allowed:
        err = InputError(LIVE_OFF, code="live_training_off")
        raise HTTPException(403, str(err)) from err
    try:
        config = live_config(req.steps, req.seed, req.width, req.lr, req.control, base=runs.defaults)
        run = runs.start(config, owner=client_of(request))
    except TrainingBusy as e:
        raise HTTPException(409, str(e)) from e
    except InputError as e:  # `from None`: the handler reads the error's code from the context (a 400 with a
        raise HTTPException(400, str(e)) from None  # cause is a body it could not read)
    return run.describe(client_of(request))


@router.get("/train/{run_id}", response_model=InductionLiveRun)
async def status(run_id: RunId, runs: Runs, request: Request) -> dict[str, Any]:
    return _run(runs, run_id).describe(client_of(request))


def _control(runs: LiveInductions, run_id: str, request: Request, what: str) -> dict[str, Any]:
    run = _owned(runs, run_id, request)
    try:
        {"pause": run.pause, "resume": run.resume, "step": run.step_once, "stop": run.stop}[what]()
    except InputError as e:
        raise HTTPException(409, str(e)) from e
    return run.describe(client_of(request))


@router.post("/train/{run_id}/stop", response_model=InductionLiveRun, responses=OWNER_ONLY)
async def stop(run_id: RunId, runs: Runs, request: Request) -> dict[str, Any]:
    """End the run after its current step; it records once more, keeps its model and ends with `done`."""
    return _control(runs, run_id, request, "stop")


@router.post("/train/{run_id}/pause", response_model=InductionLiveRun, responses=OWNER_ONLY)
async def pause(run_id: RunId, runs: Runs, request: Request) -> dict[str, Any]:
    """Hold the run after its current step."""
    return _control(runs, run_id, request, "pause")


@router.post("/train/{run_id}/resume", response_model=InductionLiveRun, responses=OWNER_ONLY)
async def resume(run_id: RunId, runs: Runs, request: Request) -> dict[str, Any]:
    return _control(runs, run_id, request, "resume")


@router.post("/train/{run_id}/step", response_model=InductionLiveRun, responses=OWNER_ONLY)
async def step(run_id: RunId, runs: Runs, request: Request) -> dict[str, Any]:
    """While paused: train up to the next record, then pause again."""
    return _control(runs, run_id, request, "step")


@router.get("/train/{run_id}/events")
async def events(run_id: RunId, runs: Runs, request: Request, after: Annotated[int, Query(ge=0, le=MAX_EVENT)] = 0,
                 last_event_id: Annotated[str | None, Header(max_length=16)] = None) -> Response:
    """Server-sent events, one JSON object each (`kind`: start, record, status, done) with `id:` = its number, so a
    reconnecting EventSource (Last-Event-ID) or `?after=N` resumes where it left off. The stream ends after `done`;
    asked again after that, it answers 204. While a stream of the run's owner is open, the run holds its lease."""
    run = _run(runs, run_id)
    return event_response(run, after, last_event_id, hold=run.lease(client_of(request)))
