"""The bodies of the induction run's API (/api/induction, server/routes/induction.py): what the "Watch it learn" page
reads. Pydantic only (no torch, no web framework); codegen turns them into web/src/lib/generated/api.ts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..schemas import Strict

LiveStatus = Literal["starting", "running", "paused", "stopping", "finished", "stopped", "failed"]
RunName = Literal["main", "control"]


class InductionTrainIn(Strict):
    """POST /api/induction/train: what a live run may change from the defaults (GET /api/induction's `defaults`);
    each value is checked against `limits`, and one out of range is refused with one sentence naming the range."""

    steps: int | None = Field(None, description="optimizer steps of each run")
    seed: int | None = Field(None, description="random seed: initialisation and data")
    width: int | None = Field(None, description="d_model, a multiple of the heads")
    lr: float | None = Field(None, description="AdamW's peak learning rate")
    control: bool | None = Field(None, description="also train the one-layer control after the main run")


class InductionConfigOut(BaseModel):
    """An InductionConfig (training/induction.py), as run.json and settings.json hold it."""

    layers: int
    width: int
    heads: int
    steps: int
    lr: float
    batch: int
    seed: int
    vocab: int
    seq_len: int
    min_segment: int
    max_segment: int
    record_every: int
    checkpoint_every: int
    heldout: int
    control: bool
    family: str


class InductionRecord(BaseModel):
    """One record of a run (induction.Record.to_json())."""

    step: int
    train_loss: float | None
    first_loss: float
    repeat_loss: float
    icl_score: float
    previous_token: list[list[float]]  # (layer, head)
    induction: list[list[float]]  # (layer, head)
    example_attention: list[list[list[list[float]]]]  # (layer, head, query, key)
    elapsed_s: float


class InductionRunSummary(BaseModel):
    """A run's milestones (induction.summary): the first recorded step past each bar that stays past it, or null."""

    layers: int | None = None
    repeat_loss_falls: int | None
    repeat_loss_third: int | None
    induction_head: int | None
    previous_token_head: int | None
    final_first_loss: float
    final_repeat_loss: float
    final_best_induction: float
    final_best_previous_token: float
    steps: int
    elapsed_s: float
    steps_per_s: float | None
    wall_s: float | None = None


class InductionRuns(BaseModel):
    main: InductionRunSummary | None = None
    control: InductionRunSummary | None = None


class InductionRecorded(BaseModel):
    """The shipped run's run.json: its config and each run's milestones."""

    config: InductionConfigOut
    runs: InductionRuns


class InductionExample(BaseModel):
    """The fixed example every record's attention maps are of: `tokens` (symbols), its segment of `segment` tokens
    after a prefix of `prefix`, repeated at once."""

    tokens: list[str]
    prefix: int
    segment: int


class InductionDefaults(BaseModel):
    steps: int
    width: int
    heads: int
    lr: float
    seed: int
    record_every: int
    control: bool


class InductionLiveRun(BaseModel):
    """A live run: GET /api/induction/train/{id}, and the answer to starting or steering one."""

    id: str
    status: LiveStatus
    step: int  # the step the run being trained is at
    steps: int
    run: RunName  # which of the two trains now (or trained last)
    owner_is_you: bool  # may this client stop, pause, resume and step it
    config: InductionConfigOut
    model: str | None  # the model name the main app opens (?model=NAME) once the run has ended; else null
    summary: InductionRuns | None  # each finished run's milestones, once the run has ended
    elapsed_s: float  # training time so far (paused time not counted)
    max_minutes: float  # the run's wall-time cap
    lease_s: float  # the run stops when no event stream of its owner has been open for this long
    n_events: int


class InductionLimits(BaseModel):
    steps: tuple[float, float]
    width: tuple[float, float]
    lr: tuple[float, float]
    seed: tuple[float, float]


class InductionInfo(BaseModel):
    """GET /api/induction: may this server train live (and if not, why), the limits and defaults of a live run, the
    example, the shipped recorded run and the live run going now (else the latest)."""

    live_training: bool
    live_reason: str | None  # one sentence (English) why this server does not train live
    live_reason_code: str | None  # the error code whose localized sentence the page shows
    limits: InductionLimits
    defaults: InductionDefaults
    example: InductionExample
    recorded: InductionRecorded
    recorded_model: str | None  # the shipped run's final model, as the main app opens it
    current: InductionLiveRun | None


class InductionRecordsOut(BaseModel):
    """GET /api/induction/recorded/{name}: the shipped run's log, every record in order."""

    records: list[InductionRecord]


# -- the events of a live run's stream (GET /api/induction/train/{id}/events), one JSON object each ------------


class InductionStartEvent(BaseModel):
    kind: Literal["start"]
    config: InductionConfigOut


class InductionRecordEvent(BaseModel):
    kind: Literal["record"]
    run: RunName
    record: InductionRecord


class InductionStatusEvent(BaseModel):
    kind: Literal["status"]
    status: LiveStatus
    step: int
    run: RunName


class InductionDoneEvent(BaseModel):
    kind: Literal["done"]
    status: Literal["finished", "stopped", "failed"]
    summary: InductionRuns
    model: str | None
    message: str | None = None  # why it stopped or failed, when not by its owner's hand


# -- the run on text (training/induction_text.py): GET /api/induction/text-run ----------------------------------


class InductionTextConfig(BaseModel):
    """A TextRunConfig, as the text run's settings.json and run.json hold it."""

    layers: int
    width: int
    heads: int
    steps: int
    lr: float
    batch: int
    seq_len: int
    seed: int
    record_every: int
    checkpoint_every: int
    heldout_tokens: int


class InductionTextRecord(BaseModel):
    """One record of the text run (induction_text.TextRecord.to_json())."""

    step: int
    tokens: int  # training tokens seen up to this step
    train_loss: float | None
    heldout_loss: float  # nats/token on held-out text
    roles: dict[str, list[list[float | None]]]  # role -> (layer, head): analysis/roles.py's reference roles
    elapsed_s: float


class InductionTextRole(BaseModel):
    final_best: float
    layer: int
    head: int
    step: int | None  # the first record from which some head stays >= 0.5 to the end, or null
    peak: float


class InductionTextSummary(BaseModel):
    steps: int
    tokens: int
    elapsed_s: float
    first_heldout_loss: float
    final_heldout_loss: float
    roles: dict[str, InductionTextRole]


class InductionTextRunOut(BaseModel):
    """GET /api/induction/text-run: the shipped text run (its config, summary and every record) and the name its
    final model opens under in the app (null where this server lacks it)."""

    config: InductionTextConfig
    summary: InductionTextSummary
    records: list[InductionTextRecord]
    model: str | None


REQUESTS = [InductionTrainIn]
RESPONSES = [InductionInfo, InductionRecordsOut, InductionLiveRun, InductionStartEvent, InductionRecordEvent,
             InductionStatusEvent, InductionDoneEvent, InductionTextRunOut]
