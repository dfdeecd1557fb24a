"""The autoencoders shipped with the built-in models: each folder loads, fits its model, meets the project's quality
bars as its card says, and its explained variance measured again here on held-out text that the card's figures did
not use (2048 tokens from the end of the corpus's valid split, shipped in tests/unit/data) is the card's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from transformer_explainer import load_model
from transformer_explainer.features.quality import heldout_windows, measure
from transformer_explainer.features.sae import builtin_saes, check_fits, load_sae

SHIPPED = {"explainer-small": ("blocks.1.hook_resid_post", "blocks.3.hook_resid_post", "blocks.5.hook_resid_post"),
           "explainer-llama": ("blocks.3.hook_resid_post",)}
HELDOUT = Path(__file__).parent / "data" / "sae_heldout_ids.npy"


@pytest.mark.parametrize("model_name", list(SHIPPED))
def test_shipped_autoencoders_meet_their_cards(model_name: str) -> None:
    model = load_model(model_name, allow_download=False)
    folders = builtin_saes(model)
    assert list(folders) == list(SHIPPED[model_name])
    saes = {}
    for hook, folder in folders.items():
        figures = json.loads((folder / "quality.json").read_text())
        assert figures["hook"] == hook and figures["weights_dtype"] == "float16"
        assert figures["explained_variance"] >= 0.7
        assert figures["ce_loss_recovered"] >= 0.85
        assert figures["dead_fraction"] < 0.05
        assert figures["l0"] <= 32
        card = (folder / "SAE_CARD.md").read_text()
        assert f"| explained variance | {figures['explained_variance']:.3f} | >= 0.7 (meets) |" in card
        sae = load_sae(folder)
        assert sae.cfg.hook_name == hook and sae.cfg.model_name == model_name and sae.cfg.architecture == "topk"
        check_fits(sae, model)
        saes[hook] = (sae, figures)
    windows = heldout_windows(np.load(HELDOUT), 128, 2048)
    again = measure(model.net, {h: s for h, (s, _) in saes.items()}, windows, losses=False)
    for hook, (_, figures) in saes.items():
        assert again[hook].explained_variance == pytest.approx(figures["explained_variance"], abs=0.05), hook
        assert again[hook].l0 <= figures["config"]["k"]
