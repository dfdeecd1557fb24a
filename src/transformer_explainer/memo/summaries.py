"""Small functions of values that a pass computes as it goes and a trace keeps (its observations), so that reading
them later runs no block again: `RowSummary` and its packing, and what the overview reads of every block (its
pattern thumbnails' key sums, `overview_summaries`), planned so that the next edit of a text runs no block either."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from ..encoding import group_size, key_group_sums
from ..names import block_name

Summary = Callable[[Tensor], Tensor]  # a small function of one value (an overview's thumbnail of a pattern)
Observe = Mapping[str, Summary | Sequence[Summary]]  # what a pass observes: per name, one function of it or several
Observations = dict[tuple[str, Summary], Tensor]  # what a trace keeps of them, by (name, function)

THUMBNAIL = 32  # attention overview thumbnails are at most 32 x 32


class RowSummary:
    """A summary of a causal (..., T, S) value made row by row over groups of `group` keys: row i of its result
    (..., T, m) depends on row i of the value alone, and its m = ceil(S / group) columns summarise the groups of keys,
    0 past the row's own group (a causal row has no key after its own position). A trace keeps of each row only its
    columns up to its own group (`pack`: about half of them) and fills the rest with zeros when read (`unpack`); a
    trace cut to n positions keeps its first n rows, and a continued trace's are the beginning's and the new pass's
    (`truncate_trace`, `merge_traces`): the overview of a continued text runs no block."""

    def __init__(self, fn: Summary, what: str, *, group: int) -> None:
        if group < 1:
            raise ValueError("a group holds at least one key")
        self.fn, self.what, self.group = fn, what, group

    def __call__(self, value: Tensor) -> Tensor:
        return self.fn(value)

    def __repr__(self) -> str:
        return f"RowSummary({self.what})"

    def _kept(self, start: int, n: int, device: torch.device) -> Tensor:
        """(n, m) bool: the columns kept of the rows of positions start..start+n-1 (up to each one's own group)."""
        own = torch.div(torch.arange(start, start + n, device=device), self.group, rounding_mode="floor")
        m = -(-(start + n) // self.group)
        return torch.arange(m, device=device)[None, :] <= own[:, None]

    def pack(self, rows: Tensor, start: int) -> Tensor:
        """(..., n, m) rows of positions start.. -> (..., P): each row's columns up to its own group, row after row."""
        return rows[..., self._kept(start, rows.shape[-2], rows.device)]

    def unpack(self, packed: Tensor, start: int, n: int) -> Tensor:
        """The rows (..., n, m) of positions start..start+n-1 from their packed columns, the others 0."""
        where, (n, m) = self._kept_flat(start, n, packed.device)
        # one indexed copy into the flat rows (a boolean-mask assignment found the mask's entries again each time:
        # an overview at 1,000 tokens unpacks 12 blocks' rows, 11 -> 4 ms)
        rows = packed.new_zeros(*packed.shape[:-1], n * m).index_copy_(-1, where, packed)
        return rows.view(*packed.shape[:-1], n, m)

    @functools.lru_cache(maxsize=8)  # noqa: B019 (a few entries per RowSummary, which key_sums_at keeps anyway)
    def _kept_flat(self, start: int, n: int, device: torch.device) -> tuple[Tensor, tuple[int, int]]:
        """The flat indices (row * m + column) of `_kept`'s entries, row after row, and its shape (n, m)."""
        kept = self._kept(start, n, device)
        return kept.flatten().nonzero().squeeze(1), (kept.shape[0], kept.shape[1])

    def first_rows(self, packed: Tensor, n: int) -> Tensor:
        """The packed rows of positions 0..n-1 among those of a trace from position 0."""
        g, (q, r) = self.group, divmod(n, self.group)
        return packed[..., : n + g * q * (q - 1) // 2 + r * q]  # sum over a < n of (a // g + 1) columns


def keep_summary(fn: Summary, value: Tensor, start: int) -> Tensor:
    """What a trace keeps of `fn`'s result `value` for positions from `start`: a RowSummary's rows packed."""
    return fn.pack(value, start) if isinstance(fn, RowSummary) else value


def read_summary(fn: Summary, kept: Tensor, start: int, n: int) -> Tensor:
    """`fn`'s result from what a trace kept of it (`keep_summary`) for its n positions from `start`."""
    return fn.unpack(kept, start, n) if isinstance(fn, RowSummary) else kept


def rows_cut(observations: Observations, n: int) -> Observations:
    """The observations a trace cut to its first `n` positions keeps: a RowSummary's first n rows (the others go)."""
    return {k: k[1].first_rows(v, n) for k, v in observations.items() if isinstance(k[1], RowSummary)}


def rows_joined(before: Observations, after: Observations) -> Observations:
    """The packed rows of a beginning's positions followed by the new pass's (RowSummary.pack)."""
    out = {}
    for k, new in after.items():
        old = before.get(k)
        if old is None or not isinstance(k[1], RowSummary):
            continue
        out[k] = torch.cat([old.to(new.device), new], dim=-1)
    return out


# -- what the overview reads -------------------------------------------------------------------------------------


@functools.cache
def key_sums_at(g: int) -> RowSummary:
    """What a pass keeps of a block's pattern for the overview of a text whose cells hold `g` positions: each
    query's mass per group of g keys, row by row, so that a trace cut or continued keeps its rows."""
    return RowSummary(lambda pattern: key_group_sums(pattern, g), f"key sums per {g} positions", group=g)


# a text is edited at its end by a few tokens at a time: a pass keeps the overview's rows for the texts up to this many
# tokens shorter or longer too, where their cells hold another number of positions (128 tokens: 4 per cell, 129: 5),
# so that the next edit's overview runs no block even where it crosses such a length
EDIT_MARGIN = 4


def grids_near(n_tokens: int) -> tuple[int, ...]:
    """The positions per thumbnail cell of the texts within EDIT_MARGIN tokens of `n_tokens` (mostly one number)."""
    return tuple(sorted({group_size(max(1, n), THUMBNAIL)
                         for n in (n_tokens - EDIT_MARGIN, n_tokens, n_tokens + EDIT_MARGIN)}))


def overview_summaries(n_layer: int, n_tokens: int) -> dict[str, tuple[Summary, ...]]:
    """What the overview reads of every block of a text of `n_tokens`, and of the texts a few tokens shorter or longer
    (`grids_near`), for a pass to compute as it goes (`Memory(observe=...)`): a trace then keeps it, and the
    overview of the text, or of the text continued or cut a little, runs no block again."""
    fns = tuple(key_sums_at(g) for g in grids_near(n_tokens))
    return {block_name(i, "attn.pattern"): fns for i in range(n_layer)}


def overview_summary(n_tokens: int) -> Summary:
    """What the overview of a text of `n_tokens` reads of each block's pattern."""
    return key_sums_at(group_size(n_tokens, THUMBNAIL))
