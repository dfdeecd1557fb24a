"""The answers of the analysis API (/api/analysis) as plain JSON: logit lens, head ablation and the
importance map, head roles with attention statistics, and the embedding explorer (their shapes are
`schemas.py`'s). The server routes them and the HTML snapshot stores them, so the app, the snapshot
and Python agree value for value. Values that cost a dozen forward passes (the reference set's head
roles, the mean-ablation values) are kept once per loaded model.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from ..engine import ExplainerModel
from ..errors import InputError
from ..trace import Trace
from .ablation import (
    AblationResult,
    BetweenPasses,
    Head,
    HeadImportance,
    ablate,
    head_importance,
    head_means,
    prune_heads,
)
from .attention_statistics import attention_stats
from .embeddings import analogy, nearest_tokens, project_2d
from .lens import logit_lens
from .roles import ROLES, HeadRoles, head_roles, reference_head_roles


def finite(x: Any) -> Any:
    """Nested lists and dicts with NaN / infinities as None: strict JSON has neither."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    return x


# -- the answers, as plain functions ---------------------------------------------------------------


def _tokens(trace: Trace) -> dict[str, Any]:
    return {"tokens": list(trace.tokens), "token_ids": list(trace.token_ids)}


def lens_json(model: ExplainerModel, trace: Trace, positions: list[int] | None, top: int) -> dict[str, Any]:
    lens = logit_lens(model, trace, top=top, positions=positions)
    return finite({"model": trace.model_name, **_tokens(trace), **lens.to_dict()})


def ablate_json(model: ExplainerModel, ids: list[int], heads: list[Head], mode: str, top: int,
                means: Any = None, experts: Iterable[tuple[int, int]] = ()) -> dict[str, Any]:
    res = ablate(model, ids, heads, experts=experts, mode=mode, means=means)  # type: ignore[arg-type]
    return ablation_dict(model, res, top)


def importance_json(model: ExplainerModel, ids: list[int], mode: str, means: Any = None,
                    between_passes: BetweenPasses | None = None) -> dict[str, Any]:
    imp = head_importance(model, ids, mode=mode, means=means, between_passes=between_passes)  # type: ignore[arg-type]
    return importance_dict(model, imp)


def importance_dict(model: ExplainerModel, imp: HeadImportance) -> dict[str, Any]:
    c = model.config
    return finite({"model": model.name, "n_layer": c.n_layer, "n_head": c.n_head, "n_kv_heads": c.n_kv_heads,
                   **imp.to_dict(), "ranked": [list(h) for h, _ in imp.ranked("loss")]})


def ablation_dict(model: ExplainerModel, res: AblationResult, top: int) -> dict[str, Any]:
    return finite({"model": model.name, **_tokens(res.clean), **res.to_dict(model.tokenizer.token_text, top)})


def prune_json(model: ExplainerModel, ids: list[int], mode: str, max_heads: int | None, recompute: bool,
               means: Any = None, between_passes: BetweenPasses | None = None) -> dict[str, Any]:
    curve = prune_heads(model, ids, mode=mode, means=means, max_heads=max_heads,  # type: ignore[arg-type]
                        recompute=recompute, between_passes=between_passes)
    return finite({"model": model.name, "recompute": recompute, **curve.to_dict()})


def _role_of(roles: HeadRoles, n_layer: int, n_head: int) -> list[list[str | None]]:
    return [[roles.role_of(layer, h) for h in range(n_head)] for layer in range(n_layer)]


def heads_json(trace: Trace, reference: HeadRoles | None) -> dict[str, Any]:
    """Role scores on the text (and on the reference set), each head's strongest role, and the
    attention statistics of the text."""
    c = trace.config
    roles = head_roles(trace)
    out: dict[str, Any] = {
        "model": trace.model_name, **_tokens(trace), "n_layer": c.n_layer, "n_head": c.n_head,
        "n_kv_heads": c.n_kv_heads, "roles": list(ROLES), "text": roles.to_dict(),
        "text_role_of": _role_of(roles, c.n_layer, c.n_head),
        "stats": attention_stats(trace).to_dict(), "reference": None, "reference_role_of": None,
    }
    if reference is not None:
        out["reference"] = reference.to_dict()
        out["reference_role_of"] = _role_of(reference, c.n_layer, c.n_head)
    return finite(out)


def neighbours_json(model: ExplainerModel, token: str | int, n: int) -> dict[str, Any]:
    from .embeddings import token_id

    tid = token_id(model, token)
    nbs = nearest_tokens(model, tid, n)
    return {"model": model.name, "token": {"token": model.tokenizer.token_text(tid), "id": tid},
            "neighbours": [{"token": nb.token, "id": nb.id, "similarity": nb.similarity} for nb in nbs]}


def analogy_json(model: ExplainerModel, positive: list[str | int], negative: list[str | int], n: int,
                 exclude_inputs: bool = True) -> dict[str, Any]:
    a = analogy(model, positive, negative, n, exclude_inputs=exclude_inputs)
    return {"model": model.name, **a.to_dict(model.tokenizer.token_text)}


def project_json(model: ExplainerModel, tokens: list[str | int]) -> dict[str, Any]:
    return {"model": model.name, **project_2d(model, tokens).to_dict()}


# -- per-model caches: the reference set and the mean-ablation values cost ~a dozen forward passes --


class _PerModel:
    """Values computed once per loaded model; dropped with the model (the registry may unload it)."""

    def __init__(self, compute: Callable[[ExplainerModel], Any]) -> None:
        self._compute = compute
        self._values: weakref.WeakKeyDictionary[ExplainerModel, Any] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, model: ExplainerModel) -> Any:
        with self._lock:
            if model not in self._values:
                self._values[model] = self._compute(model)
            return self._values[model]


reference_roles = _PerModel(reference_head_roles)
mean_values = _PerModel(head_means)


def ablation_heads(model: ExplainerModel, heads: Iterable[tuple[int, int]], layers: Iterable[int]) -> list[Head]:
    """The heads to ablate: the [layer, head] pairs given, and every head of each layer given."""
    c = model.config
    out = [(int(layer), int(h)) for layer, h in heads]
    for layer in layers:
        if not 0 <= layer < c.n_layer:
            raise InputError(f"layer {layer} is outside 0..{c.n_layer - 1}", code="layer_out_of_range", layer=layer,
                             max=c.n_layer - 1)
        out += [(layer, h) for h in range(c.n_head)]
    return out


def means_for(model: ExplainerModel, mode: str) -> Any:
    return mean_values(model) if mode == "mean" else None
