"""What every trace answers, whatever the architecture: a value by name, the names in computation
order, their shapes and descriptions, and a summary. The GPT trace (`trace.Trace`) and the
encoder-decoder's (`seq2seq.trace.Seq2SeqTrace`) say how to find a value; this says the rest."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import Tensor


class TraceBase:
    """By-name access to the intermediate values of one forward pass."""

    # the name scheme's `describe`: (dims, text) of a name
    describe_name: Callable[[str], tuple[tuple[str, ...], str]]

    def __getitem__(self, name: str) -> Tensor:
        raise NotImplementedError

    def names(self) -> list[str]:
        """Every name this trace answers, in computation order."""
        raise NotImplementedError

    def title(self) -> str:
        """The summary's first line: what was traced."""
        raise NotImplementedError

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: tuple(self[n].shape) for n in self.names()}

    def describe(self, name: str) -> str:
        dims, text = type(self).describe_name(name)
        return f"{name} {tuple(self[name].shape)} [{', '.join(dims)}]: {text}"

    def items(self) -> Iterator[tuple[str, Tensor]]:
        for n in self.names():
            yield n, self[n]

    def to_numpy(self, names: list[str] | None = None) -> dict[str, np.ndarray]:
        """Plain float32 arrays by name, for serialisation (`np.savez`, JSON)."""
        return {n: self[n].to(torch.float32).cpu().numpy() for n in (names or self.names())}

    def summary(self) -> str:
        return "\n".join([self.title()] + [self.describe(n) for n in self.names()])
