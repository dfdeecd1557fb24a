"""The features of a text (features/encode.py) through Python (`text_features`), the CLI (`features --json`) and the
API (POST /api/features): each equals an independent encoding of the trace's activation with the stored weights (an
SAELens-format folder written here with safetensors directly), the reconstruction plus the error is the activation,
the default autoencoder is the middle one a model ships, and bad input is one sentence, never a 500."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file, save_file

from transformer_explainer import load_model
from transformer_explainer.cli import main
from transformer_explainer.errors import InputError
from transformer_explainer.features.encode import text_features
from transformer_explainer.server import create_app

TEXT = "The cat sat on the mat, and then the cat slept on the mat again"
D, F, K = 64, 256, 8  # the tiny GPT-2's width; the autoencoders' features and k
HOOK = "blocks.1.hook_resid_post"


def write_sae(folder: Path, hook: str = HOOK, d_in: int = D, seed: int = 0, k: int = K) -> Path:
    """An autoencoder folder as SAELens writes one (cfg.json + sae_weights.safetensors), with json and safetensors
    directly. Encoder rows scaled so that activations are far from ties."""
    g = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"W_enc": torch.randn(d_in, F, generator=g) / d_in**0.5, "b_enc": torch.randn(F, generator=g) * 0.1,
               "W_dec": torch.randn(F, d_in, generator=g) / d_in**0.5, "b_dec": torch.randn(d_in, generator=g) * 0.1},
              str(folder / "sae_weights.safetensors"))
    (folder / "cfg.json").write_text(json.dumps({"d_in": d_in, "d_sae": F, "k": k, "architecture": "topk",
                                                 "hook_name": hook, "dtype": "float32",
                                                 "apply_b_dec_to_input": True, "normalize_activations": "none"}))
    return folder


def independent(x: torch.Tensor, folder: Path) -> tuple[list[list[tuple[int, float]]], torch.Tensor]:
    """Per position the active features by decreasing activation, and the reconstruction, from the stored weights:
    the TopK SAE's definition written out (sort the pre-activations, keep k, ReLU), not the code under test."""
    w = load_file(str(folder / "sae_weights.safetensors"))
    pre = (x.double() - w["b_dec"].double()) @ w["W_enc"].double() + w["b_enc"].double()
    rows, dense = [], torch.zeros(x.shape[0], F, dtype=torch.float64)
    for t in range(x.shape[0]):
        order = sorted(range(F), key=lambda j: -float(pre[t, j]))[:K]
        row = [(j, float(pre[t, j])) for j in order if float(pre[t, j]) > 0]
        rows.append(row)
        for j, a in row:
            dense[t, j] = a
    return rows, dense @ w["W_dec"].double() + w["b_dec"].double()


def same_features(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    assert [i for i, _ in got] == [i for i, _ in want]
    assert all(abs(a - b) < 1e-4 * max(1.0, abs(b)) for (_, a), (_, b) in zip(got, want, strict=True))


@pytest.fixture(scope="module")
def sae_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sae(tmp_path_factory.mktemp("sae") / HOOK)


@pytest.fixture(scope="module")
def shipping_model(tiny_gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The tiny GPT-2 in a folder laid out as a built-in model's, with autoencoders at three depths in its saes/."""
    folder = tmp_path_factory.mktemp("shipping") / "tiny-shipping"
    shutil.copytree(tiny_gpt2_dir, folder)
    for i, hook in enumerate(("blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", HOOK)):
        write_sae(folder / "saes" / hook, hook, seed=10 + i)
    m = load_model(str(folder), allow_download=False)
    m.source = "builtin"  # what a model found in the package's builtin/ folder says of itself
    return m


@pytest.fixture(scope="module")
def client(shipping_model):
    with TestClient(create_app({"tiny": shipping_model})) as c:
        yield c


def test_python_features_equal_an_independent_encoding(tiny_model, sae_dir: Path) -> None:
    trace = tiny_model.trace(TEXT)
    fs = text_features(tiny_model, trace, sae=sae_dir)
    x = trace["blocks.1.resid_post"]
    assert fs.hook == HOOK and fs.k == K and fs.d_sae == F and fs.n_tokens == trace.n_tokens
    assert torch.equal(fs.x, x.float())  # the activation the trace recorded, not another pass's
    want, recon = independent(x, sae_dir)
    for t in range(trace.n_tokens):
        same_features([(f.id, f.activation) for f in fs.at(t)], want[t])
        assert int(fs.counts[t]) == len(want[t])
    assert torch.allclose(fs.reconstruction.double(), recon, atol=1e-4)
    # a text gives what its trace gives
    again = text_features(tiny_model, TEXT, HOOK, sae=str(sae_dir))
    assert torch.equal(again.active_ids, fs.active_ids) and torch.allclose(again.active_values, fs.active_values)
    # the model's own method, from a text and from its trace
    for given in (TEXT, trace):
        own = tiny_model.features(given, HOOK, sae=sae_dir)
        assert torch.equal(own.active_ids, fs.active_ids) and torch.equal(own.active_values, fs.active_values)


def test_decode_plus_error_is_the_activation_and_the_error_is_said_honestly(tiny_model, sae_dir: Path) -> None:
    from transformer_explainer.features.sae import load_sae

    trace = tiny_model.trace(TEXT)
    fs = text_features(tiny_model, trace, sae=sae_dir)
    sae = load_sae(sae_dir)
    assert torch.allclose(sae.decode(fs.dense()) + fs.error, fs.x, atol=1e-6)
    assert torch.equal(fs.dense() != 0, sae.encode(fs.x) != 0)
    x = trace["blocks.1.resid_post"].double()
    _, recon = independent(x, sae_dir)
    rel = (x - recon).norm(dim=-1) / x.norm(dim=-1)
    assert torch.allclose(fs.relative_error.double(), rel, atol=1e-5)
    ev = 1 - float(((x - recon) ** 2).sum()) / float(((x - x.mean(0)) ** 2).sum())
    assert fs.explained_variance == pytest.approx(ev, abs=1e-5)
    assert text_features(tiny_model, "The", sae=sae_dir).explained_variance is None  # one position: no variance


def test_cli_json_equals_an_independent_encoding(tiny_gpt2_dir: Path, tiny_model, sae_dir: Path, capsys) -> None:
    assert main(["features", TEXT, "--model", str(tiny_gpt2_dir), "--offline", "--sae", str(sae_dir),
                 "--top", str(K), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hook"] == HOOK
    want, recon = independent(tiny_model.trace(TEXT)["blocks.1.resid_post"], sae_dir)
    assert [p["token"] for p in out["positions"]] == tiny_model.trace(TEXT).tokens
    for p, w in zip(out["positions"], want, strict=True):
        same_features([(f["id"], f["activation"]) for f in p["features"]], w)
        acts = [f["activation"] for f in p["features"]]
        assert acts == sorted(acts, reverse=True)
    # --top keeps the first N by activation
    assert main(["features", TEXT, "--model", str(tiny_gpt2_dir), "--offline", "--sae", str(sae_dir), "--top", "3",
                 "--json"]) == 0
    out3 = json.loads(capsys.readouterr().out)
    for p, w in zip(out3["positions"], want, strict=True):
        same_features([(f["id"], f["activation"]) for f in p["features"]], w[:3])


def test_cli_table(tiny_gpt2_dir: Path, sae_dir: Path, capsys) -> None:
    assert main(["features", TEXT, "--model", str(tiny_gpt2_dir), "--offline", "--sae", str(sae_dir)]) == 0
    out = capsys.readouterr().out
    assert HOOK in out and "' cat'" in out and "explained" in out


def test_the_default_autoencoder_is_the_middle_one_shipped(shipping_model) -> None:
    from transformer_explainer.features.encode import default_hook

    fs = text_features(shipping_model, TEXT)
    assert fs.hook == "blocks.0.hook_resid_post" and fs.source == "builtin"  # pre 0, post 0, post 1: the middle
    assert default_hook(["blocks.5.hook_resid_post", "blocks.1.hook_resid_post", "blocks.3.hook_resid_post"]) == \
        "blocks.3.hook_resid_post"
    shipped = text_features(shipping_model, TEXT, HOOK)
    folder = Path(shipping_model.folder) / "saes" / HOOK
    want, _ = independent(shipping_model.trace(TEXT)["blocks.1.resid_post"], folder)
    for t in range(shipped.n_tokens):
        same_features([(f.id, f.activation) for f in shipped.at(t)], want[t])


def test_api_features_equal_an_independent_encoding(client, shipping_model) -> None:
    r = client.post("/api/features", json={"model": "tiny", "text": TEXT, "hook": HOOK, "top": K})
    assert r.status_code == 200, r.text
    out = r.json()
    folder = Path(shipping_model.folder) / "saes" / HOOK
    want, recon = independent(shipping_model.trace(TEXT)["blocks.1.resid_post"], folder)
    assert out["hook"] == HOOK and out["k"] == K and out["d_sae"] == F
    for p, w in zip(out["positions"], want, strict=True):
        same_features([(f["id"], f["activation"]) for f in p["features"]], w)
    # ids give the same; the default hook is the middle one
    ids = shipping_model.encode(TEXT)
    r2 = client.post("/api/features", json={"ids": ids, "top": 4})
    assert r2.status_code == 200 and r2.json()["hook"] == "blocks.0.hook_resid_post"
    assert all(len(p["features"]) <= 4 for p in r2.json()["positions"])


def test_api_lists_the_shipped_hooks(client) -> None:
    r = client.get("/api/features/hooks", params={"model": "tiny"})
    assert r.status_code == 200, r.text
    hooks = r.json()["hooks"]
    assert [h["hook"] for h in hooks] == ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", HOOK]
    assert [h["default"] for h in hooks] == [False, True, False]
    assert all(h["d_sae"] == F and h["k"] == K and h["pages"] is False for h in hooks)


def one_sentence(detail: str) -> None:
    assert isinstance(detail, str) and detail and "\n" not in detail and "Traceback" not in detail


@pytest.mark.parametrize(("body", "phrase"), [
    ({"hook": "blocks.7.hook_resid_post"}, "none at blocks.7.hook_resid_post"),  # a hook the model lacks
    ({"hook": "blocks.1.resid_post"}, "is not a hook point"),  # misspelt
    ({"hook": HOOK, "top": K + 1}, f"give 1..{K}"),  # more than k
    ({"top": 0}, "top"),
    ({"top": 65}, "top"),
])
def test_api_bad_input_is_one_sentence(client, body: dict, phrase: str) -> None:
    r = client.post("/api/features", json={"text": TEXT, **body})
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    one_sentence(r.json()["detail"])
    assert phrase in r.json()["detail"]


def test_api_model_without_autoencoders(tiny_model) -> None:
    with TestClient(create_app({"plain": tiny_model})) as c:
        r = c.post("/api/features", json={"text": TEXT})
        assert r.status_code == 422 and "ships no sparse autoencoder" in r.json()["detail"]
        assert c.get("/api/features/hooks").json() == {"model": "plain", "hooks": []}


@pytest.mark.parametrize(("args", "phrase"), [
    (["--hook", "blocks.9.hook_resid_post", "--sae", "{sae}"], "was trained at blocks.1.hook_resid_post"),
    (["--sae", "{far}"], "has 2 layers"),  # the autoencoder's hook is past the model's layers
    (["--sae", "{narrow}"], "width 32"),  # width mismatch
    (["--sae", "{sae}", "--top", "9"], "give 1..8"),
    (["--sae", "{sae}", "--top", "0"], "--top"),
    (["--hook", "resid_post", "--sae", "{sae}"], "is not a hook point"),
    ([], "ships no sparse autoencoder"),
    (["--sae", "{missing}"], "no autoencoder folder"),
])
def test_cli_bad_input_is_one_line(tiny_gpt2_dir: Path, sae_dir: Path, tmp_path: Path, capsys, args: list[str],
                                   phrase: str) -> None:
    far = write_sae(tmp_path / "far", "blocks.5.hook_resid_post")
    narrow = write_sae(tmp_path / "narrow", d_in=32)
    argv = [a.format(sae=sae_dir, far=far, narrow=narrow, missing=tmp_path / "none") for a in args]
    assert main(["features", TEXT, "--model", str(tiny_gpt2_dir), "--offline", *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 1 and phrase in err[0] and "Traceback" not in captured.err, captured


def test_python_bad_input(tiny_model, sae_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="width 32"):
        text_features(tiny_model, TEXT, sae=write_sae(tmp_path / "narrow", d_in=32))
    with pytest.raises(InputError, match="ships no sparse autoencoder"):
        text_features(tiny_model, TEXT)
    with pytest.raises(InputError, match="was trained at"):
        text_features(tiny_model, TEXT, "blocks.0.hook_resid_post", sae=sae_dir)


@pytest.mark.parametrize("which", ["llama", "lfm2"])
def test_other_families_read_the_same_way(which: str, tmp_path: Path) -> None:
    """A Llama-family model (our code) and a hybrid that runs through transformers' own modules (lfm2): the features
    of the activation their trace recorded at the hook, as the stored weights encode it."""
    if which == "llama":
        from tests.conftest import make_hf_llama_family

        folder = make_hf_llama_family(tmp_path / which, "llama")
    else:
        from tests.helpers.hf_checkpoints import write_checkpoint

        folder = write_checkpoint(which, tmp_path / which, tokenizer=True)
    model = load_model(str(folder), allow_download=False)
    layer = model.config.n_layer - 1
    hook = f"blocks.{layer}.hook_resid_post"
    sae = write_sae(tmp_path / "sae", hook, d_in=model.config.n_embd)
    trace = model.trace(TEXT)
    fs = model.features(trace, sae=sae)  # the model's own method, through our code or through transformers
    want, recon = independent(trace[f"blocks.{layer}.resid_post"], sae)
    for t in range(trace.n_tokens):
        same_features([(f.id, f.activation) for f in fs.at(t)], want[t])
    assert torch.allclose(fs.reconstruction.double(), recon, atol=1e-4)
