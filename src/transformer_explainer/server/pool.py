"""A bounded worker pool for model calls: a few threads run the model, a queue of limited length
waits for them, and anything beyond is refused at once (503 with Retry-After) instead of piling up
memory and latency. Each call has a time limit.

Two lanes: model calls (a forward pass: hundreds of milliseconds for GPT-2 small) and light calls
(a slice of a cached trace, a weight: milliseconds). Light calls have their own thread, so a
student stepping through views of a text already traced does not wait behind other students'
forward passes.

Threads per forward pass: with a `thread_budget` (the cores this process may use), each model call
gets the budget shared among the calls running when it starts (at least one). A lone user's pass
runs on every core; when a class keeps several calls running, each gets one core, which keeps up
better than passes contending for the same cores. torch's thread setting is per calling thread
(OpenMP), so each worker sets its own before each call.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")


class Busy(Exception):
    """The queue is full, or a call ran past its time limit."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Lane:
    def __init__(self, name: str, workers: int, max_queue: int) -> None:
        self.workers, self.max_queue = workers, max_queue
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self.pending = 0  # submitted and not finished (running or queued)
        self.running = 0  # of those, started
        self.done_at: deque[float] = deque(maxlen=32)  # when recent calls finished, for Retry-After
        self.lock = threading.Lock()

    def retry_after(self) -> int:
        """Seconds until the calls ahead have probably finished, at the rate calls finish now."""
        recent = [t for t in self.done_at if t > time.monotonic() - 30]
        if len(recent) < 2 or recent[-1] <= recent[0]:
            return 1 + self.pending // self.workers  # no rate yet: a second per call, as a guess
        rate = (len(recent) - 1) / (recent[-1] - recent[0])
        return min(60, max(1, math.ceil(self.pending / rate)))

    def finished(self, ran: bool) -> None:
        with self.lock:
            self.pending -= 1
            if ran:
                self.done_at.append(time.monotonic())


class ModelPool:
    def __init__(self, workers: int = 1, max_queue: int = 16, timeout_s: float = 60.0, light_workers: int = 1,
                 thread_budget: int | None = None) -> None:
        """`workers` model calls run at once, `max_queue` more may wait; the light lane alike.
        `thread_budget`: torch threads shared out among the running model calls; None leaves torch's
        thread setting alone."""
        if workers < 1 or light_workers < 1 or max_queue < 0 or timeout_s <= 0 or (thread_budget or 1) < 1:
            raise ValueError("workers >= 1, light_workers >= 1, max_queue >= 0, timeout_s > 0 and thread_budget >= 1 "
                             "are required")
        self.thread_budget = thread_budget
        self.workers = workers
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self._heavy = _Lane("model", workers, max_queue)
        self._light = _Lane("light", light_workers, max_queue)

    @property
    def pending(self) -> int:
        """Model calls running or waiting."""
        return self._heavy.pending

    @property
    def pending_light(self) -> int:
        return self._light.pending

    async def run(self, fn: Callable[..., T], *args: object, light: bool = False) -> T:
        lane = self._light if light else self._heavy
        with lane.lock:
            if lane.pending >= lane.workers + lane.max_queue:
                raise Busy(f"the server is busy ({lane.pending} requests ahead of this one); try again shortly",
                           retry_after=lane.retry_after())
            lane.pending += 1

        def timed() -> T:
            with lane.lock:
                lane.running += 1
                threads = max(1, (self.thread_budget or 1) // lane.running)
            try:
                if self.thread_budget is not None and not light:
                    torch.set_num_threads(threads)
                return fn(*args)
            finally:
                with lane.lock:
                    lane.running -= 1
                lane.finished(True)

        try:
            fut = lane.executor.submit(timed)
        except RuntimeError:  # shut down
            lane.finished(False)
            raise Busy("the server is shutting down", retry_after=5) from None
        # a call dropped from the queue before it ran never reaches `timed`: count it out here
        fut.add_done_callback(lambda f: lane.finished(False) if f.cancelled() else None)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), self.timeout_s)
        except TimeoutError:
            fut.cancel()  # drops it if it is still queued; a running call finishes in the background
            raise Busy(f"this request took longer than {self.timeout_s:g} s (a long text, or a model still loading); "
                       f"try a shorter text, or again shortly", retry_after=5) from None

    def shutdown(self) -> None:
        for lane in (self._heavy, self._light):
            lane.executor.shutdown(wait=False, cancel_futures=True)
