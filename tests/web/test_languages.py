"""The page's languages: the menu lists every catalogue of web/src/locales/ by its own name, ?lang= and the
browser's languages pick one; a server error is worded in the learner's language from its code and params; and
the English page draws the few Chinese characters it shows (the menu's 中文, the Chinese example) with real
glyphs on a system without a CJK font, from the glyphs inlined in its stylesheet, without fetching the CJK
subset. The vitest units of the catalogue list and of the error wording run here too."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from .conftest import ARTIFACTS, open_app
from .test_cjk_font import DRAW, system_has_cjk_font
from .test_lesson_claims import passed, vitest

LOCALES = Path(__file__).resolve().parents[2] / "web" / "src" / "locales"
EXAMPLES = json.loads((LOCALES.parent / "lib" / "examples.json").read_text(encoding="utf-8"))
FULL_FONT = "fonts/noto-sans-sc-subset.woff2"


def catalogues() -> dict[str, dict[str, str]]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(LOCALES.glob("*.json"))}


def test_vitest_catalogue_list_and_error_wording() -> None:
    r = vitest("tests/languages.test.ts", timeout=300)
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-4000:]
    assert passed(r) >= 9, r.stdout[-4000:]


@pytest.mark.browser
def test_the_menu_lists_every_catalogue_by_its_own_name(page):
    cats = catalogues()
    menu = page.locator("[data-testid=lang]")
    options = menu.locator("option")
    assert [options.nth(i).get_attribute("value") for i in range(options.count())] == ["en", *sorted(
        set(cats) - {"en"})]
    assert [options.nth(i).inner_text() for i in range(options.count())] == [
        cats[o.get_attribute("value")]["meta.name"] for o in options.all()]
    assert menu.input_value() == "en"
    menu.select_option("zh")
    page.wait_for_function("() => document.querySelector('h1').textContent === 'Transformer 图解'")
    assert page.evaluate("document.documentElement.lang") == cats["zh"]["meta.htmlLang"]
    assert menu.get_attribute("aria-label") == cats["zh"]["ui.language"]
    menu.select_option("en")
    page.wait_for_function("() => document.querySelector('h1').textContent === 'Transformer Explainer'")


@pytest.mark.browser
@pytest.mark.parametrize("query, locale, lang", [
    ("?lang=zh", "en-US", "zh"),
    ("?lang=zh-TW", "en-US", "zh"),
    ("", "zh-CN", "zh"),
    ("?lang=en", "zh-CN", "en"),
    ("", "fr-FR", "en"),  # no French catalogue: English
])
def test_lang_and_the_browsers_language_pick_the_catalogue(browser, live_server, query, locale, lang):
    with open_app(browser, live_server.url, query=query, locale=locale) as pg:
        assert pg.locator("[data-testid=lang]").input_value() == lang
        assert pg.evaluate("document.documentElement.lang") == catalogues()[lang]["meta.htmlLang"]


@pytest.mark.browser
def test_an_over_long_text_is_refused_in_chinese_with_the_tokens_that_fit(browser, live_server, tiny_model):
    ctx = tiny_model.context_length
    text = " ".join(f"w{i}" for i in range(150))
    n = len(tiny_model.tokenizer.encode(text))
    zh = catalogues()["zh"]
    with open_app(browser, live_server.url, query="?lang=zh") as pg:
        pg.fill("[data-testid=text]", text)
        pg.wait_for_selector("[data-testid=error]", timeout=30_000)
        shown = pg.locator("[data-testid=error]").inner_text()
        sentence = zh["error.text_too_long"].replace("{tokens}", str(n)).replace("{limit}", str(ctx))
        assert sentence in shown and shown.startswith(zh["ui.error"])
        assert "tokens" not in shown  # not the server's English
        keep = pg.locator("[data-testid=keep-last]")
        assert keep.inner_text().strip() == zh["ui.keepLastN"].replace("{n}", str(ctx))
        pg.screenshot(path=str(ARTIFACTS / "error-zh.png"), full_page=False)
        # the same error, worded again when the language changes
        pg.select_option("[data-testid=lang]", "en")
        pg.wait_for_function("() => document.documentElement.lang === 'en'")
        shown = pg.locator("[data-testid=error]").inner_text()
        assert f"The text is {n} tokens long, more than the {ctx} that fit" in shown
        keep.click()
        pg.wait_for_function(f"() => document.querySelectorAll('[data-testid=token-chip]').length === {ctx}")


# the element with its CJK characters all 鑫, which no face of the page holds: the boxes it would show without the
# page's face
BOXED = """s => { const el = document.querySelector(s); el.textContent = el.textContent.replace(/[\\u4e00-\\u9fff]/g,
  '\\u946b'); }"""


PIXELS = """async ([a, b]) => {
  const load = (src) => new Promise((ok) => { const i = new Image(); i.onload = () => ok(i); i.src = src; });
  const [ia, ib] = await Promise.all([load(a), load(b)]);
  if (ia.width !== ib.width || ia.height !== ib.height) return -1;
  const data = (img) => { const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;
    const x = c.getContext('2d'); x.drawImage(img, 0, 0); return x.getImageData(0, 0, c.width, c.height).data; };
  const da = data(ia), db = data(ib);
  let n = 0;
  for (let i = 0; i < da.length; i += 4)
    if (Math.abs(da[i] - db[i]) + Math.abs(da[i + 1] - db[i + 1]) + Math.abs(da[i + 2] - db[i + 2]) > 48) n++;
  return n;
}"""


def differing_pixels(pg, a: bytes, b: bytes) -> int:
    """How many pixels of two screenshots of the same size differ visibly (-1: their sizes differ)."""
    url = "data:image/png;base64,"
    return pg.evaluate(PIXELS, [url + base64.b64encode(a).decode(), url + base64.b64encode(b).decode()])


@pytest.mark.browser
@pytest.mark.parametrize("width, height", [(1280, 900), (390, 844)])
def test_the_english_page_draws_its_chinese_characters(browser, live_server, width, height):
    fetched: list[str] = []
    with open_app(browser, live_server.url, viewport={"width": width, "height": height}) as pg:
        pg.on("request", lambda r: fetched.append(r.url))
        chinese_example = next(i for i, ex in enumerate(EXAMPLES) if any("\u4e00" <= ch <= "\u9fff" for ch in ex))
        button = f"[data-testid=example-{chinese_example}]"
        assert pg.locator(button).inner_text() == EXAMPLES[chinese_example]
        # the page's own face holds them, and it is loaded without a request (it is in the stylesheet)
        assert pg.evaluate("document.fonts.check('16px \"TE CJK Page\"', '中文人工智能')")
        assert pg.evaluate("[...document.fonts].some(f => f.family.includes('TE CJK Page') && f.status === 'loaded')")
        # the example as the page laid it out differs from the boxes it would show without the page's face (without
        # the wait for the face before the page is drawn, main.ts, the two are the same: Chromium keeps the shapes
        # of text laid out before its face loaded, boxes, even once it has)
        text = pg.locator(button).inner_text()
        assert "鑫" not in text
        shown = pg.locator(button).screenshot()
        pg.evaluate(BOXED, button)
        boxed = pg.locator(button).screenshot()
        pg.evaluate("([s, t]) => { document.querySelector(s).textContent = t; }", [button, text])
        if not system_has_cjk_font():
            assert differing_pixels(pg, shown, boxed) != 0, "the example is drawn as boxes"
        # the menu's 中文, in the menu's font, is glyphs, not boxes (a canvas draws with the page's loaded faces)
        font = pg.evaluate("getComputedStyle(document.querySelector('[data-testid=lang]')).fontFamily")
        assert "TE CJK Page" in font
        draw = DRAW.replace("document.querySelector('h1')", "document.querySelector('[data-testid=lang]')")
        box = pg.evaluate(draw, ["\u0378\u0379", "normal"])
        menu_zh = pg.evaluate(draw, [catalogues()["zh"]["meta.name"], "normal"])
        assert sum(menu_zh) > 0 and menu_zh != box
        if not system_has_cjk_font():  # without the page's face these would be boxes: other CJK characters are
            assert pg.evaluate(draw, ["图解", "normal"]) == box
        pg.screenshot(path=str(ARTIFACTS / f"english-cjk-glyphs-{width}.png"), full_page=False)
        pg.locator("header").first.screenshot(path=str(ARTIFACTS / f"english-cjk-header-{width}.png"))
        pg.locator(".examples").screenshot(path=str(ARTIFACTS / f"english-cjk-examples-{width}.png"))
    assert not [u for u in fetched if u.endswith(FULL_FONT)], "the English page fetched the CJK subset"


@pytest.mark.browser
def test_the_english_page_draws_the_chinese_numerals_a_task_writes(page, live_server):
    """number_words_zh writes Chinese numerals whatever the page's language: their glyphs come with the page."""
    from .test_seq2seq import open_page

    open_page(page, task="number_words_zh", text="56789")
    # the shipped model's answer, 五万六千七百八十九, has numerals beyond the description's 一千二百三十四零
    page.wait_for_function("() => /[五六七八九万]/.test("
                           "document.querySelector('[data-testid=s2s-output]').textContent)", timeout=30_000)
    out = page.locator("[data-testid=s2s-output]")
    words = out.inner_text()
    shown = out.screenshot()
    page.evaluate(BOXED, "[data-testid=s2s-output]")
    boxed = out.screenshot()
    page.evaluate("t => { document.querySelector('[data-testid=s2s-output]').textContent = t; }", words)
    if not system_has_cjk_font():
        assert differing_pixels(page, shown, boxed) != 0, f"{words} is drawn as boxes"
    page.screenshot(path=str(ARTIFACTS / "english-s2s-numerals.png"), full_page=False)
