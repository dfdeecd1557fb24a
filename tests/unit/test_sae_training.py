"""Training sparse autoencoders (training/sae.py, `train sae`): on a tiny random GPT-2 for a few steps the
loss falls, the files load, a resumed run ends where an uninterrupted one does, and the card's figures are those
of the stored weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_explainer import load_model
from transformer_explainer.errors import InputError
from transformer_explainer.features.quality import heldout_windows, measure
from transformer_explainer.features.sae import load_sae, save_sae
from transformer_explainer.training.sae import SAETrainConfig, corpus_ids, parse_width, train_saes

HOOKS = ("blocks.0.hook_resid_post", "blocks.1.hook_resid_mid")


def config(**changes) -> SAETrainConfig:
    base = dict(model="tiny", hooks=HOOKS, d_sae=256, k=8, tokens=256 * 24, batch=256, context=32,
                windows_per_chunk=16, lr=2e-3, dead_tokens=1024, checkpoint_chunks=2, seed=3)
    return SAETrainConfig(**{**base, **changes})


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    """Token ids with some structure (a few repeated phrases among random tokens), as a corpus gives."""
    rng = np.random.default_rng(0)
    phrases = [rng.integers(2, 50000, size=rng.integers(3, 9)) for _ in range(40)]
    parts = [phrases[i] if i < 40 else rng.integers(2, 50000, size=5) for i in rng.integers(0, 60, size=4000)]
    return np.concatenate(parts).astype(np.uint16 if max(map(max, parts)) < 65536 else np.uint32)


def test_loss_falls_files_load_and_resume_continues(tiny_model, corpus: np.ndarray, tmp_path: Path) -> None:
    net = tiny_model.net
    full = train_saes(net, corpus, config(), tmp_path / "full", model_name="tiny")
    log = full.state["log"]
    assert len(log) == 12 and log[-1]["step"] == 24
    for h in HOOKS:
        assert log[-1][h]["fvu"] < 0.85 * log[0][h]["fvu"], (h, log[0][h], log[-1][h])
        assert log[-1][h]["l0"] <= 8
    # the files, written and read back in the SAELens format
    for h, sae in full.saes.items():
        again = load_sae(save_sae(sae, tmp_path / "saes" / h))
        assert again.cfg.hook_name == h and again.cfg.k == 8 and again.cfg.d_sae == 256
        x = torch.randn(5, 64)
        assert torch.allclose(again.encode(x), sae.encode(x), atol=1e-6)
        assert torch.allclose(again.W_dec.norm(dim=1), torch.ones(256), atol=1e-5)  # unit-norm decoder rows
    # interrupted after 2 chunks (a checkpoint), then resumed: the same weights as the uninterrupted run
    part = train_saes(net, corpus, config(), tmp_path / "cut", model_name="tiny", stop_after_chunks=2)
    assert part.state["step"] == 4
    with pytest.raises(InputError, match="holds a run already: pass --resume"):
        train_saes(net, corpus, config(), tmp_path / "cut", model_name="tiny")
    with pytest.raises(InputError, match=r"with other settings \(k\)"):
        train_saes(net, corpus, config(k=4), tmp_path / "cut", model_name="tiny", resume=True)
    resumed = train_saes(net, corpus, config(), tmp_path / "cut", model_name="tiny", resume=True)
    assert resumed.state["step"] == 24 and "tokens_changes" not in resumed.state
    for h in HOOKS:
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            assert torch.allclose(getattr(resumed.saes[h], name), getattr(full.saes[h], name), atol=1e-6), (h, name)
    # a finished run lengthened: only --tokens may change on resume, and the state says when it did
    longer = train_saes(net, corpus, config(tokens=256 * 26), tmp_path / "cut", model_name="tiny", resume=True)
    assert longer.state["step"] == 26
    assert longer.state["tokens_changes"] == [{"at_step": 24, "from": 256 * 24, "to": 256 * 26}]
    with pytest.raises(InputError, match="ends before that"):
        train_saes(net, corpus, config(tokens=256 * 10), tmp_path / "cut", model_name="tiny", resume=True)
    # the export reads raw activations: its explained variance on the training text is that of training's last steps
    q = measure(net, full.saes, heldout_windows(corpus, 32, 2048), losses=False)
    for h in HOOKS:
        assert q[h].explained_variance > 1 - 1.5 * log[-1][h]["fvu"] - 0.1
        assert q[h].l0 <= 8


def test_width_and_settings_refused_in_one_sentence(tiny_model, corpus: np.ndarray, tmp_path: Path) -> None:
    assert parse_width("16x", 256) == 4096 and parse_width("1000", 256) == 1000 and parse_width("0.5x", 64) == 32
    for bad in ("x", "-3", "sixteen", "0"):
        with pytest.raises(InputError, match="neither a multiple of d_model"):
            parse_width(bad, 64)
    with pytest.raises(InputError, match="has 2 layers: it has no blocks.4.hook_resid_post"):
        train_saes(tiny_model.net, corpus, config(hooks=("blocks.4.hook_resid_post",)), tmp_path, model_name="tiny")
    with pytest.raises(InputError, match="--k must be between 1 and the width"):
        train_saes(tiny_model.net, corpus, config(k=300), tmp_path, model_name="tiny")
    with pytest.raises(InputError, match="not a hook point"):
        train_saes(tiny_model.net, corpus, config(hooks=("blocks.0.attn.hook_z",)), tmp_path, model_name="tiny")


def test_cli_writes_folders_cards_and_figures(tiny_gpt2_dir: Path, tmp_path: Path, capsys) -> None:
    from transformer_explainer.cli import main

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    words = "the king said that the queen stayed in the room while the model computed what it reads".split()
    rng = np.random.default_rng(1)
    for split, n in (("train", 3000), ("valid", 600)):
        docs = [" ".join(rng.choice(words, size=20)) for _ in range(n // 20)]
        (corpus / f"{split}.txt").write_text("\n\n".join(docs))
    out = tmp_path / "run"
    code = main(["train", "sae", "--model", str(tiny_gpt2_dir), "--offline", "--hook", "blocks.1.hook_resid_post",
                 "--width", "2x", "--k", "4", "--tokens", "2048", "--batch", "256", "--context", "32",
                 "--corpus", str(corpus), "--out", str(out), "--eval-tokens", "512", "--dtype", "float16"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    folder = out / "blocks.1.hook_resid_post"
    assert sorted(p.name for p in folder.iterdir()) == ["SAE_CARD.md", "cfg.json", "quality.json",
                                                       "sae_weights.safetensors"]
    cfg = json.loads((folder / "cfg.json").read_text())
    assert (cfg["d_in"], cfg["d_sae"], cfg["k"], cfg["architecture"], cfg["dtype"]) == (64, 128, 4, "topk", "float16")
    figures = json.loads((folder / "quality.json").read_text())
    sae = load_sae(folder)
    # the card's figures are those of the stored (float16) weights, measured again here
    model = load_model(str(tiny_gpt2_dir), allow_download=False)
    valid = corpus_ids(model.tokenizer, corpus, "valid")
    hook = "blocks.1.hook_resid_post"
    q = measure(model.net, {hook: sae}, heldout_windows(valid, 32, 512))[hook]
    assert figures["tokens"] == q.tokens == 512
    assert figures["explained_variance"] == pytest.approx(q.explained_variance, abs=1e-6)
    assert figures["ce_loss_recovered"] == pytest.approx(q.ce_loss_recovered, abs=1e-6)
    assert figures["l0"] <= 4 and 0 <= figures["dead_fraction"] <= 1
    card = (folder / "SAE_CARD.md").read_text()
    assert f"| explained variance | {figures['explained_variance']:.3f} |" in card
    assert "step 8/8" in printed.err  # the progress lines
    assert f"blocks.1.hook_resid_post: explained variance {figures['explained_variance']:.3f}" in printed.out


def test_sparse_backward_equals_dense_autograd() -> None:
    """The hand-written sparse backward (SparseCode) gives the gradients autograd gives through the dense maths."""
    from transformer_explainer.training.sae import TopKTraining

    g = torch.Generator().manual_seed(0)
    net = TopKTraining(16, 64, 4, g).double()
    with torch.no_grad():
        net.b_enc.normal_(0, 0.1, generator=g)
        net.b_dec.normal_(0, 0.1, generator=g)
    x = torch.randn(10, 16, generator=g, dtype=torch.float64)
    target = torch.randn(10, 16, generator=g, dtype=torch.float64)
    for relu, n in ((True, 4), (False, 7)):
        pre = net.pre_activation(x)
        top = pre.topk(n, dim=-1)
        net.zero_grad()
        (net.code(x, top.indices, top.values, relu) - target).pow(2).sum().backward()
        sparse = {k: p.grad.clone() for k, p in net.named_parameters()}
        net.zero_grad()
        dense_pre = (x - net.b_dec) @ net.W_enc_t.t() + net.b_enc
        chosen = dense_pre.gather(-1, top.indices)
        a = torch.zeros_like(dense_pre).scatter(-1, top.indices, chosen.relu() if relu else chosen)
        (a @ net.W_dec - target).pow(2).sum().backward()
        for k, p in net.named_parameters():
            assert torch.allclose(sparse[k], p.grad, atol=1e-10), k
