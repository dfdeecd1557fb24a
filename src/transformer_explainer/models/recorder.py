"""Collects named intermediates during one forward pass, and optionally edits them.

A recorder is created per call and passed down; modules never keep activations on `self`, so a
model can serve concurrent requests and nothing goes stale. Patches (name -> function) let an
experiment replace a value as it is computed (e.g. zero one head's `attn.z`); what is recorded is
the patched value, and everything downstream sees it. A recorder made with `store=False` only patches:
it keeps nothing, and the blocks no patch reaches take the fast path (activation patching runs many
such passes, batched).

A recorder that stores takes the recorded path everywhere, but it may keep only some names (`keep`): a
trace keeps each block's input and recomputes the block's internals when they are asked for
(`memo/recipes.py`). Observers (name -> function) see a value as it is recorded and keep what they return
(`observed`), e.g. a small summary of a value the recorder does not keep. A recorder made with `stop_after` ends the
pass once it has recorded that name (`run`): a block run again only as far as the stage a view reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor

Patch = Callable[[Tensor], Tensor]
Observer = Callable[[Tensor], Any]  # what it returns is kept as is (a tensor, or several)


class StopRecording(Exception):  # noqa: N818 (not an error: the value asked for is recorded, the pass goes no further)
    """Raised by a recorder made with `stop_after` once it has recorded that name; `Recorder.run` catches it."""


class Recorder:
    """A view, under a name prefix, onto one pass's table of recorded tensors and its patches."""

    def __init__(self, values: dict[str, Tensor] | None = None, prefix: str = "",
                 patches: Mapping[str, Patch] | None = None, *, store: bool = True,
                 keep: Callable[[str], bool] | None = None, observers: Mapping[str, Observer] | None = None,
                 observed: dict[str, Any] | None = None, stop_after: str | None = None) -> None:
        self.values: dict[str, Tensor] = {} if values is None else values
        self.patches: Mapping[str, Patch] = {} if patches is None else patches
        self.prefix = prefix
        self.store = store
        self.keep = keep  # which full names to store (None: every one)
        self.observers: Mapping[str, Observer] = {} if observers is None else observers
        self.observed: dict[str, Any] = {} if observed is None else observed
        self.stop_after = stop_after  # the full name after whose recording the pass ends (None: it runs to its end)

    def scope(self, name: str) -> Recorder:
        """A recorder that writes under `prefix + name + "."`."""
        return Recorder(self.values, f"{self.prefix}{name}.", self.patches, store=self.store, keep=self.keep,
                        observers=self.observers, observed=self.observed, stop_after=self.stop_after)

    def reaches(self, name: str) -> bool:
        """Whether this recorder does anything under `prefix + name + "."`: it stores, or a patch is there."""
        inner = f"{self.prefix}{name}."
        return self.store or any(k.startswith(inner) for k in self.patches)

    def __call__(self, name: str, value: Tensor) -> Tensor:
        """Record `value` under `name`, after applying the patch registered for it, if any; the
        caller continues with the returned tensor."""
        full = self.prefix + name
        patch = self.patches.get(full)
        if patch is not None:
            value = patch(value)
        if self.store and (self.keep is None or self.keep(full)):
            self.values[full] = value.detach()
        observer = self.observers.get(full)
        if observer is not None:
            self.observed[full] = observer(value.detach())
        if full == self.stop_after:
            raise StopRecording
        return value

    def run(self, forward: Callable[[], Any]) -> None:
        """Run a pass recorded by this recorder: to its end, or until `stop_after` is recorded."""
        try:
            forward()
        except StopRecording:
            pass

    def records(self, name: str) -> bool:
        """Whether a value recorded under `name` is kept, observed or patched: when it is none of these, the caller
        may skip what only the record needs (a full pattern where the pass computes it in blocks)."""
        full = self.prefix + name
        return (full in self.patches or full in self.observers
                or (self.store and (self.keep is None or self.keep(full))))

    def wants(self, name: str) -> bool:
        """True if a patch is registered for `name` under this prefix."""
        return self.prefix + name in self.patches

    def derived(self, name: str, value: Tensor) -> Tensor:
        """For a value the trace can recompute from others (so it is not stored): apply and record
        a patch if one is registered for it, else pass the value through untouched."""
        return self(name, value) if self.prefix + name in self.patches else value


def scope(rec: Recorder | None, name: str) -> Recorder | None:
    """The recorder for a part of the model (a block, the final norm), or None when it has nothing to do there:
    the part then takes its fast path."""
    return rec.scope(name) if rec is not None and rec.reaches(name) else None
