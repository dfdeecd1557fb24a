"""Training through the shared Trainer: batches, exact resume, and a tiny model that learns `reverse`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from transformer_explainer.seq2seq.config import PRESETS
from transformer_explainer.seq2seq.model import EncoderDecoder
from transformer_explainer.seq2seq.tasks import ReverseTask
from transformer_explainer.seq2seq.training import Seq2SeqTrainTask, exact_match
from transformer_explainer.seq2seq.vocab import BOS, EOS, PAD
from transformer_explainer.training.trainer import TrainConfig, Trainer

TASK = ReverseTask(max_len=6, alphabet="abcdefghij")


def _net(seed: int = 0) -> EncoderDecoder:
    torch.manual_seed(seed)
    return EncoderDecoder(PRESETS["tiny"].with_vocab(len(TASK.src_vocab), len(TASK.tgt_vocab)))


def test_batches_shift_the_target_behind_the_start_token():
    tt = Seq2SeqTrainTask(TASK, batch_size=8, seed=3, eval_samples=10)
    b = tt.batch(5)
    assert torch.equal(b.src, tt.batch(5).src) and not torch.equal(b.src, tt.batch(6).src)  # a function of step
    assert (b.tgt[:, 0] == BOS).all()
    for row_in, row_y in zip(b.tgt.tolist(), b.tgt_y.tolist(), strict=True):
        n = row_y.index(EOS)
        assert row_in[1 : n + 1] == row_y[:n]  # decoder input = labels shifted right
        assert all(t == PAD for t in row_y[n + 1 :])
    assert b.ntokens == int((b.tgt_y != PAD).sum()) == tt.batch_tokens(b)
    assert b.tgt_mask.shape == (8, b.tgt.size(1), b.tgt.size(1))


def _config(**kw) -> TrainConfig:
    return TrainConfig(**{"max_steps": 12, "lr": 2e-3, "warmup_steps": 4, "weight_decay": 0.0, "betas": (0.9, 0.98),
                          "eval_interval": 6, "checkpoint_interval": 6, "schedule": "inverse_sqrt", **kw})


def test_resume_continues_with_identical_optimizer_state(tmp_path: Path):
    tt = Seq2SeqTrainTask(TASK, batch_size=8, seed=1, eval_samples=8)
    straight = _net()
    Trainer(straight, tt, _config(), tmp_path / "a", progress=False).fit()

    first = _net()
    t1 = Trainer(first, tt, _config(), tmp_path / "b", progress=False, should_stop=lambda: t1.state.step >= 7)
    t1.fit()
    assert t1.state.step == 7
    second = _net(seed=99)  # different initial weights: everything must come from the checkpoint
    t2 = Trainer(second, tt, _config(), tmp_path / "b", progress=False)
    assert t2.resume() and t2.state.step == 7
    for g1, g2 in zip(t1.optimizer.state_dict()["state"].values(), t2.optimizer.state_dict()["state"].values(),
                      strict=True):
        assert g1["step"] == g2["step"]
        assert torch.equal(g1["exp_avg"], g2["exp_avg"]) and torch.equal(g1["exp_avg_sq"], g2["exp_avg_sq"])
    for p1, p2 in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(p1, p2)
    t2.fit()
    for (name, p), q in zip(straight.named_parameters(), second.parameters(), strict=True):
        assert torch.equal(p, q), name  # the interrupted run ends exactly where the straight one does


@pytest.mark.slow
def test_tiny_model_learns_reverse(tmp_path: Path):
    """The smallest honest training test: a 2+2-layer, d_model 64 model reverses unseen strings."""
    tt = Seq2SeqTrainTask(TASK, batch_size=32, seed=0, eval_samples=200)
    net = _net()
    before = exact_match(net, TASK, tt.eval_pairs, 10)
    cfg = TrainConfig(max_steps=600, lr=3e-3, min_lr=1e-4, warmup_steps=50, weight_decay=0.0, betas=(0.9, 0.98),
                      eval_interval=600, checkpoint_interval=10**9)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: one thread is as fast, and kinder to a shared machine
    try:
        state = Trainer(net, tt, cfg, tmp_path, progress=False).fit()
    finally:
        torch.set_num_threads(threads)
    assert before < 0.05
    assert state.last_eval["exact_match"] >= 0.95, state.last_eval
    fresh = TASK.samples(200, seed=123)  # other held-out strings than the validation ones
    assert exact_match(net, TASK, fresh, 10) >= 0.95
