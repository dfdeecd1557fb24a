"""`transformer-explainer attribute` and `patch` end to end on a tiny local model: the JSON shapes of the issue
(every component as {kind, layer, head, value} with metric and rest, the values plus rest equal to metric; clean,
corrupted and one grid per kind, resid_pre as [layer][position], heads as [layer][head]), their values equal to
the Python API's, the tables, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from transformer_explainer import cli

TEXT = "The cat sat on the mat and the cat"
CLEAN = "The cat sat on the mat and the dog sat on the"
CORRUPTED = "The cat sat on the rug and the dog sat on the"


@pytest.fixture
def run(tiny_gpt2_dir: Path, capsys: pytest.CaptureFixture):
    def go(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv, "--model", str(tiny_gpt2_dir), "--offline"])
        out, err = capsys.readouterr()
        return code, out, err

    return go


def _answer_and_wrong(model) -> tuple[int, int]:
    d = model.last_logits(model.encode(CLEAN)) - model.last_logits(model.encode(CORRUPTED))
    return int(torch.argmax(d)), int(torch.argmin(d))


def test_attribute_json_lists_every_component_and_sums_to_the_metric(run, tiny_model) -> None:
    code, out, _ = run("attribute", TEXT, "--json")
    assert code == 0
    d = json.loads(out)
    L, H = tiny_model.config.n_layer, tiny_model.config.n_head
    for c in d["components"]:
        assert set(c) == {"kind", "layer", "head", "expert", "value"}
        assert (c["expert"] is None) == (c["kind"] != "expert")
        assert c["kind"] in {"embed", "pos_embed", "head", "attn_bias", "mlp", "expert"}
        assert (c["layer"] is None) == (c["kind"] in ("embed", "pos_embed"))
        assert (c["head"] is None) == (c["kind"] != "head")
    assert sum(c["kind"] == "head" for c in d["components"]) == L * H
    assert sum(c["value"] for c in d["components"]) + d["rest"] == pytest.approx(d["metric"], abs=1e-4)
    a = tiny_model.attribute(TEXT)
    assert d["metric"] == pytest.approx(a.metric) and d["target"]["id"] == a.target
    assert [c["value"] for c in d["components"]] == pytest.approx([c.value for c in a.components])


def test_attribute_versus_and_position(run, tiny_model) -> None:
    code, out, _ = run("attribute", TEXT, "--target", " cat", "--versus", " dog", "--json")
    assert code == 0
    d = json.loads(out)
    logits = tiny_model.trace(TEXT).next_token_logits().double()
    cat, dog = tiny_model.token_id(" cat"), tiny_model.token_id(" dog")
    assert d["target"]["id"] == cat and d["versus"]["id"] == dog
    assert d["metric"] == pytest.approx(float(logits[cat] - logits[dog]), abs=1e-4)
    assert sum(c["value"] for c in d["components"]) + d["rest"] == pytest.approx(d["metric"], abs=1e-4)
    code, out, _ = run("attribute", TEXT, "--position", "1", "--target", str(cat), "--json")
    assert code == 0 and json.loads(out)["position"] == 1 and json.loads(out)["target"]["id"] == cat
    code, out, _ = run("attribute", TEXT, "--position", "1", "--json")
    assert json.loads(out)["target"]["id"] == tiny_model.encode(TEXT)[2]  # the token that came next


def test_attribute_table(run, tiny_model) -> None:
    code, out, _ = run("attribute", TEXT, "--top", "4")
    assert code == 0
    a = tiny_model.attribute(TEXT)
    assert f"= {a.metric:.4f}" in out and f"({a.rest:.4f})" in out
    rows = [line.split() for line in out.split("value\n", 1)[1].split("\n\n")[0].splitlines()]
    assert [r[0] for r in rows] == ["1", "2", "3", "4"]
    assert [float(r[-1]) for r in rows] == pytest.approx([c.value for c in a.ranked(4)], abs=1e-4)
    assert "by kind:" in out


def test_patch_json_shapes_and_values(run, tiny_model) -> None:
    a, w = _answer_and_wrong(tiny_model)
    code, out, _ = run("patch", CLEAN, CORRUPTED, "--answer", str(a), "--wrong", str(w), "--json")
    assert code == 0
    d = json.loads(out)
    L, H, T = tiny_model.config.n_layer, tiny_model.config.n_head, len(tiny_model.encode(CLEAN))
    p = tiny_model.patch(CLEAN, CORRUPTED, a, w)
    assert d["clean"] == pytest.approx(p.clean) and d["corrupted"] == pytest.approx(p.corrupted)
    assert set(d["grids"]) == {"resid_pre", "attn_out", "mlp_out", "heads"}
    assert len(d["grids"]["resid_pre"]) == L and {len(r) for r in d["grids"]["resid_pre"]} == {T}
    assert len(d["grids"]["heads"]) == L and {len(r) for r in d["grids"]["heads"]} == {H}
    for kind, grid in d["grids"].items():
        assert torch.allclose(torch.tensor(grid), p.grids[kind], atol=1e-6), kind
    # patching the whole residual stream before block 0 at the changed position makes the clean run
    changed = [i for i, (x, y) in enumerate(zip(d["clean_ids"], d["corrupted_ids"], strict=True)) if x != y]
    assert d["grids"]["resid_pre"][0][changed[0]] == pytest.approx(1.0, abs=1e-4)


def test_patch_table_and_some_grids(run, tiny_model) -> None:
    a, w = _answer_and_wrong(tiny_model)
    code, out, _ = run("patch", CLEAN, CORRUPTED, "--answer", str(a), "--wrong", str(w), "--what", "heads",
                       "--what", "resid_pre")
    assert code == 0
    assert "heads (each head's z" in out and "resid_pre (layer x position)" in out and "mlp_out" not in out
    assert "(corrupted: ' rug')" in out
    code, out, _ = run("patch", CLEAN, CORRUPTED, "--answer", str(a), "--wrong", str(w), "--what", "heads", "--json")
    assert list(json.loads(out)["grids"]) == ["heads"]


@pytest.mark.parametrize(("argv", "message"), [
    (("patch", CLEAN, "The cat sat on the big red mat and the dog sat on the", "--answer", " cat", "--wrong", " dog"),
     "same number of tokens"),
    (("patch", CLEAN, CLEAN, "--answer", " cat", "--wrong", " dog"), "same tokens"),
    (("patch", CLEAN, CORRUPTED, "--answer", " catastrophically", "--wrong", " dog"), "not one token"),
    (("patch", CLEAN, CORRUPTED, "--answer", " cat", "--wrong", " cat"), "same token"),
    (("attribute", TEXT, "--target", " cat", "--versus", " cat"), "same token"),
    (("attribute", TEXT, "--position", "99"), "outside"),
])
def test_bad_input_is_one_line(run, argv, message) -> None:
    code, out, err = run(*argv)
    assert code == 2 and out == ""
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err
