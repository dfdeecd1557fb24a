"""Why this token, by features, in a real browser against the live server: the tiny random GPT-2 of the Features page's
test (two blocks, an autoencoder at each block's output, the last one with feature pages). The split's rows (features
by |effect|, the others summed, the decoder's bias, the error) and its whole equal POST /api/attribution/features's
answer; the sentence says which block's output is split and what it leaves out (block 0: block 1's writes; block 1:
only the norm's constant); clicking a feature opens its page in the Features page; a Pixel 7 in 中文 (screenshot in
test-artifacts/attribution-features/)."""

from __future__ import annotations

import pytest

from .conftest import ARTIFACTS, open_app
from .test_app import wait_tokens
from .test_features_page import BARE, HOOK, PIXEL7, TEXT, post, sae_model, sae_server  # noqa: F401 (fixtures)
from .test_lesson_claims import passed, vitest

pytestmark = pytest.mark.browser

SHOTS = ARTIFACTS / "attribution-features"


def open_split(page, server) -> list[int]:
    ids = post(server, "trace", text=TEXT)["token_ids"]
    page.fill("[data-testid=text]", TEXT)
    wait_tokens(page, len(ids))
    page.dispatch_event("[data-testid=nav-attribution]", "click")
    page.wait_for_selector("[data-testid=attr-split-features]", timeout=30_000)
    page.click("[data-testid=attr-split-features]")
    page.wait_for_selector("[data-testid=attr-f-sum]", timeout=30_000)
    return ids


def shown(page, server, ids: list[int], hook: str) -> dict:
    """The split on the page, checked against the API's answer for the same ids, position and hook."""
    page.wait_for_selector(f"[data-testid=attr-features][data-busy='0'] [data-testid=attr-f-sum][data-hook='{hook}']",
                           timeout=30_000)
    pos = int(page.locator("[data-testid=attr-f-sum]").get_attribute("data-position"))
    want = post(server, "attribution/features", ids=ids, position=pos, hook=hook, top=10)
    rows = page.locator("[data-testid=attr-f-row]")
    kinds = [r.get_attribute("data-kind") for r in rows.all()]
    n = len(want["features"])
    assert kinds == ["feature"] * n + (["others"] if want["active"] > n else []) + ["bias", "error"]
    assert [int(r.get_attribute("data-id")) for r in rows.all()[:n]] == [f["id"] for f in want["features"]]
    values = [float(r.get_attribute("data-value")) for r in rows.all()]
    expect = [f["effect"] for f in want["features"]] + ([want["others"]] if want["active"] > n else []) + [
        want["bias"], want["error"]]
    assert values == pytest.approx(expect, abs=1e-9)
    whole = float(page.locator("[data-testid=attr-f-whole]").get_attribute("data-value"))
    assert whole == pytest.approx(want["whole"], abs=1e-9)
    assert sum(values) == pytest.approx(whole, abs=1e-4)  # the rows shown add up to the whole
    return want


def test_the_split_equals_the_api_and_a_feature_opens_its_page(browser, sae_server) -> None:  # noqa: F811
    with open_app(browser, sae_server.url) as page:
        ids = open_split(page, sae_server)
        # the default: the middle of the block outputs (blocks 0 and 1): block 0's, whose sentence names block 1
        want = shown(page, sae_server, ids, BARE)
        scope = page.locator("[data-testid=attr-f-scope]")
        assert scope.get_attribute("data-key") == "attr.fEarlierOne"
        said = scope.inner_text()
        assert "splits block 0's output only" in said and "Block 1, after it, writes" in said
        assert f"{want['later']:.4f}".replace("-", "−") in said
        err = page.locator("[data-testid=attr-f-errsaid]").get_attribute("data-key")
        assert err == ("attr.fErrorBig" if abs(want["error"]) > abs(want["features"][0]["effect"])
                       else "attr.fErrorSmall")
        # the last block: nothing after it but the norm's constant
        page.select_option("[data-testid=attr-f-hook]", HOOK)
        want = shown(page, sae_server, ids, HOOK)
        assert want["later"] == pytest.approx(0.0, abs=1e-4)
        assert page.locator("[data-testid=attr-f-scope]").get_attribute("data-key") == "attr.fLast"
        assert "is the last block" in page.locator("[data-testid=attr-f-scope]").inner_text()
        # a feature's row opens its page in the Features page
        fid = want["features"][0]["id"]
        page.click(f"[data-testid=attr-f-row][data-id='{fid}']")
        page.wait_for_selector("[data-testid=feat-density]", timeout=30_000)
        assert page.locator("[data-testid=feat-hook]").input_value() == HOOK
        fpage = page.locator("[data-testid=feat-page]")
        assert (fpage.get_attribute("data-id"), fpage.get_attribute("data-hook")) == (str(fid), HOOK)


def test_pixel7_chinese(browser, sae_server) -> None:  # noqa: F811
    with open_app(browser, sae_server.url, query="?lang=zh", **PIXEL7) as page:
        ids = open_split(page, sae_server)
        shown(page, sae_server, ids, BARE)
        assert "按特征" in page.locator("[data-testid=attr-split]").inner_text()
        assert "这里只拆分第 0 个模块的输出" in page.locator("[data-testid=attr-f-scope]").inner_text()
        assert "误差" in page.locator("[data-testid=attr-f-errsaid]").inner_text()
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= PIXEL7["viewport"]["width"], f"the page is {width} px wide on a 412 px phone"
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("[data-testid=attr-split]").evaluate("el => el.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(SHOTS / "features-split-pixel7-zh.png"), full_page=False)


def test_every_wording_is_chosen_by_its_numbers() -> None:
    """The wordings the tiny model does not reach (several blocks after the split one, no feature active), in
    web/tests/featSplit.test.ts, in English and 中文."""
    r = vitest("tests/featSplit.test.ts", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert passed(r) == 6
