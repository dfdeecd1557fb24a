"""Experiments on a traced model: logit lens, head ablation, head roles, attention statistics,
embedding neighbours and analogies, and trace export. Each takes an `ExplainerModel` and/or a
`Trace` and returns a small typed result with a `to_dict()` for JSON."""

from .ablation import (
    AblationResult,
    HeadImportance,
    PruningCurve,
    ablate,
    ablation_patches,
    head_importance,
    head_means,
    prune_heads,
    text_loss,
)
from .lens import LogitLens, lens_logits, logit_lens, residual_names
from .reference import REFERENCE_TEXTS, repeated_random_tokens

__all__ = [
    "REFERENCE_TEXTS",
    "AblationResult",
    "HeadImportance",
    "LogitLens",
    "PruningCurve",
    "ablate",
    "ablation_patches",
    "head_importance",
    "head_means",
    "lens_logits",
    "logit_lens",
    "prune_heads",
    "repeated_random_tokens",
    "residual_names",
    "text_loss",
]
