"""`transformer-explainer train induction` (issue 36): the two-layer run at its defaults forms an induction head and
the one-layer control does not, checked independently (transformers' LlamaForCausalLM on the saved folder, on
sequences made here, scores written out here); the saved folder opens in the app; bad settings are one sentence;
the run is reproducible by seed; the recorded run the package ships replays the same numbers as its log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_explainer.cli import main
from transformer_explainer.errors import InputError
from transformer_explainer.training.induction import (
    SETTINGS,
    InductionConfig,
    measure_folder,
    read_log,
    train_induction,
)

SHIPPED = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "builtin" / "induction-run"


def sequences(n: int, vocab: int, T: int, seg: tuple[int, int], seed: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """New sequences, drawn here: distinct symbols but for one segment repeated at once after a random prefix."""
    rng = np.random.default_rng(seed)
    out, spans = [], []
    for _ in range(n):
        L = int(rng.integers(seg[0], seg[1] + 1))
        s = int(rng.integers(1, T - 2 * L + 1))
        toks = rng.choice(vocab, size=T - L, replace=False)
        out.append(np.concatenate([toks[: s + L], toks[s : s + L], toks[s + L :]]))
        spans.append((s, L))
    return np.stack(out), spans


def independent_scores(folder: Path, config: InductionConfig, seed: int = 7) -> dict[str, float]:
    """Losses and the best head scores of a saved model, by transformers (eager attention) on new sequences."""
    from transformers import LlamaForCausalLM

    lm = LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    ids, spans = sequences(200, config.vocab, config.seq_len, (config.min_segment, config.max_segment), seed)
    with torch.no_grad():
        out = lm(torch.from_numpy(ids), output_attentions=True)
    logp = torch.log_softmax(out.logits.double(), dim=-1)
    first, repeat, induction, previous = [], [], [], []
    for b, (s, L) in enumerate(spans):
        for j in range(L - 1):  # the token at s+j+1 (first time) and at s+L+j+1 (its repeat)
            first.append(-logp[b, s + j, ids[b, s + j + 1]].item())
            repeat.append(-logp[b, s + L + j, ids[b, s + L + j + 1]].item())
    for layer in out.attentions:  # (B, H, T, T)
        per_head = [[layer[b, :, s + L + j, s + j + 1] for j in range(L - 1)] for b, (s, L) in enumerate(spans)]
        induction.append(torch.stack([x for row in per_head for x in row]).mean(0))
        t = torch.arange(1, ids.shape[1])
        previous.append(layer[:, :, t, t - 1].mean(dim=(0, 2)))
    return {"first_loss": float(np.mean(first)), "repeat_loss": float(np.mean(repeat)),
            "induction": float(torch.stack(induction).max()), "previous_token": float(torch.stack(previous).max())}


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("induction")
    return out, train_induction(InductionConfig(), out)


@pytest.mark.slow
def test_two_layers_form_an_induction_head_and_one_layer_does_not(default_run: tuple[Path, dict]) -> None:
    out, result = default_run
    config = InductionConfig()
    main_run = independent_scores(out / "main" / "model", config)
    control = independent_scores(out / "control" / "model", config)
    assert main_run["repeat_loss"] < main_run["first_loss"] / 3, main_run
    assert main_run["induction"] >= 0.5, main_run
    assert main_run["previous_token"] >= 0.5, main_run  # the head the induction head reads from
    assert control["repeat_loss"] >= control["first_loss"] / 3, control
    assert control["induction"] < 0.5, control
    # the run's own records and milestones say the same
    runs = result["runs"]
    assert runs["main"]["induction_head"] is not None and runs["control"]["induction_head"] is None
    assert runs["main"]["repeat_loss_third"] is not None and runs["control"]["repeat_loss_third"] is None
    log = read_log(out / "main" / "log.jsonl")
    assert [r["step"] for r in log] == list(range(0, config.steps + 1, config.record_every))
    assert abs(log[-1]["repeat_loss"] - main_run["repeat_loss"]) < 0.25  # other sequences, the same model
    assert len(log[-1]["example_attention"]) == 2 and len(log[-1]["example_attention"][0]) == config.heads
    steps = sorted(p.name for p in (out / "main" / "checkpoints").iterdir())
    assert steps == [f"step-{s:05d}" for s in range(0, config.steps + 1, config.checkpoint_every)]


@pytest.mark.slow
def test_the_saved_model_opens_in_the_app(default_run: tuple[Path, dict], capsys: pytest.CaptureFixture) -> None:
    from transformer_explainer import load_model

    out, _ = default_run
    model = load_model(str(out / "main" / "model"), allow_download=False)
    text = "K Q z 3 a b c d e f g h i j a b c d e f"
    trace = model.trace(text)
    assert trace.tokens == text.split(" ")
    assert main(["explain", text, "--model", str(out / "main" / "model"), "--json", "--top", "1"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["top"][0]["token"] == "g"  # "a b c d e f" was followed by g the first time: the copy is g


@pytest.mark.parametrize(("settings", "words"), [
    ({"steps": 0}, "steps must be a whole number from 1 to 20000"),
    ({"width": 8}, "width must be a whole number from 16 to 256"),
    ({"lr": 1.0}, "lr must be a number from 1e-05 to 0.1"),
    ({"lr": float("nan")}, "lr must be a number"),
    ({"steps": 2.5}, "steps must be a whole number"),
    ({"width": 66, "heads": 4}, "width 66 is not a multiple of heads 4"),
    ({"family": "gpt2"}, "builds a llama-family decoder"),
])
def test_bad_settings_are_one_sentence(settings: dict, words: str, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(".", r"\.")):
        train_induction(InductionConfig(**settings), tmp_path)


@pytest.mark.parametrize(("argv", "words"), [
    (["--steps", "0"], "--steps: must be a whole number from 1 to 20000, got 0"),
    (["--width", "4096"], "--width: must be a whole number from 16 to 256, got 4096"),
    (["--lr", "2"], "--lr: must be a number from 1e-05 to 0.1, got 2"),
    (["--lr", "inf"], "--lr: must be a finite number"),
    (["--width", "40", "--heads", "3"], "width 40 is not a multiple of heads 3"),
])
def test_bad_cli_input_is_one_line(argv: list[str], words: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture) -> None:
    assert main(["train", "induction", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
    assert not (tmp_path / "main").exists()


def test_same_seed_same_run(tmp_path: Path) -> None:
    config = InductionConfig(steps=12, record_every=4, checkpoint_every=12, control=False, heldout=16)
    a = train_induction(config, tmp_path / "a")
    b = train_induction(config, tmp_path / "b")
    logs = [[{k: v for k, v in r.items() if k != "elapsed_s"} for r in read_log(tmp_path / x / "main" / "log.jsonl")]
            for x in "ab"]
    assert logs[0] == logs[1] and len(logs[0]) == 4
    assert a["runs"]["main"]["final_repeat_loss"] == b["runs"]["main"]["final_repeat_loss"]
    c = train_induction(InductionConfig(steps=12, record_every=4, checkpoint_every=12, control=False, heldout=16,
                                        seed=1), tmp_path / "c")
    assert c["runs"]["main"]["final_repeat_loss"] != a["runs"]["main"]["final_repeat_loss"]


def test_a_stopped_run_resumes_where_it_stopped(tmp_path: Path) -> None:
    config = InductionConfig(steps=12, record_every=4, checkpoint_every=4, control=False, heldout=16)
    whole = train_induction(config, tmp_path / "whole")
    calls = iter(range(100))
    train_induction(config, tmp_path / "part", should_stop=lambda: next(calls) >= 5)  # stops after step 6
    assert read_log(tmp_path / "part" / "main" / "log.jsonl")[-1]["step"] < 12
    resumed = train_induction(config, tmp_path / "part")
    drop = {"elapsed_s"}
    logs = [[{k: v for k, v in r.items() if k not in drop} for r in read_log(tmp_path / x / "main" / "log.jsonl")]
            for x in ("whole", "part")]
    assert [r["step"] for r in logs[1]] == [0, 4, 6, 8, 12]  # the stopped run recorded where it stopped
    assert logs[1][-1]["repeat_loss"] == pytest.approx(logs[0][-1]["repeat_loss"], abs=1e-5)
    assert resumed["runs"]["main"]["steps"] == whole["runs"]["main"]["steps"] == 12


def test_another_config_in_the_same_folder_is_refused(tmp_path: Path) -> None:
    train_induction(InductionConfig(steps=2, record_every=2, checkpoint_every=2, control=False, heldout=8), tmp_path)
    with pytest.raises(InputError, match="holds a run with another configuration"):
        train_induction(InductionConfig(steps=3, record_every=2, checkpoint_every=2, control=False, heldout=8),
                        tmp_path)


@pytest.mark.skipif(not (SHIPPED / "run.json").is_file(), reason="the recorded run is not built yet")
def test_the_shipped_run_replays_its_log() -> None:
    config = InductionConfig(**json.loads((SHIPPED / SETTINGS).read_text()))
    for run in ("main", "control"):
        log = {r["step"]: r for r in read_log(SHIPPED / run / "log.jsonl")}
        folders = [(config.steps, SHIPPED / run / "model")]
        if run == "main":
            folders += [(int(p.name.split("-")[1]), p) for p in sorted((SHIPPED / run / "checkpoints").iterdir())]
        for step, folder in folders:
            again, logged = measure_folder(folder, config), log[step]
            for key in ("first_loss", "repeat_loss", "icl_score"):
                assert again[key] == pytest.approx(logged[key], abs=1e-4), (run, step, key)
            for key in ("previous_token", "induction"):
                assert np.allclose(again[key], logged[key], atol=1e-4), (run, step, key)
            assert np.allclose(again["example_attention"], logged["example_attention"], atol=0.006)
    result = json.loads((SHIPPED / "run.json").read_text())
    assert result["runs"]["main"]["induction_head"] is not None
    assert result["runs"]["control"]["induction_head"] is None
    assert sum(f.stat().st_size for f in SHIPPED.rglob("*") if f.is_file()) < 8e6
    from transformer_explainer.loading.resolve import builtin_models

    assert "induction-run" not in builtin_models()  # a recorded run, not a model the app lists
