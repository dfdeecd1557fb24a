"""A trace's values by name, as a mapping that computes on access: what the pass kept is looked up; the rest is
computed again from it when first read. The logits at every position from the final norm's output (`unembed`);
a stage outside the blocks by the pass's own code (`recipes.outside_values`); a block's internals by running the
block again on its kept input (`recipes.BlockSource`), kept a while in a `BlockCache`; a stage derived from others
(scaled and masked scores, the concatenated heads) by its rule in `names.DERIVATIONS`. A recording through
transformers (`generic.GenericModel`) keeps neither its masked scores, its z, its resid_mid nor every position's
logits: they are derived on access, the scores by `applied_scores` from the queries, keys and mask with the scale
and soft cap the pass applied (`scales`), z by `attention_z` from the pattern and the values, resid_mid as the sum
the layer computed (`sums`), the logits by the model's own head from the last block's output (`head`; the last
position's as the pass computed them), and kept a while in the block cache. A layer whose module our own code
implements (`bridge.mechanisms`: Gated DeltaNet) answers that module's internals too, derived on access from the
module's recorded input by our module (`mechanisms`), every stage of the layer in one run, kept a while in the block
cache: the pass records none of them; so do stages outside the blocks our code explains (`outside_lens`: Gemma 4's
per-layer inputs, from the token ids and the recorded embedding). A trace (`trace.Trace`) reads through this and
knows none of it: the lookups are here, one place, in that order."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch
from torch import Tensor

from ..config import DecoderConfig
from ..models.kernels import hidden_keys, linear
from ..models.kv_cache import KV
from ..names import Derivation, block_name, layer_of, names_for, parse_name
from .block_cache import BlockCache, BlockValues, storage_sizes
from .recipes import (
    OUTSIDE,
    BlockSource,
    Cut,
    Merged,
    RecordedPass,
    attention_scores,
    cut_values,
    merge_values,
    outside_part,
    outside_values,
)
from .summaries import Observations, Summary, keep_summary, read_summary, rows_cut, rows_joined


def applied_scores(q: Tensor, k: Tensor, mask: Tensor | None, scale: float, softcap: float | None) -> Tensor:
    """(H, T, S): the scores transformers' eager attention hands its softmax, from queries q (H, T, Dh) and keys k
    (G, S, Dh) as attention uses them (query head h reads key/value head h // (H / G), as `repeat_kv` repeats
    them): q @ k^T times `scale`, soft-capped (tanh(x / cap) * cap) where `softcap` is set, plus the additive
    `mask` (T, S) where there is one. The bridge's recording and a trace that derives them use this one rule."""
    kr = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
    scores = torch.matmul(q, kr.transpose(-1, -2)) * scale
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    return scores if mask is None else scores + mask


def attention_z(pattern: Tensor, v: Tensor) -> Tensor:
    """(H, T, Dv): each head's weighted sum of values, pattern (H, T, S) @ v (G, S, Dv) with query head h reading
    key/value head h // (H / G): the product transformers' eager attention computes (`repeat_kv`, then matmul)."""
    return torch.matmul(pattern, v.repeat_interleave(pattern.shape[0] // v.shape[0], dim=0))


class Lens(Protocol):
    """A layer's module explained by our own code (`bridge.mechanisms.Mechanism`): from the recorded stage
    `input_stage` (batch dropped), `derive` gives every stage of `stages` (suffixes, e.g. "linear_attn.beta")."""

    @property
    def input_stage(self) -> str: ...

    @property
    def stages(self) -> tuple[str, ...]: ...

    def derive(self, x: Tensor) -> dict[str, Tensor]: ...


class OutsideLens(Protocol):
    """Stages outside the blocks explained by our own code (`bridge.per_layer_lens.PerLayerInputsLens`)."""

    @property
    def stages(self) -> tuple[str, ...]: ...

    def derive_from(self, values: TraceValues) -> dict[str, Tensor]: ...


@dataclass(eq=False)
class TraceValues(Mapping[str, Tensor]):
    """Every value of one traced pass by name (batch dimension dropped): `kept`, or computed again on access.

    `kept` holds what the pass kept: with a recipe (`blocks`), the last block's output, the stages outside the
    blocks a patch edited and what a patch asked for; without one (recorded eagerly), every recorded value. The
    residual stream entering each block is the recipe's. `kv`: per block, the keys (as attention uses them) and
    values (G, S, Dh) a KV cache would hold, kept to continue the trace without running its blocks again
    (`ExplainerModel.extend_trace`); None when not kept. `observations`: small functions of values the pass
    computed as it went (`Memory.observe`), a RowSummary's rows packed (read them with `observation`).
    `head` and `scales` (a recording through transformers): what derives its logits and its masked scores."""

    config: DecoderConfig
    token_ids: list[int]  # the traced positions' ids (the stages outside the blocks are computed from them)
    start: int  # the position of the first traced token
    kept: dict[str, Tensor] = field(repr=False)
    unembed: Tensor | None = field(default=None, repr=False)  # W_U (D, V), to derive unrecorded logits
    last_logits: Tensor | None = field(default=None, repr=False)  # (V,) as the pass computed them
    blocks: BlockSource | None = field(default=None, repr=False)  # the blocks' recipe; None: recorded in `kept`
    kv: list[KV] | None = field(default=None, repr=False)
    block_cache: BlockCache = field(default_factory=BlockCache, repr=False)
    observations: Observations = field(default_factory=dict, repr=False)
    # the model's own code from its final norm on, (T, D) -> (T, V): unrecorded logits from the last block's output
    head: Callable[[Tensor], Tensor] | None = field(default=None, repr=False)
    # per block, the attention scale and soft cap the pass applied: its unrecorded masked scores by `applied_scores`
    # and, where `attn.z` is not kept, its z by `attention_z` from the pattern and the values
    scales: dict[int, tuple[float, float | None]] = field(default_factory=dict, repr=False)
    # stages the pass left out as the sum of two it kept, equal bit for bit (a layer's resid_mid: resid_pre + attn_out)
    sums: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False)
    # per layer, our own code for its module (a recording through transformers): the module's internals on access
    mechanisms: Mapping[int, Lens] = field(default_factory=dict, repr=False)
    # our own code for stages outside the blocks (Gemma 4's per-layer inputs): `stages`, derived together on access by
    # `derive_from(self)` from the token ids and what the pass kept
    outside_lens: OutsideLens | None = field(default=None, repr=False)
    # its cache key for the stages outside the blocks (its blocks': `blocks.key`, shared by the values that hold them)
    _key: object = field(default_factory=object, init=False, repr=False)

    # -- the mapping ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[str]:
        return iter(self.config.activation_names())

    def __len__(self) -> int:
        return len(self.config.activation_names())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.kept or name in set(self))

    def __getitem__(self, name: str) -> Tensor:
        if name in self.kept:
            return self.kept[name]
        if self.outside_lens is not None and name in self.outside_lens.stages:
            lens = self.outside_lens
            return self.block_cache.get((self._key, "outside_lens"), lambda: lens.derive_from(self))[name]
        if name == "logits" and self.unembed is not None:  # the unembedding's own arithmetic (`lm_head`), where it is
            normed = self["ln_final.out"].unsqueeze(0).to(self.unembed.device)
            return linear(normed, self.unembed.T)[0]  # (T, V)
        if name == "logits" and self.head is not None:  # the model's own head, on the last block's output
            return self._once(name, self._head_logits)
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
        if key == "attn.masked_scores" and p.layer in self.scales and self.blocks is None:
            return self._once(name, lambda: self._applied_scores(p.layer))
        if key == "attn.z" and p.layer in self.scales and self.blocks is None:
            pattern, v = self[block_name(p.layer, "attn.pattern")], self[block_name(p.layer, "attn.v")]
            return self._once(name, lambda: attention_z(pattern, v))
        if p.layer in self.mechanisms and key in self.mechanisms[p.layer].stages:
            return self._mechanism_values(p.layer)[name]
        if name in self.sums:
            a, b = self.sums[name]
            return self[a] + self[b]
        derivation = names_for(family).derivations.get(key)
        # a stage derived from others is recorded only where a patch edited it: the others are what to run again for
        if p.layer is not None and self.blocks is not None and (derivation is None or self.blocks.patched(name)):
            value = self._block_value(p.layer, key, name)
            if value is not None:
                return value
        if derivation is None:
            raise KeyError(f"{name!r} is not an activation recorded in this trace")
        return self._derive(derivation, p.layer)

    def _once(self, name: str, compute: Callable[[], Tensor]) -> Tensor:
        """A value derived on access, kept a while in the block cache (a view asks for it head by head)."""
        return self.block_cache.get((self._key, name), lambda: {name: compute()})[name]

    def _mechanism_values(self, layer: int) -> dict[str, Tensor]:
        """Every stage layer `layer`'s mechanism derives, by full name: one run of our module on the module's
        recorded input, kept a while in the block cache (a view reads several stages of one layer)."""
        lens = self.mechanisms[layer]
        several = getattr(lens, "derive_from", None)  # a lens that reads several values (Gemma 4's per-layer write)

        def derive() -> dict[str, Tensor]:
            values = several(self) if several is not None else lens.derive(self[block_name(layer, lens.input_stage)])
            return {block_name(layer, s): values[s] for s in lens.stages}

        return self.block_cache.get((self._key, "mechanism", layer), derive)

    def _head_logits(self) -> Tensor:
        """(T, V): the model's own head (`head`) on the last block's output, the last position's logits as the pass
        computed them where it did (`last_logits`: what `next_token_logits` answers, the same numbers)."""
        assert self.head is not None
        x = self[block_name(self.config.n_layer - 1, "resid_post")]
        if self.last_logits is None:
            return self.head(x)
        before = [self.head(x[:-1])] if x.shape[0] > 1 else []
        return torch.cat([*before, self.last_logits[None]])

    def _applied_scores(self, layer: int) -> Tensor:
        """Block `layer`'s masked scores as the recording's attention applied them (`applied_scores`)."""
        mask = self.kept.get(block_name(layer, "attn.mask"))
        q, k = self[block_name(layer, "attn.q")], self[block_name(layer, "attn.k")]
        return applied_scores(q, k, mask, *self.scales[layer])

    def _block_value(self, layer: int, stage: str, name: str) -> Tensor | None:
        """A stage of block `layer` from the recipe: the residual stream it keeps, or the block run again."""
        assert self.blocks is not None
        if stage == "resid_pre":
            return self.blocks.entering(layer)
        if stage == "resid_post" and layer + 1 < self.config.n_layer and self.blocks.output_is_next_input(layer):
            return self.blocks.entering(layer + 1)  # the same tensor, without running the block
        return self.block(layer).get(name)  # None: not recorded (a derived stage)

    def _derive(self, d: Derivation, layer: int | None) -> Tensor:
        """A derived stage of block `layer` (None: a global one), by its rule in names.DERIVATIONS.
        Sources are looked up by name, so a stage a patched forward stored (its own scores) wins."""
        src = [s if layer is None else block_name(layer, s) for s in d.sources]
        if d.op == "same":
            return self[src[0]]
        if d.op == "kv_head_index":  # query head h reads key/value head h // (H / G), beside the block's values
            assert layer is not None
            H = self.config.n_head
            # on the block's device, read from its kept input: the index runs no block
            where = self[block_name(layer, "resid_pre")].device
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

    def next_token_logits(self) -> Tensor:
        """Logits at the last position, as the pass computed them where it did."""
        if "logits" in self.kept:
            return self.kept["logits"][-1]
        if self.last_logits is not None:
            return self.last_logits
        return self["logits"][-1]

    # -- blocks and parts ---------------------------------------------------------------------------

    def block(self, layer: int) -> BlockValues:
        """Every value block `layer` records, by full name: kept, or computed again from the block's input."""
        if self.blocks is None:
            out = {k: v for k, v in self.kept.items() if layer_of(k) == layer}
            derived = [block_name(layer, s) for s in ("attn.masked_scores", "attn.z")] if layer in self.scales else []
            if layer in self.mechanisms:
                derived += [block_name(layer, s) for s in self.mechanisms[layer].stages]
            for name in [*derived, *(n for n in self.sums if layer_of(n) == layer)]:  # derived on access, not kept
                out[name] = self[name]
            return out
        blocks = self.blocks
        return self.block_cache.get((blocks.key, layer), lambda: blocks.block(layer, cache=self.block_cache))

    def outside(self, part: str) -> BlockValues:
        """The stages a part of the forward outside the blocks records (`recipes.OUTSIDE`: "embed", "rope",
        "ln_final"), by full name: kept where a pass patched them, else computed again by the pass's code on the
        token ids and the last block's output (the same numbers, bit for bit) and kept with the recent blocks."""
        if self.blocks is None or any(outside_part(k) == part for k in self.kept):
            return {k: v for k, v in self.kept.items() if outside_part(k) == part}
        net, last = self.blocks.net, self.kept[block_name(self.config.n_layer - 1, "resid_post")]
        return self.block_cache.get((self._key, part),
                                    lambda: outside_values(net, part, self.token_ids, self.start, last))

    def block_until(self, layer: int, stage: str) -> BlockValues:
        """Block `layer`'s values recorded up to `stage` ("attn.pattern"), and maybe more: the block cache's when
        the block is there, else the block run only that far (not kept)."""
        if self.blocks is None:
            return self.block(layer)
        return self.blocks.kept_or_run(layer, stage, self.block_cache)

    def keep_block(self, layer: int, values: BlockValues) -> None:
        """Hand block `layer`'s values, as the pass recorded them, to the block cache: its first view runs nothing."""
        if self.blocks is not None:
            self.block_cache.put((self.blocks.key, layer), values)

    # -- observations -------------------------------------------------------------------------------

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

    def observation(self, name: str, fn: Summary) -> Tensor:
        """`fn(self[name])`: as the pass computed it when it was asked to (`observe`), else computed now."""
        kept = self.observations.get((name, fn))
        if kept is None:
            return fn(self[name])
        return read_summary(fn, kept, self.start, len(self.token_ids))

    # -- memory ----------------------------------------------------------------------------------

    def nbytes(self) -> int:
        """The bytes of the tensors held (each storage once), the recently run blocks aside."""
        return sum(self.storages().values())

    def storages(self) -> dict[Hashable, int]:
        """The storages of the tensors held, with their bytes (`block_cache.storage_sizes`): values continued from
        others share those's."""
        tensors = [*self.kept.values(), *(t for kv in self.kv or [] for t in kv), *self.observations.values()]
        if self.last_logits is not None:
            tensors.append(self.last_logits)
        if self.blocks is not None:
            tensors += list(self.blocks.tensors())
        return storage_sizes(tensors)

    def drop_kv(self) -> None:
        """Forget the kept keys and values: continuing the trace then runs its blocks again for them."""
        self.kv = None

    def keeping(self, values: Mapping[str, Tensor]) -> TraceValues:
        """These values with `values` kept too (computed once, e.g. every position's logits)."""
        return replace(self, kept={**self.kept, **values}, observations=dict(self.observations))

    def materialized(self) -> TraceValues:
        """These values with every block's computed once and kept, as an eager recording holds them: for code that
        reads many stages of every block (a snapshot), at the memory of every intermediate."""
        if self.blocks is None:
            return self
        kept = dict(self.kept)
        for i in range(self.config.n_layer):
            kept.update(self.block(i))
        for part in OUTSIDE:
            kept.update(self.outside(part))
        kept.update(self.kept)  # what the trace keeps wins (the same numbers)
        return TraceValues(config=self.config, token_ids=self.token_ids, start=self.start, kept=kept,
                           unembed=self.unembed, last_logits=self.last_logits, kv=self.kv,
                           observations=dict(self.observations))

    # -- cut and joined ------------------------------------------------------------------------------

    def cut(self, n: int) -> TraceValues:
        """The values of the first `n` positions (values from position 0), as views: a causal model's first n
        positions do not depend on what follows. The last position's logits as the pass computed them only when
        nothing is cut (else derived on access)."""
        family = self.config.family
        kv = None if self.kv is None else [(k[:, :n], v[:, :n]) for k, v in self.kv]
        return TraceValues(config=self.config, token_ids=self.token_ids[:n], start=0,
                           kept=cut_values(self.kept, n, family), unembed=self.unembed,
                           last_logits=self.last_logits if n == len(self.token_ids) else None,
                           blocks=None if self.blocks is None else Cut(self.blocks, n), kv=kv,
                           block_cache=self.block_cache, observations=rows_cut(self.observations, n),
                           head=self.head, scales=self.scales, sums=self.sums, mechanisms=self.mechanisms,
                           outside_lens=self.outside_lens)

    def joined(self, new: TraceValues) -> TraceValues:
        """These values (from position 0) followed by `new`'s, a pass that read these positions' keys and values
        from a KV cache: equal, to float rounding, to one pass over every position."""
        if (self.blocks is None) != (new.blocks is None):
            raise ValueError("a trace recorded eagerly and one that recomputes its blocks cannot be merged")
        blocks = None
        if self.blocks is not None:
            if not isinstance(new.blocks, RecordedPass):
                raise ValueError("the new trace must be one pass that continues the prefix")
            blocks = Merged(self.blocks, new.blocks)
        return TraceValues(config=self.config, token_ids=self.token_ids + new.token_ids, start=0,
                           kept=merge_values(self.kept, new.kept, self.config.family), unembed=new.unembed,
                           last_logits=new.last_logits, blocks=blocks, kv=new.kv, block_cache=new.block_cache,
                           observations=rows_joined(self.observations, new.observations), head=new.head,
                           scales=new.scales, sums=new.sums, mechanisms=new.mechanisms, outside_lens=new.outside_lens)

