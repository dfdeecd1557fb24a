"""`record(model, input_ids)`: one forward of a transformers decoder, every stage the bridge sees recorded.

While a call is in flight the model runs attention through `te_record` (transformers' own eager function,
called through) and carries the bridge's dispatching hooks; when the last call on the model ends, its previous
attention implementation is set back and the hooks are removed, so the model's own forward is as before.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..errors import InputError
from . import attention
from .hooks import install
from .state import Call, Recorder, active
from .structure import Structure, find_structure
from .vocabulary import generic_block_name


@dataclass(frozen=True)
class LayerKind:
    """What one decoder layer is: its mixer kinds (e.g. ("attention",), ("linear_attention",)), its local
    window (keys a query reads, None for full attention or a layer that is not attention) and whether the
    recording found a resid_mid (a point between the mixing sublayer and the MLP)."""

    index: int
    kinds: tuple[str, ...]
    window: int | None
    has_resid_mid: bool


@dataclass(frozen=True)
class Recording:
    """What `record` returns: the values by name (batch dimension dropped) and what each layer is."""

    values: dict[str, torch.Tensor]
    layers: tuple[LayerKind, ...]


@dataclass
class _Session:
    structure: Structure
    users: int
    previous: str | None
    handles: list[RemovableHandle]


_LOCK = threading.Lock()
_SESSIONS: weakref.WeakKeyDictionary[nn.Module, _Session] = weakref.WeakKeyDictionary()


@contextmanager
def _session(model: nn.Module) -> Iterator[Structure]:
    """While any call records `model`: attention through te_record and the hooks installed; undone after the
    last one."""
    with _LOCK:
        s = _SESSIONS.get(model)
        if s is None:
            structure = find_structure(model)
            attention.register()
            previous = model.config._attn_implementation
            if previous != attention.ATTENTION_NAME:
                model.set_attn_implementation(attention.ATTENTION_NAME)
            s = _SESSIONS[model] = _Session(structure, 0, previous, install(model, structure))
        s.users += 1
    try:
        yield s.structure
    finally:
        with _LOCK:
            s.users -= 1
            if s.users == 0:
                for h in s.handles:
                    h.remove()
                if s.previous != attention.ATTENTION_NAME:
                    model.set_attn_implementation(s.previous)
                del _SESSIONS[model]


def _ids(input_ids: torch.Tensor | list[int], vocab: int | None, device: torch.device) -> torch.Tensor:
    ids = torch.as_tensor(input_ids, device=device)
    if ids.ndim == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.ndim != 1 or ids.numel() == 0 or ids.dtype in (torch.float16, torch.bfloat16, torch.float32,
                                                            torch.float64, torch.bool):
        raise InputError("The bridge records one sequence of token ids at a time (a non-empty list of integers).")
    if vocab is not None and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise InputError(f"A token id is outside the vocabulary, whose ids are 0..{vocab - 1}.")
    return ids.long()[None]


def resid_mid(calls: list[Call], mixers: set[str], mlp: str | None, resid_post: torch.Tensor) -> torch.Tensor | None:
    """The residual stream between a layer's mixing sublayer and its MLP, where the layer has one: the input X
    of a child called after the last mixer (up to the MLP itself) to which the layer adds the MLP's branch B
    (the output of the MLP or of a child called after it) to give Y (the input of a later child, or the layer's
    output), exactly: X + B == Y as the layer computes it. None for parallel sublayers or no MLP."""
    names = [c.name for c in calls]
    if mlp not in names or not any(n in mixers for n in names):
        return None
    last_mixer = max(j for j, n in enumerate(names) if n in mixers)
    at_mlp = names.index(mlp, last_mixer) if mlp in names[last_mixer:] else None
    if at_mlp is None:
        return None
    xs = [c.input for c in calls[last_mixer + 1: at_mlp + 1] if c.input is not None]
    for b_at in range(at_mlp, len(calls)):
        b = calls[b_at].output
        ys = [c.input for c in calls[b_at + 1:] if c.input is not None] + [resid_post]
        for x in xs:
            for y in ys:
                if b is not None and x.shape == b.shape == y.shape and torch.equal(x + b, y):
                    return x
    return None


def record(model: nn.Module, input_ids: torch.Tensor | list[int]) -> Recording:
    """Run `model` (a transformers `*ForCausalLM`, in eval mode) on one sequence and record every stage the
    bridge sees, under the project's names (`blocks.3.attn.pattern`, `blocks.3.resid_post`, `logits`).
    Safe to call from several threads at once on the same model."""
    ids = _ids(input_ids, getattr(model.config, "vocab_size", None), next(model.parameters()).device)
    with _session(model) as structure:
        rec = Recorder(owner=id(model), layer_of=structure.layer_of())
        with active(rec), torch.no_grad():
            out = model(input_ids=ids, use_cache=False)
    rec.values["logits"] = out.logits[0].detach()
    kinds = []
    for layer in structure.layers:
        post = rec.values.get(generic_block_name(layer.index, "resid_post"))
        mid = None if post is None else resid_mid(rec.calls.get(layer.index, []), set(layer.mixers), layer.mlp, post)
        if mid is not None:
            rec.put(layer.index, "resid_mid", mid)
        kinds.append(LayerKind(layer.index, layer.kinds, rec.windows.get(layer.index), mid is not None))
    return Recording(rec.values, tuple(kinds))
