"""Forward hooks on a decoder's embedding, layers, their direct children and the unembedding.

The hooks are dispatchers: each looks up the recorder of the call running in its context (`state.current`)
and records only when that recorder records this model, so one set of hooks serves every call in flight
(`record` installs them when the first call on a model begins and removes them when the last one ends).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from .state import Call, Recorder, current
from .structure import Layer, Structure, first_tensor
from .vocabulary import MIXER_PREFIX


def _input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    return first_tensor(args) if args else first_tensor(kwargs.get("hidden_states"))


def _mine(owner: int) -> Recorder | None:
    rec = current()
    return rec if rec is not None and rec.owner == owner else None


def install(model: nn.Module, structure: Structure) -> list[RemovableHandle]:
    """Install the dispatching hooks on `model`'s parts; returns their handles (remove them to undo)."""
    owner = id(model)
    handles: list[RemovableHandle] = []

    def on_embedding(_m: nn.Module, _args: tuple[Any, ...], out: Any) -> None:
        if (rec := _mine(owner)) is not None and (t := first_tensor(out)) is not None:
            rec.values["embed.token"] = t[0].detach()

    def on_unembedding(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if (rec := _mine(owner)) is not None and (t := _input(args, kwargs)) is not None:
            rec.values["ln_final.out"] = t[0].detach()

    handles.append(structure.embedding.register_forward_hook(on_embedding))
    handles.append(structure.unembedding.register_forward_pre_hook(on_unembedding, with_kwargs=True))
    for layer in structure.layers:
        handles += _layer_hooks(owner, layer)
    return handles


def _layer_hooks(owner: int, layer: Layer) -> list[RemovableHandle]:
    i = layer.index

    def on_enter(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if (rec := _mine(owner)) is not None and (t := _input(args, kwargs)) is not None:
            rec.put(i, "resid_pre", t[0])
            rec.calls[i] = []

    def on_exit(_m: nn.Module, _args: tuple[Any, ...], out: Any) -> None:
        if (rec := _mine(owner)) is not None and (t := first_tensor(out)) is not None:
            rec.put(i, "resid_post", t[0])

    handles = [layer.module.register_forward_pre_hook(on_enter, with_kwargs=True),
               layer.module.register_forward_hook(on_exit)]
    for name, child in layer.module.named_children():
        handles += _child_hooks(owner, layer, name, child)
    return handles


def _child_hooks(owner: int, layer: Layer, name: str, child: nn.Module) -> list[RemovableHandle]:
    i = layer.index
    kind = layer.mixers.get(name)
    if name == layer.mlp:
        stages: tuple[str | None, str] | None = (None, "mlp_out")
    elif kind == "attention":
        stages = (None, "attn_out")
    elif kind is not None:
        stages = (f"{MIXER_PREFIX[kind]}.in", f"{MIXER_PREFIX[kind]}.out")
    else:
        stages = None

    def on_enter(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if (rec := _mine(owner)) is None:
            return
        t = _input(args, kwargs)
        rec.calls.setdefault(i, []).append(Call(name, None if t is None else t[0].detach()))
        if stages is not None and stages[0] is not None and t is not None:
            rec.put(i, stages[0], t[0])

    def on_exit(_m: nn.Module, _args: tuple[Any, ...], out: Any) -> None:
        if (rec := _mine(owner)) is None:
            return
        t = first_tensor(out)
        calls = rec.calls.get(i)
        if calls and calls[-1].name == name and t is not None:
            calls[-1].output = t[0].detach()
        if stages is not None and t is not None:
            rec.put(i, stages[1], t[0])

    return [child.register_forward_pre_hook(on_enter, with_kwargs=True), child.register_forward_hook(on_exit)]
