"""The server's memory of traces: a small LRU bounded in bytes, keyed by (model, token ids), and the
`Explainer` that answers a trace through it. A trace keeps each block's input and runs a block again when a view
first asks for its internals (`recompute.py`); the blocks recently run are shared by every trace in one cache of
their own, which holds what the traces leave of the budget (a quarter at least), and a trace continued from another
reads that one's blocks kept there (a view of an edited text runs its block for the new positions only). A view that
asks for one more tensor of the same text reuses the forward pass, a text being typed or edited at its end continues
the trace of its cached beginning and generating a token computes only its position (only the changed positions are
computed, from the beginning's keys and values, kept with its trace while memory allows: under pressure they go
before any trace does), a class sending the same text at once gets one pass, and nothing a client does can grow
memory without bound. What the answers hold is the domain's (`overview`, `slicing`, `inputs`); this module only
remembers."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Iterable
from concurrent.futures import Future

from ..engine import ExplainerModel
from ..overview import overview_summaries, overview_summary
from ..recompute import BlockCache, storage_nbytes
from ..trace import RowSummary, Trace, truncate_trace

# traces take at most all but one part in BLOCKS_SHARE of the budget; blocks run again take the rest, and whatever
# the traces leave unused: a class viewing a dozen texts block by block (GPT-2 small's shape, 20 tokens: 1.3 MB a
# block) asks for more blocks than a fixed quarter holds while its traces fill two thirds of theirs
BLOCKS_SHARE = 4
# a text typed on or a generated token continues a cached trace from its kept keys and values; a trace made of
# that many passes is not continued (a shorter cached beginning may be), as each view of it runs every one of its
# passes again: a block's view of a 128-token text on GPT-2 small's shape, edited at its end again and again, costs
# 36-40 ms of blocks run again made of 3 passes, 50-60 ms of 7 (what the text's next edit saves by continuing it
# with its keys and values: 70 ms)
MAX_PASSES = 8
# the newest traces keep their keys and values while those take at most one part in KV_SHARE of the trace budget:
# continuing a trace with them costs its new positions only (GPT-2 small's shape, 127 + 1 tokens: 43 ms, 107 ms
# without); older traces keep their residual streams alone, and the rest of the budget holds more of them
KV_SHARE = 4
# continuing a trace without them runs about a quarter of its beginning's products again, per pass (see below); one
# whose beginning is not worth it (its passes, the overview's rows it lacks) is traced whole (`continuation_cost`)
NO_KV_COST = 4


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
    """Whether a cached trace may be continued at all: it recomputes its blocks and is made of fewer than MAX_PASSES
    passes. Whether it is worth it is `continuation_cost`'s (with its keys and values the continuation costs the new
    positions only; without them each block of the beginning runs as far as its values: GPT-2-small shape, 126 + 2
    tokens, one thread, one pass: 57 ms with them, 129 ms without, 361 ms traced whole)."""
    return trace.blocks is not None and trace.blocks.passes < MAX_PASSES


def continuation_cost(trace: Trace, shared: int, n: int) -> float:
    """What continuing `trace`'s first `shared` positions to a text of `n` costs, in positions run through every
    block (a fresh trace of the text: n). The new positions; where the trace dropped its keys and values, each block
    of the beginning run again as far as its values (one part in NO_KV_COST of a block), in each of the trace's
    passes; where it kept no overview rows at the text's grid, each run again as far as its pattern (as much again)."""
    passes = trace.blocks.passes if trace.blocks is not None else 1
    again = 0.0 if trace.kv is not None else 1 / NO_KV_COST
    if ("blocks.0.attn.pattern", overview_summary(n)) not in trace.observations:
        again += 1 / NO_KV_COST
    return n - shared + again * shared * passes


def cheapest_beginning(candidates: list[tuple[Trace, int]], n: int) -> tuple[Trace, int] | None:
    """The cached beginning (trace, shared positions) cheapest to continue to a text of `n` positions, if one costs
    less than tracing the text whole and covers at least half of it (each view of a continuation runs each of its
    passes); among equals, the first (the newest)."""
    best, best_cost = None, float(n)
    for trace, shared in candidates:
        if 2 * shared < n:
            continue
        cost = continuation_cost(trace, shared, n)
        if cost < best_cost:
            best, best_cost = (trace, shared), cost
    return best


def shed_continuation(trace: Trace) -> None:
    """Forget what only continuing `trace` reads: its keys and values, and the overview's rows at the grids of texts
    a little longer or shorter (`overview_summaries`); its own overview's rows stay."""
    trace.drop_kv()
    own = overview_summary(trace.n_tokens)
    for key in [k for k in trace.observations if isinstance(k[1], RowSummary) and k[1] is not own]:
        del trace.observations[key]


class TraceCache:
    """LRU of recent traces, bounded by the bytes their tensors hold, each storage counted once: a trace continued
    from a cached one holds that one's residual streams, and keeping both costs those once. A trace larger than the
    whole budget (a long GPT-2 input) is simply not kept."""

    def __init__(self, max_bytes: int, max_kv_bytes: int | None = None,
                 shed: Callable[[Trace], None] = Trace.drop_kv) -> None:
        self.max_bytes = max_bytes
        self.max_kv_bytes = max_bytes // KV_SHARE if max_kv_bytes is None else max_kv_bytes
        self.shed = shed  # what an older trace forgets: its keys and values, and what else only continuing it reads
        self._items: OrderedDict[tuple[str, tuple[int, ...]], tuple[Trace, dict[Hashable, int]]] = OrderedDict()
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

    def get(self, key: tuple[str, tuple[int, ...]], *, count_miss: bool = True) -> Trace | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                self.misses += count_miss
                return None
            self.hits += 1
            self._items.move_to_end(key)
            return hit[0]

    def shared_prefixes(self, key: tuple[str, tuple[int, ...]], usable: Callable[[Trace], bool] = continuable
                        ) -> list[tuple[Trace, int]]:
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

    def put(self, key: tuple[str, tuple[int, ...]], trace: Trace) -> None:
        """Keep `trace` as the most recent. The newest traces keep their keys and values (what continuing them reads)
        while those take at most `max_kv_bytes` (by default one part in KV_SHARE of the budget), the newest trace's
        always; older traces drop
        theirs. Over the budget, the oldest traces go. A trace that alone exceeds the budget is not kept."""
        storages = trace.storages()
        if sum(storages.values()) > self.max_bytes and trace.kv is not None:
            self.shed(trace)
            storages = trace.storages()
        if sum(storages.values()) > self.max_bytes:
            return
        with self._lock:
            self._hold(storages)  # before the old entry's release: what the two share stays counted
            old = self._items.pop(key, None)
            if old is not None:
                self._release(old[1])
            self._items[key] = (trace, storages)
            kv_bytes = 0
            for k, (t, held) in reversed(self._items.items()):
                kv = t.kv
                if kv is None:
                    continue
                kv_bytes += storage_nbytes([x for pair in kv for x in pair])
                if k == key or kv_bytes <= self.max_kv_bytes:
                    continue
                self.shed(t)
                smaller = t.storages()
                self._hold(smaller)
                self._release(held)
                self._items[k] = (t, smaller)
            while self._bytes > self.max_bytes and len(self._items) > 1:
                _, (_, held) = self._items.popitem(last=False)
                self._release(held)


class Explainer:
    """The computations behind the API, with the trace cache and the cache of blocks run again. Thread-safe."""

    def __init__(self, cache_bytes: int) -> None:
        self.cache_bytes = cache_bytes
        self.cache = TraceCache(cache_bytes - cache_bytes // BLOCKS_SHARE, shed=shed_continuation)
        self.blocks = BlockCache(max_blocks=None, max_bytes=cache_bytes)
        self._inflight: dict[tuple[str, tuple[int, ...]], Future[Trace]] = {}
        self._lock = threading.Lock()

    def _fresh(self, model: ExplainerModel, ids: list[int], blocks: Collection[int]) -> Trace:
        """One pass over `ids`, keeping the keys and values and what the overview reads of every block, and handing
        the `blocks` the answer reads to the block cache."""
        return model.trace_ids(ids, keep_kv=True, observe=overview_summaries(model.config.n_layer, len(ids)),
                               block_cache=self.blocks, keep_blocks=blocks)

    def _continued(self, model: ExplainerModel, prefix: Trace, new_ids: list[int]) -> Trace:
        """`prefix` continued by `new_ids` from its kept keys and values, with what the overview reads of every
        block: the new positions' rows of each pattern, observed by the pass, after the beginning's kept rows (kept for
        texts a few tokens longer or shorter too, `overview_summaries`). Where the beginning kept none at this text's
        thumbnail grid, each block of the beginning runs as far as its pattern."""
        n = prefix.n_tokens + len(new_ids)
        trace = model.extend_trace(prefix, new_ids, keep_kv=True, block_cache=self.blocks,
                                   observe=overview_summaries(model.config.n_layer, n))
        fn = overview_summary(n)
        for i in range(model.config.n_layer):
            name = f"blocks.{i}.attn.pattern"
            if (name, fn) not in trace.observations:
                trace.observe(name, fn)
        return trace

    def _keep(self, key: tuple[str, tuple[int, ...]], trace: Trace) -> None:
        """Cache `trace`; the blocks run again keep what the traces leave of the budget."""
        self.cache.put(key, trace)
        self.blocks.resize(max(0, self.cache_bytes - self.cache.nbytes))

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
            shared = cheapest_beginning(self.cache.shared_prefixes(key), n)
            if shared is not None:
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
        self._keep(key, trace)
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
        self._keep((name, tuple(merged.token_ids)), merged)
        return merged, first
