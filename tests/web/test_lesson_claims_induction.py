"""Every sentence of the induction lesson ("Watch it learn") that depends on the data holds for the records beside it:
on the shipped recorded run (its two-layer run, where the induction score passes 0.5 at step 1,300, before any
previous-token score does at 1,500, and its one-layer control, which never gets there), on every prefix of both (a
live run as it goes), and on a short run trained here, in which no head forms. The checks are TypeScript (vitest,
web/tests/lessons/induction.test.ts): they run the lesson's own code on the page's state and test each claim against
the records as the log files hold them (web/tests/lessons/claims.induction.ts)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from transformer_explainer.training.induction import (
    SETTINGS,
    InductionConfig,
    example_sequence,
    read_log,
    text_of,
    train_induction,
)

from .test_lesson_claims import passed, vitest

SHIPPED = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "builtin" / "induction-run"


def run_of(name: str, folder: Path) -> dict:
    config = InductionConfig(**json.loads((folder / SETTINGS).read_text()))
    ex = example_sequence(config)
    control = folder / "control" / "log.jsonl"
    return {"name": name, "config": asdict(config),
            "example": {"tokens": text_of(config, ex.ids[0]).split(" "), "prefix": int(ex.start[0]),
                        "segment": int(ex.length[0])},
            "main": read_log(folder / "main" / "log.jsonl"), "control": read_log(control) if control.is_file() else []}


def test_every_claim_holds_on_the_shipped_run_and_a_short_one(tmp_path: Path) -> None:
    # a short run: neither head forms, and the losses stay at the even guess (40 steps of each model, width 16)
    short = InductionConfig(steps=40, width=16, heads=4, record_every=10, checkpoint_every=40, heldout=64)
    train_induction(short, tmp_path / "short")
    runs = [run_of("shipped", SHIPPED), run_of("short", tmp_path / "short")]
    assert runs[0]["main"] and runs[0]["control"] and runs[1]["main"] and runs[1]["control"]
    file = tmp_path / "runs.json"
    file.write_text(json.dumps(runs))
    r = vitest("tests/lessons/induction.test.ts", env={"TE_INDUCTION_RUNS": str(file)})
    assert r.returncode == 0, r.stdout[-12000:] + r.stderr[-4000:]
    assert passed(r) == 1, r.stdout[-4000:]
