"""One loaded model with its tokenizer: trace a text, predict and generate. The engine behind the
Python API, the CLI and the web app."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .allocator import keep_freed_memory
from .attribution import Attribution, direct_logit_attribution
from .config import DecoderConfig
from .errors import CheckpointError, InputError
from .loading.checkpoint import load_decoder
from .loading.resolve import ResolvedModel, resolve
from .loading.tokenizer import TextTokenizer
from .models.decoder import Decoder
from .models.kv_cache import KVCache
from .models.recorder import Patch, Recorder
from .patching import KINDS, Kind, Patching, activation_patching, check_kinds
from .sampling import NextTokenDistribution, SamplingParams, make_generator, most_likely, next_token_distribution
from .trace import Trace, merge_traces

log = logging.getLogger(__name__)

TokenLike = int | str  # a token id, a text that is one token, or a raw vocabulary entry ('Ġking')


@dataclass(frozen=True)
class GeneratedToken:
    id: int
    text: str
    prob: float  # its probability under the sampling distribution it was drawn from
    position: int


class ExplainerModel:
    """A model of any supported family (GPT-2, Llama, Qwen2, Mistral, Qwen3, Gemma 3, Mixtral, Qwen3-MoE, OLMoE)
    ready to explain: `trace`, `next_token`, `generate`, `weight`. `net` is the network (a `models.decoder.Decoder`)."""

    def __init__(self, net: Decoder, tokenizer: TextTokenizer, name: str, source: str = "local",
                 folder: Path | None = None) -> None:
        if tokenizer.vocab_size > net.config.vocab_size:
            raise CheckpointError(
                f"tokenizer has {tokenizer.vocab_size} tokens but the model only {net.config.vocab_size}"
            )
        self.net = net.eval().inference_layout_()
        keep_freed_memory()  # a trace's intermediates reuse freed pages instead of faulting in new ones
        self.tokenizer = tokenizer
        self.name = name
        self.source = source
        self.folder = folder

    @classmethod
    def from_resolved(cls, r: ResolvedModel, dtype: str | torch.dtype | None = None) -> ExplainerModel:
        net = load_decoder(r.folder, dtype)
        return cls(net, TextTokenizer.from_folder(r.folder, net.config.declaration.special_tokens), r.name, r.source,
                   r.folder)

    @property
    def dtype(self) -> torch.dtype:
        """The weights' (and activations') dtype: float32, or bfloat16 when loaded so."""
        return self.net.unembed.weight.dtype

    @property
    def config(self) -> DecoderConfig:
        return self.net.config

    @property
    def context_length(self) -> int:
        return self.config.block_size

    def __repr__(self) -> str:
        c = self.config
        kv = f" ({c.n_kv_heads} key/value)" if c.n_kv_heads != c.n_head else ""
        experts = f", {c.n_experts} experts ({c.top_k} per token)" if c.n_experts is not None else ""
        active = f" ({self.net.num_active_params() / 1e6:.1f}M per token)" if c.n_experts is not None else ""
        return (f"ExplainerModel({self.name!r}, {c.model_type}, {c.n_layer} layers, {c.n_head} heads{kv}, "
                f"d_model {c.n_embd}{experts}, {self.net.num_params() / 1e6:.1f}M parameters{active}, "
                f"{str(self.dtype).removeprefix('torch.')})")

    # -- input -------------------------------------------------------------------------------------

    def encode(self, text: str, *, truncate: bool = False) -> list[int]:
        """Token ids of `text`; a clear InputError if it is empty or longer than the context."""
        if not isinstance(text, str):
            raise InputError(f"text must be a string, got {type(text).__name__}")
        if text == "":
            raise InputError("the text is empty: type at least one character")
        ids = self.tokenizer.encode(text)
        if not ids:
            raise InputError("the text produced no tokens")
        n = self.context_length
        if len(ids) > n:
            if not truncate:
                raise InputError(
                    f"the text is {len(ids)} tokens long but {self.name} reads at most {n}; shorten it, "
                    f"or ask for truncation to keep the last {n} tokens"
                )
            ids = ids[-n:]
        return ids

    # -- tracing -----------------------------------------------------------------------------------

    @torch.inference_mode()
    def trace(self, text: str, *, truncate: bool = False) -> Trace:
        """Every intermediate value of the forward pass over `text`, by name."""
        ids = self.encode(text, truncate=truncate)
        return self.trace_ids(ids, text=text)

    @torch.inference_mode()
    def trace_ids(self, ids: list[int], *, text: str | None = None, cache: KVCache | None = None,
                  prefix_ids: list[int] | None = None, patches: dict[str, Patch] | None = None) -> Trace:
        """Trace token ids. With a `cache` holding `prefix_ids`, only the new positions are computed
        and traced (their attention still covers the whole prefix); the cache is extended.

        `patches` maps activation names to functions that replace the value as it is computed (with
        the batch dimension, e.g. (1, H, T, Dh) for `blocks.3.attn.z`): the trace of an intervention.
        """
        self._check_ids(ids, cache)
        rec = Recorder(patches=patches)
        last = self.net(torch.tensor([ids]), cache=cache, rec=rec, logits_for="last")[0, -1]
        values = {k: v[0] for k, v in rec.values.items()}  # drop the batch dimension
        prefix = list(prefix_ids or [])
        return Trace(
            model_name=self.name,
            config=self.config,
            text=text if text is not None else self.tokenizer.decode(prefix + ids),
            token_ids=list(ids),
            tokens=self.tokenizer.token_texts(ids),
            values=values,
            start=len(prefix),
            prefix_ids=prefix,
            unembed=self.net.weight("unembed.W_U"),
            last_logits=last,
        )

    def check_vocabulary(self, ids: list[int]) -> None:
        """An InputError naming the first id outside the vocabulary, if any."""
        V = self.config.vocab_size
        bad = [i for i in ids if not 0 <= i < V]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary of {self.name} (0..{V - 1})")

    def _check_ids(self, ids: list[int], cache: KVCache | None) -> None:
        if not ids:
            raise InputError("no tokens to run")
        self.check_vocabulary(ids)
        start = cache.length if cache is not None else 0
        if start + len(ids) > self.context_length:
            raise InputError(f"{start + len(ids)} tokens exceed the context of {self.context_length}")

    # -- prediction --------------------------------------------------------------------------------

    @torch.inference_mode()
    def logits(self, text: str, *, truncate: bool = False) -> Tensor:
        """Fast path: the next-token logits (V,) at the last position; nothing recorded."""
        ids = self.encode(text, truncate=truncate)
        return self.net(torch.tensor([ids]), logits_for="last")[0, -1]

    def next_token(self, text_or_trace: str | Trace, params: SamplingParams | None = None) -> NextTokenDistribution:
        """The next-token distribution after temperature, top-k and top-p."""
        params = params or SamplingParams()
        if isinstance(text_or_trace, Trace):
            logits = text_or_trace.next_token_logits()
        else:
            logits = self.logits(text_or_trace)
        return next_token_distribution(logits, params)

    @torch.inference_mode()
    def generate_ids(self, ids: list[int], max_new_tokens: int, params: SamplingParams | None = None,
                     *, stop_at_eos: bool = True) -> Iterator[GeneratedToken]:
        """Yield new tokens one by one; each step runs only the new position (KV cache). Stops at
        `max_new_tokens`, at the end-of-text token, or where the context is full."""
        params = params or SamplingParams()
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise InputError(f"the number of tokens to generate must be a whole number >= 0, got {max_new_tokens!r}")
        self._check_ids(ids, None)
        gen = make_generator(params.seed)
        eos = set(self.tokenizer.eos_ids())
        cache = KVCache(capacity=min(len(ids) + max_new_tokens, self.context_length))  # no regrowth while generating
        logits = self.net(torch.tensor([ids]), cache=cache, logits_for="last")[0, -1]
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
            logits = self.net(torch.tensor([[tid]]), cache=cache, logits_for="last")[0, -1]

    def generate(self, text: str, max_new_tokens: int,
                 params: SamplingParams | None = None) -> Iterator[GeneratedToken]:
        return self.generate_ids(self.encode(text), max_new_tokens, params)

    def token_id(self, token: TokenLike) -> int:
        """The id of a single token: an id, a text that encodes to one token, or a raw vocabulary entry
        such as 'Ġking' or '<|endoftext|>'; an InputError otherwise."""
        V = self.config.vocab_size
        if isinstance(token, bool) or not isinstance(token, int | str):
            raise InputError(f"a token must be a string or an id, got {type(token).__name__}")
        if isinstance(token, int):
            if not 0 <= token < V:
                raise InputError(f"token id {token} is outside the vocabulary (0..{V - 1})")
            return token
        if token == "":
            raise InputError("an empty string is not a token")
        ids = self.tokenizer.encode(token, add_bos=False)  # the word's own tokens, without a BOS
        if len(ids) == 1:
            return ids[0]
        raw = self.tokenizer.tokenizer.token_to_id(token)
        if raw is not None:
            return raw
        pieces = " + ".join(repr(self.tokenizer.token_text(i)) for i in ids)
        raise InputError(f"{token!r} is not one token but {len(ids)}: {pieces}; choose a single-token word")

    # -- why this token ------------------------------------------------------------------------------

    def attribute(self, text_or_trace: str | Trace, target: TokenLike | None = None, versus: TokenLike | None = None,
                  *, position: int | None = None) -> Attribution:
        """Direct logit attribution: the logit of `target` at `position` (default: the last; `target` defaults
        to the token that came next there, or the top prediction at the last) as the sum of what each
        embedding, head, output bias and MLP wrote, with the final norm's scale from the forward pass. With
        `versus`, the logit difference target - versus. From the trace alone: no extra forward pass."""
        trace = text_or_trace if isinstance(text_or_trace, Trace) else self.trace(text_or_trace)
        t = None if target is None else self.token_id(target)
        v = None if versus is None else self.token_id(versus)
        return direct_logit_attribution(self.net, self.tokenizer, trace, t, v, position=position)

    def _prompt_ids(self, prompt: str | Sequence[int], which: str) -> list[int]:
        if isinstance(prompt, str):
            return self.encode(prompt)
        ids = [int(i) for i in prompt]
        self._check_ids(ids, None)
        return ids

    def patch(self, clean: str | Sequence[int], corrupted: str | Sequence[int], answer: TokenLike, wrong: TokenLike,
              what: Sequence[Kind] = KINDS, *, batch_tokens: int = 2048,
              progress: Callable[[int, int], None] | None = None,
              cancelled: Callable[[], bool] | None = None) -> Patching:
        """Activation patching: each activation of `what` ("resid_pre", "attn_out", "mlp_out": per layer and
        position; "heads": each head's z over all positions) from the clean run into the corrupted one, one
        cell at a time; the logit difference answer - wrong normalised so that 0 is the corrupted run and 1
        the clean one. The prompts (texts or ids) must have the same number of tokens. `progress(done, total)`
        is told after each batch of patched runs, and `cancelled()` asked before each (it raises
        `patching.Cancelled`)."""
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
        with torch.inference_mode():
            clean_trace = self.trace_ids(c_ids)
            x_logits = self.last_logits(x_ids)
        m_clean = float(clean_trace.next_token_logits()[a].double() - clean_trace.next_token_logits()[w].double())
        m_corr = float(x_logits[a].double() - x_logits[w].double())
        if abs(m_clean - m_corr) < 1e-6 * max(1.0, abs(m_clean)):
            raise InputError(f"the two prompts give the same logit difference ({m_clean:.4g}): with nothing to "
                             "recover, the normalised metric is undefined; choose tokens whose difference changes")
        grids, raw = activation_patching(self.net, clean_trace, x_ids, m_corr, a, w, kinds,
                                         batch_tokens=batch_tokens, progress=progress, cancelled=cancelled)
        texts = self.tokenizer.token_texts
        return Patching(clean_tokens=texts(c_ids), corrupted_tokens=texts(x_ids), answer=a,
                        answer_text=self.tokenizer.token_text(a), wrong=w, wrong_text=self.tokenizer.token_text(w),
                        clean=m_clean, corrupted=m_corr, grids=grids, raw=raw)

    def weight(self, name: str) -> Tensor:
        """A weight matrix by name, e.g. `blocks.0.attn.W_Q` (heads, d_model, head_dim)."""
        return self.net.weight(name)

    def weight_names(self) -> list[str]:
        """Every weight name this model answers (its family's, biases only where it has them)."""
        return self.net.weight_names()

    @torch.inference_mode()
    def last_logits(self, ids: list[int]) -> Tensor:
        """The next-token logits (V,) after `ids`, recording nothing (the fast path)."""
        self._check_ids(ids, None)
        return self.net(torch.tensor([ids]), logits_for="last")[0, -1]

    @torch.inference_mode()
    def extend_trace(self, prefix: Trace, new_ids: list[int]) -> Trace:
        """The trace of `prefix`'s tokens + `new_ids`, computing only the new positions: the prefix's
        keys and values are the KV cache. Equal to tracing the whole sequence, to float rounding."""
        L, k = self.config.n_layer, self.net.cached_keys  # the cache keeps keys as attention uses them
        cache = KVCache([(prefix[f"blocks.{i}.{k}"][None], prefix[f"blocks.{i}.attn.v"][None]) for i in range(L)])
        return merge_traces(prefix, self.trace_ids(new_ids, cache=cache, prefix_ids=prefix.token_ids))

    def residual_logits(self, x: Tensor) -> Tensor:
        """The logits (T, V) the model would give were the residual stream `x` (T, D) its last: the
        final norm and the unembedding, with the forward pass's own kernels (the logit lens)."""
        normed = self.net.ln_final(x.unsqueeze(0), Recorder())
        return self.net.unembed(normed)[0]


def load_model(spec: str | None = None, *, allow_download: bool = True,
               dtype: str | torch.dtype | None = None) -> ExplainerModel:
    """Load a model of a supported family (GPT-2, Llama, Qwen2, Mistral, Qwen3, Gemma 3).

    `spec`: a built-in model name, a local HF-format folder, a hub id ("gpt2", "gpt2-medium",
    "distilgpt2", "HuggingFaceTB/SmolLM2-135M", "owner/repo"), or None for the default (cached GPT-2
    small, else the built-in model). `dtype`: "float32" (default) or "bfloat16", which keeps weights and
    activations in bfloat16 (half the memory: a 1.5 B model needs about 3 GB).
    Naming a hub model that is not cached downloads it, unless `allow_download` is False; the default
    (None) never downloads. Which model was picked, and why, is logged at INFO.
    """
    resolved = resolve(spec, allow_download=allow_download)
    model = ExplainerModel.from_resolved(resolved, dtype)
    log.info("model %s: %r%s", resolved.describe(), model, f"; {resolved.reason}" if resolved.reason else "")
    return model
