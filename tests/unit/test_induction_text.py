"""The induction run on text (training/induction_text.py): its records' role scores are the Experiments area's head
roles (analysis/roles.py) of the model it saves, computed independently from the saved folder; same seed, same log;
an interrupted run resumes to the same log; bad settings get one sentence. The shipped recorded run's last record is
what its model gives. A tiny corpus written here (the real one is not in CI)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from transformer_explainer.analysis.roles import ROLES, reference_head_roles
from transformer_explainer.engine import load_model
from transformer_explainer.errors import InputError
from transformer_explainer.loading.resolve import builtin_root
from transformer_explainer.training.induction_text import (
    MODEL_NAME,
    TextRunConfig,
    best,
    summary,
    train_text_run,
)

TINY = TextRunConfig(width=16, heads=2, steps=6, batch=2, seq_len=32, record_every=3, checkpoint_every=3,
                     heldout_tokens=64)
SHIPPED = builtin_root() / MODEL_NAME

TEXT = (
    "The cat sat on the mat, and then the cat went to sleep on the mat. Alice gave Bob a book. Later that "
    "evening, Bob gave Alice a pen. Water boils at one hundred degrees at sea level; the river runs to the sea.\n\n"
    "When Mary and John went to the store, John gave a drink to Mary. The meeting is on Monday. I repeat: the "
    "meeting is on Monday. In 1969 two astronauts walked on the Moon while a third stayed in orbit.\n\n"
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "train.txt").write_text(TEXT * 8)
    (folder / "valid.txt").write_text(TEXT[::-1][:400].strip() + "\n\n" + TEXT[:300])
    return folder


def _without_time(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "elapsed_s"} for r in records]


def _log(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


def _assert_roles_equal(recorded: dict[str, list[list[float | None]]], scores: dict, tol: float) -> None:
    for role in ROLES:
        want = scores[role].tolist()
        for row_r, row_w in zip(recorded[role], want, strict=True):
            for r, w in zip(row_r, row_w, strict=True):
                if math.isnan(w):
                    assert r is None
                else:
                    assert r == pytest.approx(w, abs=tol), role


def test_records_are_the_head_roles_of_the_saved_model(corpus: Path, tmp_path: Path) -> None:
    result = train_text_run(TINY, corpus, tmp_path / "run")
    records = _log(tmp_path / "run")
    assert [r["step"] for r in records] == [0, 3, 6]
    assert records[0]["train_loss"] is None and all(r["train_loss"] is not None for r in records[1:])
    assert records[-1]["tokens"] == 6 * TINY.batch * TINY.seq_len
    # independently: the saved HF folder, opened as the app opens a model, scored by analysis/roles.py
    model = load_model(str(tmp_path / "run" / "model"))
    roles = reference_head_roles(model)
    _assert_roles_equal(records[-1]["roles"], roles.scores, 1e-4)
    assert result["summary"] == summary(records)
    assert set(records[-1]["roles"]) == set(ROLES)


def test_same_seed_same_log_and_resume(corpus: Path, tmp_path: Path) -> None:
    train_text_run(TINY, corpus, tmp_path / "a")
    calls = {"n": 0}

    def stop_after_first_steps() -> bool:  # the trainer asks after every step
        calls["n"] += 1
        return calls["n"] == 3

    train_text_run(TINY, corpus, tmp_path / "b", should_stop=stop_after_first_steps)
    assert [r["step"] for r in _log(tmp_path / "b")] == [0, 3]
    train_text_run(TINY, corpus, tmp_path / "b")  # resumes from its checkpoint at step 3
    assert _without_time(_log(tmp_path / "b")) == _without_time(_log(tmp_path / "a"))


@pytest.mark.parametrize(("config", "words"), [
    (TextRunConfig(width=30, heads=4), "width 30 must split into 4 heads"),
    (TextRunConfig(width=36, heads=4), "even size"),
    (TextRunConfig(steps=0), "steps must be a whole number from 1 to 200000, got 0"),
    (TextRunConfig(lr=float("nan")), "lr must be a number"),
])
def test_bad_settings_get_one_sentence(config: TextRunConfig, words: str, corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=words):
        train_text_run(config, corpus, tmp_path / "bad")


def test_a_folder_without_the_corpus_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="must hold train.txt and valid.txt"):
        train_text_run(TINY, tmp_path, tmp_path / "out")


def test_a_folder_of_another_run_is_refused(corpus: Path, tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "settings.json").write_text(json.dumps({"width": 999}))
    with pytest.raises(InputError, match="another configuration"):
        train_text_run(TINY, corpus, tmp_path / "run")


def test_shipped_run_last_record_is_its_model() -> None:
    """The shipped log's last record: the head roles of the shipped model, recomputed; run.json's summary is the
    log's."""
    records = _log(SHIPPED)
    run = json.loads((SHIPPED / "run.json").read_text())
    assert run["summary"] == summary(records)
    assert records[-1]["step"] == run["summary"]["steps"]
    model = load_model(str(SHIPPED / "model"))
    _assert_roles_equal(records[-1]["roles"], reference_head_roles(model).scores, 2e-3)
    assert best(records[-1], "previous_token")[0] > best(records[0], "previous_token")[0]


def test_route_answers_the_shipped_run(tiny_model) -> None:
    from fastapi.testclient import TestClient

    from transformer_explainer.server import create_app
    from transformer_explainer.server.app import ServerSettings

    app = create_app({"tiny": tiny_model}, ServerSettings(live_training=False))
    try:
        r = TestClient(app).get("/api/induction/text-run")
    finally:
        app.state.inductions.shutdown()
    assert r.status_code == 200
    body = r.json()
    run = json.loads((SHIPPED / "run.json").read_text())
    assert body["records"] == _log(SHIPPED)
    assert body["config"] == run["config"] and body["summary"] == run["summary"]
    assert body["model"] is None  # this app offers only the tiny model


def test_the_shipped_text_runs_model_opens_in_the_app() -> None:
    from transformer_explainer.server.registry import ModelRegistry

    reg = ModelRegistry(default=MODEL_NAME)
    reg.discover()
    assert reg.has_files(MODEL_NAME)
    trace = reg.get(MODEL_NAME).trace("The cat sat on the mat.")
    assert trace.config.n_layer == 2 and trace.config.model_type == "llama"
