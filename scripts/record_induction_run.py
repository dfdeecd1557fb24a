"""Record the induction run the package ships (src/transformer_explainer/builtin/induction-run/): the default run and
its one-layer control, trained with `transformer-explainer train induction`'s defaults but a record every 100 steps
and a checkpoint every 1000, so that the folder stays a few MB.

    nice .venv/bin/python scripts/record_induction_run.py [--out src/transformer_explainer/builtin/induction-run]

The folder holds settings.json and run.json (the settings, each run's milestones), and per run (main/, control/):
log.jsonl (every record), model/ (the final model, an HF folder the app opens); main/ also keeps
checkpoints/step-NNNNN/ (HF folders, all but the last, which is model/) to scrub back through.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
from pathlib import Path

from transformer_explainer.training.induction import SETTINGS, InductionConfig, train_induction

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "src" / "transformer_explainer" / "builtin" / "induction-run"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = InductionConfig(record_every=100, checkpoint_every=1000, seed=args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        result = train_induction(config, run, lambda name, r: logging.info(
            "%s step %d: first %.3f repeat %.3f best induction %.2f", name, r.step, r.first_loss, r.repeat_loss,
            r.best_induction))
        shutil.rmtree(args.out, ignore_errors=True)
        args.out.mkdir(parents=True)
        for f in (SETTINGS, "run.json"):
            shutil.copy(run / f, args.out / f)
        for name in result["runs"]:
            (args.out / name).mkdir()
            shutil.copy(run / name / "log.jsonl", args.out / name / "log.jsonl")
            shutil.copytree(run / name / "model", args.out / name / "model")
        final = f"step-{config.steps:05d}"  # the same weights as main/model
        shutil.copytree(run / "main" / "checkpoints", args.out / "main" / "checkpoints",
                        ignore=lambda folder, names: [n for n in names if n == final])
    print(result)


if __name__ == "__main__":
    main()
