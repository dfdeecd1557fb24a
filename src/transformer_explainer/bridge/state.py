"""The per-call recorder: what one `record` call collects, reached through a context variable.

Nothing of a call lives on the model's modules or in a global: the attention function and the hooks find the
recorder of the call running in their thread (`current()`), and do nothing when there is none or it is another
call's, so two threads that record on one model at once each get their own values.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

from .vocabulary import generic_block_name


@dataclass
class Call:
    """One call of a decoder layer's direct child module: its attribute name, first input and output tensor."""

    name: str
    input: torch.Tensor | None
    output: torch.Tensor | None = None


@dataclass
class Recorder:
    """The values of one call (batch dimension dropped), and the calls of each layer's children in order."""

    owner: int  # id() of the model this call records
    layer_of: dict[int, int]  # id(module) -> the index of the decoder layer it belongs to
    values: dict[str, torch.Tensor] = field(default_factory=dict)
    calls: dict[int, list[Call]] = field(default_factory=dict)
    windows: dict[int, int | None] = field(default_factory=dict)

    def put(self, layer: int, suffix: str, value: torch.Tensor) -> None:
        self.values[generic_block_name(layer, suffix)] = value.detach()


_CURRENT: ContextVar[Recorder | None] = ContextVar("transformer_explainer_bridge_recorder", default=None)


def current() -> Recorder | None:
    """The recorder of the call running in this context, or None."""
    return _CURRENT.get()


@contextmanager
def active(recorder: Recorder) -> Iterator[Recorder]:
    """Make `recorder` the current one for the duration of the block (this thread/context only)."""
    token = _CURRENT.set(recorder)
    try:
        yield recorder
    finally:
        _CURRENT.reset(token)
