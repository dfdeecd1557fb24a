"""The names the bridge records under: the generic family's table in names.py (`GENERIC_NAMES`), in the
project's vocabulary (TransformerLens's), and the stage prefix of each mixer kind that is not attention.
"""

from __future__ import annotations

from ..names import GENERIC_BLOCK_ACTIVATIONS, GENERIC_GLOBAL_ACTIVATIONS, block_part

__all__ = ["GENERIC_BLOCK_ACTIVATIONS", "GENERIC_GLOBAL_ACTIVATIONS", "MIXER_PREFIX", "generic_block_name"]

# The mixers a decoder layer may have besides attention, by kind: kind -> the stage prefix it records under.
MIXER_PREFIX: dict[str, str] = {"linear_attention": "linear_attn", "short_conv": "conv", "state_space": "ssm",
                                "mixer": "mixer"}


def generic_block_name(layer: int, suffix: str) -> str:
    """`generic_block_name(3, "attn.pattern") -> "blocks.3.attn.pattern"`, for a suffix of the generic table."""
    if suffix not in GENERIC_BLOCK_ACTIVATIONS:
        raise KeyError(f"unknown generic block stage {suffix!r}")
    return f"{block_part(layer)}.{suffix}"
