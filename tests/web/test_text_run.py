"""The "On text" tab of "Watch it learn" (web/src/pages/learn/TextRunView.svelte) in a real browser: it draws the
shipped text run (builtin/induction-text-run) from GET /api/induction/text-run, and what it draws is the package's
log: each head's role score at the record in view, the held-out loss there, the sentences' numbers; the scrub moves
to another record; a phone in 中文 has no sideways scroll. Screenshots go to test-artifacts/text-run-*.png."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transformer_explainer.analysis.roles import ROLES
from transformer_explainer.training.induction_text import best

from .conftest import ARTIFACTS, open_app

pytestmark = pytest.mark.browser

RUN = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "builtin" / "induction-text-run"


def records() -> list[dict]:
    return [json.loads(line) for line in (RUN / "log.jsonl").read_text().splitlines() if line.strip()]


def fmt(v: float) -> str:
    """As lib/format.ts `num` writes a value in this range: 4 decimals."""
    assert 1e-3 <= abs(v) < 1e5
    return f"{v:.4f}"


def open_text_tab(pg) -> None:
    pg.click("[data-testid=mode-learn]")
    pg.click("[data-testid=learn-tab-text]", timeout=30_000)
    pg.wait_for_selector("[data-testid=text-run-story]", timeout=30_000)


def cells_of(pg, record: dict) -> None:
    for role in ROLES:
        for layer, row in enumerate(record["roles"][role]):
            for head, v in enumerate(row):
                cell = pg.locator(f"[data-testid=text-cell-{role}-{layer}-{head}]")
                assert float(cell.get_attribute("data-value")) == v, (role, layer, head)
                assert cell.inner_text() == f"{v:.2f}"


def test_text_run_drawn_from_the_log(browser, live_server):
    recs = records()
    last, first = recs[-1], recs[0]
    with open_app(browser, live_server.url) as pg:
        open_text_tab(pg)
        at = pg.locator("[data-testid=text-run-at]")
        assert int(at.get_attribute("data-step")) == last["step"]
        assert float(at.get_attribute("data-loss")) == last["heldout_loss"]
        cells_of(pg, last)
        story = pg.locator("[data-testid=text-run-story]").inner_text()
        assert fmt(first["heldout_loss"]) in story and fmt(last["heldout_loss"]) in story
        assert f"{last['tokens']:,}" in story and f"In {last['step']:,} steps" in story
        for role in ("previous_token", "induction"):
            v, layer, head = best(last, role)
            # a head's score as the page writes every head's score: 3 decimals (learn/state.svelte.ts `score`)
            assert f"L{layer} H{head}, at {v:.3f}" in story, role
        no_induction_head = best(last, "induction")[0] < 0.5  # the tab says so only then
        assert ("far more text than the" in story) == no_induction_head
        pg.screenshot(path=str(ARTIFACTS / "text-run-desktop.png"), full_page=True)
        # the scrub to the first record: the maps and the loss are step 0's
        pg.locator("[data-testid=text-run-scrub]").fill("0")
        pg.wait_for_function("() => document.querySelector('[data-testid=text-run-at]').dataset.step === '0'")
        assert float(at.get_attribute("data-loss")) == first["heldout_loss"]
        cells_of(pg, first)


def test_text_run_phone_in_chinese(browser, live_server):
    pixel7 = {"viewport": {"width": 412, "height": 915}, "device_scale_factor": 2.625, "is_mobile": True,
              "has_touch": True}
    with open_app(browser, live_server.url, query="?lang=zh", **pixel7) as pg:
        pg.locator("[data-testid=mode-learn]").tap()
        pg.locator("[data-testid=learn-tab-text]").tap(timeout=30_000)
        pg.wait_for_selector("[data-testid=text-run-story]", timeout=30_000)
        assert "留出文本上的损失" in pg.locator("[data-testid=text-run-story]").inner_text()
        sw, iw = pg.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        assert sw <= iw <= 412, (sw, iw)
        pg.screenshot(path=str(ARTIFACTS / "text-run-phone-zh.png"), full_page=True)
