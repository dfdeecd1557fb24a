"""The direct logit attributions an HTML snapshot carries, so that its "Why this token" tab works offline.

The tab asks for the attribution at the focus position of the token the model would explain there by default:
the token that actually came next at an earlier position, the top prediction at the last. A snapshot carries
that for every position it has room for, and at the last position also for the model's `CANDIDATES` likeliest
tokens, so that a learner can type any of them, or compare two of them ("A rather than B": the page subtracts
the two, the attribution being linear in the unembedding direction, as `attribution.py` computes it).

Every entry is `ExplainerModel.attribute`'s answer, stored with its values in float64 as the API sends them; the
component list (kind, layer, head), the same at every position, is stored once as `parts`; in a mixture of experts
each entry says which expert each "expert" part is (`experts`, in the parts' order: the routing differs by position,
the number of parts per block does not). A model that cannot be attributed (`attribute` refuses it) gets a record
with no entries and the refusal's sentence (`refused`). The layer x head map and the layer x expert map are not
stored (the page takes them from the components, rounded to float32 as the API's maps are). The last
position is always carried; the earlier ones go from the last backwards into what the size budget has left, and
`left_out` lists those that did not fit. web/src/snapshot/static.ts answers the app's calls from this record.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import torch

from ..analysis.answers import finite
from ..attribution import Attribution
from ..engine import ExplainerModel
from ..errors import InputError
from ..generic import GenericModel
from ..limits import APP_TOP_K
from ..trace import Trace

CANDIDATES = APP_TOP_K  # the last position's likeliest tokens carried: those the app's default sampling can draw


def _with_logits(trace: Trace) -> Trace:
    """The trace with its (T, V) logits computed once: a trace without them recomputes them all on each access,
    once per attribution asked of it. The same product, so the same numbers."""
    if "logits" in trace.memory.kept:
        return trace
    return dataclasses.replace(trace, memory=trace.memory.keeping({"logits": trace["logits"]}))


def _entry(a: Attribution) -> dict[str, Any]:
    out = {"position": a.position, "target": {"id": a.target, "text": a.target_text}, "metric": a.metric,
           "rest": a.rest, "scale": a.scale, "values": [c.value for c in a.components]}
    if a.experts is not None:  # which experts the "expert" parts are: the routing's choice at this position
        out["experts"] = [c.expert for c in a.components if c.kind == "expert"]
    return finite(out)


def entry_bytes(entry: dict[str, Any]) -> int:
    """What one entry adds to the snapshot's JSON (as the snapshot's budget counts it)."""
    return len(json.dumps(entry, ensure_ascii=False)) + 2


class SnapshotAttribution:
    """The attribution record of one trace: made with the last position's entries, then filled with the earlier
    positions' while a budget lasts."""

    def __init__(self, model: ExplainerModel | GenericModel, trace: Trace) -> None:
        self.model = model
        self.trace = _with_logits(trace)
        T = trace.n_tokens
        # the top prediction and the candidates from the trace as made: its next-token logits are the forward
        # pass's own, which the app's next-token list shows (and which pick the default target)
        try:
            first = model.attribute(trace, position=T - 1)
        except InputError as e:  # a model that cannot be attributed (a layer whose write is not a sum of parts)
            self.refused: str | None = str(e)
            self.record: dict[str, Any] = {"parts": [], "candidates": 0, "entries": [], "left_out": [],
                                           "refused": self.refused}
            return
        self.refused = None
        ids = torch.topk(trace.next_token_logits(), min(CANDIDATES, trace.config.vocab_size)).indices
        others = [i for i in ids.tolist() if i != first.target][:CANDIDATES - 1]
        last = [first] + [model.attribute(self.trace, i, position=T - 1) for i in others]
        # the entries at a position are in its order: the default target first
        self.record = {
            "parts": [[c.kind, c.layer, c.head] for c in first.components],
            "candidates": CANDIDATES,
            "entries": [_entry(a) for a in last],
            "left_out": list(range(T - 1)),
        }

    def fill(self, budget: int, between_passes: Callable[[], None] | None = None) -> int:
        """Add the earlier positions' entries, from the last backwards, while they fit in `budget` bytes;
        the bytes added. `between_passes` is called before each position's attribution."""
        used = 0
        left = self.record["left_out"]
        while left:
            if between_passes is not None:
                between_passes()
            e = _entry(self.model.attribute(self.trace, position=left[-1]))
            size = entry_bytes(e)
            if used + size > budget:
                break
            self.record["entries"].append(e)
            left.pop()
            used += size
        return used

    def left_bytes(self) -> int:
        """About what the positions left out would add (each as large as the last position's default entry)."""
        left = self.record["left_out"]
        return len(left) * entry_bytes(self.record["entries"][0]) if left else 0

    def omitted(self) -> list[str]:
        """What was left out, in the words of the snapshot's `omitted` list."""
        left = self.record["left_out"]
        if not left:
            return []
        return [f"attribution at position {left[0]}" if len(left) == 1
                else f"attribution at positions {left[0]}-{left[-1]}"]
