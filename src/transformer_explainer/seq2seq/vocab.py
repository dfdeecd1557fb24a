"""A small fixed vocabulary per side of a task: characters or space-separated words.

Ids 0, 1, 2 are the specials every model shares: padding, the start token that begins every decoder
input, and the end token that stops decoding. Nothing outside the vocabulary is silently mapped to
an "unknown" token: such text is an `InputError` naming the offending pieces.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import InputError

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<s>", "</s>")
Level = Literal["char", "word"]


def split_text(text: str, level: Level) -> list[str]:
    return list(text) if level == "char" else text.split()


@dataclass(frozen=True)
class Vocab:
    tokens: tuple[str, ...]  # index = id; the three specials first
    level: Level = "char"  # "char": every character is a token; "word": tokens are split on spaces
    index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.tokens[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"a vocabulary starts with {SPECIALS}")
        if len(set(self.tokens)) != len(self.tokens):
            raise ValueError("duplicate tokens in vocabulary")
        if self.level not in ("char", "word"):
            raise ValueError(f"level must be 'char' or 'word', got {self.level!r}")
        object.__setattr__(self, "index", {t: i for i, t in enumerate(self.tokens)})

    @classmethod
    def build(cls, pieces: Iterable[str], level: Level = "char") -> Vocab:
        """Specials + the distinct pieces, sorted so that a vocabulary does not depend on data order."""
        return cls(SPECIALS + tuple(sorted(set(pieces) - set(SPECIALS))), level)

    def __len__(self) -> int:
        return len(self.tokens)

    def split(self, text: str) -> list[str]:
        return split_text(text, self.level)

    def encode(self, text: str, what: str = "text") -> list[int]:
        """Ids of `text` (no specials added); InputError if a piece is not in the vocabulary."""
        pieces = self.split(text)
        unknown = sorted({p for p in pieces if p not in self.index or p in SPECIALS})
        if unknown:
            shown = ", ".join(repr(p) for p in unknown[:8]) + (" ..." if len(unknown) > 8 else "")
            kind = "characters" if self.level == "char" else "words"
            raise InputError(f"the {what} contains {kind} outside this task's vocabulary: {shown}",
                             code="s2s_out_of_vocabulary", what=what, level=self.level, pieces=shown)
        return [self.index[p] for p in pieces]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`, specials dropped."""
        pieces = [self.tokens[i] for i in ids if i >= len(SPECIALS)]
        return "".join(pieces) if self.level == "char" else " ".join(pieces)

    def token_texts(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[i] for i in ids]

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "tokens": list(self.tokens)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Vocab:
        return cls(tuple(d["tokens"]), d.get("level", "char"))
