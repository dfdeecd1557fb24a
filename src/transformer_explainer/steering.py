"""Steering (activation addition): `strength * direction` added to the residual stream after block L, at every
position the model runs, the prompt's and each generated token's, and the continuation beside the plain one from
the same seed.

Where it is added: `resid_post` of block L is `resid_mid + w`, where w is what the block's last sublayer writes
(its MLP's output, or that output normed again where the family norms its sublayers' writes: Gemma's sandwich
norms). A forward hook on that module adds the vector to w, which adds it to `resid_post` exactly, and fires
wherever the block runs: the decoder's forward over the prompt and the lean one-token step of generation
(`models/decode.py`, which calls the MLP and its norm as modules), so generation keeps its one loop
(`TextModel.generate_ids`). A model that runs through transformers has the hook on its decoder layer, whose output
is `resid_post`. As the bridge's hooks do (`bridge/state.py`), the hook reads what to add from a context variable
set by the call that steers, so a call running meanwhile on the same model in another thread is not steered.

Directions: a feature's decoder row (a sparse autoencoder at `blocks.L.hook_resid_post`: `steering_features.py`), or the
difference of the residual-stream means at layer L of two sets of prompts (each prompt's mean over its positions,
then the mean over the prompts: activation addition's "contrast" direction).

Where the text breaks down, measured two ways against the plain continuation: the steered continuation's mean
log-probability per token under the unsteered model (each token given the prompt and the tokens before it), and its
share of distinct tokens (distinct tokens / tokens). The text counts as broken where that mean falls below
`BREAKDOWN_BOUND` of the way from the plain continuation's own mean to a uniform guess over the vocabulary (-ln V):
halfway; or where its share of distinct tokens falls below `REPETITION_BOUND` of the plain continuation's: half (a
text that repeats one likely token, ",,,,,,", stays likely under the model, and the second test catches it). A
sweep of strengths from small to large fractions of the residual stream's typical size (the median norm over the
prompt's positions at layer L) finds the first strength that breaks it; every point of the sweep is returned, not
only the verdict.
"""

from __future__ import annotations

import math
import secrets
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from .errors import InputError
from .limits import MAX_CONTRAST_CHARS, MAX_CONTRAST_PROMPTS, MAX_STEER_TOKENS, STEER_TOKENS
from .models.kv_cache import KVCache
from .sampling import SamplingParams


class GeneratedToken(Protocol):
    """A generated token as `TextModel.generate_ids` yields it."""

    id: int
    text: str
    prob: float  # its probability under the distribution it was drawn from


class TextModel(Protocol):
    """What steering reads of a model: `text_model.TextModel` has it all (its modules are reached by what `runs`
    says: `net`, our decoder, or `hf`, the transformers model). A protocol, so that the model class can offer
    `steer` without this module importing it back."""

    name: str
    tokenizer: Any

    @property
    def config(self) -> Any: ...
    @property
    def runs(self) -> str: ...
    @property
    def context_length(self) -> int: ...
    @property
    def device(self) -> torch.device: ...
    @property
    def dtype(self) -> torch.dtype: ...
    def encode(self, text: str, *, truncate: bool = False) -> list[int]: ...
    def last_logits(self, ids: list[int]) -> Tensor: ...
    def generate_ids(self, ids: list[int], max_new_tokens: int, params: SamplingParams | None = None, *,
                     stop_at_eos: bool = True) -> Iterator[GeneratedToken]: ...
    def residual_logits(self, x: Tensor) -> Tensor: ...

# the sweep's strengths, as multiples of the residual stream's median norm at the layer over the direction's norm
SWEEP_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
BREAKDOWN_BOUND = 0.5  # broken: the mean log-probability has gone this far from the plain text's to a uniform guess's
REPETITION_BOUND = 0.5  # or its share of distinct tokens is below this fraction of the plain text's
LENS_TOKENS = 10  # tokens the direction's lens lists each way

BetweenRuns = Callable[[], None]


# -- adding the vector: one hook, dispatched by a context variable -------------------------------------------


@dataclass(frozen=True, eq=False)
class _Addition:
    add: Tensor  # (D,) strength * direction, in the residual stream's dtype on the hooked module's device


_ACTIVE: ContextVar[_Addition | None] = ContextVar("transformer_explainer_steering", default=None)


def _add_to_first_tensor(out: Any, add: Tensor) -> Any:
    """`out` with `add` added to its first tensor (a tuple keeps its other items)."""
    if isinstance(out, Tensor):
        return out + add
    j = next(j for j, o in enumerate(out) if isinstance(o, Tensor))
    return type(out)([*out[:j], out[j] + add, *out[j + 1:]])


def _block_module(model: TextModel, layer: int) -> nn.Module:
    """The module whose output is the residual stream after block `layer`: our own block (its forward returns
    (resid_post, keys and values)), or the transformers decoder layer."""
    if model.runs == "own":
        return model.net.blocks[layer]  # type: ignore[attr-defined]
    from .bridge.structure import find_structure

    return find_structure(model.hf).layers[layer].module  # type: ignore[attr-defined]


def _writer(model: TextModel, layer: int) -> nn.Module:
    """The module whose output becomes `resid_post` of block `layer` when added to the stream: our own block's last
    sublayer write (the MLP, or the norm after it), or the transformers decoder layer itself."""
    if model.runs == "own":
        block = model.net.blocks[layer]  # type: ignore[attr-defined]
        return block.ln2_post if block.ln2_post is not None else block.mlp
    return _block_module(model, layer)


@contextmanager
def steering(model: TextModel, layer: int, vector: Tensor) -> Iterator[None]:
    """Within the block, in this thread (and context) alone, `vector` (D,) is added to the residual stream after
    block `layer` at every position `model` runs. `layer` and `vector` as `check_layer` / `check_vector` pass them."""
    module = _writer(model, layer)
    weight = next(module.parameters(), None)
    device = weight.device if weight is not None else model.device
    mine = _Addition(vector.to(device=device, dtype=model.dtype))

    def hook(_m: nn.Module, _args: tuple[Any, ...], out: Any) -> Any:
        return _add_to_first_tensor(out, mine.add) if _ACTIVE.get() is mine else None

    handle = module.register_forward_hook(hook)
    token = _ACTIVE.set(mine)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        handle.remove()


# -- checks ----------------------------------------------------------------------------------------------------


def check_layer(model: TextModel, layer: int) -> int:
    L = model.config.n_layer
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise InputError(f"the layer must be a whole number from 0 to {L - 1}, got {layer!r}")
    if not 0 <= layer < L:
        raise InputError(f"layer {layer} is outside 0..{L - 1}: {model.name} has {L} blocks, and steering adds to the "
                         f"residual stream after one of them", code="layer_out_of_range", layer=layer, max=L - 1)
    return layer


def check_strength(strength: float) -> float:
    if isinstance(strength, bool) or not isinstance(strength, int | float) or not math.isfinite(strength):
        raise InputError(f"the steering strength must be a finite number, got {strength!r}", code="number_not_finite",
                         field="strength")
    return float(strength)


def check_vector(model: TextModel, vector: Tensor | Sequence[float], what: str = "the direction") -> Tensor:
    """`vector` as a float32 (D,) tensor on the CPU; one sentence if its width is not the model's, or it is not
    finite, or it is zero."""
    v = torch.as_tensor(vector, dtype=torch.float32, device="cpu").detach()
    D = model.config.n_embd
    if v.shape != (D,):
        raise InputError(f"{what} has shape {tuple(v.shape)} but {model.name}'s residual stream is {D} wide: give "
                         f"one vector of {D} numbers")
    if not bool(torch.isfinite(v).all()):
        raise InputError(f"{what} has a NaN or infinite entry")
    if not bool(v.any()):
        raise InputError(f"{what} is zero: adding it changes nothing")
    return v


def check_tokens(tokens: int) -> int:
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= MAX_STEER_TOKENS:
        raise InputError(f"the number of tokens to generate must be a whole number from 1 to {MAX_STEER_TOKENS}, "
                         f"got {tokens!r}")
    return tokens


# -- directions ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Direction:
    """A vector of the residual stream's width (float32, CPU) meant for layer `layer`, and where it came from."""

    vector: Tensor  # (D,)
    layer: int
    kind: str  # "feature", "contrast" or "vector"
    describe: str  # e.g. "feature 120 of the autoencoder at blocks.3.hook_resid_post"
    feature: int | None = None

    @property
    def norm(self) -> float:
        return float(self.vector.norm())


def _prompt_ids(model: TextModel, prompts: Sequence[str], which: str) -> list[list[int]]:
    if isinstance(prompts, str) or not isinstance(prompts, Sequence):
        raise InputError(f"contrast set {which} must be a list of prompts")
    if not prompts:
        raise InputError(f"contrast set {which} is empty: write at least one prompt in it", code="steer_set_empty",
                         set=which)
    if len(prompts) > MAX_CONTRAST_PROMPTS:
        raise InputError(f"contrast set {which} has {len(prompts)} prompts; at most {MAX_CONTRAST_PROMPTS} are read",
                         code="steer_set_too_many", set=which, count=len(prompts), limit=MAX_CONTRAST_PROMPTS)
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str) and len(p) > MAX_CONTRAST_CHARS:
            raise InputError(f"contrast set {which}, prompt {i + 1} is {len(p)} characters long; at most "
                             f"{MAX_CONTRAST_CHARS} are read", code="steer_prompt_too_long", set=which, prompt=i + 1,
                             chars=len(p), limit=MAX_CONTRAST_CHARS)
        try:
            out.append(model.encode(p))
        except InputError as e:
            # the prompt's own refusal (its code and params: the page words it), said of which prompt it is
            raise InputError(f"contrast set {which}, prompt {i + 1}: {e}", code=e.code, **e.params) from None
    return out


@torch.inference_mode()
def residual_mean(model: TextModel, ids: list[int], layer: int) -> Tensor:
    """(D,) float32: the residual stream after block `layer`, averaged over the positions of `ids` (read by a hook
    on the block in the fast forward pass, which records nothing else)."""
    with _capturing(model, layer) as seen:
        model.last_logits(ids)
    return seen[0].mean(0)


def contrast_direction(model: TextModel, prompts_a: Sequence[str], prompts_b: Sequence[str], layer: int) -> Direction:
    """The mean residual stream after block `layer` over set A minus that over set B (each prompt's mean over its
    positions, then the mean over the set's prompts)."""
    check_layer(model, layer)
    a, b = _prompt_ids(model, prompts_a, "A"), _prompt_ids(model, prompts_b, "B")
    mean_a = torch.stack([residual_mean(model, ids, layer) for ids in a]).mean(0)
    mean_b = torch.stack([residual_mean(model, ids, layer) for ids in b]).mean(0)
    if not bool((mean_a - mean_b).any()):
        raise InputError(f"the difference of the two sets' means is zero (they read alike after block {layer}): adding "
                         f"it changes nothing; write sets that differ", code="steer_sets_alike", layer=layer)
    vector = check_vector(model, mean_a - mean_b, "the difference of the two sets' means (they read alike there)")
    return Direction(vector, layer, "contrast",
                     f"mean of {len(a)} prompt{'s' * (len(a) != 1)} minus mean of {len(b)} at layer {layer}")


def vector_direction(model: TextModel, vector: Tensor | Sequence[float], layer: int) -> Direction:
    check_layer(model, layer)
    return Direction(check_vector(model, vector), layer, "vector", f"a given vector at layer {layer}")


# -- the direction's logit lens -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LensToken:
    id: int
    text: str
    logit: float  # the change in its logit: lens(direction) - lens(0)


@torch.inference_mode()
def direction_lens(model: TextModel, vector: Tensor, top: int = LENS_TOKENS) -> tuple[list[LensToken], list[LensToken]]:
    """The tokens the direction promotes and suppresses most, read as the logit lens reads a residual stream: through
    the final norm and the unembedding (`residual_logits`), minus what a zero stream reads there (a LayerNorm's shift,
    which every direction gets alike)."""
    x = torch.stack([vector, torch.zeros_like(vector)]).to(device=model.device, dtype=model.dtype)
    logits = model.residual_logits(x).to(torch.float32).cpu()
    change = logits[0] - logits[1]
    k = min(top, change.shape[0])
    text = model.tokenizer.token_text

    def listed(ids: Tensor) -> list[LensToken]:
        return [LensToken(int(i), text(int(i)), float(change[i])) for i in ids]

    return listed(torch.topk(change, k).indices), listed(torch.topk(-change, k).indices)


# -- generation, steered and scored -----------------------------------------------------------------------------


@torch.inference_mode()
def steered_tokens(model: TextModel, ids: list[int], direction: Direction, strength: float, max_new_tokens: int,
                   params: SamplingParams) -> list[GeneratedToken]:
    """The continuation of `ids` with `strength * direction` added after block `direction.layer`: the model's own
    generation loop (`generate_ids`) under `steering`."""
    with steering(model, direction.layer, strength * direction.vector):
        return list(model.generate_ids(ids, max_new_tokens, params))


@contextmanager
def _capturing(model: TextModel, layer: int) -> Iterator[list[Tensor]]:
    """Within the block, in this context alone: the residual stream after block `layer` (T, D), float32 on the CPU,
    of each full forward pass (the decoder's, not the lean decode step's), appended to the list it yields."""
    from .bridge.structure import first_tensor

    module = _block_module(model, layer)
    seen: list[Tensor] = []
    mine = _Addition(torch.zeros(0, device="cpu"))  # an identity for the dispatch; it adds nothing

    def hook(_m: nn.Module, _args: tuple[Any, ...], out: Any) -> None:
        if _CAPTURE.get() is mine and (t := first_tensor(out)) is not None:
            seen.append(t[0].detach().to("cpu", torch.float32))

    handle = module.register_forward_hook(hook)
    token = _CAPTURE.set(mine)
    try:
        yield seen
    finally:
        _CAPTURE.reset(token)
        handle.remove()


_CAPTURE: ContextVar[_Addition | None] = ContextVar("transformer_explainer_steering_capture", default=None)


class Scorer:
    """The unsteered model's mean log-probability per token of continuations of one prompt (each token given the
    prompt and the tokens before it), from one pass over the prompt: in the families with code of our own its keys
    and values are kept and each continuation runs only its own positions. `resid` (T, D): the residual stream after
    block `layer` at the prompt's positions, read in that pass."""

    @torch.inference_mode()
    def __init__(self, model: TextModel, ids: list[int], layer: int) -> None:
        self.model, self.ids = model, list(ids)
        self.own = model.runs == "own"
        x = torch.tensor([self.ids], device=model.device)  # type: ignore[attr-defined]
        with _capturing(model, layer) as seen:
            if self.own:
                self.cache = KVCache()
                self.last = model.net(x, cache=self.cache, logits_for="last")[0, -1]  # type: ignore[attr-defined]
            else:
                self.last = model.hf(input_ids=x, use_cache=False).logits[0, -1]  # type: ignore[attr-defined]
        self.resid = seen[0]

    @torch.inference_mode()
    def __call__(self, continuation: Sequence[int]) -> float:
        """nan for an empty continuation."""
        if not continuation:
            return math.nan
        model, rows = self.model, [self.last[None]]
        if len(continuation) > 1:
            if self.own:
                cache = KVCache.with_room(list(self.cache.layers), len(continuation) - 1)
                x = torch.tensor([list(continuation[:-1])], device=model.device)
                rows.append(model.net(x, cache=cache)[0])  # type: ignore[attr-defined]
            else:
                x = torch.tensor([[*self.ids, *continuation[:-1]]], device=model.device)
                rows.append(model.hf(input_ids=x, use_cache=False).logits[0, len(self.ids):])  # type: ignore[attr-defined]
        logp = torch.log_softmax(torch.cat([r.to(self.last.device) for r in rows]).to(torch.float32), dim=-1)
        picked = logp[torch.arange(len(continuation), device=logp.device),
                      torch.tensor(list(continuation), device=logp.device)]
        return float(picked.mean())


def mean_log_prob(model: TextModel, ids: list[int], continuation: Sequence[int]) -> float:
    """The mean natural-log probability per token of `continuation` after `ids` under the unsteered model (each
    token given the ones before it); nan for an empty continuation."""
    return Scorer(model, ids, 0)(continuation)


@dataclass(frozen=True)
class SweepPoint:
    strength: float
    tokens: list[GeneratedToken]
    mean_log_prob: float  # per token, under the unsteered model
    distinct: float  # distinct tokens / tokens
    broken: bool  # mean_log_prob below the bound, or distinct below its bound


@dataclass(frozen=True)
class Steering:
    """The plain and the steered continuation of one prompt, from the same sampling parameters and seed."""

    prompt_ids: list[int]
    prompt_tokens: list[str]
    direction: Direction
    strength: float
    params: SamplingParams
    plain: list[GeneratedToken]
    steered: list[GeneratedToken]
    plain_log_prob: float  # the plain continuation's mean log-probability per token (unsteered model)
    steered_log_prob: float
    uniform_log_prob: float  # -ln V: a uniform guess over the vocabulary
    bound: float  # below this mean log-probability a continuation counts as broken
    plain_distinct: float  # the plain continuation's share of distinct tokens
    steered_distinct: float
    distinct_bound: float  # below this share of distinct tokens a continuation counts as broken too
    residual_norm: float  # the median norm of the residual stream after the layer over the prompt's positions
    lens_promoted: list[LensToken]
    lens_suppressed: list[LensToken]
    sweep: list[SweepPoint] = field(default_factory=list)

    @property
    def steered_broken(self) -> bool:
        return broken(self.steered_log_prob, self.steered_distinct, self.bound, self.distinct_bound)

    @property
    def breakdown(self) -> float | None:
        """The smallest strength of the sweep whose continuation is broken; None if none of them is."""
        return next((p.strength for p in self.sweep if p.broken), None)

    @property
    def changed_at(self) -> int | None:
        """The index of the first generated token where the two continuations differ; None where they agree."""
        for i, (a, b) in enumerate(zip(self.plain, self.steered, strict=False)):
            if a.id != b.id:
                return i
        return None if len(self.plain) == len(self.steered) else min(len(self.plain), len(self.steered))

    def __repr__(self) -> str:
        text = "".join
        lines = [f"Steering with {self.direction.describe}, strength {self.strength:g} "
                 f"(direction norm {self.direction.norm:.3g}; residual stream ~{self.residual_norm:.3g})",
                 f"  plain:   {text(t.text for t in self.plain)!r}  (mean log-prob {self.plain_log_prob:.3f})",
                 f"  steered: {text(t.text for t in self.steered)!r}  (mean log-prob {self.steered_log_prob:.3f}"
                 f"{', broken' if self.steered_broken else ''})",
                 f"  promotes {[t.text for t in self.lens_promoted[:5]]}, suppresses "
                 f"{[t.text for t in self.lens_suppressed[:5]]}"]
        if self.sweep:
            b = self.breakdown
            rule = f"mean log-prob < {self.bound:.3f} or distinct tokens < {self.distinct_bound:.0%}"
            lines.append(f"  breaks down ({rule}) at strength {b:g}" if b is not None else
                         f"  no strength of the sweep up to {self.sweep[-1].strength:g} breaks it down ({rule})")
        return "\n".join(lines)


def distinct_share(ids: Sequence[int]) -> float:
    """Distinct tokens / tokens (1 for an empty continuation)."""
    return len(set(ids)) / len(ids) if ids else 1.0


def broken(mean_log_prob: float, distinct: float, bound: float, distinct_bound: float) -> bool:
    """Whether a continuation counts as broken: its mean log-probability under the unsteered model below `bound`, or
    its share of distinct tokens below `distinct_bound`."""
    return mean_log_prob < bound or distinct < distinct_bound


def sweep_strengths(direction: Direction, residual_norm: float, sign: float) -> list[float]:
    """The sweep's strengths: `SWEEP_FACTORS` times the residual stream's median norm over the direction's norm
    (so factor 1 adds a vector as long as a typical residual vector), with the sign of the strength asked for."""
    scale = residual_norm / direction.norm
    return [float(f"{sign * f * scale:.4g}") for f in SWEEP_FACTORS]


def steer(model: TextModel, prompt: str | Sequence[int], direction: Direction, strength: float, *,
          tokens: int = STEER_TOKENS, params: SamplingParams | None = None, sweep: bool = True,
          between_runs: BetweenRuns | None = None) -> Steering:
    """The plain and the steered continuation of `prompt` (a text, or token ids) side by side, both from `params`
    (greedy by default; sampled, both draw from its seed, or from one chosen here and kept in the answer's
    `params`), their mean log-probabilities under the unsteered model, the direction's lens, and (with `sweep`) the
    continuation at each strength of `sweep_strengths` and where the text breaks down.
    `between_runs()` is called before each generation (a server stops an abandoned request there)."""
    strength = check_strength(strength)
    tokens = check_tokens(tokens)
    check_layer(model, direction.layer)
    check_vector(model, direction.vector)
    params = params or SamplingParams(temperature=0)
    if not params.greedy and params.seed is None:  # both continuations must draw from the same seed: pick one, say it
        params = replace(params, seed=secrets.randbelow(2**63))
    ids = model.encode(prompt) if isinstance(prompt, str) else [int(i) for i in prompt]
    if ids and len(ids) + 1 > model.context_length:
        raise InputError(f"the prompt is {len(ids)} tokens long and fills {model.name}'s context of "
                         f"{model.context_length}: no room to continue it; shorten it", code="text_too_long",
                         tokens=len(ids), limit=model.context_length - 1, context=model.context_length)
    tick = between_runs or (lambda: None)

    tick()
    plain = list(model.generate_ids(ids, tokens, params))
    tick()
    steered = steered_tokens(model, ids, direction, strength, tokens, params)
    scorer = Scorer(model, ids, direction.layer)
    residual_norm = statistics.median(scorer.resid.norm(dim=-1).tolist())

    def score(generated: list[GeneratedToken]) -> float:
        return scorer([t.id for t in generated])

    plain_lp, steered_lp = score(plain), score(steered)
    uniform = -math.log(model.config.vocab_size)
    bound = plain_lp + BREAKDOWN_BOUND * (uniform - plain_lp)
    plain_distinct = distinct_share([t.id for t in plain])
    distinct_bound = REPETITION_BOUND * plain_distinct
    points = []
    if sweep:
        for s in sweep_strengths(direction, residual_norm, -1.0 if strength < 0 else 1.0):
            tick()
            out = steered_tokens(model, ids, direction, s, tokens, params)
            lp, dist = score(out), distinct_share([t.id for t in out])
            points.append(SweepPoint(s, out, lp, dist, broken(lp, dist, bound, distinct_bound)))
    promoted, suppressed = direction_lens(model, direction.vector)
    return Steering(ids, model.tokenizer.token_texts(ids), direction, strength, params, plain, steered, plain_lp,
                    steered_lp, uniform, bound, plain_distinct, distinct_share([t.id for t in steered]),
                    distinct_bound, residual_norm, promoted, suppressed, points)


def make_direction(model: TextModel, *, contrast: tuple[Sequence[str], Sequence[str]] | None = None,
                   layer: int | None = None, vector: Tensor | Sequence[float] | None = None) -> Direction:
    """One direction from exactly one of: `contrast` (prompts A, prompts B) at `layer`, or `vector` at `layer` (a
    feature's: `steering_features.feature_direction`)."""
    if (contrast is None) == (vector is None):
        raise InputError("give exactly one direction: a contrast of two prompt sets with a layer, or a vector with a "
                         "layer", code="steer_one_direction")
    if layer is None:
        raise InputError("a contrast or a vector needs the layer to add it at", code="steer_layer_missing")
    if contrast is not None:
        return contrast_direction(model, contrast[0], contrast[1], layer)
    assert vector is not None
    return vector_direction(model, vector, layer)
