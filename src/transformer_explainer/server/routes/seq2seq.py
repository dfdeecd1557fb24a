"""The encoder-decoder API under /api/seq2seq: tasks, traced decoding, positional encodings, teacher
forcing vs free running, and a short live training run whose progress streams to the page
(server-sent events). Every call that runs a model goes through the server's bounded pool.

Models come from `model_loader`, and training runs from `live_training`: dependencies the server or a
test can override (`app.dependency_overrides[model_loader] = ...`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response

from ...errors import CheckpointError, InputError
from ...schemas import ErrorOut
from ...seq2seq.answers import compare_json, decode_text, positional_json, tasks_json
from ...seq2seq.checkpoint import load_builtin
from ...seq2seq.engine import Seq2SeqModel
from ...seq2seq.live_training import MAX_STEPS, LiveConfig, LiveRun, LiveTraining
from ...seq2seq.schemas import (
    CompareOut,
    CompareRequest,
    CurrentRunOut,
    DecodeOut,
    DecodeRequest,
    PositionalOut,
    PositionalRequest,
    RunSummary,
    TasksOut,
    TrainRequest,
)
from ...training.live_run import TrainingBusy
from ..context import Context
from ..live_runs import client_of, event_response, run_or_404

router = APIRouter(tags=["seq2seq"])

ModelLoader = Callable[[str], Seq2SeqModel]


def model_loader() -> ModelLoader:
    return load_builtin


Loader = Annotated[ModelLoader, Depends(model_loader)]


@lru_cache(maxsize=1)
def live_training() -> LiveTraining:
    """This process's training runs (one at a time)."""
    return LiveTraining()


Runs = Annotated[LiveTraining, Depends(live_training)]


def _model(load: ModelLoader, task: str) -> Seq2SeqModel:
    try:
        return load(task)
    except InputError as e:
        raise HTTPException(404, str(e)) from None
    except CheckpointError as e:
        raise HTTPException(500, str(e)) from None


def _chosen_model(load: ModelLoader, runs: LiveTraining, req: DecodeRequest) -> Seq2SeqModel:
    """The shipped checkpoint of the task, or the model a live training run ended with."""
    if req.run is None:
        return _model(load, req.task)
    run = _run(runs, req.run)
    if run.config.task != req.task:
        raise HTTPException(400, f"training run {run.id} learned the {run.config.task!r} task, not {req.task!r}")
    if run.model is None:
        raise HTTPException(409, f"training run {run.id} has not ended yet: wait for it or stop it, then use its model")
    return run.model


@router.get("/tasks", response_model=TasksOut)
async def list_tasks(ctx: Context) -> dict[str, Any]:
    return await ctx.pool.run(tasks_json, light=True)


@router.post("/decode", response_model=DecodeOut)
async def decode(req: DecodeRequest, load: Loader, runs: Runs, ctx: Context) -> dict[str, Any]:
    def work() -> dict[str, Any]:
        m = _chosen_model(load, runs, req)
        try:
            out = decode_text(m, req.text, req.beam, req.top_k, req.compare_beams)
            return {"task": req.task, "run": req.run, **out}
        except InputError as e:
            raise HTTPException(400, str(e)) from None

    return await ctx.pool.run(work)


@router.post("/positional-encoding", response_model=PositionalOut)
async def positional(req: PositionalRequest, load: Loader, ctx: Context) -> dict[str, Any]:
    def work() -> dict[str, Any]:
        trained = None
        if req.task is not None:
            m = _model(load, req.task)
            d_model = m.config.d_model
            trained = max(m.max_src_len, m.max_tgt_len + 1)  # decoder inputs carry the start token
        elif req.d_model is not None:
            d_model = req.d_model
        else:
            raise HTTPException(400, "give a task or a d_model")
        return positional_json(req.n_positions, d_model, trained)

    return await ctx.pool.run(work)


@router.post("/compare", response_model=CompareOut)
async def compare(req: CompareRequest, load: Loader, runs: Runs, ctx: Context) -> dict[str, Any]:
    def work() -> dict[str, Any]:
        m = _chosen_model(load, runs, req)
        try:
            return {"task": req.task, "run": req.run, **compare_json(m, req.text, req.target)}
        except InputError as e:
            raise HTTPException(400, str(e)) from None

    return await ctx.pool.run(work)


# -- live training ---------------------------------------------------------------------------------

def _run(runs: LiveTraining, run_id: str) -> LiveRun:
    return run_or_404(runs, run_id, "training run")


@router.post("/train", status_code=202, response_model=RunSummary)
async def train_start(req: TrainRequest, runs: Runs, request: Request) -> dict[str, Any]:
    """Start a short run of a fresh tiny model; 409 while another run is going. The client that
    starts it is the only one that may stop it."""
    try:
        run = runs.start(LiveConfig(task=req.task, steps=req.steps, example=req.example, seed=req.seed),
                         owner=client_of(request))
    except TrainingBusy as e:
        raise HTTPException(409, str(e)) from None
    except InputError as e:
        raise HTTPException(400, str(e)) from None
    return run.summary()


@router.get("/train", response_model=CurrentRunOut)
async def train_current(runs: Runs) -> dict[str, Any]:
    """The run going now (else the latest one), or null: lets a page that opens mid-run join it."""
    run = runs.current
    return {"run": run.summary() if run is not None else None, "max_steps": MAX_STEPS}


@router.get("/train/{run_id}", response_model=RunSummary)
async def train_status(run_id: str, runs: Runs) -> dict[str, Any]:
    return _run(runs, run_id).summary()


@router.post("/train/{run_id}/stop", response_model=RunSummary,
             responses={403: {"model": ErrorOut, "description": "another client started this run"}})
async def train_stop(run_id: str, runs: Runs, request: Request) -> dict[str, Any]:
    """Ask the run to stop after its current step; it evaluates once more and ends with a `done` event.
    Only the client that started it may (others watch it: a run ends by itself after its steps)."""
    run = _run(runs, run_id)
    if not run.may_steer(client_of(request)):
        raise HTTPException(403, f"training run {run.id} was started by another client: only that client can stop "
                                 f"it; it ends by itself after {run.config.steps} steps")
    run.stop()
    return run.summary()


@router.get("/train/{run_id}/events")
async def train_events(run_id: str, runs: Runs, after: Annotated[int, Query(ge=0)] = 0,
                       last_event_id: Annotated[str | None, Header()] = None) -> Response:
    """Server-sent events, one JSON object per event (`kind`: start, step, snapshot, eval, done), each
    with `id:` = its number, so a reconnecting EventSource (Last-Event-ID) or `?after=N` resumes where
    it left off. The stream ends after `done`; asked again after that, it answers 204 (EventSource
    then stops reconnecting)."""
    return event_response(_run(runs, run_id), after, last_event_id)
