"""A small built-in reference set: ordinary sentences (some with repeated words and phrases, so
duplicate-token and induction heads have something to do) and the standard induction probe, a random
token sequence shown twice."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ..errors import InputError

REFERENCE_TEXTS: tuple[str, ...] = (
    "The cat sat on the mat, and then the cat went to sleep on the mat.",
    "Alice gave Bob a book. Later that evening, Bob gave Alice a pen.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "When Mary and John went to the store, John gave a drink to Mary.",
    "The meeting is on Monday. I repeat: the meeting is on Monday.",
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar and oxygen.",
    "In 1969, two astronauts walked on the Moon while a third stayed in orbit.",
    "Mr Dursley said hello to Mrs Dursley, and Mrs Dursley said hello back.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "Rain in the hills fills the river; the river runs to the sea, and the sea rises as rain.",
)


def repeated_random_tokens(vocab_size: int, length: int = 24, *, seed: int = 0, bos: int | None = None,
                           low: int = 1000, high: int = 20000, exclude: Iterable[int] = ()) -> list[int]:
    """`[bos] + R + R` for a random sequence R of `length` ids: in the second copy an induction head
    attends to the token after the earlier occurrence of the current token, and nothing but the
    repetition makes the second half predictable.

    Ids are drawn from [low, high) (clipped to the vocabulary): GPT-2's ordinary mid-frequency tokens,
    and in most vocabularies ordinary words; never from `exclude` (the special tokens, such as a small
    vocabulary's last id, its end-of-text token, which would end the document mid-probe).
    """
    if length < 2:
        raise InputError(f"the induction probe needs a sequence of at least 2 tokens, got {length}")
    high = min(high, vocab_size)
    low = min(low, max(high - 2 * length, 0))
    pool = torch.tensor(sorted(set(range(low, high)) - set(exclude)), device="cpu")  # the same ids on every machine
    if len(pool) < 2:
        raise InputError(f"no ordinary token ids to draw the induction probe from in [{low}, {high})")
    g = torch.Generator(device="cpu").manual_seed(seed)
    r = pool[torch.randint(0, len(pool), (length,), generator=g, device="cpu")].tolist()
    return ([bos] if bos is not None else []) + r + r
