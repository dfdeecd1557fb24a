"""The GPT-2-style byte-level BPE trainer: small vocabulary on a tiny text, fully offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from tokenizers.implementations import ByteLevelBPETokenizer

from transformer_explainer.training.bpe import EOT_TOKEN, bytes_per_token, train_bpe_tokenizer

VOCAB = 300
TEXT = (
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun.\n"
    "Then the fox runs into the forest, and the other animals watch the fox.\n"
    "There is nothing the dog can do; the fox is faster than the dog.\n"
) * 20 + "Café naïve — “quoted” text, 123 numbers, tabs\tand  spaces.\n"

ROUND_TRIP = [
    "Hello, world!",
    "  leading spaces and trailing   ",
    "tabs\tand\nnewlines\n\n\r\nand CRLF\r\n",
    "Unicode: naïve café, Ünïcödé, Ελληνικά, русский",
    "Emoji: 🙂🚀👩‍👩‍👧‍👦 and flags 🇫🇷",
    "Chinese: 你好，世界。这是一个测试。",
    "Mixed 日本語 text with the fox 🦊 and <|endoftext|>-like text",
    "\u200b zero width \ufeff and combining e\u0301",
    "",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tokenizer, Path]:
    root = tmp_path_factory.mktemp("bpe")
    corpus = root / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    out = root / "tok"
    tok = train_bpe_tokenizer([corpus], VOCAB, out)
    return tok, out


def test_vocab_size_and_eot_is_highest_id(trained: tuple[Tokenizer, Path]) -> None:
    tok, _ = trained
    vocab = tok.get_vocab(with_added_tokens=True)
    assert tok.get_vocab_size(with_added_tokens=True) == VOCAB
    assert vocab[EOT_TOKEN] == VOCAB - 1 == max(vocab.values())
    assert sorted(vocab.values()) == list(range(VOCAB))
    assert tok.token_to_id(EOT_TOKEN) == VOCAB - 1


def test_leading_space_tokens_exist(trained: tuple[Tokenizer, Path]) -> None:
    tok, _ = trained
    vocab = tok.get_vocab()
    assert "Ġthe" in vocab and "Ġfox" in vocab
    assert tok.encode(" the fox").tokens == ["Ġthe", "Ġfox"]
    # no prefix space: a text-initial word is not merged with a space
    assert tok.encode("the").tokens[0] != "Ġthe"


def test_all_256_bytes_in_base_vocab(trained: tuple[Tokenizer, Path]) -> None:
    tok, _ = trained
    from tokenizers import pre_tokenizers

    vocab = tok.get_vocab()
    assert all(ch in vocab for ch in pre_tokenizers.ByteLevel.alphabet())


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip(trained: tuple[Tokenizer, Path], text: str) -> None:
    tok, _ = trained
    ids = tok.encode(text, add_special_tokens=False).ids
    assert tok.decode(ids, skip_special_tokens=False) == text


def test_special_token_is_atomic(trained: tuple[Tokenizer, Path]) -> None:
    tok, _ = trained
    ids = tok.encode(f"the fox{EOT_TOKEN}The dog").ids
    assert ids.count(VOCAB - 1) == 1
    assert tok.decode(ids, skip_special_tokens=False) == f"the fox{EOT_TOKEN}The dog"


def test_offsets_not_trimmed(trained: tuple[Tokenizer, Path]) -> None:
    tok, _ = trained
    enc = tok.encode("the fox")
    assert enc.offsets[-1] == (3, 7)  # " fox", the space included (trim_offsets=False)


def test_hf_files_written_and_consistent(trained: tuple[Tokenizer, Path]) -> None:
    tok, out = trained
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"):
        assert (out / name).is_file(), name
    vocab = json.loads((out / "vocab.json").read_text(encoding="utf-8"))
    assert vocab == tok.get_vocab(with_added_tokens=True)
    assert vocab[EOT_TOKEN] == VOCAB - 1
    merges = (out / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert merges[0].startswith("#version")
    assert len(merges) - 1 == VOCAB - 1 - 256  # one merge per non-byte, non-special id

    from_json = Tokenizer.from_file(str(out / "tokenizer.json"))
    from_files = ByteLevelBPETokenizer.from_file(str(out / "vocab.json"), str(out / "merges.txt"))
    plain = [t for t in [*ROUND_TRIP, TEXT] if EOT_TOKEN not in t]
    for text in plain:
        ids = tok.encode(text).ids
        assert from_json.encode(text).ids == ids
        assert from_files.encode(text).ids == ids
        assert from_files.decode(ids) == text
    # vocab.json + merges.txt know <|endoftext|> only as an ordinary entry (as GPT-2's files do);
    # once it is registered as special (tokenizer_config.json says so), the ids agree there too.
    from_files.add_special_tokens([EOT_TOKEN])
    text = f"the fox{EOT_TOKEN}the dog"
    assert from_files.encode(text).ids == from_json.encode(text).ids == tok.encode(text).ids


def test_project_loader_reads_both_formats(trained: tuple[Tokenizer, Path], tmp_path: Path) -> None:
    from transformer_explainer.loading.tokenizer import TextTokenizer

    tok, out = trained
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("vocab.json", "merges.txt"):
        (bare / name).write_bytes((out / name).read_bytes())
    text = "The fox 🦊 runs; 你好."
    for folder in (out, bare):
        loaded = TextTokenizer.from_folder(folder)
        assert loaded.encode(text) == tok.encode(text).ids
        assert loaded.vocab_size == VOCAB


def test_bytes_per_token(trained: tuple[Tokenizer, Path]) -> None:
    tok, _ = trained
    bpt = bytes_per_token(tok, [TEXT])
    assert 1.0 < bpt < 20.0


def test_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        train_bpe_tokenizer([tmp_path / "x.txt"], 100, tmp_path / "out")
    with pytest.raises(FileNotFoundError):
        train_bpe_tokenizer([tmp_path / "missing.txt"], 300, tmp_path / "out")


@pytest.mark.parametrize("model", ["explainer-small", "explainer-llama"])
def test_a_long_text_gets_the_ids_of_the_plain_encoding(model: str) -> None:
    """Texts over _LONG_TEXT_CHARS go through encode_batch (it releases the interpreter's lock, so a server's other
    threads run meanwhile): the same ids as the tokenizer's own encode, BOS included where the model has one."""
    from transformer_explainer.loading import tokenizer as tokenizer_module
    from transformer_explainer.loading.resolve import builtin_models
    from transformer_explainer.loading.tokenizer import TextTokenizer

    folder = builtin_models()[model]
    special = model != "explainer-small"
    tok = TextTokenizer.from_folder(folder, special_tokens=special)
    text = ("Ünïcode 😀 and 中文 text,\n\twith  spaces. " * 200)[: 3 * tokenizer_module._LONG_TEXT_CHARS]
    assert len(text) > tokenizer_module._LONG_TEXT_CHARS
    plain = tok.tokenizer.encode(text, add_special_tokens=False).ids
    assert tok.encode(text, add_bos=False) == plain
    assert tok.encode(text) == ([tok.bos_id] if tok.bos_id is not None else []) + plain
