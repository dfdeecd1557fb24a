"""The command line on a decoder that runs through transformers' own modules (issue 34): LFM2, whose layers are short
convolutions and attention. Each command a learner runs answers what the Python API answers; a command that needs
what such a model does not have answers one sentence and a nonzero exit, before the model line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.hf_checkpoints import write_checkpoint
from transformer_explainer import load_model
from transformer_explainer.cli import _architecture, main
from transformer_explainer.sampling import SamplingParams

TEXT = "The cat sat on the mat"


@pytest.fixture(scope="module")
def lfm2_dir(tmp_path_factory) -> Path:
    return write_checkpoint("lfm2", tmp_path_factory.mktemp("lfm2") / "lfm2", tokenizer=True)


@pytest.fixture(scope="module")
def lfm2(lfm2_dir):
    return load_model(str(lfm2_dir), allow_download=False)


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def model_args(folder: Path) -> list[str]:
    return ["--model", str(folder), "--offline"]


def test_the_model_line_says_it_runs_through_transformers(lfm2_dir, capsys):
    code, _, err = run(capsys, "explain", TEXT, *model_args(lfm2_dir))
    assert code == 0
    line = next(x for x in err.splitlines() if x.startswith("model: "))
    assert ("runs through transformers' own modules: lfm2 (Lfm2ForCausalLM), 4 layers: 2 short convolution, "
            "2 attention; 4 heads (2 key/value) per attention layer, d_model 64, context 128") in line
    # transformers' own notes while it loads (its weights' progress bar, a reference kernel) are not the command's
    assert "Loading weights" not in err and "[transformers]" not in err
    assert err.strip().splitlines() == [line]


def test_explain_json_is_the_apis_next_token(lfm2_dir, lfm2, capsys):
    code, out, _ = run(capsys, "explain", TEXT, *model_args(lfm2_dir), "--json", "--top", "5")
    assert code == 0
    got = json.loads(out)
    assert set(got) == {"model", "tokens", "token_ids", "char_groups", "top"}  # the schema of every model
    trace = lfm2.trace(TEXT)
    dist = lfm2.next_token(trace, SamplingParams())
    assert got["token_ids"] == trace.token_ids and got["tokens"] == trace.tokens
    assert [r["id"] for r in got["top"]] == dist.top(5)
    assert [r["logit"] for r in got["top"]] == pytest.approx([float(dist.logits[i]) for i in dist.top(5)], abs=1e-6)
    assert [r["prob"] for r in got["top"]] == pytest.approx([float(dist.probs[i]) for i in dist.top(5)], abs=1e-7)


def test_generate_greedy_is_the_apis(lfm2_dir, lfm2, capsys):
    code, out, _ = run(capsys, "generate", TEXT, *model_args(lfm2_dir), "-n", "6", "--temperature", "0")
    assert code == 0
    ids = lfm2.encode(TEXT, truncate=False)
    new = [t.id for t in lfm2.generate_ids(ids, 6, SamplingParams(temperature=0.0), stop_at_eos=False)]
    eos = set(lfm2.tokenizer.eos_ids())
    kept = new[:next((i for i, t in enumerate(new) if t in eos), len(new))]
    assert out == TEXT + lfm2.tokenizer.decode(kept) + "\n"


def test_export_holds_the_traces_values(lfm2_dir, lfm2, tmp_path, capsys):
    path = tmp_path / "trace.npz"
    code, _, err = run(capsys, "export", TEXT, *model_args(lfm2_dir), "--out", str(path))
    assert code == 0 and f"wrote {path}" in err
    trace = lfm2.trace(TEXT)
    with np.load(path) as saved:
        assert "blocks.0.conv.out" in saved and "blocks.1.attn.pattern" in saved
        assert "blocks.0.attn.pattern" not in saved  # a short convolution has no pattern
        for name in ("blocks.0.conv.out", "blocks.1.attn.pattern", "blocks.3.resid_post", "logits"):
            np.testing.assert_allclose(saved[name], trace[name].float().numpy(), rtol=1e-6, atol=1e-6)


def test_lens_json_is_the_apis(lfm2_dir, lfm2, capsys):
    from transformer_explainer.analysis.lens import logit_lens

    code, out, _ = run(capsys, "lens", TEXT, *model_args(lfm2_dir), "--json", "--top", "3")
    assert code == 0
    trace = lfm2.trace(TEXT)
    want = {"model": lfm2.name, "tokens": trace.tokens, "token_ids": trace.token_ids,
            **logit_lens(lfm2, trace, top=3, positions=[-1]).to_dict()}
    assert json.loads(out) == json.loads(json.dumps(want, ensure_ascii=False))


def test_snapshot_writes_the_page_of_the_trace(lfm2_dir, lfm2, tmp_path, capsys):
    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        pytest.skip("the web UI is not built (cd web && npm ci && npm run build)")
    path = tmp_path / "page.html"
    code, _, err = run(capsys, "snapshot", TEXT, *model_args(lfm2_dir), "--out", str(path), "--no-ablations")
    assert code == 0 and f"wrote {path}" in err
    page = path.read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script type="application/json" id="te-snapshot">(.*?)</script>', page, re.S)[1])
    trace = lfm2.trace(TEXT)
    assert data["trace"]["token_ids"] == trace.token_ids
    assert data["trace"]["config"]["capabilities"]["runs"] == "transformers"
    assert "blocks.0.conv.out" in data["tensors"] and "blocks.0.attn.pattern" not in data["tensors"]


def test_importance_says_which_layers_have_no_heads(lfm2_dir, lfm2, capsys):
    from transformer_explainer.analysis.ablation import head_importance

    code, out, _ = run(capsys, "importance", TEXT, *model_args(lfm2_dir))
    assert code == 0
    rows = {int(m[1]): m[2] for line in out.splitlines() if (m := re.match(r"\s*(\d+) (.*)$", line))}
    assert rows[0].strip() == rows[2].strip() == "(no attention heads: short convolution)"
    imp = head_importance(lfm2, lfm2.encode(TEXT, truncate=False), mode="zero")
    for layer in (1, 3):
        assert [float(v) for v in rows[layer].split()] == pytest.approx(
            [float(v) for v in imp.loss_change[layer]], abs=1e-4)
    assert "nan" not in out


def test_importance_json_is_strict_json_with_null_for_a_layer_without_heads(lfm2_dir, lfm2, capsys):
    from transformer_explainer.analysis.ablation import head_importance

    code, out, _ = run(capsys, "importance", TEXT, *model_args(lfm2_dir), "--json")
    assert code == 0
    got = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert got["loss_change"][0] == got["loss_change"][2] == [None] * 4
    imp = head_importance(lfm2, lfm2.encode(TEXT, truncate=False), mode="zero")
    assert got["loss_change"][3] == pytest.approx([float(v) for v in imp.loss_change[3]], abs=1e-6)


def test_attribute_names_a_layers_token_mixer(lfm2_dir, lfm2, capsys):
    code, out, _ = run(capsys, "attribute", TEXT, *model_args(lfm2_dir), "--top", "100")
    assert code == 0
    a = lfm2.attribute(TEXT)
    mixers = [c for c in a.components if c.kind == "mixer"]
    assert {c.layer for c in mixers} == {0, 2}
    for c in mixers:
        assert re.search(rf"short convolution {c.layer}\s+{re.escape(f'{c.value:+.4f}')}", out)
    assert "token mixers written whole" in out


def test_patch_marks_what_a_layer_does_not_compute(lfm2_dir, capsys):
    code, out, _ = run(capsys, "patch", "Hello world", "Hello wzrld", *model_args(lfm2_dir),
                       "--answer", "1", "--wrong", "2", "--what", "heads", "--what", "mlp_out")
    assert code == 0
    heads = out[out.index("heads (each head's z"):]
    heads = heads[:heads.index("\n\n")]  # the heads' grid alone, before the next one
    rows = {int(m[1]): m[2].split() for line in heads.splitlines() if (m := re.match(r"\s*(\d+) (.*)$", line))}
    assert rows[0] == rows[2] == ["-"] * 4
    assert all(v != "-" for v in rows[1] + rows[3])
    assert "(-: layers 0, 2 have no heads to patch)" in heads and "nan" not in out


def test_heads_scores_the_attention_layers_and_names_the_others(lfm2_dir, lfm2, capsys):
    """Head roles were refused for a model with layers without attention; the attention layers' heads are scored (the
    library's numbers), each other layer is one line saying what it mixes its tokens with; the JSON has None rows."""
    from transformer_explainer.analysis import ROLES, attention_stats, head_roles

    code, out, _ = run(capsys, "heads", TEXT, *model_args(lfm2_dir), "--no-reference")
    assert code == 0 and "nan" not in out
    for layer in (0, 2):
        assert re.search(rf"^\s+{layer}\s+\(no attention heads: short convolution\)$", out, re.M)
    trace = lfm2.trace(TEXT)
    roles, stats = head_roles(trace), attention_stats(trace)
    for layer in (1, 3):
        for h in range(4):
            line = re.search(rf"^\s+{layer}\s+{h} (.*)$", out, re.M)
            assert line, (layer, h)
            shown = [float(v) for v in line[1].split()]
            want = [roles.scores[r][layer, h].item() for r in ROLES]
            want += [stats.normalized_entropy[layer, h].item(), stats.mean_distance[layer, h].item()]
            assert shown == pytest.approx(want, abs=6e-3)
    code, out, _ = run(capsys, "heads", TEXT, *model_args(lfm2_dir), "--no-reference", "--json")
    body = json.loads(out)
    assert code == 0 and body["text"]["scores"]["induction"][2] == [None] * 4
    assert body["stats"]["entropy"][0] == [None] * 4 and None not in body["stats"]["entropy"][1]


@pytest.mark.parametrize(("command", "words"), [
    (["neighbours", "a", "--no-space"], "lfm2 runs through transformers' own modules (lfm2), and the embedding "
                                        "explorer reads the token embedding by its name (embed.W_E)"),
    (["analogy", "a", "b", "c", "--no-space"], "the embedding explorer reads the token embedding by its name"),
    (["ablate", TEXT, "--layer", "0"], "layer 0 has no attention"),
])
def test_what_such_a_model_does_not_have_is_one_sentence(lfm2_dir, capsys, command, words):
    code, out, err = run(capsys, *command, *model_args(lfm2_dir))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("transformer-explainer: error: ") and words in lines[0]
    assert "Traceback" not in err and "internal error" not in err


def test_models_describes_a_folder_by_which_way_it_runs(lfm2_dir, tmp_path):
    arch = _architecture(lfm2_dir)
    assert arch == {"architecture": "lfm2", "family": "generic",
                    "shape": "lfm2 through transformers (Lfm2ForCausalLM): 4 layers (2 conv, 2 full_attention), "
                             "4 heads (2 key/value), d_model 64"}
    encoder = tmp_path / "bert"
    encoder.mkdir()
    (encoder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    arch = _architecture(encoder)
    assert arch["architecture"] == "bert" and arch["family"] == "unknown"
    assert "encoder" in arch["shape"] and "unreadable" not in arch["shape"]
