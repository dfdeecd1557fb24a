"""Where the card of the lesson "Watch an induction head form" (web/src/lessons/induction.ts) stands on a laptop's
screen (1,280 x 800) and in a notebook's narrower frame (1,070 x 720), on the shipped recorded run: never over what
its step's text quotes or asks the learner to use. Each step names those parts here by the page's own test ids (not
the card's data-guard, which the lesson sets itself): the example's large map, the loss chart, the two-layer model's
head scores, the map with the Record slider its task asks to drag, the sentence on the control with the control's
head scores it quotes, the in-context learning chart. And the head scores the heads step quotes are written there
as the page writes them beside the heads (HeadScores): the same text, not 0.441 beside 0.4410. Screenshots
test-artifacts/lesson-induction-layout-*.png."""

from __future__ import annotations

import re

import pytest

from .conftest import ARTIFACTS, open_app
from .test_lesson import intersects, nums, step_id, wait_body

pytestmark = pytest.mark.browser

# what each step's text quotes or asks to use, by data-testid (a chart's <svg>: its figure with the caption)
QUOTED = {
    "task": ["learn-map"],
    "plateau": ["learn-loss"],
    "heads": ["learn-heads-main"],
    "maps": ["learn-map", "learn-maps-scrub"],
    "two": ["learn-control-why", "learn-heads-control"],
    "icl": ["learn-icl"],
}

CARD_TEXTS = "els => Object.fromEntries(els.map(e => [e.dataset.num, e.textContent]))"

RECTS = """ids => { const r = (el) => { const b = el.getBoundingClientRect();
    return { left: b.left, top: b.top, right: b.right, bottom: b.bottom } };
  const out = { card: r(document.querySelector('[data-testid=tour]')), vh: innerHeight, vw: innerWidth };
  for (const id of ids) {
    const el = document.querySelector(`[data-testid="${id}"]`);
    if (el) out[id] = r(el.tagName === 'svg' ? el.closest('figure') ?? el : el);
  }
  return out; }"""


def uncovered(page, sid: str, ids: list[str]) -> None:
    """Each element is wholly on the screen and the card covers none of it."""
    r = page.evaluate(RECTS, ids)
    for i in ids:
        assert i in r, (sid, i, "not on the page")
        e = r[i]
        assert e["top"] >= -1 and e["bottom"] <= r["vh"] + 1 and e["left"] >= -1 and e["right"] <= r["vw"] + 1, \
            (sid, i, "not wholly on the screen", r)
        assert not intersects(r["card"], e), (sid, i, "under the card", r)


def shown_scores(page, run: str) -> set[str]:
    return set(page.eval_on_selector_all(f"[data-testid=learn-heads-{run}] .vals span",
                                         "els => els.map(e => e.textContent.trim())"))


@pytest.mark.parametrize(("w", "h"), [(1280, 800), (1070, 720)])
def test_the_card_covers_nothing_its_step_quotes(browser, live_server, w, h) -> None:
    with open_app(browser, live_server.url, viewport={"width": w, "height": h}) as page:
        page.click("[data-testid=mode-learn]")
        page.wait_for_selector("[data-testid=learn-readout]", timeout=30_000)
        page.click("[data-testid=learn-lesson]")
        page.wait_for_selector("[data-testid=tour]")
        for i, (sid, ids) in enumerate(QUOTED.items()):
            wait_body(page)
            assert step_id(page) == sid
            page.screenshot(path=str(ARTIFACTS / f"lesson-induction-layout-{w}-{i}-{sid}.png"))
            uncovered(page, sid, ids)
            if sid == "heads":
                # the scores the text quotes, written as the page writes them beside the heads at the record in view
                card = page.eval_on_selector_all("[data-testid=tour] [data-num]", CARD_TEXTS)
                quoted = {k: v for k, v in card.items() if k in ("ind-pt-at", "ind-part-lo", "ind-part-hi")}
                assert quoted, card
                beside = shown_scores(page, "main")
                assert all(v in beside for v in quoted.values()), (quoted, beside)
                # 3 decimals for every head, "< 0.001" for a tiny one (the last record has 0.0004506)
                assert all(re.fullmatch(r"\d\.\d{3}|< 0\.001|0", s) for s in beside), beside
            if sid == "maps":
                # the task: drag the slider beside the map back to the start; the map and the text follow
                page.eval_on_selector("[data-testid=learn-maps-scrub]", "el => { el.value = '0';"
                                      " el.dispatchEvent(new Event('input', { bubbles: true })); }")
                page.wait_for_function("() => document.querySelector('[data-num=ind-shown-step]')?.dataset.raw === '0'")
                wait_body(page)
                assert nums(page)["ind-shown-step"] == "0"
                assert "✓" in page.inner_text("[data-testid=lesson-task]")
                uncovered(page, sid, ids)
                page.screenshot(path=str(ARTIFACTS / f"lesson-induction-layout-{w}-{i}-{sid}-step0.png"))
            if i + 1 < len(QUOTED):
                page.click("[data-testid=tour-next]")
                page.wait_for_function("s => document.querySelector('[data-testid=tour]')?.dataset.step !== s", arg=sid)


def test_marker_labels_have_a_halo(browser, live_server) -> None:
    """The loss chart's milestone labels ('repeat loss falls', 'induction head') sit across the curves and the
    control's dashed lines near the top (on a phone in 中文 too): each is drawn over a white stroke, legible."""
    with open_app(browser, live_server.url, viewport={"width": 1070, "height": 720}) as page:
        page.click("[data-testid=mode-learn]")
        page.wait_for_selector("[data-testid=learn-readout]", timeout=30_000)
        styles = page.eval_on_selector_all(
            "[data-testid=learn-loss] text.mark",
            "els => els.map(e => { const s = getComputedStyle(e); return [s.paintOrder, s.stroke, s.strokeWidth] })")
        assert len(styles) == 2, styles
        for order, stroke, width in styles:
            assert order.startswith("stroke") and stroke == "rgb(255, 255, 255)" and float(width[:-2]) >= 2, styles
