from __future__ import annotations

import json

from transformer_explainer.cli import main


def test_explain_json(tiny_gpt2_dir, capsys):
    assert main(["explain", "Data visualization empowers users to", "--model", str(tiny_gpt2_dir),
                 "--offline", "--json", "--top", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"][1] == " visualization"
    assert len(out["token_ids"]) == len(out["tokens"])
    assert len(out["top"]) == 5
    probs = [r["prob"] for r in out["top"]]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1


def test_explain_table(tiny_gpt2_dir, capsys):
    assert main(["explain", "The king said", "--model", str(tiny_gpt2_dir), "--offline"]) == 0
    out = capsys.readouterr().out
    assert "' king'" in out and "prob" in out


def test_generate_streams_seeded(tiny_gpt2_dir, capsys):
    args = ["generate", "The king said", "-n", "8", "--model", str(tiny_gpt2_dir), "--offline", "--seed", "1",
            "--temperature", "0.8", "--top-k", "20"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == first and first.startswith("The king said")


def test_errors_are_one_line(tiny_gpt2_dir, capsys):
    assert main(["explain", "", "--model", str(tiny_gpt2_dir), "--offline"]) == 2
    err = capsys.readouterr().err
    assert "error: the text is empty" in err and "Traceback" not in err
    assert main(["generate", "hi", "--model", str(tiny_gpt2_dir), "--offline", "--temperature", "-1"]) == 2
    assert "temperature" in capsys.readouterr().err
    assert main(["explain", "hi", "--model", "nonexistent-model-zzz", "--offline"]) == 2
    assert "not in the local Hugging Face cache" in capsys.readouterr().err


def test_models_lists_known_downloads(capsys):
    assert main(["models", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    names = {m["name"] for m in out["models"]}
    assert {"gpt2", "gpt2-medium", "distilgpt2"} <= names
    assert out["default"]
