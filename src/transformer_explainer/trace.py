"""The typed record of one forward pass: every intermediate value by name, with the tokens."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .config import DecoderConfig
from .models.kernels import hidden_keys, linear
from .models.kv_cache import KV
from .names import FAMILY_NAMES, Derivation, activation_names, describe, parse_name
from .recompute import (
    OUTSIDE,
    BlockCache,
    BlockSource,
    BlockValues,
    Cut,
    Merged,
    RecordedPass,
    attention_scores,
    cut_values,
    merge_values,
    outside_part,
    outside_values,
    storage_sizes,
)
from .trace_base import TraceBase

Summary = Callable[[Tensor], Tensor]  # a small function of one value (an overview's thumbnail of a pattern)
Observe = Mapping[str, Summary | Sequence[Summary]]  # what a pass observes: per name, one function of it or several


class RowSummary:
    """A summary of a causal (..., T, S) value made row by row over groups of `group` keys: row i of its result
    (..., T, m) depends on row i of the value alone, and its m = ceil(S / group) columns summarise the groups of keys,
    0 past the row's own group (a causal row has no key after its own position). A trace keeps of each row only its
    columns up to its own group (`pack`: about half of them) and fills the rest with zeros when read (`unpack`); a
    trace cut to n positions keeps its first n rows, and a continued trace's are the beginning's and the new pass's
    (`truncate_trace`, `merge_traces`): the overview of a continued text runs no block."""

    def __init__(self, fn: Summary, what: str, *, group: int) -> None:
        if group < 1:
            raise ValueError("a group holds at least one key")
        self.fn, self.what, self.group = fn, what, group

    def __call__(self, value: Tensor) -> Tensor:
        return self.fn(value)

    def __repr__(self) -> str:
        return f"RowSummary({self.what})"

    def _kept(self, start: int, n: int, device: torch.device) -> Tensor:
        """(n, m) bool: the columns kept of the rows of positions start..start+n-1 (up to each one's own group)."""
        own = torch.div(torch.arange(start, start + n, device=device), self.group, rounding_mode="floor")
        m = -(-(start + n) // self.group)
        return torch.arange(m, device=device)[None, :] <= own[:, None]

    def pack(self, rows: Tensor, start: int) -> Tensor:
        """(..., n, m) rows of positions start.. -> (..., P): each row's columns up to its own group, row after row."""
        return rows[..., self._kept(start, rows.shape[-2], rows.device)]

    def unpack(self, packed: Tensor, start: int, n: int) -> Tensor:
        """The rows (..., n, m) of positions start..start+n-1 from their packed columns, the others 0."""
        kept = self._kept(start, n, packed.device)
        rows = packed.new_zeros(*packed.shape[:-1], *kept.shape)
        rows[..., kept] = packed
        return rows

    def first_rows(self, packed: Tensor, n: int) -> Tensor:
        """The packed rows of positions 0..n-1 among those of a trace from position 0."""
        g, (q, r) = self.group, divmod(n, self.group)
        return packed[..., : n + g * q * (q - 1) // 2 + r * q]  # sum over a < n of (a // g + 1) columns


def keep_summary(fn: Summary, value: Tensor, start: int) -> Tensor:
    """What a trace keeps of `fn`'s result `value` for positions from `start`: a RowSummary's rows packed."""
    return fn.pack(value, start) if isinstance(fn, RowSummary) else value


def _rows_cut(observations: dict[tuple[str, Summary], Tensor], n: int) -> dict[tuple[str, Summary], Tensor]:
    return {k: k[1].first_rows(v, n) for k, v in observations.items() if isinstance(k[1], RowSummary)}


def _rows_joined(before: dict[tuple[str, Summary], Tensor], after: dict[tuple[str, Summary], Tensor]
                 ) -> dict[tuple[str, Summary], Tensor]:
    """The packed rows of a beginning's positions followed by the new pass's (RowSummary.pack)."""
    out = {}
    for k, new in after.items():
        old = before.get(k)
        if old is None or not isinstance(k[1], RowSummary):
            continue
        out[k] = torch.cat([old.to(new.device), new], dim=-1)
    return out


@dataclass
class Trace(TraceBase):
    """Intermediates of one text through a decoder of any family, without the batch dimension.

    `trace["blocks.0.attn.pattern"]` is (heads, query, key). Stages that are cheap to derive
    (scaled and masked scores, the concatenated heads, the embedding sum) are computed on access, and
    so are the logits at every position (`ln_final.out @ W_U`) when the pass computed only the last
    position's (`last_logits`), which is all that next-token prediction needs. (Those two agree to
    float rounding: one row and many rows take different kernels.)
    A block's internals are computed again from the block's input when first asked for (`blocks`, see
    `recompute.py`: the same numbers as the pass's, bit for bit), and so are the stages outside the blocks
    (`outside`); the blocks recently asked for are kept (`block_cache`); `values` holds what the trace keeps:
    the last block's output, the logits and the stages outside the blocks a patch edited. A trace recorded
    eagerly (`blocks` None) holds every value there.
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
    blocks: BlockSource | None = field(default=None, repr=False)  # the blocks' recipe; None: recorded in `values`
    # per block, the keys (as attention uses them) and values (G, S, Dh) a KV cache would hold, kept to continue
    # the trace without running its blocks again (`ExplainerModel.extend_trace`); None when not kept
    kv: list[KV] | None = field(default=None, repr=False)
    block_cache: BlockCache = field(default_factory=BlockCache, repr=False, compare=False)
    # small functions of values the pass computed as it went (`ExplainerModel.trace_ids(observe=...)`), a
    # RowSummary's rows packed (`RowSummary.pack`: read them with `observation`)
    observations: dict[tuple[str, Summary], Tensor] = field(default_factory=dict, repr=False, compare=False)
    # its cache key for the stages outside the blocks (its blocks': `blocks.key`, shared by the traces that hold them)
    _key: object = field(default_factory=object, init=False, repr=False, compare=False)

    describe_name = staticmethod(describe)

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.token_ids):
            raise ValueError("tokens and token_ids differ in length")

    # -- access --------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Tensor:
        if name in self.values:
            return self.values[name]
        if name == "logits" and self.unembed is not None:  # the unembedding's own arithmetic (`lm_head`), where it is
            normed = self["ln_final.out"].unsqueeze(0).to(self.unembed.device)
            return linear(normed, self.unembed.T)[0]  # (T, V)
        part = outside_part(name)
        if part is not None and self.blocks is not None:  # a stage outside the blocks, computed again
            value = self.outside(part).get(name)
            if value is not None:
                return value
        family = self.config.family
        p = parse_name(name, family)  # KeyError for names outside the family's scheme
        key = p.suffix
        if p.layer is not None and not 0 <= p.layer < self.config.n_layer:
            raise KeyError(f"{name!r}: the model has {self.config.n_layer} blocks")
        derivation = FAMILY_NAMES[family].derivations.get(key)
        # a stage derived from others is recorded only where a patch edited it: the others are what to run again for
        if p.layer is not None and self.blocks is not None and (derivation is None or self.blocks.patched(name)):
            value = self._block_value(p.layer, key, name)
            if value is not None:
                return value
        if derivation is None:
            raise KeyError(f"{name!r} is not an activation recorded in this trace")
        return self._derive(derivation, p.layer)

    def _block_value(self, layer: int, stage: str, name: str) -> Tensor | None:
        """A stage of block `layer` from the recipe: the residual stream it keeps, or the block run again."""
        assert self.blocks is not None
        if stage == "resid_pre":
            return self.blocks.entering(layer)
        if stage == "resid_post" and layer + 1 < self.config.n_layer and self.blocks.output_is_next_input(layer):
            return self.blocks.entering(layer + 1)  # the same tensor, without running the block
        return self.block(layer).get(name)  # None: not recorded (a derived stage)

    def block(self, layer: int) -> BlockValues:
        """Every value block `layer` records, by full name: kept, or computed again from the block's input."""
        if self.blocks is None:
            prefix = f"blocks.{layer}."
            return {k: v for k, v in self.values.items() if k.startswith(prefix)}
        blocks = self.blocks
        return self.block_cache.get((blocks.key, layer), lambda: blocks.block(layer, cache=self.block_cache))

    def outside(self, part: str) -> BlockValues:
        """The stages a part of the forward outside the blocks records (`recompute.OUTSIDE`: "embed", "rope",
        "ln_final"), by full name: kept where a pass patched them, else computed again by the pass's code on the
        token ids and the last block's output (the same numbers, bit for bit) and kept with the recent blocks."""
        if self.blocks is None or any(outside_part(k) == part for k in self.values):
            return {k: v for k, v in self.values.items() if outside_part(k) == part}
        net, last = self.blocks.net, self.values[f"blocks.{self.config.n_layer - 1}.resid_post"]
        return self.block_cache.get((self._key, part),
                                    lambda: outside_values(net, part, self.token_ids, self.start, last))

    def block_until(self, layer: int, stage: str) -> BlockValues:
        """Block `layer`'s values recorded up to `stage` ("attn.pattern"), and maybe more: the block cache's when
        the block is there, else the block run only that far (not kept)."""
        if self.blocks is None:
            return self.block(layer)
        return self.blocks.kept_or_run(layer, stage, self.block_cache)

    def observe(self, name: str, fn: Summary) -> Tensor:
        """`fn(self[name])`, kept for `observation` as if the pass had observed it; a block's stage is read from the
        block run only as far as that stage (a continued trace's overview: every block's pattern, none whole)."""
        p, table = parse_name(name, self.config.family), self.config.names
        if p.layer is not None and self.blocks is not None and p.suffix not in table.derivations:
            value = self.block_until(p.layer, p.suffix)[name]
        else:
            value = self[name]
        out = fn(value)
        self.observations[(name, fn)] = keep_summary(fn, out, self.start)
        return out

    def keep_block(self, layer: int, values: BlockValues) -> None:
        """Hand block `layer`'s values, as the pass recorded them, to the block cache: its first view runs nothing."""
        if self.blocks is not None:
            self.block_cache.put((self.blocks.key, layer), values)

    def _derive(self, d: Derivation, layer: int | None) -> Tensor:
        """A derived stage of block `layer` (None: a global one), by its rule in names.DERIVATIONS.
        Sources are looked up by name, so a stage a patched forward stored (its own scores) wins."""
        src = [s if layer is None else f"blocks.{layer}.{s}" for s in d.sources]
        if d.op == "same":
            return self[src[0]]
        if d.op == "kv_head_index":  # query head h reads key/value head h // (H / G), beside the block's values
            H = self.config.n_head
            # on the block's device, read from its kept input: the index runs no block
            where = self[f"blocks.{layer}.resid_pre"].device
            return torch.arange(H, device=where) // (H // self.config.n_kv_heads)
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

    def observation(self, name: str, fn: Summary) -> Tensor:
        """`fn(self[name])`: as the pass computed it when it was asked to (`observe`), else computed now."""
        kept = self.observations.get((name, fn))
        if kept is None:
            return fn(self[name])
        return fn.unpack(kept, self.start, self.n_tokens) if isinstance(fn, RowSummary) else kept

    def names(self) -> list[str]:
        """Every name this trace answers, in computation order."""
        return activation_names(self.config.n_layer, self.config.family, self.config.dense_layers)

    def describe(self, name: str) -> str:
        dims, text = describe(name, self.config.family)
        return f"{name} {tuple(self[name].shape)} [{', '.join(dims)}]: {text}"

    # -- memory ----------------------------------------------------------------------------------

    def nbytes(self) -> int:
        """The bytes of the tensors the trace holds (each storage once), its recently run blocks aside."""
        return sum(self.storages().values())

    def storages(self) -> dict[Hashable, int]:
        """The storages of the tensors the trace holds, with their bytes (`recompute.storage_sizes`): a trace continued
        from another shares that one's."""
        tensors = [*self.values.values(), *(t for kv in self.kv or [] for t in kv), *self.observations.values()]
        if self.last_logits is not None:
            tensors.append(self.last_logits)
        if self.blocks is not None:
            tensors += list(self.blocks.tensors())
        return storage_sizes(tensors)

    def drop_kv(self) -> None:
        """Forget the kept keys and values: continuing the trace then runs its blocks again for them."""
        self.kv = None

    def materialized(self) -> Trace:
        """The same trace with every block's values computed once and kept, as an eager recording holds them: for
        code that reads many stages of every block (a snapshot), at the memory of every intermediate."""
        if self.blocks is None:
            return self
        values = dict(self.values)
        for i in range(self.config.n_layer):
            values.update(self.block(i))
        for part in OUTSIDE:
            values.update(self.outside(part))
        values.update(self.values)  # what the trace keeps wins (the same numbers)
        return Trace(model_name=self.model_name, config=self.config, text=self.text, token_ids=self.token_ids,
                     tokens=self.tokens, values=values, start=self.start, prefix_ids=self.prefix_ids,
                     unembed=self.unembed, last_logits=self.last_logits, kv=self.kv,
                     observations=dict(self.observations))

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
    family = trace.config.family
    kv = None if trace.kv is None else [(k[:, :n], v[:, :n]) for k, v in trace.kv]
    return Trace(model_name=trace.model_name, config=trace.config, text="", token_ids=trace.token_ids[:n],
                 tokens=trace.tokens[:n], values=cut_values(trace.values, n, family), start=0, prefix_ids=[],
                 unembed=trace.unembed, last_logits=trace.last_logits if n == trace.n_tokens else None,
                 blocks=None if trace.blocks is None else Cut(trace.blocks, n), kv=kv, block_cache=trace.block_cache,
                 observations=_rows_cut(trace.observations, n))


def merge_traces(prefix: Trace, new: Trace) -> Trace:
    """The trace of prefix + new positions, where `new` was computed with a KV cache holding the
    prefix. Equal (up to float rounding) to tracing the whole sequence at once: the prefix's score
    rows get their entries for the new keys (computed, then hidden by the mask: pattern 0)."""
    if new.start != prefix.n_tokens + prefix.start or prefix.start != 0:
        raise ValueError("the new trace must continue the prefix trace")
    if (prefix.blocks is None) != (new.blocks is None):
        raise ValueError("a trace recorded eagerly and one that recomputes its blocks cannot be merged")
    values = merge_values(prefix.values, new.values, prefix.config.family)
    blocks = None
    if prefix.blocks is not None:
        if not isinstance(new.blocks, RecordedPass):
            raise ValueError("the new trace must be one pass that continues the prefix")
        blocks = Merged(prefix.blocks, new.blocks)
    ids = prefix.token_ids + new.token_ids
    return Trace(model_name=prefix.model_name, config=prefix.config, text=new.text, token_ids=ids,
                 tokens=prefix.tokens + new.tokens, values=values, start=0, prefix_ids=[],
                 unembed=new.unembed, last_logits=new.last_logits, blocks=blocks, kv=new.kv,
                 block_cache=new.block_cache, observations=_rows_joined(prefix.observations, new.observations))
