"""Collects named intermediates during one forward pass.

A recorder is created per call and passed down; modules never keep activations on `self`, so a
model can serve concurrent requests and nothing goes stale.
"""

from __future__ import annotations

from torch import Tensor


class Recorder:
    """A write-only view, under a name prefix, onto one pass's table of recorded tensors."""

    def __init__(self, values: dict[str, Tensor] | None = None, prefix: str = "") -> None:
        self.values: dict[str, Tensor] = {} if values is None else values
        self.prefix = prefix

    def scope(self, name: str) -> Recorder:
        """A recorder that writes under `prefix + name + "."`."""
        return Recorder(self.values, f"{self.prefix}{name}.")

    def __setitem__(self, name: str, value: Tensor) -> None:
        self.values[self.prefix + name] = value.detach()


def scope(rec: Recorder | None, name: str) -> Recorder | None:
    return None if rec is None else rec.scope(name)
