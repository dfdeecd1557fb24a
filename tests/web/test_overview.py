"""The whole-model overview: one row per token and one dot per stage, sized by the real ‖x‖; the
travelling vector shows the focus token's actual values at each stage; clicking a stage opens it."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.browser


def stage_norm(page) -> float:
    return float(page.inner_text("[data-testid=overview-norm]").replace("−", "-"))


def test_overview_follows_the_focus_vector(page, tiny_model):
    page.click("[data-testid=nav-overview]")
    page.wait_for_selector("[data-testid=overview-svg] circle.dot")
    tr = tiny_model.trace(page.input_value("[data-testid=text]"))
    T, L = len(tr.token_ids), tiny_model.config.n_layer
    # every token has a dot at the embedding and after every block
    assert page.locator("[data-testid=overview-svg] circle.dot").count() == T * (L + 1)
    slider = page.locator("[data-testid=overview-stage]")
    expected = {"embed.sum": tr["embed.sum"][-1]}
    for name in ["blocks.0.attn_out", "blocks.0.resid_mid", "blocks.0.mlp_out", "blocks.0.resid_post",
                 f"blocks.{L - 1}.resid_post", "ln_final.out"]:
        expected[name] = tr[name][-1]
    seen = set()
    n_stops = int(slider.get_attribute("max")) + 1
    assert n_stops == 1 + 4 + (L - 1) + 2  # embed, the focus block's 4 parts, the other blocks, LN_f, logits
    for i in range(n_stops - 1):
        slider.fill(str(i))
        name = page.inner_text("[data-testid=overview-name]")
        if name in expected:
            want = float(expected[name].float().norm())
            page.wait_for_function("() => document.querySelector('[data-testid=overview-norm]')")
            assert stage_norm(page) == pytest.approx(want, rel=2e-3, abs=1e-3), name  # float16 on the wire
            seen.add(name)
    assert seen == set(expected)
    # the arcs are the focus token's attention weights in block 0, head 0
    w = tr["blocks.0.attn.pattern"][0, -1]
    assert page.locator("[data-testid=overview-svg] path.arc").count() == int((w[:-1] > 0.02).sum())
    # play runs to the end; the last stop is the next-token guesses
    page.click("[data-testid=overview-play]")
    page.wait_for_function("() => document.querySelector('[data-testid=overview-name]').textContent === 'logits'",
                           timeout=20_000)
    assert not math.isnan(float(page.locator("[data-testid=overview-stage]").input_value()))
    # a stage opens its view
    page.locator("[data-testid=overview-svg] g.hdr").first.click()
    page.wait_for_selector("[data-view=embedding]")
