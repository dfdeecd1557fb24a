"""Every subcommand over a table of bad inputs: exit status 2, exactly one line on stderr
(`transformer-explainer: error: ...`), no traceback, nothing on stdout, and no output file
(finished or partial) left behind.

The first table runs each case as a real process (every subcommand, and each case the issue named);
each process spends seconds importing torch, so the second table, more of the same kinds of input,
runs through `cli.main` in this process."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

TEXT = "The cat sat on the mat"
LONG = "the cat " * 200  # 400 tokens: more than the tiny model's context of 128
M = "{model}"  # replaced by the tiny checkpoint's folder
OUT = "{out}"  # replaced by a fresh empty folder for the case; it must still be empty afterwards

# id -> (argv, a phrase the one line must contain). Run as processes.
CASES: dict[str, tuple[list[str], str]] = {
    "serve-port": (["serve", "--port", "-5"], "--port"),
    "serve-missing-model": (["serve", "--model", "./no/such/model", "--port", "0"], "no such folder"),
    "explain-top": (["explain", "hi", "--top", "-5", "--model", M], "--top"),
    "explain-model-file": (["explain", "hi", "--model", "README.md"], "is a file; a model folder holds"),
    "explain-model-abs-file": (["explain", "hi", "--model", f"{OUT}/weights.bin"], "is a file"),
    "generate-n": (["generate", "hi", "-n", "-1", "--model", M], "-n"),
    "generate-empty": (["generate", "", "--model", M], "the text is empty"),
    "models-unknown-option": (["models", "--jsno"], "unrecognized arguments"),
    "train-lm-missing-corpus": (["train", "lm", "--corpus", f"{OUT}/none", "--tokenizer", f"{OUT}/tok",
                                 "--out", f"{OUT}/run"], "train.txt"),
    "train-seq2seq-task": (["train", "seq2seq", "--task", "nope"], "--task"),
    "lens-top": (["lens", "hi", "--top", "100000", "--model", M], "--top"),
    "ablate-top": (["ablate", "hi", "--layer", "0", "--head", "1", "--top", "-3", "--model", M], "--top"),
    "heads-empty": (["heads", "", "--model", M], "the text is empty"),
    "importance-one-token": (["importance", "hi", "--model", M], "at least two tokens"),
    "prune-max-heads": (["prune", TEXT, "--max-heads", "0", "--model", M], "--max-heads"),
    "export-missing-dir": (["export", TEXT, "--out", f"{OUT}/missing/dir/t.npz", "--model", M], "does not exist"),
    "export-unknown-name": (["export", TEXT, "--out", f"{OUT}/t.json", "--names", "nope", "--model", M],
                            "no activation is called 'nope'"),
    "snapshot-missing-dir": (["snapshot", TEXT, "--out", f"{OUT}/missing/x.html", "--model", M], "does not exist"),
    "seq2seq-beam": (["seq2seq", "hello", "--task", "reverse", "--beam", "0"], "--beam"),
    "neighbours-several-tokens": (["neighbours", "Transformerish", "--model", M], "is not one token"),
    "analogy-missing-word": (["analogy", "king", "man", "--model", M], "required: C"),
}

# More of the same, through cli.main in this process.
IN_PROCESS: dict[str, tuple[list[str], str]] = {
    "serve-workers": (["serve", "--workers", "0"], "--workers"),
    "explain-empty": (["explain", "", "--model", M], "the text is empty"),
    "explain-too-long": (["explain", LONG, "--model", M], "reads at most 128; shorten it, or add --truncate"),
    "explain-missing-abs-folder": (["explain", "hi", "--model", f"{OUT}/no-model"], "no such folder"),
    "explain-top-p": (["explain", "hi", "--top-p", "1.5", "--model", M], "--top-p"),
    "explain-offline-uncached": (["explain", "hi", "--model", "no-such-owner-zz/no-model", "--offline"],
                                 "run without --offline"),
    "generate-temperature": (["generate", "hi", "--temperature", "-1", "--model", M], "--temperature"),
    "ablate-layer": (["ablate", TEXT, "--layer", "7", "--model", M], "layer 7 is outside 0..1"),
    "ablate-head": (["ablate", TEXT, "--layer", "0", "--head", "9", "--model", M], "head 9 is outside 0..3"),
    "export-suffix": (["export", TEXT, "--out", f"{OUT}/t.csv", "--model", M], ".npz or .json"),
    "export-into-a-file": (["export", TEXT, "--out", f"{OUT}/weights.bin/t.npz", "--model", M], "is a file"),
    "snapshot-max-mb": (["snapshot", TEXT, "--out", f"{OUT}/x.html", "--max-mb", "0", "--model", M], "--max-mb"),
    "seq2seq-task": (["seq2seq", "hello", "--task", "nope"], "unknown task"),
    "seq2seq-beam-too-wide": (["seq2seq", "hello", "--task", "reverse", "--beam", "99"], "from 1 to 16"),
    "train-lm-warmup": (["train", "lm", "--corpus", "c", "--tokenizer", "t", "--out", f"{OUT}/run", "--warmup", "-1"],
                        "--warmup"),
    "train-seq2seq-eval-samples": (["train", "seq2seq", "--task", "reverse", "--out", f"{OUT}/run",
                                    "--eval-samples", "0"], "--eval-samples"),
    "train-seq2seq-tsv-without-file": (["train", "seq2seq", "--task", "tsv", "--out", f"{OUT}/run"], "--tsv FILE"),
    "neighbours-k": (["neighbours", "king", "--k", "0", "--model", M], "--k"),
    "analogy-several-tokens": (["analogy", "king", "man", "Transformerish", "--model", M], "is not one token"),
}


def _run(argv: list[str], model: Path, out: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    args = [a.replace(M, str(model)).replace(OUT, str(out)) for a in argv]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(cwd / "hf-home")}  # never the network
    return subprocess.run([sys.executable, "-m", "transformer_explainer.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def results(tiny_gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """Run the whole table at once, two processes at a time (each spends most of its time importing)."""
    cwd = tmp_path_factory.mktemp("cwd")
    (cwd / "README.md").write_text("not a model\n")
    outs = {case: tmp_path_factory.mktemp(case) for case in CASES}
    (outs["explain-model-abs-file"] / "weights.bin").write_bytes(b"\0" * 16)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {case: pool.submit(_run, argv, tiny_gpt2_dir, outs[case], cwd)
                   for case, (argv, _) in CASES.items()}
        return {case: (f.result(), outs[case]) for case, f in futures.items()}


def _check(code: int, out: str, err: str, phrase: str, folder: Path) -> None:
    err_lines = err.splitlines()
    assert code == 2, (code, err)
    assert len(err_lines) == 1, err
    line = err_lines[0]
    assert line.startswith("transformer-explainer: error: "), line
    assert phrase in line, line
    assert "Traceback" not in err and out == ""
    left = sorted(p.name for p in folder.rglob("*") if p.name != "weights.bin")
    assert left == [], f"left behind: {left}"


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line(results, case: str):
    proc, folder = results[case]
    _check(proc.returncode, proc.stdout, proc.stderr, CASES[case][1], folder)


@pytest.mark.parametrize("case", list(IN_PROCESS))
def test_bad_input_is_one_line_in_process(case: str, tiny_gpt2_dir: Path, tmp_path: Path, monkeypatch,
                                          capsys: pytest.CaptureFixture[str]):
    from transformer_explainer.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    argv, phrase = IN_PROCESS[case]
    code = main([a.replace(M, str(tiny_gpt2_dir)).replace(OUT, str(tmp_path)) for a in argv])
    out, err = capsys.readouterr()
    _check(code, out, err, phrase, tmp_path)
