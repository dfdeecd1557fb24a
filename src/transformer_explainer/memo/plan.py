"""What a traced pass keeps, and where (`Memory`), and the recording that follows that plan (`PassMemory`): which
recorded values a pass keeps, in what storage, and the recipe that computes the rest again (`recipes.py`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from torch import Tensor

from ..models.decoder import Decoder
from ..models.recorder import Patch, Recorder
from ..names import block_name, layer_of
from .block_cache import BlockCache, packed, storage_sizes
from .recipes import OUTSIDE, BlockSource, Past, RecordedPass, outside_part
from .summaries import Observe, Summary, keep_summary
from .values import TraceValues


@dataclass(frozen=True)
class Memory:
    """What a traced pass keeps beyond each block's input and the last block's output (the default keeps only those,
    and computes a block's internals again when they are first read).

    `eager` keeps every intermediate instead (the reference for that recomputation, at the memory of every value).
    `keep_kv` keeps each block's keys and values, so that `extend_trace` continues the trace without running its
    blocks again. `observe` (name -> function of that value, or several) keeps each function's result as the pass
    computes the value (`TraceValues.observation`), so that a small summary of a block's value costs no
    recomputation. `block_cache`: where recomputed blocks are kept (default: two per trace; a server shares one among
    its traces). `keep_blocks`: blocks whose values the pass hands to the block cache as it records them (those a
    view is about to read)."""

    eager: bool = False
    keep_kv: bool = False
    observe: Observe | None = None
    block_cache: BlockCache | None = None
    keep_blocks: Collection[int] = ()


EAGER = Memory(eager=True)  # every intermediate kept: what a trace without recomputation holds


class PassMemory:
    """One pass's recording under a `Memory` plan: the recorder to run the pass with (`recorder`), then what it
    recorded turned into a trace's values (`values`). `start`: the pass's first position; `past`: where its blocks
    find the keys and values of the positions before it (None from position 0)."""

    def __init__(self, net: Decoder, memory: Memory, patches: Mapping[str, Patch] | None, past: Past | None,
                 start: int) -> None:
        self.net, self.memory, self.patches, self.past, self.start = net, memory, dict(patches or {}), past, start
        L = net.config.n_layer
        self.inputs = [block_name(i, "resid_pre") for i in range(L)]
        self.kv_names = [(block_name(i, net.cached_keys), block_name(i, "attn.v")) for i in range(L)]
        self.kept = {*self.inputs, block_name(L - 1, "resid_post"),
                     *(n for pair in self.kv_names if memory.keep_kv for n in pair)}
        # each name's functions of its value
        self.wanted: dict[str, tuple[Summary, ...]] = {
            n: (f,) if callable(f) else tuple(f) for n, f in (memory.observe or {}).items()}
        self.handing = sorted({i for i in memory.keep_blocks if 0 <= i < L})
        # the stages outside the blocks are computed again on access (`recipes.outside_values`), unless a pass of
        # the trace patched them (the beginning's, when it continues one whose stages are kept)
        self.outside = {p for p in OUTSIDE if any(outside_part(k) == p for k in self.patches)
                        or (isinstance(past, BlockSource) and past.patched_under(p + "."))}

    def keep(self, name: str) -> bool:
        """Whether the pass keeps the value `name` as it records it."""
        layer = layer_of(name)
        if layer is not None:
            return name in self.kept or layer in self.handing
        part = outside_part(name)
        return part is None or part in self.outside

    def recorder(self) -> Recorder:
        """The recorder to run the pass with: it applies the patches, keeps what the plan keeps and observes what it
        observes (the batch dimension dropped)."""
        observers = {n: (lambda v, fs=fs: tuple(keep_summary(f, f(v[0]), self.start) for f in fs))
                     for n, fs in self.wanted.items()}
        return Recorder(patches=self.patches, observers=observers, keep=None if self.memory.eager else self.keep)

    def values(self, rec: Recorder, ids: list[int], unembed: Tensor, last: Tensor) -> TraceValues:
        """What the pass run with `rec` over `ids` recorded, as a trace's values: kept in one storage (the keys and
        values in one of their own, to be dropped alone), with the recipe of the rest; the blocks the plan hands
        over are in the block cache. `last`: the last position's logits (V,)."""
        eager, L = self.memory.eager, self.net.config.n_layer
        values = {k: v[0] for k, v in rec.values.items()}  # drop the batch dimension
        handed = {} if eager else {i: {k: v for k, v in values.items() if layer_of(k) == i} for i in self.handing}
        blocks = kv = None
        if self.memory.keep_kv:
            kv = [(values[k], values[v]) if eager else (values.pop(k), values.pop(v)) for k, v in self.kv_names]
        if not eager:
            values = packed({k: v for k, v in values.items() if layer_of(k) is None or k in self.kept})
            flat_kv = [t for pair in kv or [] for t in pair]
            # (a cache with room for the pass, `KVCache.with_room`, holds them in one piece already: kept as they are)
            if kv is not None and len(storage_sizes(flat_kv)) > len({(t.device, t.dtype) for t in flat_kv}):
                flat = packed({str(i): t for i, t in enumerate(flat_kv)})
                kv = [(flat[str(2 * i)], flat[str(2 * i + 1)]) for i in range(L)]
            blocks = RecordedPass(self.net, tuple(values.pop(n) for n in self.inputs), self.start, self.patches,
                                  self.past)
        block_cache = self.memory.block_cache
        out = TraceValues(config=self.net.config, token_ids=list(ids), start=self.start, kept=values,
                          unembed=unembed, last_logits=last, blocks=blocks, kv=kv,
                          block_cache=BlockCache() if block_cache is None else block_cache,
                          observations={(n, f): o for n, fs in self.wanted.items() if n in rec.observed
                                        for f, o in zip(fs, rec.observed[n], strict=True)})
        for i, block in handed.items():
            out.keep_block(i, block)
        return out
