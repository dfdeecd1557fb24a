"""The recording attention function, registered with transformers' `AttentionInterface` as `te_record`.

A model whose `attn_implementation` is `te_record` calls `record_attention` where it would call an attention
kernel. It calls through to the model's own eager function (`eager_attention_forward` of the module's own
modeling file: a sink, a soft cap or any other change a family makes to eager attention is the family's own
code), returns what that returns, and, when a recorder is current, records from the same call: the queries,
keys and values it was given (after the model's norms and rotations), the mask as applied, the scores the
softmax reads (`memo.values.applied_scores`, with the scale and soft cap of the call, which it notes: unless the
caller leaves them out to derive them on access), the pattern eager returns, z (pattern @ V per head: unless the
caller leaves it out, to derive it by `memo.values.attention_z`, and no patch replaced it) and a sink's logit and
weight. The values are the tensors eager computed or was given (views, not copies).

A call's patch of `blocks.L.attn.z` replaces z there, before the module's output projection reads it: the patch
sees z with its batch dimension, (1, H, T, Dv) (as the project's own engine's patches see it), and what is
recorded is what it returns.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

from ..errors import CheckpointError
from ..memo.values import applied_scores
from .state import Recorder, current
from .vocabulary import generic_block_name

ATTENTION_NAME = "te_record"


@functools.cache
def _eager_of(cls: type) -> Callable[..., tuple[torch.Tensor, torch.Tensor | None]]:
    """The eager attention function of the modeling file that defines `cls`."""
    for klass in cls.__mro__:
        fn = getattr(sys.modules.get(klass.__module__), "eager_attention_forward", None)
        if callable(fn):
            return fn
    raise CheckpointError(f"{cls.__name__} has no eager attention function in transformers to record through.")


def record_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The model's own eager attention, recording its inputs and results into the current recorder."""
    out, weights = _eager_of(type(module))(module, query, key, value, attention_mask, **kwargs)  # out: (1, T, H, Dv)
    rec = current()
    if rec is not None:
        if rec.patches and (mine := rec.layer_of.get(id(module))) is not None:
            z = out.transpose(1, 2)  # (1, H, T, Dv)
            new = rec.patch(mine, "attn.z", z)
            if new is not z:
                out = new.transpose(1, 2).contiguous()
        layer = rec_layer(rec, module)
        if layer is not None:
            _record(rec, layer, module, query, key, value, attention_mask, kwargs, out, weights)
    return out, weights


def rec_layer(rec: Recorder, module: torch.nn.Module) -> int | None:
    """The layer index of an attention module in the recorded model (the recorder's map, then `layer_idx`)."""
    layer = rec.layer_of.get(id(module))
    return layer if layer is not None else getattr(module, "layer_idx", None)


def _record(rec: Recorder, layer: int, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
            value: torch.Tensor, mask: torch.Tensor | None, kwargs: dict[str, Any], out: torch.Tensor,
            weights: torch.Tensor | None) -> None:
    q, k, v = query[0], key[0], value[0]  # (H, T, Dh), (G, S, Dh), (G, S, Dv)
    scaling = kwargs.get("scaling")
    if scaling is None:
        scaling = getattr(module, "scaling", None) or q.shape[-1] ** -0.5
    softcap = kwargs.get("softcap") or None
    applied = None
    if mask is not None:
        applied = mask[0, 0, :, : k.shape[-2]] if mask.dtype != torch.bool else torch.where(
            mask[0, 0, :, : k.shape[-2]], 0.0, torch.finfo(q.dtype).min).to(q.dtype)
        rec.put(layer, "attn.mask", applied)
    rec.put(layer, "attn.q", q)
    rec.put(layer, "attn.k", k)
    rec.put(layer, "attn.v", v)
    rec.scales[layer] = (float(scaling), None if softcap is None else float(softcap))
    sinks = kwargs.get("s_aux", getattr(module, "sinks", None))
    sinks = sinks if isinstance(sinks, torch.Tensor) and weights is not None else None
    scores = None
    if "attn.masked_scores" not in rec.leave_out or sinks is not None:
        scores = applied_scores(q, k, applied, *rec.scales[layer])
    if "attn.masked_scores" not in rec.leave_out:
        rec.put(layer, "attn.masked_scores", scores)
    if weights is None or "attn.z" not in rec.leave_out or generic_block_name(layer, "attn.z") in rec.applied:
        rec.put(layer, "attn.z", out[0].transpose(0, 1))  # else derived: memo.values.attention_z(pattern, v)
    if weights is not None:
        rec.put(layer, "attn.pattern", weights[0])
    if sinks is not None and scores is not None:
        rec.put(layer, "attn.sink", sinks)
        rec.put(layer, "attn.sink_weight", sink_weight(scores, sinks))
    rec.windows[layer] = kwargs.get("sliding_window", getattr(module, "sliding_window", None))


def sink_weight(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """(H, T): the sink's column of the softmax over the keys' scores (H, T, S) and each head's sink logit (H,), by
    eager's arithmetic (the row's maximum subtracted, then the softmax): the column eager computes and drops. Not
    1 - the pattern's row sum, which loses a weight below float32's rounding of 1 (it read -1.2e-7 for one)."""
    column = sinks.to(scores.dtype).reshape(-1, 1, 1).expand(-1, scores.shape[1], 1)
    combined = torch.cat([scores, column], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    return torch.softmax(combined, dim=-1, dtype=combined.dtype)[..., -1]


def register() -> str:
    """Register `te_record` (and the eager mask it reads) with transformers; idempotent. Returns the name."""
    AttentionInterface.register(ATTENTION_NAME, record_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION_NAME, eager_mask)
    return ATTENTION_NAME
