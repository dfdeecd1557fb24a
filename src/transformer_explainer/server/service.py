"""The server's memory of traces: a small LRU bounded in bytes, keyed by (model, token ids), and the
`Explainer` that answers a trace through it. A trace keeps each block's input and runs a block again when a view
first asks for its internals (`recompute.py`); the blocks recently run are shared by every trace in one cache of
their own, a quarter of the budget. A view that asks for one more tensor of the same text reuses the forward pass,
a text being typed or edited at its end continues the trace of its cached beginning and generating a token
computes only its position (only the changed positions are computed, from the beginning's keys and values, kept
with its trace while memory allows: under pressure they go before any trace does), a class sending the same text
at once gets one pass, and nothing a client does can grow memory without bound. What the answers hold is the
domain's (`overview`, `slicing`, `inputs`); this module only remembers."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import Future

from ..engine import ExplainerModel
from ..overview import overview_summaries
from ..recompute import BlockCache
from ..trace import Trace, truncate_trace

BLOCKS_SHARE = 4  # one part in BLOCKS_SHARE of the budget keeps blocks run again, the rest keeps traces
# a text typed on or a generated token continues a cached trace from its kept keys and values; a trace made of
# that many passes is traced again whole instead, as each view of it runs every one of its passes again
MAX_PASSES = 4


def trace_nbytes(trace: Trace) -> int:
    return trace.nbytes()


def blocks_named(names: Iterable[str]) -> set[int]:
    """The blocks that activation names such as `blocks.3.attn.pattern` belong to (others are ignored: the slicing
    refuses them in a sentence)."""
    out = set()
    for name in names:
        parts = name.split(".", 2)
        if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit():
            out.add(int(parts[1]))
    return out


def shared_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """How many ids `a` and `b` have in common at their beginning."""
    n = 0
    for x, y in zip(a, b, strict=False):  # up to the shorter
        if x != y:
            break
        n += 1
    return n


def continuable(trace: Trace) -> bool:
    """Whether a trace is worth continuing rather than tracing its text whole: it is made of fewer than MAX_PASSES
    passes. Its kept keys and values make the continuation cost the new positions only; without them (the cache
    drops them first) each block of the beginning runs as far as its values, about a quarter of its products
    (GPT-2-small shape, 126 + 2 tokens, one thread: 57 ms with them, 129 ms without, 361 ms traced whole)."""
    return trace.blocks is not None and trace.blocks.passes < MAX_PASSES


class TraceCache:
    """LRU of recent traces, bounded by the bytes their tensors hold. A trace larger than the whole
    budget (a long GPT-2 input) is simply not kept."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, tuple[int, ...]], tuple[Trace, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple[str, tuple[int, ...]], *, count_miss: bool = True) -> Trace | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                self.misses += count_miss
                return None
            self.hits += 1
            self._items.move_to_end(key)
            return hit[0]

    def longest_shared_prefix(self, key: tuple[str, tuple[int, ...]], usable: Callable[[Trace], bool] = continuable
                              ) -> tuple[Trace, int] | None:
        """The cached trace (same model, `usable`) whose ids share the longest beginning with `key`'s, and how
        many ids they share (fewer than `key` has), if any shares one: a text being typed grows or
        changes at its end, so its previous trace usually covers most of it."""
        name, ids = key
        with self._lock:
            best: tuple[Trace, int] | None = None
            for (m, k), (trace, _) in self._items.items():
                if m != name or not usable(trace):
                    continue
                shared = shared_length(k, ids)
                if shared == len(ids):  # the same ids (a hit), or a longer text: keep only proper beginnings
                    shared -= 1
                if shared > 0 and (best is None or shared > best[1]):
                    best = (trace, shared)
            return best

    def stats(self) -> dict[str, int | float]:
        return {"traces": len(self._items), "mb": round(self._bytes / 2**20, 1), "max_mb": self.max_bytes // 2**20,
                "hits": self.hits, "misses": self.misses}

    def put(self, key: tuple[str, tuple[int, ...]], trace: Trace) -> None:
        """Keep `trace` as the most recent. Over the budget, the older traces' keys and values go first (oldest
        first), then the oldest traces; a trace that alone exceeds the budget is not kept."""
        size = trace_nbytes(trace)
        if size > self.max_bytes and trace.kv is not None:
            trace.drop_kv()
            size = trace_nbytes(trace)
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._items:
                self._bytes -= self._items.pop(key)[1]
            self._items[key] = (trace, size)
            self._bytes += size
            for k, (t, n) in list(self._items.items())[:-1]:
                if self._bytes <= self.max_bytes:
                    break
                if t.kv is not None:
                    t.drop_kv()
                    smaller = trace_nbytes(t)
                    self._items[k] = (t, smaller)
                    self._bytes += smaller - n
            while self._bytes > self.max_bytes:
                _, (_, n) = self._items.popitem(last=False)
                self._bytes -= n


class Explainer:
    """The computations behind the API, with the trace cache and the cache of blocks run again. Thread-safe."""

    def __init__(self, cache_bytes: int) -> None:
        blocks = cache_bytes // BLOCKS_SHARE
        self.cache = TraceCache(cache_bytes - blocks)
        self.blocks = BlockCache(max_blocks=None, max_bytes=blocks)
        self._inflight: dict[tuple[str, tuple[int, ...]], Future[Trace]] = {}
        self._lock = threading.Lock()

    def _fresh(self, model: ExplainerModel, ids: list[int], blocks: Collection[int]) -> Trace:
        """One pass over `ids`, keeping the keys and values and what the overview reads of every block, and handing
        the `blocks` the answer reads to the block cache."""
        return model.trace_ids(ids, keep_kv=True, observe=overview_summaries(model.config.n_layer, len(ids)),
                               block_cache=self.blocks, keep_blocks=blocks)

    def _continued(self, model: ExplainerModel, prefix: Trace, new_ids: list[int]) -> Trace:
        """`prefix` continued by `new_ids` from its kept keys and values, with what the overview reads of every
        block: the new positions' rows of each pattern, observed by the pass, after the beginning's kept rows. Where
        the beginning kept none at this text's thumbnail grid (its cells held fewer positions), each block of the
        beginning runs as far as its pattern."""
        summaries = overview_summaries(model.config.n_layer, prefix.n_tokens + len(new_ids))
        trace = model.extend_trace(prefix, new_ids, keep_kv=True, block_cache=self.blocks, observe=summaries)
        for name, fn in summaries.items():
            if (name, fn) not in trace.observations:
                trace.observe(name, fn)
        return trace

    def trace(self, name: str, model: ExplainerModel, ids: list[int], *, blocks: Collection[int] = ()
              ) -> tuple[Trace, list[int]]:
        """The full trace of `ids` by the model called `name`, and the positions computed for it
        ([n, n] when it came from the cache or from the same request of another client at the same
        time, [p, n] when the trace of the first p tokens was cached and only the rest computed).
        `blocks`: those whose values the answer reads (a pass over every position keeps them as it records)."""
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
            shared = self.cache.longest_shared_prefix(key)
            # continuing a trace computes only the positions after the shared ones, then runs every block of the
            # shared ones as far as its pattern for the overview: worth it when they are at least half the text
            if shared is not None and 2 * shared[1] >= n:
                prefix, p = shared
                trace = self._continued(model, prefix if p == prefix.n_tokens else truncate_trace(prefix, p), ids[p:])
                computed = [p, n]
            else:
                trace, computed = self._fresh(model, ids, blocks), [0, n]
            mine.set_result(trace)
        except BaseException as e:
            mine.set_exception(e)
            raise
        finally:
            with self._lock:
                del self._inflight[key]
        self.cache.put(key, trace)
        return trace, computed

    def extend(self, name: str, model: ExplainerModel, prefix: Trace, token_id: int, *, cached: bool = True,
               blocks: Collection[int] = ()) -> tuple[Trace, int]:
        """Trace one more token, and the first position computed for it: only the new one when the prefix came from
        the cache (`cached`) and can be continued (`continuable`); else all of them, in one pass (a prefix computed
        just now: its pass is counted already)."""
        if cached and continuable(prefix):
            merged, first = self._continued(model, prefix, [token_id]), prefix.n_tokens
        else:
            merged, first = self._fresh(model, [*prefix.token_ids, token_id], blocks), 0
        self.cache.put((name, tuple(merged.token_ids)), merged)
        return merged, first
