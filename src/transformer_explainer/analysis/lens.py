"""Logit lens: what the model would predict if it stopped after each block.

The residual stream entering block i (and the final block's output) goes through the final norm
(GPT-2's LayerNorm, the Llama family's RMSNorm) and the unembedding, exactly as the real output does;
the lens of the last block's output is therefore the model's logits. A decoder that runs through transformers
(`generic.GenericModel`) does this by its own code (`residual_logits`), its head's scalings and caps included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..engine import ExplainerModel
from ..errors import InputError
from ..generic import GenericModel
from ..names import block_name
from ..trace import Trace


def residual_names(n_layer: int) -> list[str]:
    """The L + 1 residual-stream points the lens reads: each block's input, then the last output."""
    return [block_name(i, "resid_pre") for i in range(n_layer)] + [block_name(n_layer - 1, "resid_post")]


def residual_labels(n_layer: int) -> list[str]:
    return ["embeddings"] + [f"after block {i}" for i in range(n_layer)]


def _positions(trace: Trace, positions: Sequence[int] | None) -> list[int]:
    """Indexes into the traced positions; negative ones count from the end."""
    T = trace.n_tokens
    if positions is None:
        return list(range(T))
    out = []
    for p in positions:
        if not -T <= p < T:
            raise InputError(f"position {p} is outside the {T} traced tokens", code="position_out_of_range",
                             position=p, tokens=T)
        out.append(p % T)
    return out


@torch.inference_mode()
def lens_logits(model: ExplainerModel | GenericModel, trace: Trace, layer: int,
                positions: Sequence[int] | None = None) -> Tensor:
    """(P, V) logits read from residual point `layer` (0 = embeddings, L = the final output).

    With all positions (the default) the arithmetic is the forward pass's own, so layer L gives
    `trace["logits"]` bit for bit; a subset of positions agrees to float rounding. A model that runs through
    transformers (`GenericModel`) reads x through its own final norm and head (`bridge.residual_logits`: whatever
    it does after the unembedding too), each position as a sequence of one, so layer L gives its logits to float
    rounding.
    """
    L = model.config.n_layer
    if not 0 <= layer <= L:
        raise InputError(f"lens layer {layer} is outside 0..{L} (0 = embeddings, {L} = the output)",
                         code="layer_out_of_range", layer=layer, max=L)
    x = trace[residual_names(L)[layer]]  # (T, D)
    if positions is not None:
        x = x[_positions(trace, positions)]
    # the forward pass's own kernels, so the final lens equals the logits exactly rather than to rounding
    return model.residual_logits(x)


@dataclass(frozen=True)
class LogitLens:
    """Per residual point (rows) and chosen position (columns): the top tokens, and how the finally
    predicted token (or another chosen target) ranks."""

    names: list[str]  # L + 1 residual names
    labels: list[str]  # "embeddings", "after block 0", ...
    positions: list[int]  # indexes into the trace's tokens
    tokens: list[str]  # the token at each position
    top_ids: Tensor  # (L+1, P, k) most likely next tokens
    top_probs: Tensor  # (L+1, P, k) their softmax probabilities
    target_ids: list[int]  # (P,) the token each column is scored for
    target_rank: Tensor  # (L+1, P) 1 = the lens's top prediction
    target_prob: Tensor  # (L+1, P)
    token_text: dict[int, str]  # id -> readable text, for every id above

    def top_tokens(self, layer: int, position: int = -1) -> list[tuple[str, float]]:
        """(token, probability) pairs at one residual point and one column (default the last)."""
        ids, probs = self.top_ids[layer, position].tolist(), self.top_probs[layer, position].tolist()
        return [(self.token_text[i], p) for i, p in zip(ids, probs, strict=True)]

    def to_dict(self) -> dict[str, Any]:
        layers = []
        for li, (name, label) in enumerate(zip(self.names, self.labels, strict=True)):
            cols = []
            for pi, pos in enumerate(self.positions):
                ids = self.top_ids[li, pi].tolist()
                cols.append({
                    "position": pos,
                    "top": [{"token": self.token_text[i], "id": i, "prob": p}
                            for i, p in zip(ids, self.top_probs[li, pi].tolist(), strict=True)],
                    "target_rank": int(self.target_rank[li, pi]),
                    "target_prob": float(self.target_prob[li, pi]),
                })
            layers.append({"name": name, "label": label, "positions": cols})
        return {
            "positions": self.positions,
            "position_tokens": self.tokens,
            "targets": [{"token": self.token_text[i], "id": i} for i in self.target_ids],
            "layers": layers,
        }


@torch.inference_mode()
def logit_lens(model: ExplainerModel | GenericModel, trace: Trace, *, top: int = 5,
               positions: Sequence[int] | None = None, target_ids: Sequence[int] | None = None) -> LogitLens:
    """The logit lens of a trace at every residual point.

    `positions`: which traced positions to keep (default all; each costs L + 1 unembeddings).
    `target_ids`: the token to follow at each kept position; default the one the model finally
    predicts there (the argmax of its logits).
    """
    L, V = model.config.n_layer, model.config.vocab_size
    if top < 1:
        raise InputError(f"top must be at least 1, got {top}", code="count_too_small", field="top", value=top)
    top = min(top, V)
    pos = _positions(trace, positions)
    per_layer = [lens_logits(model, trace, i, positions) for i in range(L + 1)]
    logits = torch.stack(per_layer)  # (L+1, P, V)
    if target_ids is None:
        target = logits[L].argmax(dim=-1)  # (P,)
    else:
        if len(target_ids) != len(pos):
            raise InputError(f"{len(target_ids)} target tokens for {len(pos)} positions")
        bad = [t for t in target_ids if not 0 <= t < V]
        if bad:
            raise InputError(f"target token id {bad[0]} is outside the vocabulary (0..{V - 1})",
                             code="token_id_out_of_range", id=bad[0], max=V - 1)
        target = torch.tensor(list(target_ids), device=logits.device)
    probs = torch.softmax(logits.float(), dim=-1)
    top_probs, top_ids = probs.topk(top, dim=-1)
    idx = target.view(1, -1, 1).expand(L + 1, -1, 1)
    target_logit = logits.gather(-1, idx)  # (L+1, P, 1)
    rank = (logits > target_logit).sum(dim=-1) + 1
    target_prob = probs.gather(-1, idx)[..., 0]
    ids = set(top_ids.flatten().tolist()) | set(target.tolist())
    return LogitLens(
        names=residual_names(L),
        labels=residual_labels(L),
        positions=pos,
        tokens=[trace.tokens[p] for p in pos],
        top_ids=top_ids,
        top_probs=top_probs,
        target_ids=target.tolist(),
        target_rank=rank,
        target_prob=target_prob,
        token_text={i: model.tokenizer.token_text(i) for i in sorted(ids)},
    )
