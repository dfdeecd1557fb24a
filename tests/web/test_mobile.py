"""Phones and tablets, by touch (issue 13, item 3): with Chromium's mobile emulation (is_mobile, has_touch,
a phone's or tablet's viewport and pixel ratio) walk the main path: type a text, tap a token, open the
attention view, pick a layer and a head, tap a cell (its readout stays pinned; a tap elsewhere clears it),
open the output view, set temperature, top-k and top-p, generate; open the tour. On every screen the page
never scrolls sideways and the main controls are at least 40 px tap targets. Screenshots go to
test-artifacts/mobile-*.png."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from .conftest import ARTIFACTS, open_app
from .test_app import wait_tokens

pytestmark = pytest.mark.browser

TEXT = "The quick brown fox jumps over the lazy dog"

DEVICES = {
    "phone-360": {"viewport": {"width": 360, "height": 780}, "device_scale_factor": 3},
    "phone-412": {"viewport": {"width": 412, "height": 915}, "device_scale_factor": 2.625},
    "tablet-768": {"viewport": {"width": 768, "height": 1024}, "device_scale_factor": 2},
    "tablet-1180": {"viewport": {"width": 1180, "height": 820}, "device_scale_factor": 2},
}
MIN_TAP = 40


@pytest.fixture
def open_touch_page(browser, live_server):
    """Open the app in a touch context for `device`; fail the test on requests off 127.0.0.1 or page errors."""
    with ExitStack() as pages:
        def open_(device: str, lang: str = "en"):
            return pages.enter_context(open_app(browser, live_server.url, query="?lang=zh" if lang == "zh" else "",
                                                **DEVICES[device], is_mobile=True, has_touch=True))

        yield open_


def no_sideways_scroll(page) -> None:
    # a mobile browser widens its layout viewport (innerWidth) to fit a page too wide and zooms out, so the
    # page is measured against the device's own width
    sw, iw = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
    device = page.viewport_size["width"]
    assert sw <= iw and iw <= device, f"the page is {sw} px wide (layout viewport {iw} px) on a {device} px screen"


def tap_targets_ok(page, selectors: list[str]) -> None:
    small = []
    for sel in selectors:
        loc = page.locator(sel)
        assert loc.count(), f"nothing matches {sel}"
        for i in range(loc.count()):
            el = loc.nth(i)
            if not el.is_visible():
                continue
            b = el.bounding_box()
            if b["width"] < MIN_TAP - 0.5 or b["height"] < MIN_TAP - 0.5:
                small.append(f"{sel}[{i}] {b['width']:.0f}x{b['height']:.0f}")
    assert not small, f"tap targets under {MIN_TAP} px: {small}"


def tap_cell(page, testid: str, r: int, c: int, rows: int, cols: int) -> None:
    box = page.locator(f"[data-testid={testid}] .pic").bounding_box()
    page.touchscreen.tap(box["x"] + (c + 0.5) * box["width"] / cols, box["y"] + (r + 0.5) * box["height"] / rows)


def walk(page, name: str, tiny_model, zh: bool) -> None:
    no_sideways_scroll(page)
    tap_targets_ok(page, ["[data-testid=text]", "[data-testid=lang]", "[data-testid=tour-open]",
                          "[data-testid=model]", "[data-testid=mode-gpt2]", "[data-testid=mode-seq2seq]",
                          "[data-testid=mode-learn]",
                          "[data-testid^=example-]"])
    # type a text, tap a token
    page.locator("[data-testid=text]").tap()
    page.fill("[data-testid=text]", TEXT)
    T = len(tiny_model.encode(TEXT))
    wait_tokens(page, T)
    page.locator("[data-testid=token-chip]").nth(2).tap()
    page.wait_for_function("() => document.querySelector('[data-testid=token-chip][aria-selected=true]')"
                           "?.dataset.pos === '2'")
    tap_targets_ok(page, ["[data-testid=token-chip]", "[data-testid^=nav-]"])
    page.screenshot(path=str(ARTIFACTS / f"mobile-{name}-1-tokens.png"), full_page=True)

    # the attention view: layer 1, head 2, tap a cell; the readout stays pinned until a tap elsewhere
    page.locator("[data-testid=nav-attention]").tap()
    page.locator("nav [role=radiogroup] button[role=radio]").nth(1).tap()
    page.locator("[data-testid=head-picker] button").nth(2).tap()
    page.wait_for_selector("[data-testid=attn-pattern] .pic")
    assert page.locator("[data-testid=layer-value]").inner_text() == "1"
    assert page.locator("[data-testid=head-picker] button[aria-checked=true]").inner_text() == "2"
    tap_targets_ok(page, ["[data-testid=head-picker] button", "nav [role=radiogroup] button", "nav .stepper button"])
    page.locator("[data-testid=attn-pattern]").scroll_into_view_if_needed()
    y = page.evaluate("scrollY")
    tap_cell(page, "attn-pattern", 5, 3, T, T)
    readout = page.locator("[data-testid=attn-pattern-readout]")
    page.wait_for_function("el => el.dataset.pinned === '1'", arg=readout.element_handle())
    pinned = readout.inner_text()
    assert "(5)" in pinned and "(3)" in pinned, pinned
    page.wait_for_timeout(400)
    assert readout.inner_text() == pinned  # still there after the tap: pinned, not a passing hover
    assert page.locator("[data-testid=focus-token]").inner_text()  # the tap also put the focus on row 5
    no_sideways_scroll(page)
    assert page.evaluate("scrollY") == y  # the tap did not make the page jump (e.g. to the token bar)
    page.screenshot(path=str(ARTIFACTS / f"mobile-{name}-2-attention.png"), full_page=False)
    page.locator("section.view h2").tap()  # a tap elsewhere clears it
    page.wait_for_function("el => el.dataset.pinned === undefined", arg=readout.element_handle())
    assert "(5)" not in readout.inner_text()

    # the output view: temperature, top-k, top-p, generate
    page.locator("[data-testid=nav-output]").tap()
    page.wait_for_selector("[data-testid=cand-prob-0]")
    no_sideways_scroll(page)
    before = page.locator("[data-testid=cand-prob-0]").inner_text()
    page.locator("[data-testid=temperature-number]").tap()
    page.fill("[data-testid=temperature-number]", "0.5")
    page.press("[data-testid=temperature-number]", "Enter")
    page.wait_for_function("b => document.querySelector('[data-testid=cand-prob-0]').textContent !== b", arg=before)
    if not page.locator("[data-testid=topk-on]").is_checked():  # the app's default is top-k 10: already on
        page.locator("[data-testid=topk-on]").tap()
    page.locator("[data-testid=topk]").tap()
    page.fill("[data-testid=topk]", "5")
    page.press("[data-testid=topk]", "Enter")
    page.wait_for_function("() => /\\b5\\b/.test(document.querySelector('[data-testid=n-kept]').textContent)")
    page.locator("[data-testid=topp-on]").tap()
    assert page.locator("[data-testid=topp]").is_enabled()
    tap_targets_ok(page, ["[data-testid=temperature]", "[data-testid=temperature-number]", "[data-testid=topk]",
                          "[data-testid=topp]", "[data-testid=seed]", "[data-testid=append-sampled]",
                          "[data-testid^=cand-token-]", "label:has([data-testid=topk-on])",
                          "label:has([data-testid=topp-on])"])
    no_sideways_scroll(page)
    page.locator("[data-tour=sampling]").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / f"mobile-{name}-3-output.png"), full_page=False)
    page.locator("[data-testid=candidates]").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / f"mobile-{name}-3b-candidates.png"), full_page=False)
    page.locator("[data-testid=append-sampled]").tap()
    wait_tokens(page, T + 1)
    no_sideways_scroll(page)

    # the tour opens and steps on a touch screen
    page.locator("[data-testid=tour-open]").tap()
    page.wait_for_selector("[data-testid=tour]")
    page.wait_for_timeout(400)
    page.screenshot(path=str(ARTIFACTS / f"mobile-{name}-4-tour.png"), full_page=False)
    page.locator("[data-testid=tour-next]").tap()
    page.wait_for_selector("[data-testid=tour]")


@pytest.mark.parametrize("device", list(DEVICES))
def test_touch_walk(open_touch_page, tiny_model, device):
    walk(open_touch_page(device), device, tiny_model, zh=False)


@pytest.mark.parametrize("device", ["phone-360", "tablet-768"])
def test_touch_walk_chinese(open_touch_page, tiny_model, device):
    page = open_touch_page(device, "zh")
    page.wait_for_function("() => document.documentElement.dataset.cjkFont === 'loaded'")
    walk(page, f"{device}-zh", tiny_model, zh=True)


def test_mode_switch_label_not_clipped_at_1280(page):
    for testid in ("mode-gpt2", "mode-seq2seq", "mode-learn"):
        sw, cw = page.eval_on_selector(f"[data-testid={testid}]", "el => [el.scrollWidth, el.clientWidth]")
        assert sw <= cw, f"{testid} is clipped: {sw} > {cw}"
    box = page.locator("[data-testid=mode-learn]").bounding_box()
    header = page.locator("header").first.bounding_box()
    assert box["x"] + box["width"] <= header["x"] + header["width"]
    for testid in ("tour-open", "lang"):  # one line each, not wrapped
        assert page.locator(f"[data-testid={testid}]").bounding_box()["height"] < 40
    page.screenshot(path=str(ARTIFACTS / "desktop-1280-header.png"), clip={"x": 0, "y": 0, "width": 1280, "height": 90})
