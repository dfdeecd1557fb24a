"""Steps per second of the induction run (`transformer-explainer train induction`), its two-layer model and the
one-layer control, at the defaults (width 64, 4 heads, batch 32 sequences of 48 tokens).

    nice .venv/bin/python benchmarks/induction.py [--steps 200] [--threads N]

"train" is the optimizer steps alone (the trainer's step: batch, forward, backward, clipping, AdamW); "record" is
one record (losses and head scores on the held-out sequences, the example's attention maps); "run" is whole steps
with a record every 50, as the CLI runs them.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from transformer_explainer.models.decoder import Decoder
from transformer_explainer.training.induction import InductionConfig, InductionTask, measure, train_induction
from transformer_explainer.training.trainer import TrainConfig, Trainer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = InductionConfig(steps=args.steps, record_every=50, checkpoint_every=10**4)
    print(f"torch threads {torch.get_num_threads()}, {args.steps} steps")
    for layers in (config.layers, 1):
        torch.manual_seed(0)
        model = Decoder(config.decoder_config(layers))
        task = InductionTask(config)
        with tempfile.TemporaryDirectory() as tmp:
            trainer = Trainer(model, task, TrainConfig(max_steps=args.steps, lr=config.lr), Path(tmp), progress=False)
            t = time.perf_counter()
            for _ in range(args.steps):
                trainer.train_step()
            train = args.steps / (time.perf_counter() - t)
        t = time.perf_counter()
        measure(model, task.heldout, task.example.ids[0])
        record = time.perf_counter() - t
        with tempfile.TemporaryDirectory() as tmp:
            layer_config = InductionConfig(layers=layers, steps=args.steps, record_every=50,
                                           checkpoint_every=10**4, control=False)
            t = time.perf_counter()
            train_induction(layer_config, Path(tmp))
            run = args.steps / (time.perf_counter() - t)
        print(f"{layers} layer{'s' if layers > 1 else ''}: train {train:.1f} steps/s, record {record * 1000:.0f} ms, "
              f"run {run:.1f} steps/s")


if __name__ == "__main__":
    main()
