"""What the command line tells its reader while and before it works: progress of long work on a terminal (and
nothing extra for a script or under --json), the tokens --truncate dropped, an empty text refused before any model
loads, a model name one typo away from a known one, and a patching whose clean run is below its corrupted one."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest
import torch

from transformer_explainer.cli import main

TEXT = "The cat sat on the mat and the dog sat on the rug"
CLEAN = "The cat sat on the mat and the dog sat on the"
CORRUPTED = "The cat sat on the rug and the dog sat on the"


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home"), "COLUMNS": "100"}


def _run(argv: list[str], tmp_path: Path, *, tty: bool) -> tuple[int, str, str]:
    """The command as a process, its stderr a pseudo-terminal (`tty`) or a pipe: (status, stdout, stderr)."""
    cmd = [sys.executable, "-m", "transformer_explainer.cli", *argv]
    if not tty:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=_env(tmp_path))
        return p.returncode, p.stdout, p.stderr
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a new one is 0 columns wide
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, text=True, env=_env(tmp_path))
    os.close(slave)
    chunks: list[bytes] = []

    def read() -> None:  # drain the terminal as the process writes, or a long bar would fill it and block
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the process closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    out, _ = proc.communicate(timeout=180)
    reader.join(timeout=10)
    os.close(master)
    return proc.returncode, out, b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")  # the tty's


def _model_lines_only(err: str) -> None:
    """stderr holds the model line and nothing else: no bar, no control characters."""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("model: "), err
    assert "\r" not in err and "\x1b" not in err


@pytest.mark.parametrize(("argv", "what", "total"), [
    (["importance", TEXT], "each head ablated", 1 + 2 * 4),  # the tiny model: 2 layers of 4 heads
    (["prune", TEXT, "--rescore", "--max-heads", "2"], "pruning", 1 + 2 * 8 - 1),
    (["heads", TEXT], "reference set", None),
])
def test_long_work_shows_progress_on_a_terminal_only(tiny_gpt2_dir: Path, tmp_path: Path, argv: list[str],
                                                      what: str, total: int | None) -> None:
    argv = [*argv, "--model", str(tiny_gpt2_dir)]
    code, out, err = _run(argv, tmp_path, tty=True)
    assert code == 0, err
    assert what in err, err
    if total is not None:
        assert f"/{total} " in err, err  # the bar counts the forward passes the work makes
    if argv[0] == "importance":  # one command is enough: they share the bar's rule
        code, piped_out, piped_err = _run(argv, tmp_path, tty=False)
        assert code == 0 and piped_out == out
        _model_lines_only(piped_err)
    code, json_out, json_err = _run([*argv, "--json"], tmp_path, tty=True)
    assert code == 0 and json.loads(json_out)["model"]
    assert what not in json_err and "\r" not in json_err, json_err


def test_heads_reference_roles_are_those_of_reference_head_roles(tiny_gpt2_dir: Path, tiny_model, capsys) -> None:
    """The command traces the reference set a text at a time (for its progress): the same scores."""
    from transformer_explainer.analysis.roles import reference_head_roles

    assert main(["heads", TEXT, "--model", str(tiny_gpt2_dir), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["reference"]
    assert got == json.loads(json.dumps(reference_head_roles(tiny_model).to_dict()))


def test_patch_json_on_a_terminal_prints_no_bar(tiny_gpt2_dir: Path, tiny_model, tmp_path: Path) -> None:
    a, w = _answer_and_wrong(tiny_model)
    argv = ["patch", CLEAN, CORRUPTED, "--answer", str(a), "--wrong", str(w), "--what", "heads",
            "--model", str(tiny_gpt2_dir)]
    code, _, err = _run(argv, tmp_path, tty=True)
    assert code == 0 and "patched runs" in err
    code, out, err = _run([*argv, "--json"], tmp_path, tty=True)
    assert code == 0 and json.loads(out)["grids"]["heads"]
    assert "patched runs" not in err and "\r" not in err, err


def test_an_empty_text_is_refused_before_any_model_loads(tmp_path: Path) -> None:
    for argv in (["explain", ""], ["generate", ""], ["importance", ""], ["patch", "", "a", "--answer", "a",
                                                                           "--wrong", "b"]):
        probe = ("import sys; from transformer_explainer.cli import main; code = main(sys.argv[1:]); "
                 "print(code, 'torch' in sys.modules, 'transformer_explainer.engine' in sys.modules)")
        p = subprocess.run([sys.executable, "-c", probe, *argv, "--model", "explainer-small"], capture_output=True,
                           text=True, timeout=120, env=_env(tmp_path))
        assert p.stdout.split() == ["2", "False", "False"], (argv, p.stdout, p.stderr)  # refused, nothing loaded
        assert p.stderr.count("\n") == 1 and "the text is empty" in p.stderr, p.stderr


def test_spaces_alone_are_a_text(tiny_gpt2_dir: Path, capsys) -> None:
    """Spaces are tokens (the engine and the app take them): only the empty text is refused."""
    assert main(["explain", "   ", "--model", str(tiny_gpt2_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"]


def test_truncate_says_how_many_tokens_it_dropped(tiny_gpt2_dir: Path, tiny_model, capsys) -> None:
    long = "the cat " * 100
    n, ctx = len(tiny_model.tokenizer.encode(long)), tiny_model.context_length
    assert n > ctx
    for cmd in ("explain", "lens"):
        assert main([cmd, long, "--truncate", "--model", str(tiny_gpt2_dir)]) == 0
        err = capsys.readouterr().err
        assert f"kept the last {ctx} of {n} tokens ({n - ctx} dropped from the start of the text)" in err, err
    assert main(["explain", "the cat", "--truncate", "--model", str(tiny_gpt2_dir)]) == 0
    assert "kept the last" not in capsys.readouterr().err  # nothing dropped, nothing said


@pytest.mark.parametrize(("typed", "meant"), [("explainer-smal", "explainer-small"), ("gtp2", "gpt2"),
                                              ("gpt2-mediun", "gpt2-medium"), ("explainer-lama", "explainer-llama")])
def test_a_model_name_one_typo_away_gets_did_you_mean(typed: str, meant: str, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for extra in ([], ["--offline"]):
        assert main(["explain", "hi", "--model", typed, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"no model {typed!r}: did you mean {meant!r}?" in err, err


def test_a_hub_id_or_a_folder_is_not_taken_for_a_typo(tiny_gpt2_dir: Path, tmp_path: Path, monkeypatch,
                                                       capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["explain", "hi", "--model", "openai-community/gtp2", "--offline"]) == 2
    err = capsys.readouterr().err
    assert "did you mean" not in err and "not in the local Hugging Face cache" in err, err
    shutil.copytree(tiny_gpt2_dir, tmp_path / "gtp2")  # a folder of that name here is the model named
    monkeypatch.chdir(tmp_path)
    assert main(["explain", "hi", "--model", "gtp2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "gtp2"


def _answer_and_wrong(model) -> tuple[int, int]:
    """The tokens whose logit difference the corruption moves most up (answer) and down (wrong)."""
    d = model.last_logits(model.encode(CLEAN)) - model.last_logits(model.encode(CORRUPTED))
    return int(torch.argmax(d)), int(torch.argmin(d))


def test_patch_says_when_the_clean_run_is_below_the_corrupted_one(tiny_gpt2_dir: Path, tiny_model, capsys) -> None:
    a, w = _answer_and_wrong(tiny_model)
    usual = tiny_model.patch(CLEAN, CORRUPTED, a, w, ["heads"])
    swapped = tiny_model.patch(CLEAN, CORRUPTED, w, a, ["heads"])  # the clean run's difference is now the lower
    assert usual.clean > usual.corrupted and swapped.clean < swapped.corrupted
    assert not usual.clean_below_corrupted and swapped.clean_below_corrupted
    # what the sentence says: the same grid as the pair the other way round, 1 still the clean run
    torch.testing.assert_close(swapped.grids["heads"], usual.grids["heads"], atol=1e-4, rtol=1e-4)
    assert "below the corrupted run's" in swapped.reading and "below" not in usual.reading
    assert "below the corrupted run's" in repr(swapped)
    tt = tiny_model.tokenizer.token_text
    argv = ["patch", CLEAN, CORRUPTED, "--answer", str(w), "--wrong", str(a), "--what", "heads",
            "--model", str(tiny_gpt2_dir)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert swapped.reading in out and f"swap them: --answer {tt(a)!r} --wrong {tt(w)!r}" in out
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["clean"] < json.loads(out)["corrupted"] and f"note: {swapped.reading}" in err
    assert main(["patch", CLEAN, CORRUPTED, "--answer", str(a), "--wrong", str(w), "--what", "heads",
                 "--model", str(tiny_gpt2_dir)]) == 0
    out = capsys.readouterr().out
    assert "below the corrupted" not in out and "swap them" not in out


def test_a_snapshot_shows_its_progress_on_a_terminal_only(tiny_gpt2_dir: Path, tiny_model, tmp_path: Path) -> None:
    """`snapshot` counts its forward passes after the trace: a head ablated at a time (2 x 4 on the tiny model),
    then an attribution per earlier position (all fit the default budget); piped, stderr has no bar."""
    from transformer_explainer.notebook.snapshot import snapshot_passes

    T = len(tiny_model.encode(TEXT))
    total = snapshot_passes(tiny_model, T)
    assert total == 2 * 4 + T - 1
    argv = ["snapshot", TEXT, "--out", str(tmp_path / "page.html"), "--model", str(tiny_gpt2_dir)]
    code, _, err = _run(argv, tmp_path, tty=True)
    assert code == 0, err
    assert "snapshot:" in err and f"/{total} " in err, err  # the bar counts the passes the snapshot makes
    code, _, err = _run(argv, tmp_path, tty=False)
    assert code == 0 and "\r" not in err and "\x1b" not in err and f"/{total} " not in err, err
    assert (tmp_path / "page.html").stat().st_size > 0
