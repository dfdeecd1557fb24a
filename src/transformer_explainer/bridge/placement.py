"""Device maps for a decoder that runs through transformers: our parts (embed, blocks.L, ln_final, unembed; see
`models.placement`) as the model's own modules, placed by transformers' `from_pretrained(device_map=...)` through
accelerate.

A part is a module the bridge finds (`structure.find_structure`): the embedding, each decoder layer (never split),
the final norm, the unembedding. Everything else the model holds (the rotary embedding, Gemma 4's per-layer
embeddings) goes where the embedding goes. The map given to transformers names every module by its own name with a
`torch.device`, not accelerate's strings: accelerate offloads a part mapped to the string "cpu" when a GPU is in the
map (its weights copied to the GPU at each pass, its parameters left on the meta device), whereas a part on
torch.device("cpu") runs on the CPU where its weights are, as our own families' parts do; each part computes where
its weights are, and accelerate's hooks move the residual stream between them.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ..errors import InputError
from ..models.placement import (
    DeviceMap,
    MapValue,
    accelerate_budget,
    check_tied,
    devices_of,
    expand_parts,
    import_accelerate,
)
from ..names import block_part
from .structure import find_structure


def part_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Our part names -> the modules of `model` (a transformers `*ForCausalLM`, on any device, meta included), in
    the order of the computation."""
    s = find_structure(model)
    parts = {"embed": s.embedding, **{block_part(layer.index): layer.module for layer in s.layers}}
    if s.final_norm is not None:
        parts["ln_final"] = s.final_norm
    parts["unembed"] = s.unembedding
    return parts


def _qualified(model: nn.Module) -> dict[int, str]:
    return {id(m): name for name, m in model.named_modules(remove_duplicate=False)}


def auto_map(model: nn.Module, dtype: torch.dtype,
             max_memory: Mapping[int | str, int | str] | None) -> dict[str, MapValue]:
    """accelerate's map (`infer_auto_device_map`, GPUs first in order, then the CPU, then the disk, within
    `max_memory` per device; None: what each device has free now) for `model` built on the meta device, with each
    decoder layer unsplit, by our part names (accelerate's device values: GPU numbers, "cpu", "disk")."""
    accelerate = import_accelerate()
    parts = part_modules(model)
    names = _qualified(model)
    no_split = sorted({type(m).__name__ for p, m in parts.items() if p.startswith("blocks.")} |
                      set(getattr(model, "_no_split_modules", None) or ()))
    budget = None if max_memory is None else accelerate_budget(max_memory)
    try:
        raw = accelerate.infer_auto_device_map(model, max_memory=budget, no_split_module_classes=no_split, dtype=dtype)
    except ValueError as e:  # a size accelerate cannot read
        raise InputError(f"max memory: {e}") from None
    out: dict[str, MapValue] = {}
    for part, module in parts.items():
        q = names[id(module)]
        keys = [k for k in raw if k == "" or q == k or q.startswith(k + ".")]
        if not keys:  # accelerate split the part (a model whose layers it does not know whole): not run here
            raise InputError(f"accelerate's map splits {part} ({q}) across devices; give a map of whole parts")
        out[part] = raw[max(keys, key=len)]
    return out


def module_map(model: nn.Module, placement: DeviceMap) -> dict[str, torch.device]:
    """The map transformers takes (module name -> device) for our `placement` of every part: each part's module,
    and every other module or parameter where the embedding is, named as the model names them."""
    parts = part_modules(model)
    names = _qualified(model)
    where = {id(m): placement[p] for p, m in parts.items()}
    rest = placement["embed"]
    holds_part: set[int] = set()
    for name, module in model.named_modules():
        if id(module) in where:
            prefix = ""
            for piece in name.split(".")[:-1] if name else []:  # every module above a part holds one
                prefix = f"{prefix}.{piece}" if prefix else piece
                holds_part.add(id(model.get_submodule(prefix)))
            holds_part.add(id(model))
    out: dict[str, torch.device] = {}

    def visit(module: nn.Module) -> None:
        name = names[id(module)]
        if id(module) in where:
            out[name] = where[id(module)]
        elif id(module) not in holds_part:
            if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
                out[name] = rest
        else:
            for key, t in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
                if t is not None:
                    out[f"{name}.{key}" if name else key] = rest
            for child in module.children():
                visit(child)

    visit(model)
    return out


def generic_placement(model: nn.Module, given: str | Mapping[str, MapValue], dtype: torch.dtype,
                      max_memory: Mapping[int | str, int | str] | None) -> DeviceMap:
    """Each part's device for `model` (built on the meta device) from `given`: "auto" (accelerate's map within
    `max_memory`) or a map of our part names (prefixes allowed: "blocks", ""); refused in one sentence: a part
    left for the disk, a device this machine lacks, a name that is no part of the model, a tied embedding and
    unembedding on two devices."""
    if given == "auto":
        expanded = expand_parts(list(part_modules(model)), auto_map(model, dtype, max_memory))
    elif isinstance(given, str):
        raise InputError(f"device map {given!r}: use 'auto' or a mapping of parts to devices")
    elif not isinstance(given, Mapping):
        raise InputError(f"a device map is 'auto' or a mapping of parts to devices, not {given!r}")
    else:
        expanded = expand_parts(list(part_modules(model)), given)
    check_tied(model.get_input_embeddings().weight is model.get_output_embeddings().weight, expanded)
    return devices_of(expanded)


def current_placement(model: nn.Module) -> DeviceMap:
    """Where each part of a loaded `model` is now (the device of its first weight)."""
    out = {}
    for part, module in part_modules(model).items():
        first = next(module.parameters(), None)
        out[part] = first.device if first is not None else next(model.parameters()).device
    return out
