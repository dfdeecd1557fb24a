"""The model families this package runs, each declared once (see `declaration.py`): GPT-2, the Llama
family (Llama, Qwen2, Mistral), Qwen3, Gemma 3, and the mixtures of experts Mixtral, Qwen3-MoE and OLMoE."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .declaration import Architecture, Family
from .gemma3 import GEMMA3
from .gpt2 import GPT2
from .llama import LLAMA
from .mixtral import MIXTRAL
from .olmoe import OLMOE
from .qwen3 import QWEN3
from .qwen3_moe import QWEN3_MOE

__all__ = ["BY_MODEL_TYPE", "FAMILIES", "MODEL_TYPES", "Architecture", "Family", "family_for_hf", "family_named",
           "family_of_model_type", "NEARBY", "supported_model_types"]

FAMILIES: dict[str, Family] = {f.name: f for f in (GPT2, LLAMA, QWEN3, GEMMA3, MIXTRAL, QWEN3_MOE, OLMOE)}
BY_MODEL_TYPE: dict[str, Family] = {t: f for f in FAMILIES.values() for t in f.architectures}
MODEL_TYPES: tuple[str, ...] = tuple(BY_MODEL_TYPE)

# model types people try that are not text-only causal LMs of a family above: what to load instead
NEARBY = {"gemma3": "it is Gemma3ForConditionalGeneration (text and images); the text-only gemma3_text "
                     "checkpoints (google/gemma-3-270m, gemma-3-1b) load"}


def supported_model_types() -> str:
    return ", ".join(MODEL_TYPES) + " (" + ", ".join(f.label for f in FAMILIES.values()) + ")"


def family_named(name: str) -> Family:
    if name not in FAMILIES:
        raise KeyError(f"unknown model family {name!r}; expected one of {sorted(FAMILIES)}")
    return FAMILIES[name]


def family_of_model_type(model_type: object) -> Family:
    """The family of an HF model_type, or a one-line ValueError naming the supported ones."""
    if not isinstance(model_type, str) or model_type not in BY_MODEL_TYPE:
        hint = f": {NEARBY[model_type]}" if isinstance(model_type, str) and model_type in NEARBY else ""
        raise ValueError(f"model_type is {model_type!r}; supported: {supported_model_types()}{hint}")
    return BY_MODEL_TYPE[model_type]


def family_for_hf(hf: Mapping[str, Any]) -> Family:
    """The family an HF config.json belongs to, by its model_type (GPT-2 when it names none)."""
    return family_of_model_type(hf.get("model_type", "gpt2"))
