"""Whether the model a config describes may be built: checked before anything is allocated.

A config's numbers are the writer's to choose (a config.json with `n_layer: 1000000` is a few bytes),
so they are not taken on trust. Models are built on the meta device (shapes without memory) and their
tensors compared with the weight files' own shapes (read from the files' headers) before a byte of
weights is read; what remains to check here is what a meta build itself costs and what the real one
will need:

- the number of blocks: building a module per block costs time and memory even on the meta device, so
  a config may not have more blocks than the weight files hold tensors (every block has some). Beyond
  that, the tensors per block are measured from meta builds of one block and of two (the model's own
  code, nothing restated here) to say how many blocks the files could hold;
- the memory: the parameters and buffers of the (meta) model at the dtype they will have, against the
  memory this machine has available.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from ..errors import CheckpointError


def check_block_counts(make: Callable[[Any], nn.Module], config: Any, layer_fields: tuple[str, ...], *,
                       file_tensors: int, config_path: os.PathLike[str] | str) -> None:
    """Refuse a config (a frozen dataclass) with more blocks in one of `layer_fields` than the weight
    files, holding `file_tensors` tensors, have tensors for."""
    if all(getattr(config, f) <= file_tensors for f in layer_fields):
        return  # each block has a tensor of its own, so the build is bounded by the files (no cost when loading)
    ones = {f: 1 for f in layer_fields}
    with torch.device("meta"):
        base = len(make(replace(config, **ones)).state_dict())
        for field in layer_fields:
            per_block = len(make(replace(config, **{**ones, field: 2})).state_dict()) - base
            blocks = getattr(config, field)
            if per_block and blocks * per_block > file_tensors:
                raise CheckpointError(f"{config_path} says {field} is {blocks:,}, but the weight files hold "
                                      f"{file_tensors:,} tensors, enough for at most {file_tensors // per_block:,} "
                                      f"blocks of {per_block} tensors")


def check_expert_counts(config: Any, *, file_tensors: int, config_path: os.PathLike[str] | str) -> None:
    """Refuse a mixture of experts whose config names more experts than the weight files have tensors for:
    every expert of every block with experts has three matrices of its own (gate, up, down), and a meta
    build costs a module per expert."""
    n = getattr(config, "n_experts", None)
    if n is None or config.arch.mlp != "moe":
        return
    blocks = config.n_layer - len(config.dense_layers)  # counted, not listed: the config's numbers are not trusted
    if not blocks or blocks * n * 3 <= file_tensors:
        return
    key = config.declaration.config_keys.get("n_experts", "n_experts")
    raise CheckpointError(f"{config_path} says {key} is {n:,}, but the weight files hold {file_tensors:,} tensors, "
                          f"enough for at most {file_tensors // (3 * blocks):,} experts in each of its {blocks} blocks "
                          f"with experts")


def available_memory() -> int | None:
    """Bytes this process could still allocate without swapping: MemAvailable on Linux, else the
    physical memory; None where neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def model_bytes(model: nn.Module, dtype: torch.dtype) -> tuple[int, int]:
    """(parameters, bytes) of a model (on any device, meta included) once its floating-point tensors are
    in `dtype`; a tied matrix counts once."""
    params = sum(p.numel() for p in model.parameters())
    size = dtype.itemsize
    total = sum(p.numel() * (size if p.is_floating_point() else p.element_size()) for p in model.parameters())
    total += sum(b.numel() * (size if b.is_floating_point() else b.element_size()) for b in model.buffers())
    return params, total


def check_memory(model: nn.Module, dtype: torch.dtype, what: str, *, memory: int | None = None) -> None:
    """Refuse to fill `model` (built on the meta device) when its weights would not fit in the memory
    available (`memory` bytes; measured now by default)."""
    params, need = model_bytes(model, dtype)
    have = available_memory() if memory is None else memory
    if have is not None and need > have:
        name = str(dtype).removeprefix("torch.")
        hint = "; in bfloat16 it needs half that" if dtype == torch.float32 else ""
        raise CheckpointError(f"{what} has {params:,} parameters, which need {need / 1e9:.1f} GB of memory in "
                              f"{name}, but this machine has {have / 1e9:.1f} GB available{hint}")
