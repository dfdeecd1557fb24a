"""JSON API of the encoder-decoder explainer, an `APIRouter` the web server mounts under
`/api/seq2seq`: tasks, traced decoding, positional encodings, teacher forcing vs free running, and
a short live training run whose progress streams to the page (server-sent events).

Every response is plain lists and numbers. Models come from `model_loader`, and training runs from
`live_training`: dependencies the server or a test can override
(`app.dependency_overrides[model_loader] = ...`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from functools import lru_cache
from typing import Annotated, Any

import torch
from fastapi import APIRouter, Depends, Header, HTTPException, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field, field_validator

from ..errors import CheckpointError, InputError
from .checkpoint import builtin_checkpoints, load_builtin
from .decoding import MAX_BEAM, DecodeResult, beam_search, greedy_decode, teacher_forced_vs_free_running
from .engine import Seq2SeqModel
from .live_training import MAX_STEPS, LiveConfig, LiveRun, LiveTraining, TrainingBusy
from .model import positional_encoding
from .tasks import BUILTIN_TASKS, make_task

router = APIRouter(tags=["seq2seq"])

MAX_TEXT = 200  # characters; each task's own length limit is checked after tokenizing
MAX_POSITIONS = 512
DIGITS = 6  # rounding of floats in responses: plenty for drawing, a third of the bytes

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


def _round(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    if isinstance(x, float):
        return round(x, DIGITS)
    if isinstance(x, list):
        return [_round(v) for v in x]
    return x


class TaskRequest(BaseModel):
    task: str = Field(min_length=1, max_length=64, description="a built-in task with a shipped checkpoint")


class DecodeRequest(TaskRequest):
    run: str | None = Field(None, min_length=1, max_length=32,
                            description="decode with the model of this ended live training run, not the shipped one")
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    beam: int = Field(1, ge=1, le=MAX_BEAM, description="1 = greedy")
    top_k: int = Field(5, ge=1, le=20, description="candidates listed per step")

    @field_validator("text")
    @classmethod
    def not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the text is blank")
        return v


class CompareRequest(DecodeRequest):
    target: str | None = Field(None, min_length=1, max_length=MAX_TEXT,
                               description="the reference output; default: the task's own answer")


class PositionalRequest(BaseModel):
    task: str | None = Field(None, max_length=64, description="take d_model and the trained length from this model")
    d_model: int | None = Field(None, ge=2, le=2048, description="when no task is given")
    n_positions: int = Field(64, ge=1, le=MAX_POSITIONS)

    @field_validator("d_model")
    @classmethod
    def even(cls, v: int | None) -> int | None:
        if v is not None and v % 2:
            raise ValueError("d_model must be even")
        return v


@router.get("/tasks")
def list_tasks() -> dict[str, Any]:
    shipped = builtin_checkpoints()
    rows = []
    for name in BUILTIN_TASKS:
        t = make_task(name)
        rows.append({"name": name, "description": t.description, "examples": list(t.examples),
                     "max_src_len": t.max_src_len, "has_checkpoint": name in shipped,
                     "src_level": t.src_vocab.level, "tgt_level": t.tgt_vocab.level,
                     "src_vocab": list(t.src_vocab.tokens[3:]),  # what may be typed (specials left out)
                     "checkpoint": _checkpoint_card(shipped[name] / "config.json") if name in shipped else None})
    return {"tasks": rows, "max_train_steps": MAX_STEPS}


def _checkpoint_card(config_file: Any) -> dict[str, Any] | None:
    """Shape and measured accuracy of a shipped checkpoint, from its config.json (no weights read)."""
    try:
        meta = json.loads(config_file.read_text(encoding="utf-8"))
        m, tr = meta["model"], meta.get("training") or {}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    keys = ("n_encoder_layers", "n_decoder_layers", "d_model", "n_head", "d_ff")
    return {**{k: m.get(k) for k in keys}, "exact_match": tr.get("exact_match"), "steps": tr.get("steps")}


def _decode_json(m: Seq2SeqModel, r: DecodeResult) -> dict[str, Any]:
    c = m.config
    steps = []
    for s in r.steps:
        tr = s.trace
        assert tr is not None
        steps.append({
            "step": s.step,
            "input_tokens": s.input_tokens,
            "token": s.token,
            "prob": _round(s.prob),
            "top": [{"token": t.token, "prob": _round(t.prob)} for t in s.top],
            # the new position's attention: (layers, heads, source) and (layers, heads, step + 1)
            "cross_attn": _round(tr.cross_attention()[:, :, -1, :]),
            "self_attn": _round(tr.self_attention()[:, :, -1, :]),
        })
    beams = [{"step": b.step,
              "alive": [{"tokens": m.tgt_vocab.token_texts(h.ids), "score": _round(h.score)} for h in b.alive],
              "finished": [{"tokens": m.tgt_vocab.token_texts(h.ids), "score": _round(h.score)} for h in b.finished]}
             for b in r.beam_steps]
    first = r.steps[0].trace if r.steps else None
    encoder_attn = ([_round(first.pattern("encoder", i)) for i in range(c.n_encoder_layers)]
                    if first is not None else [])
    # the source on its way into the encoder: token embedding x sqrt(d_model), plus the sinusoid
    source = ({"embed": _round(first["encoder.embed"]), "pos_encoding": _round(first["encoder.pos_encoding"]),
               "embed_sum": _round(first["encoder.embed_sum"])} if first is not None else None)
    return {"src_tokens": r.src_tokens, "src_ids": r.src_ids, "output": r.text, "tokens": r.tokens,
            "finished": r.finished, "score": _round(r.score), "beam": r.beam_size, "d_model": c.d_model,
            "embed_scale": _round(c.d_model ** 0.5), "max_src_len": m.max_src_len,
            "n_encoder_layers": c.n_encoder_layers, "n_decoder_layers": c.n_decoder_layers, "n_heads": c.n_head,
            "source": source, "encoder_attn": encoder_attn, "steps": steps, "beams": beams}


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


@router.post("/decode")
def decode(req: DecodeRequest, load: Loader, runs: Runs) -> dict[str, Any]:
    m = _chosen_model(load, runs, req)
    try:
        src = m.encode_source(req.text)
        if req.beam == 1:
            r = greedy_decode(m, src, record=True, top_k=req.top_k)
        else:
            r = beam_search(m, src, req.beam, record=True, top_k=req.top_k)
    except InputError as e:
        raise HTTPException(400, str(e)) from None
    return {"task": req.task, "run": req.run, "input": req.text, **_decode_json(m, r)}


@router.post("/positional-encoding")
def positional(req: PositionalRequest, load: Loader) -> dict[str, Any]:
    trained = None
    if req.task is not None:
        m = _model(load, req.task)
        d_model = m.config.d_model
        trained = max(m.max_src_len, m.max_tgt_len + 1)  # decoder inputs carry the start token
    elif req.d_model is not None:
        d_model = req.d_model
    else:
        raise HTTPException(400, "give a task or a d_model")
    pe = positional_encoding(req.n_positions, d_model)  # (N, D)
    return {"d_model": d_model, "n_positions": req.n_positions, "trained_length": trained,
            "encoding": _round(pe), "similarity": _round(pe @ pe.T),
            "norm": _round(float(pe[0].norm()))}  # every row has norm sqrt(d_model / 2)


@router.post("/compare")
def compare(req: CompareRequest, load: Loader, runs: Runs) -> dict[str, Any]:
    m = _chosen_model(load, runs, req)
    try:
        src = m.encode_source(req.text)
        target = req.target
        if target is None:
            target = m.task.reference(req.text) if m.task is not None else None
            if target is None:
                raise InputError("the task cannot work out the right output for this input: give a target")
        gold = m.encode_target(target)
        if len(gold) > m.max_decode_len:
            raise InputError(f"the target is {len(gold)} tokens long; at most {m.max_decode_len}")
    except InputError as e:
        raise HTTPException(400, str(e)) from None
    c = teacher_forced_vs_free_running(m, src, gold)
    steps = [{k: _round(v) for k, v in vars(s).items()} for s in c.steps]
    return {"task": req.task, "run": req.run, "input": req.text, "target": target, **{k: v for k, v in vars(c).items()
            if k != "steps"}, "steps": steps}


# -- live training ---------------------------------------------------------------------------------

STREAM_POLL_S = 0.2  # how often the event stream looks for new events
KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing a quiet stream


class TrainRequest(BaseModel):
    task: str = Field(min_length=1, max_length=64, description="a built-in task")
    steps: int = Field(400, ge=10, le=MAX_STEPS, description="optimizer steps; the run ends by itself after them")
    example: str | None = Field(None, min_length=1, max_length=MAX_TEXT,
                                description="source whose cross-attention is watched; default: the task's example")
    seed: int = Field(0, ge=0, le=2**31 - 1)


def _run(runs: LiveTraining, run_id: str) -> LiveRun:
    run = runs.get(run_id)
    if run is None:
        raise HTTPException(404, f"no training run {run_id!r} on this server (it may have ended long ago, "
                                 "or the server restarted): start a new one")
    return run


@router.post("/train", status_code=202)
def train_start(req: TrainRequest, runs: Runs) -> dict[str, Any]:
    """Start a short run of a fresh tiny model; 409 while another run is going."""
    try:
        run = runs.start(LiveConfig(task=req.task, steps=req.steps, example=req.example, seed=req.seed))
    except TrainingBusy as e:
        raise HTTPException(409, str(e)) from None
    except InputError as e:
        raise HTTPException(400, str(e)) from None
    return run.summary()


@router.get("/train")
def train_current(runs: Runs) -> dict[str, Any]:
    """The run going now (else the latest one), or null: lets a page that opens mid-run join it."""
    run = runs.current
    return {"run": run.summary() if run is not None else None, "max_steps": MAX_STEPS}


@router.get("/train/{run_id}")
def train_status(run_id: str, runs: Runs) -> dict[str, Any]:
    return _run(runs, run_id).summary()


@router.post("/train/{run_id}/stop")
def train_stop(run_id: str, runs: Runs) -> dict[str, Any]:
    """Ask the run to stop after its current step; it evaluates once more and ends with a `done` event."""
    run = _run(runs, run_id)
    run.stop()
    return run.summary()


@router.get("/train/{run_id}/events")
async def train_events(run_id: str, runs: Runs, after: Annotated[int, Query(ge=0)] = 0,
                       last_event_id: Annotated[str | None, Header()] = None) -> Response:
    """Server-sent events, one JSON object per event (`kind`: start, step, snapshot, eval, done), each
    with `id:` = its number, so a reconnecting EventSource (Last-Event-ID) or `?after=N` resumes where
    it left off. The stream ends after `done`; asked again after that, it answers 204 (EventSource
    then stops reconnecting)."""
    run = _run(runs, run_id)
    start = after
    if last_event_id is not None and last_event_id.strip().isdigit():
        start = max(start, int(last_event_id))
    if run.finished and start >= run.n_events:
        return Response(status_code=204)
    return StreamingResponse(_event_stream(run, start), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _event_stream(run: LiveRun, start: int) -> AsyncIterator[str]:
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
