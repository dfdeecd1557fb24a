"""The typed record of one forward pass: every intermediate value by name, with the tokens."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .config import DecoderConfig
from .models.kernels import hidden_keys, linear
from .names import FAMILY_NAMES, Derivation, activation_names, describe, parse_name
from .trace_base import TraceBase

# per family: the queries and keys whose products are the attention scores (names.DERIVATIONS)
SCORE_INPUTS: dict[str, tuple[str, ...]] = {f: t.derivations["attn.scores"].sources for f, t in FAMILY_NAMES.items()}


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    """Raw scores (H, T, S) of queries q (H, T, Dh) against keys k (G, S, Dh), with the forward
    pass's own product: each group of H / G query heads against its key/value head in one batched
    product (grouped-query attention; G = H is head by head)."""
    G, (H, T, Dh) = k.shape[0], q.shape
    return torch.bmm(q.reshape(G, H // G * T, Dh), k.transpose(1, 2)).view(H, T, -1)


@dataclass
class Trace(TraceBase):
    """Intermediates of one text through a decoder of any family, without the batch dimension.

    `trace["blocks.0.attn.pattern"]` is (heads, query, key). Stages that are cheap to derive
    (scaled and masked scores, the concatenated heads, the embedding sum) are computed on access, and
    so are the logits at every position (`ln_final.out @ W_U`) when the pass computed only the last
    position's (`last_logits`), which is all that next-token prediction needs. (Those two agree to
    float rounding: one row and many rows take different kernels.)
    `start` is the position of the first traced token: it is above 0 when the trace covers only the
    new positions of a generation step, whose keys and values came from a cache.
    """

    model_name: str
    config: DecoderConfig
    text: str
    token_ids: list[int]  # the traced positions' ids
    tokens: list[str]  # their text, leading spaces kept; undecodable byte pieces escaped
    values: dict[str, Tensor] = field(repr=False)
    start: int = 0
    prefix_ids: list[int] = field(default_factory=list)  # ids before `start`, from the cache
    unembed: Tensor | None = field(default=None, repr=False)  # W_U (D, V), to derive unrecorded logits
    last_logits: Tensor | None = field(default=None, repr=False)  # (V,) as the pass computed them

    describe_name = staticmethod(describe)

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.token_ids):
            raise ValueError("tokens and token_ids differ in length")

    # -- access --------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Tensor:
        if name in self.values:
            return self.values[name]
        if name == "logits" and self.unembed is not None:  # the unembedding's own arithmetic (`lm_head`), where it is
            normed = self.values["ln_final.out"].unsqueeze(0).to(self.unembed.device)
            return linear(normed, self.unembed.T)[0]  # (T, V)
        family = self.config.family
        p = parse_name(name, family)  # KeyError for names outside the family's scheme
        key = p.suffix
        if p.layer is not None and not 0 <= p.layer < self.config.n_layer:
            raise KeyError(f"{name!r}: the model has {self.config.n_layer} blocks")
        derivation = FAMILY_NAMES[family].derivations.get(key)
        if derivation is None:
            raise KeyError(f"{name!r} is not an activation recorded in this trace")
        return self._derive(derivation, p.layer)

    def _derive(self, d: Derivation, layer: int | None) -> Tensor:
        """A derived stage of block `layer` (None: a global one), by its rule in names.DERIVATIONS.
        Sources are looked up by name, so a stage a patched forward stored (its own scores) wins."""
        src = [s if layer is None else f"blocks.{layer}.{s}" for s in d.sources]
        if d.op == "same":
            return self[src[0]]
        if d.op == "kv_head_index":  # query head h reads key/value head h // (H / G), beside the block's values
            H = self.config.n_head
            return torch.arange(H, device=self[src[0]].device) // (H // self.config.n_kv_heads)
        if d.op == "concat_heads":  # (H, T, Dh) -> (T, H*Dh)
            z = self[src[0]]
            return z.transpose(0, 1).reshape(z.shape[1], -1)
        if d.op == "scores":  # the same matmul as the forward pass, so the same numbers
            return attention_scores(self[src[0]], self[src[1]])
        if d.op == "scale":  # 1 / sqrt(head_dim), or Gemma's 1 / sqrt(query_pre_attn_scalar)
            return self[src[0]] * self.config.attn_scale
        if d.op == "causal_mask":  # the layer's own mask: causal, and its local window where it has one
            scaled = self[src[0]]
            t, s = scaled.shape[-2:]
            window = None if layer is None else self.config.window(layer)
            return scaled.masked_fill(hidden_keys(t, s, window, scaled.device), float("-inf"))
        raise KeyError(f"no rule to derive {d.op!r}")

    def names(self) -> list[str]:
        """Every name this trace answers, in computation order."""
        return activation_names(self.config.n_layer, self.config.family, self.config.dense_layers)

    def describe(self, name: str) -> str:
        dims, text = describe(name, self.config.family)
        return f"{name} {tuple(self[name].shape)} [{', '.join(dims)}]: {text}"

    # -- convenience -----------------------------------------------------------------------------

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def positions(self) -> list[int]:
        return list(range(self.start, self.start + self.n_tokens))

    @property
    def logits(self) -> Tensor:
        """(T, V): the logits at every position."""
        return self["logits"]

    def next_token_logits(self) -> Tensor:
        """Logits at the last position: the model's scores for the token that comes next."""
        if "logits" in self.values:
            return self.values["logits"][-1]
        if self.last_logits is not None:
            return self.last_logits
        return self["logits"][-1]

    def title(self) -> str:
        return f"Trace of {self.n_tokens} tokens through {self.model_name}"


def truncate_trace(trace: Trace, n: int) -> Trace:
    """The trace of `trace`'s first `n` tokens (0 < n <= its tokens; a trace from position 0): every
    value cut to those positions, as views. A causal model's first n positions do not depend on what
    follows, so this is what tracing those tokens alone gives; `extend_trace` continues it when a text
    is edited after its first n tokens. Its text is not known here (""); nor are its last position's
    logits as the pass computed them: they are derived on access."""
    if trace.start != 0 or not 0 < n <= trace.n_tokens:
        raise ValueError(f"cannot cut a trace of {trace.n_tokens} tokens from position {trace.start} to {n}")
    values: dict[str, Tensor] = {}
    family = trace.config.family
    for name, v in trace.values.items():
        dims, _ = describe(name, family)
        if len(dims) != v.dim():
            raise ValueError(f"{name}: {v.dim()} dimensions where its description has {len(dims)}")
        values[name] = v[tuple(slice(0, n) if d in ("T", "S") else slice(None) for d in dims)]
    return Trace(model_name=trace.model_name, config=trace.config, text="", token_ids=trace.token_ids[:n],
                 tokens=trace.tokens[:n], values=values, start=0, prefix_ids=[], unembed=trace.unembed,
                 last_logits=trace.last_logits if n == trace.n_tokens else None)


def merge_traces(prefix: Trace, new: Trace) -> Trace:
    """The trace of prefix + new positions, where `new` was computed with a KV cache holding the
    prefix. Equal (up to float rounding) to tracing the whole sequence at once: the prefix's score
    rows get their entries for the new keys (computed, then hidden by the mask: pattern 0)."""
    if new.start != prefix.n_tokens + prefix.start or prefix.start != 0:
        raise ValueError("the new trace must continue the prefix trace")
    values: dict[str, Tensor] = {}
    family = prefix.config.family
    for name, a in prefix.values.items():
        b = new.values.get(name)
        if b is None:  # recorded in one pass only (logits a patch asked for): the merged trace derives it
            continue
        dims, _ = describe(name, family)
        if "S" in dims and "T" not in dims:  # keys, values: the new trace already spans every position
            values[name] = b
            continue
        if "S" in dims:  # (H, T, S) scores or pattern: extend the old rows to the new keys
            layer = parse_name(name, family).layer
            n_new = b.shape[-1] - a.shape[-1]
            if name.endswith("attn.scores"):
                q_name, k_name = SCORE_INPUTS[family]
                k_new = new.values[f"blocks.{layer}.{k_name}"][:, -n_new:, :]  # (H or G, n_new, Dh)
                extra = attention_scores(prefix.values[f"blocks.{layer}.{q_name}"], k_new)
            else:
                extra = a.new_zeros(*a.shape[:-1], n_new)
            a = torch.cat([a, extra], dim=-1)
        values[name] = torch.cat([a, b], dim=dims.index("T"))
    ids = prefix.token_ids + new.token_ids
    return Trace(model_name=prefix.model_name, config=prefix.config, text=new.text, token_ids=ids,
                 tokens=prefix.tokens + new.tokens, values=values, start=0, prefix_ids=[],
                 unembed=new.unembed, last_logits=new.last_logits)
