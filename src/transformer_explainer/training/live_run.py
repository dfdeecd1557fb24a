"""What every live run on a server shares: a training thread, the numbered events it emits (which any client can
replay from any point), the flag that stops it, the client that owns it; and the server's registry of runs, which
lets one go at a time.

The encoder-decoder's short run (seq2seq/live_training.py) and the induction run of "Watch it learn"
(training/induction_live.py) are both made of these; what they train, and how, stays in each.
"""

from __future__ import annotations

import atexit
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import torch

FINISHED = ("finished", "stopped", "failed")  # the statuses of a run that has ended
SHUTDOWN = "the server is shutting down"


class TrainingBusy(Exception):
    """A live run is going on this server already. `code` and `params` as an ExplainerError's."""

    def __init__(self, message: str, run: str) -> None:
        super().__init__(message)
        self.code, self.params = "training_busy", {"run": run}


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Train on one torch thread: a live run shares the machine with the people using the server. Under OpenMP the
    setting is the calling thread's own (the server's passes keep theirs), and threads torch starts meanwhile inherit
    it, so it is put back at the end all the same."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class LiveRunBase(ABC):
    """One run in a background thread: its status, its events so far (numbered from 1 in the order emitted), its
    stop flag and its owner. A subclass trains in `_main` (the thread's body) and ends with status one of FINISHED."""

    def __init__(self, owner: str | None, thread_name: str) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.owner = owner  # who started it, and so may steer it; None: anyone
        self.status = "starting"  # then running (paused, where a run can be), stopping, and one of FINISHED
        self.message: str | None = None  # why it stopped or failed, when not by its owner's hand
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"{thread_name}-{self.id}", daemon=True)

    # -- what clients see ------------------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def events(self, after: int = 0) -> list[dict[str, Any]]:
        """Events from index `after` on (0: all of them)."""
        with self._lock:
            return self._events[max(0, after):]

    @property
    def n_events(self) -> int:
        with self._lock:
            return len(self._events)

    # -- control ---------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def may_steer(self, client: str | None) -> bool:
        return self.owner is None or client == self.owner

    def stop(self, message: str | None = None) -> None:
        """Ask the run to end after its current step (`message`: why, when not by its owner's hand)."""
        with self._lock:
            if self.finished or self._stop.is_set():
                return
            self.message = message
            self._stop.set()
            self._stopping()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the training thread ---------------------------------------------------------------------------------------

    def _emit(self, kind: str, **data: Any) -> None:
        """Append an event (the caller does not hold the lock)."""
        with self._lock:
            self._events.append({"kind": kind, **data})

    @abstractmethod
    def _stopping(self) -> None:
        """What the run does when asked to stop, beyond raising its flag (the caller holds the lock)."""

    @abstractmethod
    def _main(self) -> None:
        """The thread's body: train, emit events, end with a finished status."""


RunT = TypeVar("RunT", bound=LiveRunBase)


class LiveRuns(ABC, Generic[RunT]):
    """The live runs of one server process: at most one going at a time; the last `keep` kept for replay. The first
    start arranges for `shutdown` at the process's exit."""

    def __init__(self, keep: int) -> None:
        self.keep = keep  # runs remembered, the one going included
        self.runs: dict[str, RunT] = {}
        self._lock = threading.Lock()
        self._at_exit = False

    @property
    def current(self) -> RunT | None:
        """The run going now, else the latest one."""
        with self._lock:
            going = [r for r in self.runs.values() if not r.finished]
            return going[0] if going else (next(reversed(self.runs.values())) if self.runs else None)

    def _start(self, make: Callable[[], RunT]) -> RunT:
        """Make a run (under the registry's lock), keep it, and start it; TrainingBusy while another goes."""
        with self._lock:
            going = next((r for r in self.runs.values() if not r.finished), None)
            if going is not None:
                raise TrainingBusy(self._busy(going), run=going.id)
            if not self._at_exit:
                atexit.register(self.shutdown)
                self._at_exit = True
            run = make()
            for old in list(self.runs)[: max(0, len(self.runs) - self.keep + 1)]:
                del self.runs[old]
            self.runs[run.id] = run
            run.start()
            return run

    @abstractmethod
    def _busy(self, going: RunT) -> str:
        """The sentence that refuses a start while `going` goes."""

    def get(self, run_id: str) -> RunT | None:
        with self._lock:
            return self.runs.get(run_id)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every run and wait for it (together at most `timeout` seconds)."""
        with self._lock:
            runs = list(self.runs.values())
        for r in runs:
            r.stop(SHUTDOWN)
        deadline = time.monotonic() + timeout
        for r in runs:
            r.join(max(0.0, deadline - time.monotonic()))
