"""The "Watch it learn" page (issue 36) in a real browser against the in-process server: it opens from the header's
mode switch, draws the shipped recorded run from /api/induction's numbers (compared with the package's log), the
scrub and the replay change the record and the attention maps shown, a live run (few steps, tiny width) starts,
streams its records and stops, a class server (live training off) says why and offers no Start, and a phone in 中文
has no sideways scroll. Screenshots go to test-artifacts/learn-*.png."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from transformer_explainer.training.induction import summary

from .conftest import ARTIFACTS, LiveServer, open_app
from .test_app import number

pytestmark = pytest.mark.browser

RUN = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "builtin" / "induction-run"


def log(name: str) -> list[dict]:
    return [json.loads(line) for line in (RUN / name / "log.jsonl").read_text().splitlines() if line.strip()]


def fmt(v: float) -> str:
    """A value as lib/format.ts `num` writes it (4 decimals in this range), with its minus sign."""
    assert 1e-3 <= abs(v) < 1e5 or v == 0
    return f"{v:.4f}".replace("-", "−")


def open_learn(page) -> None:
    page.click("[data-testid=mode-learn]")
    page.wait_for_selector("[data-testid=learn-readout]", timeout=30_000)


def at_step(page) -> int:
    return int(page.locator("[data-testid=learn-at-step]").get_attribute("data-step"))


def n_records(page) -> int:
    return int(page.locator("[data-testid=learn-scrub]").get_attribute("max")) + 1


def wait_records(page, n: int) -> None:
    """Until the live run's scrub holds at least `n` records."""
    page.wait_for_function("n => Number(document.querySelector('[data-testid=learn-scrub]')?.max) + 1 >= n", arg=n,
                           timeout=120_000)


def wait_status(page, *status: str) -> None:
    page.wait_for_function("s => s.includes(document.querySelector('[data-testid=learn-live-status]')?.dataset.status)",
                           arg=list(status), timeout=60_000)


def hover_map(page, r: int, c: int, n: int) -> str:
    pic = page.locator("[data-testid=learn-map] .pic")
    pic.scroll_into_view_if_needed()
    box = pic.bounding_box()
    page.mouse.move(box["x"] + (c + 0.5) * box["width"] / n, box["y"] + (r + 0.5) * box["height"] / n)
    ro = page.locator("[data-testid=learn-map-readout]")
    page.wait_for_function("el => el.textContent.trim().length > 0", arg=ro.element_handle())
    return ro.inner_text()


def test_recorded_run_drawn_from_the_log(page, live_server):
    main, control = log("main"), log("control")
    info = httpx.get(live_server.url + "api/induction", timeout=30).json()
    open_learn(page)
    assert "mode=learn" in page.url
    assert page.locator("[data-testid=learn-source-recorded]").get_attribute("aria-checked") == "true"
    # the last record, its numbers as the log has them
    last = main[-1]
    assert at_step(page) == last["step"]
    ro = page.locator("[data-testid=learn-readout]")
    assert float(ro.get_attribute("data-first")) == last["first_loss"]
    assert float(ro.get_attribute("data-repeat")) == last["repeat_loss"]
    text = ro.inner_text()
    for v in (last["first_loss"], last["repeat_loss"], last["icl_score"]):
        assert fmt(v) in text, (fmt(v), text)
    # the best head scores as the page writes every head's score: 3 decimals (learn/state.svelte.ts `score`)
    for m in (last["induction"], last["previous_token"]):
        assert f"score {max(map(max, m)):.3f}" in text, text
    # every record drawn: each curve has one point a record; markers at the run's milestones (summary())
    for name, n in (("main-first", len(main)), ("main-repeat", len(main)), ("control-repeat", len(control))):
        assert page.locator(f"[data-testid=learn-loss] path[data-series={name}]").get_attribute("data-points") == str(n)
    ms = summary(main)
    assert ms["repeat_loss_falls"] == info["recorded"]["runs"]["main"]["repeat_loss_falls"]
    marks = {int(m.get_attribute("data-marker")) for m in page.locator("[data-testid=learn-loss] [data-marker]").all()}
    assert marks == {ms["repeat_loss_falls"], ms["induction_head"]}
    # the step written as the lesson writes it ("1,100")
    assert f"{ms['repeat_loss_falls']:,}" in page.locator("[data-testid=learn-milestones]").inner_text()
    # each head's scores at the record: 2 x 4 heads and the control's 1 x 4, as logged
    for run, rec, layers in (("main", last, 2), ("control", control[-1], 1)):
        heads = page.locator(f"[data-testid=learn-heads-{run}] figure.head")
        assert heads.count() == layers * 4
        for k in range(heads.count()):
            el = heads.nth(k)
            l, h = int(el.get_attribute("data-layer")), int(el.get_attribute("data-head"))
            assert float(el.get_attribute("data-ind")) == rec["induction"][l][h]
            assert float(el.get_attribute("data-prev")) == rec["previous_token"][l][h]
    # the control's reason, true for its numbers: its best induction score, under the bar
    why = page.locator("[data-testid=learn-control-why]").inner_text()
    c_best = max(map(max, control[-1]["induction"]))
    assert c_best < 0.5 and f"is {c_best:.3f}," in why and "cannot compose" in why
    page.screenshot(path=str(ARTIFACTS / "learn-desktop-1280.png"), full_page=True)


def test_scrub_and_play_change_the_maps(page, live_server):
    main = log("main")
    info = httpx.get(live_server.url + "api/induction", timeout=30).json()
    ex = info["example"]
    T = len(ex["tokens"])
    open_learn(page)
    big = page.locator("[data-testid=learn-page] .bigmap")
    layer, head = int(big.get_attribute("data-layer")), int(big.get_attribute("data-head"))
    last = main[-1]
    # the map opens on the head with the best induction score at the last record
    assert last["induction"][layer][head] == max(map(max, last["induction"]))
    # at a repeated symbol, the cell one right of its first occurrence: the induction head's cell
    r = ex["prefix"] + ex["segment"] + 4
    c = ex["prefix"] + 4 + 1
    late = hover_map(page, r, c, T)
    assert fmt(last["example_attention"][layer][head][r][c]) in late, late
    # scrub to the first record: its numbers and its map
    page.locator("[data-testid=learn-scrub]").fill("0")
    page.wait_for_function("() => document.querySelector('[data-testid=learn-at-step]').dataset.step === '0'")
    assert float(page.locator("[data-testid=learn-readout]").get_attribute("data-repeat")) == main[0]["repeat_loss"]
    page.mouse.move(0, 0)
    early = hover_map(page, r, c, T)
    assert early != late
    assert number(early.split(":")[-1]) == pytest.approx(main[0]["example_attention"][layer][head][r][c], abs=5e-5)
    # play: the record moves on by itself
    page.click("[data-testid=learn-play]")
    page.wait_for_function("() => Number(document.querySelector('[data-testid=learn-at-step]').dataset.step) >= 200")
    page.click("[data-testid=learn-play]")
    s = at_step(page)
    page.wait_for_timeout(600)
    assert at_step(page) == s  # paused


def test_live_run_streams_and_stops(page, live_server):
    open_learn(page)
    page.click("[data-testid=learn-source-live]")
    page.fill("[data-testid=learn-steps]", "3000")
    page.fill("[data-testid=learn-width]", "16")
    page.click("[data-testid=learn-start]")
    status = page.locator("[data-testid=learn-live-status]")
    status.wait_for(timeout=30_000)
    # records stream in: the scrub grows and follows the newest
    wait_records(page, 3)
    assert at_step(page) > 0
    current = httpx.get(live_server.url + "api/induction", timeout=30).json()["current"]
    assert current["config"]["width"] == 16 and current["status"] in ("running", "starting")
    # pause, then step: one more record, and paused again
    page.click("[data-testid=learn-pause]")
    wait_status(page, "paused")
    page.wait_for_timeout(500)  # a record the step going when paused made
    n = n_records(page)
    page.wait_for_timeout(500)
    assert n_records(page) == n  # paused: nothing new
    page.click("[data-testid=learn-step]")
    wait_records(page, n + 1)
    wait_status(page, "paused")
    page.wait_for_timeout(500)
    assert n_records(page) == n + 1
    # scrubbed back, the view stays on the record picked while new ones arrive; "follow" goes to the newest
    page.locator("[data-testid=learn-scrub]").fill("0")
    page.click("[data-testid=learn-resume]")
    wait_records(page, n + 3)
    assert at_step(page) == 0
    page.click("[data-testid=learn-follow]")
    assert at_step(page) > 0 and not page.locator("[data-testid=learn-follow]").count()
    page.click("[data-testid=learn-stop]")
    wait_status(page, "stopped", "finished")
    after = httpx.get(live_server.url + f"api/induction/train/{current['id']}", timeout=30).json()
    assert after["status"] in ("stopped", "finished")
    assert not page.locator("[data-testid=learn-stop]").count()
    page.screenshot(path=str(ARTIFACTS / "learn-live-stopped.png"), full_page=True)
    # the model it trained opens in the main app's views
    page.click("[data-testid=learn-open-model]")
    page.wait_for_selector("[data-testid=token-chip]", timeout=60_000)
    assert page.locator("[data-testid=model]").input_value().startswith("induction-live-")
    assert "mode=learn" not in page.url


@pytest.fixture(scope="module")
def class_server(tiny_model):
    from transformer_explainer.server import create_app
    from transformer_explainer.server.app import ServerSettings

    with LiveServer(create_app({"tiny": tiny_model}, ServerSettings(live_training=False))) as srv:
        yield srv


def test_class_server_replays_only(browser, class_server):
    info = httpx.get(class_server.url + "api/induction", timeout=30).json()
    assert info["live_training"] is False
    with open_app(browser, class_server.url, query="?mode=learn", ready_timeout=90_000) as pg:
        pg.wait_for_selector("[data-testid=learn-readout]", timeout=30_000)
        note = pg.locator("[data-testid=learn-no-live]")
        assert note.is_visible() and note.inner_text().strip()
        assert not pg.locator("[data-testid=learn-start]").count()
        assert not pg.locator("[data-testid=learn-source-live]").count()
    with open_app(browser, class_server.url, query="?mode=learn&lang=zh", ready_timeout=90_000) as pg:
        pg.wait_for_selector("[data-testid=learn-no-live]", timeout=30_000)
        zh = pg.locator("[data-testid=learn-no-live]").inner_text()
        assert zh.strip() and zh != info["live_reason"], zh


def test_phone_in_chinese(browser, live_server):
    pixel7 = {"viewport": {"width": 412, "height": 915}, "device_scale_factor": 2.625, "is_mobile": True,
              "has_touch": True}
    with open_app(browser, live_server.url, query="?lang=zh", **pixel7) as pg:
        pg.wait_for_function("() => document.documentElement.dataset.cjkFont === 'loaded'")
        pg.locator("[data-testid=mode-learn]").tap()
        pg.wait_for_selector("[data-testid=learn-readout]", timeout=30_000)
        assert pg.locator("[data-testid=mode-learn]").inner_text() == "看它学习"
        sw, iw = pg.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        # what sticks out, for the message
        wide = pg.evaluate("""() => [...document.querySelectorAll('body *')]
          .filter((e) => e.getBoundingClientRect().right > 413).slice(0, 8)
          .map((e) => `${e.tagName} ${e.textContent.slice(0, 30)} ${Math.round(e.getBoundingClientRect().right)}`)""")
        assert sw <= iw <= 412, (sw, iw, wide)
        small = []
        for sel in ("[data-testid^=mode-]", "[data-testid^=learn-source-]", "[data-testid=learn-play]",
                    "[data-testid^=nav-]"):
            for el in pg.locator(sel).all():
                if el.is_visible():
                    b = el.bounding_box()
                    if b["width"] < 39.5 or b["height"] < 39.5:
                        small.append(f"{sel} {b['width']:.0f}x{b['height']:.0f}")
        assert not small, small
        pg.screenshot(path=str(ARTIFACTS / "learn-phone-zh.png"), full_page=True)
        pg.screenshot(path=str(ARTIFACTS / "learn-phone-zh-1-top.png"))
        pg.locator("[data-testid=learn-heads-main]").scroll_into_view_if_needed()
        pg.screenshot(path=str(ARTIFACTS / "learn-phone-zh-2-heads.png"))


def test_on_text_tab(page, live_server):
    open_learn(page)
    page.click("[data-testid=learn-tab-text]")
    page.wait_for_selector("[data-testid=learn-panel-text] [data-testid=text-run]", timeout=30_000)
    assert not page.locator("[data-testid=learn-readout]").count()
    page.click("[data-testid=learn-tab-copy]")
    page.wait_for_selector("[data-testid=learn-readout]")


def test_lesson_opens_from_the_page_and_the_header(page, live_server):
    open_learn(page)
    page.click("[data-testid=learn-lesson]")
    card = page.locator("[data-testid=tour]")
    card.wait_for(timeout=30_000)
    assert card.get_attribute("data-lesson") == "induction"
    page.keyboard.press("Escape")
    card.wait_for(state="detached", timeout=10_000)
    page.click("[data-testid=tour-open]")  # the header's Guided tour, on this page: the same lesson
    card.wait_for(timeout=30_000)
    assert card.get_attribute("data-lesson") == "induction"


def test_joins_a_run_going(browser, live_server):
    r = httpx.post(live_server.url + "api/induction/train", json={"steps": 3000, "width": 16}, timeout=30)
    assert r.status_code == 202, r.text
    run = r.json()
    with open_app(browser, live_server.url, query="?mode=learn", ready_timeout=90_000) as pg:
        # the page found the run on the server and follows it: the live source, its status, its records
        status = pg.locator("[data-testid=learn-live-status]")
        status.wait_for(timeout=30_000)
        assert pg.locator("[data-testid=learn-source-live]").get_attribute("aria-checked") == "true"
        wait_records(pg, 3)
        assert run["id"] in status.inner_text()
        pg.click("[data-testid=learn-stop]")  # the same address started it: this page may stop it
        wait_status(pg, "stopped", "finished")
    assert httpx.get(live_server.url + f"api/induction/train/{run['id']}", timeout=30).json()["status"] in (
        "stopped", "finished")


def test_bad_settings_get_one_sentence(page, live_server):
    open_learn(page)
    page.click("[data-testid=learn-source-live]")
    hi = httpx.get(live_server.url + "api/induction", timeout=30).json()["limits"]["steps"][1]
    page.fill("[data-testid=learn-steps]", str(int(hi) + 1))
    page.click("[data-testid=learn-start]")
    err = page.locator("[data-testid=learn-error]")
    err.wait_for(timeout=30_000)
    assert str(int(hi)) in err.inner_text() and "\n" not in err.inner_text().strip()
    page.fill("[data-testid=learn-steps]", "50")
    page.fill("[data-testid=learn-width]", "18")  # not a multiple of the 4 heads
    page.click("[data-testid=learn-start]")
    page.wait_for_function("() => /18/.test(document.querySelector('[data-testid=learn-error]')?.textContent)")
    assert not page.locator("[data-testid=learn-live-status]").count()  # no run started
