"""Tokenization through the `tokenizers` library: GPT-2's byte-level BPE (`tokenizer.json`, or
`vocab.json` + `merges.txt`), and the `tokenizer.json` of Llama-family checkpoints.

Beginning-of-sequence token: `tokenizer_config.json`'s `add_bos_token` decides when it is given
(Llama 2 and 3, Mistral: true); when it is not, the `tokenizer.json` post-processor decides (as
`transformers` does: it adds BOS where its template does). GPT-2's tokenizer adds nothing.

How a token is shown, everywhere (CLI tables, JSON, the app): its text, leading space kept; a byte
that is only part of a UTF-8 character (GPT-2 splits most emoji and CJK characters over two to
four tokens) or a control character is written `<0xF0>`, as sentencepiece writes its byte tokens.
Runs of tokens that together make whole characters are reported by `char_groups`, so a display
can bracket them and show the character they form.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from ..errors import CheckpointError, ExplainerError, InputError
from .files import is_regular_file, read_json, read_regular_bytes

MAX_TOKENIZER_BYTES = 256 * 1024 * 1024  # the largest tokenizer.json files on the hub are tens of MB


def _is_panic(e: BaseException) -> bool:
    """Whether `e` is the tokenizers library's Rust code panicking (its regex engine giving up on a
    pattern, for one). pyo3 raises such a panic as a PanicException, which derives from BaseException
    so that `except Exception` lets it through."""
    return type(e).__name__ == "PanicException"


@contextmanager
def _text_errors() -> Iterator[None]:
    """A tokenizer failing on a text (a tokenizer.json pattern the regex engine gives up on) as an
    InputError naming the cause, not a panic through every handler."""
    try:
        yield
    except BaseException as e:
        if not _is_panic(e):
            raise
        cause = (str(e).splitlines() or ["a panic"])[0]
        raise InputError(f"the model's tokenizer failed on this text ({cause}); its tokenizer.json has a pattern "
                         f"the regex engine cannot run on it") from None


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


def byte_notation(data: bytes) -> str:
    """`<0xF0><0x9F>` for bytes shown one by one."""
    return "".join(f"<0x{b:02X}>" for b in data)


def _utf8_char_starts(data: bytes) -> list[int]:
    """Offsets where a character starts in `data`, plus len(data). A byte that is not part of a
    well-formed UTF-8 sequence counts as a character of its own."""
    starts, i, n = [], 0, len(data)
    while i < n:
        starts.append(i)
        b = data[i]
        length = 1 if b < 0xC0 else 2 if b < 0xE0 else 3 if b < 0xF0 else 4 if b < 0xF8 else 1
        if length > 1 and (i + length > n or any(not 0x80 <= c < 0xC0 for c in data[i + 1:i + length])):
            length = 1
        i += length
    starts.append(n)
    return starts


def display_text(data: bytes) -> str:
    """Bytes as text by the convention above: whole characters as themselves, other bytes and
    control characters (except newline and tab) as `<0xHH>`."""
    starts = _utf8_char_starts(data)
    out = []
    for a, b in zip(starts, starts[1:], strict=False):
        piece = data[a:b]
        try:
            ch = piece.decode("utf-8")
        except UnicodeDecodeError:
            out.append(byte_notation(piece))
            continue
        out.append(byte_notation(piece) if unicodedata.category(ch) == "Cc" and ch not in "\n\t" else ch)
    return "".join(out)


# Beyond this many characters a text is tokenized by `encode_batch`, which releases the interpreter's lock while it
# works: `encode` holds it throughout, and 40,000 emoji (0.04 s) stalled every other thread of a server meanwhile
# (in one measurement another thread ran 5 times during 4 such encodes, 126 times during 4 encode_batch calls).
_LONG_TEXT_CHARS = 2000


@dataclass(frozen=True)
class CharGroup:
    """Tokens [start, end) whose bytes together make `text` (at least one of them holds part of a
    character, e.g. the four tokens of one emoji)."""

    start: int
    end: int
    text: str


_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece byte fallback (Llama 2, Mistral)


def _token_content(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or {"content": ...}."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


class TextTokenizer:
    """Text <-> ids, plus the readable text of each token for display."""

    def __init__(self, tokenizer: Tokenizer, *, bos_id: int | None = None,
                 eos_ids: tuple[int, ...] | None = None) -> None:
        self.tokenizer = tokenizer
        self.bos_id = bos_id  # prepended to every encoded text when set
        self._eos_ids = eos_ids  # None: GPT-2's <|endoftext|>

    @classmethod
    def from_folder(cls, folder: Path, special_tokens: bool = False) -> TextTokenizer:
        """From `tokenizer.json`, or else GPT-2's `vocab.json` + `merges.txt`. With `special_tokens` (every
        family but GPT-2: its declaration says), with the BOS and EOS tokens that `tokenizer_config.json`
        and `config.json` name, if any. Only regular files are read (see files.py)."""
        try:
            if is_regular_file(folder / "tokenizer.json"):
                data = read_regular_bytes(folder / "tokenizer.json", MAX_TOKENIZER_BYTES)
                tok = Tokenizer.from_str(data.decode("utf-8"))
                if not special_tokens:
                    return cls(tok)
                return cls(tok, bos_id=_bos_id(folder, tok), eos_ids=_eos_ids(folder, tok))
            vocab, merges = folder / "vocab.json", folder / "merges.txt"
            if is_regular_file(vocab) and is_regular_file(merges):
                tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
                tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
                tok.decoder = decoders.ByteLevel()
                return cls(tok)
        except ExplainerError:
            raise
        except BaseException as e:  # tokenizers raises plain Exceptions on bad files, and can panic
            if not isinstance(e, Exception) and not _is_panic(e):
                raise
            first = (str(e).splitlines() or [type(e).__name__])[0]
            raise CheckpointError(f"tokenizer files in {folder} could not be read: {first}") from None
        raise CheckpointError(f"{folder} has no tokenizer: expected tokenizer.json, or vocab.json and merges.txt")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, add_bos: bool = True) -> list[int]:
        """The ids of `text`, after the BOS token where the model expects one (unless `add_bos` is
        False: the text's own tokens, e.g. to look up one word). A text that is not valid Unicode (a lone
        surrogate, which Python strings may hold) is refused in one sentence: tokenizers raises a TypeError."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError("the text is not valid Unicode (it contains a lone surrogate)",
                             code="text_not_unicode") from None
        with _text_errors():
            if len(text) > _LONG_TEXT_CHARS:  # encode holds Python's lock throughout, encode_batch lets it go
                ids = self.tokenizer.encode_batch([text], add_special_tokens=False)[0].ids
            else:
                ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return ids if self.bos_id is None or not add_bos else [self.bos_id, *ids]

    def start_id(self) -> int | None:
        """The token a document starts with: BOS where the model has one, else the end-of-text
        token GPT-2 puts between documents."""
        return self.bos_id if self.bos_id is not None else self.eos_id()

    def decode(self, ids: list[int]) -> str:
        with _text_errors():
            return self.tokenizer.decode(ids, skip_special_tokens=False)

    def raw_token(self, token_id: int) -> str:
        """The vocabulary entry as stored, e.g. 'Ġthe'."""
        return self.tokenizer.id_to_token(token_id) or ""

    def token_bytes(self, token_id: int) -> bytes:
        raw = self.raw_token(token_id)
        table = _byte_decoder()
        if raw and all(c in table for c in raw):
            return bytes(table[c] for c in raw)
        byte = _BYTE_TOKEN.fullmatch(raw)
        if byte:
            return bytes([int(byte.group(1), 16)])
        # SentencePiece's word marker is a space; special tokens such as <|endoftext|> stay as written
        return raw.replace("\u2581", " ").encode("utf-8")

    def token_text(self, token_id: int) -> str:
        """The token's own text, with its leading space; a byte that is part of a longer UTF-8
        character (e.g. one third of a Chinese character) is shown as `<0xE4>`."""
        return display_text(self.token_bytes(token_id))

    def token_texts(self, ids: list[int]) -> list[str]:
        return [self.token_text(i) for i in ids]

    def char_groups(self, ids: list[int]) -> list[CharGroup]:
        """The runs of two or more tokens that split characters between them, with the text they
        make together (positions index `ids`)."""
        pieces = [self.token_bytes(i) for i in ids]
        data = b"".join(pieces)
        char_starts = set(_utf8_char_starts(data))
        groups, offset, start, group_offset = [], 0, 0, 0
        for k, piece in enumerate(pieces):
            offset += len(piece)
            if offset in char_starts:  # token k ends on a character boundary: a run closes here
                if k > start:
                    groups.append(CharGroup(start, k + 1, display_text(data[group_offset:offset])))
                start, group_offset = k + 1, offset
        return groups

    def eos_id(self) -> int | None:
        """The end-of-text token (the first, where the model has several)."""
        ids = self.eos_ids()
        return ids[0] if ids else None

    def eos_ids(self) -> tuple[int, ...]:
        """Every token that ends a generation."""
        if self._eos_ids is not None:
            return self._eos_ids
        eos = self.tokenizer.token_to_id("<|endoftext|>")
        return () if eos is None else (eos,)


def _json_or_empty(path: Path) -> dict:
    return read_json(path) if is_regular_file(path) else {}


def _bos_id(folder: Path, tok: Tokenizer) -> int | None:
    cfg = _json_or_empty(folder / "tokenizer_config.json")
    add = cfg.get("add_bos_token")
    if add is None:  # not set: the tokenizer.json's post-processor decides, as in transformers
        with_special = tok.encode("a", add_special_tokens=True).ids
        plain = tok.encode("a", add_special_tokens=False).ids
        adds_first = len(with_special) > len(plain) and with_special[1 : 1 + len(plain)] == plain
        return with_special[0] if adds_first else None
    if not add:
        return None
    name = _token_content(cfg.get("bos_token"))
    bos = tok.token_to_id(name) if name else _json_or_empty(folder / "config.json").get("bos_token_id")
    if not isinstance(bos, int):
        raise CheckpointError(f"{folder / 'tokenizer_config.json'} asks for a BOS token but names none "
                              f"the tokenizer knows")
    return bos


def _eos_ids(folder: Path, tok: Tokenizer) -> tuple[int, ...] | None:
    """config.json's eos_token_id (one id or a list; generation_config.json's where it differs), else
    tokenizer_config.json's eos_token; None for GPT-2's default."""
    for name in ("generation_config.json", "config.json"):
        eos = _json_or_empty(folder / name).get("eos_token_id")
        if isinstance(eos, int) and not isinstance(eos, bool):
            return (eos,)
        if isinstance(eos, list) and eos and all(isinstance(i, int) for i in eos):
            return tuple(eos)
    name = _token_content(_json_or_empty(folder / "tokenizer_config.json").get("eos_token"))
    eos_id = tok.token_to_id(name) if name else None
    return None if eos_id is None else (eos_id,)
