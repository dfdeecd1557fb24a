"""What every text model the project explains does alike, whichever way it runs: `TextModel`, the base of
`engine.ExplainerModel` (the families with code of our own) and `generic.GenericModel` (any transformers decoder,
through transformers' own modules). Reading the text (tokens, their checks), the next-token distribution, and the
checks before a patching run, and generation's sampling loop; the forward pass, its trace and how it computes the
logits of one more token are each model's own."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .errors import InputError
from .limits import STEER_TOKENS
from .loading.tokenizer import TextTokenizer
from .models.kv_cache import KVCache
from .patching import KINDS, Kind, check_kinds
from .sampling import NextTokenDistribution, SamplingParams, make_generator, most_likely, next_token_distribution
from .trace import Trace, with_text

if TYPE_CHECKING:
    from .steering import Direction, Steering

TokenLike = int | str  # a token id, a text that is one token, or a raw vocabulary entry ('Ġking')


@dataclass(frozen=True)
class GeneratedToken:
    id: int
    text: str
    prob: float  # its probability under the sampling distribution it was drawn from
    position: int


class TextModel(ABC):
    """A decoder with its tokenizer, as the faces use it: `encode`, `trace`, `next_token`, `generate`, `token_id`.
    `name` is what the user called it; `source` where it came from ("builtin", "hub", "local"); `folder` its files;
    `file_dtype` the type its weight files store (None when unknown)."""

    tokenizer: TextTokenizer
    name: str
    source: str
    folder: Path | None
    file_dtype: str | None

    @property
    @abstractmethod
    def config(self) -> Any:
        """The model's configuration (`config.DecoderConfig`, or `generic.GenericConfig`)."""

    @property
    def context_length(self) -> int:
        return self.config.block_size

    @property
    def runs(self) -> str:
        """Which way the model runs: "own" (the project's code, every intermediate named) or "transformers"."""
        return "own"

    @abstractmethod
    def trace_ids(self, ids: list[int], **options: Any) -> Trace:
        """Every intermediate value of the forward pass over token ids, by name."""

    @abstractmethod
    def last_logits(self, ids: list[int]) -> Tensor:
        """The next-token logits (V,) after `ids`, recording nothing (the fast path)."""

    @abstractmethod
    def _start_decoding(self, ids: list[int], capacity: int) -> tuple[Tensor, Callable[[int], Tensor]]:
        """How this model computes logits while generating: the next-token logits (V,) after the prompt `ids`, and
        a step that takes the next token's id and returns the logits after it, running only that position (the
        state it carries, such as a KV cache, holds at most `capacity` positions)."""

    # -- input -------------------------------------------------------------------------------------

    def encode(self, text: str, *, truncate: bool = False) -> list[int]:
        """Token ids of `text`; a clear InputError if it is empty or longer than the context."""
        if not isinstance(text, str):
            raise InputError(f"text must be a string, got {type(text).__name__}")
        if text == "":
            raise InputError("the text is empty: type at least one character", code="text_empty")
        ids = self.tokenizer.encode(text)
        if not ids:
            raise InputError("the text produced no tokens", code="text_no_tokens")
        n = self.context_length
        if len(ids) > n:
            if not truncate:
                raise InputError(
                    f"the text is {len(ids)} tokens long but {self.name} reads at most {n}; shorten it, "
                    f"or ask for truncation to keep the last {n} tokens", code="text_too_long", tokens=len(ids),
                    limit=n, context=n)
            ids = ids[-n:]
        return ids

    @torch.inference_mode()
    def trace(self, text: str, *, truncate: bool = False) -> Trace:
        """Every intermediate value of the forward pass over `text`, by name."""
        ids = self.encode(text, truncate=truncate)
        return with_text(self.trace_ids(ids), text)

    def check_vocabulary(self, ids: list[int]) -> None:
        """An InputError naming the first id outside the vocabulary, if any."""
        V = self.config.vocab_size
        bad = [i for i in ids if not 0 <= i < V]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary of {self.name} (0..{V - 1})",
                             code="token_id_out_of_range", id=bad[0], max=V - 1)

    def _check_ids(self, ids: list[int], cache: KVCache | None = None) -> None:
        if not ids:
            raise InputError("no tokens to run", code="ids_empty")
        self.check_vocabulary(ids)
        start = cache.length if cache is not None else 0
        if start + len(ids) > self.context_length:
            raise InputError(f"{start + len(ids)} tokens exceed the context of {self.context_length}",
                             code="text_too_long", tokens=start + len(ids), limit=self.context_length,
                             context=self.context_length)

    def logits(self, text: str, *, truncate: bool = False) -> Tensor:
        """Fast path: the next-token logits (V,) at the last position; nothing recorded."""
        return self.last_logits(self.encode(text, truncate=truncate))

    def next_token(self, text_or_trace: str | Trace, params: SamplingParams | None = None) -> NextTokenDistribution:
        """The next-token distribution after temperature, top-k and top-p."""
        params = params or SamplingParams()
        if isinstance(text_or_trace, Trace):
            logits = text_or_trace.next_token_logits()
        else:
            logits = self.logits(text_or_trace)
        return next_token_distribution(logits, params, token_text=self.tokenizer.token_text)

    @torch.inference_mode()
    def generate_ids(self, ids: list[int], max_new_tokens: int, params: SamplingParams | None = None,
                     *, stop_at_eos: bool = True) -> Iterator[GeneratedToken]:
        """New tokens one by one, each from the distribution `params` makes of the logits (the most likely token
        when greedy); each step runs only the new position (`_start_decoding`). Stops at `max_new_tokens`, at an
        end-of-text token (unless `stop_at_eos` is False), or where the context is full."""
        params = params or SamplingParams()
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise InputError(f"the number of tokens to generate must be a whole number >= 0, got {max_new_tokens!r}",
                             code="generate_count", value=str(max_new_tokens))
        self._check_ids(ids, None)
        eos = set(self.tokenizer.eos_ids())
        logits, step = self._start_decoding(ids, min(len(ids) + max_new_tokens, self.context_length))
        gen = None if params.greedy else make_generator(params.seed, logits.device)  # draws where the probabilities are
        pos = len(ids)
        params.check_vocabulary(logits.shape[-1])  # greedy steps build no distribution, which would check it
        for _ in range(max_new_tokens):
            if params.greedy:  # the most likely token, with probability 1: no distribution to build
                tid, prob = most_likely(logits), 1.0
            else:
                dist = next_token_distribution(logits, params)
                tid = dist.sample(gen)
                prob = float(dist.probs[tid])
            yield GeneratedToken(tid, self.tokenizer.token_text(tid), prob, pos)
            pos += 1
            if (stop_at_eos and tid in eos) or pos >= self.context_length:
                return
            logits = step(tid)

    def generate(self, text: str, max_new_tokens: int,
                 params: SamplingParams | None = None) -> Iterator[GeneratedToken]:
        return self.generate_ids(self.encode(text), max_new_tokens, params)

    def steer(self, prompt: str | Sequence[int], strength: float, *, direction: Direction | None = None,
              contrast: tuple[Sequence[str], Sequence[str]] | None = None, layer: int | None = None,
              vector: Tensor | Sequence[float] | None = None, tokens: int = STEER_TOKENS,
              params: SamplingParams | None = None,
              sweep: bool = True) -> Steering:
        """Steering: `strength` times a direction added to the residual stream after a block, at every position,
        and the plain and the steered continuation of `prompt` side by side from the same `params` (greedy by
        default; sampled, from the same seed). The direction is one of: `direction` (a `steering.Direction`, e.g. a
        feature's decoder row: `steering_features.feature_direction(model, layer, id)`); `contrast=(prompts_a,
        prompts_b)` with `layer`, the mean residual stream of the first set minus the second's after that block;
        `vector` (D,) with `layer`. With `sweep`, also the continuation at a range of strengths and the first that
        breaks the text down (`steering.Steering`: `sweep`, `breakdown`; the direction's logit lens in
        `lens_promoted` and `lens_suppressed`)."""
        from .steering import make_direction
        from .steering import steer as run

        if direction is None:
            direction = make_direction(self, contrast=contrast, layer=layer, vector=vector)
        elif contrast is not None or vector is not None:
            raise InputError("give exactly one direction: a Direction, a contrast of two prompt sets with a layer, or "
                             "a vector with a layer")
        return run(self, prompt, direction, strength, tokens=tokens, params=params, sweep=sweep)

    def token_id(self, token: TokenLike) -> int:
        """The id of a single token: an id, a text that encodes to one token, or a raw vocabulary entry
        such as 'Ġking' or '<|endoftext|>'; an InputError otherwise."""
        V = self.config.vocab_size
        if isinstance(token, bool) or not isinstance(token, int | str):
            raise InputError(f"a token must be a string or an id, got {type(token).__name__}")
        if isinstance(token, int):
            if not 0 <= token < V:
                raise InputError(f"token id {token} is outside the vocabulary (0..{V - 1})",
                                 code="token_id_out_of_range", id=token, max=V - 1)
            return token
        if token == "":
            raise InputError("an empty string is not a token", code="token_empty")
        ids = self.tokenizer.encode(token, add_bos=False)  # the word's own tokens, without a BOS
        if len(ids) == 1:
            return ids[0]
        raw = self.tokenizer.tokenizer.token_to_id(token)
        if raw is not None:
            return raw
        pieces = " + ".join(repr(self.tokenizer.token_text(i)) for i in ids)
        raise InputError(f"{token!r} is not one token but {len(ids)}: {pieces}; choose a single-token word",
                         code="not_one_token", token=token, count=len(ids))

    def _prompt_ids(self, prompt: str | Sequence[int], which: str) -> list[int]:
        if isinstance(prompt, str):
            return self.encode(prompt)
        ids = [int(i) for i in prompt]
        self._check_ids(ids, None)
        return ids

    def patch_inputs(self, clean: str | Sequence[int], corrupted: str | Sequence[int], answer: TokenLike,
                     wrong: TokenLike, what: Sequence[str] = KINDS
                     ) -> tuple[tuple[Kind, ...], list[int], list[int], int, int]:
        """The checks `patch` makes before any forward pass: the grids, the two prompts' ids (same length, not the
        same tokens) and the answer and wrong token ids (single tokens, not the same one); an InputError saying
        which fails. A command line or a page checks a pair with it before it starts the runs."""
        kinds = check_kinds(what)
        c_ids, x_ids = self._prompt_ids(clean, "clean"), self._prompt_ids(corrupted, "corrupted")
        if len(c_ids) != len(x_ids):
            raise InputError(f"the clean prompt is {len(c_ids)} tokens and the corrupted one {len(x_ids)}: "
                             f"patching swaps activations position by position, so they must have the same "
                             f"number of tokens")
        if c_ids == x_ids:
            raise InputError("the clean and corrupted prompts are the same tokens: there is no difference to patch")
        a, w = self.token_id(answer), self.token_id(wrong)
        if a == w:
            raise InputError("the answer and the wrong token are the same token: their logit difference is always 0")
        return kinds, c_ids, x_ids, a, w

