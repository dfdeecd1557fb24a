"""The feature pages shipped beside the built-in models' autoencoders: every shipped autoencoder has them, they were
built with the weights shipped now (a feature's top context, traced again and encoded, peaks where the page says and
with the activation it says; its promoted and suppressed tokens are the decoder row's through the final norm and the
unembedding), and together they stay a few MB."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from transformer_explainer import load_model
from transformer_explainer.features.encode import text_features
from transformer_explainer.features.pages import load_pages, pages_size
from transformer_explainer.features.sae import builtin_saes, load_sae

MODELS = ("explainer-small", "explainer-llama")


@pytest.mark.parametrize("model_name", MODELS)
def test_every_shipped_autoencoder_has_pages_built_with_its_weights(model_name: str) -> None:
    model = load_model(model_name, allow_download=False)
    folders = builtin_saes(model)
    assert folders, f"{model_name} ships no autoencoder"
    for hook, folder in folders.items():
        pages = load_pages(folder)
        assert pages is not None, f"{model_name} {hook} ships without feature pages"
        sae = load_sae(folder)
        assert pages.meta["hook"] == hook and pages.d_sae == sae.cfg.d_sae and pages.meta["model"] == model_name
        weights = hashlib.sha256((folder / "sae_weights.safetensors").read_bytes()).hexdigest()
        assert pages.meta["weights_sha256"] == weights, f"{hook}: built for other weights: run build_feature_pages"
        density = pages.a["density"]
        # the most frequent features, and a few others that fire
        firing = np.flatnonzero(density > 0)
        assert len(firing) > 0.5 * sae.cfg.d_sae  # most fire within the pages' slice of the corpus
        rng = np.random.default_rng(0)
        chosen = [*np.argsort(-density)[:2].tolist(), *rng.choice(firing, 3, replace=False).tolist()]
        window = int(pages.a["window"])
        for j in chosen:
            page = pages.page(int(j), model.tokenizer.token_text)
            top = page.top_contexts[0]
            pos = int(pages.a["top_pos"][j, 0])
            start = pos - pos % window
            ids = pages.a["corpus_ids"][start:start + window].tolist()
            fs = text_features(model, model.trace_ids(ids), hook, folder)
            acts = fs.dense()[:, j]
            assert float(acts[pos - start]) == pytest.approx(top.activation, rel=1e-2, abs=1e-2)
            assert int(torch.argmax(acts[1:])) + 1 == pos - start  # the window's peak (its first token not chosen)
            with torch.inference_mode():
                d = sae.W_dec[j].to(model.dtype)[None]
                logits = (model.residual_logits(d) - model.residual_logits(torch.zeros_like(d)))[0].float()
            assert [i for i, _, _ in page.promoted] == logits.topk(len(page.promoted)).indices.tolist()
            assert [i for i, _, _ in page.suppressed] == (-logits).topk(len(page.suppressed)).indices.tolist()


def test_the_shipped_pages_are_a_few_mb() -> None:
    total = sum(pages_size(folder) for name in MODELS for folder in builtin_saes(name).values())
    assert 0 < total < 6 * 2**20, f"{total / 2**20:.1f} MiB"


def test_a_model_without_autoencoders_is_told_which_ship(tiny_model) -> None:
    from transformer_explainer.errors import InputError

    with pytest.raises(InputError, match="use a built-in model that ships them: explainer-llama, explainer-small$"):
        text_features(tiny_model, "The cat sat")
