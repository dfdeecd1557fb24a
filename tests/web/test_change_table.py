"""The before/after table of an intervention (components/common/ChangeTable.svelte), shared by the Experiments
area's heads and experts tabs: on a 390x844 phone, in English and 中文, its last column (the change) lies inside the
screen, and the experts tab names its columns with the action its buttons and the lesson use (去掉, not the heads'
关闭). Screenshots under test-artifacts/experts/."""

from __future__ import annotations

import numpy as np
import pytest

from .test_experts_view import PHONE, SHOTS, models, on_model, post, server, settle, tensors  # noqa: F401

pytestmark = pytest.mark.browser


def right_edges(page, table: str) -> list[float]:
    """Where each row's change cell ends on the screen, in CSS pixels."""
    return page.eval_on_selector_all(f"[data-testid={table}] [data-testid=abl-change]",
                                     "cs => cs.map(c => c.getBoundingClientRect().right)")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_change_column_fits_a_phone(browser, server, lang):  # noqa: F811
    model, layer = "explainer-moe", 2
    ids = post(server, "trace", model=model, text="The quick brown fox jumps over the lazy dog")["token_ids"]
    idx, = tensors(server, model, ids, {"name": f"blocks.{layer}.mlp.expert_indices"})
    expert = int(np.bincount(idx.astype(int).ravel()).argmax())
    kw = {**PHONE, "locale": "zh-CN" if lang == "zh" else "en-US"}
    with on_model(browser, server, model, query="?lang=zh" if lang == "zh" else "", **kw) as page:
        page.click("[data-testid=nav-experiments]")
        page.click("[data-testid=exp-tab-experts]")
        page.select_option("[data-testid=xexp-layer]", str(layer))
        page.click(f"[data-testid=xexp-expert-{expert}]")
        page.wait_for_selector("[data-testid=xexp-table] [data-testid=abl-change]", timeout=60_000)
        edges = right_edges(page, "xexp-table")
        assert edges and max(edges) <= 390, edges
        heads = page.eval_on_selector_all("[data-testid=xexp-table] th", "hs => hs.map(h => h.textContent)")
        if lang == "zh":
            assert heads[1:3] == ["去掉前", "去掉后"], heads
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("[data-testid=xexp-ablation]").screenshot(path=str(SHOTS / f"phone-{lang}-change-table.png"))

        page.click("[data-testid=exp-tab-heads]")
        settle(page)
        page.locator("[data-testid^=head-cell]").first.click()
        page.wait_for_selector("[data-testid=ablation-table] [data-testid=abl-change]", timeout=60_000)
        edges = right_edges(page, "ablation-table")
        assert edges and max(edges) <= 390, edges
