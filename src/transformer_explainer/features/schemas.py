"""Request and response bodies of the features API (/api/features): the features of a text at a hook, the
autoencoders a model ships, and one feature's page. Plain pydantic (no torch at import); the CLI's --json
answers are these too, and the web app's types are generated from them (`server/codegen.py`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field

from ..schemas import MAX_IDS, InputIn, TokenArg

if TYPE_CHECKING:
    from .attribution import FeatureAttribution
    from .encode import TextFeatures
    from .pages import FeaturePage

FEATURES_TOP = 10  # features per position an answer lists unless asked
MAX_FEATURES_TOP = 64  # and at most (a TopK autoencoder makes at most k active per position)

# a hook point in TransformerLens's spelling (blocks.3.hook_resid_post); sae.parse_hook says which are read
HookName = Annotated[str, Field(min_length=1, max_length=64, examples=["blocks.3.hook_resid_post"])]


# -- requests --------------------------------------------------------------------------------------


class FeaturesIn(InputIn):
    """The features of a text (or token ids) at `hook` (default: the model's middle shipped autoencoder): per
    position the `top` most active, by decreasing activation. Only the autoencoders the model ships are offered."""

    hook: HookName | None = None
    # default: FEATURES_TOP, or the autoencoder's k where that is less
    top: Annotated[int, Field(ge=1, le=MAX_FEATURES_TOP)] | None = None


class FeatureAttributionIn(InputIn):
    """The logit of `target` at `position` (default: the last; `target` as /api/attribution/attribute's), minus that
    of `versus` when given, with the output of the block the autoencoder at `hook` reads (a block's output,
    blocks.L.hook_resid_post; default: the middle one the model ships) split into its features plus the error."""

    hook: HookName | None = None
    target: TokenArg | None = None
    versus: TokenArg | None = None
    position: Annotated[int, Field(ge=-MAX_IDS, lt=MAX_IDS)] | None = None
    top: Annotated[int, Field(ge=1, le=MAX_FEATURES_TOP)] = FEATURES_TOP  # features listed, by |effect|


# -- responses -------------------------------------------------------------------------------------


class FeatureEffectOut(BaseModel):
    id: int
    activation: float
    effect: float  # its direct effect on the metric


class FeatureAttributionOut(BaseModel):
    """The metric at `position` with block `layer`'s output there split into parts: the decoder's bias, each active
    feature (`features`: the first `top` by |effect|; `others`: the rest summed) and the error; the parts add up to
    `whole`, the block output's direct effect through the final norm frozen at `scale`. The logit is `whole` +
    `later` (what the blocks after `layer` wrote; 0 at the last block) + `rest` (the norm's shift along the token's
    direction, which no part writes)."""

    model: str
    hook: str
    layer: int
    n_layer: int
    d_sae: int
    k: int | None
    tokens: list[str]
    position: int
    target: FeatureLogitOut
    versus: FeatureLogitOut | None
    metric: float
    rest: float
    scale: float
    whole: float
    later: float
    bias: float
    error: float
    active: int
    features: list[FeatureEffectOut]
    others: float


class FeatureOut(BaseModel):
    id: int
    activation: float


class PositionFeaturesOut(BaseModel):
    """One position: its token, the features active there (the first `top`, by decreasing activation) and how
    many are active, and what the autoencoder misses there: ||x - x_hat|| and that over ||x||."""

    position: int
    token: str
    token_id: int
    active: int  # features active at the position (L0); `features` lists the first `top` of them
    features: list[FeatureOut]
    norm: float  # ||x||, the activation's length
    error_norm: float  # ||x - x_hat||, the reconstruction error's length
    relative_error: float | None  # error_norm / norm; null where x is 0


class FeaturesOut(BaseModel):
    """A text's features at `hook`. The reconstruction plus the error is the activation; `explained_variance` is
    1 - sum ||x - x_hat||^2 / sum ||x - mean(x)||^2 over the text's positions (null for one position)."""

    model: str
    hook: str
    name: str  # the trace's name of the activation read (blocks.3.resid_post)
    d_sae: int
    k: int | None  # a TopK autoencoder's k (at most k active per position); null for other architectures
    source: str  # "builtin", or where the autoencoder was read from
    explained_variance: float | None
    positions: list[PositionFeaturesOut]


class FeatureHookOut(BaseModel):
    hook: str
    layer: int
    d_sae: int
    k: int | None
    default: bool  # the one a request without a hook gets (the middle depth)
    pages: bool  # whether its feature pages are shipped


class FeatureHooksOut(BaseModel):
    """The autoencoders a model ships, by depth; empty for a model that ships none."""

    model: str
    hooks: list[FeatureHookOut]


class FeatureContextOut(BaseModel):
    """Tokens of the corpus around one token where the feature fired: `tokens[i]` with the feature's activation
    `activations[i]`; `center` indexes the token the context was chosen for."""

    tokens: list[str]
    token_ids: list[int]
    activations: list[float]
    center: int
    activation: float  # the activation at `center`


class FeatureQuantileOut(BaseModel):
    quantile: float  # of the feature's nonzero activations in the corpus
    activation: float  # that quantile's activation
    contexts: list[FeatureContextOut]


class FeatureLogitOut(BaseModel):
    id: int
    token: str
    logit: float


class FeaturePageOut(BaseModel):
    """One feature of an autoencoder, from the corpus the pages were built on: where it fires most, contexts at a
    few quantiles of its activations, a histogram of those activations (`bin_edges` has one more entry than
    `counts`) and its density (the fraction of the corpus's tokens where it is active), and the tokens its decoder
    direction promotes and suppresses through the model's final norm and unembedding."""

    model: str
    hook: str
    id: int
    d_sae: int
    corpus: str
    corpus_tokens: int
    density: float
    max_activation: float
    top_contexts: list[FeatureContextOut]
    quantiles: list[FeatureQuantileOut]
    bin_edges: list[float]
    counts: list[int]
    promoted: list[FeatureLogitOut]
    suppressed: list[FeatureLogitOut]
    # what the project wrote the feature detects, from its page; null where nothing was written (nothing is guessed)
    description: str | None = None


# -- the answers, shared by the API and the CLI's --json ------------------------------------------------------


def _num(v: float) -> float | None:
    return v if math.isfinite(v) else None


def features_answer(model: str, fs: TextFeatures, top: int) -> dict[str, Any]:
    """`FeaturesOut`'s fields as plain Python values (what `features_out` validates). The API sends this as JSON
    without building the pydantic objects (validating a 128-token answer took about 1.1 ms of its 1.9 ms here); a
    test checks that it validates as `FeaturesOut` and equals `features_out`."""
    # the tensors read into Python once (a position at a time costs more than the encoding itself)
    ids, vals = fs.active_ids[:, :top].tolist(), fs.active_values[:, :top].tolist()
    counts, norms, errs = fs.counts.tolist(), fs.x.norm(dim=-1).tolist(), fs.error.norm(dim=-1).tolist()
    positions = [{"position": t, "token": token, "token_id": token_id, "active": c,
                  "features": [{"id": i, "activation": a} for i, a in zip(row_ids[:c], row_vals[:c], strict=False)],
                  "norm": n, "error_norm": e, "relative_error": _num(e / n) if n > 0 else None}
                 for t, (token, token_id, row_ids, row_vals, c, n, e)
                 in enumerate(zip(fs.tokens, fs.token_ids, ids, vals, counts, norms, errs, strict=True))]
    return {"model": model, "hook": fs.hook, "name": fs.name, "d_sae": fs.d_sae, "k": fs.k, "source": fs.source,
            "explained_variance": fs.explained_variance, "positions": positions}


def features_out(model: str, fs: TextFeatures, top: int) -> FeaturesOut:
    """The features answer of the CLI's --json and the snapshot, validated whole (a position at a time costs more)."""
    return FeaturesOut.model_validate(features_answer(model, fs, top))


def page_out(model: str, page: FeaturePage) -> FeaturePageOut:
    return FeaturePageOut.model_validate({"model": model, **page.to_dict()})


def feature_attribution_out(model: str, a: FeatureAttribution, logits: list[float]) -> FeatureAttributionOut:
    """`logits`: the position's logits of target and versus (read in their `logit` fields)."""
    d = {k: getattr(a, k) for k in ("hook", "layer", "n_layer", "d_sae", "k", "tokens", "position", "metric", "rest",
                                    "scale", "whole", "later", "bias", "error", "active", "others")}
    d["target"] = {"id": a.target, "token": a.target_text, "logit": logits[0]}
    d["versus"] = None if a.versus is None else {"id": a.versus, "token": a.versus_text, "logit": logits[1]}
    d["features"] = [{"id": f.id, "activation": f.activation, "effect": f.effect} for f in a.features]
    return FeatureAttributionOut.model_validate({"model": model, **d})


REQUESTS = [FeaturesIn, FeatureAttributionIn]
RESPONSES = [FeaturesOut, FeatureHooksOut, FeaturePageOut, FeatureAttributionOut]
