"""The server's memory of traces: a small LRU bounded in bytes, keyed by (model, token ids), and the
`Explainer` that answers a trace through it. A view that asks for one more tensor of the same text
reuses the forward pass, a text being typed or edited at its end continues the trace of its cached
beginning (only the changed positions are computed), a class sending the same text at once gets one
pass, and nothing a client does can grow memory without bound. What the answers hold is the domain's
(`overview`, `slicing`, `inputs`); this module only remembers."""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future

from ..engine import ExplainerModel
from ..trace import Trace, truncate_trace


def trace_nbytes(trace: Trace) -> int:
    return sum(v.numel() * v.element_size() for v in trace.values.values())


def shared_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """How many ids `a` and `b` have in common at their beginning."""
    n = 0
    for x, y in zip(a, b, strict=False):  # up to the shorter
        if x != y:
            break
        n += 1
    return n


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

    def longest_shared_prefix(self, key: tuple[str, tuple[int, ...]]) -> tuple[Trace, int] | None:
        """The cached trace (same model) whose ids share the longest beginning with `key`'s, and how
        many ids they share (fewer than `key` has), if any shares one: a text being typed grows or
        changes at its end, so its previous trace usually covers most of it."""
        name, ids = key
        with self._lock:
            best: tuple[Trace, int] | None = None
            for (m, k), (trace, _) in self._items.items():
                if m != name:
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
        size = trace_nbytes(trace)
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._items:
                self._bytes -= self._items.pop(key)[1]
            self._items[key] = (trace, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, n) = self._items.popitem(last=False)
                self._bytes -= n


class Explainer:
    """The computations behind the API, with the trace cache. Thread-safe."""

    def __init__(self, cache_bytes: int) -> None:
        self.cache = TraceCache(cache_bytes)
        self._inflight: dict[tuple[str, tuple[int, ...]], Future[Trace]] = {}
        self._lock = threading.Lock()

    def trace(self, name: str, model: ExplainerModel, ids: list[int]) -> tuple[Trace, list[int]]:
        """The full trace of `ids` by the model called `name`, and the positions computed for it
        ([n, n] when it came from the cache or from the same request of another client at the same
        time, [p, n] when the trace of the first p tokens was cached and only the rest computed)."""
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
            # continuing a trace computes only the positions after the shared ones, but copies the
            # shared ones into the new trace: worth it when they are at least half the text
            if shared is not None and 2 * shared[1] >= n:
                prefix, p = shared
                trace = model.extend_trace(prefix if p == prefix.n_tokens else truncate_trace(prefix, p), ids[p:])
                computed = [p, n]
            else:
                trace, computed = model.trace_ids(ids), [0, n]
            mine.set_result(trace)
        except BaseException as e:
            mine.set_exception(e)
            raise
        finally:
            with self._lock:
                del self._inflight[key]
        self.cache.put(key, trace)
        return trace, computed

    def extend(self, name: str, model: ExplainerModel, prefix: Trace, token_id: int) -> Trace:
        """Trace one more token: only the new position is computed."""
        merged = model.extend_trace(prefix, [token_id])
        self.cache.put((name, tuple(merged.token_ids)), merged)
        return merged
