"""JSON API of the encoder-decoder explainer, an `APIRouter` the web server mounts under
`/api/seq2seq`: tasks, traced decoding, positional encodings, teacher forcing vs free running.

Every response is plain lists and numbers. Models come from `model_loader`, a dependency the
server or a test can override (`app.dependency_overrides[model_loader] = ...`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import torch
from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, Field, field_validator

from ..errors import CheckpointError, InputError
from .checkpoint import builtin_checkpoints, load_builtin
from .decoding import MAX_BEAM, DecodeResult, beam_search, greedy_decode, teacher_forced_vs_free_running
from .engine import Seq2SeqModel
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
                     "src_level": t.src_vocab.level, "tgt_level": t.tgt_vocab.level})
    return {"tasks": rows}


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
    return {"src_tokens": r.src_tokens, "output": r.text, "tokens": r.tokens, "finished": r.finished,
            "score": _round(r.score), "beam": r.beam_size, "n_encoder_layers": c.n_encoder_layers,
            "n_decoder_layers": c.n_decoder_layers, "n_heads": c.n_head, "encoder_attn": encoder_attn,
            "steps": steps, "beams": beams}


@router.post("/decode")
def decode(req: DecodeRequest, load: Loader) -> dict[str, Any]:
    m = _model(load, req.task)
    try:
        src = m.encode_source(req.text)
        if req.beam == 1:
            r = greedy_decode(m, src, record=True, top_k=req.top_k)
        else:
            r = beam_search(m, src, req.beam, record=True, top_k=req.top_k)
    except InputError as e:
        raise HTTPException(400, str(e)) from None
    return {"task": req.task, "input": req.text, **_decode_json(m, r)}


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
def compare(req: CompareRequest, load: Loader) -> dict[str, Any]:
    m = _model(load, req.task)
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
    return {"task": req.task, "input": req.text, "target": target, **{k: v for k, v in vars(c).items()
            if k != "steps"}, "steps": steps}
