"""中文 is readable without a system CJK font: the bundled Noto Sans SC subset is fetched when the
language switches to 中文 (not before), and a UI character drawn with the page's font is a real glyph,
not the missing-glyph box that an unassigned code point gets."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from .conftest import ARTIFACTS

pytestmark = pytest.mark.browser

FONT_FILE = "fonts/noto-sans-sc-subset.woff2"

# Draw `text` with the h1's computed font family (and `weight`) into a canvas; return its pixels' alpha channel.
DRAW = """([text, weight]) => {
  const font = getComputedStyle(document.querySelector('h1')).fontFamily;
  const c = document.createElement('canvas');
  c.width = 160; c.height = 60;
  const ctx = c.getContext('2d');
  ctx.font = `${weight} 40px ${font}`;
  ctx.fillStyle = '#000';
  ctx.fillText(text, 4, 46);
  const d = ctx.getImageData(0, 0, c.width, c.height).data;
  const a = [];
  for (let i = 3; i < d.length; i += 4) a.push(d[i]);
  return a;
}"""


def system_has_cjk_font() -> bool:
    if not shutil.which("fc-list"):
        return False
    return bool(subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True).stdout.strip())


def test_chinese_glyphs_render_with_the_bundled_font(page):
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url) if r.url.endswith(FONT_FILE) else None)
    # the box: two unassigned code points (U+0378, U+0379) drawn side by side like a two-character word
    box = page.evaluate(DRAW, ["\u0378\u0379", "normal"])
    english = page.evaluate(DRAW, ["图解", "normal"])
    assert not fetched, "an English page fetched the CJK font"
    if not system_has_cjk_font():
        # what issue 13 saw: without the bundled font, CJK characters are drawn as boxes
        assert english == box

    page.select_option("[data-testid=lang]", "zh")
    page.wait_for_function("() => document.querySelector('h1').textContent === 'Transformer 图解'")
    page.wait_for_function("() => document.documentElement.dataset.cjkFont === 'loaded'", timeout=15_000)
    assert page.evaluate("document.fonts.check('16px \"TE Noto Sans SC\"', '图解')")
    chinese = page.evaluate(DRAW, ["图解", "normal"])
    assert sum(chinese) > 0 and chinese != box
    assert page.evaluate(DRAW, ["注意", "normal"]) != chinese  # different characters, different glyphs
    bold = page.evaluate(DRAW, ["图解", "bold"])  # the h1 and titles are bold: synthesized from the one face
    assert bold != page.evaluate(DRAW, ["\u0378\u0379", "bold"]) and bold != chinese
    # the page itself: the h1 as laid out differs from a copy whose two CJK characters are unassigned code points
    page.evaluate("""() => { const h = document.querySelector('h1'); const c = h.cloneNode(true);
      c.id = 'boxed'; c.textContent = 'Transformer \\u0378\\u0379'; h.after(c); }""")
    shown, boxed = page.locator("h1").first.screenshot(), page.locator("#boxed").screenshot()
    page.evaluate("document.querySelector('#boxed').remove()")
    assert shown != boxed
    assert [u for u in fetched if u.endswith(FONT_FILE)], "the font was not fetched after switching to 中文"
    page.click("[data-testid=nav-attention]")
    page.wait_for_selector("section.view")
    page.wait_for_timeout(300)
    page.screenshot(path=str(ARTIFACTS / "cjk-attention-zh.png"), full_page=False)
