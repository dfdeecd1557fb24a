"""The trainer: loss goes down, checkpoints are atomic, and a resumed run continues exactly."""

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

from transformer_explainer.config import DecoderConfig
from transformer_explainer.errors import CheckpointError
from transformer_explainer.models.decoder import Decoder
from transformer_explainer.training.lm import LMTask, evaluate_lm
from transformer_explainer.training.trainer import TrainConfig, Trainer

CFG = DecoderConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)


def make_task(seed: int = 0) -> LMTask:
    rng = np.random.default_rng(seed)
    # a learnable sequence: a repeating pattern with a little noise
    base = np.tile(np.arange(20) % 64, 400)
    noise = rng.integers(0, 64, size=base.shape)
    ids = np.where(rng.random(base.shape) < 0.05, noise, base).astype(np.uint16)
    return LMTask(ids[:7000], ids[7000:], np.ones(64, dtype=np.int64), block_size=16, batch_size=8,
                  seed=seed, eval_tokens=512)


def make_trainer(out: Path, steps: int, **kw) -> Trainer:
    torch.manual_seed(0)
    model = Decoder(CFG)
    cfg = TrainConfig(max_steps=steps, lr=3e-3, warmup_steps=5, eval_interval=10, checkpoint_interval=5, **kw)
    return Trainer(model, make_task(), cfg, out, progress=False)


def test_capped_evaluation_spreads_over_the_whole_set():
    torch.manual_seed(0)
    model = Decoder(CFG)
    B = CFG.block_size
    ids = np.array([3] * (5 * B) + [7] * (5 * B + 1), dtype=np.uint16)  # two "sources", one after the other
    ones = np.ones(64, dtype=np.int64)
    first = evaluate_lm(model, ids[: 5 * B + 1], ones, B)["loss"]
    second = evaluate_lm(model, ids[5 * B :], ones, B)["loss"]
    capped = evaluate_lm(model, ids, ones, B, max_tokens=4 * B)
    assert capped["tokens"] == 4 * B
    lo, hi = sorted((first, second))
    assert hi - lo > 0.01
    assert lo + 0.2 * (hi - lo) < capped["loss"] < hi - 0.2 * (hi - lo)  # windows from both halves are in it
    assert evaluate_lm(model, ids, ones, B, max_tokens=100 * B) == evaluate_lm(model, ids, ones, B)


def test_loss_goes_down(tmp_path: Path):
    tr = make_trainer(tmp_path, 60)
    before = tr.evaluate()["val_loss"]
    state = tr.fit()
    assert state.step == 60
    assert state.last_eval["val_loss"] < before - 1.0
    assert state.tokens == 60 * 8 * 16


def test_resume_continues_exactly(tmp_path: Path):
    ref = make_trainer(tmp_path / "ref", 20)
    ref.fit()

    stop_at = {"n": 0}

    def stop() -> bool:
        stop_at["n"] += 1
        return stop_at["n"] >= 12

    first = make_trainer(tmp_path / "run", 20)
    first.should_stop = stop
    first.fit()
    assert first.state.step == 12
    opt_state = {k: v.clone() for k, v in first.optimizer.state_dict()["state"][0].items() if torch.is_tensor(v)}

    second = make_trainer(tmp_path / "run", 20)
    assert second.resume() and second.state.step == 12
    for k, v in second.optimizer.state_dict()["state"][0].items():
        if torch.is_tensor(v):
            assert torch.equal(v, opt_state[k])
    second.fit()
    assert second.state.step == 20
    for (n, a), (_, b) in zip(ref.model.state_dict().items(), second.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), n


def test_only_complete_checkpoints_are_used(tmp_path: Path):
    tr = make_trainer(tmp_path, 10)
    tr.fit()
    ckpts = list(tmp_path.glob("ckpt-*"))
    assert [c.name for c in ckpts] == ["ckpt-00000010"]
    (tmp_path / ".ckpt-00000015.partial").mkdir()  # what a kill during a save leaves
    tr2 = make_trainer(tmp_path, 20)
    assert tr2.resume() and tr2.state.step == 10
    # a corrupt checkpoint is reported, not half-loaded
    (tmp_path / "ckpt-00000010" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="corrupt"):
        make_trainer(tmp_path, 20).resume()


KILL_SCRIPT = """
import sys, pathlib
sys.path.insert(0, {root!r})
from tests.unit.test_trainer import make_trainer
tr = make_trainer(pathlib.Path({out!r}), 400)
tr.config = type(tr.config)(**{{**tr.config.__dict__, "checkpoint_interval": 1}})
tr.resume()
tr.fit()
"""


@pytest.mark.slow
def test_kill_9_then_resume(tmp_path: Path):
    """SIGKILL a training process at arbitrary moments; each resume continues exactly."""
    root = str(Path(__file__).resolve().parents[2])
    out = tmp_path / "run"
    script = KILL_SCRIPT.format(root=root, out=str(out))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rng = np.random.default_rng(0)

    def saved_step() -> int:  # the newest complete checkpoint's step (a save in progress is a hidden .partial)
        return max((int(c.name.split("-")[1]) for c in out.glob("ckpt-*")), default=0)

    for _ in range(3):
        before = saved_step()
        p = subprocess.Popen([sys.executable, "-c", script], env=env)
        # kill once the run has made progress of its own (however slow the machine), at a random moment after
        deadline = time.monotonic() + 300
        while saved_step() <= before and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(float(rng.random()) * 0.5)
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert saved_step() > before, "the training process saved no checkpoint before it was killed"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same kernels as the killed runs, so the same bits
    try:
        tr = make_trainer(out, 400)
        assert tr.resume()
        resumed_at = tr.state.step
        assert resumed_at > 0
        # rerun from scratch to the same step, then compare weights exactly
        ref = make_trainer(tmp_path / "ref", 400)
        ref.should_stop = lambda: ref.state.step >= resumed_at
        ref.fit()
    finally:
        torch.set_num_threads(threads)
    for (n, a), (_, b) in zip(ref.model.state_dict().items(), tr.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), n
