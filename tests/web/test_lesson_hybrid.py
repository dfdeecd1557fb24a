"""The chapter "Attention that forgets, compresses and sinks" (web/src/lessons/hybrid.ts) on models that run through
transformers: random-weight checkpoints of a Qwen3.5-shaped hybrid (Gated DeltaNet in layers 0 and 2, full attention
in 1 and 3), gpt-oss (learned sinks, sliding and full layers) and DeepSeek-V3 (multi-head latent attention), from
tests/helpers/hf_checkpoints.py, and the built-in explainer-hybrid the project trains, where the checkout has it. The
lesson button, hidden for such models before, opens this chapter; every step renders in English and 中文 with the same
steps (a model without Gated DeltaNet layers has no memory and recall steps), on a desktop and on a phone in 中文, and
in an offline snapshot; every claim of every step holds on the 20 texts of web/tests/lessons/texts.ts against the
numbers the Python API answers (web/tests/lessons/claims.hybrid.ts, run by vitest as test_lesson_claims does).
Screenshots go to test-artifacts/lesson-hybrid-*.png."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app
from .test_lesson import CJK, set_text, walk
from .test_lesson_claims import passed, vitest

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat and the cat"
STEPS = ["intro", "forget", "memory", "recall", "compress", "sink-why", "sinks", "per-layer", "summary"]
# a model without Gated DeltaNet layers has no state to measure nor to compare with attention
NO_DELTANET = [s for s in STEPS if s not in ("memory", "recall")]
EXPECTED = {"qwen3_5_text": STEPS, "qwen3_next": STEPS, "gpt_oss": NO_DELTANET, "deepseek_v3": NO_DELTANET,
            "lfm2": NO_DELTANET, "falcon_h1": NO_DELTANET, "explainer-hybrid": STEPS}
BUILTIN = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "builtin"


@pytest.fixture(scope="module", params=list(EXPECTED))
def server(request, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, LiveServer]]:
    pytest.importorskip("transformers")
    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    if request.param == "explainer-hybrid":  # the built-in hybrid the project trains (learned weights)
        if not (BUILTIN / "explainer-hybrid" / "config.json").is_file():
            cannot_run("the built-in explainer-hybrid is not in this checkout")
        name, model = "explainer-hybrid", load_model("explainer-hybrid", allow_download=False)
    else:
        folder = write_checkpoint(request.param, tmp_path_factory.mktemp(request.param), tokenizer=True)
        name, model = f"random-{request.param}", load_model(str(folder), allow_download=False)
    with LiveServer(create_app({name: model})) as srv:
        yield request.param, srv


def _walk_both(page, srv: LiveServer, shots: str, phone: bool = False) -> tuple[list[dict], list[dict]]:
    set_text(page, TEXT, srv)
    assert page.get_by_test_id("model-runs").get_attribute("data-runs") == "transformers"
    assert page.get_by_test_id("tour-open").is_visible() or phone  # offered, where it was hidden for such a model
    en = walk(page, "en", shots, phone=phone)
    page.select_option("[data-testid=lang]", "zh")
    page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
    zh = walk(page, "zh", shots, phone=phone)
    return en, zh


def test_the_lesson_button_opens_this_chapter_in_both_languages(browser, server):
    kind, srv = server
    with open_app(browser, srv.url) as page:
        set_text(page, TEXT, srv)
        page.click("[data-testid=tour-open]")
        page.wait_for_selector("[data-testid=tour]")
        assert page.get_attribute("[data-testid=tour]", "data-lesson") == "hybrid"
        page.keyboard.press("Escape")
        en, zh = _walk_both(page, srv, f"lesson-hybrid-{kind}")
    (ARTIFACTS / f"lesson-hybrid-{kind}-text.json").write_text(json.dumps({"en": en, "zh": zh}, ensure_ascii=False,
                                                                           indent=1))
    assert [s["id"] for s in en] == [s["id"] for s in zh] == EXPECTED[kind]
    for a, b in zip(en, zh, strict=True):
        assert a["title"].strip() and a["body"].strip() and b["title"].strip() and b["body"].strip(), a["id"]
        assert not CJK.search(a["title"] + a["body"]), a
        assert CJK.search(b["title"] + b["body"]), b
    body = {s["id"]: s["body"] for s in en}
    if kind == "gpt_oss":  # its learned sinks, each head's weight
        assert "learned sink" in body["sink-why"] and "head 0:" in body["sinks"], body["sinks"]
        assert "has no latent attention" in body["compress"] and "none keeps a state" in body["forget"]
    elif kind in ("lfm2", "falcon_h1"):  # its other mixers, said as what they are
        what = {"lfm2": "short-convolution layers (2) keep no state",
                "falcon_h1": "state-space layers (4, Mamba's kind)"}
        assert "no Gated DeltaNet layer" in body["forget"] and what[kind] in body["forget"], body["forget"]
    elif kind == "deepseek_v3":  # its own latent's cache, not a what-if
        assert "This model has it" in body["compress"] and "what-if" not in body["compress"], body["compress"]
    else:
        assert "no learned sinks" in body["sinks"], body["sinks"]
        assert "The same token came before" in body["recall"], body["recall"]  # "cat" repeats (as one token or more)


def test_on_a_phone_in_chinese(browser, server):
    kind, srv = server
    with open_app(browser, srv.url, viewport={"width": 412, "height": 915}, is_mobile=True, has_touch=True,
                  device_scale_factor=2.625, locale="zh-CN") as page:  # a Pixel 7's screen
        set_text(page, TEXT, srv)
        if page.evaluate("() => document.documentElement.lang") != "zh-CN":
            page.select_option("[data-testid=lang]", "zh")
            page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
        zh = walk(page, "zh", f"lesson-hybrid-phone-{kind}", phone=True)
    assert [s["id"] for s in zh] == EXPECTED[kind]
    assert all(CJK.search(s["body"]) for s in zh)


def test_every_claim_holds_on_twenty_texts(server):
    kind, srv = server
    r = vitest("tests/lessons/lessons.test.ts", env={"TE_SERVER": srv.url, "TE_LESSONS": "hybrid"})
    assert r.returncode == 0, r.stdout[-12000:] + r.stderr[-4000:]
    assert passed(r) == 1, r.stdout[-4000:]


def test_which_models_get_this_chapter() -> None:
    r = vitest("tests/lessonChoice.test.ts", timeout=300)
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-4000:]
    assert passed(r) == 3, r.stdout[-4000:]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_offline_snapshot_walks_every_step(browser, tmp_path_factory, lang):
    """The lesson in an offline snapshot of the Qwen3.5-shaped hybrid: every step either shows its text or says that
    the file cannot show it, with a skip button (the snapshot carries what its views show, not every tensor a step
    reads); no error in the page, no request outside the file."""
    pytest.importorskip("transformers")
    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer import load_model
    from transformer_explainer.notebook import save_snapshot

    from .test_snapshot import offline

    folder = write_checkpoint("qwen3_5_text", tmp_path_factory.mktemp("snap-hybrid"), tokenizer=True)
    model = load_model(str(folder), allow_download=False)
    path = save_snapshot(model, TEXT, tmp_path_factory.mktemp("snap") / "hybrid.html", languages=("en", "zh"))
    seen = []
    with offline(browser, path, lang=lang) as page:
        page.click("[data-testid=tour-open]")
        page.wait_for_selector("[data-testid=tour]")
        assert page.get_attribute("[data-testid=tour]", "data-lesson") == "hybrid"
        while True:
            sid = page.get_attribute("[data-testid=tour]", "data-step")
            page.wait_for_function("() => document.querySelector('[data-testid=lesson-blocked]') || (() => {"
                                   " const b = document.querySelector('[data-testid=lesson-body]');"
                                   " return b && b.getAttribute('aria-busy') === 'false' && b.textContent.trim() })()",
                                   timeout=30_000)
            blocked = page.locator("[data-testid=lesson-blocked]").count() > 0
            seen.append((sid, blocked))
            page.screenshot(path=str(ARTIFACTS / f"lesson-hybrid-snapshot-{lang}-{len(seen) - 1:02d}-{sid}.png"))
            if blocked:
                skip = page.locator("[data-testid=lesson-skip]")
                if page.locator("[data-testid=tour-next]").count() == 0:
                    break
                skip.click()
                page.wait_for_function(f"() => document.querySelector('[data-testid=tour]')?.dataset.step !== '{sid}'")
                continue
            if page.locator("[data-testid=tour-next]").count() == 0:
                break
            page.click("[data-testid=tour-next]")
            page.wait_for_function(f"() => document.querySelector('[data-testid=tour]')?.dataset.step !== '{sid}'")
    assert [s for s, _ in seen] == EXPECTED["qwen3_5_text"], seen
    # the steps that read only the model's description show their text offline
    shown = {s for s, b in seen if not b}
    assert {"intro", "memory", "compress", "sink-why", "per-layer", "summary"} <= shown, seen
