"""`serve --workers 2`: two server processes behind one listening socket answer the API, share the
access token the parent generated, and the whole tree stops cleanly on SIGTERM (what a process
manager sends)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from transformer_explainer.server.run import WORKER_READY_PATTERN


def children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Whether any thread of `pid` is still running. A zombie counts as ended (a container's init may never
    reap it), but only once every thread is one: after exit_group the leader can show `Z` while its other
    threads are still exiting, and they hold the process's files, the listening socket among them, until the
    last one has gone (a port test read "Z" as gone and found the port still bound)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                state = next((line.split()[1] for line in f if line.startswith("State:")), "X")
        except OSError:
            continue  # the thread ended while it was read
        if state not in ("Z", "X"):
            return True
    return False


class TwoWorkers:
    """`serve --workers 2` on the tiny model, started and waited for: health 200 and both workers' ready lines."""

    def __init__(self, model_dir: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "transformer_explainer.cli", "serve", "--model",
                                      str(model_dir), "--only", "--host", "0.0.0.0", "--port", "0", "--workers", "2"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        self.reader = threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True)
        self.reader.start()
        line = self.proc.stdout.readline()
        assert line.startswith("serving on http://127.0.0.1:") and "2 processes" in line, (line, self.stderr)
        self.url, token = line.split()[2].split("?token=")
        self.auth = {"Authorization": f"Bearer {token}"}
        deadline = time.monotonic() + 90
        while True:  # the URL is printed before the workers have loaded the model
            try:
                if httpx.get(self.url + "api/health", headers=self.auth, timeout=10).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and self.proc.poll() is None, self.stderr if self.proc.poll() else "slow"
            time.sleep(0.2)
        # uvicorn's workers, started by multiprocessing (which may add a resource-tracker process)
        self.workers = [p for p in children(self.proc.pid) if "resource_tracker" not in cmdline(p)]
        assert len(self.workers) == 2, [cmdline(p) for p in children(self.proc.pid)]
        # each worker says on stderr when its model is loaded (health answers once the first one is); two
        # workers' lines may run together in the pipe, so they are searched for, not matched line by line
        while len(ready := [int(m[1]) for m in WORKER_READY_PATTERN.finditer(self.stderr)]) < 2:
            assert time.monotonic() < deadline and self.proc.poll() is None, self.stderr
            time.sleep(0.1)
        assert sorted(ready) == sorted(self.workers), (ready, self.workers)

    @property
    def stderr(self) -> str:
        return "".join(list(self.err))


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process tree from /proc")
def test_two_worker_processes_answer_and_stop_cleanly(tiny_gpt2_dir):
    server = TwoWorkers(tiny_gpt2_dir)
    proc, url, auth, workers, err, reader = (server.proc, server.url, server.auth, server.workers, server.err,
                                             server.reader)
    try:
        # one token for both processes: fresh connections, spread by the kernel, are all let in
        for _ in range(12):
            assert httpx.get(url + "api/models", headers=auth, timeout=30).status_code == 200
            assert httpx.get(url + "api/models", timeout=30).status_code == 401
        with httpx.Client(base_url=url, headers=auth, timeout=60) as c:
            # stateless per request: each call carries its whole input, so any process can answer it
            for text in ("The cat sat", "on the mat", "and looked at the door"):
                tr = c.post("api/trace", json={"text": text})
                assert tr.status_code == 200, tr.text
                ids = tr.json()["token_ids"]
                t = c.post("api/tensors", json={"ids": ids, "tensors": [{"name": "blocks.0.attn.pattern", "head": 0}]})
                assert t.status_code == 200 and t.json()["token_ids"] == ids
                nx = c.post("api/next_token", json={"ids": ids, "sampling": {"temperature": 0}})
                assert nx.status_code == 200
                assert nx.json()["candidates"][0]["id"] == tr.json()["next"]["candidates"][0]["id"]
            assert c.post("api/trace", json={"text": ""}).status_code == 422
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    reader.join(timeout=10)
    assert proc.returncode == 0, "".join(err)
    time.sleep(0.5)
    assert not [w for w in workers if alive(w)], "worker processes outlived the server"
    assert "Traceback" not in "".join(err)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process tree from /proc")
def test_workers_end_with_their_parent_killed_outright(tiny_gpt2_dir):
    """kill -9 of `serve --workers 2`: its workers, re-parented, end too and free the port (before, they lived on
    as orphans serving the port, and a restart failed with "address already in use")."""
    server = TwoWorkers(tiny_gpt2_dir)
    port = int(server.url.rsplit(":", 1)[1].strip("/"))
    server.proc.kill()
    server.proc.wait()
    deadline = time.monotonic() + 15
    while [w for w in server.workers if alive(w)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [w for w in server.workers if alive(w)], "worker processes outlived their killed parent"
    with socket.socket() as s:  # the port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
