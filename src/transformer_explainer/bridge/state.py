"""The per-call recorder: what one `record` call collects, reached through a context variable.

Nothing of a call lives on the model's modules or in a global: the attention function and the hooks find the
recorder of the call running in their thread (`current()`), and do nothing when there is none or it is another
call's, so two threads that record on one model at once each get their own values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

from ..errors import InputError
from .vocabulary import generic_block_name

Patch = Callable[[torch.Tensor], torch.Tensor]  # sees a value with its batch dimension, returns its replacement


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
    scales: dict[int, tuple[float, float | None]] = field(default_factory=dict)  # each attention's scale, soft cap
    leave_out: frozenset[str] = frozenset()  # stages the caller derives itself: not computed ("attn.masked_scores")
    patches: Mapping[str, Patch] = field(default_factory=dict)  # full name -> the function that replaces it
    applied: set[str] = field(default_factory=set)  # the names whose patch ran in this call
    lens: torch.Tensor | None = None  # (T, 1, D): the final norm's input instead of the last layer's output
    lens_calls: int = 0  # how often the final norm ran in a `lens` call
    lens_follows: bool = False  # whether its input was the last layer's output, as the decoder gave it

    def put(self, layer: int, suffix: str, value: torch.Tensor) -> None:
        self.values[generic_block_name(layer, suffix)] = value.detach()

    def patch(self, layer: int, suffix: str, value: torch.Tensor) -> torch.Tensor:
        """`value` (with its batch dimension) replaced by this call's patch for it, or itself where none."""
        name = generic_block_name(layer, suffix)
        fn = self.patches.get(name)
        if fn is None:
            return value
        out = fn(value)
        if not isinstance(out, torch.Tensor) or out.shape != value.shape:
            raise InputError(f"The patch of {name} must return a tensor of the shape it is given, "
                             f"{tuple(value.shape)}.")
        self.applied.add(name)
        return out.to(value.dtype)


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
