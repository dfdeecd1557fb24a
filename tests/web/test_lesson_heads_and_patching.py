"""The GPT-2 lesson's attention steps and the Why-this-token lesson's patching steps, in a real browser on the
built-in explainer-small (a trained model, whose heads include attention sinks): the softmax step picks a head that
searches (its focus row's top key is not the first token) and names a sink when the focus head is one (the mean weight
its rows give position 0, equal to the API's); the tokenization step asks the server only what it can answer (no
4xx, in 中文 too); the patching is called denoising, with noising a swap away; step 6's words read the grid in the
order it is drawn; and the card stays off the grid it asks the learner to read, at 1280 x 900, 1070 px wide and on
a 390 x 844 phone. Screenshots go to test-artifacts/heads-patching/."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from .conftest import ARTIFACTS, LiveServer, open_app
from .test_lesson import wait_body as wait_for_step

pytestmark = pytest.mark.browser

TEXT = "Data visualization empowers users to"
SHOTS = ARTIFACTS / "heads-patching"
VIEWPORTS = {"desktop": {"viewport": {"width": 1280, "height": 900}},
             "medium": {"viewport": {"width": 1070, "height": 900}},
             "phone": {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True,
                       "has_touch": True}}


@pytest.fixture(scope="module")
def small() -> Iterator[LiveServer]:
    from transformer_explainer import load_model
    from transformer_explainer.server import create_app

    with LiveServer(create_app({"explainer-small": load_model("explainer-small", allow_download=False)})) as srv:
        yield srv


def api(server: LiveServer, path: str, **body) -> dict:
    r = httpx.post(server.url + "api/" + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def pattern(server: LiveServer, ids: list[int], layer: int, head: int) -> np.ndarray:
    """The head's whole pattern (T, T) as the page gets it."""
    from transformer_explainer.server.encoding import decode_array

    t = api(server, "tensors", ids=ids, tensors=[{"name": f"blocks.{layer}.attn.pattern", "head": head}])["tensors"][0]
    return np.asarray(decode_array(t["data"], t["shape"], t["dtype"]), dtype=np.float64).reshape(t["shape"])


def wait_body(page) -> None:
    """test_lesson's wait, with room for explainer-small's step values on a busy machine."""
    wait_for_step(page, timeout=120_000)


def open_lesson(page, lesson: str, lang: str = "en") -> None:
    if lang == "zh":
        page.select_option("[data-testid=lang]", "zh")
        page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
    page.fill("[data-testid=text]", TEXT)
    page.wait_for_function("() => !document.querySelector('.view.busy') && document.querySelector("
                           "'[data-testid=token-chip]')", timeout=30_000)
    if lesson == "why":
        page.dispatch_event("[data-testid=nav-attribution]", "click")
    page.dispatch_event("[data-testid=tour-open]", "click")
    page.wait_for_selector(f"[data-testid=tour][data-lesson={lesson}]", timeout=30_000)


def goto(page, sid: str) -> None:
    for _ in range(60):
        wait_body(page)
        if page.get_attribute("[data-testid=tour]", "data-step") == sid:
            return
        page.keyboard.press("ArrowRight")
    raise AssertionError(f"no lesson step {sid}")


def nums(page) -> dict[str, str]:
    return page.eval_on_selector_all("[data-testid=tour] [data-num]",
                                     "els => Object.fromEntries(els.map(e => [e.dataset.num, e.dataset.raw]))")


def record_refusals(page, bad: list[str]) -> None:
    """Keep every answer of status 400 or more that the page gets, with the request's body."""
    page.on("response", lambda r: bad.append(f"{r.status} {r.url} {r.request.post_data}") if r.status >= 400 else None)


def focus(page) -> tuple[int, int]:
    layer = int(page.inner_text("[data-testid=layer-value]"))
    head = int(page.inner_text("[data-testid=head-picker] button[aria-checked=true]"))
    return layer, head


def sink_share(p: np.ndarray) -> float:
    """The mean weight the rows after the first give position 0."""
    return float(p[1:, 0].mean())


def test_the_softmax_step_picks_a_searching_head_and_names_a_sink(browser, small) -> None:
    ids = api(small, "trace", text=TEXT)["token_ids"]
    T, last = len(ids), len(ids) - 1
    c = httpx.get(small.url + "api/models", timeout=30).json()["models"][0]["config"]
    pats = {(lh // c["n_head"], lh % c["n_head"]): pattern(small, ids, lh // c["n_head"], lh % c["n_head"])
            for lh in range(c["n_layer"] * c["n_head"])}
    sinks = [k for k, p in pats.items() if sink_share(p) >= 0.5 and int(np.argmax(p[last])) == 0]
    assert sinks, "explainer-small has no sink head on this text: the test needs one"
    with open_app(browser, small.url) as page:
        open_lesson(page, "gpt2")
        goto(page, "softmax")
        page.screenshot(path=str(SHOTS / "gpt2-softmax-en.png"))
        layer, head = focus(page)
        row = pats[layer, head][last]
        # the step's head searches: its top key for the focus (the last token) is not the first token, and wins clearly
        assert int(np.argmax(row)) != 0, (layer, head, row)
        assert row.max() >= 0.5 and row.max() >= 2 * np.sort(row)[-2], row
        n = nums(page)
        assert "sink-share" not in n
        assert int(n["top-key"]) == ids[int(np.argmax(row))]
        # on a sink head the same step names it, with the API's share
        sl, sh = sinks[0]
        page.dispatch_event(f"[role=radiogroup] button[aria-label='Layer {sl}']", "click")
        page.dispatch_event(f"[data-testid=head-picker] button:text-is('{sh}')", "click")
        page.wait_for_function("() => document.querySelector('[data-testid=tour] [data-num=sink-share]')",
                               timeout=30_000)
        wait_body(page)
        page.screenshot(path=str(SHOTS / "gpt2-softmax-sink-en.png"))
        n = nums(page)
        assert focus(page) == (sl, sh)
        assert abs(float(n["sink-share"]) - sink_share(pats[sl, sh])) < 2e-3
        assert int(n["sink-rows"]) == T - 1 and int(n["first-token"]) == ids[0]
        assert "attention sink" in page.inner_text("#lesson-body")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_tokenization_step_asks_only_what_the_server_answers(browser, small, lang: str) -> None:
    bad: list[str] = []
    with open_app(browser, small.url) as page:
        record_refusals(page, bad)
        open_lesson(page, "gpt2", lang)
        goto(page, "bpe")
        body = page.inner_text("#lesson-body")
        page.screenshot(path=str(SHOTS / f"gpt2-bpe-{lang}.png"))
        goto(page, "softmax")
    assert not bad, bad
    # the split word and the word split only for want of a space, as the tokenizer has them
    assert "visualization" in body and "Data" in body


def test_the_experiments_lesson_asks_only_what_the_server_answers(browser, small) -> None:
    """The word-arithmetic step checks which words are single tokens before it asks the explorer about them:
    explainer-small has no token " queen", and the step says so without a refused request."""
    bad: list[str] = []
    with open_app(browser, small.url) as page:
        record_refusals(page, bad)
        page.select_option("[data-testid=lang]", "zh")
        page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
        page.fill("[data-testid=text]", TEXT)
        page.wait_for_function("() => !document.querySelector('.view.busy') && document.querySelector("
                               "'[data-testid=token-chip]')", timeout=30_000)
        page.dispatch_event("[data-testid=nav-experiments]", "click")
        page.dispatch_event("[data-testid=tour-open]", "click")
        page.wait_for_selector("[data-testid=tour][data-lesson=experiments]", timeout=30_000)
        goto(page, "arithmetic")
        page.screenshot(path=str(SHOTS / "experiments-arithmetic-zh.png"))
        body = page.inner_text("#lesson-body")
    assert not bad, bad
    tokens = api(small, "attribution/tokens", texts=[" queen"])["texts"][0]["ids"]
    assert len(tokens) > 1 and "queen" in body  # the sentence that says " queen" is several tokens here


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_patching_is_called_denoising_with_noising_a_swap_away(browser, small, lang: str) -> None:
    words = {"en": ("denoising", "noising"), "zh": ("去噪", "加噪")}[lang]
    with open_app(browser, small.url) as page:
        open_lesson(page, "why", lang)
        goto(page, "patch")
        body = page.inner_text("#lesson-body")
        page.screenshot(path=str(SHOTS / f"why-patch-{lang}.png"))
        assert all(w in body for w in words), body
        assert all(w in page.inner_text("[data-testid=patch-grid-help]") for w in words)
        # the swap button turns the pair round: the other direction, noising
        clean = page.input_value("[data-testid=patch-clean]")
        corrupted = page.input_value("[data-testid=patch-corrupted]")
        page.keyboard.press("Escape")
        page.click("[data-testid=patch-swap]")
        assert page.input_value("[data-testid=patch-clean]") == corrupted
        assert page.input_value("[data-testid=patch-corrupted]") == clean


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_step_6_reads_the_grid_in_the_order_it_is_drawn(browser, small, lang: str) -> None:
    with open_app(browser, small.url) as page:
        open_lesson(page, "why", lang)
        goto(page, "grid")
        body = page.inner_text("#lesson-body")
        page.screenshot(path=str(SHOTS / f"why-grid-{lang}.png"))
        # the grid is drawn with layer 0 at the top: its row labels go down as the layer grows
        tops = page.eval_on_selector_all("[data-tour=patch-resid_pre] .rl",
                                         "els => els.map(e => e.getBoundingClientRect().top)")
        assert len(tops) >= 2 and tops == sorted(tops) and tops[0] < tops[-1]
        if lang == "en":
            assert "down the grid" in body and "layer 0 at the top" in body and " up" not in body, body
        else:
            assert "从上往下" in body and "往上" not in body, body


STATE = """name => {
  const r = (e) => { const b = e.getBoundingClientRect();
    return { left: b.left, top: b.top, right: b.right, bottom: b.bottom, width: b.width, height: b.height }; };
  let t = null;
  for (const el of document.querySelectorAll(`[data-tour="${name}"]`)) if (el.offsetParent) { t = el; break; }
  const next = document.querySelector('[data-testid=tour-next]');
  return { card: r(document.querySelector('[data-testid=tour]')), target: t ? r(t) : null,
    next: next ? r(next) : null, vw: innerWidth, vh: innerHeight };
}"""


def overlap(a: dict, b: dict) -> bool:
    return min(a["right"], b["right"]) > max(a["left"], b["left"]) + 1 and \
        min(a["bottom"], b["bottom"]) > max(a["top"], b["top"]) + 1


def on_screen(a: dict, vw: int, vh: int) -> bool:
    return a["top"] >= -1 and a["bottom"] <= vh + 1 and a["left"] >= -1 and a["right"] <= vw + 1


# the steps this work changed, with the row (a data-tour name) the text quotes on a phone
STEPS = [("why", "patch", "patch-metrics"), ("why", "grid", "patch-resid_pre"), ("gpt2", "softmax", "stage-softmax"),
         ("gpt2", "heads", "head-picker")]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_the_card_leaves_its_target_and_next_button_visible(browser, small, viewport: str, lang: str) -> None:
    for lesson in ("why", "gpt2"):
        with open_app(browser, small.url, **VIEWPORTS[viewport]) as page:
            open_lesson(page, lesson, lang)
            for ls, sid, name in STEPS:
                if ls != lesson:
                    continue
                goto(page, sid)
                s = page.evaluate(STATE, page.get_attribute("[data-testid=tour]", "data-target"))
                page.screenshot(path=str(SHOTS / f"{lesson}-{sid}-{viewport}-{lang}.png"))
                assert s["target"], (sid, "no target")
                assert s["next"] and on_screen(s["next"], s["vw"], s["vh"]), (sid, "Next is off the screen", s)
                if viewport == "phone":
                    # the sheet leaves the quoted row (the grid, the row of weights) in view above it
                    q = page.evaluate(STATE, name)["target"]
                    assert q, (sid, name, "not on the page")
                    room = s["card"]["top"]  # the screen above the sheet
                    if q["height"] <= room:
                        assert on_screen(q, s["vw"], s["vh"]) and not overlap(q, s["card"]), (sid, s, q)
                    else:  # taller than the room: it starts on the screen, above the sheet
                        assert 0 <= q["top"] < room, (sid, s, q)
                else:
                    assert not overlap(s["target"], s["card"]), (sid, viewport, s)


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A random GPT-2 of 12 blocks (GPT-2 small's depth): its patching grids are as tall as GPT-2 small's."""
    from tests.conftest import make_hf_gpt2
    from transformer_explainer import load_model
    from transformer_explainer.server import create_app

    folder = make_hf_gpt2(tmp_path_factory.mktemp("gpt2-12"), n_layer=12, n_head=4, n_embd=64)
    with LiveServer(create_app({"random-gpt2-12": load_model(str(folder), allow_download=False)})) as srv:
        yield srv


@pytest.mark.parametrize("viewport", ["desktop", "medium"])
def test_the_card_stays_off_a_tall_grid(browser, deep, viewport: str) -> None:
    """Step 6 asks the learner to read the resid_pre grid: with 12 layers the grid and the card do not fit one above
    the other, and the card must still leave the grid uncovered (scrolling its own text where it must)."""
    with open_app(browser, deep.url, **VIEWPORTS[viewport]) as page:
        open_lesson(page, "why")
        goto(page, "grid")
        s = page.evaluate(STATE, "patch-resid_pre")
        page.screenshot(path=str(SHOTS / f"why-grid-deep-{viewport}.png"))
        assert s["target"]["height"] < s["vh"], s  # the grid alone fits on the screen
        assert on_screen(s["target"], s["vw"], s["vh"]), s
        assert not overlap(s["target"], s["card"]), s
        assert s["next"] and on_screen(s["next"], s["vw"], s["vh"]), s
