"""Where each part of a decoder lives: one device for the whole model, or a device map of whole parts
(the embedding, each block, the final norm, the unembedding), such as accelerate's big-model inference
makes for a model larger than one GPU: the first blocks on the GPU while they fit, the rest on the CPU.

A map names our top-level modules, or prefixes of them ("blocks" for every block, "" for everything);
values are GPU numbers (0, 1, ...), "cuda:N", "mps" or "cpu". Each part computes where its weights are:
the forward moves the residual stream to each block's device (`Decoder.forward`), so a trace's values stay
where they were computed. A part is never split (`Block` is accelerate's no-split class), and a map that
would leave blocks for the disk is refused: every block here runs on a device with its weights in memory.

`infer_device_map` asks accelerate (`infer_auto_device_map`, with `max_memory` per device), `place_` moves
the weights. accelerate is optional (`pip install 'transformer-explainer[accelerate]'`) and imported only
for an automatic map: it takes seconds to import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from ..devices import resolve_device
from ..errors import InputError
from ..names import block_part
from .decoder import Decoder, device_of

DeviceMap = dict[str, torch.device]  # our top-level module name ("embed", "blocks.3", ...) -> its device
MapValue = int | str | torch.device

# accelerate compares tied parameters' names by substring, and "embed." is inside "unembed.weight.": its map is
# inferred on the same modules under names that contain no other (ours are the trace's and stay)
_ACCELERATE_NAMES = {"embed": "wte", "unembed": "lm_head"}


def part_names(net: Decoder) -> list[str]:
    """The parts a map places, in the order of the computation."""
    names = ["embed"] + (["pos_embed"] if net.pos_embed is not None else [])
    return names + [block_part(i) for i in range(net.config.n_layer)] + ["ln_final", "unembed"]


def current_map(net: Decoder) -> DeviceMap:
    """Where each part is now."""
    return {name: device_of(net.get_submodule(name)) for name in part_names(net)}


def accelerate_budget(max_memory: Mapping[int | str, int | str]) -> dict[int | str, int | str]:
    """accelerate's `max_memory` keys from ours: a GPU's number (0 or "0" or "cuda:0"), "cpu", "mps"."""
    out: dict[int | str, int | str] = {}
    for key, size in max_memory.items():
        k = key if isinstance(key, int) else str(key).strip().lower().removeprefix("cuda:")
        if isinstance(k, str) and k.isdigit():
            k = int(k)
        if isinstance(k, bool) or (isinstance(k, int) and k < 0) or (isinstance(k, str) and k not in ("cpu", "mps")):
            raise InputError(f"max memory names the device {key!r}: use a GPU's number (0, 1, ...), cuda:N, cpu or mps")
        out[k] = size
    return out


def check_budget(max_memory: Mapping[int | str, int | str]) -> None:
    """Refuse a budget for a device this machine does not have (before accelerate would skip it with a warning)."""
    for key in accelerate_budget(max_memory):
        resolve_device(f"cuda:{key}" if isinstance(key, int) else key)


def import_accelerate():
    try:
        import accelerate
    except ModuleNotFoundError:
        raise InputError("an automatic device map needs accelerate: pip install 'transformer-explainer[accelerate]'"
                         ) from None
    return accelerate


def infer_device_map(net: Decoder, dtype: torch.dtype, max_memory: Mapping[int | str, int | str] | None = None
                     ) -> dict[str, int | str]:
    """accelerate's map of whole parts for `net` (on any device, meta included) in `dtype`, within `max_memory`
    per device (None: what each device has free now): GPUs first, in order, then the CPU, then the disk.
    Returned for every part by our names, with accelerate's device values (GPU numbers, "cpu", "mps", "disk");
    nothing is checked against this machine (`resolve_map` does that)."""
    accelerate = import_accelerate()
    proxy = nn.Module()
    for name, module in net.named_children():
        proxy.add_module(_ACCELERATE_NAMES.get(name, name), module)
    budget = None if max_memory is None else accelerate_budget(max_memory)
    try:
        raw = accelerate.infer_auto_device_map(proxy, max_memory=budget, no_split_module_classes=["Block"],
                                               dtype=dtype)
    except ValueError as e:  # a size accelerate cannot read
        raise InputError(f"max memory: {e}") from None
    back = {v: k for k, v in _ACCELERATE_NAMES.items()}
    ours = {}
    for key, device in raw.items():
        top, dot, rest = key.partition(".")
        if top in net._modules and not any(True for _ in net.get_submodule(top).parameters()):
            continue  # a part without weights (the dropout) runs wherever its input is
        ours[back.get(top, top) + dot + rest] = device
    return expand_map(net, ours)


def expand_map(net: Decoder, given: Mapping[str, MapValue]) -> dict[str, MapValue]:
    """The device of every part from a map that may name prefixes ("blocks", ""): the longest key that is a part's
    name or a prefix of it decides. A key inside a part (a block's attention), or that names nothing, is refused."""
    return expand_parts(part_names(net), given)


def expand_parts(parts: Sequence[str], given: Mapping[str, MapValue]) -> dict[str, MapValue]:
    """`expand_map` over the part names `parts` (ours: embed, blocks.0 ..., ln_final, unembed), whatever the model."""
    for key in given:
        if not isinstance(key, str):
            raise InputError(f"the device map names {key!r}: its keys are the model's parts, such as "
                             f"{_in_words(parts)}")
        if key and not any(p == key or p.startswith(key + ".") for p in parts):
            inside = next((p for p in parts if key.startswith(p + ".")), None)
            if inside is not None:
                raise InputError(f"the device map names {key!r}, a piece of {inside!r}: it places whole parts "
                                 f"(the embedding, each block, the final norm, the unembedding)")
            raise InputError(f"the device map names {key!r}, which is no part of this model; the parts are "
                             f"{_in_words(parts)}")
    out = {}
    for part in parts:
        keys = [k for k in given if k == "" or part == k or part.startswith(k + ".")]
        if not keys:
            raise InputError(f"the device map does not say where {part!r} goes")
        out[part] = given[max(keys, key=len)]
    return out


def _in_words(parts: Sequence[str]) -> str:
    """e.g. "embed, pos_embed, blocks.0 ... blocks.11, ln_final and unembed"."""
    blocks = [i for i, p in enumerate(parts) if p.startswith("blocks.")]
    words = list(parts)
    if len(blocks) > 1:
        words[blocks[0]:blocks[-1] + 1] = [f"{parts[blocks[0]]} ... {parts[blocks[-1]]}"]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def devices_of(expanded: Mapping[str, MapValue]) -> DeviceMap:
    """Each part's device, checked against this machine; a part left for the disk is refused."""
    named = {part: _name(value) for part, value in expanded.items()}
    for part, name in named.items():
        if name == "disk":
            raise InputError(f"the model does not fit in the memory given: from {part} on, its parts would be "
                             f"offloaded to the disk, which this explainer does not do; give the GPUs or the CPU "
                             f"more memory (--max-memory), or load the model in bfloat16")
    return {part: resolve_device(name) for part, name in named.items()}


def resolve_map(net: Decoder, given: Mapping[str, MapValue]) -> DeviceMap:
    """`given` (see `expand_map`) with each device checked against this machine; a part left for the disk is
    refused, and so are a tied embedding and unembedding on two devices."""
    expanded = expand_map(net, given)
    check_tied(net.config.tie_word_embeddings, expanded)
    return devices_of(expanded)


def check_tied(tied: bool, expanded: Mapping[str, MapValue]) -> None:
    """Refuse a tied embedding and unembedding (one matrix) on two devices."""
    embed, unembed = _name(expanded["embed"]), _name(expanded["unembed"])
    if tied and embed != unembed and "disk" not in (embed, unembed):
        raise InputError(f"the token embedding and the unembedding share one matrix (tied), so they must be on one "
                         f"device, not {embed} and {unembed}")


def _name(value: MapValue) -> str:
    """A map's device value as a device name: a GPU's number is cuda:N."""
    if isinstance(value, bool) or not isinstance(value, int | str | torch.device):
        raise InputError(f"a device map's value is a GPU's number or a device's name, got {value!r}")
    if isinstance(value, int):
        return f"cuda:{value}"
    return str(value).strip().lower()


def place_(net: Decoder, device_map: DeviceMap) -> Decoder:
    """Move each part's weights to its device in `device_map` (every part named; devices as given, unchecked).
    Parameters are replaced, not copied into, so that a tied matrix stays one tensor (as accelerate's
    `set_module_tensor_to_device` does); strides are kept (the input-major layout of `kernels.inference_layout_`).
    The rotary frequencies go where the embedding is: the rotations are computed there, then moved to each block."""
    moved: dict[int, nn.Parameter] = {}
    with torch.no_grad():
        for part in part_names(net):
            device = device_map[part]
            for module in net.get_submodule(part).modules():
                for key, p in list(module._parameters.items()):
                    if p is None or p.device == device:
                        continue
                    if id(p) not in moved:
                        moved[id(p)] = nn.Parameter(p.to(device), requires_grad=p.requires_grad)
                    module._parameters[key] = moved[id(p)]
                for key, b in list(module._buffers.items()):
                    if b is not None:
                        module._buffers[key] = b.to(device)
        first = device_map["embed"]
        net.inv_freq = {kind: f.to(first) for kind, f in net.inv_freq.items()}
    return net


def describe_map(device_map: DeviceMap) -> str:
    """e.g. "blocks 0-9 on cuda:0, blocks 10-23 on cpu; embedding on cuda:0, final norm on cpu, unembedding on
    cuda:0"; one device for everything: its name."""
    devices = list(dict.fromkeys(device_map.values()))
    if len(devices) == 1:
        return str(devices[0])
    runs: list[tuple[int, int, torch.device]] = []
    for part, device in device_map.items():
        if part.startswith("blocks."):
            i = int(part.split(".")[1])
            if runs and runs[-1][2] == device and runs[-1][1] == i - 1:
                runs[-1] = (runs[-1][0], i, device)
            else:
                runs.append((i, i, device))
    blocks = ", ".join(f"block{'s' if a != b else ''} {a}{f'-{b}' if a != b else ''} on {d}" for a, b, d in runs)
    words = {"embed": "embedding", "pos_embed": "position embedding", "ln_final": "final norm",
             "unembed": "unembedding"}
    rest = ", ".join(f"{w} on {device_map[p]}" for p, w in words.items() if p in device_map)
    return f"{blocks}; {rest}"
