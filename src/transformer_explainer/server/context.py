"""What every route needs from the server, in one object: the models by name, the bounded pool
that runs them, the trace cache, and the token limit per request. Routes take it as a FastAPI
dependency (`ctx: Context`), so none reaches into the app's state, and a test can hand in its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from ..engine import ExplainerModel
from ..inputs import Resolved, resolve_input
from ..schemas import InputIn
from .pool import ModelPool
from .registry import ModelRegistry
from .service import Explainer


@dataclass(frozen=True)
class ServerContext:
    registry: ModelRegistry
    pool: ModelPool
    explainer: Explainer
    max_tokens: int | None = None  # tokens per request; None: the model's context length
    max_analysis_gflop: float | None = None  # the largest analysis a request may ask for (analysis/cost.py)

    def resolve(self, model: ExplainerModel, body: InputIn) -> Resolved:
        """The request's token ids, within the model's context and this server's limit."""
        return resolve_input(model, body, self.max_tokens)

    def is_loaded(self, name: str | None) -> bool:
        """Whether the model `name` is in memory: then a call that runs no forward pass may take the light lane."""
        return self.registry.loaded_name(name) is not None


def server_context(request: Request) -> ServerContext:
    return request.app.state.context


Context = Annotated[ServerContext, Depends(server_context)]
