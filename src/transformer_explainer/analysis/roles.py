"""Head roles: how much attention each head puts where a known kind of head would put it.

Each role is a (query, key) mask over a text; a head's score is its attention mass on the mask,
averaged over the query positions where the mask is not empty (1.0 = all attention goes there):

- previous_token: the key just before the query (positional heads);
- first_token: the first key (an "attention sink"; queries after the first);
- duplicate_token: earlier occurrences of the query's own token;
- induction: the token right after an earlier occurrence of the query's token (A B ... A -> B);
- rare_token: the rarest earlier token, excluding the first and the query itself, where at least
  two candidates exist. Rarity is a proxy: GPT-2-style BPE numbers tokens in merge order, and merges
  are learned most frequent first, so a higher id is, roughly, a rarer token. Pass `rarity` to use
  real frequencies.

A layer that mixes its tokens without attention (a model that runs through transformers: a short convolution, a
state-space or linear-attention layer) has no pattern and no heads to judge: its row is NaN (None in JSON).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..devices import float64_device
from ..engine import ExplainerModel
from ..names import block_name
from ..trace import Trace
from .attention_statistics import attention_layers, nan_rows
from .reference import REFERENCE_TEXTS, repeated_random_tokens

ROLES: tuple[str, ...] = ("previous_token", "first_token", "duplicate_token", "induction", "rare_token")


def trace_ids_full(trace: Trace, device: torch.device | str = "cpu") -> Tensor:
    """(S,) ids of every key position: the cached prefix, then the traced tokens."""
    return torch.tensor(list(trace.prefix_ids) + list(trace.token_ids), device=device)


def role_masks(ids: Tensor, start: int, rarity: Tensor | None = None) -> dict[str, Tensor]:
    """Role -> (T, S) bool mask for queries at positions start.. of the key ids `ids` (S,), on their device."""
    S, device = ids.shape[0], ids.device
    q = torch.arange(start, S, device=device).unsqueeze(1)  # (T, 1) absolute query positions
    k = torch.arange(S, device=device).unsqueeze(0)  # (1, S)
    q_ids = ids[start:].unsqueeze(1)
    before = k < q
    prev_ids = torch.cat([torch.full((1,), -1, device=device), ids[:-1]]).unsqueeze(0)  # id at key - 1; none for key 0
    r = (rarity.to(device)[ids] if rarity is not None else ids).to(torch.float64).unsqueeze(0)  # (1, S)
    candidate = (k >= 1) & before  # earlier keys, not the first, not the query itself
    r_cand = r.masked_fill(~candidate, float("-inf"))
    rarest = r_cand.max(dim=-1, keepdim=True).values
    return {
        "previous_token": k == q - 1,
        "first_token": (k == 0) & (q >= 1),
        "duplicate_token": (ids.unsqueeze(0) == q_ids) & before,
        "induction": (prev_ids == q_ids) & (k >= 1) & before,
        "rare_token": candidate & (r_cand == rarest) & (candidate.sum(-1, keepdim=True) >= 2),
    }


@dataclass(frozen=True)
class HeadRoles:
    """Role scores per head; NaN where the texts gave no query position to judge that role by, and in the rows of
    the layers without attention."""

    source: str  # "text" or "reference"
    scores: dict[str, Tensor]  # role -> (L, H)
    counts: dict[str, int]  # role -> how many query positions the scores average over

    def top(self, role: str, n: int = 5) -> list[tuple[int, int, float]]:
        """(layer, head, score) of the n highest-scoring heads for `role`."""
        m = self.scores[role]
        H = m.shape[1]
        flat = torch.nan_to_num(m.flatten(), nan=-1.0)
        idx = flat.argsort(descending=True)[:n].tolist()
        return [(i // H, i % H, float(m.flatten()[i])) for i in idx if flat[i] >= 0]

    def role_of(self, layer: int, head: int, threshold: float = 0.5) -> str | None:
        """The head's strongest role if its score reaches `threshold`, else None."""
        best = max(ROLES, key=lambda r: torch.nan_to_num(self.scores[r][layer, head], nan=-1.0).item())
        s = self.scores[best][layer, head].item()
        return best if s == s and s >= threshold else None

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "counts": self.counts,
                "scores": {r: nan_rows(m) for r, m in self.scores.items()}}


def _accumulate(traces: Iterable[Trace], rarity: Tensor | None) -> tuple[dict[str, Tensor], dict[str, int]]:
    sums: dict[str, Tensor] = {}
    counts = dict.fromkeys(ROLES, 0)
    for trace in traces:
        c = trace.config
        attends = set(attention_layers(c))
        ids = trace_ids_full(trace)
        masks: dict[torch.device, dict[str, Tensor]] = {}  # made once per device the blocks are on
        mass: dict[str, list[Tensor]] = {r: [] for r in ROLES}
        # each attention layer's pattern where it was computed, in float64 (on the CPU where a GPU lacks it)
        for i in range(c.n_layer):
            if i not in attends:  # a layer that mixes tokens another way: no pattern, no heads to judge
                for role in ROLES:
                    mass[role].append(torch.full((c.n_head,), float("nan"), dtype=torch.float64, device="cpu"))
                continue
            p = trace[block_name(i, "attn.pattern")]
            here = float64_device(p.device)
            if here not in masks:
                masks[here] = role_masks(ids.to(here), trace.start, rarity)
            pattern = p.to(here, torch.float64)  # (H, T, S)
            for role, m in masks[here].items():
                rows = m.any(dim=-1)  # (T,) queries where the role is defined
                mass[role].append((pattern * m).sum(dim=-1)[..., rows].sum(dim=-1).cpu())  # (H,)
        counted = masks[next(iter(masks))] if masks else role_masks(ids, trace.start, rarity)  # (no attention: CPU)
        for role, m in counted.items():
            total = torch.stack(mass[role])  # (L, H)
            sums[role] = sums[role] + total if role in sums else total
            counts[role] += int(m.any(dim=-1).sum())
    if not sums:
        raise ValueError("head roles need at least one trace")
    return sums, counts


def head_roles_of(traces: Iterable[Trace], *, source: str = "text", rarity: Tensor | None = None) -> HeadRoles:
    """Role scores pooled over several traces (each query position counts once)."""
    sums, counts = _accumulate(traces, rarity)
    scores = {r: (sums[r] / counts[r] if counts[r] else torch.full_like(sums[r], float("nan"))).float()
              for r in ROLES}
    return HeadRoles(source, scores, counts)


def head_roles(trace: Trace, *, rarity: Tensor | None = None) -> HeadRoles:
    """Role scores of every head on one traced text."""
    return head_roles_of([trace], source="text", rarity=rarity)


def reference_traces(model: ExplainerModel, texts: Iterable[str] = REFERENCE_TEXTS, *,
                     probe_length: int = 24, seed: int = 0) -> list[Trace]:
    """Traces of the reference sentences and of the repeated-random-tokens induction probe."""
    traces = [model.trace(t, truncate=True) for t in texts]
    if probe_length:
        n = max(2, min(probe_length, (model.context_length - 1) // 2))
        tok = model.tokenizer
        special = {i for i in (tok.bos_id, *tok.eos_ids()) if i is not None}
        ids = repeated_random_tokens(model.config.vocab_size, n, seed=seed, bos=tok.start_id(), exclude=special)
        traces.append(model.trace_ids(ids))
    return traces


def reference_head_roles(model: ExplainerModel, texts: Iterable[str] = REFERENCE_TEXTS, *,
                         probe_length: int = 24, seed: int = 0, rarity: Tensor | None = None) -> HeadRoles:
    """Role scores pooled over the built-in reference sentences and the induction probe."""
    traces = reference_traces(model, texts, probe_length=probe_length, seed=seed)
    return head_roles_of(traces, source="reference", rarity=rarity)
