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

A decoder that runs through transformers (`GenericModel.attribute`, `generic_logit_attribution`) is split by what
its trace records: the residual stream entering the first layer, each layer's token-mixing sublayer (per head where
its write is its attention's output projection of z, else whole: kind "mixer") and its MLP sublayer, with the final
norm linearised at the forward pass's input (`freeze_final_norm`, read from the norm module itself). What cannot be
split so (a layer that scales its sublayers' outputs with no point between them, a head that soft-caps the logits)
is refused in one sentence, and the parts are checked to add up to the logit before they are returned.
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

# "mixer": a layer's token-mixing sublayer's whole write, where it is not split by head (a decoder that runs through
# transformers: a linear-attention, convolution or state-space layer, or an attention normalised before it is added)
Kind = Literal["embed", "pos_embed", "head", "attn_bias", "mlp", "expert", "mixer"]
_LAYER_PARTS = {"attn_bias": "attn bias", "mlp": "MLP", "mixer": "mixer"}


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
        if self.kind in _LAYER_PARTS:
            return f"{_LAYER_PARTS[self.kind]} {self.layer}"
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
    heads: Tensor = field(repr=False)  # (L, H); NaN in a layer not split by head (a model through transformers)
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
            "heads": [[None if x != x else x for x in row] for row in self.heads.tolist()],  # NaN: not split
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


# -- a decoder that runs through transformers' own modules (generic.GenericModel) ---------------------------

# how close a check of the decomposition must come, relative to the values' scale: float32 forward passes, and
# those of 16-bit weights (whose every product rounds to 3 significant digits)
_CLOSE = 1e-4
_CLOSE_16 = 5e-2


def _tolerance(dtype: torch.dtype) -> float:
    return _CLOSE if dtype.itemsize >= 4 else _CLOSE_16
# the mixers' output stages of a generic layer, by the stage each records under
_MIXER_OUTS = ("attn_out", "linear_attn.out", "conv.out", "ssm.out", "mixer.out")


def _is_norm(module: torch.nn.Module) -> bool:
    """A norm, as the bridge tells one (a norm in a layer scales what passes through it; it writes nothing)."""
    return isinstance(module, (torch.nn.LayerNorm, torch.nn.RMSNorm)) or "Norm" in type(module).__name__


def _near(a: Tensor, b: Tensor, tol: float) -> bool:
    return bool((a - b).abs().max() <= tol * max(1.0, float(b.abs().max())))


@dataclass(frozen=True)
class FrozenNorm:
    """A final norm linearised at one position: out = weight * P(x) * scale + shift, P the centring where the norm
    centres (LayerNorm) and the identity where it does not (RMSNorm, Gemma's (1 + w) norm: `weight` is what it
    multiplies by, whatever its parametrisation), `scale` the 1 / rms (or 1 / std) the forward pass computed."""

    weight: Tensor  # (D,) float64
    shift: Tensor  # (D,) float64
    centres: bool
    scale: float


def freeze_final_norm(norm: torch.nn.Module, x: Tensor, what: str) -> tuple[FrozenNorm, Tensor]:
    """The final norm `norm` as it applies to the residual vector `x` (D,), linearised there, and its output
    (D,) float64. Read from the module itself, whatever its parametrisation: its shift is its output for a zero
    vector, its weight its output for a vector of +c and -c in turn (mean 0, rms c: the scale cancels c, up to
    eps / c^2), and the scale at this position is the one number that makes weight * P(x) * scale + shift equal
    its output for x; refused (one sentence) where no such number does."""
    p = next(norm.parameters(), None)
    dtype, device = (p.dtype, p.device) if p is not None else (x.dtype, x.device)
    D = x.shape[-1]
    f64 = torch.float64
    probe = torch.ones(D, device=device, dtype=dtype)
    probe[1::2] = -1.0
    c = 64.0
    shift = norm(torch.zeros(1, 1, D, device=device, dtype=dtype))[0, 0].to(f64)
    weight = (norm((c * probe)[None, None])[0, 0].to(f64) - shift) * probe.to(f64)
    y = norm(x.to(device, dtype)[None, None])[0, 0].to(f64)
    xs, target = x.to(device, f64), y - shift
    for centres in (False, True):
        a = weight * (xs - xs.mean() if centres else xs)
        denom = float(a @ a)
        if D % 2 or denom == 0.0:
            continue
        scale = float(target @ a) / denom
        if _near(a * scale, target, _tolerance(dtype)):
            return FrozenNorm(weight, shift, centres, scale), y
    raise InputError(f"{what}'s final norm is not a weight times its input (centred or not) times one scale per "
                     "position, so its scale cannot be frozen and the logit cannot be split into parts")


def _o_proj(attention: torch.nn.Module, z: Tensor, attn_out: Tensor) -> torch.nn.Linear | None:
    """The attention module's output projection, which z feeds: the one child Linear from H * Dv to D that gives
    the module's output from z ((H, T, Dv), the heads side by side) as the forward pass did; None where no child
    does (a gate between z and the projection, as Qwen3.5's, or a projection that is not a Linear child)."""
    H, T, Dv = z.shape
    found = []
    for m in attention.children():
        if isinstance(m, torch.nn.Linear) and m.in_features == H * Dv and m.out_features == attn_out.shape[-1]:
            again = m(z.to(m.weight.device, m.weight.dtype).permute(1, 0, 2).reshape(1, T, H * Dv))[0]
            if _near(again.double(), attn_out.to(again.device).double(), _tolerance(m.weight.dtype)):
                found.append(m)
    return found[0] if len(found) == 1 else None


def _head_of(model: Any) -> tuple[Tensor, Tensor | None]:
    """The unembedding's weight (V, D) and bias (V,) of a generic model; refused where it is not a Linear."""
    from .bridge import find_structure

    unembed = find_structure(model.hf).unembedding
    if not isinstance(unembed, torch.nn.Linear):
        raise InputError(f"{model.name}'s unembedding is not a plain linear map, so the logit cannot be split into "
                         "what each part of the model wrote")
    return unembed.weight, unembed.bias


@torch.inference_mode()
def generic_logit_attribution(model: Any, trace: Trace, target: int | None = None, versus: int | None = None, *,
                              position: int | None = None) -> Attribution:
    """Direct logit attribution for a decoder that runs through transformers' own modules (`GenericModel`), from
    its trace and its modules' weights, no extra forward pass of the text. The parts: the residual stream
    entering the first layer ("embed": the embedding as the decoder scales it), then per layer what its
    token-mixing sublayer wrote into the stream (resid_mid - resid_pre; split into its heads, "head", and the
    output projection's bias, "attn_bias", where that write is the attention module's output itself and its
    output projection is a Linear that z feeds; else one "mixer" part: a linear-attention, convolution or
    state-space layer, or an attention whose output the layer normalises or scales before adding it) and what
    its MLP sublayer wrote (resid_post - resid_mid, "mlp"). Where a layer has no point between the two (parallel
    sublayers), its mixers' outputs and its MLP's are the parts if they add up to what the layer wrote; refused
    in one sentence otherwise. The final norm's scale is frozen at the forward pass's value
    (`freeze_final_norm`), and a head that multiplies the logits by a constant (Granite's logits_scaling) is
    folded into the direction; a head that caps them (a soft cap) cannot be split and is refused."""
    from .bridge import find_structure

    cfg = model.config
    p = _position(trace, position)
    if target is None:
        t = trace.token_ids[p + 1] if p + 1 < trace.n_tokens else int(torch.argmax(trace.next_token_logits()))
    else:
        t = target
    v = versus
    if v is not None and v == t:
        raise InputError("the target and the token it is compared with are the same token: their difference is 0")
    f64, L = torch.float64, cfg.n_layer
    here = float64_device(trace["logits"].device)
    tol = _tolerance(model.dtype)
    structure = find_structure(model.hf)
    if structure.final_norm is None:
        raise InputError(f"{model.name}'s decoder has no final norm that the bridge can find, so its scale cannot be "
                         "frozen and the logit cannot be split into parts")
    frozen, normed = freeze_final_norm(structure.final_norm, trace[block_name(L - 1, "resid_post")][p], model.name)
    W, b = _head_of(model)
    normed = normed.to(here)
    logits = trace["logits"][p].to(here, f64)
    plain = W.to(here, f64) @ normed + (b.to(here, f64) if b is not None else 0.0)
    factor = float(logits @ plain) / max(float(plain @ plain), 1e-300)
    if not _near(plain * factor, logits, tol):  # the norm's output unembedded is not the logits, up to one factor
        raise InputError(f"{model.name}'s logits are not its final norm's output unembedded, up to one factor (its "
                         "head caps them, for one), so the logit cannot be split into parts")
    direction = factor * (W[t].to(here, f64) - (W[v].to(here, f64) if v is not None else 0.0))  # (D,)
    along = frozen.weight.to(here) * frozen.scale * direction

    def contribution(x: Tensor) -> float:
        x = x.to(here, f64)
        if frozen.centres:
            x = x - x.mean(-1, keepdim=True)
        return float(x @ along)

    rest = float(frozen.shift.to(here) @ direction)
    if b is not None:
        rest += factor * float(b[t].to(here, f64) - (b[v].to(here, f64) if v is not None else 0.0))

    comps: list[Component] = [Component("embed", None, None, contribution(trace[block_name(0, "resid_pre")][p]))]
    heads = torch.full((L, cfg.n_head), float("nan"), dtype=f64, device="cpu")  # the answer; NaN: not split by head
    for i, layer in enumerate(cfg.layers):
        at = {s: trace[block_name(i, s)][p] for s in ("resid_pre", "resid_post")}
        pre, post = at["resid_pre"].to(here, f64), at["resid_post"].to(here, f64)
        nxt = trace[block_name(i + 1, "resid_pre")][p] if i + 1 < L else None  # (a device map: on layer i + 1's device)
        if nxt is not None and not torch.equal(nxt.to(at["resid_post"].device), at["resid_post"]):
            raise InputError(f"{model.name}'s layer {i + 1} does not read what layer {i} wrote, so the residual "
                             "stream is not a sum of the layers' writes and the logit cannot be split into parts")
        found = structure.layers[i]
        others = [n for n, c in found.module.named_children() if n not in found.mixers and n != found.mlp
                  and not _is_norm(c) and any(True for _ in c.parameters())]
        if others:
            raise InputError(f"{model.name}'s layer {i} also writes through {', '.join(others)}, neither its token "
                             "mixer nor its MLP, so its write cannot be split into a mixer's and an MLP's part")
        outs = [trace[block_name(i, s)][p].to(here, f64) for s in _MIXER_OUTS if s in layer.stages]
        mlp_out = trace[block_name(i, "mlp_out")][p].to(here, f64) if "mlp_out" in layer.stages else None
        if "resid_mid" in layer.stages:
            mid = trace[block_name(i, "resid_mid")][p].to(here, f64)
            mixed, mlp = mid - pre, post - mid
        elif outs and _near(sum(outs) + (mlp_out if mlp_out is not None else 0.0), post - pre, tol):
            mixed = sum(outs)
            mlp = post - pre - mixed if mlp_out is not None else None
        else:
            raise InputError(f"{model.name}'s layer {i} does not add its sublayers' outputs to the residual stream as "
                             "they are, and has no point between them, so its write cannot be split into parts")
        split = None
        if layer.kinds == ("attention",) and "attn_out" in layer.stages:
            attn_out = trace[block_name(i, "attn_out")]
            if _near(mixed, attn_out[p].to(here, f64), tol):
                module = next(m for name, m in found.module.named_children() if found.mixers.get(name) == "attention")
                z = trace[block_name(i, "attn.z")]
                o = _o_proj(module, z, attn_out)
                if o is not None:
                    H, _, Dv = z.shape
                    W_O = o.weight.to(here, f64).reshape(-1, H, Dv)  # (D, H, Dv)
                    split = (torch.einsum("hd,ehd->he", z[:, p].to(here, f64), W_O), o.bias)
        if split is None:
            comps.append(Component("mixer", i, None, contribution(mixed)))
        else:
            per_head, bias = split
            if frozen.centres:
                per_head = per_head - per_head.mean(-1, keepdim=True)
            heads[i] = (per_head @ along).cpu()
            comps += [Component("head", i, h, float(heads[i, h])) for h in range(per_head.shape[0])]
            if bias is not None:
                comps.append(Component("attn_bias", i, None, contribution(bias)))
        if mlp is not None:
            comps.append(Component("mlp", i, None, contribution(mlp)))

    metric = float(logits[t] - (logits[v] if v is not None else 0))
    total = sum(c.value for c in comps) + rest
    if abs(total - metric) > tol * max(1.0, abs(metric), float(logits.abs().max())):
        raise InputError(f"{model.name}'s parts add up to {total:.6g}, not to the logit {metric:.6g}, so this model's "
                         "residual stream is not split here")
    text = model.tokenizer.token_text
    return Attribution(tokens=trace.tokens, position=p, target=t, target_text=text(t), versus=v,
                       versus_text=None if v is None else text(v), metric=metric, rest=rest, scale=frozen.scale,
                       components=comps, heads=heads.to(torch.float32), experts=None)
