"""Toy translation tasks, generated on the fly and deterministic given a random generator.

Each task shows one kind of alignment in the cross-attention: `reverse` an anti-diagonal,
`number_words` / `number_words_zh` many-to-many (several digits make one word, one digit several
characters), `dates` a reordering. `tsv` reads the user's own source<TAB>target pairs.

Every task keeps a held-out split: a fixed tenth of its inputs (by a stable hash of the part that
defines the answer) is never drawn for training, so "accuracy on fresh samples" means inputs the
model has never seen.
"""

from __future__ import annotations

import datetime as dt
import re
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import InputError
from .vocab import Level, Vocab, split_text

Split = Literal["train", "test"]
Pair = tuple[str, str]


def _held_out(key: str) -> bool:
    """True for the tenth of keys kept out of training (stable across runs and machines)."""
    return zlib.crc32(key.encode("utf-8")) % 10 == 0


class Seq2SeqTask(ABC):
    name: str
    description: str
    src_vocab: Vocab
    tgt_vocab: Vocab
    max_src_len: int  # longest source, in tokens (specials excluded)
    max_tgt_len: int  # longest target, in tokens (specials excluded)
    examples: tuple[str, ...] = ()  # inputs to try
    held_out_note = "a tenth of the inputs (by a stable hash) is never drawn for training"

    @abstractmethod
    def draw(self, rng: np.random.Generator) -> tuple[Pair, str]:
        """One random (source, target) pair and the key that decides its split."""

    def split_of(self, key: str) -> Split | None:
        """Which split a key belongs to; None for keys always trained on, never held out."""
        return "test" if _held_out(key) else "train"

    def sample(self, rng: np.random.Generator, split: Split = "train") -> Pair:
        """A random pair from `split`: drawn until its key falls on that side."""
        allowed = ("train", None) if split == "train" else ("test",)
        while True:
            pair, key = self.draw(rng)
            if self.split_of(key) in allowed:
                return pair

    def samples(self, n: int, seed: int, split: Split = "test") -> list[Pair]:
        rng = np.random.default_rng([seed, 7919])  # a stream no training batch uses
        return [self.sample(rng, split) for _ in range(n)]

    def reference(self, source: str) -> str | None:
        """The correct output for `source`, or None if the task cannot tell."""
        return None

    def options(self) -> dict[str, Any]:
        """Keyword arguments that rebuild this task with `make_task`."""
        return {}


# -- reverse ---------------------------------------------------------------------------------------


class ReverseTask(Seq2SeqTask):
    name = "reverse"
    description = "reverse a string of letters: the cross-attention forms an anti-diagonal"

    def __init__(self, max_len: int = 12, alphabet: str = "abcdefghijklmnopqrstuvwxyz", min_len: int = 1) -> None:
        if not 1 <= min_len <= max_len:
            raise ValueError("need 1 <= min_len <= max_len")
        self.alphabet, self.min_len, self.max_len = alphabet, min_len, max_len
        self.src_vocab = self.tgt_vocab = Vocab.build(alphabet)
        self.max_src_len = self.max_tgt_len = max_len
        self.examples = ("hello", "transformer", "abcdefg")

    def draw(self, rng: np.random.Generator) -> tuple[Pair, str]:
        n = int(rng.integers(self.min_len, self.max_len + 1))
        src = "".join(self.alphabet[i] for i in rng.integers(0, len(self.alphabet), size=n))
        return (src, src[::-1]), src

    def reference(self, source: str) -> str | None:
        return source[::-1]

    def options(self) -> dict[str, Any]:
        return {"max_len": self.max_len, "alphabet": self.alphabet, "min_len": self.min_len}


# -- numbers in words ------------------------------------------------------------------------------

ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen").split()
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
ZH_DIGITS = "零一二三四五六七八九"
ZH_UNITS = ("", "十", "百", "千")


def _en_under_100(n: int) -> str:
    return ONES[n] if n < 20 else TENS[n // 10] + (f"-{ONES[n % 10]}" if n % 10 else "")


def _en_under_1000(n: int) -> list[str]:
    hundreds, rest = divmod(n, 100)
    words = [ONES[hundreds], "hundred"] if hundreds else []
    return words + ([_en_under_100(rest)] if rest else [])


def english_number(n: int) -> str:
    """0 <= n < 10**6 in American English words: 1234 -> "one thousand two hundred thirty-four"."""
    if not 0 <= n < 10**6:
        raise ValueError(f"{n} is outside 0..999999")
    if n == 0:
        return "zero"
    thousands, rest = divmod(n, 1000)
    words = (_en_under_1000(thousands) + ["thousand"]) if thousands else []
    return " ".join(words + _en_under_1000(rest))


def _zh_section(n: int) -> str:
    """1..9999 with the units 十百千; one 零 for each run of inner zeros: 1004 -> 一千零四."""
    out, zero, started = [], False, False
    for power in (3, 2, 1, 0):
        d = n // 10**power % 10
        if d == 0:
            zero = zero or started
            continue
        if zero:
            out.append("零")
            zero = False
        out.append(ZH_DIGITS[d] + ZH_UNITS[power])
        started = True
    return "".join(out)


def chinese_number(n: int) -> str:
    """0 <= n < 10**8 in Chinese numerals: 1234 -> 一千二百三十四, 100010 -> 十万零一十."""
    if not 0 <= n < 10**8:
        raise ValueError(f"{n} is outside 0..99999999")
    if n == 0:
        return "零"
    high, low = divmod(n, 10000)
    if high:
        s = _zh_section(high) + "万"
        if low:
            s += ("零" if low < 1000 else "") + _zh_section(low)
    else:
        s = _zh_section(low)
    return s[1:] if s.startswith("一十") else s  # 10..19 at the front are said 十, 十五, not 一十五


class NumberWordsTask(Seq2SeqTask):
    """Digits -> number words, in English (word tokens) or Chinese (character tokens)."""

    def __init__(self, lang: Literal["en", "zh"] = "en") -> None:
        if lang not in ("en", "zh"):
            raise ValueError(f"lang must be 'en' or 'zh', got {lang!r}")
        self.lang = lang
        self.max_digits = 6 if lang == "en" else 8
        self.src_vocab = Vocab.build("0123456789")
        if lang == "en":
            self.name = "number_words"
            self.description = "write an integer in English words: several digits make one word"
            words = ONES + list(TENS[2:]) + [f"{t}-{o}" for t in TENS[2:] for o in ONES[1:10]]
            self.tgt_vocab = Vocab.build(words + ["hundred", "thousand"], level="word")
            self.max_tgt_len = len(english_number(777_777).split())
            self.examples = ("1234", "90017", "700000")
        else:
            self.name = "number_words_zh"
            self.description = "write an integer in Chinese numerals (一千二百三十四): digits, units and 零"
            self.tgt_vocab = Vocab.build(ZH_DIGITS + "十百千万")
            self.max_tgt_len = len(chinese_number(97_979_797))
            self.examples = ("1234", "100010", "20050607")
        self.max_src_len = self.max_digits
        self.held_out_note = ("a tenth of the numbers from 1000 up (by a stable hash) is never drawn for training "
                              "and is what accuracy is measured on; the 1000 numbers below are too few to hold out")
        self.convert: Callable[[int], str] = english_number if lang == "en" else chinese_number

    def draw(self, rng: np.random.Generator) -> tuple[Pair, str]:
        k = int(rng.integers(1, self.max_digits + 1))  # as many short numbers as long ones
        n = int(rng.integers(0 if k == 1 else 10 ** (k - 1), 10**k))
        return (str(n), self.convert(n)), str(n)

    def split_of(self, key: str) -> Split | None:
        # Under 1000 there are too few numbers to hold some out: all of them are trained on.
        return None if int(key) < 1000 else super().split_of(key)

    def reference(self, source: str) -> str | None:
        if not source.isdigit() or len(source) > self.max_digits or (len(source) > 1 and source[0] == "0"):
            return None
        return self.convert(int(source))

    def options(self) -> dict[str, Any]:
        return {}  # the language comes with the name: number_words or number_words_zh


# -- dates -----------------------------------------------------------------------------------------

MONTHS = ("January February March April May June July August September October November December").split()


def _ordinal(d: int) -> str:
    suffix = "th" if 11 <= d % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th")
    return f"{d}{suffix}"


# Unambiguous written forms (no d/m vs m/d guessing): format -> pattern that reads it back.
DATE_FORMATS: dict[str, Callable[[dt.date], str]] = {
    "long": lambda d: f"{MONTHS[d.month - 1]} {d.day}, {d.year}",  # March 5, 2021
    "day_first": lambda d: f"{d.day} {MONTHS[d.month - 1]} {d.year}",  # 5 March 2021
    "short": lambda d: f"{MONTHS[d.month - 1][:3]} {d.day}, {d.year}",  # Mar 5, 2021
    "short_day_first": lambda d: f"{d.day} {MONTHS[d.month - 1][:3]} {d.year}",  # 5 Mar 2021
    "ordinal": lambda d: f"{MONTHS[d.month - 1]} {_ordinal(d.day)}, {d.year}",  # March 5th, 2021
    "dotted": lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}",  # 05.03.2021 (day first, as with dots)
}
_MONTH = {m.lower(): i + 1 for i, m in enumerate(MONTHS)} | {m[:3].lower(): i + 1 for i, m in enumerate(MONTHS)}
_DATE_PATTERNS = (
    re.compile(r"(?P<m>[A-Za-z]+) (?P<d>\d{1,2})(?:st|nd|rd|th)?, (?P<y>\d{4})"),
    re.compile(r"(?P<d>\d{1,2}) (?P<m>[A-Za-z]+) (?P<y>\d{4})"),
    re.compile(r"(?P<d>\d{2})\.(?P<m>\d{2})\.(?P<y>\d{4})"),
)


def parse_date(text: str) -> dt.date | None:
    """The date written in one of DATE_FORMATS' styles, or None."""
    for pattern in _DATE_PATTERNS:
        m = pattern.fullmatch(text.strip())
        if not m:
            continue
        month = int(m["m"]) if m["m"].isdigit() else _MONTH.get(m["m"].lower())
        try:
            return dt.date(int(m["y"]), month or 0, int(m["d"]))
        except ValueError:
            return None
    return None


class DatesTask(Seq2SeqTask):
    name = "dates"
    description = "normalise a written date to ISO 8601 (March 5, 2021 -> 2021-03-05): a reordering"
    held_out_note = "a tenth of the dates (by a stable hash) is never drawn for training, in any format"

    def __init__(self, first_year: int = 1900, last_year: int = 2099) -> None:
        self.first = dt.date(first_year, 1, 1)
        self.n_days = (dt.date(last_year, 12, 31) - self.first).days + 1
        self.first_year, self.last_year = first_year, last_year
        texts = [f(dt.date(2000 + (i % 10), m, 28)) for i, f in enumerate(DATE_FORMATS.values()) for m in range(1, 13)]
        texts += [f"{i}{s}" for i in range(10) for s in ("st", "nd", "rd", "th")]
        self.src_vocab = Vocab.build("".join(texts))
        self.tgt_vocab = Vocab.build("0123456789-")
        self.max_src_len = len("September 30th, 2000")
        self.max_tgt_len = 10
        self.examples = ("March 5, 2021", "5 Mar 1999", "December 31st, 2099", "14.07.1989")

    def draw(self, rng: np.random.Generator) -> tuple[Pair, str]:
        d = self.first + dt.timedelta(days=int(rng.integers(0, self.n_days)))
        fmt = list(DATE_FORMATS.values())[int(rng.integers(0, len(DATE_FORMATS)))]
        return (fmt(d), d.isoformat()), d.isoformat()  # a held-out date is held out in every format

    def reference(self, source: str) -> str | None:
        d = parse_date(source)
        return d.isoformat() if d is not None else None

    def options(self) -> dict[str, Any]:
        return {"first_year": self.first_year, "last_year": self.last_year}


# -- the user's pairs ------------------------------------------------------------------------------


def read_tsv(path: Path) -> list[Pair]:
    """source<TAB>target lines; blank lines and lines starting with '#' are skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {e}") from None
    pairs = []
    for i, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise InputError(f"{path}:{i}: expected 'source<TAB>target', got {line[:60]!r}")
        pairs.append((parts[0].strip(), parts[1].strip()))
    if not pairs:
        raise InputError(f"{path} holds no source<TAB>target pairs")
    return pairs


class TsvTask(Seq2SeqTask):
    """Pairs from a file. With 20 or more pairs a tenth is held out (by hash of the source) for
    evaluation; with fewer, evaluation uses the training pairs and says so in `held_out`."""

    name = "tsv"

    def __init__(self, path: Path | str, level: Level = "char") -> None:
        self.path = Path(path)
        self.level = level
        self.pairs = read_tsv(self.path)
        self.description = f"your pairs from {self.path.name} ({len(self.pairs)} pairs, {level} tokens)"
        self.src_vocab = Vocab.build((p for s, _ in self.pairs for p in split_text(s, level)), level)
        self.tgt_vocab = Vocab.build((p for _, t in self.pairs for p in split_text(t, level)), level)
        self.max_src_len = max(len(self.src_vocab.split(s)) for s, _ in self.pairs)
        self.max_tgt_len = max(len(self.tgt_vocab.split(t)) for _, t in self.pairs)
        self.lookup = dict(self.pairs)
        test = [p for p in self.pairs if _held_out(p[0])]
        self.held_out = len(self.pairs) >= 20 and 0 < len(test) < len(self.pairs)
        self.by_split: dict[Split, list[Pair]] = (
            {"train": [p for p in self.pairs if not _held_out(p[0])], "test": test} if self.held_out
            else {"train": self.pairs, "test": self.pairs}
        )
        self.examples = tuple(s for s, _ in self.by_split["test"][:3])
        self.held_out_note = (f"{len(test)} of the {len(self.pairs)} pairs (by a stable hash) are never drawn for "
                              "training" if self.held_out else "too few pairs to hold some out: evaluation uses "
                              "the training pairs")

    def draw(self, rng: np.random.Generator) -> tuple[Pair, str]:
        pair = self.pairs[int(rng.integers(0, len(self.pairs)))]
        return pair, pair[0]

    def sample(self, rng: np.random.Generator, split: Split = "train") -> Pair:
        pool = self.by_split[split]
        return pool[int(rng.integers(0, len(pool)))]

    def reference(self, source: str) -> str | None:
        return self.lookup.get(source)

    def options(self) -> dict[str, Any]:
        return {"path": str(self.path), "level": self.level}


TASKS: dict[str, Callable[..., Seq2SeqTask]] = {
    "reverse": ReverseTask,
    "number_words": lambda **o: NumberWordsTask("en", **o),
    "number_words_zh": lambda **o: NumberWordsTask("zh", **o),
    "dates": DatesTask,
    "tsv": TsvTask,
}
BUILTIN_TASKS = ("reverse", "number_words", "number_words_zh", "dates")


def make_task(name: str, **options: Any) -> Seq2SeqTask:
    if name not in TASKS:
        raise InputError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}", code="s2s_unknown_task",
                         task=name, tasks=", ".join(TASKS))
    if name == "tsv" and "path" not in options:
        raise InputError("the tsv task needs a file of source<TAB>target lines (--tsv FILE)")
    return TASKS[name](**options)
