"""The server's memory of traces: `TraceStore`, the one thing the server asks for a trace. It keeps a small LRU of
traces bounded in bytes (`TraceCache`), keyed by (model, token ids), beside the cache of blocks run again. A trace
keeps each block's input and runs a block again when a view first asks for its internals (`recipes.py`); the blocks
recently run are shared by every trace in one cache of their own, which holds what the traces leave of the budget (a
quarter at least), and a trace continued from another reads that one's blocks kept there (a view of an edited text
runs its block for the new positions only). A view that asks for one more tensor of the same text reuses the forward
pass, a text being typed or edited at its end continues the trace of its cached beginning and generating a token
computes only its position (only the changed positions are computed, from the beginning's keys and values, kept with
its trace while memory allows: under pressure they go before any trace does), a class sending the same text at once
gets one pass, and nothing a client does can grow memory without bound. What the answers hold is the domain's
(`overview`, `slicing`, `inputs`); this module only remembers."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future
from typing import Protocol

from ..config import DecoderConfig
from ..names import block_name, layer_of
from ..trace import Trace, truncate_trace
from .block_cache import BlockCache, storage_nbytes
from .costs import (
    BLOCKS_SHARE,
    KV_SHARE,
    MAX_PASSES,
    NO_KV_COST,
    cheapest_beginning,
    continuable,
    drop_kv,
    shared_length,
    shed_continuation,
    values_of,
)
from .plan import Memory
from .recipes import Merged, flattened
from .summaries import overview_summaries, overview_summary
from .values import TraceValues

Key = tuple[str, tuple[int, ...]]  # (the model's name, the token ids)


class Tracer(Protocol):
    """What the store asks of a model: its configuration, a trace of ids, a trace continued (`ExplainerModel`)."""

    @property
    def config(self) -> DecoderConfig: ...
    def trace_ids(self, ids: list[int], *, memory: Memory | None = None) -> Trace: ...
    def extend_trace(self, prefix: Trace, new_ids: list[int], *, memory: Memory | None = None) -> Trace: ...


def trace_nbytes(trace: Trace) -> int:
    return trace.nbytes()


def blocks_named(names: Iterable[str]) -> set[int]:
    """The blocks that activation names such as `blocks.3.attn.pattern` belong to (others are ignored: the slicing
    refuses them in a sentence)."""
    return {layer for name in names if (layer := layer_of(name)) is not None}


class TraceCache:
    """LRU of recent traces, bounded by the bytes their tensors hold, each storage counted once: a trace continued
    from a cached one holds that one's residual streams, and keeping both costs those once. A trace larger than the
    whole budget (a long GPT-2 input) is simply not kept."""

    def __init__(self, max_bytes: int, max_kv_bytes: int | None = None,
                 shed: Callable[[Trace], None] = drop_kv) -> None:
        self.max_bytes = max_bytes
        self.max_kv_bytes = max_bytes // KV_SHARE if max_kv_bytes is None else max_kv_bytes
        self.shed = shed  # what an older trace forgets: its keys and values, and what else only continuing it reads
        self._items: OrderedDict[Key, tuple[Trace, dict[Hashable, int]]] = OrderedDict()
        self._refs: dict[Hashable, list[int]] = {}  # storage -> [how many cached traces hold it, its bytes]
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def _hold(self, storages: dict[Hashable, int]) -> None:
        for key, size in storages.items():
            ref = self._refs.get(key)
            if ref is None:
                self._refs[key] = [1, size]
                self._bytes += size
            else:
                ref[0] += 1
                if size > ref[1]:
                    self._bytes += size - ref[1]
                    ref[1] = size

    def _release(self, storages: dict[Hashable, int]) -> None:
        for key in storages:
            ref = self._refs[key]
            ref[0] -= 1
            if not ref[0]:
                del self._refs[key]
                self._bytes -= ref[1]

    def get(self, key: Key, *, count_miss: bool = True) -> Trace | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                self.misses += count_miss
                return None
            self.hits += 1
            self._items.move_to_end(key)
            return hit[0]

    def shared_prefixes(self, key: Key, usable: Callable[[Trace], bool] = continuable) -> list[tuple[Trace, int]]:
        """The cached traces (same model, `usable`) that share a beginning with `key`'s ids, the newest first, each with
        how many ids they share (fewer than `key` has): a text being typed grows or changes at its end, so its previous
        trace usually covers most of it."""
        name, ids = key
        out = []
        with self._lock:
            for (m, k), (trace, _) in reversed(self._items.items()):
                if m != name or not usable(trace):
                    continue
                shared = shared_length(k, ids)
                if shared == len(ids):  # the same ids (a hit), or a longer text: keep only proper beginnings
                    shared -= 1
                if shared > 0:
                    out.append((trace, shared))
        return out

    def stats(self) -> dict[str, int | float]:
        return {"traces": len(self._items), "mb": round(self._bytes / 2**20, 1), "max_mb": self.max_bytes // 2**20,
                "hits": self.hits, "misses": self.misses}

    def _kv_before_traces(self, key: Key, trace: Trace) -> bool:
        """Over the budget with the newest `trace`'s keys and values kept: whether they go rather than the oldest
        traces that would make room. They go when tracing those traces again (the positions they do not share with
        the newest) would cost more than continuing the newest without them (`NO_KV_COST`: a quarter of its
        beginning's positions), so that several long texts edited in turn each continue from their kept block inputs
        rather than the newest continuing fast and the others being traced whole (3 texts of 1,000 tokens in turn,
        GPT-2-small shape: 3.0 s -> 0.57 s an edit, benchmarks/long_text_edits.py); one text's earlier versions, or
        a class's short texts beside a long one being typed, go instead (issue 40)."""
        over, freed, lost = self._bytes - self.max_bytes, 0, 0
        for k, (t, held) in self._items.items():  # the oldest first
            if freed >= over or k == key:
                break
            freed += sum(size for storage, size in held.items() if self._refs[storage][0] == 1)  # its own storages
            # what tracing it again would cost: the positions the newest does not share (an earlier version of the
            # text being edited costs its last few positions, continued from the newest's beginning)
            lost += t.n_tokens - shared_length(k[1], key[1])
        return lost * NO_KV_COST > trace.n_tokens

    def _shed(self, key: Key) -> None:
        """`key`'s trace forgets what only continuing it reads (`shed`), its storages counted again."""
        t, held = self._items[key]
        self.shed(t)
        smaller = values_of(t).storages()
        self._hold(smaller)
        self._release(held)
        self._items[key] = (t, smaller)

    def _supersede(self, key: Key) -> None:
        """The newest (`key`) takes the place of the older traces it edits: earlier versions of the text being edited,
        which it does not contain whole (it changed their end) and which tracing again from it costs less than
        continuing them without their keys and values would. The latest of them stays, for a text changed back (a
        learner comparing two endings), without its keys and values (the text's next edit continues the newest); the
        others go, so that they do not take the memory of the blocks the views run (three 1,000-token texts edited in
        turn on GPT-2 small's shape filled the traces' share with earlier versions, 12 MB apiece, and every view ran
        its block over every position). A text that only grew keeps its beginning: another learner may read it."""
        name, ids = key
        edited = []
        for k, (t, _) in list(self._items.items())[:-1]:  # the oldest first
            if k[0] != name:
                continue
            lost = t.n_tokens - shared_length(k[1], ids)
            if 0 < lost and lost * NO_KV_COST < t.n_tokens:
                edited.append(k)
        for k in edited[:-1]:
            self._pop(k)
        if edited and values_of(self._items[edited[-1]][0]).kv is not None:
            self._shed(edited[-1])

    def _pop(self, key: Key) -> None:
        _, held = self._items.pop(key)
        self._release(held)

    def put(self, key: Key, trace: Trace) -> None:
        """Keep `trace` as the most recent, in place of the earlier versions of its text it edits (`_supersede`).
        While the budget holds them, every trace keeps its keys and values (what continuing it reads: three texts of
        1,000 tokens on GPT-2 small's shape edited in turn each continue from theirs where the budget holds the three).
        Over the budget, in turn: the keys and values of the traces beyond the newest that take more than one part in
        KV_SHARE of the budget (the oldest first); the newest trace's own, where they cost less than the older traces
        they would evict (`_kv_before_traces`); then the oldest traces. A trace that alone exceeds the budget is not
        kept."""
        values = values_of(trace)
        storages = values.storages()
        if sum(storages.values()) > self.max_bytes and values.kv is not None:
            self.shed(trace)
            storages = values.storages()
        if sum(storages.values()) > self.max_bytes:
            return
        with self._lock:
            self._hold(storages)  # before the old entry's release: what the two share stays counted
            old = self._items.pop(key, None)
            if old is not None:
                self._release(old[1])
            self._items[key] = (trace, storages)
            self._supersede(key)
            kv_bytes, beyond = 0, []
            for k, (t, _) in reversed(self._items.items()):
                kv = values_of(t).kv
                if kv is None:
                    continue
                kv_bytes += storage_nbytes([x for pair in kv for x in pair])
                if k != key and kv_bytes > self.max_kv_bytes:
                    beyond.append(k)
            for k in reversed(beyond):  # the oldest first
                if self._bytes <= self.max_bytes:
                    break
                self._shed(k)
            if self._bytes > self.max_bytes and values.kv is not None and self._kv_before_traces(key, trace):
                self._shed(key)
            while self._bytes > self.max_bytes and len(self._items) > 1:
                self._pop(next(iter(self._items)))


class TraceStore:
    """The traces behind the API, within `cache_bytes`: the trace cache and the cache of blocks run again, what each
    pass keeps and whether a text continues a cached beginning. The server asks `get`, `extend` and `cached`, naming
    the activations its answer reads (`wanting`); it decides nothing about keeping. Thread-safe."""

    def __init__(self, cache_bytes: int) -> None:
        self.cache_bytes = cache_bytes
        self.cache = TraceCache(cache_bytes - cache_bytes // BLOCKS_SHARE, shed=shed_continuation)
        self.blocks = BlockCache(max_blocks=None, max_bytes=cache_bytes)
        self._inflight: dict[Key, Future[Trace]] = {}
        self._lock = threading.Lock()

    def _fresh(self, model: Tracer, ids: list[int], wanting: Iterable[str]) -> Trace:
        """One pass over `ids`, keeping the keys and values and what the overview reads of every block, and handing
        the blocks of the activations the answer reads (`wanting`) to the block cache."""
        return model.trace_ids(ids, memory=Memory(keep_kv=True,
                                                  observe=overview_summaries(model.config.n_layer, len(ids)),
                                                  block_cache=self.blocks, keep_blocks=blocks_named(wanting)))

    def _continued(self, model: Tracer, prefix: Trace, new_ids: list[int]) -> Trace:
        """`prefix` continued by `new_ids` from its kept keys and values, with what the overview reads of every
        block: the new positions' rows of each pattern, observed by the pass, after the beginning's kept rows (kept for
        texts a few tokens longer or shorter too, `overview_summaries`). Where the beginning kept none at this text's
        thumbnail grid, each block of the beginning runs as far as its pattern."""
        n = prefix.n_tokens + len(new_ids)
        trace = model.extend_trace(prefix, new_ids, memory=Memory(
            keep_kv=True, block_cache=self.blocks, observe=overview_summaries(model.config.n_layer, n)))
        fn, values = overview_summary(n), values_of(trace)
        for i in range(model.config.n_layer):
            name = block_name(i, "attn.pattern")
            if (name, fn) not in values.observations:
                values.observe(name, fn)
        if values.blocks is not None and values.blocks.passes >= MAX_PASSES:
            self._one_pass(values)
        return trace

    def _one_pass(self, values: TraceValues) -> None:
        """A continued trace's chain of passes, too long to continue again (each view runs every pass), made one pass
        (`recipes.flattened`), so that the next edit continues it rather than tracing the text whole (1,000 tokens on
        GPT-2 small's shape: one edit in MAX_PASSES took 1.8 s of forward, issue 40). The blocks whose beginning the
        block cache keeps (those a view just read) are run now, for the new positions only, and kept for the one pass:
        its next view reads them, as it would have the chain's, rather than running them over every position."""
        chain = values.blocks
        flat = None if chain is None else flattened(chain)
        if flat is None:
            return
        begun = chain.prefix if isinstance(chain, Merged) else None
        ready = {i: chain.block(i, None, self.blocks) for i in range(values.config.n_layer)
                 if begun is not None and begun.kept(i, self.blocks)}
        values.blocks = flat
        for i, block in ready.items():
            values.keep_block(i, block)

    def _keep(self, key: Key, trace: Trace) -> None:
        """Cache `trace`; the blocks run again keep what the traces leave of the budget."""
        self.cache.put(key, trace)
        self.blocks.resize(max(0, self.cache_bytes - self.cache.nbytes))

    def cached(self, name: str, ids: list[int], *, count_miss: bool = True) -> Trace | None:
        """The trace of `ids` by the model called `name` if it is in memory (no forward pass)."""
        return self.cache.get((name, tuple(ids)), count_miss=count_miss)

    def stats(self) -> dict[str, int | float]:
        return self.cache.stats()

    def get(self, name: str, model: Tracer, ids: list[int], *, wanting: Iterable[str] = ()
            ) -> tuple[Trace, list[int]]:
        """The full trace of `ids` by `model`, called `name`, and the positions computed for it
        ([n, n] when it came from the cache or from the same request of another client at the same
        time, [p, n] when the trace of the first p tokens was cached and only the rest computed).
        `wanting`: the activations the answer reads (a pass over every position keeps their blocks as it records)."""
        key = (name, tuple(ids))
        n = len(ids)
        hit = self.cache.get(key)
        if hit is not None:
            return hit, [n, n]
        with self._lock:  # a class typing the same example text: compute it once
            pending = self._inflight.get(key)
            if pending is None:
                mine = self._inflight[key] = Future()
        if pending is not None:  # computed by another worker thread right now: it only has to finish
            return pending.result(), [n, n]
        try:
            shared = cheapest_beginning(self.cache.shared_prefixes(key), n)
            if shared is not None:
                prefix, p = shared
                trace = self._continued(model, prefix if p == prefix.n_tokens else truncate_trace(prefix, p), ids[p:])
                computed = [p, n]
            else:
                trace, computed = self._fresh(model, ids, wanting), [0, n]
            mine.set_result(trace)
        except BaseException as e:
            mine.set_exception(e)
            raise
        finally:
            with self._lock:
                del self._inflight[key]
        self._keep(key, trace)
        return trace, computed

    def extend(self, name: str, model: Tracer, prefix: Trace, token_id: int, *, cached: bool = True,
               wanting: Iterable[str] = ()) -> tuple[Trace, int]:
        """Trace one more token, and the first position computed for it: only the new one when the prefix came from
        the cache (`cached`) and can be continued (`continuable`); else all of them, in one pass (a prefix computed
        just now: its pass is counted already)."""
        if cached and continuable(prefix):
            merged, first = self._continued(model, prefix, [token_id]), prefix.n_tokens
        else:
            merged, first = self._fresh(model, [*prefix.token_ids, token_id], wanting), 0
        self._keep((name, tuple(merged.token_ids)), merged)
        return merged, first
