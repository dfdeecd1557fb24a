"""An over-long text in the app: the error offers to keep the last tokens that fit, the page says when it
did, and nothing of the previous text stays on screen under the error (the tiny model reads 128 tokens)."""

from __future__ import annotations

import pytest

from .conftest import ARTIFACTS
from .test_app import visible, wait_tokens

pytestmark = pytest.mark.browser


def test_over_long_text_offers_truncation_and_clears_stale_views(page, tiny_model):
    ctx = tiny_model.context_length
    page.fill("[data-testid=text]", " ".join(["word"] * 20))
    wait_tokens(page, len(tiny_model.encode(" ".join(["word"] * 20))))
    page.click("[data-testid=nav-attention]")
    page.wait_for_selector("[data-testid=attn-pattern] .pic")

    text = " ".join(f"w{i}" for i in range(150))
    ids = tiny_model.encode(text, truncate=True)
    assert len(ids) == ctx
    page.fill("[data-testid=text]", text)
    page.wait_for_selector("[data-testid=error]", timeout=30_000)
    n = len(tiny_model.tokenizer.encode(text))
    assert (f"The text is {n} tokens long, more than the {ctx} that fit: shorten it, or keep only its last {ctx} "
            "tokens.") in page.locator("[data-testid=error]").inner_text()  # the code's sentence, with its params
    # the old tokens and views are gone, not left under the error
    assert page.locator("[data-testid=token-chip]").count() == 0
    assert page.locator("section.view").count() == 0
    keep = page.locator("[data-testid=keep-last]")
    assert keep.inner_text().strip() == f"Keep the last {ctx} tokens"
    page.screenshot(path=str(ARTIFACTS / "long-input-error.png"), full_page=False)

    keep.click()
    wait_tokens(page, ctx)
    assert page.locator("[data-testid=error]").count() == 0
    note = page.locator("[data-testid=truncated-note]").inner_text()
    assert f"last {ctx} tokens" in note
    chips = page.locator("[data-testid=token-chip] .txt")
    assert chips.nth(ctx - 1).inner_text() == visible(tiny_model.tokenizer.token_text(ids[-1]))
    assert chips.nth(0).inner_text() == visible(tiny_model.tokenizer.token_text(ids[0]))
    page.screenshot(path=str(ARTIFACTS / "long-input-truncated.png"), full_page=False)

    # typing on keeps the choice while the text is too long; a text that fits drops it and the note
    page.fill("[data-testid=text]", text + " more")
    page.wait_for_function("() => document.querySelectorAll('[data-testid=token-chip]').length === 128")
    page.wait_for_function("() => document.body.dataset.ready === '1' && !document.querySelector('.view.busy')")
    assert page.locator("[data-testid=error]").count() == 0
    page.fill("[data-testid=text]", "short text")
    wait_tokens(page, len(tiny_model.encode("short text")))
    assert page.locator("[data-testid=truncated-note]").count() == 0
    page.fill("[data-testid=text]", text)
    page.wait_for_selector("[data-testid=keep-last]", timeout=30_000)
