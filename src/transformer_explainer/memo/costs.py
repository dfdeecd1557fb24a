"""What continuing a cached trace costs, measured, and the choice it makes: which cached beginning of a text to
continue (`cheapest_beginning`), which traces may be continued at all (`continuable`), and what an older trace
forgets first (`shed_continuation`). The constants are measurements on GPT-2 small's shape; each says its figures."""

from __future__ import annotations

from ..names import block_name
from ..trace import Trace
from .summaries import RowSummary, overview_summary
from .values import TraceValues

# traces take at most all but one part in BLOCKS_SHARE of the budget; blocks run again take the rest, and whatever
# the traces leave unused: a class viewing a dozen texts block by block (GPT-2 small's shape, 20 tokens: 1.3 MB a
# block) asks for more blocks than a fixed quarter holds while its traces fill two thirds of theirs
BLOCKS_SHARE = 4
# a text typed on or a generated token continues a cached trace from its kept keys and values; a trace made of
# that many passes is not continued (a shorter cached beginning may be), as each view of it runs every one of its
# passes again: a block's view of a 128-token text on GPT-2 small's shape, edited at its end again and again, costs
# 36-40 ms of blocks run again made of 3 passes, 50-60 ms of 7 (what the text's next edit saves by continuing it
# with its keys and values: 70 ms). The store makes a continuation that reaches it one pass (`TraceStore._one_pass`)
MAX_PASSES = 8
# over the budget, the newest traces keep their keys and values while those take at most one part in KV_SHARE of the
# trace budget: continuing a trace with them costs its new positions only (GPT-2 small's shape, 127 + 1 tokens: 43 ms,
# 107 ms without); older traces keep their residual streams alone, and the rest of the budget holds more of them.
# Within the budget every trace keeps its own (three 1,000-token texts edited in turn, GPT-2 small's shape, with
# --cache-mb 768: 0.55 s -> 0.08 s CPU an edit, benchmarks/long_text_edits.py --cache-mb 768)
KV_SHARE = 4
# continuing a trace without them runs about a quarter of its beginning's products again, per pass (see below); one
# whose beginning is not worth it (its passes, the overview's rows it lacks) is traced whole (`continuation_cost`)
NO_KV_COST = 4


def values_of(trace: Trace) -> TraceValues:
    """The trace's values as the memory engineering holds them (every trace the engine makes has these)."""
    memory = trace.memory
    assert isinstance(memory, TraceValues)
    return memory


def shared_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """How many ids `a` and `b` have in common at their beginning."""
    n = 0
    for x, y in zip(a, b, strict=False):  # up to the shorter
        if x != y:
            break
        n += 1
    return n


def continuable(trace: Trace) -> bool:
    """Whether a cached trace may be continued at all: it recomputes its blocks and is made of fewer than MAX_PASSES
    passes. Whether it is worth it is `continuation_cost`'s (with its keys and values the continuation costs the new
    positions only; without them each block of the beginning runs as far as its values: GPT-2-small shape, 126 + 2
    tokens, one thread, one pass: 57 ms with them, 129 ms without, 361 ms traced whole)."""
    blocks = values_of(trace).blocks
    return blocks is not None and blocks.passes < MAX_PASSES


def continuation_cost(trace: Trace, shared: int, n: int) -> float:
    """What continuing `trace`'s first `shared` positions to a text of `n` costs, in positions run through every
    block (a fresh trace of the text: n). The new positions; where the trace dropped its keys and values, each block
    of the beginning run again as far as its values (one part in NO_KV_COST of a block), in each of the trace's
    passes; where it kept no overview rows at the text's grid, each run again as far as its pattern (as much again)."""
    values = values_of(trace)
    passes = values.blocks.passes if values.blocks is not None else 1
    again = 0.0 if values.kv is not None else 1 / NO_KV_COST
    if (block_name(0, "attn.pattern"), overview_summary(n)) not in values.observations:
        again += 1 / NO_KV_COST
    return n - shared + again * shared * passes


def cheapest_beginning(candidates: list[tuple[Trace, int]], n: int) -> tuple[Trace, int] | None:
    """The cached beginning (trace, shared positions) cheapest to continue to a text of `n` positions, if one costs
    less than tracing the text whole and covers at least half of it (each view of a continuation runs each of its
    passes); among equals, the first (the newest)."""
    best, best_cost = None, float(n)
    for trace, shared in candidates:
        if 2 * shared < n:
            continue
        cost = continuation_cost(trace, shared, n)
        if cost < best_cost:
            best, best_cost = (trace, shared), cost
    return best


def drop_kv(trace: Trace) -> None:
    """Forget `trace`'s kept keys and values: continuing it then runs its blocks again for them."""
    values_of(trace).drop_kv()


def shed_continuation(trace: Trace) -> None:
    """Forget what only continuing `trace` reads: its keys and values, and the overview's rows at the grids of texts
    a little longer or shorter (`overview_summaries`); its own overview's rows stay."""
    values = values_of(trace)
    values.drop_kv()
    own = overview_summary(trace.n_tokens)
    for key in [k for k in values.observations if isinstance(k[1], RowSummary) and k[1] is not own]:
        del values.observations[key]
