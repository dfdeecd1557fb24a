"""Keys and values of the positions seen so far, kept for the next call (generation steps)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

KV = tuple[Tensor, Tensor]  # (keys, values), each (B, heads, S, Dh)


def empty_in_one_storage(specs: list[tuple[tuple[int, ...], torch.device, torch.dtype]]) -> list[Tensor]:
    """Uninitialised tensors of the given (shape, device, dtype), each a view of one storage per device and dtype:
    allocated in one piece (kept memory then neither fragments the allocator's free memory nor is dropped in parts)."""
    sizes: dict[tuple[torch.device, torch.dtype], int] = {}
    for shape, device, dtype in specs:
        sizes[device, dtype] = sizes.get((device, dtype), 0) + math.prod(shape)
    arenas = {key: torch.empty(n, device=key[0], dtype=key[1]) for key, n in sizes.items()}
    at = dict.fromkeys(sizes, 0)
    out = []
    for shape, device, dtype in specs:
        key, n = (device, dtype), math.prod(shape)
        out.append(arenas[key][at[key]:at[key] + n].view(shape))
        at[key] += n
    return out


@dataclass
class KVCache:
    """One (K, V) pair per block: `layers[i]` holds every cached position of block i.

    The pairs are views of per-block buffers that each call extends in place, so a generation step
    copies only its own position instead of concatenating the whole history again (`torch.cat`
    per block per step makes generation quadratic in copies). `capacity`: positions to reserve when
    a buffer is made, e.g. prompt + new tokens; 0 reserves exactly what is stored (the buffer then
    grows, by copying, when a later call goes beyond it). `ids`: the token ids of the cached positions, where a
    trace ran over them (`ExplainerModel.trace_ids` appends its own): a later trace into the cache knows its prefix.
    """

    layers: list[KV] = field(default_factory=list)
    capacity: int = 0
    ids: list[int] = field(default_factory=list)
    _buffers: list[KV | None] = field(default_factory=list, init=False, repr=False)

    @classmethod
    def with_room(cls, past: list[KV], extra: int) -> KVCache:
        """A cache holding `past` (per block, keys and values (B, heads, S, Dh)) with room for `extra` more positions,
        every block's buffers in one storage per device and dtype: a pass over those positions writes its keys and
        values in place, and what it records of them (every position's) already lies in one piece, to be kept as
        it is (a trace continued from a kept one copies its beginning's keys and values once, not twice)."""
        tensors = [t for pair in past for t in pair]
        buffers = empty_in_one_storage([((*t.shape[:2], t.shape[2] + extra, t.shape[3]), t.device, t.dtype)
                                        for t in tensors])
        for buf, t in zip(buffers, tensors, strict=True):
            buf.narrow(2, 0, t.shape[2]).copy_(t)
        pairs = list(zip(buffers[::2], buffers[1::2], strict=True))
        cache = cls([(k.narrow(2, 0, pk.shape[2]), v.narrow(2, 0, pk.shape[2])) for (k, v), (pk, _) in zip(pairs, past,
                                                                                                          strict=True)])
        cache._buffers = list(pairs)
        return cache

    @property
    def length(self) -> int:
        return 0 if not self.layers else self.layers[0][0].shape[2]

    def slot(self, layer: int) -> KVSlot:
        return KVSlot(self, layer)

    def extend(self, layer: int, k: Tensor, v: Tensor) -> KV:
        """Append this call's keys and values (B, heads, T, Dh) to block `layer`'s; returns every
        position's (B, heads, S + T, Dh)."""
        if layer < len(self.layers) and layer < len(self._buffers):  # a generation step: the buffer has room
            buf, past_k = self._buffers[layer], self.layers[layer][0]
            start, T = past_k.shape[2], k.shape[2]
            if buf is not None and past_k.data_ptr() == buf[0].data_ptr() and start + T <= buf[0].shape[2]:
                buf[0].narrow(2, start, T).copy_(k)
                buf[1].narrow(2, start, T).copy_(v)
                kv = self.layers[layer] = (buf[0].narrow(2, 0, start + T), buf[1].narrow(2, 0, start + T))
                return kv
        past = self.layers[layer] if layer < len(self.layers) else None
        start = 0 if past is None else past[0].shape[2]
        end = start + k.shape[2]
        while len(self._buffers) <= layer:
            self._buffers.append(None)
        buf = self._buffers[layer]
        if buf is None or buf[0].shape[2] < end or (past is not None and past[0].data_ptr() != buf[0].data_ptr()):
            size = max(end, self.capacity)
            buf = (k.new_empty(*k.shape[:2], size, k.shape[3]), v.new_empty(*v.shape[:2], size, v.shape[3]))
            if past is not None:
                buf[0][:, :, :start] = past[0]
                buf[1][:, :, :start] = past[1]
            self._buffers[layer] = buf
        buf[0][:, :, start:end] = k
        buf[1][:, :, start:end] = v
        kv = (buf[0][:, :, :end], buf[1][:, :, :end])
        if layer < len(self.layers):
            self.layers[layer] = kv
        else:
            self.layers.append(kv)
        return kv


@dataclass(frozen=True)
class KVSlot:
    """One block's place in a `KVCache`: what an attention layer extends with its new positions."""

    cache: KVCache
    layer: int

    def extend(self, k: Tensor, v: Tensor) -> KV:
        return self.cache.extend(self.layer, k, v)
