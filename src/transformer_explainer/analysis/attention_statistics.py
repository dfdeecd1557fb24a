"""Attention statistics per head: how spread out its attention is, and how far back it looks. A layer that mixes
its tokens without attention (a model that runs through transformers: a short convolution, a state-space or
linear-attention layer) has no pattern to read: its row is NaN (None in JSON)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..devices import float64_device
from ..names import block_name
from ..trace import Trace


def attention_layers(config: Any) -> tuple[int, ...]:
    """The layers with an attention pattern: those a config lists (`generic.GenericConfig.attention_layers`: a
    model that runs through transformers may mix tokens another way in some layers), every layer of a config that
    lists none (our own families attend in every block)."""
    layers = getattr(config, "attention_layers", None)
    return tuple(range(config.n_layer)) if layers is None else tuple(layers)


def nan_rows(m: Tensor) -> list[list[float | None]]:
    """An (L, H) map as JSON rows, NaN (a layer without attention, or nothing to average) as None."""
    return [[None if v != v else v for v in row] for row in m.tolist()]


@dataclass(frozen=True)
class AttentionStats:
    """Averages over the query positions that can see at least two keys (the first sees only itself); NaN rows
    for the layers without attention."""

    entropy: Tensor  # (L, H) nats; 0 = all attention on one key
    normalized_entropy: Tensor  # (L, H) entropy / log(visible keys); 1 = uniform over what it can see
    mean_distance: Tensor  # (L, H) attention-weighted query - key distance, in tokens
    queries: int  # how many query positions were averaged

    def to_dict(self) -> dict[str, Any]:
        return {"entropy": nan_rows(self.entropy), "normalized_entropy": nan_rows(self.normalized_entropy),
                "mean_distance": nan_rows(self.mean_distance), "queries": self.queries}


def attention_stats(traces: Trace | Sequence[Trace]) -> AttentionStats:
    """Entropy and mean attention distance of every head, pooled over one or more traces (NaN rows for the layers
    without attention)."""
    if isinstance(traces, Trace):
        traces = [traces]
    ent = norm = dist = None
    n = 0
    for trace in traces:
        c = trace.config
        S = trace.start + trace.n_tokens
        if S < 2:  # only the first query, which sees one key
            continue
        attends = set(attention_layers(c))
        nan = (torch.full((c.n_head,), math.nan, dtype=torch.float64, device="cpu"),) * 3  # as _layer_stats returns
        per_layer = [_layer_stats(trace[block_name(i, "attn.pattern")], trace.start) if i in attends else nan
                     for i in range(c.n_layer)]
        e, ne, di = (torch.stack([s[j] for s in per_layer]) for j in range(3))  # (L, H) each
        ent, norm, dist = (e, ne, di) if ent is None else (ent + e, norm + ne, dist + di)
        n += S - max(trace.start, 1)
    if ent is None:
        nan = torch.full((traces[0].config.n_layer, traces[0].config.n_head), math.nan, device="cpu")
        return AttentionStats(nan, nan.clone(), nan.clone(), 0)
    return AttentionStats((ent / n).float(), (norm / n).float(), (dist / n).float(), n)


def _layer_stats(pattern: Tensor, start: int) -> tuple[Tensor, Tensor, Tensor]:
    """One block's (H, T, S) pattern: the entropy, normalised entropy and distance summed over its queries that see at
    least two keys, in float64 where the pattern is (on the CPU for a GPU without float64); (H,) each, on the CPU."""
    here = float64_device(pattern.device)
    S = pattern.shape[-1]
    q = torch.arange(start, S, device=here)  # absolute query positions
    rows = q >= 1
    p = pattern.to(here, torch.float64)[:, rows, :]
    q = q[rows]
    plogp = torch.where(p > 0, p * p.clamp_min(1e-300).log(), torch.zeros((), dtype=p.dtype, device=here))
    h = -plogp.sum(-1)  # (H, T')
    visible = (q + 1).double()
    d = (p * (q.unsqueeze(1) - torch.arange(S, device=here)).clamp_min(0).double()).sum(-1)
    return h.sum(-1).cpu(), (h / visible.log()).sum(-1).cpu(), d.sum(-1).cpu()
