"""The shipped feature pages read on enough of the corpus, and the descriptions the project wrote of their features
still about what those pages show: every shipped autoencoder's pages cover at least 200k tokens (all of the corpus's
valid split; they were built on 32k / 16k before, where a feature's ten top contexts could be a handful of documents),
each autoencoder has a few described features, and each description names the token that most of its feature's top
contexts were chosen for (a rebuild that changes what a feature's page shows leaves its old description wrong: this
is what finds it)."""

from __future__ import annotations

import pytest

from transformer_explainer import load_model
from transformer_explainer.features.pages import load_pages
from transformer_explainer.features.sae import builtin_saes

SHIPPED = [("explainer-small", "blocks.1.hook_resid_post"), ("explainer-small", "blocks.3.hook_resid_post"),
           ("explainer-small", "blocks.5.hook_resid_post"), ("explainer-llama", "blocks.3.hook_resid_post")]


def _named(token: str, description: str) -> bool:
    """Whether the description quotes the token (its text without surrounding spaces; a new line as ⏎)."""
    t = token.strip(" ")
    t = "⏎" if t == "\n" else t
    return bool(t) and t in description


@pytest.mark.parametrize(("model_name", "hook"), SHIPPED)
def test_the_pages_cover_the_valid_split_and_their_descriptions_hold(model_name: str, hook: str) -> None:
    model = load_model(model_name, allow_download=False)
    pages = load_pages(builtin_saes(model)[hook])
    assert pages is not None
    assert pages.meta["corpus_tokens"] >= 200_000 and len(pages.a["corpus_ids"]) >= 200_000, pages.meta["corpus"]
    assert len(pages.descriptions) >= 3, f"{model_name} {hook}: {len(pages.descriptions)} features described"
    for fid, text in pages.descriptions.items():
        page = pages.page(fid, model.tokenizer.token_text)
        assert len(page.top_contexts) == pages.spec.top, f"#{fid} fires in fewer than {pages.spec.top} windows"
        centres = [c.tokens[c.center] for c in page.top_contexts]
        named = sum(_named(t, text) for t in centres)
        assert named * 2 > len(centres), f"#{fid}: {text!r} names {named} of its top contexts' tokens {centres}"
