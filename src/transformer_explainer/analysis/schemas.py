"""Request and response bodies of the analysis API (/api/analysis): logit lens, head ablation, the
importance map and pruning, head roles, and the embedding explorer. Plain pydantic, like the core's
(`transformer_explainer.schemas`); the web app's types are generated from these. Numbers that can
be undefined (a loss of a one-token text, an entropy over nothing) are null: strict JSON has no NaN."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator
from pydantic import Strict as PydStrict

from ..limits import ABLATION_TOP, MAX_LENS_POSITIONS, MAX_TOKENS_LIST, MAX_TOP_N
from ..schemas import InputIn, ModelName, Strict, TokenArg

AblationMode = Literal["zero", "mean"]
# a JSON array of two numbers: the tuple itself is lax (JSON has no tuples), its numbers strict like every request's
HeadIn = Annotated[tuple[Annotated[int, Field(ge=0, le=1000)], Annotated[int, Field(ge=0, le=1000)]],
                   PydStrict(False)]
ExpertIn = Annotated[tuple[Annotated[int, Field(ge=0, le=1000)], Annotated[int, Field(ge=0, le=100_000)]],
                     PydStrict(False)]
Matrix = list[list[float | None]]  # (layers, heads)


# -- requests --------------------------------------------------------------------------------------


class LensIn(InputIn):
    positions: Annotated[list[Annotated[int, Field(ge=-4096, lt=4096)]],
                         Field(min_length=1, max_length=MAX_LENS_POSITIONS)] = [-1]
    top: Annotated[int, Field(ge=1, le=MAX_TOP_N)] = 5


class AblateIn(InputIn):
    """Heads as [layer, head] pairs, and/or whole layers (every head of each), and/or experts of a mixture of
    experts as [layer, expert] pairs, taken out of the routing (their tokens go to their next choice, the
    weights renormalised as the model does: `analysis.ablation.expert_removal_patches`). `mode`: the heads'."""

    heads: Annotated[list[HeadIn], Field(max_length=1024)] = []
    layers: Annotated[list[Annotated[int, Field(ge=0, le=1000)]], Field(max_length=1000)] = []
    experts: Annotated[list[ExpertIn], Field(max_length=4096)] = []
    mode: AblationMode = "zero"
    top: Annotated[int, Field(ge=1, le=MAX_TOP_N)] = ABLATION_TOP

    @model_validator(mode="after")
    def _something(self) -> AblateIn:
        if not self.heads and not self.layers and not self.experts:
            raise ValueError("give at least one head ([layer, head]), layer or expert ([layer, expert]) to ablate")
        return self


class ImportanceIn(InputIn):
    mode: AblationMode = "zero"


class PruneIn(InputIn):
    mode: AblationMode = "zero"
    max_heads: Annotated[int, Field(ge=1, le=10_000)] | None = None
    recompute: bool = False  # True re-scores every remaining head at each step: ~N^2/2 passes


class HeadsIn(InputIn):
    reference: bool = True  # also score the heads on the built-in reference set


class NeighboursIn(Strict):
    model: ModelName = None
    token: TokenArg
    n: Annotated[int, Field(ge=1, le=MAX_TOP_N)] = 10


class AnalogyIn(Strict):
    model: ModelName = None
    positive: Annotated[list[TokenArg], Field(min_length=1, max_length=MAX_TOKENS_LIST)]
    negative: Annotated[list[TokenArg], Field(max_length=MAX_TOKENS_LIST)] = []
    n: Annotated[int, Field(ge=1, le=MAX_TOP_N)] = 10
    exclude_inputs: bool = True


class ProjectIn(Strict):
    model: ModelName = None
    tokens: Annotated[list[TokenArg], Field(min_length=2, max_length=MAX_TOKENS_LIST)]


# -- responses -------------------------------------------------------------------------------------


class TokenRef(BaseModel):
    token: str
    id: int


class TokenProb(TokenRef):
    prob: float


class TokenChange(TokenRef):
    before: float
    after: float


class Neighbour(TokenRef):
    similarity: float


class ProjectedPoint(TokenRef):
    x: float
    y: float


class _Tokens(BaseModel):
    model: str
    tokens: list[str]
    token_ids: list[int]


class LensColumn(BaseModel):
    position: int
    top: list[TokenProb]
    target_rank: int
    target_prob: float


class LensLayer(BaseModel):
    name: str
    label: str
    positions: list[LensColumn]


# A (layer, head) pair in an answer: a two-element list, not a tuple (a tuple becomes `prefixItems`,
# which schemathesis' response checks cannot read).
HeadOut = Annotated[list[int], Field(min_length=2, max_length=2)]


class LensOut(_Tokens):
    positions: list[int]
    position_tokens: list[str]
    targets: list[TokenRef]
    layers: list[LensLayer]


class AblateOut(_Tokens):
    heads: list[HeadOut]
    experts: list[HeadOut] = []  # [layer, expert] pairs taken out of the routing
    mode: AblationMode
    loss_before: float | None
    loss_after: float | None
    loss_change: float | None
    kl: float
    before: list[TokenProb]
    after: list[TokenProb]
    changes: list[TokenChange]


class ImportanceOut(BaseModel):
    model: str
    n_layer: int
    n_head: int
    # key/value heads: query heads g*H/G .. (g+1)*H/G - 1 share key/value head g (GPT-2: G = H)
    n_kv_heads: int
    mode: AblationMode
    clean_loss: float
    # (n_layer, n_head); None where the layer has no heads (a layer without attention, in a model that runs through
    # transformers' own modules)
    loss_change: list[list[float | None]]
    kl: list[list[float | None]]
    ranked: list[HeadOut]


class PruneStep(BaseModel):
    head: HeadOut
    loss: float | None


class PruneOut(BaseModel):
    model: str
    mode: AblationMode
    recompute: bool
    clean_loss: float
    steps: list[PruneStep]


class RolesOut(BaseModel):
    source: str
    counts: dict[str, int]
    scores: dict[str, Matrix]


class AttentionStatsOut(BaseModel):
    entropy: Matrix
    normalized_entropy: Matrix
    mean_distance: Matrix
    queries: int


class HeadsOut(_Tokens):
    n_layer: int
    n_head: int
    # key/value heads: query heads g*H/G .. (g+1)*H/G - 1 share key/value head g (GPT-2: G = H)
    n_kv_heads: int
    roles: list[str]
    text: RolesOut
    text_role_of: list[list[str | None]]
    stats: AttentionStatsOut
    reference: RolesOut | None
    reference_role_of: list[list[str | None]] | None


class NeighboursOut(BaseModel):
    model: str
    token: TokenRef
    neighbours: list[Neighbour]


class AnalogyOut(BaseModel):
    model: str
    positive: list[TokenRef]
    negative: list[TokenRef]
    neighbours: list[Neighbour]


class ProjectOut(BaseModel):
    model: str
    points: list[ProjectedPoint]
    explained_variance: list[float]


REQUESTS = [LensIn, AblateIn, ImportanceIn, PruneIn, HeadsIn, NeighboursIn, AnalogyIn, ProjectIn]
RESPONSES = [LensOut, AblateOut, ImportanceOut, PruneOut, HeadsOut, NeighboursOut, AnalogyOut, ProjectOut]
