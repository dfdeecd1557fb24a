"""One loaded model with its tokenizer: trace a text, predict and generate. The engine behind the
Python API, the CLI and the web app."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .allocator import keep_freed_memory
from .config import GPTConfig
from .errors import CheckpointError, InputError
from .loading.checkpoint import DecoderLM, load_decoder, stored_dtype
from .loading.resolve import ResolvedModel, resolve
from .loading.tokenizer import TextTokenizer
from .models.gpt import KVCache
from .models.recorder import Patch, Recorder
from .sampling import NextTokenDistribution, SamplingParams, make_generator, most_likely, next_token_distribution
from .trace import Trace, merge_traces

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GeneratedToken:
    id: int
    text: str
    prob: float  # its probability under the sampling distribution it was drawn from
    position: int


class ExplainerModel:
    """A GPT-2 or Llama-family (Llama, Qwen2, Mistral) model ready to explain: `trace`, `next_token`,
    `generate`, `weight`. `gpt` is the network (a `GPT` or a `LlamaLM`; both answer the same calls)."""

    def __init__(self, gpt: DecoderLM, tokenizer: TextTokenizer, name: str, source: str = "local",
                 folder: Path | None = None, file_dtype: str | None = None) -> None:
        if tokenizer.vocab_size > gpt.config.vocab_size:
            raise CheckpointError(
                f"tokenizer has {tokenizer.vocab_size} tokens but the model only {gpt.config.vocab_size}"
            )
        self.gpt = gpt.eval().inference_layout_()
        keep_freed_memory()  # a trace's intermediates reuse freed pages instead of faulting in new ones
        self.tokenizer = tokenizer
        self.name = name
        self.source = source
        self.folder = folder
        # the type the checkpoint's file stores its weights in (None when unknown); `dtype` is what they are now
        self.file_dtype = file_dtype

    @classmethod
    def from_resolved(cls, r: ResolvedModel, dtype: str | torch.dtype | None = None) -> ExplainerModel:
        net = load_decoder(r.folder, dtype)
        return cls(net, TextTokenizer.from_folder(r.folder, net.config.family), r.name, r.source, r.folder,
                   stored_dtype(r.folder))

    @property
    def dtype(self) -> torch.dtype:
        """The weights' (and activations') dtype: float32, or bfloat16 when loaded so."""
        return self.gpt.lm_head.weight.dtype

    @property
    def config(self) -> GPTConfig:
        return self.gpt.config

    @property
    def context_length(self) -> int:
        return self.config.block_size

    def __repr__(self) -> str:
        c = self.config
        kv = f" ({c.n_kv_heads} key/value)" if c.n_kv_heads != c.n_head else ""
        return (f"ExplainerModel({self.name!r}, {c.model_type}, {c.n_layer} layers, {c.n_head} heads{kv}, "
                f"d_model {c.n_embd}, {self.gpt.num_params() / 1e6:.1f}M parameters, "
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
        last = self.gpt(torch.tensor([ids]), cache=cache, rec=rec, logits_for="last")[0, -1]
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
            unembed=self.gpt.weight("unembed.W_U"),
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
        return self.gpt(torch.tensor([ids]), logits_for="last")[0, -1]

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
        logits = self.gpt(torch.tensor([ids]), cache=cache, logits_for="last")[0, -1]
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
            logits = self.gpt(torch.tensor([[tid]]), cache=cache, logits_for="last")[0, -1]

    def generate(self, text: str, max_new_tokens: int,
                 params: SamplingParams | None = None) -> Iterator[GeneratedToken]:
        return self.generate_ids(self.encode(text), max_new_tokens, params)

    def weight(self, name: str) -> Tensor:
        """A weight matrix by name, e.g. `blocks.0.attn.W_Q` (heads, d_model, d_head)."""
        return self.gpt.weight(name)

    def weight_names(self) -> list[str]:
        """Every weight name this model answers (its family's, biases only where it has them)."""
        return self.gpt.weight_names()

    @torch.inference_mode()
    def last_logits(self, ids: list[int]) -> Tensor:
        """The next-token logits (V,) after `ids`, recording nothing (the fast path)."""
        self._check_ids(ids, None)
        return self.gpt(torch.tensor([ids]), logits_for="last")[0, -1]

    @torch.inference_mode()
    def extend_trace(self, prefix: Trace, new_ids: list[int]) -> Trace:
        """The trace of `prefix`'s tokens + `new_ids`, computing only the new positions: the prefix's
        keys and values are the KV cache. Equal to tracing the whole sequence, to float rounding."""
        L, k = self.config.n_layer, self.gpt.cached_keys  # the cache keeps keys as attention uses them
        cache = KVCache([(prefix[f"blocks.{i}.{k}"][None], prefix[f"blocks.{i}.attn.v"][None]) for i in range(L)])
        return merge_traces(prefix, self.trace_ids(new_ids, cache=cache, prefix_ids=prefix.token_ids))

    def residual_logits(self, x: Tensor) -> Tensor:
        """The logits (T, V) the model would give were the residual stream `x` (T, D) its last: the
        final norm and the unembedding, with the forward pass's own kernels (the logit lens)."""
        normed = self.gpt.final_norm(x.unsqueeze(0), Recorder())
        return self.gpt.lm_head(normed)[0]


def load_model(spec: str | None = None, *, allow_download: bool = True,
               dtype: str | torch.dtype | None = None) -> ExplainerModel:
    """Load a GPT-2 or Llama-family (Llama, Qwen2, Mistral) model.

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
