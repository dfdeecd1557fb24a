"""A short training run started from the browser: a fresh tiny encoder-decoder learns a built-in task
in a background thread while the page watches its loss fall and its cross-attention sharpen.

At most one run per server process at a time (a second start is refused), capped in steps and wall
time, one torch thread, checkpoints only into a temporary folder that is removed when the run ends.
The run's events (start, step, snapshot, eval, done) are kept in order so that a client can join or
reconnect at any point and replay what it missed. Anyone may watch a run; only the client that
started it (its `owner`, as the server names clients) may stop it.
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import InputError
from ..training.live_run import LiveRunBase, LiveRuns, one_torch_thread
from ..training.trainer import TrainConfig, Trainer, TrainEvent
from .config import PRESETS
from .decoding import greedy_decode_batch
from .engine import Seq2SeqModel
from .model import EncoderDecoder
from .tasks import BUILTIN_TASKS, Seq2SeqTask, make_task
from .training import Seq2SeqTrainTask
from .vocab import BOS, EOS

log = logging.getLogger(__name__)

MAX_STEPS = 1500  # about two minutes of the tiny preset on one busy CPU thread
MAX_MINUTES = 4.0  # a hard stop whatever the step count
SNAPSHOTS = 40  # cross-attention snapshots per run, spread evenly over its steps
EVAL_SAMPLES = 100  # held-out pairs for exact match at each evaluation
DIGITS = 5


@dataclass(frozen=True)
class LiveConfig:
    task: str  # a built-in task
    steps: int = 400  # optimizer steps before the run ends by itself
    example: str | None = None  # the source whose cross-attention is watched; default: the task's first example
    preset: str = "tiny"  # model shape (PRESETS)
    batch_size: int = 32
    lr: float = 3e-3  # peak, after a linear warmup of a tenth of the steps, then cosine to lr / 30
    label_smoothing: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.task not in BUILTIN_TASKS:
            raise InputError(f"unknown task {self.task!r}; choose one of {', '.join(BUILTIN_TASKS)}",
                             code="s2s_unknown_task", task=self.task, tasks=", ".join(BUILTIN_TASKS))
        if not 1 <= self.steps <= MAX_STEPS:
            raise InputError(f"steps must be between 1 and {MAX_STEPS}, got {self.steps}", code="s2s_steps",
                             value=self.steps, max=MAX_STEPS)
        if self.preset not in PRESETS:
            raise InputError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")


def _round(x: float) -> float:
    return round(float(x), DIGITS) if math.isfinite(x) else float(x)


class LiveRun(LiveRunBase):
    """One run: a fresh model of the preset learning the task, snapshots of the example on the way."""

    def __init__(self, config: LiveConfig, owner: str | None = None) -> None:
        super().__init__(owner, "seq2seq-live")
        self.config = config
        self.task: Seq2SeqTask = make_task(config.task)
        example = config.example if config.example is not None else self.task.examples[0]
        reference = self.task.reference(example)
        if reference is None:
            raise InputError(f"the {config.task!r} task cannot work out the answer to {example!r}; "
                             "choose an input of the task's own kind as the example", code="s2s_example_unsolvable",
                             example=example)
        self.src_ids = self.task.src_vocab.encode(example, "example")
        if len(self.src_ids) > self.task.max_src_len:
            raise InputError(f"the example is {len(self.src_ids)} tokens long; the task allows "
                             f"{self.task.max_src_len}", code="s2s_example_too_long", tokens=len(self.src_ids),
                             limit=self.task.max_src_len)
        self.example, self.reference = example, reference
        self.gold_ids = self.task.tgt_vocab.encode(reference, "reference")
        self.step = 0
        self.started = time.time()
        self.model: Seq2SeqModel | None = None  # the trained model, once the run has ended
        self.workdir: Path | None = None  # the temporary folder of its checkpoints, while it runs

    def summary(self) -> dict[str, Any]:
        c = self.config
        return {"run": self.id, "task": c.task, "status": self.status, "step": self.step, "steps": c.steps,
                "example": self.example, "reference": self.reference, "preset": c.preset,
                "elapsed_s": round(time.time() - self.started, 1), "n_events": self.n_events}

    def _stopping(self) -> None:
        """Asked to stop: the trainer evaluates once more after its current step and ends."""
        if self.status == "running":
            self.status = "stopping"

    def _snapshot(self, net: EncoderDecoder, step: int) -> None:
        """The example's cross-attention under teacher forcing (rows: the reference tokens and the end
        token, columns: source tokens) and the model's own greedy answer, at this step."""
        was_training = net.training
        m = Seq2SeqModel.for_task(net, self.task)  # puts the net in eval mode
        try:
            tr = m.trace(self.src_ids, [BOS, *self.gold_ids])
            cross = [[[[round(v, 4) for v in row] for row in head] for head in layer]
                     for layer in tr.cross_attention().tolist()]  # (L, H, T, S)
            probs = tr.log_probs.exp()  # (T, V)
            gold_prob = [_round(probs[t, g]) for t, g in enumerate([*self.gold_ids, EOS])]
            out = greedy_decode_batch(net, torch.tensor([self.src_ids]), self.task.max_tgt_len + 8)[0]
        finally:
            net.train(was_training)
        self._emit("snapshot", step=step, cross_attn=cross, gold_prob=gold_prob,
                   output=self.task.tgt_vocab.decode(out), correct=out == self.gold_ids)

    def _main(self) -> None:
        with one_torch_thread():
            try:
                with tempfile.TemporaryDirectory(prefix="transformer-explainer-live-") as tmp:
                    self.workdir = Path(tmp)
                    self._train(self.workdir)
            except Exception as e:  # the page needs to hear that the run died, and why
                log.exception("live training run %s failed", self.id)
                self.status = "failed"
                self._emit("done", step=self.step, status="failed", message=f"{type(e).__name__}: {e}")

    def _train(self, tmp: Path) -> None:
        c = self.config
        task = self.task
        torch.manual_seed(c.seed)
        config = PRESETS[c.preset].with_vocab(len(task.src_vocab), len(task.tgt_vocab))
        net = EncoderDecoder(config)
        train_task = Seq2SeqTrainTask(task, c.batch_size, c.seed, c.label_smoothing, EVAL_SAMPLES)
        warmup = max(1, c.steps // 10)
        tcfg = TrainConfig(max_steps=c.steps, lr=c.lr, min_lr=c.lr / 30, warmup_steps=warmup, weight_decay=0.0,
                           betas=(0.9, 0.98), eval_interval=max(50, c.steps // 4),
                           checkpoint_interval=c.steps + 1,  # only the final one, into the temporary folder
                           max_minutes=MAX_MINUTES, seed=c.seed, schedule="cosine")
        every = max(1, c.steps // SNAPSHOTS)
        self._emit("start", run=self.id, task=c.task, steps=c.steps, example=self.example,
                   reference=self.reference, src_tokens=task.src_vocab.token_texts(self.src_ids),
                   rows=[*task.tgt_vocab.token_texts(self.gold_ids), "</s>"],
                   n_layers=config.n_decoder_layers, n_heads=config.n_head,
                   model={"n_encoder_layers": config.n_encoder_layers, "n_decoder_layers": config.n_decoder_layers,
                          "d_model": config.d_model, "n_head": config.n_head, "d_ff": config.d_ff,
                          "params": net.num_params()},
                   batch_size=c.batch_size, lr=c.lr, warmup=warmup, max_minutes=MAX_MINUTES)
        self._snapshot(net, 0)  # the untrained model: attention spread evenly

        def on_event(ev: TrainEvent) -> None:
            if ev.kind == "step":
                self.step = ev.step
                self._emit("step", step=ev.step, loss=_round(ev.metrics["loss"]), lr=_round(ev.metrics["lr"]))
                if ev.step % every == 0 and ev.step != c.steps:
                    self._snapshot(net, ev.step)
            elif ev.kind == "eval":
                self._emit("eval", step=ev.step, **{k: _round(v) for k, v in ev.metrics.items()})

        self.status = "running" if not self._stop.is_set() else "stopping"
        trainer = Trainer(net, train_task, tcfg, tmp / "checkpoints", callbacks=[on_event], progress=False,
                          should_stop=self._stop.is_set)
        state = trainer.fit()
        self._snapshot(net, state.step)
        net.eval()
        self.model = Seq2SeqModel.for_task(net, task)
        self.status = "stopped" if self._stop.is_set() else "finished"
        self._emit("done", step=state.step, status=self.status, elapsed_s=round(state.elapsed_s, 1),
                   **{k: _round(v) for k, v in state.last_eval.items()})


class LiveTraining(LiveRuns[LiveRun]):
    """The runs of one server process: at most one going at a time; the last one kept for replay (its events and
    model)."""

    def __init__(self, keep: int = 2) -> None:
        super().__init__(keep)

    def start(self, config: LiveConfig, owner: str | None = None) -> LiveRun:
        """Start a run (InputError for a bad example; TrainingBusy while another goes)."""
        return self._start(lambda: LiveRun(config, owner))

    def _busy(self, going: LiveRun) -> str:
        return (f"a training run is already going on this server (run {going.id}, {going.config.task}, step "
                f"{going.step} of {going.config.steps}); watch it, or try again when it ends (whoever started it "
                "can stop it)")
