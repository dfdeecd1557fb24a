"""Toy tasks: correct answers, determinism, held-out splits, vocabularies, the TSV reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from transformer_explainer.errors import InputError
from transformer_explainer.seq2seq.tasks import (
    BUILTIN_TASKS,
    TsvTask,
    chinese_number,
    english_number,
    make_task,
    parse_date,
)
from transformer_explainer.seq2seq.vocab import Vocab


@pytest.mark.parametrize("n, en, zh", [
    (0, "zero", "零"),
    (7, "seven", "七"),
    (10, "ten", "十"),
    (15, "fifteen", "十五"),
    (40, "forty", "四十"),
    (101, "one hundred one", "一百零一"),
    (110, "one hundred ten", "一百一十"),
    (1004, "one thousand four", "一千零四"),
    (1040, "one thousand forty", "一千零四十"),
    (1234, "one thousand two hundred thirty-four", "一千二百三十四"),
    (10000, "ten thousand", "一万"),
    (100010, "one hundred thousand ten", "十万零一十"),
    (999999, "nine hundred ninety-nine thousand nine hundred ninety-nine", "九十九万九千九百九十九"),
])
def test_number_words(n, en, zh):
    assert english_number(n) == en
    assert chinese_number(n) == zh


def test_chinese_numbers_beyond_a_wan():
    assert chinese_number(20050607) == "二千零五万零六百零七"
    assert chinese_number(10000001) == "一千万零一"
    assert chinese_number(99999999) == "九千九百九十九万九千九百九十九"


def test_dates_parse_every_format():
    t = make_task("dates")
    for src in ("March 5, 2021", "5 March 2021", "Mar 5, 2021", "5 Mar 2021", "March 5th, 2021", "05.03.2021"):
        assert t.reference(src) == "2021-03-05", src
    assert parse_date("February 30, 2021") is None
    assert t.reference("not a date") is None


@pytest.mark.parametrize("name", BUILTIN_TASKS)
def test_tasks_are_deterministic_and_consistent(name):
    t = make_task(name)
    a = [t.sample(np.random.default_rng([3, i])) for i in range(50)]
    b = [t.sample(np.random.default_rng([3, i])) for i in range(50)]
    assert a == b
    for src, tgt in a + t.samples(50, seed=1):
        assert t.reference(src) == tgt
        assert 1 <= len(t.src_vocab.encode(src)) <= t.max_src_len
        assert 1 <= len(t.tgt_vocab.encode(tgt)) <= t.max_tgt_len
        assert t.tgt_vocab.decode(t.tgt_vocab.encode(tgt)) == tgt


@pytest.mark.parametrize("name", BUILTIN_TASKS)
def test_held_out_inputs_never_appear_in_training(name):
    t = make_task(name)
    key = (lambda pair: pair[1]) if name == "dates" else (lambda pair: pair[0])  # a date is held out in every format
    rng = np.random.default_rng(0)
    train = {key(t.sample(rng, "train")) for _ in range(3000)}
    test = {key(p) for p in t.samples(300, seed=0)}
    assert test
    assert all(t.split_of(k) == "test" for k in test)
    assert not train & test


def test_small_numbers_are_always_trained_on_and_never_measured():
    t = make_task("number_words")
    assert t.split_of("42") is None
    rng = np.random.default_rng(1)
    train = {s for s, _ in (t.sample(rng, "train") for _ in range(3000))}
    test = {s for s, _ in t.samples(500, seed=2)}
    assert any(int(s) < 1000 for s in train)
    assert all(int(s) >= 1000 and t.split_of(s) == "test" for s in test)
    assert not train & test


def test_chinese_characters_round_trip():
    t = make_task("number_words_zh")
    ids = t.tgt_vocab.encode("一千二百三十四")
    assert t.tgt_vocab.token_texts(ids) == list("一千二百三十四")
    assert t.tgt_vocab.decode(ids) == "一千二百三十四"


def test_vocab_rejects_unknown_pieces_and_specials():
    v = Vocab.build("abc")
    assert v.encode("cab") == [5, 3, 4]
    with pytest.raises(InputError, match="'x'"):
        v.encode("abx")
    w = Vocab.build(["one", "two"], level="word")
    assert w.decode(w.encode("two one")) == "two one"
    with pytest.raises(InputError, match="words"):
        w.encode("one <s>")
    assert Vocab.from_dict(w.to_dict()) == w


def test_tsv_task(tmp_path: Path):
    f = tmp_path / "pairs.tsv"
    lines = ["# greetings", "", *[f"{w}\t{w.upper()}" for w in
                                  ("hello", "world", "cat", "dog", "bird", "fish", "tree", "leaf", "sun", "moon",
                                   "star", "sky", "rain", "snow", "wind", "fire", "stone", "sand", "sea", "lake",
                                   "hill", "road")]]
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    t = make_task("tsv", path=str(f))
    assert len(t.pairs) == 22 and t.reference("hello") == "HELLO"
    assert t.held_out and not set(t.by_split["train"]) & set(t.by_split["test"])
    src, tgt = t.sample(np.random.default_rng(0), "test")
    assert tgt == src.upper()
    w = tmp_path / "w.tsv"
    w.write_text("the cat\tle chat\nthe dog\tle chien\n", encoding="utf-8")
    tw = TsvTask(w, level="word")
    assert tw.src_vocab.tokens[3:] == ("cat", "dog", "the") and not tw.held_out


@pytest.mark.parametrize("content, message", [
    ("no tab here\n", "expected 'source<TAB>target'"),
    ("a\tb\tc\n", "expected"),
    ("\n# only a comment\n", "no source<TAB>target pairs"),
])
def test_tsv_errors(tmp_path: Path, content, message):
    f = tmp_path / "bad.tsv"
    f.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=message):
        make_task("tsv", path=str(f))
    with pytest.raises(InputError, match="cannot read"):
        make_task("tsv", path=str(tmp_path / "missing.tsv"))
    with pytest.raises(InputError, match="unknown task"):
        make_task("nope")


@pytest.mark.parametrize("name", BUILTIN_TASKS)
def test_options_rebuild_the_task(name):
    t = make_task(name)
    again = make_task(name, **t.options())
    assert (again.src_vocab, again.tgt_vocab, again.name) == (t.src_vocab, t.tgt_vocab, name)
