"""The app's download panel against a local stand-in for the Hugging Face hub: the real
`huggingface_hub` client in a real `serve` process (HF_ENDPOINT pointed at the stand-in, HF_HOME
at a temporary folder) fetches a random GPT-2 saved with transformers under the repo id the app
uses for `gpt2`. No internet: the stand-in listens on 127.0.0.1."""

from __future__ import annotations

import hashlib
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import make_hf_gpt2
from tests.hub_standin import StandInHub, serve_with_hub

REPO = "openai-community/gpt2"  # what `gpt2` means (loading/resolve.py KNOWN_HUB_MODELS)
CHUNK = 10 * 1024 * 1024  # the hub client writes to disk in chunks of this size


@pytest.fixture(scope="module")
def hub_files(tmp_path_factory) -> Path:
    # d_model 128: a weights file of ~26 MB, so a cut at 60% comes after the client wrote one chunk
    return make_hf_gpt2(tmp_path_factory.mktemp("hub-gpt2"), n_embd=128)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wait_job(url: str, job_id: str, *, until=lambda j: j["state"] not in ("queued", "running"), timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while True:
        jobs = {j["id"]: j for j in httpx.get(url + "api/downloads", timeout=10).json()["jobs"]}
        if until(jobs[job_id]):
            return jobs[job_id]
        assert time.monotonic() < deadline, jobs[job_id]
        time.sleep(0.1)


def cached_weights(hf_home: Path) -> Path:
    snaps = list((hf_home / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots").iterdir())
    assert len(snaps) == 1
    return snaps[0] / "model.safetensors"


def test_download_survives_a_dead_link_resumes_and_switches(hub_files, tmp_path):
    hub = StandInHub(REPO, hub_files)
    hf_home = tmp_path / "hf"
    with hub.running(), serve_with_hub(hub.url, hf_home, "--model", "explainer-small") as url:
        state = httpx.get(url + "api/downloads").json()
        assert state["allowed"] and not state["jobs"]
        offer = next(o for o in state["offers"] if o["model"] == "gpt2")
        assert offer["repo"] == REPO and not offer["available"]
        assert "gpt2" not in [m["name"] for m in httpx.get(url + "api/models").json()["models"]]

        # the link dies at 60% of the weights and stays dead: the hub client's own retries give up
        hub.break_at, hub.breaks, hub.down_after_break = 0.6, 1, True
        job = httpx.post(url + "api/downloads", json={"model": "gpt2"}).json()
        failed = wait_job(url, job["id"])
        assert failed["state"] == "failed" and failed["failure"] == "interrupted", failed
        assert failed["bytes_total"] > 25_000_000 and failed["bytes_done"] >= CHUNK, failed
        kept = failed["bytes_done"]

        # the link is back: a new attempt asks only for the rest, and the file is whole
        hub.down = False
        n_before = len(hub.weight_requests())
        job2 = httpx.post(url + "api/downloads", json={"model": "gpt2"}).json()
        assert job2["id"] != job["id"]
        done = wait_job(url, job2["id"])
        assert done["state"] == "done", done
        assert done["bytes_resumed"] == kept and done["bytes_done"] == done["bytes_total"]
        ranges = hub.weight_requests()[n_before:]
        assert ranges and ranges[0] is not None and int(ranges[0].removeprefix("bytes=").rstrip("-")) >= CHUNK, ranges
        assert sha256(cached_weights(hf_home)) == sha256(hub_files / "model.safetensors")

        # the app now lists gpt2 and runs it: the switch
        assert "gpt2" in [m["name"] for m in httpx.get(url + "api/models").json()["models"]]
        assert next(o for o in httpx.get(url + "api/downloads").json()["offers"] if o["model"] == "gpt2")["available"]
        tr = httpx.post(url + "api/trace", json={"model": "gpt2", "text": "Hello world"}, timeout=60)
        assert tr.status_code == 200 and tr.json()["model"] == "gpt2" and tr.json()["config"]["n_embd"] == 128


def test_one_broken_transfer_is_resumed_by_the_hub_client_within_the_attempt(hub_files, tmp_path):
    hub = StandInHub(REPO, hub_files)
    hub.break_at, hub.breaks = 0.6, 1
    with hub.running(), serve_with_hub(hub.url, tmp_path / "hf", "--model", "explainer-small", "--only") as url:
        job = httpx.post(url + "api/downloads", json={"model": "gpt2"}).json()
        done = wait_job(url, job["id"])
        assert done["state"] == "done" and done["bytes_done"] == done["bytes_total"], done
        ranges = hub.weight_requests()
        assert len(ranges) == 2 and ranges[0] is None and ranges[1] is not None, ranges
        assert sha256(cached_weights(tmp_path / "hf")) == sha256(hub_files / "model.safetensors")


def test_cancel_keeps_the_bytes_and_resume_finishes(hub_files, tmp_path):
    hub = StandInHub(REPO, hub_files)
    hub.rate = 4_000_000  # ~7 s for the weights
    with hub.running(), serve_with_hub(hub.url, tmp_path / "hf", "--model", "explainer-small", "--only") as url:
        job = httpx.post(url + "api/downloads", json={"model": "gpt2"}).json()
        busy = httpx.post(url + "api/downloads", json={"model": "distilgpt2"})
        assert busy.status_code == 409 and "one download at a time" in busy.json()["detail"]
        running = wait_job(url, job["id"], until=lambda j: j["bytes_done"] >= CHUNK)
        assert running["state"] == "running" and running["speed_bps"] and running["eta_s"] is not None, running
        assert 1e6 < running["speed_bps"] < 2e7, running  # near the stand-in's 4 MB/s
        assert httpx.post(url + f"api/downloads/{job['id']}/cancel").status_code == 200
        cancelled = wait_job(url, job["id"])
        assert cancelled["state"] == "cancelled" and cancelled["bytes_done"] >= CHUNK, cancelled
        hub.rate = None
        job2 = httpx.post(url + "api/downloads", json={"model": "gpt2"}).json()
        done = wait_job(url, job2["id"])
        assert done["state"] == "done" and done["bytes_resumed"] == cancelled["bytes_done"], done
        assert sha256(cached_weights(tmp_path / "hf")) == sha256(hub_files / "model.safetensors")


def test_offline_fails_fast_with_a_message(tmp_path):
    with socket.socket() as s:  # a port nobody listens on: connections are refused, as offline
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with serve_with_hub(dead, tmp_path / "hf", "--model", "explainer-small", "--only") as url:
        t0 = time.monotonic()
        job = httpx.post(url + "api/downloads", json={"model": "gpt2"}).json()
        failed = wait_job(url, job["id"], timeout_s=20)
        assert failed["state"] == "failed" and failed["failure"] == "offline", failed
        assert "cannot be reached" in failed["error"] and time.monotonic() - t0 < 10


def test_only_allow_listed_models_and_not_on_an_exposed_server(tmp_path):
    with serve_with_hub("http://127.0.0.1:9", tmp_path / "hf", "--model", "explainer-small", "--only") as url:
        bad = httpx.post(url + "api/downloads", json={"model": "someone/some-repo"})
        assert bad.status_code == 404 and "not a model this server downloads" in bad.json()["detail"]
        assert httpx.post(url + "api/downloads/nope/cancel").status_code == 404


RESOLVE = "from transformer_explainer.loading.resolve import resolve; print(resolve('gpt2').folder)"


def test_a_first_use_download_killed_with_9_resumes_and_leaves_no_partial_file(hub_files, tmp_path):
    """What a request for a known model does on a server with API downloads, and what `--model gpt2`
    does on the command line (`resolve` with downloads allowed), killed with SIGKILL mid-transfer: the
    next attempt asks only for the rest, and no partial file is left once it is done."""
    import os
    import signal
    import subprocess
    import sys

    hub = StandInHub(REPO, hub_files)
    hub.rate = 4_000_000  # ~7 s for the weights
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    blobs = tmp_path / "hf" / "hub" / f"models--{REPO.replace('/', '--')}" / "blobs"
    with hub.running():
        env["HF_ENDPOINT"] = hub.url
        first = subprocess.Popen([sys.executable, "-c", RESOLVE], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 90
            while not any(p.stat().st_size >= CHUNK for p in blobs.glob("*.incomplete")):
                assert time.monotonic() < deadline and first.poll() is None
                time.sleep(0.05)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait()
        kept = sum(p.stat().st_size for p in blobs.glob("*.incomplete"))
        n_before = len(hub.weight_requests())
        hub.rate = None
        again = subprocess.run([sys.executable, "-c", RESOLVE], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    ranges = hub.weight_requests()[n_before:]
    assert ranges == [f"bytes={kept}-"], (ranges, kept)
    folder = Path(again.stdout.strip())
    assert sha256(folder / "model.safetensors") == sha256(hub_files / "model.safetensors")
    assert not list(blobs.glob("*.incomplete"))
