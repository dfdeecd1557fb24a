"""Direct logit attribution: the logit of a token as a sum of what each part of the model wrote.

The residual stream at the last block's output is a sum: the token embedding, the position embedding
(GPT-2), and for every block what each attention head wrote (its `z` times its rows of W_O), the output
projection's bias, and what the MLP wrote (with sandwich norms, Gemma, each head's write goes through the
norm after attention, whose scale is frozen the same way); in a block with experts, what each expert chosen
at that position wrote (its output times its weight: the MLP's output is their sum). The final norm is
linear once its scale is fixed: with the scale the forward pass actually computed at that position
(1 / sqrt(var + eps) for LayerNorm, 1 / rms for RMSNorm) frozen, each part's contribution to a logit is
that part, centred where the norm centres, times the scale, times the norm's weight, dotted with the
token's column of W_U. The contributions plus a constant (the norm's shift dotted with the same column)
equal the logit exactly. For "why A rather than
B", the column is W_U[:, A] - W_U[:, B] and the sum is the logit difference.

Semantics as TransformerLens's `cache.stack_head_results` + `apply_ln_to_stack` + `logit_attrs`, so a
result can be checked against it. Computed from the trace alone: no extra forward pass.
`ExplainerModel.attribute` is the entry point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from .devices import float64_device
from .errors import InputError
from .loading.tokenizer import TextTokenizer
from .models.decoder import Decoder
from .names import block_name
from .trace import Trace

Kind = Literal["embed", "pos_embed", "head", "attn_bias", "mlp", "expert"]


@dataclass(frozen=True)
class Component:
    """One part of the model that writes the residual stream, and its contribution to the metric."""

    kind: Kind
    layer: int | None
    head: int | None
    value: float
    expert: int | None = None  # kind "expert": the expert's index in its block

    @property
    def label(self) -> str:
        if self.kind == "head":
            return f"L{self.layer}H{self.head}"
        if self.kind == "expert":
            return f"L{self.layer}E{self.expert}"
        if self.kind in ("attn_bias", "mlp"):
            return f"{'attn bias' if self.kind == 'attn_bias' else 'MLP'} {self.layer}"
        return {"embed": "token embedding", "pos_embed": "position embedding"}[self.kind]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "layer": self.layer, "head": self.head, "expert": self.expert, "value": self.value}


@dataclass(frozen=True)
class Attribution:
    """The metric (a logit, or the difference of two) at one position as a sum of contributions.

    `components` lists every part, in the order of the computation; `sum(c.value) + rest == metric` to
    float rounding (computed in float64). `heads` is the (L, H) map of the heads' contributions; `experts`, in a
    mixture of experts, the (L, E) map of the experts' (0 where an expert was not chosen at the position, and
    in blocks without experts)."""

    tokens: list[str]
    position: int  # index into the traced tokens of the prediction explained
    target: int
    target_text: str
    versus: int | None
    versus_text: str | None
    metric: float  # the logit of `target` (minus that of `versus`) at `position`
    rest: float  # what no component wrote: the final norm's shift (and an unembedding bias) along the direction
    scale: float  # the final norm's scale at `position`, from the forward pass (frozen)
    components: list[Component]
    heads: Tensor = field(repr=False)  # (L, H)
    experts: Tensor | None = field(default=None, repr=False)  # (L, E) in a mixture of experts

    def __repr__(self) -> str:
        what = f"logit({self.target_text!r})" + ("" if self.versus is None else f" - logit({self.versus_text!r})")
        top = self.ranked(5)
        return "\n".join([
            f"Attribution of {what} at position {self.position} ({self.tokens[self.position]!r}) = {self.metric:.4f}: "
            f"{len(self.components)} components + rest {self.rest:.4f}; the {len(top)} largest:",
            *(f"  {c.label:<20} {c.value:>+9.4f}" for c in top),
            f"  (.components: all, in the order of the computation; .ranked(n): the n largest; .heads: the "
            f"{tuple(self.heads.shape)} map of the heads'; .to_dict(): everything)"])

    def ranked(self, n: int | None = None) -> list[Component]:
        """The components by the size of their contribution, largest first."""
        out = sorted(self.components, key=lambda c: abs(c.value), reverse=True)
        return out if n is None else out[:n]

    def total(self) -> float:
        """The components' sum plus the constant: equal to `metric`."""
        return sum(c.value for c in self.components) + self.rest

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens, "position": self.position,
            "target": {"id": self.target, "text": self.target_text},
            "versus": None if self.versus is None else {"id": self.versus, "text": self.versus_text},
            "metric": self.metric, "rest": self.rest, "scale": self.scale,
            "components": [c.to_dict() for c in self.components],
            "heads": self.heads.tolist(),
            "experts": None if self.experts is None else self.experts.tolist(),
        }


def _position(trace: Trace, position: int | None) -> int:
    T = trace.n_tokens
    if position is None:
        return T - 1
    if isinstance(position, bool) or not isinstance(position, int) or not -T <= position < T:
        raise InputError(f"position {position!r} is outside the {T} traced tokens")
    return position % T


@torch.inference_mode()
def direct_logit_attribution(net: Decoder, tokenizer: TextTokenizer, trace: Trace, target: int | None = None,
                             versus: int | None = None, *, position: int | None = None) -> Attribution:
    """Why the model `net` gives token id `target` the logit it does at `position` (default: the last) of
    `trace`: the contribution of every component, with the final norm's scale frozen at the value the forward
    pass computed there (`ExplainerModel.attribute` takes tokens as text too).

    `target` defaults to the token that actually comes next in the text at an earlier position, and to the
    model's top prediction at the last. With `versus`, the metric is logit(target) - logit(versus)."""
    cfg = net.config
    p = _position(trace, position)
    if trace.start:
        raise InputError("attribution needs a trace of the whole text, not of a continuation from a cache")
    if target is None:
        t = trace.token_ids[p + 1] if p + 1 < trace.n_tokens else int(torch.argmax(trace.next_token_logits()))
    else:
        t = target
    v = versus
    weights = set(net.weight_names())
    if v is not None and v == t:
        raise InputError("the target and the token it is compared with are the same token: their difference is 0")

    f64 = torch.float64
    # the sums are made in float64 where the unembedding is (on the CPU for a GPU without float64); what each
    # block's head wrote is computed where that block is, and only its (H, D) rows are moved
    here = float64_device(net.unembed.weight.device)
    W_U = net.weight("unembed.W_U")
    direction = (W_U[:, t].to(here, f64) - (W_U[:, v].to(here, f64) if v is not None else 0))  # (D,)
    layer_norm = cfg.arch.norm == "layer"  # LayerNorm centres each vector; RMSNorm does not
    w = net.weight("ln_final.w").to(here, f64)
    eps = cfg.layer_norm_epsilon
    if layer_norm:
        scale = float(1.0 / torch.sqrt(trace["ln_final.var"][p].to(here, f64) + eps))
    else:
        scale = float(1.0 / trace["ln_final.rms"][p].to(here, f64))
    along = w * direction * scale  # a residual vector's contribution is (centred vector) . along

    def contribution(x: Tensor) -> float:
        x = x.to(here, f64)
        if layer_norm:
            x = x - x.mean(-1, keepdim=True)
        return float(x @ along)

    rest = 0.0
    if "ln_final.b" in weights:
        rest += float(net.weight("ln_final.b").to(here, f64) @ direction)
    if "unembed.b_U" in weights:
        b = net.weight("unembed.b_U").to(here, f64)
        rest += float(b[t] - (b[v] if v is not None else 0))

    # what the embedding put into the stream: the token's row (times sqrt(d_model) where the family scales it)
    embedded = trace["embed.scaled" if cfg.arch.embed_scale else "embed.token"][p]
    comps: list[Component] = [Component("embed", None, None, contribution(embedded))]
    if cfg.arch.positions == "learned":
        comps.append(Component("pos_embed", None, None, contribution(trace["embed.position"][p])))
    L, H = cfg.n_layer, cfg.n_head
    heads = torch.zeros(L, H, dtype=f64, device="cpu")  # the answer
    experts = torch.zeros(L, cfg.n_experts, dtype=f64, device="cpu") if cfg.n_experts is not None else None
    for layer in range(L):
        W_O = net.weight(block_name(layer, "attn.W_O"))  # (H, Dh, D)
        there = float64_device(W_O.device)
        z = trace[block_name(layer, "attn.z")][:, p].to(there, f64)  # (H, Dh)
        per_head = torch.einsum("hd,hde->he", z, W_O.to(there, f64))  # (H, D): what each head wrote at p
        if cfg.arch.sandwich_norm:  # the norm after attention, its scale frozen at p too: linear in each head
            per_head = per_head * (net.weight(block_name(layer, "ln1_post.w")).to(there, f64)
                                   / trace[block_name(layer, "ln1_post.rms")][p].to(there, f64))
        if layer_norm:
            per_head = per_head - per_head.mean(-1, keepdim=True)
        heads[layer] = per_head.to(here) @ along
        comps += [Component("head", layer, h, float(heads[layer, h])) for h in range(H)]
        if block_name(layer, "attn.b_O") in weights:
            b_O = net.weight(block_name(layer, "attn.b_O"))
            comps.append(Component("attn_bias", layer, None, contribution(b_O)))
        if experts is not None and cfg.has_experts(layer):  # each chosen expert's output times its weight
            chosen = trace[block_name(layer, "mlp.expert_indices")][p].tolist()
            written = (trace[block_name(layer, "mlp.expert_weights")][p].to(here, f64)[:, None]
                       * trace[block_name(layer, "mlp.expert_out")][p].to(here, f64))
            for e, part in zip(chosen, (written @ along).tolist(), strict=True):
                experts[layer, e] = part
                comps.append(Component("expert", layer, None, float(part), expert=e))
        else:
            comps.append(Component("mlp", layer, None, contribution(trace[block_name(layer, "mlp_out")][p])))

    logits = trace["logits"][p].to(here, f64)
    metric = float(logits[t] - (logits[v] if v is not None else 0))
    text = tokenizer.token_text
    return Attribution(tokens=trace.tokens, position=p, target=t, target_text=text(t), versus=v,
                       versus_text=None if v is None else text(v), metric=metric, rest=rest, scale=scale,
                       components=comps, heads=heads.to(torch.float32),
                       experts=None if experts is None else experts.to(torch.float32))
