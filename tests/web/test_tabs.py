"""The tab bars (components/common/Tabs.svelte, shared by Experiments, Why this token and the encoder-decoder page)
behave alike: a click or an arrow key selects a tab, the arrows go round the ends, the focus moves with the
selection, and the selected tab is the only one in the Tab order."""

from __future__ import annotations

import pytest

from .test_experiments import open_experiments
from .test_seq2seq import open_page as open_seq2seq

pytestmark = pytest.mark.browser


def state(page, prefix: str) -> tuple[list[str], list[str], str]:
    """The tab bar's selected tabs, the tabs in the Tab order, and the focused element's test id."""
    selected, in_order, focused = page.evaluate("""p => {
        const tabs = [...document.querySelectorAll(`[data-testid^="${p}-"][role=tab]`)];
        const id = (b) => b.dataset.testid.slice(p.length + 1);
        return [tabs.filter((b) => b.getAttribute("aria-selected") === "true").map(id),
                tabs.filter((b) => b.tabIndex === 0).map(id), document.activeElement?.dataset?.testid ?? ""];
    }""", prefix)
    return selected, in_order, focused


def walk(page, prefix: str, ids: list[str]) -> None:
    """Arrow right from the first tab to each next one and round to the first, then left back to the last."""
    page.focus(f"[data-testid={prefix}-{ids[0]}]")
    assert state(page, prefix) == ([ids[0]], [ids[0]], f"{prefix}-{ids[0]}")
    for nxt in [*ids[1:], ids[0]]:
        page.keyboard.press("ArrowRight")
        assert state(page, prefix) == ([nxt], [nxt], f"{prefix}-{nxt}")
    page.keyboard.press("ArrowLeft")
    assert state(page, prefix) == ([ids[-1]], [ids[-1]], f"{prefix}-{ids[-1]}")
    page.click(f"[data-testid={prefix}-{ids[0]}]")
    assert state(page, prefix)[:2] == ([ids[0]], [ids[0]])


def test_experiments_tabs(page, live_server):
    open_experiments(page, live_server)
    walk(page, "exp-tab", ["lens", "heads", "embed", "steer"])  # GPT-2: no experts' tab; steering on every model
    page.wait_for_selector("[data-testid=exp-panel-lens]")


def test_why_this_token_tabs(page, live_server):
    page.wait_for_selector("[data-testid=token-chip]", timeout=30_000)
    page.dispatch_event("[data-testid=nav-attribution]", "click")
    page.wait_for_selector("[data-testid=attr-tab-dla]", timeout=30_000)
    walk(page, "attr-tab", ["dla", "patch"])
    page.wait_for_selector("[data-testid=attr-panel-dla]")


def test_encoder_decoder_tabs(page):
    open_seq2seq(page)
    walk(page, "s2s-tab", ["encoder", "decoder", "compare", "positions", "training"])
    page.wait_for_selector("[data-testid=s2s-panel-encoder]")
