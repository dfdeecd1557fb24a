"""A bounded worker pool for model calls: a few threads run the model, a queue of limited length
waits for them, and anything beyond is refused at once (503 with Retry-After) instead of piling up
memory and latency. Each call has a time limit."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class Busy(Exception):
    """The queue is full, or a call ran past its time limit."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ModelPool:
    def __init__(self, workers: int = 1, max_queue: int = 16, timeout_s: float = 60.0) -> None:
        if workers < 1 or max_queue < 0 or timeout_s <= 0:
            raise ValueError("workers >= 1, max_queue >= 0 and timeout_s > 0 are required")
        self.workers = workers
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="model")
        self._pending = 0  # submitted and not finished (running or queued)
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        return self._pending

    def _done(self, _fut: object) -> None:
        with self._lock:
            self._pending -= 1

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        with self._lock:
            if self._pending >= self.workers + self.max_queue:
                raise Busy(f"the server is busy ({self._pending} requests ahead of this one); try again shortly",
                           retry_after=max(1, self._pending // max(1, self.workers)))
            self._pending += 1
        fut = self._executor.submit(fn, *args)
        fut.add_done_callback(self._done)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), self.timeout_s)
        except TimeoutError:
            fut.cancel()  # drops it if it is still queued; a running call finishes in the background
            raise Busy(f"the model took longer than {self.timeout_s:g} s for this request; try a shorter text",
                       retry_after=5) from None

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
