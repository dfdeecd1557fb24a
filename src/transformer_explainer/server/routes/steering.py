"""POST /api/steer: a direction (a feature's decoder row, or the difference of two prompt sets' mean residual
streams) added after one block, the plain and the steered continuation side by side, the breakdown sweep and the
direction's logit lens (`steering.py`).

It is an analysis: up to two generations plus one per strength of the sweep (each of at most MAX_STEER_TOKENS
tokens) and a trace per contrast prompt. It runs in the pool's analysis lane, counts against its client's share of
analyses (security.ANALYSIS_PATHS), and stops before its next generation once nobody waits for the answer."""

from __future__ import annotations

from fastapi import APIRouter

from ...sampling import SamplingParams
from ...steering import steer
from ...steering_features import choose_direction
from ...steering_schemas import SteerIn, SteerOut, steer_out
from ..context import Context
from ..pool import BetweenPasses

router = APIRouter(tags=["steering"])


@router.post("/steer", response_model=SteerOut)
async def steer_route(body: SteerIn, ctx: Context) -> SteerOut:
    """The plain and the steered continuation of the text from the same sampling parameters and seed."""

    def work(between_passes: BetweenPasses) -> SteerOut:
        name, m = ctx.lookup(body.model)
        ids = ctx.resolve(m, body).ids
        feature = None if body.feature is None else (body.feature.layer, body.feature.id)
        contrast = None if body.contrast is None else (body.contrast.a, body.contrast.b)
        between_passes()
        direction = choose_direction(m, feature=feature, contrast=contrast, layer=body.layer)
        s = body.sampling
        params = SamplingParams(s.temperature, s.top_k, s.top_p, s.seed)
        return steer_out(name, steer(m, ids, direction, body.strength, tokens=body.tokens, params=params,
                                     sweep=body.sweep, between_runs=between_passes))

    return await ctx.pool.run_passes(work)
