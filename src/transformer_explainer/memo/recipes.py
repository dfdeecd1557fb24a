"""The recipes of a trace's values: how a trace answers for a block's internals without keeping them. The block is
run again, when one of its values is first asked for, on the residual stream that entered it, by the recorded forward
the pass itself ran (`Decoder.forward_block`). The same code on the same inputs gives the pass's own numbers,
bit for bit.

A trace keeps what is small and shared by every view: the residual stream entering each block (L x T x D), the
last block's output and the last position's logits. The stages outside the blocks (the embeddings, the rotation
angles, the final norm's) are computed again too, by the pass's own code (`outside_values`), unless a patch edited
them. A block's internals (queries, keys, patterns, MLP activations, and whatever else the block's
recorded forward records) come from a `BlockSource`, the recipe of the passes that made the trace:

- `RecordedPass`: one forward pass. Block `layer` runs again on its recorded input (`resid_pre`, already patched),
  with the pass's other patches on that block, at the pass's positions (the rotation's offset), after the keys and
  values of the positions before them where the pass read a KV cache;
- `Merged`: a trace continued from a KV cache (`merge_traces`): the prefix's block and the continuation's, the
  continuation reading the prefix's keys and values, merged as the recorded values are (`merge_values`);
- `Cut`: a trace's first n positions (`truncate_trace`): the block at its full length, cut as the recorded values
  are (`cut_values`): a block run on fewer positions may round differently.

What depends on the model's weights, mask, window and dtype is the block's own code, run where its weights are.
Patches must be functions of the value they replace alone: a recomputed block calls them again.
Recomputed blocks are kept in a `BlockCache` (`block_cache.py`: the least recently used goes first), one per trace or
one that a server shares among its traces, under their recipe's key: a `Merged` or `Cut` recipe reads the blocks of the
recipes it is made of from there where they are kept whole (`kept_or_run`), so the block of a text edited at its
end runs for the new positions only when the beginning's block was viewed before the edit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from ..models.decoder import Decoder, device_of
from ..models.kv_cache import KV, KVCache
from ..models.recorder import Patch, Recorder
from ..names import FAMILY_NAMES, block_name, block_prefix, describe, parse_name
from .block_cache import BlockCache, BlockValues, packed

# per family: the queries and keys whose products are the attention scores (names.DERIVATIONS)
SCORE_INPUTS: dict[str, tuple[str, ...]] = {f: t.derivations["attn.scores"].sources for f, t in FAMILY_NAMES.items()}


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    """Raw scores (H, T, S) of queries q (H, T, Dh) against keys k (G, S, Dh), with the forward
    pass's own product: each group of H / G query heads against its key/value head in one batched
    product (grouped-query attention; G = H is head by head)."""
    G, (H, T, Dh) = k.shape[0], q.shape
    return torch.bmm(q.reshape(G, H // G * T, Dh), k.transpose(1, 2)).view(H, T, -1)


# -- cutting and merging recorded values (the trace's kept ones, and a recomputed block's) -------------------------


def cut_values(values: Mapping[str, Tensor], n: int, family: str) -> dict[str, Tensor]:
    """Every value cut to the first `n` positions (query and key dimensions alike), as views."""
    out: dict[str, Tensor] = {}
    for name, v in values.items():
        dims, _ = describe(name, family)
        if len(dims) != v.dim():
            raise ValueError(f"{name}: {v.dim()} dimensions where its description has {len(dims)}")
        out[name] = v[tuple(slice(0, n) if d in ("T", "S") else slice(None) for d in dims)]
    return out


def merge_values(prefix: Mapping[str, Tensor], new: Mapping[str, Tensor], family: str) -> dict[str, Tensor]:
    """The values of prefix + new positions, where `new` was computed with a KV cache holding the prefix: the
    prefix's score rows get their entries for the new keys (computed, then hidden by the mask: pattern 0)."""
    values: dict[str, Tensor] = {}
    for name, a in prefix.items():
        b = new.get(name)
        if b is None:  # recorded in one pass only (logits a patch asked for): the merged trace derives it
            continue
        dims, _ = describe(name, family)
        if "S" in dims and "T" not in dims:  # keys, values: the new trace already spans every position
            values[name] = b
            continue
        t = dims.index("T")
        if "S" in dims:  # (H, T, S) scores or pattern: the old rows extended to the new keys, then the new rows
            # written into one tensor (two concatenations copied the old rows twice: at 1,000 tokens on GPT-2 small's
            # shape, 2 x 48 MB per stage, most of an attention view's time after an edit)
            layer = parse_name(name, family).layer
            n_old, n_new, rows = a.shape[-1], b.shape[-1] - a.shape[-1], a.shape[t]
            out = b.new_empty(*b.shape[:t], rows + b.shape[t], *b.shape[t + 1:])
            old_rows = out.narrow(t, 0, rows)
            old_rows[..., :n_old].copy_(a)
            if name.endswith("attn.scores"):
                q_name, k_name = SCORE_INPUTS[family]
                k_new = new[block_name(layer, k_name)][:, -n_new:, :]  # (H or G, n_new, Dh)
                old_rows[..., n_old:].copy_(attention_scores(prefix[block_name(layer, q_name)], k_new))
            else:
                old_rows[..., n_old:].zero_()
            out.narrow(t, rows, b.shape[t]).copy_(b)
            values[name] = out
            continue
        values[name] = torch.cat([a, b], dim=t)
    return values


# -- the recipes ---------------------------------------------------------------------------------------------------


class BlockSource:
    """The recipe of a trace's block internals: the residual stream entering each block, and each block's values
    computed again on demand."""

    net: Decoder
    start: int  # the position of the first token covered
    n_tokens: int  # how many positions are covered
    passes: int  # how many forward passes the recipe runs for one block
    key: object  # its blocks' key in a BlockCache: (key, layer)

    def entering(self, layer: int) -> Tensor:
        """(T, D): the residual stream entering block `layer` (its `resid_pre`), as the pass recorded it."""
        raise NotImplementedError

    def block(self, layer: int, until: str | None = None, cache: BlockCache | None = None) -> BlockValues:
        """Every value block `layer`'s recorded forward records, as the pass recorded them; with `until` (a stage,
        "attn.pattern"), only those recorded up to that one, the block run no further. `cache`: where the blocks of
        the recipes this one is made of may be kept whole (a continued trace's beginning, viewed before it was
        edited): those are read, not run again."""
        raise NotImplementedError

    def kept_or_run(self, layer: int, until: str | None, cache: BlockCache | None) -> BlockValues:
        """Block `layer` as `cache` keeps it whole for this recipe, else run (as far as `until`)."""
        kept = None if cache is None else cache.peek((self.key, layer))
        return kept if kept is not None else self.block(layer, until, cache)

    def kept(self, layer: int, cache: BlockCache | None) -> bool:
        """Whether `cache` keeps block `layer` whole for this recipe (reading it runs nothing)."""
        return cache is not None and cache.peek((self.key, layer)) is not None

    def patched(self, name: str) -> bool:
        """Whether a pass of the recipe patched the value `name` (a derived stage is then recorded)."""
        raise NotImplementedError

    def patched_under(self, prefix: str) -> bool:
        """Whether a pass of the recipe patched a value whose name begins with `prefix` ("embed.")."""
        raise NotImplementedError

    def output_is_next_input(self, layer: int) -> bool:
        """Whether block `layer`'s `resid_post` is the next block's `resid_pre` itself: no patch edits the latter, and
        both blocks are on one device (a device map moves the stream between them, so the next input is a copy)."""
        here = next(self.net.blocks[layer].parameters()).device
        return not self.patched(block_name(layer + 1, "resid_pre")) and self.entering(layer + 1).device == here

    def tensors(self) -> Iterator[Tensor]:
        """The tensors the recipe holds (for the memory a trace takes)."""
        raise NotImplementedError

    def kv(self, layer: int, cache: BlockCache | None = None) -> KV:
        """Block `layer`'s keys (as attention uses them: rotated, where it rotates) and values (G, S, Dh), from the
        block run again as far as its values (or kept whole in `cache`): what a continuation of this trace reads
        from its KV cache."""
        return kv_of(self.kept_or_run(layer, KV_LAST, cache), layer, self.net)


KV_LAST = "attn.v"  # attention records its keys, then its values, before it attends: a block run this far has both


def kv_of(values: BlockValues, layer: int, net: Decoder) -> KV:
    """The keys (as attention uses them) and values of block `layer` among its recorded values."""
    return values[block_name(layer, net.cached_keys)], values[block_name(layer, "attn.v")]


@dataclass(frozen=True)
class CachedKV:
    """The keys and values (G, S, Dh) per block that a pass read from a caller's KV cache: views of the cache's
    buffers, which only grow (a later step writes after them)."""

    layers: tuple[KV, ...]

    def kv(self, layer: int, cache: BlockCache | None = None) -> KV:
        return self.layers[layer]


Past = BlockSource | CachedKV  # where a pass's block finds the keys and values of the positions before it


class RecordedPass(BlockSource):
    """One recorded forward pass over positions start..start+T-1: each block's input, the pass's patches, and the
    keys and values of the positions before `start` (None when the pass began at 0)."""

    def __init__(self, net: Decoder, inputs: tuple[Tensor, ...], start: int, patches: Mapping[str, Patch],
                 past: Past | None) -> None:
        if (past is None) != (start == 0):
            raise ValueError("a pass after position 0 needs the keys and values of the positions before it")
        self.net, self.inputs, self.start, self.past = net, inputs, start, past
        self.patches = dict(patches)
        self.n_tokens = inputs[0].shape[0]
        self.passes = 1
        self.key = object()

    def entering(self, layer: int) -> Tensor:
        return self.inputs[layer]

    def patched(self, name: str) -> bool:
        return name in self.patches

    def patched_under(self, prefix: str) -> bool:
        return any(k.startswith(prefix) for k in self.patches) or (
            isinstance(self.past, BlockSource) and self.past.patched_under(prefix))

    def tensors(self) -> Iterator[Tensor]:
        yield from self.inputs
        if isinstance(self.past, CachedKV):
            for k, v in self.past.layers:
                yield from (k, v)
        elif self.past is not None:
            yield from self.past.tensors()

    def block(self, layer: int, until: str | None = None, cache: BlockCache | None = None,
              past: KV | None = None) -> BlockValues:
        """Block `layer` run again (as far as `until`); `past`: the keys and values before `start` when the caller
        has them at hand."""
        prefix = block_prefix(layer)
        # the input is recorded after its patch: applying that patch again would apply it twice
        patches = {k: p for k, p in self.patches.items() if k.startswith(prefix) and k != prefix + "resid_pre"}
        if past is None and self.past is not None:
            past = self.past.kv(layer, cache)
        values: dict[str, Tensor] = {}
        block = self.net.blocks[layer]
        device = next(block.parameters()).device
        # a copy: the block records its input, and a view of the trace's one storage would count all of it as its own
        x = self.inputs[layer].to(device, copy=True)[None]
        rec = Recorder(values, prefix, patches, stop_after=None if until is None else prefix + until)
        with torch.inference_mode():
            slot = None if past is None else KVCache([(past[0].to(device)[None], past[1].to(device)[None])]).slot(0)
            rec.run(lambda: self.net.forward_block(layer, x, start=self.start, rec=rec, past=slot))
        return {k: v[0] for k, v in values.items()}


class Merged(BlockSource):
    """A trace from position 0 continued by a pass that read its keys and values from a KV cache."""

    def __init__(self, prefix: BlockSource, new: RecordedPass) -> None:
        if prefix.start != 0 or new.start != prefix.n_tokens:
            raise ValueError("the new pass must continue the prefix")
        self.prefix, self.new, self.net = prefix, new, prefix.net
        self.start, self.n_tokens = 0, prefix.n_tokens + new.n_tokens
        self.passes = prefix.passes + new.passes
        self.key = object()

    def entering(self, layer: int) -> Tensor:
        return torch.cat([self.prefix.entering(layer), self.new.entering(layer)])

    def patched(self, name: str) -> bool:
        return self.prefix.patched(name) or self.new.patched(name)

    def patched_under(self, prefix: str) -> bool:
        return self.prefix.patched_under(prefix) or self.new.patched_under(prefix)

    def tensors(self) -> Iterator[Tensor]:
        yield from self.prefix.tensors()
        yield from self.new.tensors()

    def block(self, layer: int, until: str | None = None, cache: BlockCache | None = None) -> BlockValues:
        before = self.prefix.kept_or_run(layer, until, cache)
        past = None
        if self.new.past is self.prefix:  # the continuation reads the prefix's keys and values: the block just run's
            k, v = block_name(layer, self.net.cached_keys), block_name(layer, "attn.v")
            past = (before[k], before[v]) if k in before and v in before else self.prefix.kv(layer, cache)
        return merge_values(before, self.new.block(layer, until, cache, past), self.net.config.family)


def flattened(source: BlockSource) -> RecordedPass | None:
    """`source`'s blocks as one pass from position 0 over the residual streams that entered them (copied into one
    storage), or None where a pass of it patched a value (a patch is a pass's own) or it does not begin at 0. A trace
    continued again and again is a chain of passes, each run again for each block a view reads (`MAX_PASSES`): one
    pass instead runs each block once over every position, equal to the chain's values to float rounding (not bit for
    bit: the positions are no longer split as the passes split them)."""
    if source.start != 0 or source.patched_under(""):
        return None
    inputs = packed({str(i): source.entering(i) for i in range(source.net.config.n_layer)})
    return RecordedPass(source.net, tuple(inputs.values()), 0, {}, None)


class Cut(BlockSource):
    """A trace's first `n` positions."""

    def __init__(self, source: BlockSource, n: int) -> None:
        if source.start != 0 or not 0 < n <= source.n_tokens:
            raise ValueError(f"cannot cut {source.n_tokens} positions from {source.start} to {n}")
        self.source, self.net, self.start, self.n_tokens, self.passes = source, source.net, 0, n, source.passes
        self.key = object()

    def entering(self, layer: int) -> Tensor:
        return self.source.entering(layer)[: self.n_tokens]

    def patched(self, name: str) -> bool:
        return self.source.patched(name)

    def patched_under(self, prefix: str) -> bool:
        return self.source.patched_under(prefix)

    def tensors(self) -> Iterator[Tensor]:
        return self.source.tensors()

    def kept(self, layer: int, cache: BlockCache | None) -> bool:
        return super().kept(layer, cache) or self.source.kept(layer, cache)

    def block(self, layer: int, until: str | None = None, cache: BlockCache | None = None) -> BlockValues:
        return cut_values(self.source.kept_or_run(layer, until, cache), self.n_tokens, self.net.config.family)


# -- the stages outside the blocks -----------------------------------------------------------------------------------

# the parts of the forward outside the blocks whose stages a trace computes again when asked (cheap: a lookup, the
# angles, one norm), unless a pass patched them; GPT-2 small's shape, 1000 tokens: 12 MB of the 50 a trace holds
OUTSIDE = ("embed", "rope", "ln_final")


def outside_part(name: str) -> str | None:
    """The part outside the blocks (OUTSIDE) that records `name` ("ln_final.out": "ln_final"), or None."""
    head, dot, _ = name.partition(".")
    return head if dot and head in OUTSIDE else None


def outside_values(net: Decoder, part: str, ids: list[int], start: int, last_output: Tensor) -> BlockValues:
    """The stages of `part` (OUTSIDE) for token ids at positions start..start+T-1, by the pass's own code, batch
    dimension dropped: the embeddings of the ids, the rotation angles of the positions, the final norm of the last
    block's output `last_output` (T, D). Unpatched: a trace keeps a part a pass patched."""
    values: dict[str, Tensor] = {}
    rec = Recorder(values)
    with torch.inference_mode():
        if part == "embed":
            net.embed_tokens(torch.tensor([ids], device=device_of(net.embed)), start, rec)
        elif part == "rope":
            net.rotations(1, start, len(ids), last_output.dtype, device_of(net.embed), rec)
        elif part == "ln_final":
            # a copy, as a block's input: a view of the trace's one storage would count all of it as the norm's
            net.ln_final(last_output.to(device_of(net.ln_final), copy=True)[None], rec.scope("ln_final"))
        else:
            raise KeyError(f"{part!r} is not a part outside the blocks ({', '.join(OUTSIDE)})")
    return {k: v[0] for k, v in values.items()}


class PrefixCache(KVCache):
    """The KV cache of a trace's positions for a pass that continues it, each block's keys and values fetched
    (from the trace: kept, or its block run again) when the pass reaches that block."""

    def __init__(self, length: int, kv: Callable[[int], KV]) -> None:
        super().__init__()
        self._length, self._kv = length, kv

    @property
    def length(self) -> int:
        return self._length

    def extend(self, layer: int, k: Tensor, v: Tensor) -> KV:
        pk, pv = self._kv(layer)  # (G, S, Dh)
        return torch.cat([pk.to(k.device)[None], k], dim=2), torch.cat([pv.to(v.device)[None], v], dim=2)
