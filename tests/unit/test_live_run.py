"""The live-run base (training/live_run.py) and the event stream (server/events.py) on their own, through a small
run that counts: numbered events any client replays from any point, one run at a time per registry, a shutdown that
stops and joins every run, and the server-sent events with their resume, ids, keep-alive, end and hold."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from fastapi import HTTPException
from fastapi.responses import StreamingResponse

from transformer_explainer.server import live_runs as sse
from transformer_explainer.training.live_run import SHUTDOWN, LiveRunBase, LiveRuns, TrainingBusy, one_torch_thread


class Counting(LiveRunBase):
    """Emits `tick` events until it has `n` of them or is stopped, then `done`."""

    def __init__(self, n: int, owner: str | None = None, *, gate: threading.Event | None = None) -> None:
        super().__init__(owner, "test-live")
        self.n = n
        self.gate = gate  # when given, each tick waits for it (a test decides when the run moves on)

    def _stopping(self) -> None:
        self.status = "stopping"

    def _main(self) -> None:
        self.status = "running"
        for i in range(self.n):
            if self.gate is not None:
                while not self.gate.wait(0.01):
                    if self._stop.is_set():
                        break
            if self._stop.is_set():
                break
            self._emit("tick", i=i)
        status = "stopped" if self._stop.is_set() else "finished"
        self._emit("done", status=status)  # the last event is in before the status says the run has ended
        self.status = status


class Counts(LiveRuns[Counting]):
    def start(self, n: int, owner: str | None = None, gate: threading.Event | None = None) -> Counting:
        return self._start(lambda: Counting(n, owner, gate=gate))

    def _busy(self, going: Counting) -> str:
        return f"run {going.id} is counting to {going.n}"


def test_events_are_kept_in_order_and_replayed_from_any_point():
    run = Counting(5)
    assert run.status == "starting" and not run.finished and run.events() == [] and run.n_events == 0
    run.start()
    assert run.join(10)
    events = run.events()
    assert [e["kind"] for e in events] == ["tick"] * 5 + ["done"]
    assert [e["i"] for e in events[:5]] == list(range(5))
    assert run.finished and run.status == "finished" and run.n_events == 6
    for after in (0, 1, 3, 6, 9):
        assert run.events(after) == events[after:]
    assert run.events(-2) == events  # before the first: all of them
    events.clear()  # a copy: the run's own list is not the caller's
    assert run.n_events == 6


def test_only_the_owner_steers_a_run_that_has_one():
    mine, anyones = Counting(1, "me"), Counting(1)
    assert mine.may_steer("me") and not mine.may_steer("you") and not mine.may_steer(None)
    assert anyones.may_steer("you") and anyones.may_steer(None)


def test_stop_ends_the_run_after_its_step_and_keeps_the_first_reason():
    gate = threading.Event()
    run = Counting(1000, gate=gate)
    run.start()
    run.stop("first")
    run.stop("second")
    assert run.message == "first"
    assert run.join(10)
    assert run.status == "stopped" and run.events()[-1] == {"kind": "done", "status": "stopped"}
    run.stop("after the end")
    assert run.message == "first" and run.status == "stopped"


def test_a_second_start_is_refused_while_one_goes_and_shutdown_stops_and_joins():
    runs = Counts(keep=2)
    assert runs.current is None and runs.get("nothing") is None
    gate = threading.Event()
    going = runs.start(1000, "me", gate)
    with pytest.raises(TrainingBusy) as refused:
        runs.start(3)
    assert str(refused.value) == f"run {going.id} is counting to 1000"
    assert (refused.value.code, refused.value.params) == ("training_busy", {"run": going.id})
    assert runs.current is going and runs.get(going.id) is going and list(runs.runs) == [going.id]

    runs.shutdown(timeout=10)
    assert going.finished and going.join(0), "shutdown left the run's thread going"
    assert going.status == "stopped" and going.message == SHUTDOWN
    assert runs.current is going  # none going: the latest

    second = runs.start(2)  # the last one has ended: a new one may start
    assert second.join(10) and runs.current is second
    third = runs.start(2)
    assert third.join(10)
    assert list(runs.runs) == [second.id, third.id] and runs.get(going.id) is None  # `keep` runs remembered


def test_one_torch_thread_puts_the_setting_back_even_after_an_error():
    threads = torch.get_num_threads()
    with pytest.raises(RuntimeError), one_torch_thread():
        assert torch.get_num_threads() == 1
        raise RuntimeError("the training failed")
    assert torch.get_num_threads() == threads


# -- the server-sent events --------------------------------------------------------------------------------------------


def collect(run: LiveRunBase, start: int, hold=None, until: str | None = None) -> list[str]:
    """The stream's chunks, up to its end (or the first chunk holding `until`, after which the stream is closed)."""

    async def read() -> list[str]:
        out = []
        stream = sse.event_stream(run, start, hold)
        try:
            async for chunk in stream:
                out.append(chunk)
                if until is not None and until in chunk:
                    break
        finally:
            await stream.aclose()
        return out

    return asyncio.run(asyncio.wait_for(read(), 20))


def finished_run(n: int) -> Counting:
    run = Counting(n)
    run.start()
    assert run.join(10)
    return run


def test_the_stream_numbers_each_event_resumes_after_the_clients_last_and_ends_after_the_last():
    run = finished_run(3)
    whole = collect(run, 0)
    assert whole[0] == "retry: 1000\n\n"
    assert whole[1:] == ['id: 1\ndata: {"kind":"tick","i":0}\n\n', 'id: 2\ndata: {"kind":"tick","i":1}\n\n',
                         'id: 3\ndata: {"kind":"tick","i":2}\n\n',
                         'id: 4\ndata: {"kind":"done","status":"finished"}\n\n']
    assert collect(run, 2) == [whole[0], *whole[3:]]


def test_a_run_is_found_by_its_id_or_a_404_says_why_it_may_be_gone():
    runs = Counts(keep=2)
    run = runs.start(1)
    assert run.join(10) and sse.run_or_404(runs, run.id, "counting run") is run
    with pytest.raises(HTTPException) as gone:
        sse.run_or_404(runs, "0123", "counting run")
    assert gone.value.status_code == 404
    assert gone.value.detail == ("no counting run '0123' on this server (it may have ended long ago, or the server "
                                 "restarted): start a new one")


def test_where_a_client_resumes():
    assert sse.resume_from(0, None) == 0
    assert sse.resume_from(2, "5") == 5  # a reconnecting EventSource's Last-Event-ID
    assert sse.resume_from(7, " 5 ") == 7  # `?after=N` further on
    assert sse.resume_from(3, "five") == 3 and sse.resume_from(3, "-1") == 3 and sse.resume_from(3, "") == 3


def test_a_run_that_has_ended_with_nothing_left_answers_204_and_opens_no_hold():
    run = finished_run(2)
    opened = []

    @contextmanager
    def hold() -> Iterator[None]:
        opened.append(True)
        yield

    assert sse.event_response(run, 3, None, hold()).status_code == 204
    assert sse.event_response(run, 0, "3", hold()).status_code == 204
    assert opened == []
    left = sse.event_response(run, 0, "2", hold())
    assert isinstance(left, StreamingResponse) and left.media_type == "text/event-stream"
    assert left.headers["cache-control"] == "no-cache"


def test_a_quiet_stream_keeps_alive_and_the_hold_is_open_exactly_while_it_streams(monkeypatch):
    monkeypatch.setattr(sse, "KEEPALIVE_S", 0.05)
    monkeypatch.setattr(sse, "STREAM_POLL_S", 0.01)
    gate = threading.Event()
    run = Counting(2, gate=gate)
    run.start()
    state: list[str] = []

    @contextmanager
    def hold() -> Iterator[None]:
        state.append("open")
        try:
            yield
        finally:
            state.append("closed")

    try:
        chunks = collect(run, 0, hold(), until="keep-alive")  # the client leaves after a keep-alive
        assert chunks == ["retry: 1000\n\n", ": keep-alive\n\n"] and state == ["open", "closed"]
        gate.set()
        assert run.join(10)
        state.clear()
        chunks = collect(run, 0, hold())
        assert [c.split("\n")[0] for c in chunks[1:]] == ["id: 1", "id: 2", "id: 3"] and state == ["open", "closed"]
    finally:
        run.stop()
        gate.set()
        run.join(10)
