"""Collects named intermediates during one forward pass, and optionally edits them.

A recorder is created per call and passed down; modules never keep activations on `self`, so a
model can serve concurrent requests and nothing goes stale. Patches (name -> function) let an
experiment replace a value as it is computed (e.g. zero one head's `attn.z`); what is recorded is
the patched value, and everything downstream sees it. A recorder made with `store=False` only patches:
it keeps nothing, and the blocks no patch reaches take the fast path (activation patching runs many
such passes, batched).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

Patch = Callable[[Tensor], Tensor]


class Recorder:
    """A view, under a name prefix, onto one pass's table of recorded tensors and its patches."""

    def __init__(self, values: dict[str, Tensor] | None = None, prefix: str = "",
                 patches: dict[str, Patch] | None = None, *, store: bool = True) -> None:
        self.values: dict[str, Tensor] = {} if values is None else values
        self.patches: dict[str, Patch] = {} if patches is None else patches
        self.prefix = prefix
        self.store = store

    def scope(self, name: str) -> Recorder:
        """A recorder that writes under `prefix + name + "."`."""
        return Recorder(self.values, f"{self.prefix}{name}.", self.patches, store=self.store)

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
        if self.store:
            self.values[full] = value.detach()
        return value

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
