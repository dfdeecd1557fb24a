"""Build the CJK font subsets of the web app: the one it loads when its language is 中文, and the tiny one
every page carries inline for the few CJK characters it shows in any language.

Many systems (Debian's Chromium without fonts-noto-cjk, most minimal Linux installs) have no CJK font,
so the Chinese UI would be drawn as missing-glyph boxes. This script collects every CJK character
(ideographs, CJK punctuation, fullwidth forms) used anywhere under web/src and writes a WOFF2 subset
of Noto Sans CJK SC (SIL Open Font License 1.1) holding exactly those glyphs, with the licence and
the source beside it:

    web/public/fonts/noto-sans-sc-subset.woff2    (Vite copies web/public/ into the bundle)
    web/public/fonts/noto-sans-sc-subset.json     (source package, version, licence, character count)
    web/public/fonts/OFL.txt                      (the licence text, from the Debian package)

Every page, English too, shows a few CJK characters: the language menu's 中文 (each catalogue's
meta.name), the Chinese example text (web/src/lib/examples.json), any in the English strings, and the
numerals of the encoder-decoder task number_words_zh (its vocabulary, read from the package). A
font fetched after the page is laid out leaves Chromium's missing-glyph boxes in place, so those
glyphs come with the page's stylesheet instead, as a data: URL (Vite inlines the file):

    web/src/fonts/cjk-page.woff2    (the subset of the subset above holding just those characters)
    web/src/fonts/cjk-page.css      (its @font-face, "TE CJK Page", with exactly their unicode-range)

`--page-only` rebuilds these two from the existing subset (no source font needed).

Source: Debian's `fonts-noto-cjk` package (NotoSansCJK-Regular.ttc, face "Noto Sans CJK SC"). Used
from /usr/share/fonts when installed, otherwise downloaded with `apt-get download` (no root needed)
and unpacked into a cache folder; or pass --source-deb / --source-ttc. Needs fontTools and brotli
(`pip install -e '.[fonts]'`).

Run it again whenever UI strings gain Chinese characters (tests/unit/test_cjk_font.py fails until you
do). The output depends only on the character set and the source font, so re-running is idempotent.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WEB_SRC = ROOT / "web" / "src"
OUT_DIR = ROOT / "web" / "public" / "fonts"
FONT_NAME = "noto-sans-sc-subset.woff2"
PACKAGE = "fonts-noto-cjk"
TTC_NAME = "NotoSansCJK-Regular.ttc"
FACE = "Noto Sans CJK SC"
SYSTEM_TTC = Path("/usr/share/fonts/opentype/noto") / TTC_NAME
COPYRIGHT = Path("usr/share/doc/fonts-noto-cjk/copyright")
CACHE = Path.home() / ".cache" / "transformer-explainer" / PACKAGE
MAX_BYTES = 1_000_000
PAGE_DIR = WEB_SRC / "fonts"
PAGE_FONT = "cjk-page.woff2"
PAGE_CSS = "cjk-page.css"
PAGE_FAMILY = "TE CJK Page"
PAGE_MAX_BYTES = 12_000  # it is in every page's stylesheet (as base64, a third more)

# The ranges the font covers; web/src/lib/cjkFont.ts gives the browser the same ranges (unicode-range).
CJK_RANGES: list[tuple[int, int]] = [
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3000, 0x303F),  # CJK symbols and punctuation: 、。「」《》
    (0x3040, 0x30FF),  # kana (occasional in Chinese text, e.g. ・)
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFE30, 0xFE4F),  # CJK compatibility forms
    (0xFF00, 0xFFEF),  # halfwidth and fullwidth forms: ，：（）！？
]
SOURCE_SUFFIXES = {".ts", ".svelte", ".js", ".html", ".css", ".json"}


def is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def cjk_chars(src: Path = WEB_SRC, *, tasks: bool = True) -> set[str]:
    """Every CJK character in the web sources (all of web/src: the app's, the pages' and lessons' strings),
    and in the outputs of the built-in encoder-decoder tasks (which the page shows in any language)."""
    chars: set[str] = task_chars() if tasks else set()
    for p in sorted(src.rglob("*")):
        if p.is_file() and p.suffix in SOURCE_SUFFIXES:
            chars.update(ch for ch in p.read_text(encoding="utf-8") if is_cjk(ch))
    return chars


def task_chars() -> set[str]:
    """The CJK characters the built-in encoder-decoder tasks read and write (number_words_zh's numerals): the
    page shows a task's output, in whatever language the page is, and its vocabulary is the server's."""
    from transformer_explainer.seq2seq.tasks import BUILTIN_TASKS, make_task

    chars: set[str] = set()
    for name in BUILTIN_TASKS:
        task = make_task(name)
        for vocab in (task.src_vocab, task.tgt_vocab):
            chars.update(ch for token in vocab.tokens for ch in token if is_cjk(ch))
    return chars


def page_chars(src: Path = WEB_SRC, *, tasks: bool = True) -> set[str]:
    """The CJK characters every page shows: the language names of the menu (each catalogue's meta.name), the
    example texts, any in the English strings (the reference catalogue every language falls back to), and the
    built-in encoder-decoder tasks' (the Chinese numerals of number_words_zh)."""
    chars: set[str] = task_chars() if tasks else set()
    for cat in sorted((src / "locales").glob("*.json")):
        strings = json.loads(cat.read_text(encoding="utf-8"))
        shown = strings.values() if cat.stem == "en" else [strings.get("meta.name", "")]
        chars.update(ch for text in shown for ch in text if is_cjk(ch))
    examples = json.loads((src / "lib" / "examples.json").read_text(encoding="utf-8"))
    chars.update(ch for text in examples for ch in text if is_cjk(ch))
    return chars


def ranges_of(chars: set[str]) -> str:
    """A CSS unicode-range holding exactly `chars`."""
    cps = sorted(ord(c) for c in chars)
    runs: list[list[int]] = []
    for cp in cps:
        if runs and cp == runs[-1][1] + 1:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp])
    return ", ".join(f"U+{lo:X}" if lo == hi else f"U+{lo:X}-{hi:X}" for lo, hi in runs)


def page_css(chars: set[str], font_file: str = PAGE_FONT) -> str:
    return ("/* Generated by scripts/build_cjk_font.py: the few CJK glyphs every page shows (the language menu's\n"
            "   names, the Chinese example), inlined by Vite as a data: URL so that they are there before the page\n"
            "   is laid out. Do not edit. */\n"
            f'@font-face {{\n  font-family: "{PAGE_FAMILY}";\n  src: url("./{font_file}") format("woff2");\n'
            f"  unicode-range: {ranges_of(chars)};\n  font-display: block;\n}}\n")


def build_page_font(full_subset: Path, chars: set[str], out_dir: Path = PAGE_DIR) -> int:
    """Write the page's subset of `full_subset` (the UI subset, which holds every one of `chars`) and its CSS;
    return the font's size in bytes."""
    from fontTools import subset as ftsubset
    from fontTools.ttLib import TTFont

    font = TTFont(str(full_subset))
    missing = sorted(c for c in chars if ord(c) not in font.getBestCmap())
    if missing:
        raise SystemExit(f"{full_subset} lacks {''.join(missing)}: build the full subset first")
    options = _options()
    options.layout_features = []  # a dozen ideographs in a line need no shaping features
    sub = ftsubset.Subsetter(options)
    sub.populate(unicodes=sorted(ord(c) for c in chars))
    sub.subset(font)
    font.flavor = "woff2"
    font.recalcTimestamp = False
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / PAGE_FONT
    font.save(str(out), reorderTables=False)
    (out_dir / PAGE_CSS).write_text(page_css(chars), encoding="utf-8")
    size = out.stat().st_size
    if size > PAGE_MAX_BYTES:
        raise SystemExit(f"{out} is {size} bytes, over the {PAGE_MAX_BYTES} byte budget")
    return size


def unicode_range() -> str:
    return ", ".join(f"U+{lo:X}-{hi:X}" for lo, hi in CJK_RANGES)


def _fetch_deb() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    debs = sorted(CACHE.glob(f"{PACKAGE}_*.deb"))
    if not debs:
        print(f"downloading {PACKAGE} with apt-get download ...", file=sys.stderr)
        subprocess.run(["apt-get", "download", PACKAGE], cwd=CACHE, check=True)
        debs = sorted(CACHE.glob(f"{PACKAGE}_*.deb"))
    if not debs:
        raise SystemExit(f"apt-get download {PACKAGE} left no .deb in {CACHE}")
    return debs[-1]


def _unpack(deb: Path) -> tuple[Path, Path, str]:
    """(the .ttc, the copyright file, the package version) from a fonts-noto-cjk .deb."""
    version = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], check=True, capture_output=True,
                             text=True).stdout.strip()
    CACHE.mkdir(parents=True, exist_ok=True)
    dest = CACHE / f"unpacked-{re.sub(r'[^0-9A-Za-z.+-]', '_', version)}"
    if not (dest / "usr").is_dir():
        subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)
    return dest / "usr/share/fonts/opentype/noto" / TTC_NAME, dest / COPYRIGHT, version


def _installed_version() -> str:
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", PACKAGE], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "unknown"


def locate_source(args: argparse.Namespace) -> tuple[Path, Path, str]:
    if args.source_ttc:
        return Path(args.source_ttc), Path(args.copyright or "/" / COPYRIGHT), args.version or "unknown"
    if args.source_deb:
        return _unpack(Path(args.source_deb))
    if SYSTEM_TTC.is_file() and ("/" / COPYRIGHT).is_file():
        return SYSTEM_TTC, "/" / COPYRIGHT, _installed_version()
    return _unpack(_fetch_deb())


def ofl_text(copyright_file: Path, notice: str) -> str:
    """The SIL OFL 1.1 paragraph of a Debian copyright file, after the font's own copyright notice."""
    text = copyright_file.read_text(encoding="utf-8")
    m = re.search(r"^License: SIL-1\.1\n((?: .*\n?)+)", text, re.M)
    if not m:
        raise SystemExit(f"no SIL-1.1 licence text in {copyright_file}")
    body = "\n".join("" if ln.strip() == "." else ln[1:] for ln in m.group(1).splitlines())
    return (f"{FACE}: {notice}\nThe subset web/public/fonts/noto-sans-sc-subset.woff2 is a Modified Version made by "
            "scripts/build_cjk_font.py.\n\n" + body.strip() + "\n")


def _options():
    from fontTools import subset as ftsubset

    options = ftsubset.Options()
    options.flavor = "woff2"
    options.layout_features = ["*"]  # keep vertical/fullwidth punctuation forms and kerning
    options.name_IDs = ["*"]
    options.name_legacy = True
    options.notdef_outline = True
    options.hinting = False  # CFF hints add size and the browser does not need them at UI sizes
    options.desubroutinize = True  # compresses better under brotli
    return options


def subset(ttc: Path, chars: set[str], out: Path) -> str:
    """Write the subset of `ttc`'s FACE holding `chars` to `out`; return the font's copyright notice."""
    from fontTools import subset as ftsubset
    from fontTools.ttLib import TTCollection

    coll = TTCollection(str(ttc), lazy=True)
    index = next((i for i, f in enumerate(coll.fonts) if f["name"].getDebugName(1) == FACE), None)
    if index is None:
        raise SystemExit(f"{ttc} has no face named {FACE!r}")
    font = coll.fonts[index]
    notice = font["name"].getDebugName(0) or ""
    options = _options()
    sub = ftsubset.Subsetter(options)
    sub.populate(unicodes=sorted(ord(c) for c in chars))
    sub.subset(font)
    font.flavor = "woff2"
    font.recalcTimestamp = False  # keep the source's date: the same input gives the same bytes
    out.parent.mkdir(parents=True, exist_ok=True)
    font.save(str(out), reorderTables=False)
    return notice


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source-deb", help=f"a downloaded {PACKAGE} .deb")
    p.add_argument("--source-ttc", help=f"{TTC_NAME} itself (then give --copyright and --version)")
    p.add_argument("--copyright", help="the package's copyright file (holds the OFL text)")
    p.add_argument("--version", help="the source package's version, for the record")
    p.add_argument("--out-dir", default=str(OUT_DIR))
    p.add_argument("--page-only", action="store_true",
                   help=f"only rebuild {PAGE_FONT} and {PAGE_CSS} from the existing subset")
    args = p.parse_args(argv)
    if args.page_only:
        chars = page_chars()
        size = build_page_font(Path(args.out_dir) / FONT_NAME, chars)
        print(f"wrote {PAGE_DIR / PAGE_FONT}: {len(chars)} characters, {size} bytes")
        return 0

    chars = cjk_chars()
    ttc, copyright_file, version = locate_source(args)
    out_dir = Path(args.out_dir)
    out = out_dir / FONT_NAME
    notice = subset(ttc, chars, out)
    size = out.stat().st_size
    if size > MAX_BYTES:
        raise SystemExit(f"{out} is {size} bytes, over the {MAX_BYTES} byte budget")
    (out_dir / "OFL.txt").write_text(ofl_text(copyright_file, notice), encoding="utf-8")
    record = {
        "file": FONT_NAME,
        "family": FACE,
        "source": f"Debian package {PACKAGE} {version}, {TTC_NAME}, face {FACE!r}",
        "upstream": "https://github.com/googlefonts/noto-cjk",
        "licence": "SIL Open Font License 1.1 (OFL.txt)",
        "characters": len(chars),
        "bytes": size,
        "unicode_range": unicode_range(),
    }
    (out_dir / "noto-sans-sc-subset.json").write_text(json.dumps(record, ensure_ascii=False, indent=2) + "\n",
                                                      encoding="utf-8")
    print(f"wrote {out}: {len(chars)} characters, {size} bytes (from {PACKAGE} {version})")
    page = page_chars()
    page_size = build_page_font(out, page)
    print(f"wrote {PAGE_DIR / PAGE_FONT}: {len(page)} characters, {page_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
