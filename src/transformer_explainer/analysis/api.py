"""JSON API of the analyses, an `APIRouter` the web server mounts under `/api/analysis`: logit lens,
head ablation and the importance map, head roles with attention statistics, and the embedding
explorer.

Models are chosen by name among the server's own (its `ModelRegistry`, as every other endpoint
does), so no request can load a path or start a download; work runs in the server's bounded model
pool. The `*_json` functions are the answers themselves, also used by the HTML snapshot, so the app,
the snapshot and Python agree value for value.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..engine import ExplainerModel
from ..errors import InputError
from ..server.schemas import MAX_TOP_N, InputIn
from ..trace import Trace
from .ablation import AblationResult, Head, HeadImportance, ablate, head_importance, head_means, prune_heads
from .attention_stats import attention_stats
from .embeddings import analogy, nearest_tokens, project_2d
from .head_roles import ROLES, HeadRoles, head_roles, reference_head_roles
from .lens import logit_lens

router = APIRouter(tags=["analysis"])

MAX_POSITIONS = 64  # lens columns per request: each costs L + 1 unembeddings
MAX_TOKENS_LIST = 64  # tokens in an analogy or a projection
MAX_TOKEN_CHARS = 100

AblationModeIn = Literal["zero", "mean"]
TokenIn = int | Annotated[str, Field(min_length=1, max_length=MAX_TOKEN_CHARS)]
HeadIn = tuple[Annotated[int, Field(ge=0, le=1000)], Annotated[int, Field(ge=0, le=1000)]]


def finite(x: Any) -> Any:
    """Nested lists and dicts with NaN / infinities as None: strict JSON has neither."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    return x


# -- the answers, as plain functions ---------------------------------------------------------------


def _tokens(trace: Trace) -> dict[str, Any]:
    return {"tokens": list(trace.tokens), "token_ids": list(trace.token_ids)}


def lens_json(model: ExplainerModel, trace: Trace, positions: list[int] | None, top: int) -> dict[str, Any]:
    lens = logit_lens(model, trace, top=top, positions=positions)
    return finite({"model": trace.model_name, **_tokens(trace), **lens.to_dict()})


def ablate_json(model: ExplainerModel, ids: list[int], heads: list[Head], mode: str, top: int,
                means: Any = None) -> dict[str, Any]:
    return ablation_dict(model, ablate(model, ids, heads, mode=mode, means=means), top)  # type: ignore[arg-type]


def importance_json(model: ExplainerModel, ids: list[int], mode: str, means: Any = None) -> dict[str, Any]:
    return importance_dict(model, head_importance(model, ids, mode=mode, means=means))  # type: ignore[arg-type]


def importance_dict(model: ExplainerModel, imp: HeadImportance) -> dict[str, Any]:
    return finite({"model": model.name, "n_layer": model.config.n_layer, "n_head": model.config.n_head,
                   **imp.to_dict(), "ranked": [list(h) for h, _ in imp.ranked("loss")]})


def ablation_dict(model: ExplainerModel, res: AblationResult, top: int) -> dict[str, Any]:
    return finite({"model": model.name, **_tokens(res.clean), **res.to_dict(model.tokenizer.token_text, top)})


def prune_json(model: ExplainerModel, ids: list[int], mode: str, max_heads: int | None, recompute: bool,
               means: Any = None) -> dict[str, Any]:
    curve = prune_heads(model, ids, mode=mode, means=means, max_heads=max_heads,  # type: ignore[arg-type]
                        recompute=recompute)
    return finite({"model": model.name, "recompute": recompute, **curve.to_dict()})


def _role_of(roles: HeadRoles, n_layer: int, n_head: int) -> list[list[str | None]]:
    return [[roles.role_of(layer, h) for h in range(n_head)] for layer in range(n_layer)]


def heads_json(trace: Trace, reference: HeadRoles | None) -> dict[str, Any]:
    """Role scores on the text (and on the reference set), each head's strongest role, and the
    attention statistics of the text."""
    c = trace.config
    roles = head_roles(trace)
    out: dict[str, Any] = {
        "model": trace.model_name, **_tokens(trace), "n_layer": c.n_layer, "n_head": c.n_head, "roles": list(ROLES),
        "text": roles.to_dict(), "text_role_of": _role_of(roles, c.n_layer, c.n_head),
        "stats": attention_stats(trace).to_dict(), "reference": None, "reference_role_of": None,
    }
    if reference is not None:
        out["reference"] = reference.to_dict()
        out["reference_role_of"] = _role_of(reference, c.n_layer, c.n_head)
    return finite(out)


def neighbours_json(model: ExplainerModel, token: str | int, n: int) -> dict[str, Any]:
    from .embeddings import token_id

    tid = token_id(model, token)
    nbs = nearest_tokens(model, tid, n)
    return {"model": model.name, "token": {"token": model.tokenizer.token_text(tid), "id": tid},
            "neighbours": [{"token": nb.token, "id": nb.id, "similarity": nb.similarity} for nb in nbs]}


def analogy_json(model: ExplainerModel, positive: list[str | int], negative: list[str | int], n: int,
                 exclude_inputs: bool = True) -> dict[str, Any]:
    a = analogy(model, positive, negative, n, exclude_inputs=exclude_inputs)
    return {"model": model.name, **a.to_dict(model.tokenizer.token_text)}


def project_json(model: ExplainerModel, tokens: list[str | int]) -> dict[str, Any]:
    return {"model": model.name, **project_2d(model, tokens).to_dict()}


# -- per-model caches: the reference set and the mean-ablation values cost ~a dozen forward passes --


class _PerModel:
    """Values computed once per loaded model; dropped with the model (the registry may unload it)."""

    def __init__(self, compute: Callable[[ExplainerModel], Any]) -> None:
        self._compute = compute
        self._values: weakref.WeakKeyDictionary[ExplainerModel, Any] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, model: ExplainerModel) -> Any:
        with self._lock:
            if model not in self._values:
                self._values[model] = self._compute(model)
            return self._values[model]


reference_roles = _PerModel(reference_head_roles)
mean_values = _PerModel(head_means)


def _means(model: ExplainerModel, mode: str) -> Any:
    return mean_values(model) if mode == "mean" else None


# -- requests --------------------------------------------------------------------------------------


class LensIn(InputIn):
    positions: Annotated[list[Annotated[int, Field(ge=-4096, lt=4096)]],
                         Field(min_length=1, max_length=MAX_POSITIONS)] = [-1]
    top: Annotated[int, Field(ge=1, le=MAX_TOP_N)] = 5


class AblateIn(InputIn):
    """Heads as [layer, head] pairs, and/or whole layers (every head of each)."""

    heads: Annotated[list[HeadIn], Field(max_length=1024)] = []
    layers: Annotated[list[Annotated[int, Field(ge=0, le=1000)]], Field(max_length=1000)] = []
    mode: AblationModeIn = "zero"
    top: Annotated[int, Field(ge=1, le=MAX_TOP_N)] = 10

    @model_validator(mode="after")
    def _something(self) -> AblateIn:
        if not self.heads and not self.layers:
            raise ValueError("give at least one head ([layer, head]) or layer to ablate")
        return self


class ImportanceIn(InputIn):
    mode: AblationModeIn = "zero"


class PruneIn(InputIn):
    mode: AblationModeIn = "zero"
    max_heads: Annotated[int, Field(ge=1, le=10_000)] | None = None
    recompute: bool = False  # True re-scores every remaining head at each step: ~N^2/2 passes


class HeadsIn(InputIn):
    reference: bool = True  # also score the heads on the built-in reference set


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NeighboursIn(_Strict):
    model: Annotated[str, Field(max_length=200)] | None = None
    token: TokenIn
    n: Annotated[int, Field(ge=1, le=MAX_TOP_N)] = 10


class AnalogyIn(_Strict):
    model: Annotated[str, Field(max_length=200)] | None = None
    positive: Annotated[list[TokenIn], Field(min_length=1, max_length=MAX_TOKENS_LIST)]
    negative: Annotated[list[TokenIn], Field(max_length=MAX_TOKENS_LIST)] = []
    n: Annotated[int, Field(ge=1, le=MAX_TOP_N)] = 10
    exclude_inputs: bool = True


class ProjectIn(_Strict):
    model: Annotated[str, Field(max_length=200)] | None = None
    tokens: Annotated[list[TokenIn], Field(min_length=2, max_length=MAX_TOKENS_LIST)]


# -- routes ----------------------------------------------------------------------------------------


def _lookup(request: Request, name: str | None) -> tuple[str, ExplainerModel]:
    return request.app.state.registry.lookup(name)


def _input(request: Request, body: InputIn) -> tuple[str, ExplainerModel, list[int]]:
    from ..server.service import resolve_input

    name, m = _lookup(request, body.model)
    return name, m, resolve_input(m, body).ids


def _trace(request: Request, name: str, m: ExplainerModel, ids: list[int]) -> Trace:
    """The trace through the server's cache, so the app's other views and these share one pass."""
    return request.app.state.explainer.trace(name, m, ids)[0]


async def _run(request: Request, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    return await request.app.state.pool.run(work)


def _heads(m: ExplainerModel, body: AblateIn) -> list[Head]:
    c = m.config
    heads = [(int(layer), int(h)) for layer, h in body.heads]
    for layer in body.layers:
        if not 0 <= layer < c.n_layer:
            raise InputError(f"layer {layer} is outside 0..{c.n_layer - 1}")
        heads += [(layer, h) for h in range(c.n_head)]
    return heads


@router.post("/lens")
async def lens(body: LensIn, request: Request) -> dict[str, Any]:
    """Per layer: the top next tokens at the chosen positions, and how the final prediction ranks."""

    def work() -> dict[str, Any]:
        name, m, ids = _input(request, body)
        return {**lens_json(m, _trace(request, name, m, ids), body.positions, body.top), "model": name}

    return await _run(request, work)


@router.post("/ablate")
async def ablate_heads(body: AblateIn, request: Request) -> dict[str, Any]:
    """The next-token distribution and the loss with the given heads switched off."""

    def work() -> dict[str, Any]:
        name, m, ids = _input(request, body)
        return {**ablate_json(m, ids, _heads(m, body), body.mode, body.top, _means(m, body.mode)), "model": name}

    return await _run(request, work)


@router.post("/importance")
async def importance(body: ImportanceIn, request: Request) -> dict[str, Any]:
    """Each head ablated alone (layers x heads forward passes): loss change and KL, a layer x head map."""

    def work() -> dict[str, Any]:
        name, m, ids = _input(request, body)
        return {**importance_json(m, ids, body.mode, _means(m, body.mode)), "model": name}

    return await _run(request, work)


@router.post("/prune")
async def prune(body: PruneIn, request: Request) -> dict[str, Any]:
    """Greedy pruning, least important head first, with the loss after each removal."""

    def work() -> dict[str, Any]:
        name, m, ids = _input(request, body)
        return {**prune_json(m, ids, body.mode, body.max_heads, body.recompute, _means(m, body.mode)), "model": name}

    return await _run(request, work)


@router.post("/heads")
async def heads(body: HeadsIn, request: Request) -> dict[str, Any]:
    """Head roles on the text (and the reference set) and attention entropy / distance per head."""

    def work() -> dict[str, Any]:
        name, m, ids = _input(request, body)
        ref = reference_roles(m) if body.reference else None
        return {**heads_json(_trace(request, name, m, ids), ref), "model": name}

    return await _run(request, work)


@router.post("/neighbours")
async def neighbours(body: NeighboursIn, request: Request) -> dict[str, Any]:
    """The tokens whose embeddings are closest (cosine) to a token's."""

    def work() -> dict[str, Any]:
        name, m = _lookup(request, body.model)
        return {**neighbours_json(m, body.token, body.n), "model": name}

    return await _run(request, work)


@router.post("/analogy")
async def analogy_route(body: AnalogyIn, request: Request) -> dict[str, Any]:
    """Sum of the positive embeddings minus the negative ones, and its nearest tokens."""

    def work() -> dict[str, Any]:
        name, m = _lookup(request, body.model)
        return {**analogy_json(m, list(body.positive), list(body.negative), body.n, body.exclude_inputs),
                "model": name}

    return await _run(request, work)


@router.post("/project")
async def project(body: ProjectIn, request: Request) -> dict[str, Any]:
    """The chosen tokens' embeddings on their first two principal components."""

    def work() -> dict[str, Any]:
        name, m = _lookup(request, body.model)
        return {**project_json(m, list(body.tokens)), "model": name}

    return await _run(request, work)
