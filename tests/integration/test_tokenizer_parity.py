"""The real GPT-2 BPE files through `tokenizers` give the same ids as transformers' GPT-2 tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import write_gpt2_tokenizer
from transformer_explainer.loading.tokenizer import TextTokenizer

TEXTS = [
    "Data visualization empowers users to",
    "Hello, world! It's 2026; don't panic.",
    "  multiple   spaces\t\ttabs\n\nnewlines  ",
    "数据可视化让用户看到模式。中文和English mixed",
    "emoji 🙂🚀👩‍👩‍👧 and accents: café naïve Ærøskøbing",
    "code: def f(x):\n    return x**2  # comment",
    "'''quotes''' \"double\" «guillemets» — dashes – …",
    "",
    " ",
    "1234567890 3.14159 1e-5 0x1F",
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import GPT2Tokenizer

    folder: Path = tmp_path_factory.mktemp("gpt2tok")
    write_gpt2_tokenizer(folder)
    return TextTokenizer.from_folder(folder), GPT2Tokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))


@pytest.mark.parametrize("text", TEXTS)
def test_same_ids_as_transformers(pair, text):
    ours, ref = pair
    assert ours.encode(text) == ref.encode(text)
    assert ours.decode(ours.encode(text)) == text


def test_known_ids(pair):
    ours, _ = pair
    assert ours.encode("Hello world") == [15496, 995]
    assert ours.eos_id() == 50256
    assert ours.vocab_size == 50257


def test_token_texts_show_spaces_and_bytes(pair):
    ours, _ = pair
    ids = ours.encode(" the 数")
    texts = ours.token_texts(ids)
    assert texts[0] == " the"
    assert "".join(texts).startswith(" the ")
    raw = b"".join(ours.token_bytes(i) for i in ids)
    assert raw.decode("utf-8") == " the 数"


def test_split_characters_one_notation_and_groups(pair):
    """A byte of a character split over tokens, and a control character, read <0xHH> (never a
    backslash escape); the runs that make whole characters come back with the text they make."""
    ours, _ = pair
    ids = ours.encode("I 🎉 it 中文 x\x18y 👍🏽!")
    texts = ours.token_texts(ids)
    assert "\\" not in "".join(texts) and "<0x18>" in texts and "中" in texts
    assert texts[1:4] == [" <0xF0><0x9F>", "<0x8E>", "<0x89>"]
    groups = ours.char_groups(ids)
    assert [g.text for g in groups] == [" 🎉", "文", " 👍", "🏽"]
    for g in groups:
        assert ours.decode(ids[g.start:g.end]) == g.text
    inside = {p for g in groups for p in range(g.start, g.end)}
    alone = [texts[p] for p in range(len(ids)) if p not in inside]
    assert [t for t in alone if "<0x" in t] == ["<0x18>"]  # outside the groups, only the control character
