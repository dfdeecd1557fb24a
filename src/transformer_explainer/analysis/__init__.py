"""Experiments on a traced model: logit lens, head ablation, head roles, attention statistics,
embedding neighbours and analogies, and trace export. Each takes an `ExplainerModel` and/or a
`Trace` and returns a small typed result with a `to_dict()` for JSON.

The names are imported on first use, so that the CLI registers its subcommands without torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy_exports import lazy_getattr

if TYPE_CHECKING:
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
    from .attention_statistics import AttentionStats, attention_stats
    from .embeddings import Analogy, Neighbour, Projection, analogy, nearest_tokens, project_2d, token_id
    from .export import load_npz, save_json, save_npz, trace_to_json
    from .lens import LogitLens, lens_logits, logit_lens, residual_names
    from .reference import REFERENCE_TEXTS, repeated_random_tokens
    from .roles import ROLES, HeadRoles, head_roles, reference_head_roles

_EXPORTS = {
    "AblationResult": ".ablation", "HeadImportance": ".ablation", "PruningCurve": ".ablation", "ablate": ".ablation",
    "ablate_each_head": ".ablation", "ablation_patches": ".ablation", "head_importance": ".ablation",
    "head_means": ".ablation", "prune_heads": ".ablation", "text_loss": ".ablation",
    "AttentionStats": ".attention_statistics", "attention_stats": ".attention_statistics", "Analogy": ".embeddings",
    "Neighbour": ".embeddings", "Projection": ".embeddings", "analogy": ".embeddings",
    "nearest_tokens": ".embeddings", "project_2d": ".embeddings", "token_id": ".embeddings", "load_npz": ".export",
    "save_json": ".export", "save_npz": ".export", "trace_to_json": ".export", "ROLES": ".roles",
    "HeadRoles": ".roles", "head_roles": ".roles", "reference_head_roles": ".roles",
    "LogitLens": ".lens", "lens_logits": ".lens", "logit_lens": ".lens", "residual_names": ".lens",
    "REFERENCE_TEXTS": ".reference", "repeated_random_tokens": ".reference",
}

__all__ = [
    "AblationResult",
    "Analogy",
    "AttentionStats",
    "HeadImportance",
    "HeadRoles",
    "LogitLens",
    "Neighbour",
    "Projection",
    "PruningCurve",
    "REFERENCE_TEXTS",
    "ROLES",
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


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
