"""Why this token, by features: a block's output at one position split into its autoencoder's features plus the error,
each part's direct effect on a logit (or on the difference of two) through the final norm.

The residual stream at block L's output is x = b_dec + sum_i f_i W_dec[i] + error (`error` = x - decode(f), exactly).
The final norm is linear once its scale is frozen at the value the forward pass computed at the position, as
`attribution.direct_logit_attribution` freezes it: a vector's effect is (the vector, centred where the norm centres)
times that scale, times the norm's weight, dotted with the token's column of W_U (minus the other token's). So the
parts (the decoder's bias, each active feature, the error) add up to x's own effect, `whole`.

That is the direct effect of block L's output, not the logit: the blocks after L write more into the stream. The
logit is `whole` + `later` (what blocks L+1.. wrote, through the same frozen norm) + `rest` (the norm's shift and an
unembedding bias along the direction, which no vector writes); at the last block `later` is 0."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..attribution import direct_logit_attribution
from ..errors import InputError
from ..trace import Trace
from .encode import SaeLike, choose_sae, default_hook, encode_activation, sae_k
from .sae import builtin_saes, parse_hook, trace_name


@dataclass(frozen=True)
class FeatureEffect:
    id: int
    activation: float  # f_i at the position
    effect: float  # f_i W_dec[i]'s direct effect on the metric


@dataclass(frozen=True)
class FeatureAttribution:
    """The metric at `position` with block `layer`'s output there split into features. `bias + error +
    sum(all active features' effects) == whole` (float64 sums); `features` lists the `top` largest by |effect| and
    `others` is the sum of the remaining active features' effects; `whole + later + rest == metric`."""

    hook: str
    layer: int
    n_layer: int
    d_sae: int
    k: int | None
    tokens: list[str]
    position: int
    target: int
    target_text: str
    versus: int | None
    versus_text: str | None
    metric: float  # the logit of target (minus that of versus) at the position
    rest: float  # the final norm's shift (and an unembedding bias) along the direction: no vector writes it
    scale: float  # the final norm's scale at the position, from the forward pass (frozen)
    whole: float  # the direct effect of block `layer`'s output: what the parts add up to
    later: float  # metric - rest - whole: what the blocks after `layer` wrote (0 at the last block)
    bias: float  # the decoder's bias b_dec's effect
    error: float  # the reconstruction error's effect
    active: int  # features active at the position
    features: list[FeatureEffect]  # the first `top` by |effect|
    others: float  # the other active features' effects, summed

    def total(self) -> float:
        """The parts' sum: equal to `whole`."""
        return self.bias + self.error + sum(f.effect for f in self.features) + self.others


def _centre(x: Tensor, centres: bool) -> Tensor:
    return x - x.mean(-1, keepdim=True) if centres else x


@torch.inference_mode()
def feature_attribution(model: Any, trace: Trace, hook: str | None = None, target: int | str | None = None,
                        versus: int | str | None = None, *, position: int | None = None, sae: SaeLike | None = None,
                        top: int = 10) -> FeatureAttribution:
    """The direct logit attribution of `target` (a token id or text, as `model.token_id` reads it; default as
    `ExplainerModel.attribute`'s) at `position` (default: the last) of `trace`, through the features of the
    autoencoder at `hook` (a block's output, `blocks.L.hook_resid_post`; default: the middle one of the model's
    shipped autoencoders that read a block's output; `sae` as `choose_sae` takes it). With `versus`, the metric is
    logit(target) - logit(versus)."""
    if not 1 <= top <= 1000:
        raise InputError(f"top {top} is out of range: give 1..1000 features to list")
    net = getattr(model, "net", None)
    if net is None:
        raise InputError(f"{model.name} runs through transformers' modules; the split of a logit into features is "
                         "computed for the project's own families")
    if hook is not None and parse_hook(hook)[1] != "resid_post":
        raise InputError(f"{hook} is not a block's output; the split into features reads the residual stream at a "
                         "block's output (blocks.L.hook_resid_post)")
    if hook is None and sae is None:  # the middle one of the shipped autoencoders that read a block's output
        outputs = [h for h in builtin_saes(model) if parse_hook(h)[1] == "resid_post"]
        hook = default_hook(outputs) if outputs else None
    a, hook, _ = choose_sae(model, hook, sae, net.unembed.weight.device)
    layer, stage = parse_hook(hook)
    if stage != "resid_post":
        raise InputError(f"the autoencoder reads {hook}, not a block's output; the split into features reads the "
                         "residual stream at a block's output (blocks.L.hook_resid_post)")
    t = None if target is None else model.token_id(target)
    v = None if versus is None else model.token_id(versus)
    dla = direct_logit_attribution(net, model.tokenizer, trace, t, v, position=position)
    p, t, v = dla.position, dla.target, dla.versus

    # the read-out direction exactly as direct_logit_attribution builds it (float64, on the CPU)
    f64 = torch.float64
    W_U = net.weight("unembed.W_U")
    direction = W_U[:, t].to("cpu", f64) - (W_U[:, v].to("cpu", f64) if v is not None else 0)
    along = net.weight("ln_final.w").to("cpu", f64) * direction * dla.scale
    centres = net.config.arch.norm == "layer"

    x = trace[trace_name(hook)][p].to("cpu", f64)  # (D,)
    ids, vals, counts, _, _ = encode_activation(a, x[None])
    n = int(counts[0])
    ids, vals = ids[0, :n].cpu(), vals[0, :n].to("cpu", f64)
    W_dec, b_dec = a.W_dec.to("cpu", f64), a.b_dec.to("cpu", f64)
    rows = vals[:, None] * W_dec[ids]  # (n, D): what each active feature writes
    error = x - b_dec - rows.sum(0)  # x - decode(f), in float64, so the parts add up to x
    effects = (_centre(rows, centres) @ along).tolist()
    order = sorted(range(n), key=lambda i: -abs(effects[i]))
    listed = [FeatureEffect(int(ids[i]), float(vals[i]), effects[i]) for i in order[:top]]
    whole = float(_centre(x, centres) @ along)
    return FeatureAttribution(
        hook=hook, layer=layer, n_layer=net.config.n_layer, d_sae=a.cfg.d_sae, k=sae_k(a), tokens=list(trace.tokens),
        position=p, target=t, target_text=dla.target_text, versus=v, versus_text=dla.versus_text, metric=dla.metric,
        rest=dla.rest, scale=dla.scale, whole=whole, later=dla.metric - dla.rest - whole,
        bias=float(_centre(b_dec, centres) @ along), error=float(_centre(error, centres) @ along), active=n,
        features=listed, others=float(sum(effects[i] for i in order[top:])))
