"""`train seq2seq` survives kill -9: a run SIGKILLed at arbitrary moments (during a step, an
evaluation, or a checkpoint being written) and resumed each time ends with exactly the weights of
a run that was never interrupted. Dropout is on, so the random state must resume too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

# about 16 steps/s here: three runs, each killed within 1.5 s of its first checkpoint, make at most ~75 of them,
# which leaves room for a machine twice as fast (with 40 the run could finish before its third kill)
STEPS = 200
ARGS = ["--task", "reverse", "--preset", "tiny", "--dropout", "0.1", "--steps", str(STEPS), "--batch-size", "16",
        "--checkpoint-interval", "1", "--eval-interval", "15", "--eval-samples", "20", "--threads", "1",
        "--no-progress"]


def train(out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "transformer_explainer.cli", "train", "seq2seq", *ARGS,
                             "--out", str(out)], env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def latest(out: Path) -> str | None:
    try:
        return (out / "checkpoints" / "latest").read_text()
    except OSError:
        return None


@pytest.mark.slow
def test_kill_9_then_resume_ends_with_the_uninterrupted_weights(tmp_path: Path):
    killed, ref = tmp_path / "killed", tmp_path / "ref"
    rng = np.random.default_rng(0)
    kills = 0
    for _ in range(3):
        before = latest(killed)
        p = train(killed)
        deadline = time.monotonic() + 180
        while latest(killed) == before and p.poll() is None:  # it has made progress since the last kill
            assert time.monotonic() < deadline, "no checkpoint within 3 minutes"
            time.sleep(0.05)
        time.sleep(float(rng.random()) * 1.5)  # then somewhere in a step, an evaluation or a save
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
    assert kills == 3, "the run finished before it was killed three times; give it more steps"
    resumed_from = int(latest(killed).removeprefix("ckpt-"))
    assert 0 < resumed_from < STEPS

    finish = train(killed)
    err = finish.communicate(timeout=600)[1]
    assert finish.returncode == 0 and f"resuming {killed} at step {resumed_from}" in err, err
    uninterrupted = train(ref)
    err_ref = uninterrupted.communicate(timeout=600)[1]
    assert uninterrupted.returncode == 0 and "resuming" not in err_ref, err_ref

    a, b = load_file(killed / "model" / "model.safetensors"), load_file(ref / "model" / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert latest(killed) == latest(ref) == f"ckpt-{STEPS:08d}"
