"""Request and response bodies of steering (/api/steer, and `steer --json`): a direction added to the residual
stream after one block, the plain and the steered continuation side by side, the breakdown sweep and the direction's
logit lens. Plain pydantic, as the analyses' (`analysis/schemas.py`): this module needs no torch; the web app's types
are generated from it (`server/codegen.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from .errors import InputError
from .limits import MAX_CONTRAST_CHARS, MAX_CONTRAST_PROMPTS, MAX_STEER_TOKENS, STEER_TOKENS
from .schemas import InputIn, SamplingIn, Strict, check_text

if TYPE_CHECKING:
    from .steering import Steering

# a layer index, bounded here only to keep the number small; the model's own count is checked by the engine
Layer = Annotated[int, Field(ge=0, le=10_000)]
ContrastPrompt = Annotated[str, Field(max_length=MAX_CONTRAST_CHARS)]


class FeatureRef(Strict):
    """A feature of the sparse autoencoder at `blocks.{layer}.hook_resid_post`: its decoder row is the direction."""

    layer: Layer
    id: Annotated[int, Field(ge=0)]


class ContrastIn(Strict):
    """Two sets of prompts: the direction is the mean residual stream of set A minus that of set B after the layer
    (each prompt's mean over its positions, then the mean over the set)."""

    a: Annotated[list[ContrastPrompt], Field(max_length=MAX_CONTRAST_PROMPTS)]
    b: Annotated[list[ContrastPrompt], Field(max_length=MAX_CONTRAST_PROMPTS)]

    @field_validator("a", "b")
    @classmethod
    def _texts_ok(cls, v: list[str]) -> list[str]:
        return [check_text(t) for t in v]


class SteerIn(InputIn):
    """Steer the continuation of a text (or ids) with one direction: a feature, or a contrast with a layer."""

    feature: FeatureRef | None = None
    contrast: ContrastIn | None = None
    layer: Layer | None = None  # where a contrast direction is read and added
    strength: Annotated[float, Field(allow_inf_nan=False, ge=-1e6, le=1e6)]
    tokens: Annotated[int, Field(ge=1, le=MAX_STEER_TOKENS)] = STEER_TOKENS
    sampling: SamplingIn = SamplingIn(temperature=0)  # greedy unless asked: the two texts differ by the steering alone
    sweep: bool = True  # also the continuation at each strength of the breakdown sweep

    @model_validator(mode="after")
    def _one_direction(self) -> SteerIn:
        if (self.feature is None) == (self.contrast is None):
            raise InputError("give exactly one direction: a feature {layer, id}, or a contrast {a, b} with a layer",
                             code="steer_one_direction")
        if self.contrast is not None and self.layer is None:
            raise InputError("a contrast direction needs the layer to read it at and add it to",
                             code="steer_layer_missing")
        return self


class SteerToken(BaseModel):
    id: int
    text: str
    prob: float  # its probability under the distribution it was drawn from (1 when greedy)


class SweepPointOut(BaseModel):
    strength: float
    tokens: list[SteerToken]
    mean_log_prob: float | None  # per token under the unsteered model; None for an empty continuation
    distinct: float  # distinct tokens / tokens
    broken: bool  # mean_log_prob below `bound`, or distinct below `distinct_bound`


class DirectionOut(BaseModel):
    kind: Literal["feature", "contrast", "vector"]
    layer: int
    feature: int | None = None
    describe: str
    norm: float


class LensTokenOut(BaseModel):
    id: int
    text: str
    logit: float  # the change of its logit: the lens of the direction minus that of a zero residual stream


class SteerSampling(BaseModel):
    temperature: float
    top_k: int | None
    top_p: float | None
    seed: int | None  # the seed both continuations drew from (None when greedy)


class SteerOut(BaseModel):
    model: str
    tokens: list[str]  # the prompt's tokens
    direction: DirectionOut
    strength: float
    sampling: SteerSampling
    plain: list[SteerToken]
    steered: list[SteerToken]
    changed_at: int | None  # the first generated token where the two differ; None where they agree
    plain_log_prob: float | None  # mean log-probability per token under the unsteered model
    steered_log_prob: float | None
    uniform_log_prob: float  # -ln V: a uniform guess over the vocabulary
    bound: float | None  # halfway from plain_log_prob to uniform_log_prob: below it a continuation counts as broken
    plain_distinct: float  # the plain continuation's share of distinct tokens (distinct tokens / tokens)
    steered_distinct: float
    distinct_bound: float  # half plain_distinct: below it a continuation counts as broken too (it repeats itself)
    steered_broken: bool
    residual_norm: float  # the residual stream's median norm after the layer over the prompt's positions
    sweep: list[SweepPointOut]  # strengths from small to large (empty when not asked)
    breakdown: float | None  # the first strength of the sweep whose continuation is broken; None if none is
    promoted: list[LensTokenOut]  # the tokens the direction raises most through the final norm and unembedding
    suppressed: list[LensTokenOut]  # and lowers most


def _finite(x: float) -> float | None:
    return x if x == x else None  # NaN (an empty continuation's mean) travels as null


def steer_out(model_name: str, s: Steering) -> SteerOut:
    """The API's answer for a `steering.Steering`."""

    def tokens(ts: list) -> list[SteerToken]:
        return [SteerToken(id=t.id, text=t.text, prob=t.prob) for t in ts]

    d, p = s.direction, s.params
    return SteerOut(
        model=model_name, tokens=s.prompt_tokens,
        direction=DirectionOut(kind=d.kind, layer=d.layer, feature=d.feature, describe=d.describe, norm=d.norm),
        strength=s.strength,
        sampling=SteerSampling(temperature=p.temperature, top_k=p.top_k, top_p=p.top_p,
                               seed=None if p.greedy else p.seed),
        plain=tokens(s.plain), steered=tokens(s.steered), changed_at=s.changed_at,
        plain_log_prob=_finite(s.plain_log_prob), steered_log_prob=_finite(s.steered_log_prob),
        uniform_log_prob=s.uniform_log_prob, bound=_finite(s.bound), plain_distinct=s.plain_distinct,
        steered_distinct=s.steered_distinct, distinct_bound=s.distinct_bound, steered_broken=s.steered_broken,
        residual_norm=s.residual_norm,
        sweep=[SweepPointOut(strength=q.strength, tokens=tokens(q.tokens), mean_log_prob=_finite(q.mean_log_prob),
                             distinct=q.distinct, broken=q.broken) for q in s.sweep],
        breakdown=s.breakdown,
        promoted=[LensTokenOut(id=t.id, text=t.text, logit=t.logit) for t in s.lens_promoted],
        suppressed=[LensTokenOut(id=t.id, text=t.text, logit=t.logit) for t in s.lens_suppressed])


REQUESTS = [SteerIn]
RESPONSES = [SteerOut]
