"""GPT-2 byte-level BPE tokenization through the `tokenizers` library."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from ..errors import CheckpointError


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte, reversed (e.g. 'Ġ' -> 0x20)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class TextTokenizer:
    """Text <-> ids, plus the readable text of each token for display."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def from_folder(cls, folder: Path) -> TextTokenizer:
        """From `tokenizer.json`, or else GPT-2's `vocab.json` + `merges.txt`."""
        try:
            if (folder / "tokenizer.json").is_file():
                return cls(Tokenizer.from_file(str(folder / "tokenizer.json")))
            vocab, merges = folder / "vocab.json", folder / "merges.txt"
            if vocab.is_file() and merges.is_file():
                tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
                tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
                tok.decoder = decoders.ByteLevel()
                return cls(tok)
        except Exception as e:  # tokenizers raises plain Exceptions on bad files
            raise CheckpointError(f"tokenizer files in {folder} could not be read: {e}") from None
        raise CheckpointError(f"{folder} has no tokenizer: expected tokenizer.json, or vocab.json and merges.txt")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def raw_token(self, token_id: int) -> str:
        """The vocabulary entry as stored, e.g. 'Ġthe'."""
        return self.tokenizer.id_to_token(token_id) or ""

    def token_bytes(self, token_id: int) -> bytes:
        raw = self.raw_token(token_id)
        table = _byte_decoder()
        if raw and all(c in table for c in raw):
            return bytes(table[c] for c in raw)
        return raw.encode("utf-8")  # special tokens such as <|endoftext|>

    def token_text(self, token_id: int) -> str:
        """The token's own text, with its leading space; bytes that are part of a longer UTF-8
        character (e.g. one third of a Chinese character) are shown escaped, like '\\xe4'."""
        return self.token_bytes(token_id).decode("utf-8", errors="backslashreplace")

    def token_texts(self, ids: list[int]) -> list[str]:
        return [self.token_text(i) for i in ids]

    def eos_id(self) -> int | None:
        return self.tokenizer.token_to_id("<|endoftext|>")
