"""Steering's faces: a feature's direction is its autoencoder's decoder row (an autoencoder written in SAELens's
format in the test); `model.steer` and `transformer-explainer steer` give the engine's answer; bad input is one
sentence (one line on stderr, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from transformer_explainer import cli
from transformer_explainer.errors import InputError
from transformer_explainer.features.sae import SAEConfig, SparseAutoencoder, save_sae
from transformer_explainer.sampling import SamplingParams
from transformer_explainer.steering import contrast_direction, steer, vector_direction
from transformer_explainer.steering_features import feature_direction

TEXT = "The cat sat on the mat and the cat"
A = ["I love this, it is wonderful", "What a happy day"]
B = ["I hate this, it is awful", "What a sad day"]


def write_sae(folder: Path, d_in: int, layer: int, d_sae: int = 32, seed: int = 0) -> SparseAutoencoder:
    g = torch.Generator().manual_seed(seed)
    sae = SparseAutoencoder(SAEConfig(d_in=d_in, d_sae=d_sae, k=4, hook_name=f"blocks.{layer}.hook_resid_post"))
    with torch.no_grad():
        for p in sae.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    save_sae(sae, folder)
    return sae


@pytest.fixture(scope="module")
def sae_dir(tiny_model, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sae") / "blocks.1.hook_resid_post"
    write_sae(folder, tiny_model.config.n_embd, 1)
    return folder


def test_a_feature_direction_is_its_decoder_row(tiny_model, sae_dir: Path) -> None:
    from safetensors.torch import load_file

    W_dec = load_file(str(sae_dir / "sae_weights.safetensors"))["W_dec"]
    d = feature_direction(tiny_model, 1, 7, sae_dir)
    assert torch.equal(d.vector, W_dec[7].to(torch.float32)) and d.feature == 7 and d.layer == 1
    by_feature = steer(tiny_model, TEXT, d, 2.0, tokens=6, sweep=False)
    by_vector = steer(tiny_model, TEXT, vector_direction(tiny_model, W_dec[7], 1), 2.0, tokens=6, sweep=False)
    assert [t.id for t in by_feature.steered] == [t.id for t in by_vector.steered]


def test_bad_features_are_one_sentence(tiny_model, sae_dir: Path, tmp_path: Path) -> None:
    cases = [
        (lambda: feature_direction(tiny_model, 1, 32, sae_dir), "feature 32 is outside 0..31"),
        (lambda: feature_direction(tiny_model, 0, 3, sae_dir), "reads blocks.1.hook_resid_post, not blocks.0"),
        (lambda: feature_direction(tiny_model, 1, 3, write_sae(tmp_path / "wide", 48, 1) and tmp_path / "wide"),
         "width 48"),
        (lambda: feature_direction(tiny_model, 1, 3), "no autoencoder at blocks.1.hook_resid_post"),
        (lambda: feature_direction(tiny_model, 5, 3, sae_dir), "layer 5 is outside"),
    ]
    for make, words in cases:
        with pytest.raises(InputError) as e:
            make()
        assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_the_python_api_is_the_engines(tiny_model, sae_dir: Path) -> None:
    params = SamplingParams(temperature=0.8, seed=3)
    s = tiny_model.steer(TEXT, 3.0, contrast=(A, B), layer=1, tokens=6, params=params)
    want = steer(tiny_model, TEXT, contrast_direction(tiny_model, A, B, 1), 3.0, tokens=6, params=params)
    assert [t.id for t in s.steered] == [t.id for t in want.steered]
    assert [p.mean_log_prob for p in s.sweep] == [p.mean_log_prob for p in want.sweep]
    f = tiny_model.steer(TEXT, 3.0, direction=feature_direction(tiny_model, 1, 7, sae_dir), tokens=6, sweep=False)
    assert f.direction.kind == "feature" and f.sweep == []
    with pytest.raises(InputError, match="exactly one direction"):
        tiny_model.steer(TEXT, 1.0, direction=f.direction, contrast=(A, B), layer=1)
    with pytest.raises(InputError, match="finite"):
        tiny_model.steer(TEXT, float("nan"), contrast=(A, B), layer=1)


@pytest.fixture
def run(tiny_gpt2_dir: Path, capsys: pytest.CaptureFixture):
    def go(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["steer", *argv, "--model", str(tiny_gpt2_dir), "--offline"])
        out, err = capsys.readouterr()
        return code, out, err

    return go


@pytest.fixture
def contrast_files(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "a.txt").write_text("\n".join(A) + "\n\n")
    (tmp_path / "b.txt").write_text("\n".join(B))
    return str(tmp_path / "a.txt"), str(tmp_path / "b.txt")


def test_the_cli_answers_as_the_engine(run, tiny_model, contrast_files, sae_dir: Path) -> None:
    code, out, err = run(TEXT, "--contrast", *contrast_files, "--layer", "1", "--strength", "3", "--tokens", "6",
                         "--seed", "9", "--json")
    assert code == 0, err
    got = json.loads(out)
    params = SamplingParams(temperature=1.0, seed=9)
    want = steer(tiny_model, TEXT, contrast_direction(tiny_model, A, B, 1), 3.0, tokens=6, params=params)
    assert [t["id"] for t in got["steered"]] == [t.id for t in want.steered]
    assert [t["id"] for t in got["plain"]] == [t.id for t in want.plain]
    assert got["breakdown"] == want.breakdown and got["sampling"]["seed"] == 9
    code, out, err = run(TEXT, "--feature", "1:7", "--sae", str(sae_dir), "--strength", "2", "--tokens", "5")
    assert code == 0, err
    assert "plain:" in out and "steered:" in out and "breakdown sweep" in out and "promotes" in out


@pytest.mark.parametrize("argv,words", [
    (["--contrast", "A", "B", "--strength", "1"], "--contrast needs --layer"),
    (["--strength", "1"], "give a direction"),
    (["--feature", "1:99", "--sae", "SAE", "--strength", "1"], "feature 99 is outside"),
    (["--feature", "1-3", "--strength", "1"], "LAYER:ID"),
    (["--contrast", "A", "B", "--layer", "7", "--strength", "1"], "layer 7 is outside"),
    (["--contrast", "A", "EMPTY", "--layer", "1", "--strength", "1"], "has no prompts"),
    (["--contrast", "A", "B", "--layer", "1", "--strength", "nan"], "finite"),
    (["--contrast", "A", "B", "--layer", "1", "--strength", "1", "--tokens", "65"], "from 1 to 64"),
])
def test_cli_bad_input_is_one_line(run, contrast_files, sae_dir: Path, tmp_path: Path, argv: list[str],
                                   words: str) -> None:
    (tmp_path / "empty.txt").write_text("\n  \n")
    subs = {"A": contrast_files[0], "B": contrast_files[1], "EMPTY": str(tmp_path / "empty.txt"), "SAE": str(sae_dir)}
    code, out, err = run(TEXT, *[subs.get(a, a) for a in argv])
    assert code == 2 and out == ""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], err
