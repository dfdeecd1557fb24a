"""Which checkpoints the bridge opens, and loading one with the recording attention.

A checkpoint opens when transformers knows its model_type as a causal language model that is neither an
encoder nor an encoder-decoder, and its config asks for no code of its own (remote code is never run).
Anything else is refused with one sentence (a CheckpointError).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import CheckpointError
from . import attention


def check_config(config: Mapping[str, Any]) -> str:
    """The model_type of a decoder the bridge can open, or a CheckpointError saying why not."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    model_type = config.get("model_type")
    if "auto_map" in config:
        raise CheckpointError("This checkpoint asks for code of its own (auto_map, remote code), which is never run "
                              "here; only model types that transformers itself implements open.")
    if not isinstance(model_type, str) or not model_type:
        raise CheckpointError("The checkpoint's config.json names no model_type.")
    if model_type not in CONFIG_MAPPING_NAMES:
        raise CheckpointError(f"transformers does not know the model_type {model_type!r}.")
    if config.get("is_encoder_decoder") or model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        raise CheckpointError(f"{model_type!r} is an encoder or encoder-decoder model; the bridge opens decoder-only "
                              "language models.")
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise CheckpointError(f"transformers has no causal language model for the model_type {model_type!r} (it is "
                              "not a text decoder).")
    cls = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    if cls.endswith("ForConditionalGeneration"):  # (a config with a vision part whose causal LM is text-only opens)
        raise CheckpointError(f"{model_type!r} is {cls}, a model of text with images or audio; the bridge opens "
                              "text-only decoders (where transformers has a text-only model type for it, such as "
                              "gemma3_text, that one opens).")
    return model_type


def load_decoder(path: str | Path, dtype: torch.dtype = torch.float32,
                 device_map: Mapping[str, torch.device] | None = None) -> nn.Module:
    """Load the checkpoint folder `path` with attention through the bridge (`te_record`), in eval mode; refuses
    (CheckpointError) what `check_config` refuses. The model's forward without a recording is its eager one.
    `device_map` (module name -> device, every module placed: `bridge.placement.module_map`) loads each weight
    straight onto its device, through transformers and accelerate (None: the CPU)."""
    from transformers import AutoModelForCausalLM

    folder = Path(path)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{folder} has no readable config.json ({e}).") from e
    if not isinstance(config, dict):
        raise CheckpointError(f"{folder}/config.json is not a JSON object.")
    check_config(config)
    name = attention.register()
    placed = {} if device_map is None else {"device_map": dict(device_map)}
    try:
        model, info = AutoModelForCausalLM.from_pretrained(folder, attn_implementation=name, dtype=dtype,
                                                           trust_remote_code=False, use_safetensors=True,
                                                           output_loading_info=True, **placed)
    except Exception as e:  # a broken file or a config transformers refuses, in its own words: one sentence here
        first = (str(e).strip().splitlines() or [type(e).__name__])[0].strip()
        if "ignore_mismatched_sizes" in first:  # its own sentence points at a report printed before it
            first = "a tensor's shape differs from what config.json implies"
        raise CheckpointError(f"transformers could not load the checkpoint in {folder}: {first}") from None
    # transformers fills a weight the files lack with random numbers, with a warning: a broken checkpoint here
    for kind in ("missing_keys", "mismatched_keys"):
        keys = sorted(str(k) for k in info.get(kind) or ())
        if keys:
            what = "lacks" if kind == "missing_keys" else "has a tensor of the wrong shape for"
            raise CheckpointError(f"the checkpoint in {folder} {what} {keys[0]!r}" +
                                  (f" and {len(keys) - 1} more" if len(keys) > 1 else "") +
                                  "; a model with made-up weights is not opened")
    for key, p in model.named_parameters():
        if not torch.isfinite(p).all():
            raise CheckpointError(f"tensor {key!r} in {folder} contains NaN or infinite values")
    return model.eval()
