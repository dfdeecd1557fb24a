"""A model-agnostic training loop: AdamW, warmup + cosine schedule, gradient clipping, periodic
evaluation, atomic checkpoints and exact resume.

What is specific to a model lives in a `TrainTask` (how to make batch `step`, its loss, and how to
evaluate). Batches are a pure function of the step number, so a resumed run sees exactly the data
that an uninterrupted one would have seen.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load_model, save_model
from torch import Tensor, nn

from ..errors import CheckpointError
from ..loading.checkpoint import atomic_write_bytes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainConfig:
    max_steps: int = 1000  # optimizer steps in the whole run
    lr: float = 1e-3  # peak learning rate, reached after warmup
    min_lr: float = 1e-4  # floor of the cosine decay
    warmup_steps: int = 100  # linear warmup from 0
    weight_decay: float = 0.1  # AdamW decay, on matrices only
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    eval_interval: int = 200  # evaluate every this many steps (and at the end)
    checkpoint_interval: int = 200  # checkpoint every this many steps (and at the end)
    max_minutes: float | None = None  # stop cleanly, with a checkpoint, after this wall time
    seed: int = 1337
    schedule: str = "cosine"  # "cosine" or "inverse_sqrt" (the 2017 paper's "noam" schedule)

    def lr_at(self, step: int) -> float:
        if self.warmup_steps and step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        if self.schedule == "inverse_sqrt":
            return max(self.min_lr, self.lr * math.sqrt(max(self.warmup_steps, 1) / (step + 1)))
        span = max(1, self.max_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1 + math.cos(math.pi * progress))


class TrainTask(Protocol):
    """The model-specific part of training."""

    def batch(self, step: int) -> Any:
        """The batch for optimizer step `step`: deterministic in `step`."""

    def loss(self, model: nn.Module, batch: Any) -> Tensor:
        """Mean training loss of `batch` (teacher forcing: all positions at once)."""

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Held-out metrics; called with the model in eval mode under no_grad."""

    def batch_tokens(self, batch: Any) -> int:
        """Number of target tokens in `batch`, for the tokens-per-second figure."""


@dataclass
class TrainEvent:
    kind: str  # "step", "eval", "checkpoint" or "done"
    step: int
    metrics: dict[str, float] = field(default_factory=dict)


Callback = Callable[[TrainEvent], None]


@dataclass
class TrainState:
    step: int = 0  # optimizer steps completed
    tokens: int = 0
    elapsed_s: float = 0.0
    last_eval: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)  # eval metrics with their step


class Trainer:
    def __init__(self, model: nn.Module, task: TrainTask, config: TrainConfig, out_dir: Path,
                 callbacks: list[Callback] | None = None, progress: bool = True,
                 should_stop: Callable[[], bool] | None = None) -> None:
        self.model = model
        self.task = task
        self.config = config
        self.out_dir = Path(out_dir)
        self.callbacks = callbacks or []
        self.progress = progress
        self.should_stop = should_stop or (lambda: False)
        decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=config.lr, betas=config.betas,
        )
        self.state = TrainState()

    # -- checkpoints -------------------------------------------------------------------------------

    @property
    def latest_file(self) -> Path:
        return self.out_dir / "latest"

    def save_checkpoint(self) -> Path:
        """Write `ckpt-<step>/` completely, then switch the `latest` pointer to it in one rename.
        A kill at any moment leaves the previous checkpoint intact and pointed to."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        name = f"ckpt-{self.state.step:08d}"
        final = self.out_dir / name
        tmp = self.out_dir / f".{name}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_model(self.model, str(tmp / "model.safetensors"))
        torch.save({"optimizer": self.optimizer.state_dict(), "torch_rng": torch.get_rng_state()},
                   tmp / "optimizer.pt")
        meta = {"state": asdict(self.state), "config": asdict(self.config)}
        (tmp / "state.json").write_text(json.dumps(meta, indent=1))
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        atomic_write_bytes(self.latest_file, name.encode())
        for old in self.out_dir.glob("ckpt-*"):  # keep only the one pointed to
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)
        self._emit(TrainEvent("checkpoint", self.state.step))
        return final

    def latest_checkpoint(self) -> Path | None:
        if not self.latest_file.is_file():
            return None
        path = self.out_dir / self.latest_file.read_text().strip()
        if not path.is_dir():
            raise CheckpointError(f"{self.latest_file} points to {path.name}, which is missing")
        return path

    def resume(self) -> bool:
        """Load the latest checkpoint if there is one; True if training continues from it."""
        path = self.latest_checkpoint()
        if path is None:
            return False
        try:
            load_model(self.model, str(path / "model.safetensors"))
            opt = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
            meta = json.loads((path / "state.json").read_text())
        except Exception as e:
            raise CheckpointError(f"checkpoint {path} is corrupt or truncated: {e}") from None
        self.optimizer.load_state_dict(opt["optimizer"])
        torch.set_rng_state(opt["torch_rng"])
        self.state = TrainState(**meta["state"])
        log.info("resumed from %s at step %d", path, self.state.step)
        return True

    # -- loop --------------------------------------------------------------------------------------

    def _emit(self, event: TrainEvent) -> None:
        for cb in self.callbacks:
            cb(event)

    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        with torch.no_grad():
            metrics = self.task.evaluate(self.model)
        self.model.train()
        self.state.last_eval = metrics
        self.state.history.append({"step": self.state.step, **metrics})
        self._emit(TrainEvent("eval", self.state.step, metrics))
        log.info("step %d eval %s", self.state.step, {k: round(v, 4) for k, v in metrics.items()})
        return metrics

    def train_step(self) -> float:
        cfg = self.config
        batch = self.task.batch(self.state.step)
        lr = cfg.lr_at(self.state.step)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        loss = self.task.loss(self.model, batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.optimizer.step()
        self.state.step += 1
        self.state.tokens += self.task.batch_tokens(batch)
        return loss.item()

    def fit(self) -> TrainState:
        cfg = self.config
        self.model.train()
        from tqdm import tqdm

        bar = tqdm(total=cfg.max_steps, initial=self.state.step, disable=not self.progress, unit="step",
                   dynamic_ncols=True)
        t0, tokens0, elapsed0 = time.perf_counter(), self.state.tokens, self.state.elapsed_s
        stopped = False
        while self.state.step < cfg.max_steps:
            loss = self.train_step()
            now = time.perf_counter()
            self.state.elapsed_s = elapsed0 + now - t0
            tps = (self.state.tokens - tokens0) / max(now - t0, 1e-9)
            metrics = {"loss": loss, "lr": cfg.lr_at(self.state.step - 1), "tokens_per_s": tps}
            self._emit(TrainEvent("step", self.state.step, metrics))
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tps:.0f}")
            if not self.progress and self.state.step % 50 == 0:
                log.info("step %d loss %.4f lr %.2e %.0f tokens/s", self.state.step, loss, metrics["lr"], tps)
            out_of_time = cfg.max_minutes is not None and (now - t0) > cfg.max_minutes * 60
            stopped = out_of_time or self.should_stop()
            last = self.state.step == cfg.max_steps or stopped
            if self.state.step % cfg.eval_interval == 0 or last:
                self.evaluate()
            if self.state.step % cfg.checkpoint_interval == 0 or last:
                self.save_checkpoint()
            if stopped:
                break
        bar.close()
        self._emit(TrainEvent("done", self.state.step, dict(self.state.last_eval)))
        return self.state
