from __future__ import annotations

import json

import torch

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
    assert "error: argument text: the text is empty" in err and "Traceback" not in err
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


LONG = " ".join(["the cat"] * 200)  # 400 tokens: more than the tiny model's context of 128


def test_an_error_found_while_parsing_reads_like_every_other_error(tmp_path, capsys):
    """`transformer-explainer: error: ...` as the README promises, with the subcommand's help to read."""
    assert main(["export", "hi", "--out", str(tmp_path / "missing" / "t.npz")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("transformer-explainer: error: argument --out: cannot write ")
    assert err.endswith("(see transformer-explainer export --help)\n") and err.count("\n") == 1
    assert main(["train", "lm", "--corpus", "c", "--tokenizer", "t", "--out", "o", "--n-layer", "0"]) == 2
    assert capsys.readouterr().err.startswith("transformer-explainer: error: argument --n-layer: must be a whole")


def test_an_over_long_text_is_refused_with_the_flag_that_keeps_its_end(tiny_gpt2_dir, capsys):
    for command in ("explain", "generate", "lens"):
        assert main([command, LONG, "--model", str(tiny_gpt2_dir)]) == 2
        err = capsys.readouterr().err
        assert err == (f"transformer-explainer: error: the text is 400 tokens long but {tiny_gpt2_dir.name} reads at "
                       f"most 128; shorten it, or add --truncate to keep its last 128 tokens\n"), err
    assert main(["explain", LONG, "--model", str(tiny_gpt2_dir), "--truncate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["tokens"]) == 128


def test_explain_says_which_cuts_apply(tiny_gpt2_dir, capsys):
    def header(*flags: str) -> str:
        assert main(["explain", "The king said", "--model", str(tiny_gpt2_dir), *flags]) == 0
        return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("next token"))

    assert header() == "next token (temperature 1, no top-k cut, no top-p cut):"
    assert header("--temperature", "0.5", "--top-k", "5", "--top-p", "0.9") == \
        "next token (temperature 0.5, top-k 5, top-p 0.9):"
    assert header("--temperature", "0") == "next token (temperature 0: greedy, the most likely token):"


def _options(parser, name: str = "transformer-explainer"):
    """(command, option or positional, help) for every argument of every subcommand."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _options(sub, f"{name} {sub_name}")
        elif not isinstance(action, argparse._HelpAction):
            yield name, "/".join(action.option_strings) or action.dest, action.help


def test_every_argument_of_every_command_says_what_it_does():
    from transformer_explainer.cli import build_parser

    found = list(_options(build_parser()))
    assert len(found) > 150  # every subcommand's arguments were walked
    assert [(cmd, arg) for cmd, arg, text in found if not text] == []
    helps = {(cmd, arg): text for cmd, arg, text in found}
    assert "greedy" in helps["transformer-explainer generate", "--temperature"]
    assert "K most likely" in helps["transformer-explainer explain", "--top-k"]
    assert "add up to P" in helps["transformer-explainer generate", "--top-p"]
    assert "mean replaces it" in helps["transformer-explainer importance", "--mode"]
    assert "mean replaces it" in helps["transformer-explainer prune", "--mode"]


def test_train_lm_help_names_both_families(capsys):
    assert main(["train", "--help"]) == 0
    assert "train a GPT-2- or Llama-family language model" in capsys.readouterr().out
    assert main(["train", "lm", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help to the terminal's width
    assert "GPT2LMHeadModel for --family gpt2, LlamaForCausalLM for --family llama" in text
    assert "GPT-2 format" not in text and "GPT-2-architecture" not in text


def test_bad_training_values_are_refused_before_any_work(tmp_path, capsys):
    """A value no run can use is one line while the arguments are read; a shape no model has (d_model
    not a multiple of the heads) is one line before the corpus is read, and leaves no run folder."""
    base = ["train", "lm", "--corpus", str(tmp_path / "corpus"), "--tokenizer", str(tmp_path / "tok"),
            "--out", str(tmp_path / "run")]
    for flag, value, phrase in (("--n-layer", "0", "at least 1"), ("--lr", "-1", "more than 0"),
                                ("--dropout", "2", "below 1"), ("--eval-interval", "0", "at least 1"),
                                ("--batch-size", "0", "at least 1"), ("--lr", "nan", "finite"),
                                ("--vocab-size", "100", "at least 257")):
        assert main([*base, flag, value]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"transformer-explainer: error: argument {flag}: ") and phrase in err, err
    (tmp_path / "corpus").mkdir()
    for name in ("train.txt", "valid.txt"):
        (tmp_path / "corpus" / name).write_text("the cat sat on the mat\n" * 20)
    assert main([*base, "--n-embd", "32", "--n-head", "3"]) == 2
    assert capsys.readouterr().err == ("transformer-explainer: error: bad model shape: n_embd (32) must be "
                                       "divisible by n_head (3)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]  # no tokenizer trained, no run folder
    assert main(["train", "seq2seq", "--task", "reverse", "--out", str(tmp_path / "s2s"), "--heads", "3"]) == 2
    assert "bad model shape: d_model (128) must be divisible by n_head (3)" in capsys.readouterr().err
    assert not (tmp_path / "s2s").exists()
    assert main(["train", "seq2seq", "--task", "reverse", "--label-smoothing", "1.5"]) == 2
    assert "argument --label-smoothing: must be 0 or more and below 1" in capsys.readouterr().err


def _model_that_ends_at_once(folder):
    """A tiny random GPT-2 whose final LayerNorm puts out a multiple of <|endoftext|>'s own embedding
    at every position: with tied embeddings that token has the largest logit, so greedy generation
    writes it first."""
    from transformers import GPT2LMHeadModel

    from tests.conftest import make_hf_gpt2

    make_hf_gpt2(folder)
    model = GPT2LMHeadModel.from_pretrained(folder)
    eos = model.config.eos_token_id
    with torch.no_grad():
        wte = model.transformer.wte.weight
        wte[eos] *= 4  # well above every other token's dot product with it
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(wte[eos])
    model.save_pretrained(folder)
    return folder


def test_generate_ends_at_the_end_of_text_token_without_printing_it(tmp_path, capsys):
    from transformer_explainer import SamplingParams, load_model

    folder = _model_that_ends_at_once(tmp_path / "ends")
    model = load_model(str(folder), allow_download=False)
    steps = list(model.generate("The king said", 5, SamplingParams(temperature=0)))
    assert [t.id for t in steps] == [model.tokenizer.eos_id()]  # the model does end at once
    assert main(["generate", "The king said", "-n", "5", "--temperature", "0", "--model", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert out == "The king said\n"
    assert "stopped after 0 of 5 tokens: the model wrote its end-of-text token" in err


def test_the_built_in_models_hint_and_the_offline_error_speak_to_their_reader(tmp_path):
    """With no GPT-2 in the cache a command suggests the flag of that same command, not `serve`; offline,
    `load_model("gpt2")` names the built-in model, not a command-line flag. In a fresh process with an
    empty Hugging Face cache and HF_HUB_OFFLINE set: nothing can reach the network."""
    import os
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from transformer_explainer import load_model\n"
        "from transformer_explainer.cli import main\n"
        "try:\n"
        "    load_model('gpt2')\n"
        "except Exception as e:\n"
        "    print(f'{type(e).__name__}: {e}')\n"
        "main(['explain', 'hi', '--top', '1'])\n"
        "main(['explain', 'hi', '--top', '1', '--offline'])\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    error = proc.stdout.splitlines()[0]
    assert error.startswith("ModelNotFoundError: cannot download 'gpt2': this machine is offline (HF_HUB_OFFLINE "
                            "is set)"), error
    assert error.endswith("or the built-in model 'explainer-small'") and "--" not in error
    hints = [line for line in proc.stderr.splitlines() if line.startswith("(the built-in model")]
    assert hints == [
        "(the built-in model: GPT-2 small is not in the Hugging Face cache; add --model gpt2 to download it "
        "(about 548 MB) and use it)",
        "(the built-in model: GPT-2 small is not in the Hugging Face cache; drop --offline and add --model gpt2 "
        "to download it (about 548 MB) and use it)",
    ], proc.stderr
    assert "serve" not in proc.stderr
