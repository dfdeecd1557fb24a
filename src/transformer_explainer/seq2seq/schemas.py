"""Request and response bodies of the encoder-decoder API (/api/seq2seq), and the events of a live
training run's stream. Plain pydantic, like the core's (`transformer_explainer.schemas`); the web
app's types are generated from these."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator

from ..errors import InputError
from ..schemas import Strict
from .decoding import MAX_BEAM
from .live_training import MAX_STEPS

MAX_TEXT = 200  # characters; each task's own length limit is checked after tokenizing
MAX_POSITIONS = 512

Level = Literal["char", "word"]
RunStatus = Literal["starting", "running", "stopping", "finished", "stopped", "failed"]


# -- requests --------------------------------------------------------------------------------------


class TaskRequest(Strict):
    task: str = Field(min_length=1, max_length=64, description="a built-in task with a shipped checkpoint")


class DecodeRequest(TaskRequest):
    run: str | None = Field(None, min_length=1, max_length=32,
                            description="decode with the model of this ended live training run, not the shipped one")
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    beam: int = Field(1, ge=1, le=MAX_BEAM, description="1 = greedy")
    top_k: int = Field(5, ge=1, le=20, description="candidates listed per step")
    compare_beams: list[Annotated[int, Field(ge=1, le=MAX_BEAM)]] = Field(
        default_factory=list, max_length=8,
        description="also decode with these beam sizes (1 = greedy), untraced, to compare outputs and scores")

    @field_validator("text")
    @classmethod
    def not_blank(cls, v: str) -> str:
        if not v.strip():
            raise InputError("the text is blank", code="text_empty")
        return v


class CompareRequest(DecodeRequest):
    target: str | None = Field(None, min_length=1, max_length=MAX_TEXT,
                               description="the reference output; default: the task's own answer")


class PositionalRequest(Strict):
    task: str | None = Field(None, max_length=64, description="take d_model and the trained length from this model")
    d_model: int | None = Field(None, ge=2, le=2048, description="when no task is given")
    n_positions: int = Field(64, ge=1, le=MAX_POSITIONS)

    @field_validator("d_model")
    @classmethod
    def even(cls, v: int | None) -> int | None:
        if v is not None and v % 2:
            raise ValueError("d_model must be even")
        return v


class TrainRequest(Strict):
    task: str = Field(min_length=1, max_length=64, description="a built-in task")
    steps: int = Field(400, ge=10, le=MAX_STEPS, description="optimizer steps; the run ends by itself after them")
    example: str | None = Field(None, min_length=1, max_length=MAX_TEXT,
                                description="source whose cross-attention is watched; default: the task's example")
    seed: int = Field(0, ge=0, le=2**31 - 1)


# -- responses -------------------------------------------------------------------------------------


class CheckpointCard(BaseModel):
    """Shape and measured accuracy of a shipped checkpoint."""

    n_encoder_layers: int | None
    n_decoder_layers: int | None
    d_model: int | None
    n_head: int | None
    d_ff: int | None
    exact_match: float | None
    steps: int | None


class TaskInfo(BaseModel):
    name: str
    description: str
    examples: list[str]
    max_src_len: int
    has_checkpoint: bool
    src_level: Level
    tgt_level: Level
    src_vocab: list[str]  # what may be typed (specials left out)
    checkpoint: CheckpointCard | None


class TasksOut(BaseModel):
    tasks: list[TaskInfo]
    max_train_steps: int


class TopToken(BaseModel):
    token: str
    prob: float


class DecodeStep(BaseModel):
    step: int
    input_tokens: list[str]  # the decoder input at this step: <s> and the tokens chosen so far
    token: str  # the token chosen at this step
    prob: float
    top: list[TopToken]
    cross_attn: list[list[list[float]]]  # (layers, heads, source): the new position's row
    self_attn: list[list[list[float]]]  # (layers, heads, step + 1)


class Hyp(BaseModel):
    tokens: list[str]
    score: float


class BeamStep(BaseModel):
    step: int
    alive: list[Hyp]
    finished: list[Hyp]


class BeamAlternative(BaseModel):
    """The same source decoded with another beam size (untraced): what it writes and how probable that is."""

    beam: int
    output: str
    tokens: list[str]
    score: float  # sum of the tokens' log-probabilities, end token included
    finished: bool


class SourceEmbedding(BaseModel):
    """The source on its way into the encoder: token embedding x sqrt(d_model), plus the sinusoid."""

    embed: list[list[float]]
    pos_encoding: list[list[float]]
    embed_sum: list[list[float]]


class DecodeOut(BaseModel):
    task: str
    run: str | None
    input: str
    src_tokens: list[str]
    src_ids: list[int]
    output: str
    tokens: list[str]
    finished: bool
    score: float
    beam: int
    d_model: int
    d_ff: int
    n_params: int  # every weight of the model that decoded (embeddings, both stacks, output layer)
    src_vocab_size: int  # tokens of each side's vocabulary, the specials included
    tgt_vocab_size: int
    embed_scale: float
    max_src_len: int
    max_output_len: int  # decoding stops here if the end token has not come
    n_encoder_layers: int
    n_decoder_layers: int
    n_heads: int
    source: SourceEmbedding | None
    encoder_attn: list[list[list[list[float]]]]  # (layers, heads, source, source)
    steps: list[DecodeStep]
    beams: list[BeamStep]
    alternatives: list[BeamAlternative]  # the request's compare_beams, in its order


class PositionalOut(BaseModel):
    d_model: int
    n_positions: int
    trained_length: int | None
    encoding: list[list[float]]  # (positions, d_model)
    similarity: list[list[float]]  # (positions, positions): PE PE^T
    norm: float


class CompareStep(BaseModel):
    step: int
    gold: str | None
    teacher_input: list[str]
    teacher_token: str
    teacher_prob: float
    teacher_gold_prob: float | None
    free_input: list[str] | None
    free_token: str | None
    free_prob: float | None
    free_gold_prob: float | None
    inputs_differ: bool


class CompareOut(BaseModel):
    task: str
    run: str | None
    input: str
    target: str
    src_tokens: list[str]
    gold_tokens: list[str]
    teacher_tokens: list[str]
    free_tokens: list[str]
    free_text: str
    free_correct: bool
    teacher_correct_steps: int
    first_divergence: int | None
    steps: list[CompareStep]


class RunSummary(BaseModel):
    run: str
    task: str
    status: RunStatus
    step: int
    steps: int
    example: str
    reference: str
    preset: str
    elapsed_s: float
    n_events: int


class CurrentRunOut(BaseModel):
    run: RunSummary | None
    max_steps: int


# -- the events of a training run's stream (GET /train/{run}/events), one JSON object each ---------


class ModelShape(BaseModel):
    n_encoder_layers: int
    n_decoder_layers: int
    d_model: int
    n_head: int
    d_ff: int
    params: int


class StartEvent(BaseModel):
    kind: Literal["start"]
    run: str
    task: str
    steps: int
    example: str
    reference: str
    src_tokens: list[str]
    rows: list[str]
    n_layers: int
    n_heads: int
    model: ModelShape
    batch_size: int
    lr: float
    warmup: int
    max_minutes: float


class StepEvent(BaseModel):
    kind: Literal["step"]
    step: int
    loss: float
    lr: float


class SnapshotEvent(BaseModel):
    kind: Literal["snapshot"]
    step: int
    cross_attn: list[list[list[list[float]]]]
    gold_prob: list[float]
    output: str
    correct: bool


class EvalEvent(BaseModel):
    kind: Literal["eval"]
    step: int
    exact_match: float
    val_loss: float
    token_acc: float


class DoneEvent(BaseModel):
    kind: Literal["done"]
    step: int
    status: Literal["finished", "stopped", "failed"]
    message: str | None = None
    elapsed_s: float | None = None
    exact_match: float | None = None
    val_loss: float | None = None
    token_acc: float | None = None


REQUESTS = [DecodeRequest, CompareRequest, PositionalRequest, TrainRequest]
RESPONSES = [TasksOut, DecodeOut, PositionalOut, CompareOut, RunSummary, CurrentRunOut, StartEvent, StepEvent,
             SnapshotEvent, EvalEvent, DoneEvent]
