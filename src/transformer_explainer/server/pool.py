"""A bounded worker pool for model calls: a few threads run the model, a queue of limited length
waits for them, and anything beyond is refused at once (503 with Retry-After) instead of piling up
memory and latency. Each call has a time limit.

Three lanes: model calls (a forward pass: hundreds of milliseconds for GPT-2 small), light calls
(a slice of a cached trace, a weight: milliseconds; the first slice of a block not run lately runs that one
block again from its kept input: a pass's share of one block) and analyses (a forward pass per head, or more:
seconds to minutes). Light calls have their own thread, so a student stepping through views of a
text already traced does not wait behind other students' forward passes; analyses have theirs, so
however many a client sends, the model lane's workers stay free for everyone's traces. The light lane's
queue is longer (LIGHT_QUEUE_FACTOR times): a class's views come in bursts, and a burst of calls of a few
milliseconds each is answered sooner from the queue than after the Retry-After of a refusal.

An analysis is stopped between its passes once nobody waits for its answer: when its request timed
out (answered 503) or was abandoned (the client went away, and the coroutine awaiting it was
cancelled). A single forward pass cannot be interrupted; an analysis is many of them, and it calls
`between_passes` before each one (`run_passes`).

Threads per call: with a `thread_budget` (the cores this process may use), each call, in any lane,
gets the budget shared among the calls running when it starts (at least one), and an analysis takes
its share again before each pass. A lone user's pass runs on every core; when a class keeps several
calls running, each gets one core, which keeps up better than passes contending for the same cores.
The light lane shares too: a view's block run again on two threads beside two model calls left its
threads waiting for each other (four threads, GPT-2 small's shape, 20 tokens: 81 blocks/s on two
threads each, 116/s on one). torch's thread setting is per calling thread (OpenMP), so each worker
sets its own as its call starts (a thread's first torch call takes the setting made last in the process).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import torch

from . import defaults

T = TypeVar("T")

BetweenPasses = Callable[[], None]


class Busy(Exception):
    """The queue is full, or a call ran past its time limit. `code` and `params` as an ExplainerError's."""

    status = 503

    def __init__(self, message: str, retry_after: int, *, code: str = "busy", **params: int | float | str) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.code, self.params = code, params


class OverShare(Busy):
    """The client has its share of something running already (security.py's fair share)."""

    status = 429


class Abandoned(Exception):
    """Raised in an analysis between two passes: its request was answered (timed out) or abandoned, so
    the rest of its work would be for nobody."""


class _Lane:
    def __init__(self, name: str, workers: int, max_queue: int) -> None:
        self.name = name
        self.workers, self.max_queue = workers, max_queue
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self.pending = 0  # submitted and not finished (running or queued)
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
                 thread_budget: int | None = None, analysis_workers: int = 1,
                 light_queue_factor: int = defaults.LIGHT_QUEUE_FACTOR) -> None:
        """`workers` model calls run at once, `max_queue` more may wait; the analysis lane alike, with
        `analysis_workers`; the light lane with `light_workers` and a queue `light_queue_factor` times as long (its
        calls take milliseconds: refusing one that would be answered well within a second, with a Retry-After of at
        least one, only makes its client wait longer). `thread_budget`: torch threads shared out among the running
        model calls and analyses; None leaves torch's thread setting alone."""
        if (workers < 1 or light_workers < 1 or analysis_workers < 1 or max_queue < 0 or timeout_s <= 0
                or (thread_budget or 1) < 1 or light_queue_factor < 1):
            raise ValueError("workers >= 1, light_workers >= 1, analysis_workers >= 1, max_queue >= 0, timeout_s > 0, "
                             "thread_budget >= 1 and light_queue_factor >= 1 are required")
        self.thread_budget = thread_budget
        self.workers = workers
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self._heavy = _Lane("model", workers, max_queue)
        self._light = _Lane("light", light_workers, max_queue * light_queue_factor)
        self._analysis = _Lane("analysis", analysis_workers, max_queue)
        self._computing = 0  # calls running now, in every lane: they share the thread budget
        self._computing_lock = threading.Lock()

    @property
    def pending(self) -> int:
        """Model calls and analyses running or waiting."""
        return self._heavy.pending + self._analysis.pending

    @property
    def pending_light(self) -> int:
        return self._light.pending

    @property
    def pending_analyses(self) -> int:
        return self._analysis.pending

    def _take_threads(self) -> None:
        """This thread's share of the budget, for the calls computing now."""
        if self.thread_budget is not None:
            with self._computing_lock:
                running = max(1, self._computing)
            torch.set_num_threads(max(1, self.thread_budget // running))

    async def run(self, fn: Callable[..., T], *args: object, light: bool = False) -> T:
        """`fn(*args)` in the light lane or the model lane."""
        return await self._run(self._light if light else self._heavy, lambda _stop: fn(*args))

    async def run_passes(self, fn: Callable[[BetweenPasses], T]) -> T:
        """An analysis, `fn(between_passes)`, in the analysis lane. `fn` calls `between_passes()` before
        each forward pass: it raises `Abandoned` once the request timed out or was abandoned, and
        otherwise gives the thread its current share of the budget."""
        return await self._run(self._analysis, lambda stop: fn(stop))

    async def _run(self, lane: _Lane, call: Callable[[BetweenPasses], T]) -> T:
        with lane.lock:
            if lane.pending >= lane.workers + lane.max_queue:
                what = "analyses" if lane is self._analysis else "requests"
                raise Busy(f"the server is busy ({lane.pending} {what} ahead of this one); try again shortly",
                           retry_after=lane.retry_after(), ahead=lane.pending)
            lane.pending += 1
        stopped = threading.Event()  # set once nobody waits for the answer

        def between_passes() -> None:
            if stopped.is_set():
                raise Abandoned("the request was answered or abandoned before its work ended")
            self._take_threads()

        def timed() -> T:
            with self._computing_lock:
                self._computing += 1
            try:
                self._take_threads()
                return call(between_passes)
            finally:
                with self._computing_lock:
                    self._computing -= 1
                lane.finished(True)

        try:
            fut: Future[T] = lane.executor.submit(timed)
        except RuntimeError:  # shut down
            lane.finished(False)
            raise Busy("the server is shutting down", retry_after=5, code="shutting_down") from None
        # a call dropped from the queue before it ran never reaches `timed`: count it out here
        fut.add_done_callback(lambda f: lane.finished(False) if f.cancelled() else None)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), self.timeout_s)
        except TimeoutError:
            stopped.set()
            fut.cancel()  # drops it if it is still queued; a running pass finishes, an analysis stops after it
            raise Busy(f"this request took longer than {self.timeout_s:g} s (a long text, or a model still loading); "
                       f"try a shorter text, or again shortly", retry_after=5, code="timed_out",
                       seconds=self.timeout_s) from None
        except asyncio.CancelledError:  # the client went away (CancelOnDisconnect), or the server stops
            stopped.set()
            fut.cancel()
            raise

    def shutdown(self) -> None:
        for lane in (self._heavy, self._light, self._analysis):
            lane.executor.shutdown(wait=False, cancel_futures=True)
