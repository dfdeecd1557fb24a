"""The analysis API under /api/analysis: logit lens, head ablation, the importance map, pruning, head
roles, and the embedding explorer. Models are chosen by name among the server's own (its registry),
so no request can load a path or start a download; every analysis runs in the bounded pool, and
traces go through the server's cache, so the app's other views and these share one forward pass.

The two that run a forward pass per head or more (importance, prune) are priced first
(analysis/cost.py: passes x the arithmetic of one pass over the text) and refused with a cheaper
setting to try when over the server's budget; then they run in the pool's analysis lane, which
stops them between passes once their request timed out or the client went away."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter

from ...analysis.ablation import BetweenPasses
from ...analysis.answers import (
    ablate_json,
    ablation_heads,
    analogy_json,
    heads_json,
    importance_json,
    lens_json,
    means_for,
    neighbours_json,
    project_json,
    prune_json,
    reference_roles,
)
from ...analysis.cost import check_importance, check_prune
from ...analysis.schemas import (
    AblateIn,
    AblateOut,
    AnalogyIn,
    AnalogyOut,
    HeadsIn,
    HeadsOut,
    ImportanceIn,
    ImportanceOut,
    LensIn,
    LensOut,
    NeighboursIn,
    NeighboursOut,
    ProjectIn,
    ProjectOut,
    PruneIn,
    PruneOut,
)
from ...engine import ExplainerModel
from ...generic import GenericModel
from ...schemas import InputIn
from ...trace import Trace
from ..context import Context, ServerContext

router = APIRouter(tags=["analysis"])
Model = ExplainerModel | GenericModel  # our own families' code, or a decoder through transformers' modules


def _input(ctx: ServerContext, body: InputIn) -> tuple[str, Model, list[int]]:
    name, m = ctx.lookup(body.model)
    return name, m, ctx.resolve(m, body).ids


def _trace(ctx: ServerContext, name: str, m: Model, ids: list[int]) -> Trace:
    return ctx.traces.get(name, m, ids)[0]


async def _run(ctx: ServerContext, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    return await ctx.pool.run(work)


async def _run_passes(ctx: ServerContext, body: InputIn, price: Callable[[Model, int], None],
                      work: Callable[[BetweenPasses], dict[str, Any]]) -> dict[str, Any]:
    """An analysis of many passes: `price(model, n_tokens)` refuses it (InputError) when it is over the
    budget, before it waits for the analysis lane (in the light lane when the model is loaded and the text short:
    only the text is tokenized), then `work` runs there."""

    def plan(_name: str, m: Model) -> None:
        price(m, len(ctx.resolve(m, body).ids))

    await ctx.with_model(body.model, plan, body.text)
    return await ctx.pool.run_passes(work)


@router.post("/lens", response_model=LensOut)
async def lens(body: LensIn, ctx: Context) -> dict[str, Any]:
    """Per layer: the top next tokens at the chosen positions, and how the final prediction ranks."""

    def work() -> dict[str, Any]:
        name, m, ids = _input(ctx, body)
        return {**lens_json(m, _trace(ctx, name, m, ids), body.positions, body.top), "model": name}

    return await _run(ctx, work)


@router.post("/ablate", response_model=AblateOut)
async def ablate_heads(body: AblateIn, ctx: Context) -> dict[str, Any]:
    """The next-token distribution and the loss with the given heads switched off and experts taken out of the
    routing."""

    def work() -> dict[str, Any]:
        name, m, ids = _input(ctx, body)
        heads = ablation_heads(m, body.heads, body.layers)
        means = means_for(m, body.mode) if heads else None
        return {**ablate_json(m, ids, heads, body.mode, body.top, means, body.experts), "model": name}

    return await _run(ctx, work)


@router.post("/importance", response_model=ImportanceOut)
async def importance(body: ImportanceIn, ctx: Context) -> dict[str, Any]:
    """Each head ablated alone (layers x heads forward passes): loss change and KL, a layer x head map."""

    def price(m: Model, n_tokens: int) -> None:
        check_importance(m.config, n_tokens, ctx.max_analysis_gflop)

    def work(between_passes: BetweenPasses) -> dict[str, Any]:
        name, m, ids = _input(ctx, body)
        return {**importance_json(m, ids, body.mode, means_for(m, body.mode), between_passes), "model": name}

    return await _run_passes(ctx, body, price, work)


@router.post("/prune", response_model=PruneOut)
async def prune(body: PruneIn, ctx: Context) -> dict[str, Any]:
    """Greedy pruning, least important head first, with the loss after each removal."""

    def price(m: Model, n_tokens: int) -> None:
        check_prune(m.config, n_tokens, body.max_heads, body.recompute, ctx.max_analysis_gflop)

    def work(between_passes: BetweenPasses) -> dict[str, Any]:
        name, m, ids = _input(ctx, body)
        return {**prune_json(m, ids, body.mode, body.max_heads, body.recompute, means_for(m, body.mode),
                             between_passes), "model": name}

    return await _run_passes(ctx, body, price, work)


@router.post("/heads", response_model=HeadsOut)
async def heads(body: HeadsIn, ctx: Context) -> dict[str, Any]:
    """Head roles on the text (and the reference set) and attention entropy / distance per head; None in the rows
    of a layer that mixes its tokens without attention (a model that runs through transformers)."""

    def work() -> dict[str, Any]:
        name, m, ids = _input(ctx, body)
        ref = reference_roles(m) if body.reference else None
        return {**heads_json(_trace(ctx, name, m, ids), ref), "model": name}

    return await _run(ctx, work)


@router.post("/neighbours", response_model=NeighboursOut)
async def neighbours(body: NeighboursIn, ctx: Context) -> dict[str, Any]:
    """The tokens whose embeddings are closest (cosine) to a token's."""

    def work() -> dict[str, Any]:
        name, m = ctx.lookup(body.model)
        return {**neighbours_json(m, body.token, body.n), "model": name}

    return await _run(ctx, work)


@router.post("/analogy", response_model=AnalogyOut)
async def analogy_route(body: AnalogyIn, ctx: Context) -> dict[str, Any]:
    """Sum of the positive embeddings minus the negative ones, and its nearest tokens."""

    def work() -> dict[str, Any]:
        name, m = ctx.lookup(body.model)
        return {**analogy_json(m, list(body.positive), list(body.negative), body.n, body.exclude_inputs),
                "model": name}

    return await _run(ctx, work)


@router.post("/project", response_model=ProjectOut)
async def project(body: ProjectIn, ctx: Context) -> dict[str, Any]:
    """The chosen tokens' embeddings on their first two principal components."""

    def work() -> dict[str, Any]:
        name, m = ctx.lookup(body.model)
        return {**project_json(m, list(body.tokens)), "model": name}

    return await _run(ctx, work)
