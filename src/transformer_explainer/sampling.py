"""Next-token distributions under temperature, top-k and top-p, and sampling from them.

The order of the steps follows transformers' `generate`: logits / temperature, then the top-k cut,
then the top-p (nucleus) cut on what remains, then softmax over the kept tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .errors import InputError


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 means greedy: always the most likely token
    top_k: int | None = None  # keep only the k most likely tokens; None keeps all
    top_p: float | None = None  # keep the smallest set whose probability reaches p; None keeps all
    seed: int | None = None  # makes sampling repeatable

    def __post_init__(self) -> None:
        t = self.temperature
        if not isinstance(t, int | float) or isinstance(t, bool) or not math.isfinite(t) or t < 0:
            raise InputError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}",
                             code="temperature_invalid", value=str(t))
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int)
                                       or self.top_k < 1):
            raise InputError(f"top_k must be a whole number >= 1 (or omitted), got {self.top_k!r}",
                             code="top_k_invalid", value=str(self.top_k))
        p = self.top_p
        if p is not None and (not isinstance(p, int | float) or not math.isfinite(p) or not 0 < p <= 1):
            raise InputError(f"top_p must be in (0, 1] (or omitted), got {p!r}", code="top_p_invalid", value=str(p))
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed < 2**63):
            raise InputError(f"seed must be a whole number in [0, 2^63), got {self.seed!r}", code="seed_invalid",
                             value=str(self.seed))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def describe(self) -> str:
        """The parameters as a reader would say them: "temperature 0.8, top-k 40, no top-p cut"."""
        if self.greedy:
            return "temperature 0: greedy, the most likely token"
        k = f"top-k {self.top_k}" if self.top_k is not None else "no top-k cut"
        p = f"top-p {self.top_p:g}" if self.top_p is not None else "no top-p cut"
        return f"temperature {self.temperature:g}, {k}, {p}"

    def check_vocabulary(self, vocab_size: int) -> None:
        """An InputError if top_k asks for more tokens than the vocabulary has."""
        if self.top_k is not None and self.top_k > vocab_size:
            raise InputError(f"top_k must be at most the vocabulary size {vocab_size}, got {self.top_k}",
                             code="top_k_too_large", value=self.top_k, vocab=vocab_size)


@dataclass(frozen=True)
class NextTokenDistribution:
    """Each stage from the raw logits to the probabilities that sampling uses, over the vocabulary."""

    logits: Tensor  # (V,) the model's scores
    scaled_logits: Tensor  # (V,) logits / temperature (the logits themselves when greedy)
    kept: Tensor  # (V,) bool: survived the top-k and top-p cuts
    probs: Tensor  # (V,) softmax over the kept scaled logits; 0 elsewhere
    params: SamplingParams
    # an id's text (the tokenizer's `token_text`), for the repr; `ExplainerModel.next_token` sets it
    token_text: Callable[[int], str] | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        V, kept = self.logits.shape[-1], int(self.kept.sum())
        name = self.token_text or (lambda i: "")
        rows = [f"  {name(i)!r:<16} id {i:>6}  logit {float(self.logits[i]):>8.3f}  prob {float(self.probs[i]):>7.2%}"
                for i in self.top(5)]
        return "\n".join([
            f"NextTokenDistribution over {V} tokens ({self.params.describe()}): {kept} kept, the 5 most likely:",
            *rows,
            f"  (.logits, .probs, .kept: ({V},) tensors in vocabulary order, their first entries those of ids 0, 1, "
            f"2...; .top(n): the n most likely ids)"])

    @property
    def probs_before_cuts(self) -> Tensor:
        """(V,) softmax of the scaled logits over the whole vocabulary, before top-k and top-p (the
        probabilities themselves when nothing was cut, or when greedy)."""
        if self.params.greedy or (self.params.top_k is None and self.params.top_p is None):
            return self.probs
        return torch.softmax(self.scaled_logits, dim=-1)

    def top(self, n: int) -> list[int]:
        """Ids of the n most likely tokens under the raw logits."""
        n = min(n, self.logits.shape[-1])
        return torch.topk(self.logits, n).indices.tolist()

    def sample(self, generator: torch.Generator | None = None) -> int:
        """One token drawn from `probs`, with `generator` (on the probabilities' device: `make_generator`)."""
        if self.params.greedy:
            return most_likely(self.logits)
        return int(torch.multinomial(self.probs, 1, generator=generator))


def most_likely(logits: Tensor) -> int:
    """The index of the largest of the logits (V,), the first one on a tie, as `torch.argmax` picks it.

    On CPU through NumPy: its argmax is vectorised, torch's 1-D argmax is not (about 5 us against 100
    us over GPT-2's 50257 logits, per generated token)."""
    if logits.device.type != "cpu":
        return int(torch.argmax(logits))
    return int(logits.detach().to("cpu", torch.float32).numpy().argmax())  # on the CPU already: no copy


def next_token_distribution(logits: Tensor, params: SamplingParams, *,
                            token_text: Callable[[int], str] | None = None) -> NextTokenDistribution:
    """Apply temperature, top-k and top-p to one position's logits (V,); `token_text` names the tokens in the repr."""
    logits = logits.detach().to(torch.float32)
    V, device = logits.shape[-1], logits.device
    params.check_vocabulary(V)
    if params.greedy:
        kept = torch.zeros(V, dtype=torch.bool, device=device)
        kept[most_likely(logits)] = True
        return NextTokenDistribution(logits, logits, kept, kept.to(torch.float32), params, token_text)
    scaled = logits / params.temperature
    kept = torch.ones(V, dtype=torch.bool, device=device)
    if params.top_k is not None and params.top_k < V:
        kth = torch.topk(scaled, params.top_k).values[-1]
        kept &= scaled >= kth
    if params.top_p is not None and params.top_p < 1:
        masked = scaled.masked_fill(~kept, float("-inf"))
        sorted_logits, order = torch.sort(masked, descending=True)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        # keep a token if the mass before it is still below p: the smallest set reaching p
        keep_sorted = (cum - torch.softmax(sorted_logits, dim=-1)) < params.top_p
        keep_sorted[0] = True
        # and every token tied with the last one kept (as top-k keeps ties): which of equal logits the sort puts first
        # is not defined, and the most likely token (the first of its ties, `most_likely`) must not depend on it
        kept &= scaled >= sorted_logits[keep_sorted].min()
    probs = torch.softmax(scaled.masked_fill(~kept, float("-inf")), dim=-1)
    return NextTokenDistribution(logits, scaled, kept, probs, params, token_text)


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator:
    """A random generator on `device` (where the probabilities it draws from are), seeded with `seed` or
    fresh. The same seed draws the same tokens on the same kind of device; a GPU's generator is not the CPU's."""
    g = torch.Generator(device=device)
    if seed is None:
        g.seed()
    else:
        g.manual_seed(seed)
    return g
