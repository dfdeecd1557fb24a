"""The analysis subcommands end to end on a tiny local model: tables, --json, files, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from transformer_explainer import cli
from transformer_explainer.analysis import load_npz

TEXT = "The cat sat on the mat and the cat"


@pytest.fixture
def run(tiny_gpt2_dir: Path, capsys: pytest.CaptureFixture):
    def go(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv, "--model", str(tiny_gpt2_dir), "--offline"])
        out, err = capsys.readouterr()
        return code, out, err

    go.folder = tiny_gpt2_dir
    return go


def test_lens_json_and_table(run):
    code, out, _ = run("lens", TEXT, "--top", "3", "--json")
    assert code == 0
    d = json.loads(out)
    assert len(d["layers"]) == 3 and d["positions"] == [len(d["tokens"]) - 1]
    last = d["layers"][-1]["positions"][0]
    assert last["target_rank"] == 1 and last["top"][0]["token"] == d["targets"][0]["token"]
    assert len(last["top"]) == 3
    code, out, _ = run("lens", TEXT)
    assert code == 0 and "after block 1" in out and "embeddings" in out


def test_ablate_json_and_table(run):
    code, out, _ = run("ablate", TEXT, "--layer", "1", "--head", "2", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["heads"] == [[1, 2]] and d["mode"] == "zero"
    assert d["loss_change"] == pytest.approx(d["loss_after"] - d["loss_before"])
    assert {"before", "after", "kl", "changes"} <= set(d)
    code, out, _ = run("ablate", TEXT, "--layer", "0", "--mode", "mean", "--json")
    assert code == 0 and json.loads(out)["heads"] == [[0, h] for h in range(4)]
    code, out, _ = run("ablate", TEXT, "--layer", "0", "--head", "1", "--head", "3")
    assert code == 0 and "zero ablation of layer 0, heads 1, 3" in out and "before" in out


def test_ablate_lists_as_many_tokens_as_asked(run):
    """--top N: the N tokens most likely before or after the ablation, not the union of both top N."""
    from transformer_explainer import load_model
    from transformer_explainer.analysis import ablate

    model = load_model(str(run.folder), allow_download=False)
    res = ablate(model, TEXT, [(1, 2)])
    either = torch.maximum(res.clean_probs, res.ablated_probs)
    for n in (1, 3, 7):
        code, out, _ = run("ablate", TEXT, "--layer", "1", "--head", "2", "--top", str(n))
        assert code == 0
        rows = [r.strip().rsplit(maxsplit=3) for r in out.split("change\n", 1)[1].splitlines()]
        assert len(rows) == n  # token, before, after, change
        before = [float(r[1].rstrip("%")) for r in rows]
        assert before == sorted(before, reverse=True)
        expected = {repr(model.tokenizer.token_text(i)) for i in either.topk(n).indices.tolist()}
        assert {r[0] for r in rows} == expected


def test_every_json_answer_on_a_text_carries_its_tokens(run):
    """importance and prune too, like explain, lens, ablate and heads: `tokens` beside `token_ids`."""
    from transformer_explainer import load_model

    model = load_model(str(run.folder), allow_download=False)
    for argv in (("explain", TEXT), ("lens", TEXT), ("ablate", TEXT, "--layer", "0"), ("heads", TEXT, "--no-reference"),
                 ("importance", TEXT), ("prune", TEXT, "--max-heads", "1")):
        code, out, _ = run(*argv, "--json")
        assert code == 0
        d = json.loads(out)
        assert d["tokens"] == model.tokenizer.token_texts(d["token_ids"]) and len(d["tokens"]) == 9, argv[0]


def test_importance_and_prune(run):
    from transformer_explainer import load_model
    from transformer_explainer.analysis import head_importance, prune_heads

    code, out, _ = run("importance", TEXT, "--json")
    assert code == 0
    d = json.loads(out)
    code, table, _ = run("importance", TEXT)
    assert code == 0 and "most important" in table
    model = load_model(str(run.folder), allow_download=False)
    ref = head_importance(model, TEXT)
    assert torch.tensor(d["loss_change"]) == pytest.approx(ref.loss_change, abs=1e-6)
    assert [tuple(h) for h in d["ranked"]] == [h for h, _ in ref.ranked()]
    assert len([ln for ln in table.splitlines() if ln.strip()[:1].isdigit() and "nats" not in ln]) == 2

    code, out, _ = run("prune", TEXT, "--max-heads", "3", "--json")
    assert code == 0
    d = json.loads(out)
    curve = prune_heads(model, TEXT, max_heads=3, recompute=False)
    assert [tuple(s["head"]) for s in d["steps"]] == curve.heads
    assert [s["loss"] for s in d["steps"]] == pytest.approx(curve.losses, abs=1e-6)
    code, out, _ = run("prune", TEXT, "--max-heads", "2", "--rescore")
    assert code == 0 and "re-scoring" in out and len(out.strip().splitlines()) == 2 + 2 + 2
    code, _, err = run("prune", TEXT, "--max-heads", "0")
    assert code != 0 and "--max-heads" in err


def test_heads_json_and_table(run):
    code, out, _ = run("heads", TEXT, "--json")
    assert code == 0
    d = json.loads(out)
    assert set(d["roles"]) == set(d["text"]["scores"]) == set(d["reference"]["scores"])
    assert len(d["stats"]["entropy"]) == 2 and len(d["stats"]["entropy"][0]) == 4
    code, out, _ = run("heads", TEXT, "--no-reference")
    assert code == 0 and "induct" in out and "reference set" not in out
    assert len([ln for ln in out.splitlines() if ln.strip()[:1].isdigit()]) == 8


def test_export(run, tmp_path: Path):
    code, _, err = run("export", TEXT, "--out", str(tmp_path / "t.npz"))
    assert code == 0 and "wrote" in err
    assert load_npz(tmp_path / "t.npz")["blocks.1.attn.z"].shape[0] == 4
    code, _, _ = run("export", TEXT, "--out", str(tmp_path / "t.json"), "--names", "logits")
    d = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert code == 0 and list(d["values"]) == ["logits"]
    assert torch.tensor(d["values"]["logits"]).shape == (len(d["tokens"]), 50257)


@pytest.mark.parametrize("argv", [
    ("ablate", TEXT, "--layer", "7"),
    ("ablate", TEXT, "--layer", "0", "--head", "9"),
    ("export", TEXT, "--out", "trace.csv"),
    ("export", TEXT, "--out", "t.json", "--names", "nope"),
    ("lens", "", "--json"),
])
def test_bad_input_is_one_line(run, argv):
    code, out, err = run(*argv)
    assert code == 2 and out == ""
    assert err.count("\n") <= 2 and "error:" in err and "Traceback" not in err
