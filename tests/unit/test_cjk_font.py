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
    assert build.cjk_chars(tmp_path) == set("注意力（）。词元、视图")


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
