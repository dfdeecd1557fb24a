"""Head and expert ablation: switch heads off, or take experts out of a mixture's routing, and measure
what changes.

A head is ablated by replacing its `attn.z` (its weighted sum of values, before the output
projection) with zeros, or with its mean over a reference set of texts (mean ablation keeps the
average signal downstream layers are used to and removes only what depends on this input). The
replacement is a recorder patch, so every downstream value of the ablated run is real.

With grouped-query attention (the Llama family) every query head still has its own z, so one head is
switched off alone though it shares its keys and values with its group; switching off all the query
heads of a group equals zeroing that key/value head's values.

In a mixture of experts an expert is removed from the routing (`expert_removal_patches`): its router logit
is -inf, so no token is sent to it, and each token that chose it goes to its next most probable expert
instead. The `mode` concerns heads only.

The analyses that run a pass per head (`head_importance`, `ablate_each_head`, `prune_heads`) take
`between_passes`, called before each forward pass: a server stops an analysis nobody waits for any
more by raising there (see `cost.py` for what one costs before it starts).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from ..config import DecoderConfig
from ..devices import float64_device
from ..engine import ExplainerModel
from ..errors import InputError
from ..generic import GenericConfig, GenericModel
from ..models.recorder import Patch
from ..names import block_name
from ..trace import Trace, with_text
from .reference import REFERENCE_TEXTS

log = logging.getLogger(__name__)

Model = ExplainerModel | GenericModel  # our own families' code, or transformers' modules through the bridge
Head = tuple[int, int]  # (layer, head)
Expert = tuple[int, int]  # (layer, expert) in a block with experts
BetweenPasses = Callable[[], None]  # called before each forward pass of a long analysis; may raise to stop it
AblationMode = Literal["zero", "mean"]
MODES: tuple[str, ...] = ("zero", "mean")


def _attention_layers(config: DecoderConfig | GenericConfig) -> list[int]:
    """The layers with heads: every layer of our own families; those with attention in a generic model."""
    return list(config.attention_layers) if isinstance(config, GenericConfig) else list(range(config.n_layer))


def _head_map(config: DecoderConfig | GenericConfig) -> Tensor:
    """(L, H) zeros to fill head by head; NaN in the rows of a generic model's layers without attention."""
    out = torch.full((config.n_layer, config.n_head), float("nan"), device="cpu")
    out[_attention_layers(config)] = 0.0
    return out


def all_heads(config: DecoderConfig | GenericConfig) -> list[Head]:
    """Every head, layer by layer (a generic model's layers without attention have none)."""
    return [(layer, h) for layer in _attention_layers(config) for h in range(config.n_head)]


def layer_heads(config: DecoderConfig, layer: int) -> list[Head]:
    """Every head of one layer: ablating them all switches the layer's attention off."""
    check_heads(config, [(layer, 0)])
    return [(layer, h) for h in range(config.n_head)]


def check_heads(config: DecoderConfig, heads: Iterable[Head]) -> list[Head]:
    out: list[Head] = []
    for layer, h in heads:
        if not 0 <= layer < config.n_layer:
            raise InputError(f"layer {layer} is outside 0..{config.n_layer - 1}", code="layer_out_of_range",
                             layer=layer, max=config.n_layer - 1)
        if isinstance(config, GenericConfig) and layer not in config.attention_layers:
            raise InputError(f"layer {layer} has no attention (its token mixers: "
                             f"{', '.join(config.layers[layer].kinds)}), so it has no heads to ablate")
        if not 0 <= h < config.n_head:
            raise InputError(f"head {h} is outside 0..{config.n_head - 1}", code="head_out_of_range", head=h,
                             max=config.n_head - 1)
        if (layer, h) not in out:
            out.append((layer, h))
    return out


def check_experts(config: DecoderConfig, experts: Iterable[Expert]) -> list[Expert]:
    """The (layer, expert) pairs, each once; an InputError for a block without experts, an expert outside the
    block's, or a block left with fewer experts than each token is sent to."""
    out: list[Expert] = []
    experts = list(experts)
    if experts and isinstance(config, GenericConfig):
        mt = config.model_type
        raise InputError(f"this {mt} model has no experts: its MLPs are dense" if config.n_experts is None else
                         f"this {mt} model runs through transformers' own modules, whose routers the bridge does not "
                         "patch, so its experts cannot be taken out of the routing")
    for layer, e in experts:
        if not 0 <= layer < config.n_layer:
            raise InputError(f"layer {layer} is outside 0..{config.n_layer - 1}")
        if not config.has_experts(layer):
            raise InputError(f"block {layer} has no experts: its MLP is dense" if config.arch.mlp == "moe" else
                             f"this {config.declaration.label} model has no experts: its MLPs are dense")
        assert config.n_experts is not None and config.top_k is not None
        if not 0 <= e < config.n_experts:
            raise InputError(f"expert {e} is outside 0..{config.n_experts - 1}")
        if (layer, e) not in out:
            out.append((layer, e))
    for layer in {layer for layer, _ in out}:
        assert config.n_experts is not None and config.top_k is not None
        left = config.n_experts - sum(1 for other, _ in out if other == layer)
        if left < config.top_k:
            raise InputError(f"removing {config.n_experts - left} of block {layer}'s {config.n_experts} experts "
                             f"leaves {left}, fewer than the {config.top_k} each token is sent to")
    return out


def expert_removal_patches(experts: Iterable[Expert]) -> dict[str, Patch]:
    """Recorder patches on `blocks.{l}.mlp.router_logits` that take the given experts out of the routing: their
    logits become -inf, so their probability is 0 and the top-k never picks them.

    The remaining weights are renormalised, by the model's own rule: the softmax runs over the experts that
    remain, so each keeps the probability the router gives it among them (p_j / (1 - p_removed)), and the
    top-k then takes the most probable of those, filling a removed expert's place with the token's next
    choice; where the model renormalises the chosen experts' weights (Mixtral, norm_topk_prob) it does so
    as always. That is the model as it would run had the expert never been trained: every token still gets
    top_k experts with weights of the usual total, so the blocks after see the MLP output at its usual scale
    and what changes is which experts wrote it. (Zeroing the expert's output instead would also shrink the
    MLP's output wherever the expert was chosen, mixing that loss of scale into the effect.)"""
    by_layer: dict[int, list[int]] = {}
    for layer, e in experts:
        by_layer.setdefault(layer, []).append(e)

    def patch_for(es: list[int]) -> Patch:
        def patch(logits: Tensor) -> Tensor:  # (B, T, E)
            logits = logits.clone()
            logits[..., es] = float("-inf")
            return logits

        return patch

    return {block_name(layer, "mlp.router_logits"): patch_for(es) for layer, es in by_layer.items()}


def _ids(model: Model, text: str | Sequence[int]) -> list[int]:
    return model.encode(text) if isinstance(text, str) else list(text)


@torch.inference_mode()
def head_means(model: Model, texts: Iterable[str] = REFERENCE_TEXTS) -> Tensor:
    """(L, H, Dh) every head's `z` averaged over all positions of `texts`: the mean-ablation value."""
    L = model.config.n_layer
    layers = _attention_layers(model.config)
    total: list[Tensor] | None = None
    count = 0
    for text in texts:
        trace = model.trace(text, truncate=True)
        # summed over positions where each block is, then side by side on the model's input device
        s = [trace[block_name(i, "attn.z")].sum(dim=1).to(model.device) for i in layers]  # each (H, Dh)
        total = s if total is None else [a + b for a, b in zip(total, s, strict=True)]
        count += trace.n_tokens
    if total is None:
        raise InputError("mean ablation needs at least one reference text")
    if len(layers) == L and all(t.shape == total[0].shape for t in total):
        return torch.stack(total) / count
    # a generic model's layers without attention: a row of zeros that no patch reads (no head of theirs is ablated)
    out = torch.zeros(L, *total[0].shape, dtype=total[0].dtype, device=total[0].device)
    for i, t in zip(layers, total, strict=True):
        if t.shape != out.shape[1:]:
            raise InputError(f"{model.name}'s attention layers give heads of different widths, so their means do not "
                             "fit one table: ablate with zeros instead")
        out[i] = t / count
    return out


def ablation_patches(heads: Iterable[Head], mode: AblationMode = "zero",
                     means: Tensor | None = None) -> dict[str, Patch]:
    """Recorder patches on `blocks.{l}.attn.z` that replace the given heads' output.

    `means` (L, H, Dh) is required for mode "mean" (see `head_means`).
    """
    if mode not in MODES:
        raise InputError(f"ablation mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "mean" and means is None:
        raise InputError("mean ablation needs the heads' mean outputs (head_means)")
    by_layer: dict[int, list[int]] = {}
    for layer, h in heads:
        by_layer.setdefault(layer, []).append(h)

    def patch_for(layer: int, hs: list[int]) -> Patch:
        def patch(z: Tensor) -> Tensor:  # (B, H, T, Dh)
            z = z.clone()
            for h in hs:
                z[:, h] = 0.0 if mode == "zero" else means[layer, h].to(z.device, z.dtype)
            return z

        return patch

    return {block_name(layer, "attn.z"): patch_for(layer, hs) for layer, hs in by_layer.items()}


def text_loss(logits: Tensor, ids: Sequence[int]) -> float:
    """Mean cross-entropy (nats) of each next token of the text given the ones before it."""
    if len(ids) < 2:
        raise InputError("a loss needs a text of at least two tokens (one to read, one to predict)",
                         code="loss_needs_two_tokens")
    return float(F.cross_entropy(logits[:-1].float(), torch.tensor(list(ids[1:]), device=logits.device)))


def _kl(p_logits: Tensor, q_logits: Tensor) -> float:
    """KL(p || q) in nats between the softmax distributions of two (V,) logit vectors."""
    here = float64_device(p_logits.device)  # tiny KLs need float64
    lp, lq = F.log_softmax(p_logits.to(here, torch.float64), -1), F.log_softmax(q_logits.to(here, torch.float64), -1)
    return float((lp.exp() * (lp - lq)).sum())


class TokenChange(tuple[int, float, float]):
    """One row of `AblationResult.top_changes`: (id, prob before, prob after), unpacked as before, with the
    token's text as `.token` (None where the result was made without a tokenizer) and the fields by name."""

    token: str | None

    def __new__(cls, id: int, before: float, after: float, token: str | None = None) -> TokenChange:
        row = super().__new__(cls, (id, before, after))
        row.token = token
        return row

    def __getnewargs__(self) -> tuple[int, float, float, str | None]:  # pickle and copy: the token too
        return (*self, self.token)

    @property
    def id(self) -> int:
        return self[0]

    @property
    def before(self) -> float:
        return self[1]

    @property
    def after(self) -> float:
        return self[2]

    def __repr__(self) -> str:
        name = "" if self.token is None else f"{self.token!r} "
        return f"TokenChange({name}id {self.id}: {self.before:.2%} -> {self.after:.2%})"


@dataclass(frozen=True)
class AblationResult:
    heads: list[Head]
    mode: str
    clean: Trace
    ablated: Trace
    clean_loss: float | None  # None for a one-token text
    ablated_loss: float | None
    kl: float  # KL(clean || ablated) of the next-token distribution, nats
    experts: list[Expert] = field(default_factory=list)  # taken out of the routing (mixtures of experts)
    # an id's text (the tokenizer's `token_text`), for `top_changes` and the repr; `ablate` sets it
    token_text: Callable[[int], str] | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        parts = []
        if self.heads:
            parts.append(f"{self.mode} ablation of {', '.join(f'L{layer}H{h}' for layer, h in self.heads)}")
        if self.experts:
            parts.append(f"{', '.join(f'L{layer}E{e}' for layer, e in self.experts)} out of the routing")
        loss = ("" if self.loss_change is None else
                f"loss {self.clean_loss:.4f} -> {self.ablated_loss:.4f} ({self.loss_change:+.4f} nats/token), ")
        return "\n".join([f"AblationResult, {'; '.join(parts) or 'nothing removed'}: {loss}KL {self.kl:.4f} nats; "
                          f"next token:",
                          *(f"  {c!r}" for c in self.top_changes(5)),
                          "  (.clean, .ablated: the two traces; .top_changes(n): these rows for the top n)"])

    @property
    def loss_change(self) -> float | None:
        if self.clean_loss is None or self.ablated_loss is None:
            return None
        return self.ablated_loss - self.clean_loss

    @property
    def clean_probs(self) -> Tensor:
        return torch.softmax(self.clean.next_token_logits().float(), -1)

    @property
    def ablated_probs(self) -> Tensor:
        return torch.softmax(self.ablated.next_token_logits().float(), -1)

    def top_changes(self, n: int = 10) -> list[TokenChange]:
        """(id, prob before, prob after) for the union of the top n before and after, by prob before; each row
        also has `.token`, the id's text."""
        before, after = self.clean_probs, self.ablated_probs
        n = min(n, before.shape[0])
        ids = list(dict.fromkeys(before.topk(n).indices.tolist() + after.topk(n).indices.tolist()))
        ids.sort(key=lambda i: -float(before[i]))
        text = self.token_text
        return [TokenChange(i, float(before[i]), float(after[i]), None if text is None else text(i)) for i in ids]

    def to_dict(self, token_text: Callable[[int], str], n: int = 10) -> dict[str, Any]:
        """JSON-ready summary; `token_text` maps an id to its text (the tokenizer's `token_text`)."""
        before, after = self.clean_probs, self.ablated_probs
        n = min(n, before.shape[0])

        def row(i: int, p: Tensor) -> dict[str, Any]:
            return {"token": token_text(i), "id": i, "prob": float(p[i])}

        return {
            "heads": [list(h) for h in self.heads],
            "experts": [list(e) for e in self.experts],
            "mode": self.mode,
            "loss_before": self.clean_loss,
            "loss_after": self.ablated_loss,
            "loss_change": self.loss_change,
            "kl": self.kl,
            "before": [row(i, before) for i in before.topk(n).indices.tolist()],
            "after": [row(i, after) for i in after.topk(n).indices.tolist()],
            "changes": [{"token": token_text(i), "id": i, "before": b, "after": a}
                        for i, b, a in self.top_changes(n)],
        }


def _run(model: Model, ids: list[int], heads: list[Head], mode: AblationMode,
         means: Tensor | None, text: str | None = None, between_passes: BetweenPasses | None = None,
         experts: Sequence[Expert] = ()) -> Trace:
    if between_passes is not None:
        between_passes()
    patches = {**(ablation_patches(heads, mode, means) if heads else {}), **expert_removal_patches(experts)}
    return with_text(model.trace_ids(ids, patches=patches or None), text)


def ablate(model: Model, text: str | Sequence[int], heads: Iterable[Head] = (), *,
           experts: Iterable[Expert] = (), mode: AblationMode = "zero", means: Tensor | None = None) -> AblationResult:
    """Run `text` with and without `heads` and `experts` ((layer, expert) pairs of a mixture of experts, taken
    out of the routing: see `expert_removal_patches`, which says how the remaining weights are renormalised
    and why); compare the next-token distribution and the loss.

    Mean ablation (of heads) uses `means`, by default the heads' means over the built-in reference texts.
    """
    heads = check_heads(model.config, heads)
    removed = check_experts(model.config, experts)
    ids = _ids(model, text)
    txt = text if isinstance(text, str) else None
    if mode == "mean" and means is None and heads:
        means = head_means(model)
    clean = with_text(model.trace_ids(ids), txt)
    ablated = _run(model, ids, heads, mode, means, txt, experts=removed)
    has_loss = len(ids) >= 2
    return AblationResult(
        heads=heads,
        mode=mode,
        clean=clean,
        ablated=ablated,
        clean_loss=text_loss(clean.logits, ids) if has_loss else None,
        ablated_loss=text_loss(ablated.logits, ids) if has_loss else None,
        kl=_kl(clean.next_token_logits(), ablated.next_token_logits()),
        experts=removed,
        token_text=model.tokenizer.token_text,
    )


@dataclass(frozen=True)
class HeadImportance:
    """The effect of ablating each head alone: a layer x head map."""

    mode: str
    clean_loss: float
    loss_change: Tensor  # (L, H) loss with the head ablated minus the clean loss (NaN: a layer without attention)
    kl: Tensor  # (L, H) KL(clean || ablated) of the next-token distribution

    def ranked(self, by: Literal["loss", "kl"] = "loss") -> list[tuple[Head, float]]:
        """Heads from most to least important (a layer without attention, NaN in the map, has none)."""
        m = self.loss_change if by == "loss" else self.kl
        H = m.shape[1]
        flat = m.flatten()
        order = [i for i in flat.argsort(descending=True).tolist() if not torch.isnan(flat[i])]
        return [((i // H, i % H), float(flat[i])) for i in order]

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "clean_loss": self.clean_loss, "loss_change": self.loss_change.tolist(),
                "kl": self.kl.tolist()}


def head_importance(model: Model, text: str | Sequence[int], *, mode: AblationMode = "zero",
                    means: Tensor | None = None, between_passes: BetweenPasses | None = None) -> HeadImportance:
    """Ablate every head on its own (L x H forward passes) and record the loss change and KL."""
    ids = _ids(model, text)
    if mode == "mean" and means is None:
        means = head_means(model)
    clean = _run(model, ids, [], mode, means, between_passes=between_passes)
    clean_loss = text_loss(clean.logits, ids)
    dloss, kl = _head_map(model.config), _head_map(model.config)  # the answer
    for layer, h in all_heads(model.config):
        ablated = _run(model, ids, [(layer, h)], mode, means, between_passes=between_passes)
        dloss[layer, h] = text_loss(ablated.logits, ids) - clean_loss
        kl[layer, h] = _kl(clean.next_token_logits(), ablated.next_token_logits())
    return HeadImportance(mode, clean_loss, dloss, kl)


def ablate_each_head(model: Model, text: str | Sequence[int], *, mode: AblationMode = "zero",
                     means: Tensor | None = None, clean: Trace | None = None,
                     between_passes: BetweenPasses | None = None
                     ) -> tuple[dict[Head, AblationResult], HeadImportance]:
    """Every head ablated alone, sharing one clean pass (or `clean`, a trace of the same ids): each
    head's `AblationResult` and the importance map they make (the same numbers as `ablate` and
    `head_importance`, in L x H + 1 forward passes instead of 3 L x H)."""
    ids = _ids(model, text)
    txt = text if isinstance(text, str) else None
    if mode == "mean" and means is None:
        means = head_means(model)
    if clean is None or list(clean.token_ids) != ids or clean.start != 0:
        clean = _run(model, ids, [], mode, means, txt, between_passes)
    clean_loss = text_loss(clean.logits, ids)
    dloss, kl = _head_map(model.config), _head_map(model.config)  # the answer
    results: dict[Head, AblationResult] = {}
    for layer, h in all_heads(model.config):
        ablated = _run(model, ids, [(layer, h)], mode, means, txt, between_passes)
        loss = text_loss(ablated.logits, ids)
        res = AblationResult([(layer, h)], mode, clean, ablated, clean_loss, loss,
                             _kl(clean.next_token_logits(), ablated.next_token_logits()),
                             token_text=model.tokenizer.token_text)
        results[(layer, h)] = res
        dloss[layer, h] = loss - clean_loss
        kl[layer, h] = res.kl
    return results, HeadImportance(mode, clean_loss, dloss, kl)


@dataclass(frozen=True)
class PruningCurve:
    """Heads removed one at a time, least important first, and the loss after each removal."""

    mode: str
    clean_loss: float
    heads: list[Head]  # in the order they were pruned
    losses: list[float]  # loss after pruning heads[: i + 1]

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "clean_loss": self.clean_loss,
                "steps": [{"head": list(h), "loss": loss} for h, loss in zip(self.heads, self.losses, strict=True)]}


def prune_heads(model: Model, text: str | Sequence[int], *, mode: AblationMode = "zero",
                means: Tensor | None = None, max_heads: int | None = None, recompute: bool = True,
                between_passes: BetweenPasses | None = None) -> PruningCurve:
    """Greedy pruning: repeatedly remove the head whose removal (on top of those already removed)
    raises the loss least.

    `recompute=True` re-scores every remaining head at each step (about N^2 / 2 forward passes for N
    heads); `recompute=False` scores each head once, alone, and prunes in that order (2N passes), as
    in the head-importance pruning studies. `cost.prune_passes` counts them.
    """
    ids = _ids(model, text)
    if mode == "mean" and means is None:
        means = head_means(model)
    clean_loss = text_loss(_run(model, ids, [], mode, means, between_passes=between_passes).logits, ids)
    remaining = all_heads(model.config)
    n = len(remaining) if max_heads is None else max(0, min(max_heads, len(remaining)))
    pruned: list[Head] = []
    losses: list[float] = []
    if not recompute:
        imp = head_importance(model, ids, mode=mode, means=means, between_passes=between_passes)
        order = [h for h, _ in reversed(imp.ranked("loss"))][:n]
        for head in order:
            pruned.append(head)
            losses.append(text_loss(_run(model, ids, pruned, mode, means, between_passes=between_passes).logits, ids))
        return PruningCurve(mode, clean_loss, pruned, losses)
    for step in range(n):
        best: tuple[float, Head] | None = None
        for head in remaining:
            loss = text_loss(_run(model, ids, pruned + [head], mode, means, between_passes=between_passes).logits,
                             ids)
            if best is None or loss < best[0]:
                best = (loss, head)
        assert best is not None
        pruned.append(best[1])
        losses.append(best[0])
        remaining.remove(best[1])
        log.debug("pruning step %d: head %s, loss %.4f", step + 1, best[1], best[0])
    return PruningCurve(mode, clean_loss, pruned, losses)
