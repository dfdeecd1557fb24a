"""Experiments on a traced model: logit lens, head ablation, head roles, attention statistics,
embedding neighbours and analogies, and trace export. Each takes an `ExplainerModel` and/or a
`Trace` and returns a small typed result with a `to_dict()` for JSON."""

from .ablation import (
    AblationResult,
    HeadImportance,
    PruningCurve,
    ablate,
    ablate_each_head,
    ablation_patches,
    head_importance,
    head_means,
    prune_heads,
    text_loss,
)
from .attention_stats import AttentionStats, attention_stats
from .embeddings import Analogy, Neighbour, Projection, analogy, nearest_tokens, project_2d, token_id
from .export import load_npz, save_json, save_npz, trace_to_json
from .head_roles import ROLES, HeadRoles, head_roles, reference_head_roles
from .lens import LogitLens, lens_logits, logit_lens, residual_names
from .reference import REFERENCE_TEXTS, repeated_random_tokens

__all__ = [
    "REFERENCE_TEXTS",
    "ROLES",
    "AblationResult",
    "Analogy",
    "AttentionStats",
    "HeadImportance",
    "HeadRoles",
    "LogitLens",
    "Neighbour",
    "Projection",
    "PruningCurve",
    "ablate",
    "ablate_each_head",
    "ablation_patches",
    "analogy",
    "attention_stats",
    "head_importance",
    "head_means",
    "head_roles",
    "lens_logits",
    "load_npz",
    "logit_lens",
    "nearest_tokens",
    "project_2d",
    "prune_heads",
    "reference_head_roles",
    "repeated_random_tokens",
    "residual_names",
    "save_json",
    "save_npz",
    "text_loss",
    "token_id",
    "trace_to_json",
]
