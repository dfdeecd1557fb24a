"""Where the card of the lesson "What the model represents" (web/src/lessons/features.ts) stands on a laptop's screen
(1,280 x 800) and in a notebook's narrower frame (1,070 x 720): never over what its step quotes. The feature step
quotes the page's density line and its strongest context (the page is taller than the screen: the card used to sit
in a corner over the contexts); the guess step, once Reveal is pressed, quotes the promoted tokens and the
description (the card used to stay where it was and cover the table); the steering step quotes both continuations
and asks to drag the strength (the card covered the plain one and the slider). Screenshots
test-artifacts/lesson-features-layout-*.png."""

from __future__ import annotations

import pytest

from .conftest import ARTIFACTS, open_app
from .test_lesson import goto, intersects, nums
from .test_lesson_features import _open_lesson, paged_server  # noqa: F401  (the fixture)

pytestmark = pytest.mark.browser

RECTS = """sels => { const r = (el) => { const b = el.getBoundingClientRect();
    return { left: b.left, top: b.top, right: b.right, bottom: b.bottom } };
  const out = { card: r(document.querySelector('[data-testid=tour]')), vh: innerHeight };
  for (const s of sels) { const el = document.querySelector(s); if (el && el.offsetParent) out[s] = r(el); }
  return out; }"""


def uncovered(page, *selectors: str) -> None:
    """Each element is on the screen (at least partly) and the card covers none of it."""
    r = page.evaluate(RECTS, list(selectors))
    for s in selectors:
        assert s in r, f"{s} is not on the page"
        assert r[s]["bottom"] > 0 and r[s]["top"] < r["vh"], f"{s} is off the screen: {r[s]}"
        assert not intersects(r["card"], r[s]), f"the card {r['card']} covers {s} {r[s]}"


@pytest.mark.parametrize(("w", "h"), [(1280, 800), (1070, 720)])
def test_the_card_covers_nothing_its_step_quotes(browser, paged_server, w, h):  # noqa: F811
    srv = paged_server
    with open_app(browser, srv.url, viewport={"width": w, "height": h}) as page:
        _open_lesson(page, srv)
        goto(page, "feature")
        assert "corpus-max" in nums(page)
        uncovered(page, "[data-testid=feat-density]", "[data-testid=feat-top]")
        page.screenshot(path=str(ARTIFACTS / f"lesson-features-layout-{w}-feature.png"))

        goto(page, "guess")
        page.fill("[data-testid=feat-guess]", "a coordinate")
        page.click("[data-testid=feat-reveal]")
        page.wait_for_function("() => !!document.querySelector('[data-testid=tour] [data-num=promoted]')")
        page.wait_for_timeout(600)  # the card glides (0.2 s) to its new place
        uncovered(page, "[data-testid=feat-answer]", "[data-testid=feat-guess]")
        page.screenshot(path=str(ARTIFACTS / f"lesson-features-layout-{w}-guess.png"))

        page.click("[data-testid=tour-next]")
        goto(page, "steer")
        page.wait_for_selector("[data-testid=steer-result]")
        page.wait_for_timeout(600)
        uncovered(page, "[data-testid=steer-plain]", "[data-testid=steer-steered]", "[data-testid=steer-slider]")
        page.screenshot(path=str(ARTIFACTS / f"lesson-features-layout-{w}-steer.png"))
