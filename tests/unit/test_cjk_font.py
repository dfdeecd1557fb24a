"""The bundled CJK font subset (web/public/fonts/, built by scripts/build_cjk_font.py): it holds a glyph
for every CJK character in the web sources, stays under its size budget, ships its licence, and the
browser is told the same unicode-range the script covers. When new Chinese UI strings land, the first
test fails until the script is re-run."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FONTS = ROOT / "web" / "public" / "fonts"
FONT = FONTS / "noto-sans-sc-subset.woff2"


def _script():
    spec = importlib.util.spec_from_file_location("build_cjk_font", ROOT / "scripts" / "build_cjk_font.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


build = _script()


def _cmap() -> set[int]:
    pytest.importorskip("brotli", reason="pip install brotli (reads WOFF2)")
    ttlib = pytest.importorskip("fontTools.ttLib", reason="pip install fonttools")
    font = ttlib.TTFont(str(FONT))
    return set(font.getBestCmap())


def test_the_font_covers_every_cjk_character_of_the_web_sources():
    chars = build.cjk_chars()
    assert len(chars) > 100, "the scan found the Chinese UI strings"
    assert {"图", "解", "注", "意", "力", "，"} <= chars
    missing = sorted(c for c in chars if ord(c) not in _cmap())
    assert not missing, (f"{len(missing)} CJK characters in web/src have no glyph in {FONT.name}: "
                         f"{''.join(missing[:80])}; run scripts/build_cjk_font.py")


def test_the_scan_finds_cjk_characters_and_only_those(tmp_path):
    (tmp_path / "a.ts").write_text('const s = { x: "注意力（Attention）。", y: "abc é ─ ␣" };\n', encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.svelte").write_text("<p>词元、视图</p>\n", encoding="utf-8")
    (tmp_path / "c.png").write_bytes(b"\x89PNG")
    assert build.cjk_chars(tmp_path, tasks=False) == set("注意力（）。词元、视图")
    assert set("五六七八九万") <= build.task_chars() <= build.cjk_chars(tmp_path)  # number_words_zh's numerals


def test_size_licence_and_record():
    assert FONT.stat().st_size <= 1_000_000
    assert "SIL OPEN FONT LICENSE Version 1.1" in (FONTS / "OFL.txt").read_text(encoding="utf-8")
    record = json.loads((FONTS / "noto-sans-sc-subset.json").read_text(encoding="utf-8"))
    assert record["bytes"] == FONT.stat().st_size
    assert "fonts-noto-cjk" in record["source"] and "Open Font License" in record["licence"]


def test_the_browser_gets_the_ranges_the_script_covers():
    ts = (ROOT / "web" / "src" / "lib" / "cjkFont.ts").read_text(encoding="utf-8")
    m = re.search(r'CJK_UNICODE_RANGE =\s*"([^"]+)"', ts)
    assert m and m.group(1) == build.unicode_range()
    assert "TE Noto Sans SC" in (ROOT / "web" / "src" / "app.css").read_text(encoding="utf-8")


# -- the page's inline glyphs ------------------------------------------------------------------------

PAGE = ROOT / "web" / "src" / "fonts"


def test_every_page_carries_the_cjk_characters_it_shows_in_any_language():
    """The menu's language names, the Chinese example and any CJK character of the English strings are in the
    page's own face, and the face claims exactly those code points, so other CJK text goes on to the next font."""
    chars = build.page_chars()
    assert {"中", "文", "人", "工", "五"} <= chars  # 中文 in the menu, 人工智能… the example, 五 of number_words_zh
    pytest.importorskip("brotli", reason="pip install brotli (reads WOFF2)")
    ttlib = pytest.importorskip("fontTools.ttLib", reason="pip install fonttools")
    cmap = set(ttlib.TTFont(str(PAGE / build.PAGE_FONT)).getBestCmap())
    assert {ord(c) for c in chars} <= cmap, f"run scripts/build_cjk_font.py --page-only: {''.join(sorted(chars))}"
    css = (PAGE / build.PAGE_CSS).read_text(encoding="utf-8")
    assert css == build.page_css(chars), "run scripts/build_cjk_font.py --page-only"
    assert (PAGE / build.PAGE_FONT).stat().st_size <= build.PAGE_MAX_BYTES
    assert '@import "./fonts/cjk-page.css";' in (ROOT / "web" / "src" / "app.css").read_text(encoding="utf-8")


def test_page_chars_reads_the_menu_names_the_examples_and_the_english_strings(tmp_path):
    (tmp_path / "locales").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "locales" / "en.json").write_text('{"meta.name": "English", "a": "1234 → 一千"}', encoding="utf-8")
    (tmp_path / "locales" / "zh.json").write_text('{"meta.name": "中文", "b": "不在页面上"}', encoding="utf-8")
    (tmp_path / "locales" / "ja.json").write_text('{"meta.name": "日本語", "c": "ページ"}', encoding="utf-8")
    (tmp_path / "lib" / "examples.json").write_text('["Hello", "世界"]', encoding="utf-8")
    assert build.page_chars(tmp_path, tasks=False) == set("一千中文日本語世界")
    assert build.page_chars(tmp_path) == set("一千中文日本語世界") | build.task_chars()
    assert build.ranges_of(set("一丁七")) == "U+4E00-4E01, U+4E03"
