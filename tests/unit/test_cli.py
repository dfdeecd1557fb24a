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


def test_explain_json_brackets_split_characters(tiny_gpt2_dir, capsys):
    assert main(["explain", "I 🎉", "--model", str(tiny_gpt2_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"][1:] == [" <0xF0><0x9F>", "<0x8E>", "<0x89>"]
    assert out["char_groups"] == [{"start": 1, "end": 4, "text": " 🎉"}]
    assert main(["explain", "I 🎉", "--model", str(tiny_gpt2_dir)]) == 0
    table = capsys.readouterr().out
    assert "┐ ' 🎉' together" in table and "\\x" not in table


def test_generate_says_why_it_stopped(tiny_gpt2_dir, capsys):
    assert main(["generate", "The king said", "-n", "100000000", "--model", str(tiny_gpt2_dir), "--seed", "1",
                 "--temperature", "0"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("The king said")
    assert "the context of 128 tokens is full" in err or "end-of-text" in err


def test_neighbours_and_analogy(tiny_gpt2_dir, tiny_model, capsys):
    from transformer_explainer.analysis.embeddings import analogy, nearest_tokens, token_id

    assert main(["neighbours", "king", "--k", "3", "--json", "--model", str(tiny_gpt2_dir)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["token"]["token"] == " king"  # the mid-sentence form by default
    assert [n["id"] for n in d["neighbours"]] == [n.id for n in nearest_tokens(tiny_model, " king", 3)]
    assert main(["neighbours", "king", "--no-space", "--json", "--model", str(tiny_gpt2_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["token"]["token"] == "king"
    assert main(["analogy", "king", "man", "woman", "--k", "4", "--json", "--model", str(tiny_gpt2_dir)]) == 0
    d = json.loads(capsys.readouterr().out)
    ref = analogy(tiny_model, [" king", " woman"], [" man"], 4)
    assert [n["id"] for n in d["neighbours"]] == [n.id for n in ref.neighbours]
    assert [p["id"] for p in d["positive"]] == [token_id(tiny_model, " king"), token_id(tiny_model, " woman")]
    assert main(["analogy", "king", "man", "woman", "--model", str(tiny_gpt2_dir)]) == 0
    assert "' king' - ' man' + ' woman'" in capsys.readouterr().out


def test_model_choice_is_explained(tiny_gpt2_dir, caplog):
    import logging

    from transformer_explainer import load_model
    from transformer_explainer.loading.resolve import default_spec, resolve
    from transformer_explainer.server.run import ServeConfig, model_line

    with caplog.at_level(logging.INFO, logger="transformer_explainer"):
        load_model(str(tiny_gpt2_dir))
    assert f"model {tiny_gpt2_dir.name} (from {tiny_gpt2_dir})" in caplog.text
    assert model_line(ServeConfig(models=[str(tiny_gpt2_dir)])) == f"model: {tiny_gpt2_dir.name} (from {tiny_gpt2_dir})"
    default = resolve(None, allow_download=False)
    assert default.name == default_spec() and default.reason.startswith("no model named")
    if default.name != "gpt2":
        assert "transformer-explainer serve --model gpt2" in model_line(ServeConfig())


def test_export_writes_whole_files_only(tiny_gpt2_dir, tmp_path, capsys):
    assert main(["export", "The cat", "--out", str(tmp_path / "t.npz"), "--model", str(tiny_gpt2_dir)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["t.npz"]  # no temporary file beside it
