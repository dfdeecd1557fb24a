"""The norm after each sublayer (OLMo 2 and 3) read by our own code: a mechanism of the lens (`bridge/mechanisms.py`).

OLMo 2 and 3 add norm(attn(x)) and norm(mlp(x)) to the residual stream, where GPT-2 and Llama add attn(norm(x)) and
mlp(norm(x)) (`models.post_norm_block`): each write's length is then at most sqrt(D) * max|gamma| of its norm
(`write_bound`), whatever the sublayer's weights. The bridge records the sublayers' outputs (attn_out, mlp_out:
before the norms), resid_mid and resid_post, not the writes themselves.

Found by what the layer computes, not by its class: a layer is post-norm where two of its own norms (direct children
that hold one weight of D values), applied to its recorded attn_out and mlp_out, give exactly what it adds, resid_pre
+ N1(attn_out) = resid_mid and resid_mid + N2(mlp_out) = resid_post, checked on the model's probe (`find_post_norms`),
and where our RMSNorm (`models.post_norm_block.RMSNorm`, y / rms(y) * gamma, on the module's own weight and epsilon)
computes what that norm does, so that the bound is its bound. The lens then derives each write on access by our norm
(ln1_post.out, ln2_post.out: OLMo's own names, `name_options.POST_NORM_BLOCK_ACTIVATIONS`); the forward records nothing
more. `write_sizes` gives, per post-norm layer and position, each write's length against its bound and the residual
stream's length before the first layer and after each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ..models.post_norm_block import RMSNorm, write_bound
from ..name_options import POST_NORM_LENS
from ..names import block_name
from .structure import Layer, find_structure

POST_NORM_STAGES = POST_NORM_LENS.stages  # its declaration's: ln1_post.out, ln2_post.out


def _ours(module: nn.Module) -> RMSNorm | None:
    """Our RMSNorm on a norm module's own weight and epsilon (None where it holds no single weight vector)."""
    weight = getattr(module, "weight", None)
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if not isinstance(weight, torch.Tensor) or weight.ndim != 1 or not isinstance(eps, float):
        return None
    with torch.device("meta"):
        norm = RMSNorm(weight.numel(), eps)
    norm.load_state_dict({"weight": weight}, strict=True, assign=True)
    return norm.eval()


@dataclass(frozen=True)
class PostNormLens:
    """Layer `index`'s norms after its sublayers: `attn_norm` (N1) and `mlp_norm` (N2), ours on its modules' weights."""

    index: int
    attn_norm: RMSNorm
    mlp_norm: RMSNorm
    kind: str = "post_norm"
    input_stage: str = "attn_out"  # with mlp_out (`derive_from`)
    output_stage: str = "resid_post"
    stages: tuple[str, ...] = field(default=POST_NORM_STAGES)

    @property
    def bounds(self) -> tuple[float, float]:
        """The longest write each norm can give: sqrt(D) * max|gamma| (attention's, the MLP's)."""
        return write_bound(self.attn_norm), write_bound(self.mlp_norm)

    @torch.no_grad()
    def derive_from(self, values: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Each write (T, D): our norms on the layer's recorded attn_out and mlp_out."""
        i = self.index
        return {"ln1_post.out": self.attn_norm(values[block_name(i, "attn_out")]),
                "ln2_post.out": self.mlp_norm(values[block_name(i, "mlp_out")])}


def _close(a: Tensor, b: Tensor, tol: float = 1e-5) -> bool:
    return a.shape == b.shape and float((a.float() - b.float()).abs().max()) <= tol * max(
        float(b.float().abs().max()), 1e-12)


@torch.no_grad()
def _post_norm(layer: Layer, values: Mapping[str, Tensor]) -> PostNormLens | None:
    i = layer.index
    try:
        pre, attn, mid, mlp, post = (values[block_name(i, s)] for s in (
            "resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"))
    except KeyError:
        return None
    norms = [m for _n, m in layer.module.named_children() if "Norm" in type(m).__name__ or isinstance(m, nn.RMSNorm)]

    def after(y: Tensor, before: Tensor, then: Tensor) -> RMSNorm | None:
        for module in norms:
            ours = _ours(module)
            if ours is None or ours.weight.numel() != y.shape[-1]:
                continue
            theirs = module(y[None])[0]
            if _close(before + theirs, then) and _close(ours(y), theirs, 1e-6):
                return ours
        return None

    attn_norm = after(attn, pre, mid)
    mlp_norm = None if attn_norm is None else after(mlp, mid, post)
    return None if mlp_norm is None else PostNormLens(i, attn_norm, mlp_norm)


def find_post_norms(model: nn.Module, values: Mapping[str, Tensor]) -> dict[int, PostNormLens]:
    """Layer index -> its lens, for every layer of `model` (a transformers `*ForCausalLM`) that adds its sublayers'
    outputs through a norm of its own, by `values` (a recording of it: the probe)."""
    out = {}
    for layer in find_structure(model).layers:
        lens = _post_norm(layer, values)
        if lens is not None:
            out[layer.index] = lens
    return out


# -- sizes ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteSizes:
    """Per post-norm layer (`layers`), each write's length at every position against its bound, and the residual
    stream's length before the first layer (`resid[0]`, block 0's input) and after each layer."""

    layers: tuple[int, ...]
    attn_bound: tuple[float, ...]  # sqrt(D) * max|gamma| of each layer's norm after attention
    mlp_bound: tuple[float, ...]
    attn: Tensor  # (len(layers), T): ||ln1_post.out|| at each position
    mlp: Tensor  # (len(layers), T): ||ln2_post.out||
    resid: Tensor  # (L + 1, T): ||resid_pre of block 0||, then ||resid_post|| of every layer


@torch.no_grad()
def write_sizes(values: Mapping[str, Tensor], lenses: Mapping[int, Any], n_layer: int) -> WriteSizes | None:
    """The sizes of a trace's values (None where no layer is post-norm): the writes as the lenses derive them."""
    post = {i: m for i, m in sorted(lenses.items()) if isinstance(m, PostNormLens)}
    if not post:
        return None

    def length(name: str) -> Tensor:
        return values[name].float().norm(dim=-1).cpu()

    resid = [length(block_name(0, "resid_pre")), *(length(block_name(i, "resid_post")) for i in range(n_layer))]
    return WriteSizes(tuple(post), tuple(m.bounds[0] for m in post.values()),
                      tuple(m.bounds[1] for m in post.values()),
                      torch.stack([length(block_name(i, "ln1_post.out")) for i in post]),
                      torch.stack([length(block_name(i, "ln2_post.out")) for i in post]), torch.stack(resid))
