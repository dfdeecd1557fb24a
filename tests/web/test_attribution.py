"""Why this token, in a real browser against the live server (tiny random GPT-2): the ranked list, the sum and the
layer x head map equal /api/attribution's answer; clicking a head opens its attention view at that layer and head;
an earlier position explains the token that came next; the patching grids equal the API's, their cells open the
part they name, a long patching shows its progress and its cancel stops the server's passes; bad pairs get the
sentence; English and 中文, 1280x900 and a 390x844 phone. Screenshots go to test-artifacts/attribution/."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from transformer_explainer import patching

from .conftest import ARTIFACTS, open_app
from .test_app import api, hover_cell, visible, wait_tokens

pytestmark = pytest.mark.browser

TEXT = "The cat sat on the mat, and then the cat slept on the"
CLEAN = "The cat sat on the mat and the dog sat on the"
CORRUPTED = "The cat sat on the rug and the dog sat on the"
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True, "has_touch": True}
SHOTS = ARTIFACTS / "attribution"


def shot(page, name: str, full_page: bool = True) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)


def open_why(page, live_server, text: str = TEXT) -> dict:
    ref = api(live_server, "trace", text=text)
    page.fill("[data-testid=text]", text)
    wait_tokens(page, len(ref["token_ids"]))
    page.dispatch_event("[data-testid=nav-attribution]", "click")
    page.wait_for_selector("[data-testid=attr-sum]", timeout=30_000)
    return ref


def wait_fresh(page) -> None:
    """The attribution shown is the one the page asks for now (not the last one, dimmed, while it loads)."""
    page.wait_for_selector("[data-testid=attr-result][data-stale='0']")


def wait_position(page, pos: int) -> None:
    page.wait_for_function("p => document.querySelector('[data-testid=attr-explains]')?.textContent.includes(` ${p} `)",
                           arg=pos)
    wait_fresh(page)


def wait_metric(page, v: float) -> None:
    page.wait_for_function("v => Math.abs(Number(document.querySelector('[data-testid=attr-metric]')?.dataset.value)"
                           " - v) < 1e-9", arg=v)


def wait_text(page, testid: str, text: str) -> None:
    page.wait_for_function("([id, t]) => document.querySelector(`[data-testid=${id}]`)?.textContent.includes(t)",
                           arg=[testid, text])


def click_cell(page, testid: str, r: int, c: int, rows: int, cols: int) -> None:
    page.locator(f"[data-testid={testid}]").scroll_into_view_if_needed()
    box = page.locator(f"[data-testid={testid}] .pic").bounding_box()
    x, y = box["x"] + (c + 0.5) * box["width"] / cols, box["y"] + (r + 0.5) * box["height"] / rows
    page.mouse.click(x, y)


def check_attribution(page, ref: dict) -> None:
    """The sum, the ranked rows and the map on the page are the API's numbers."""
    metric = float(page.get_attribute("[data-testid=attr-metric]", "data-value"))
    total = float(page.get_attribute("[data-testid=attr-total]", "data-value"))
    rest = float(page.get_attribute("[data-testid=attr-rest]", "data-value"))
    assert metric == pytest.approx(ref["metric"], abs=1e-9) and rest == pytest.approx(ref["rest"], abs=1e-9)
    assert total + rest == pytest.approx(metric, abs=1e-4)  # the lesson of the page: it adds up
    rows = page.locator("[data-testid=attr-row]")
    n = rows.count()
    assert n in (min(10, len(ref["components"])), len(ref["components"]))  # the top 10, or all of them
    ranked = sorted(ref["components"], key=lambda c: -abs(c["value"]))[:n]
    for i, c in enumerate(ranked):
        r = rows.nth(i)
        assert r.get_attribute("data-kind") == c["kind"]
        assert float(r.get_attribute("data-value")) == pytest.approx(c["value"], abs=1e-9)
    assert f"logit({visible(ref['target']['text'])})" in page.locator("[data-testid=attr-sum]").inner_text()


def test_ranked_list_sum_and_map_equal_the_api(page, live_server) -> None:
    tr = open_why(page, live_server)
    ids = tr["token_ids"]
    ref = api(live_server, "attribution/attribute", ids=ids, position=len(ids) - 1)
    wait_position(page, len(ids) - 1)
    check_attribution(page, ref)
    # the map's readout is the head's contribution
    page.locator("[data-testid=attr-map]").scroll_into_view_if_needed()
    readout = hover_cell(page, "attr-map", 1, 2, 2, 4)
    assert "layer 1, head 2" in readout and f"{ref['heads'][1][2]:+.4f}".replace("-", "−") in readout
    shot(page, "dla-desktop-en")
    page.select_option("[data-testid=attr-top]", "0")  # all of them
    assert page.locator("[data-testid=attr-row]").count() == len(ref["components"])
    # rather than another token: the difference, and its sum
    page.fill("[data-testid=attr-versus]", " dog")
    page.wait_for_function("() => document.querySelector('[data-testid=attr-sum]')?.textContent.includes('␣dog')")
    wait_fresh(page)
    diff = api(live_server, "attribution/attribute", ids=ids, position=len(ids) - 1, versus=" dog")
    wait_metric(page, diff["metric"])
    check_attribution(page, diff)
    page.fill("[data-testid=attr-versus]", " catastrophically")
    page.wait_for_selector("[data-testid=attr-error]")
    assert "not one token" in page.locator("[data-testid=attr-error]").inner_text()


def test_an_earlier_position_explains_the_token_that_came_next(page, live_server) -> None:
    tr = open_why(page, live_server)
    page.locator("[data-testid=token-chip]").nth(3).click()
    wait_position(page, 3)
    ref = api(live_server, "attribution/attribute", ids=tr["token_ids"], position=3)
    assert ref["target"]["id"] == tr["token_ids"][4]
    wait_metric(page, ref["metric"])
    check_attribution(page, ref)
    assert "the token that came next" in page.locator("[data-testid=attr-sum]").inner_text()


def test_clicking_a_head_opens_its_attention_view(page, live_server) -> None:
    open_why(page, live_server)
    click_cell(page, "attr-map", 1, 3, 2, 4)
    page.wait_for_selector("[data-view=attention]")
    assert page.locator("[data-testid=layer-value]").inner_text() == "1"
    assert page.locator("[data-testid=head-picker] [aria-checked=true]").inner_text() == "3"
    # a ranked row of a head does the same
    page.dispatch_event("[data-testid=nav-attribution]", "click")
    row = page.locator("[data-testid=attr-row][data-kind=head]").first
    row.wait_for()
    layer, head = row.get_attribute("data-layer"), row.get_attribute("data-head")
    row.click()
    page.wait_for_selector("[data-view=attention]")
    assert page.locator("[data-testid=layer-value]").inner_text() == layer
    assert page.locator("[data-testid=head-picker] [aria-checked=true]").inner_text() == head
    # an MLP row opens the MLP view at its layer
    page.dispatch_event("[data-testid=nav-attribution]", "click")
    page.select_option("[data-testid=attr-top]", "0")
    mlp = page.locator("[data-testid=attr-row][data-kind=mlp]").first
    layer = mlp.get_attribute("data-layer")
    mlp.click()
    page.wait_for_selector("[data-view=mlp]")
    assert page.locator("[data-testid=layer-value]").inner_text() == layer


def answer_and_wrong(live_server) -> tuple[str, str]:
    """The answer and wrong token the page's "fill in" button picks: each prompt's top prediction."""
    c = api(live_server, "next_token", text=CLEAN, top_n=2, sampling={"temperature": 0})["candidates"]
    x = api(live_server, "next_token", text=CORRUPTED, top_n=2, sampling={"temperature": 0})["candidates"]
    return c[0]["text"], (x[0]["text"] if x[0]["id"] != c[0]["id"] else c[1]["text"])


def fill_pair(page, clean: str = CLEAN, corrupted: str = CORRUPTED) -> None:
    page.click("[data-testid=attr-tab-patch]")
    page.fill("[data-testid=patch-clean]", clean)
    page.fill("[data-testid=patch-corrupted]", corrupted)


def test_patching_grids_equal_the_api_and_cells_open_their_part(page, live_server) -> None:
    open_why(page, live_server)
    fill_pair(page)
    page.wait_for_selector("[data-testid=patch-lengths][data-ok='1']")
    assert "position 5, ␣mat → ␣rug" in page.locator("[data-testid=patch-lengths]").inner_text()
    page.click("[data-testid=patch-suggest]")
    a, w = answer_and_wrong(live_server)
    page.wait_for_function("a => document.querySelector('[data-testid=patch-answer]')?.value === a", arg=a)
    assert page.input_value("[data-testid=patch-wrong]") == w
    page.click("[data-testid=patch-run]")
    page.wait_for_selector("[data-testid=patch-grid-heads]", timeout=60_000)
    ref = api(live_server, "attribution/patch", clean=CLEAN, corrupted=CORRUPTED, answer=a, wrong=w)
    for run in ("clean", "corrupted"):
        shown = float(page.get_attribute(f"[data-testid=patch-m-{run}]", "data-value"))
        assert shown == pytest.approx(ref[run], abs=1e-9)
    L, T = len(ref["grids"]["resid_pre"]), len(ref["clean_ids"])
    for kind in ("resid_pre", "attn_out", "mlp_out", "heads"):
        assert page.locator(f"[data-testid=patch-grid-{kind}]").count() == 1
    # the real numbers on hover: the normalised value and the logit difference
    page.locator("[data-testid=patch-map-resid_pre]").scroll_into_view_if_needed()
    readout = hover_cell(page, "patch-map-resid_pre", 1, 5, L, T)
    v, raw = ref["grids"]["resid_pre"][1][5], ref["raw"]["resid_pre"][1][5]
    assert "layer 1, position 5 (␣mat)" in readout
    assert f"{v:.4f}".replace("-", "−") in readout and f"{raw:.4f}".replace("-", "−") in readout
    shot(page, "patch-desktop-en")
    # a heads cell opens that head's attention on the clean prompt; a resid_pre cell the residual view at its position
    click_cell(page, "patch-map-heads", 1, 2, L, 4)
    page.wait_for_selector("[data-view=attention]")
    assert page.input_value("[data-testid=text]") == CLEAN
    assert page.locator("[data-testid=head-picker] [aria-checked=true]").inner_text() == "2"
    assert page.locator("[data-testid=layer-value]").inner_text() == "1"
    page.dispatch_event("[data-testid=nav-attribution]", "click")
    click_cell(page, "patch-map-resid_pre", 1, 5, L, T)
    page.wait_for_selector("[data-view=residual]")
    assert page.locator("[data-testid=focus-token]").inner_text() == "␣mat"


def test_bad_pairs_say_why(page, live_server) -> None:
    open_why(page, live_server)
    fill_pair(page, corrupted="The cat sat on the big red mat and the dog sat on the")
    page.wait_for_selector("[data-testid=patch-lengths][data-ok='0']")
    assert "same number of tokens" in page.locator("[data-testid=patch-lengths]").inner_text()
    page.fill("[data-testid=patch-answer]", " cat")
    page.fill("[data-testid=patch-wrong]", " dog")
    page.click("[data-testid=patch-run]")
    page.wait_for_selector("[data-testid=patch-error]")
    assert "same number of tokens" in page.locator("[data-testid=patch-error]").inner_text()
    page.fill("[data-testid=patch-corrupted]", CLEAN)
    wait_text(page, "patch-lengths", "same tokens")
    page.click("[data-testid=patch-run]")
    wait_text(page, "patch-error", "same tokens")
    page.fill("[data-testid=patch-corrupted]", CORRUPTED)
    page.fill("[data-testid=patch-answer]", " catastrophically")
    page.click("[data-testid=patch-run]")
    wait_text(page, "patch-error", "not one token")
    # the helper makes a corrupted prompt from a word of the clean one
    page.select_option("[data-testid=patch-word]", index=5)  # "mat"
    page.fill("[data-testid=patch-replacement]", "rug")
    page.click("[data-testid=patch-make]")
    assert page.input_value("[data-testid=patch-corrupted]") == CORRUPTED
    page.wait_for_selector("[data-testid=patch-lengths][data-ok='1']")


def test_a_long_patching_shows_progress_and_its_cancel_stops_the_server(page, live_server, monkeypatch) -> None:
    batches: list[int] = []
    real = patching.patched_metrics

    def slow(*args, **kwargs):  # the live server runs in this process: each batch now takes a while
        batches.append(threading.get_ident())
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(patching, "patched_metrics", slow)
    open_why(page, live_server)
    fill_pair(page)
    page.fill("[data-testid=patch-answer]", " cat")
    page.fill("[data-testid=patch-wrong]", " dog")
    page.click("[data-testid=patch-run]")
    page.wait_for_selector("[data-testid=patch-progress]:not([data-done='0'])", timeout=30_000)
    done, total = (int(page.get_attribute("[data-testid=patch-progress]", k)) for k in ("data-done", "data-total"))
    assert 0 < done < total
    assert f"{done} of {total} patched runs" in page.locator("[data-testid=patch-progress]").inner_text()
    shot(page, "patch-progress", full_page=False)
    page.click("[data-testid=patch-cancel]")
    page.wait_for_selector("[data-testid=patch-cancelled]")
    assert page.locator("[data-testid=patch-progress]").count() == 0
    time.sleep(1.0)  # the batch running at the cancel finishes; then nothing more
    stopped = len(batches)
    time.sleep(1.2)
    assert len(batches) == stopped, "the server went on patching after the page cancelled"
    assert stopped < 4 * 2  # of 8 batches (4 grids x 2 layers)
    assert httpx.get(live_server.url + "api/health").json()["pending"] == 0
    assert page.locator("[data-testid=patch-grid-heads]").count() == 0


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_phone_and_chinese(browser, live_server, lang: str) -> None:
    with open_app(browser, live_server.url, query=f"?lang={lang}", **PHONE) as page:
        open_why(page, live_server)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, f"the page is {width} px wide on a 390 px phone"
        page.locator("[data-testid=attr-sum]").scroll_into_view_if_needed()
        shot(page, f"dla-phone-{lang}", full_page=False)
        page.locator("[data-testid=attr-map]").scroll_into_view_if_needed()
        shot(page, f"map-phone-{lang}", full_page=False)
        if lang == "zh":
            assert "为什么是这个词元" in page.locator("[data-view=attribution] h2").inner_text()
            assert "解释位置" in page.locator("[data-testid=attr-explains]").inner_text()
        fill_pair(page)
        page.fill("[data-testid=patch-answer]", " cat")
        page.fill("[data-testid=patch-wrong]", " dog")
        page.click("[data-testid=patch-run]")
        page.wait_for_selector("[data-testid=patch-grid-heads]", timeout=60_000)
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
        page.locator("[data-testid=patch-grid-resid_pre]").scroll_into_view_if_needed()
        shot(page, f"patch-phone-{lang}", full_page=False)
        # a tap pins the readout and opens the head
        page.locator("[data-testid=patch-map-heads]").scroll_into_view_if_needed()
        shot(page, f"patch-heads-phone-{lang}", full_page=False)
        box = page.locator("[data-testid=patch-map-heads] .pic").bounding_box()
        page.touchscreen.tap(box["x"] + 0.5 * box["width"] / 4, box["y"] + 1.5 * box["height"] / 2)
        page.wait_for_selector("[data-view=attention]")
        assert page.locator("[data-testid=layer-value]").inner_text() == "1"
