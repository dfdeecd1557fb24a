"""`transformer-explainer seq2seq` and `transformer-explainer train seq2seq`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from transformer_explainer.cli import main
from transformer_explainer.seq2seq.checkpoint import builtin_checkpoints, load_seq2seq, save_seq2seq
from transformer_explainer.seq2seq.config import PRESETS
from transformer_explainer.seq2seq.decoding import greedy_decode
from transformer_explainer.seq2seq.engine import Seq2SeqModel
from transformer_explainer.seq2seq.model import EncoderDecoder
from transformer_explainer.seq2seq.tasks import ReverseTask


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    task = ReverseTask(max_len=6, alphabet="abcdef")
    torch.manual_seed(0)
    net = EncoderDecoder(PRESETS["tiny"].with_vocab(len(task.src_vocab), len(task.tgt_vocab)))
    folder = tmp_path_factory.mktemp("ckpt")
    save_seq2seq(Seq2SeqModel.for_task(net, task), folder)
    return folder


def test_json_output(checkpoint: Path, capsys):
    assert main(["seq2seq", "--checkpoint", str(checkpoint), "--json", "cafe"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"task", "input", "output", "tokens"}
    m = load_seq2seq(checkpoint)
    expected = greedy_decode(m, m.encode_source("cafe"))
    assert out["task"] == "reverse" and out["input"] == "cafe"
    assert out["tokens"] == expected.tokens and out["output"] == expected.text == "".join(out["tokens"])


def test_beam_and_steps(checkpoint: Path, capsys):
    assert main(["seq2seq", "--checkpoint", str(checkpoint), "--beam", "3", "--steps", "abc"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["step", "decoder"] and len(out) >= 3


def test_steps_show_every_probability_as_a_percentage(checkpoint: Path, capsys):
    """The chosen token's and the next two's probabilities, on one scale (they were 0.00 beside 90.45%)."""
    from transformer_explainer.seq2seq.decoding import translate

    assert main(["seq2seq", "--checkpoint", str(checkpoint), "--steps", "abc"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:-1]  # between the header and the output
    steps = translate(load_seq2seq(checkpoint), "abc").steps
    assert len(rows) == len(steps)
    for row, s in zip(rows, steps, strict=True):
        chosen, alternatives = row.split("%  ", 1)
        assert chosen.endswith(f"{s.prob:.2%}"[:-1])
        for shown, t in zip(alternatives.split(", "), s.top[1:3], strict=True):
            token, value = shown.rsplit(" ", 1)
            assert token == t.token and value.endswith("%")
            assert float(value[:-1]) == pytest.approx(t.prob * 100, rel=0.01, abs=0.006)


@pytest.mark.parametrize("argv, message", [
    (["seq2seq", "--task", "reverse", ""], "empty"),
    (["seq2seq", "--task", "nope", "abc"], "unknown task"),
    (["seq2seq", "abc"], "--task"),
    (["seq2seq", "--task", "reverse"], "TEXT"),
    (["seq2seq", "--task", "reverse", "--beam", "0", "abc"], "--beam"),
])
def test_errors_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("transformer-explainer: error: ") and message in err and "\n" not in err


def test_bad_text_for_the_checkpoint(checkpoint: Path, capsys):
    for text, message in (("abcxyz", "outside this task's vocabulary"), ("abcdefabc", "at most 6"), ("  ", "empty")):
        assert main(["seq2seq", "--checkpoint", str(checkpoint), text]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err


def test_list(capsys):
    assert main(["seq2seq", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    names = [r["task"] for r in rows]
    assert names[:4] == ["reverse", "number_words", "number_words_zh", "dates"] and "tsv" in names
    shipped = builtin_checkpoints()
    for r in rows[:4]:
        assert (r["checkpoint"] is not None) == (r["task"] in shipped)
    assert main(["seq2seq", "--list"]) == 0
    assert "number_words_zh" in capsys.readouterr().out


def test_train_resume_and_decode(tmp_path: Path, capsys):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{w}\t{w[::-1]}\n" for w in ("abc", "bca", "cab", "aab", "bba", "ccb")), encoding="utf-8")
    out, export = tmp_path / "run", tmp_path / "export"
    argv = ["train", "seq2seq", "--task", "tsv", "--tsv", str(tsv), "--out", str(out), "--preset", "tiny",
            "--batch-size", "4", "--eval-interval", "3", "--checkpoint-interval", "3", "--eval-samples", "4",
            "--final-samples", "4", "--no-progress"]
    assert main([*argv, "--steps", "6"]) == 0
    assert (out / "checkpoints" / "latest").read_text() == "ckpt-00000006"
    assert main([*argv, "--steps", "9", "--export", str(export)]) == 0  # continues the same run
    err = capsys.readouterr().err
    assert "resuming" in err and "exported" in err
    m = load_seq2seq(export)
    assert m.training["steps"] == 9 and "exact_match" in m.training
    assert {p.name for p in export.iterdir()} >= {"config.json", "model.safetensors", "vocab.json", "README.md"}
    assert main(["seq2seq", "--checkpoint", str(export), "--json", "abc"]) == 0
    assert json.loads(capsys.readouterr().out)["task"] == "tsv"
