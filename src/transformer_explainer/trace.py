"""The typed record of one forward pass: every intermediate value by name, with the tokens."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from torch import Tensor

from .config import DecoderConfig
from .names import describe
from .trace_base import TraceBase


class Values(Protocol):
    """Where a trace reads its values by name: `memo.TraceValues` (kept by the pass, or computed again on access:
    the memory engineering lives there), cut and joined as the trace is."""

    kept: dict[str, Tensor]  # what the pass kept (the rest is computed on access)

    def __getitem__(self, name: str) -> Tensor: ...
    def keeping(self, values: Mapping[str, Tensor]) -> Values: ...
    def next_token_logits(self) -> Tensor: ...
    def block(self, layer: int) -> dict[str, Tensor]: ...
    def observation(self, name: str, fn: Callable[[Tensor], Tensor]) -> Tensor: ...
    def nbytes(self) -> int: ...
    def materialized(self) -> Values: ...
    def cut(self, n: int) -> Values: ...
    def joined(self, new: Values) -> Values: ...


@dataclass(eq=False)
class Trace(TraceBase, Mapping[str, Tensor]):
    """Intermediates of one text through a decoder of any family, without the batch dimension: a mapping of names
    to tensors (`trace["blocks.0.attn.pattern"]` is (heads, query, key); `trace.get(name)`, `name in trace`,
    iteration over the names in computation order), with the tokens.

    The values come from `memory` (`memo.TraceValues`): what the pass kept, or computed again from it when first read
    (a block's internals, the stages outside the blocks, the stages cheap to derive, every position's logits), the
    same numbers as the pass's. `start` is the position of the first traced token: it is above 0 when the trace
    covers only the new positions of a generation step, whose keys and values came from a cache.
    """

    model_name: str
    config: DecoderConfig  # or `generic.GenericConfig`, for a model that runs through transformers
    text: str
    token_ids: list[int]  # the traced positions' ids
    tokens: list[str]  # their text, leading spaces kept; undecodable byte pieces escaped
    memory: Values = field(repr=False)
    start: int = 0
    prefix_ids: list[int] = field(default_factory=list)  # ids before `start`, from the cache

    describe_name = staticmethod(describe)

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.token_ids):
            raise ValueError("tokens and token_ids differ in length")

    # -- the mapping -------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Tensor:
        return self.memory[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def names(self) -> list[str]:
        """Every name this trace answers, in computation order."""
        return self.config.activation_names()

    def describe(self, name: str) -> str:
        dims, text = describe(name, self.config.family)
        return f"{name} {tuple(self[name].shape)} [{', '.join(dims)}]: {text}"

    def block(self, layer: int) -> dict[str, Tensor]:
        """Every value block `layer` records, by full name."""
        return self.memory.block(layer)

    def materialized(self) -> Trace:
        """The same trace with every block's values computed once and kept, as an eager recording holds them: for
        code that reads many stages of every block (a snapshot), at the memory of every intermediate."""
        return replace(self, memory=self.memory.materialized())

    def nbytes(self) -> int:
        """The bytes of the tensors the trace holds (each storage once), its recently run blocks aside."""
        return self.memory.nbytes()

    # -- convenience -----------------------------------------------------------------------------

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def positions(self) -> list[int]:
        return list(range(self.start, self.start + self.n_tokens))

    @property
    def logits(self) -> Tensor:
        """(T, V): the logits at every position."""
        return self["logits"]

    def next_token_logits(self) -> Tensor:
        """Logits at the last position: the model's scores for the token that comes next."""
        return self.memory.next_token_logits()

    def title(self) -> str:
        return f"Trace of {self.n_tokens} tokens through {self.model_name}"


def truncate_trace(trace: Trace, n: int) -> Trace:
    """The trace of `trace`'s first `n` tokens (0 < n <= its tokens; a trace from position 0): every
    value cut to those positions, as views. A causal model's first n positions do not depend on what
    follows, so this is what tracing those tokens alone gives; `extend_trace` continues it when a text
    is edited after its first n tokens. Its text is not known here (""); nor are its last position's
    logits as the pass computed them: they are derived on access."""
    if trace.start != 0 or not 0 < n <= trace.n_tokens:
        raise ValueError(f"cannot cut a trace of {trace.n_tokens} tokens from position {trace.start} to {n}")
    return Trace(model_name=trace.model_name, config=trace.config, text="", token_ids=trace.token_ids[:n],
                 tokens=trace.tokens[:n], memory=trace.memory.cut(n), start=0, prefix_ids=[])


def merge_traces(prefix: Trace, new: Trace) -> Trace:
    """The trace of prefix + new positions, where `new` was computed with a KV cache holding the
    prefix. Equal (up to float rounding) to tracing the whole sequence at once: the prefix's score
    rows get their entries for the new keys (computed, then hidden by the mask: pattern 0)."""
    if new.start != prefix.n_tokens + prefix.start or prefix.start != 0:
        raise ValueError("the new trace must continue the prefix trace")
    return Trace(model_name=prefix.model_name, config=prefix.config, text=new.text,
                 token_ids=prefix.token_ids + new.token_ids, tokens=prefix.tokens + new.tokens,
                 memory=prefix.memory.joined(new.memory), start=0, prefix_ids=[])


def with_text(trace: Trace, text: str | None) -> Trace:
    """`trace` read as the trace of `text` (the text that gave its ids, when the caller has it; None: as it is)."""
    return trace if text is None else replace(trace, text=text)
