"""The server's memory of traces: a small LRU bounded in bytes, keyed by (model, token ids), and the
`Explainer` that answers a trace through it. A trace keeps each block's input and runs a block again when a view
first asks for its internals (`recompute.py`); the blocks recently run are shared by every trace in one cache of
their own, a quarter of the budget. A view that asks for one more tensor of the same text reuses the forward pass,
a class sending the same text at once gets one pass, generating a token computes only its position (the prefix's
keys and values are kept with its trace while memory allows: under pressure they go before any trace does), and
nothing a client does can grow memory without bound. What the answers hold is the domain's (`overview`, `slicing`,
`inputs`); this module only remembers."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable
from concurrent.futures import Future

from ..engine import ExplainerModel
from ..overview import overview_summaries
from ..recompute import BlockCache
from ..trace import Trace

BLOCKS_SHARE = 4  # one part in BLOCKS_SHARE of the budget keeps blocks run again, the rest keeps traces
# a generation step continues a trace from its kept keys and values; a trace continued that many times is traced
# again whole instead, as each view of it runs every continuation's pass again
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
        return model.trace_ids(ids, keep_kv=True, observe=overview_summaries(model.config.n_layer),
                               block_cache=self.blocks, keep_blocks=blocks)

    def trace(self, name: str, model: ExplainerModel, ids: list[int], *, blocks: Collection[int] = ()
              ) -> tuple[Trace, list[int]]:
        """The full trace of `ids` by the model called `name`, and the positions computed for it
        ([n, n] when it came from the cache or from the same request of another client at the same
        time, [0, n] when it was computed now). A text that continues a cached one is traced whole: continuing
        would cost more, since its overview reads every block's pattern, which only a pass over every position
        has at hand. `blocks`: those whose values the answer reads (kept as the pass records them)."""
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
            trace = self._fresh(model, ids, blocks)
            mine.set_result(trace)
        except BaseException as e:
            mine.set_exception(e)
            raise
        finally:
            with self._lock:
                del self._inflight[key]
        self.cache.put(key, trace)
        return trace, [0, n]

    def extend(self, name: str, model: ExplainerModel, prefix: Trace, token_id: int, *, cached: bool = True,
               blocks: Collection[int] = ()) -> tuple[Trace, int]:
        """Trace one more token, and the first position computed for it: only the new one when the prefix came from
        the cache (`cached`) with its keys and values still kept and was continued fewer than MAX_PASSES times;
        else all of them, in one pass (a prefix computed just now: its pass is counted already)."""
        recipe = prefix.blocks
        if cached and prefix.kv is not None and recipe is not None and recipe.passes < MAX_PASSES:
            merged = model.extend_trace(prefix, [token_id], keep_kv=True, block_cache=self.blocks)
            first = prefix.n_tokens
        else:
            merged, first = self._fresh(model, [*prefix.token_ids, token_id], blocks), 0
        self.cache.put((name, tuple(merged.token_ids)), merged)
        return merged, first
