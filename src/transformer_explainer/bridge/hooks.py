"""Forward hooks on a decoder's embedding, layers, their direct children and the unembedding.

The hooks are dispatchers: each looks up the recorder of the call running in its context (`state.current`)
and records only when that recorder records this model, so one set of hooks serves every call in flight
(`record` installs them when the first call on a model begins and removes them when the last one ends).

A call's patches are applied by the same hooks: a pre-hook returns the layer's arguments with its input
replaced (resid_pre), a hook returns a module's output with its first tensor replaced, the rest of a tuple kept
(attn_out, mlp_out, resid_post). A patch sees the value with its batch dimension, as the project's own engine's
patches do; what is recorded is the patched value, and everything downstream computes from it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from .state import Call, Recorder, current
from .structure import Layer, Structure, first_tensor
from .vocabulary import MIXER_PREFIX, generic_block_name


def _input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    return first_tensor(args) if args else first_tensor(kwargs.get("hidden_states"))


def _with_input(args: tuple[Any, ...], kwargs: dict[str, Any], new: torch.Tensor) -> tuple[tuple[Any, ...],
                                                                                         dict[str, Any]]:
    """The arguments with the tensor `_input` read replaced by `new`."""
    if args:
        j = next(j for j, a in enumerate(args) if isinstance(a, torch.Tensor))
        return (*args[:j], new, *args[j + 1:]), kwargs
    return args, {**kwargs, "hidden_states": new}


def _with_output(out: Any, new: torch.Tensor) -> Any:
    """A module's output with the tensor `first_tensor` read replaced by `new` (a tuple keeps its other items)."""
    if isinstance(out, torch.Tensor):
        return new
    j = next(j for j, o in enumerate(out) if isinstance(o, torch.Tensor))
    return type(out)([*out[:j], new, *out[j + 1:]])


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
    if structure.final_norm is not None:
        handles.append(structure.final_norm.register_forward_pre_hook(
            _final_norm_hook(owner, structure.layers[-1].index), with_kwargs=True))
    for layer in structure.layers:
        handles += _layer_hooks(owner, layer)
    return handles


def _final_norm_hook(owner: int, last: int) -> Any:
    """In a `lens` call (`residual_logits`): the final norm reads the call's residual stream instead of its own
    input, and the call notes whether that input was the last layer's output (what `lens` stands in for)."""

    def on_final_norm(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if (rec := _mine(owner)) is None or rec.lens is None or (t := _input(args, kwargs)) is None:
            return None
        rec.lens_calls += 1
        post = rec.values.get(generic_block_name(last, "resid_post"))
        rec.lens_follows = post is not None and post.shape == t[0].shape and torch.equal(t[0], post)
        return _with_input(args, kwargs, rec.lens)

    return on_final_norm


def _layer_hooks(owner: int, layer: Layer) -> list[RemovableHandle]:
    i = layer.index

    weight = next(layer.module.parameters(), None)
    device = None if weight is None else weight.device  # where the layer computes (a device map's part)

    def on_enter(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if (rec := _mine(owner)) is None or (t := _input(args, kwargs)) is None:
            return None
        if device is not None and t.device != device and device.type != "meta":
            # the stream arrives from the previous part's device: recorded where this layer reads it, as the
            # layer's own values are (accelerate's hook would move it there next)
            t = moved = t.to(device)
        else:
            moved = None
        new = rec.patch(i, "resid_pre", t)
        rec.put(i, "resid_pre", new[0])
        rec.calls[i] = []
        return None if new is t and moved is None else _with_input(args, kwargs, new)

    def on_exit(_m: nn.Module, _args: tuple[Any, ...], out: Any) -> Any:
        if (rec := _mine(owner)) is None or (t := first_tensor(out)) is None:
            return None
        new = rec.patch(i, "resid_post", t)
        rec.put(i, "resid_post", new[0])
        return None if new is t else _with_output(out, new)

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

    def on_exit(_m: nn.Module, _args: tuple[Any, ...], out: Any) -> Any:
        if (rec := _mine(owner)) is None:
            return None
        t = first_tensor(out)
        new = t
        if stages is not None and t is not None:
            new = rec.patch(i, stages[1], t) if stages[1] in ("attn_out", "mlp_out") else t
            rec.put(i, stages[1], new[0])
        calls = rec.calls.get(i)
        if calls and calls[-1].name == name and new is not None:
            calls[-1].output = new[0].detach()
        return None if new is t else _with_output(out, new)

    return [child.register_forward_pre_hook(on_enter, with_kwargs=True), child.register_forward_hook(on_exit)]
