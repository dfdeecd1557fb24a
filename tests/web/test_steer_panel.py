"""The steering panel of the Features page, in a real browser against the live server: the tiny random GPT-2 laid out
as a built-in model that ships an autoencoder at blocks.1.hook_resid_post. With strength 0 the two continuations are
the same and the panel says so; at a strength that steers, the tokens shown, the marks on the ones that differ, the
sweep's points and its breakdown, and the direction's lens are /api/steer's; a contrast of two prompt sets steers as
the API does; bad input (an empty set, a layer the model lacks) shows the server's one sentence; a Pixel 7 in 中文
(screenshot in test-artifacts/steer/); the offline snapshot says that steering needs the live app. The vitest units
of the panel's sentences (web/tests/steerText.test.ts: the wordings the random model never reaches, such as a sweep
broken by repetition alone) run here too."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.unit.test_features_encode import write_sae

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app
from .test_generic_heads import PIXEL_7
from .test_lesson_claims import passed, vitest

pytestmark = pytest.mark.browser

TEXT = "The cat sat on the mat and the dog"
HOOK = "blocks.1.hook_resid_post"
PRE = "blocks.1.hook_resid_pre"  # a feature there cannot steer (steering adds after a block); the default, by depth
A = ["I love this. It is wonderful.", "What a happy day."]
B = ["I hate this. It is awful.", "What a sad day."]
TOKENS = 8
SHOTS = ARTIFACTS / "steer"


@pytest.fixture(scope="module")
def steer_model(tiny_gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The tiny GPT-2 laid out as a built-in model that ships an autoencoder at blocks.1.hook_resid_post."""
    from transformer_explainer import load_model

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    folder = tmp_path_factory.mktemp("steer") / "tiny-steer"
    shutil.copytree(tiny_gpt2_dir, folder)
    write_sae(folder / "saes" / HOOK, HOOK, seed=3)
    write_sae(folder / "saes" / PRE, PRE, seed=4)
    m = load_model(str(folder), allow_download=False)
    m.source = "builtin"  # what a model found in the package's builtin/ folder says of itself: it ships its saes/
    return m


@pytest.fixture(scope="module")
def server(steer_model) -> Iterator[LiveServer]:
    from transformer_explainer.server import create_app

    with LiveServer(create_app({"tiny": steer_model})) as srv:
        yield srv


def steer(server: LiveServer, **body) -> httpx.Response:
    body = {"model": "tiny", "text": TEXT, "tokens": TOKENS, **body}
    return httpx.post(server.url + "api/steer", json=body, timeout=60)


def open_panel(page, hook: str | None = None) -> None:
    """Open the first feature of the text's list at `hook` (default: the page's); the panel below its page is then in
    view."""
    fresh = ("() => { const c = document.querySelector('[data-testid=feat-chip]');"
             " return c !== null && c.closest('.busy') === null; }")
    page.wait_for_function(fresh, timeout=30_000)
    if hook is not None:
        page.select_option("[data-testid=feat-hook]", hook)
        page.wait_for_function(fresh, timeout=30_000)
    page.locator("[data-testid=feat-chip]").first.click()
    page.wait_for_selector("[data-testid=steer-panel]")


def run(page, strength: float) -> None:
    page.fill("[data-testid=steer-strength]", repr(strength))
    page.fill("[data-testid=steer-tokens]", str(TOKENS))
    page.click("[data-testid=steer-run]")
    page.wait_for_function("s => { const r = document.querySelector('[data-testid=steer-result]');"
                           " return r && Number(r.dataset.strength) === s"
                           " && !document.querySelector('[data-testid=steer-running]'); }",
                           arg=strength, timeout=60_000)


def shown(page, side: str) -> list[int]:
    ids = page.locator(f"[data-testid=steer-{side}-token]").evaluate_all("es => es.map(e => e.dataset.id)")
    return [int(x) for x in ids]


def marked(page, side: str) -> list[int]:
    return page.locator(f"[data-testid=steer-{side}-token]").evaluate_all(
        "es => es.flatMap((e, i) => e.dataset.diff === '1' ? [i] : [])")


def check_against(page, want: dict) -> None:
    """The panel shows the answer `want` of /api/steer: tokens, marks, sweep, breakdown, lens."""
    plain, steered = [t["id"] for t in want["plain"]], [t["id"] for t in want["steered"]]
    assert shown(page, "plain") == plain and shown(page, "steered") == steered
    differ = [i for i in range(max(len(plain), len(steered)))
              if i >= len(plain) or i >= len(steered) or plain[i] != steered[i]]
    assert marked(page, "steered") == [i for i in differ if i < len(steered)]
    points = page.locator("[data-testid=steer-sweep-point]").evaluate_all(
        "es => es.map(e => [Number(e.dataset.strength), e.dataset.broken === '1'])")
    assert points == [[p["strength"], p["broken"]] for p in want["sweep"] if p["mean_log_prob"] is not None]
    breakdown = page.locator("[data-testid=steer-breakdown]")
    if want["breakdown"] is None:
        assert "None of the sweep's" in breakdown.inner_text()
    else:
        assert float(breakdown.locator("[data-num=steer-breakdown]").get_attribute("data-raw")) == want["breakdown"]
        assert "the first that breaks the text down" in breakdown.inner_text()
        first = next(p for p in want["sweep"] if p["broken"])
        assert first["strength"] == want["breakdown"]
        assert page.locator("[data-testid=steer-broken-text]").text_content().endswith(
            "".join(t["text"] for t in first["tokens"]))
    promoted = page.locator("[data-testid=steer-promoted] li").evaluate_all("es => es.map(e => Number(e.dataset.id))")
    assert promoted == [t["id"] for t in want["promoted"]]
    score = page.locator("[data-testid=steer-score]").inner_text()
    assert ("has broken down" in score) == want["steered_broken"]


def test_a_feature_steers_as_the_api_does(browser, server) -> None:
    with open_app(browser, server.url, query=f"#text={TEXT}&view=features") as page:
        open_panel(page, HOOK)
        assert page.is_checked("[data-testid=steer-mode-feature]")
        assert page.locator("[data-testid=steer-feature-layer]").input_value() == "1"  # the open feature's hook
        fid = int(page.locator("[data-testid=steer-feature-id]").input_value())
        assert fid == int(page.locator("[data-testid=feat-chip].open").get_attribute("data-id"))
        feature = {"layer": 1, "id": fid}

        run(page, 0.0)
        zero = steer(server, feature=feature, strength=0.0).json()
        assert shown(page, "plain") == shown(page, "steered") == [t["id"] for t in zero["plain"]]
        assert marked(page, "steered") == []
        assert "Strength 0 adds nothing" in page.locator("[data-testid=steer-outcome]").inner_text()
        check_against(page, zero)

        # a strength the API steers with: the first of the sweep's whose continuation differs from the plain one
        plain = [t["id"] for t in zero["plain"]]
        strength = next(p["strength"] for p in zero["sweep"] if [t["id"] for t in p["tokens"]] != plain)
        want = steer(server, feature=feature, strength=strength).json()
        assert want["changed_at"] is not None
        run(page, strength)
        check_against(page, want)
        outcome = page.locator("[data-testid=steer-outcome]").inner_text()
        at = want["changed_at"]
        assert ("differ from the first generated token" if at == 0 else "agree on the first generated token, then"
                if at == 1 else f"agree on the first {at} generated tokens") in outcome
        k = page.locator("[data-testid=steer-outcome] [data-num=steer-k]").inner_text()
        assert int(k) == len(marked(page, "steered")) + max(0, len(want["plain"]) - len(want["steered"]))
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("[data-testid=steer-panel]").screenshot(path=str(SHOTS / "desktop-feature.png"))

        # a feature of a hook steering does not add at: said, and the contrast offered rather than the last feature
        open_panel(page, PRE)
        note = page.wait_for_selector("[data-testid=steer-not-post]").inner_text()
        assert PRE in note and "cannot steer" in note
        assert page.is_checked("[data-testid=steer-mode-contrast]")


def test_a_contrast_and_bad_input(browser, server) -> None:
    with open_app(browser, server.url, query=f"#text={TEXT}&view=features") as page:
        open_panel(page)
        page.check("[data-testid=steer-mode-contrast]")
        page.fill("[data-testid=steer-a]", "\n".join(A))
        page.fill("[data-testid=steer-b]", "\n\n".join(B) + "\n")  # blank lines are no prompts
        page.fill("[data-testid=steer-layer]", "0")
        run(page, 6.0)
        want = steer(server, contrast={"a": A, "b": B}, layer=0, strength=6.0).json()
        check_against(page, want)
        assert "set A (2) minus the mean over set B (2), after block 0" in \
            page.locator("[data-testid=steer-direction]").inner_text()
        assert want["breakdown"] is not None  # this contrast breaks the text within the sweep: that wording is read
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("[data-testid=steer-panel]").screenshot(path=str(SHOTS / "desktop-contrast.png"))

        # an empty set: the code's sentence (the page's words, in the page's language; not the English detail)
        page.fill("[data-testid=steer-a]", "  \n")
        page.click("[data-testid=steer-run]")
        err = page.wait_for_selector("[data-testid=steer-error]", timeout=30_000).inner_text()
        r = steer(server, contrast={"a": [], "b": B}, layer=0, strength=6.0)
        assert 400 <= r.status_code < 500 and r.json()["code"] == "steer_set_empty"
        assert err == "Contrast set A is empty: write at least one prompt in it, one a line."

        # a layer the model lacks: the code's sentence, with the model's own range
        page.fill("[data-testid=steer-a]", "\n".join(A))
        page.fill("[data-testid=steer-layer]", "7")
        page.click("[data-testid=steer-run]")
        page.wait_for_function("() => document.querySelector('[data-testid=steer-error]')?.textContent"
                               ".includes('no layer 7')", timeout=30_000)
        assert page.locator("[data-testid=steer-error]").inner_text() == \
            "There is no layer 7: the layers are 0 to 1."
        assert steer(server, contrast={"a": A, "b": B}, layer=7, strength=6.0).json()["code"] == "layer_out_of_range"


def test_phone_in_chinese(browser, server) -> None:
    with open_app(browser, server.url, query=f"#text={TEXT}&view=features&lang=zh", **PIXEL_7) as page:
        open_panel(page, HOOK)
        run(page, 0.0)
        assert "强度 0 什么也没有加" in page.locator("[data-testid=steer-outcome]").inner_text()
        assert page.locator("[data-testid=steer-breakdown]").inner_text()
        page.locator("[data-testid=steer-panel]").scroll_into_view_if_needed()
        # nothing of the panel reaches past the phone's width
        over = page.evaluate("() => [...document.querySelectorAll('[data-testid=steer-panel] *')]"
                             ".filter(e => e.getBoundingClientRect().right > window.innerWidth + 1).length")
        assert over == 0
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("[data-testid=steer-panel]").screenshot(path=str(SHOTS / "phone-zh.png"))


def test_vitest_steering_sentences() -> None:
    r = vitest("tests/steerText.test.ts", timeout=300)
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-4000:]
    assert passed(r) >= 6, r.stdout[-4000:]


def test_the_offline_snapshot_says_steering_needs_the_live_app(browser, steer_model, tmp_path: Path) -> None:
    from transformer_explainer.notebook import save_snapshot

    file = save_snapshot(steer_model, TEXT, tmp_path / "steer.html")
    own, blocked, errors = file.as_uri(), [], []
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    ctx.route("**/*", lambda route: route.continue_() if route.request.url == own
              else (blocked.append(route.request.url), route.abort()))
    page = ctx.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(own)
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        page.click("[data-testid=nav-features]")
        page.wait_for_selector("[data-testid=feat-chip]", timeout=30_000)
        page.locator("[data-testid=feat-chip]").first.click()
        note = page.locator("[data-testid=steer-offline]")
        note.wait_for()
        assert note.inner_text().startswith("Steering runs the model")
        assert page.locator("[data-testid=steer-run]").count() == 0
    finally:
        ctx.close()
    assert not blocked, f"the snapshot tried to load: {blocked}"
    assert not errors, f"errors in the page: {errors}"
