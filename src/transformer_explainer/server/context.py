"""What every route needs from the server, in one object: the models by name, the bounded pool
that runs them, the trace cache, and the token limit per request. Routes take it as a FastAPI
dependency (`ctx: Context`), so none reaches into the app's state, and a test can hand in its own.
A request admitted by the per-client limits gets the context with its client's share of model switches
(security.ModelSwitches), so that the model lane's `lookup` can hold a client to one load at a time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Annotated, TypeVar

from fastapi import Depends, Request

from ..engine import ExplainerModel
from ..errors import InputError
from ..inputs import Resolved, resolve_input, token_limit
from ..memo.store import TraceStore
from ..schemas import InputIn
from .pool import ModelPool, OverShare
from .registry import ModelRegistry
from .security import SWITCHES_KEY, ModelSwitches

T = TypeVar("T")

# a text is tokenized in the light lane while it has at most this many characters per token the request may hold
# (ordinary English: 4-5 per GPT-2 token, so a text filling the context still does); a longer one may be made of far
# more tokens than fit (40,000 emoji: 80,000 GPT-2 tokens, 0.25 s to tokenize) and is tokenized in the model lane,
# where its client's share of model calls bounds what it costs the others
LIGHT_CHARS_PER_TOKEN = 6


@dataclass(frozen=True)
class ServerContext:
    registry: ModelRegistry
    pool: ModelPool
    traces: TraceStore
    max_tokens: int | None = None  # tokens per request; None: the model's context length
    max_analysis_gflop: float | None = None  # the largest analysis a request may ask for (analysis/cost.py)
    switches: ModelSwitches | None = None  # the models the request's client is loading; None: no per-client limits

    def resolve(self, model: ExplainerModel, body: InputIn) -> Resolved:
        """The request's token ids, within the model's context and this server's limit."""
        return resolve_input(model, body, self.max_tokens)

    def prompt_ids(self, model: ExplainerModel, text: str, what: str) -> list[int]:
        """The token ids of a text this request does not truncate (a prompt of a patched pair): over the model's
        context or this server's limit, a sentence that says to shorten it."""
        try:
            return self.resolve(model, InputIn(text=text)).ids
        except InputError as e:
            if e.code != "text_too_long":
                raise
            raise prompt_too_long(what, int(e.params["tokens"]), int(e.params["limit"])) from None

    def check_prompt(self, model: ExplainerModel, ids: list[int], what: str) -> None:
        """Refuse tokens of a text that this request does not truncate, when more than fit (`prompt_ids`)."""
        limit = token_limit(model, self.max_tokens)
        if len(ids) > limit:
            raise prompt_too_long(what, len(ids), limit)

    def is_light(self, name: str | None, *texts: str | None) -> bool:
        """Whether a call that runs no forward pass and tokenizes `texts` may take the light lane: its model is in
        memory and the texts are short enough to tokenize there (LIGHT_CHARS_PER_TOKEN)."""
        model = self.registry.loaded_model(self.registry.canonical(name))
        if model is None:
            return False
        return sum(len(t or "") for t in texts) <= LIGHT_CHARS_PER_TOKEN * token_limit(model, self.max_tokens)

    def lookup(self, name: str | None) -> tuple[str, ExplainerModel]:
        """(its name here, the model), loaded if need be: for the model lane (a light call uses `in_memory`). A
        client loads one model at a time: its requests for the model it is switching to wait for that load, one
        for another model meanwhile is refused (429)."""
        found = self.registry.in_memory(name)
        if found is not None or self.switches is None:
            return found or self.registry.lookup(name)
        name = self.registry.known(name)
        other = self.switches.begin(name)
        if other is not None:
            raise OverShare(f"your address is loading the model {other} already; wait for it before switching "
                            f"to {name}", retry_after=2, code="too_many_switches", model=other)
        try:
            return self.registry.lookup(name)
        finally:
            self.switches.end(name)

    def in_memory(self, name: str | None) -> tuple[str, ExplainerModel] | None:
        """(its name here, the model) if it is in memory; None (it was unloaded since the route looked) sends the
        call to the model lane."""
        return self.registry.in_memory(name)

    async def with_model(self, name: str | None, work: Callable[[str, ExplainerModel], T], *texts: str | None) -> T:
        """`work(name, model)`, which runs no forward pass and tokenizes at most `texts`: in the light lane when the
        model is in memory and the texts are short (`is_light`), else in the model lane, where the model is loaded
        if need be (a model switch is a model call, within its client's share: `lookup`)."""
        if self.is_light(name, *texts):
            def light() -> tuple[T] | None:
                found = self.in_memory(name)
                return None if found is None else (work(*found),)

            out = await self.pool.run(light, light=True)
            if out is not None:
                return out[0]
        return await self.pool.run(lambda: work(*self.lookup(name)))


def prompt_too_long(what: str, tokens: int, limit: int) -> InputError:
    return InputError(f"the {what} is {tokens} tokens long, more than the {limit} that fit here; shorten it (this "
                      f"request does not truncate a text)", code="prompt_too_long", tokens=tokens, limit=limit)


def server_context(request: Request) -> ServerContext:
    ctx: ServerContext = request.app.state.context
    switches = request.scope.get(SWITCHES_KEY)
    return ctx if switches is None else replace(ctx, switches=switches)


Context = Annotated[ServerContext, Depends(server_context)]
