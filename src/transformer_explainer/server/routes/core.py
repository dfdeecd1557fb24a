"""The API's core under /api: models, names, a trace's overview, tensors and weights by name, the
next-token distribution, and generation one token at a time. Each route looks the model up, runs
the domain's function in the bounded pool (the light lane when the trace is already in memory) and
returns its pydantic answer."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from ...encoding import pack_binary
from ...engine import ExplainerModel
from ...generic import GenericModel
from ...inputs import Resolved, check_room_to_generate
from ...media import BINARY_MEDIA_TYPE
from ...overview import (
    Found,
    OverviewAsk,
    check_recorded,
    choose_next,
    config_out,
    names_out,
    next_token_out,
    trace_overview,
)
from ...schemas import (
    FamilyName,
    GenerateIn,
    GenerateOut,
    HealthOut,
    InputIn,
    ModelInfo,
    ModelList,
    NamesOut,
    NextTokenIn,
    NextTokenOut,
    TensorsIn,
    TensorsOut,
    TensorSpec,
    TraceIn,
    TraceOut,
    WeightIn,
)
from ...slicing import activation_tensors, check_activations_fit, weight_tensors
from ...trace import Trace
from ..context import Context, ServerContext

router = APIRouter()

T = TypeVar("T")


@dataclass
class Traced:
    """A request's input, resolved, with its trace."""

    name: str
    model: ExplainerModel
    res: Resolved
    trace: Trace
    computed: list[int]  # [first, last + 1) of the positions computed for it
    t0: float
    t_traced: float

    @property
    def found(self) -> Found:
        return Found(self.res.truncated, self.computed, self.t_traced - self.t0)


async def with_trace(ctx: ServerContext, body: InputIn, finish: Callable[[Traced], T],
                     tensors: list[TensorSpec] | None = None) -> T:
    """Find the trace of the request's input and `finish` with it: in the light lane when the trace
    is in memory (no forward pass), else in the model lane, once the `tensors` the answer will hold
    are known to fit in it (no pass is run for an answer that would be refused)."""
    traces = ctx.traces
    if ctx.is_light(body.model, body.text):
        def light() -> T | None:
            t0 = time.perf_counter()
            found = ctx.in_memory(body.model)
            if found is None:
                return None
            name, m = found
            res = ctx.resolve(m, body)
            check_recorded(m.config, tensors or [])
            hit = traces.cached(name, res.ids, count_miss=False)  # the model lane counts it
            n = len(res.ids)
            return None if hit is None else finish(Traced(name, m, res, hit, [n, n], t0, time.perf_counter()))

        out = await ctx.pool.run(light, light=True)
        if out is not None:
            return out

    def heavy() -> T:
        t0 = time.perf_counter()
        name, m = ctx.lookup(body.model)
        res = ctx.resolve(m, body)
        check_recorded(m.config, tensors or [])
        check_activations_fit(m.config, len(res.ids), tensors or [])
        tr, computed = traces.get(name, m, res.ids, wanting=[t.name for t in tensors or []])
        return finish(Traced(name, m, res, tr, computed, t0, time.perf_counter()))

    return await ctx.pool.run(heavy)


def answer(out: BaseModel, request: Request, timings_ms: dict[str, float]) -> Response:
    """`out` as JSON, or in the binary form (encoding.pack_binary) when the request accepts it, with the
    server's timings in a Server-Timing header: the forward pass ("model"), the overview and encodings
    ("encode") and the serialisation of the answer ("serialise"), in ms."""
    t = time.perf_counter()
    if BINARY_MEDIA_TYPE in request.headers.get("accept", ""):
        body, media = pack_binary(out.model_dump(mode="json")), BINARY_MEDIA_TYPE
    else:
        body, media = out.model_dump_json().encode(), "application/json"
    timing = {**timings_ms, "serialise": (time.perf_counter() - t) * 1e3}
    return Response(body, media_type=media, headers={
        "Server-Timing": ", ".join(f"{k};dur={v:.2f}" for k, v in timing.items()), "Vary": "Accept"})


def model_info(ctx: ServerContext, name: str) -> ModelInfo:
    m = ctx.registry.loaded_model(name)
    info = ModelInfo(name=name, source=ctx.registry.source(name), loaded=m is not None,
                     default=name == ctx.registry.default, config=config_out(m) if m else None)
    if isinstance(m, GenericModel):  # transformers' modules: its parameters counted, its experts' not told apart
        info.n_params = m.n_params
    elif m is not None:
        info.n_params, info.n_active_params = m.net.num_params(), m.net.num_active_params()
        info.n_expert_params = m.net.num_expert_params()
    return info


@router.get("/health", response_model=HealthOut)
async def health(ctx: Context) -> dict[str, Any]:
    return {"status": "ok", "pending": ctx.pool.pending, "pending_light": ctx.pool.pending_light,
            "cache": ctx.traces.stats()}


@router.get("/models", response_model=ModelList)
async def models(ctx: Context) -> ModelList:
    return ModelList(default=ctx.registry.default, models=[model_info(ctx, n) for n in ctx.registry.names()])


@router.get("/models/{name}", response_model=ModelInfo)
async def model(name: str, ctx: Context) -> ModelInfo:
    """What the server knows of one of its models. Like every GET it changes nothing: a model not in
    memory is not loaded (nor downloaded) for it, and answers `loaded: false` without its config; the
    first POST that uses the model loads it."""
    return model_info(ctx, ctx.registry.known(name))


@router.get("/names", response_model=NamesOut)
async def names(family: FamilyName = "gpt2") -> NamesOut:
    """The names a trace of `family` answers ("llama": Llama, Qwen2 and Mistral; families.FAMILIES; "generic":
    a model that runs through transformers' own modules)."""
    return names_out(family)


@router.post("/trace", response_model=TraceOut)
async def trace(body: TraceIn, request: Request, ctx: Context) -> Response:
    def finish(t: Traced) -> Response:
        ask = OverviewAsk(body.sampling, body.top_n, body.include)
        out = trace_overview(t.name, t.model, t.trace, ask=ask, found=t.found)
        return answer(out, request, out.timings_ms)

    return await with_trace(ctx, body, finish, body.include)


@router.post("/tensors", response_model=TensorsOut)
async def tensors(body: TensorsIn, request: Request, ctx: Context) -> Response:
    def finish(t: Traced) -> Response:
        out = TensorsOut(model=t.name, token_ids=t.trace.token_ids,
                         tensors=activation_tensors(t.trace, body.tensors))
        t_done = time.perf_counter()
        return answer(out, request, {"model": round((t.t_traced - t.t0) * 1e3, 2),
                                     "encode": round((t_done - t.t_traced) * 1e3, 2)})

    return await with_trace(ctx, body, finish, body.tensors)


@router.post("/weights", response_model=TensorsOut)
async def weights(body: WeightIn, request: Request, ctx: Context) -> Response:
    def work(name: str, m: ExplainerModel) -> Response:
        t0 = time.perf_counter()
        if isinstance(m, GenericModel):  # its weights keep transformers' names: it says so in one sentence
            m.weight(body.tensors[0].name)
        out = TensorsOut(model=name, token_ids=[], tensors=weight_tensors(m, body.tensors))
        return answer(out, request, {"encode": round((time.perf_counter() - t0) * 1e3, 2)})

    return await ctx.with_model(body.model, work)


@router.post("/next_token", response_model=NextTokenOut)
async def next_token(body: NextTokenIn, ctx: Context) -> NextTokenOut:
    def work(cached_only: bool) -> NextTokenOut | None:
        found = ctx.in_memory(body.model) if cached_only else ctx.lookup(body.model)
        if found is None:
            return None
        name, m = found
        res = ctx.resolve(m, body)
        cached = ctx.traces.cached(name, res.ids, count_miss=not cached_only)
        if cached is None and cached_only:
            return None
        # without a trace, the fast path: no recording, logits of the last position only
        logits = cached.next_token_logits() if cached is not None else m.last_logits(res.ids)
        return next_token_out(m, logits, body.sampling, body.top_n, len(res.ids) - 1)

    if ctx.is_light(body.model, body.text):
        out = await ctx.pool.run(work, True, light=True)
        if out is not None:
            return out
    out = await ctx.pool.run(work, False)
    assert out is not None
    return out


@router.post("/generate", response_model=GenerateOut)
async def generate(body: GenerateIn, ctx: Context) -> GenerateOut:
    def work() -> GenerateOut:
        t0 = time.perf_counter()
        name, m = ctx.lookup(body.model)
        res = ctx.resolve(m, body)
        check_room_to_generate(m, len(res.ids), ctx.max_tokens)
        check_recorded(m.config, body.include)
        check_activations_fit(m.config, len(res.ids) + 1, body.include)
        prefix, prefix_computed = ctx.traces.get(name, m, res.ids)
        tok = choose_next(m, prefix.next_token_logits(), body.sampling, body.token_id)
        merged, first = ctx.traces.extend(name, m, prefix, tok.id, cached=prefix_computed[0] == len(res.ids),
                                          wanting=[t.name for t in body.include])
        t1 = time.perf_counter()
        n = len(res.ids)
        # normally only the new position; more when the prefix, or its keys and values, were no longer kept
        computed = [min(prefix_computed[0], first), n + 1]
        out = trace_overview(name, m, merged, ask=OverviewAsk(body.sampling, body.top_n, body.include),
                             found=Found(res.truncated, computed, t1 - t0))
        return GenerateOut(token=tok, chosen=body.token_id is not None, trace=out)

    return await ctx.pool.run(work)
