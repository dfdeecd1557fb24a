"""The induction run (training/induction.py) trained live on a server, for the "Watch it learn" page.

One run per server process at a time (a second start is refused while one goes), in a background thread with one
torch thread, capped in wall time. Its events (start, record, status, done) are kept in order so that any client can
join or reconnect and replay what it missed. Only the client that started it (its `owner`) may pause, step, resume or
stop it, and its owner's event stream is its lease: when no stream of the owner has been open for `lease_s`, the run
stops after its current step, keeps what it trained, and ends with `done` status "stopped" (a run is never left going
for nobody). Pausing blocks the trainer between two steps; a step while paused trains up to the next record and
pauses again. Paused time is not counted in the records' `elapsed_s` that the events carry.

Each run trains into its own folder under a temporary folder that the `LiveInductions` keeps until the process exits
(the server's models may open a run's final model, main/model, for as long as the server runs).
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import InputError
from .induction import InductionConfig, Record, summary, train_induction
from .induction_limits import LIMITS
from .live_run import LiveRunBase, LiveRuns, one_torch_thread

log = logging.getLogger(__name__)

LEASE_S = 30.0  # a run stops when no event stream of its owner has been open for this long
MAX_MINUTES = 40.0  # a hard stop, paused time included: the default run and its control take about 30 min here
POLL_S = 0.2  # how often a paused run looks at its lease and its flags
KEEP = 3  # ended runs remembered (their events; their folders stay until the process exits)
MAX_SEED = 2**31 - 1
# what a live run may change, and the defaults of the rest (records every 50 steps: a curve the page can follow)
CHANGEABLE = ("steps", "seed", "width", "lr", "control")
DEFAULTS = InductionConfig(record_every=50, checkpoint_every=1000)


def live_config(steps: int | None = None, seed: int | None = None, width: int | None = None,
                lr: float | None = None, control: bool | None = None, *,
                base: InductionConfig = DEFAULTS) -> InductionConfig:
    """The live run's config: `base` with the given values, each in its range (one sentence, naming the range, for
    the first that is not)."""
    given = {"steps": steps, "seed": seed, "width": width, "lr": lr, "control": control}
    ranges: dict[str, tuple[float, float]] = {**{k: LIMITS[k] for k in ("steps", "width", "lr")}, "seed": (0, MAX_SEED)}
    for name, (lo, hi) in ranges.items():
        v = given[name]
        if v is None:
            continue
        whole = name != "lr"
        ok = isinstance(v, int) if whole else isinstance(v, int | float)
        if isinstance(v, bool) or not (ok and math.isfinite(v) and lo <= v <= hi):
            raise InputError(f"a live run's {name} must be {'a whole number' if whole else 'a number'} from {lo:g} "
                             f"to {hi:g}, got {v}", code="induction_limit", name=name, lo=lo, hi=hi, value=v)
    config = replace(base, **{k: v for k, v in given.items() if v is not None})
    if config.width % config.heads:
        raise InputError(f"the width {config.width} is not a multiple of the {config.heads} heads: choose a width "
                         f"that {config.heads} divides", code="induction_width", width=config.width,
                         heads=config.heads)
    config.check()
    return config


class LiveInduction(LiveRunBase):
    """One live run: the induction run (and its control) trained with pause, step and resume, and its lease."""

    def __init__(self, config: InductionConfig, root: Path, owner: str | None, *, lease_s: float = LEASE_S,
                 max_minutes: float = MAX_MINUTES, on_end: Callable[[LiveInduction], None] | None = None) -> None:
        super().__init__(owner, "induction-live")
        self.config = config
        self.folder = root / self.id  # the run's folder (train_induction's `out`)
        self.lease_s, self.max_minutes = lease_s, max_minutes
        self.on_end = on_end  # called in the run's thread once it has ended, before its `done` event
        self.run = "main"  # which of the two trains now
        self.step = 0  # the step the run training now has taken
        self.summary: dict[str, Any] | None = None
        self.model_name: str | None = None  # set by `on_end` once the model opens under that name
        self.records: dict[str, list[dict[str, Any]]] = {"main": [], "control": []}
        self._wake = threading.Condition(self._lock)  # a paused trainer waits on it
        self._paused = False
        self._stepping = False  # paused, asked to train up to the next record
        self._streams = 0  # the owner's event streams open now
        self._lease_since = time.monotonic()  # when the owner's last stream closed (or the run was made)
        self._started = time.monotonic()
        self._paused_s = 0.0  # paused time of the run training now

    # -- what clients see ------------------------------------------------------------------------------------------

    @property
    def model_folder(self) -> Path:
        return self.folder / "main" / "model"

    def elapsed_s(self) -> float:
        """Training time of the run training now, paused time left out."""
        records = self.records[self.run]
        return records[-1]["elapsed_s"] if records else 0.0

    def describe(self, client: str | None) -> dict[str, Any]:
        """InductionLiveRun, as `client` sees it."""
        return {"id": self.id, "status": self.status, "step": self.step, "steps": self.config.steps, "run": self.run,
                "owner_is_you": self.may_steer(client), "config": asdict(self.config), "model": self.model_name,
                "summary": self.summary, "elapsed_s": self.elapsed_s(), "max_minutes": self.max_minutes,
                "lease_s": self.lease_s, "n_events": self.n_events}

    # -- control ---------------------------------------------------------------------------------------------------

    def _stopping(self) -> None:
        """Asked to stop: a paused trainer goes on, records once more and keeps its model."""
        self._paused = self._stepping = False
        self._set_status("stopping")
        self._wake.notify_all()

    def pause(self) -> None:
        """Hold the trainer after its current step."""
        with self._wake:
            self._need("pause", ("starting", "running"))
            self._paused, self._stepping = True, False
            self._set_status("paused")

    def resume(self) -> None:
        with self._wake:
            self._need("resume", ("paused",))
            self._paused = self._stepping = False
            self._set_status("running")
            self._wake.notify_all()

    def step_once(self) -> None:
        """While paused: train up to the next record, then pause again."""
        with self._wake:
            self._need("step", ("paused",))
            self._stepping = True
            self._wake.notify_all()

    def _need(self, what: str, states: tuple[str, ...]) -> None:
        if self.status not in states:
            raise InputError(f"the live run {self.id} is {self.status}: it cannot {what} now (only when "
                             f"{' or '.join(states)})", code="induction_state", run=self.id, status=self.status)

    def stream_opened(self, client: str | None) -> bool:
        """Count a stream of `client`; True when it is the owner's (and so holds the lease)."""
        if not self.may_steer(client):
            return False
        with self._lock:
            self._streams += 1
        return True

    def stream_closed(self) -> None:
        with self._lock:
            self._streams -= 1
            if not self._streams:
                self._lease_since = time.monotonic()

    @contextmanager
    def lease(self, client: str | None) -> Iterator[None]:
        """While open, a stream of `client`: the owner's holds the lease."""
        owner = self.stream_opened(client)
        try:
            yield
        finally:
            if owner:
                self.stream_closed()

    def lease_lapsed(self) -> bool:
        with self._lock:
            return self._streams == 0 and time.monotonic() - self._lease_since > self.lease_s

    # -- the training thread ---------------------------------------------------------------------------------------

    def _set_status(self, status: str) -> None:
        """Change the status and say so (the caller holds the lock)."""
        self.status = status
        self._events.append({"kind": "status", "status": status, "step": self.step, "run": self.run})

    def _checks(self) -> None:
        """Stop on a lapsed lease or the wall-time cap."""
        if self.lease_lapsed():
            self.stop(f"no page of the client that started it watched it for {self.lease_s:g} s")
        elif time.monotonic() - self._started > self.max_minutes * 60:
            self.stop(f"it reached this server's cap of {self.max_minutes:g} minutes for a live run")

    def _hold(self) -> None:
        """Block while paused and not stepping (the lease and the cap still stop the run)."""
        t0 = time.monotonic()
        while True:
            self._checks()
            with self._wake:
                if self._stop.is_set() or not self._paused or self._stepping:
                    break
                self._wake.wait(POLL_S)
        self._paused_s += time.monotonic() - t0

    def _should_stop(self) -> bool:
        """The trainer asks after every step."""
        self.step += 1
        self._checks()
        self._hold()
        return self._stop.is_set()

    def _on_record(self, name: str, record: Record) -> None:
        data = record.to_json()
        if name != self.run:  # the control run begins
            with self._wake:
                self.run, self.step, self._paused_s = name, 0, 0.0
                if not self._stop.is_set():
                    self._set_status(self.status)
        data["elapsed_s"] = round(max(0.0, data["elapsed_s"] - self._paused_s), 3)
        # the maps are rounded to 2 decimals in float32, which JSON writes as 0.029999999329447746: written as 0.03
        # here, an event is a third of the size (a stream of events is not gzipped)
        data["example_attention"] = [[[[round(v, 2) for v in row] for row in head] for head in layer]
                                     for layer in data["example_attention"]]
        self.records[name].append(data)
        self._emit("record", run=name, record=data)
        with self._wake:
            if self._stepping:  # a step asked while paused ends at this record
                self._stepping = False
        self._hold()

    def _main(self) -> None:
        status = "failed"
        with one_torch_thread():
            try:
                self._emit("start", config=asdict(self.config))
                with self._wake:
                    if not self._stop.is_set() and self.status == "starting":
                        self._set_status("running")
                train_induction(self.config, self.folder, self._on_record, self._should_stop)
                status = "stopped" if self._stop.is_set() else "finished"
                records = self.records[self.run]
                self.step = records[-1]["step"] if records else self.step  # the trainer asks once more between runs
            except Exception as e:  # the page needs to hear that the run died, and why
                log.exception("live induction run %s failed", self.id)
                self.message = f"{type(e).__name__}: {e}"
        self.summary = {name: {"layers": self.config.layers if name == "main" else 1, **summary(recs)}
                        for name, recs in self.records.items() if recs}
        if status != "failed" and self.model_folder.is_dir() and self.on_end is not None:
            try:
                self.on_end(self)
            except Exception:
                log.exception("live induction run %s: its model could not be offered", self.id)
        with self._wake:
            self.status = status
            self._events.append({"kind": "done", "status": status, "summary": self.summary, "model": self.model_name,
                                 "message": self.message})


@dataclass
class LiveInductions(LiveRuns[LiveInduction]):
    """The live runs of one server: at most one going at a time; the last few kept for replay. Their folders live
    under one temporary folder, removed when the process exits."""

    lease_s: float = LEASE_S
    max_minutes: float = MAX_MINUTES
    on_end: Callable[[LiveInduction], None] | None = None  # e.g. offer the run's model to the server's registry
    defaults: InductionConfig = DEFAULTS  # what a run does not choose

    def __post_init__(self) -> None:
        super().__init__(KEEP)  # an ended run's folder stays when it is forgotten: its model may be open in the app
        self.root: Path | None = None  # made at the first start (a server that never trains live makes none)

    def start(self, config: InductionConfig, owner: str | None = None) -> LiveInduction:
        """Start a run (TrainingBusy while another goes)."""
        def make() -> LiveInduction:
            if self.root is None:
                self.root = Path(tempfile.mkdtemp(prefix="transformer-explainer-induction-"))
            return LiveInduction(config, self.root, owner, lease_s=self.lease_s, max_minutes=self.max_minutes,
                                 on_end=self.on_end)

        return self._start(make)

    def _busy(self, going: LiveInduction) -> str:
        return (f"a live induction run is already going on this server (run {going.id}, {going.run} run, step "
                f"{going.step} of {going.config.steps}); watch it, or try again when it ends")

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every run, wait for it, and remove the runs' folders."""
        super().shutdown(timeout)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
