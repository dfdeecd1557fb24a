"""The cache of blocks a trace runs again (`memo.BlockCache`): bounded by a count and by bytes, the block run
last always kept, and a block asked for by several threads at once run once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from transformer_explainer.memo.block_cache import BlockCache, storage_nbytes


def block(n: int) -> dict[str, torch.Tensor]:
    return {"blocks.0.attn.q": torch.zeros(n)}


def test_least_recently_used_goes_first():
    cache = BlockCache(max_blocks=2)
    for k in "abc":
        cache.get(k, lambda: block(4))
    assert len(cache) == 2
    runs = []
    cache.get("b", lambda: runs.append("b") or block(4))  # kept
    cache.get("a", lambda: runs.append("a") or block(4))  # dropped first: run again
    assert runs == ["a"] and cache.hits == 1


def test_bounded_in_bytes_but_keeps_the_last_block():
    cache = BlockCache(max_blocks=None, max_bytes=100)
    cache.get("small", lambda: block(10))  # 40 bytes
    cache.get("small2", lambda: block(10))
    assert len(cache) == 2 and cache.nbytes == 80
    big = cache.get("big", lambda: block(1000))  # alone over the budget: kept, the others go
    assert len(cache) == 1 and cache.nbytes == storage_nbytes(list(big.values()))
    with pytest.raises(ValueError):
        BlockCache(max_blocks=0)


def test_views_share_their_storage_once():
    x = torch.zeros(10, 10)
    assert storage_nbytes([x, x[:3], x[5]]) == 400


def test_a_block_asked_for_at_once_is_run_once():
    cache = BlockCache()
    started, release = threading.Event(), threading.Event()
    runs = []

    def slow():
        runs.append(1)
        started.set()
        release.wait(10)
        return block(4)

    with ThreadPoolExecutor(3) as ex:
        first = ex.submit(cache.get, "k", slow)
        started.wait(10)
        others = [ex.submit(cache.get, "k", slow) for _ in range(2)]
        threading.Event().wait(0.1)
        release.set()
        got = [first.result(), *(f.result() for f in others)]
    assert len(runs) == 1 and all(g is got[0] for g in got)


def test_a_failed_run_is_not_kept():
    cache = BlockCache()

    def fails():
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError):
        cache.get("k", fails)
    assert len(cache) == 0 and cache.get("k", lambda: block(2))["blocks.0.attn.q"].shape == (2,)


def test_resize_drops_the_least_recently_used_now_and_bounds_what_comes():
    cache = BlockCache(max_blocks=None, max_bytes=1000)
    for k in "abcd":
        cache.get(k, lambda: block(10))  # 40 bytes each
    cache.get("a", lambda: block(10))  # a is the most recent now
    cache.resize(80)
    assert len(cache) == 2 and cache.nbytes == 80 and cache.peek("a") is not None and cache.peek("d") is not None
    cache.get("e", lambda: block(10))
    assert len(cache) == 2 and cache.peek("e") is not None and cache.peek("d") is None
    cache.resize(0)  # the block run last stays, even beyond the budget
    assert len(cache) == 1 and cache.peek("e") is not None
    with pytest.raises(ValueError):
        cache.resize(-1)
