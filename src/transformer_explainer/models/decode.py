"""One generation step, lean: the new position of a KV-cache decode, through the same modules and the same
operations as `Decoder.forward(ids, cache=cache, logits_for="last")` takes without a recorder, so the same
numbers bit for bit (tests/unit/test_decode_step.py), with less Python around them.

A step of a small model on a CPU is a run of one-row weight products, each streaming its matrix through
the caches; what lies between them (norms, residual adds, the attention over the cache, the cache
writes, and the Python that calls them) then runs with its code and data evicted, and costs several
times what it costs in a hot loop. So the step is planned once per generation (each block's modules,
device, rotation kind and window looked up once, not per step and block), calls the parts directly
instead of through `Block` and `Attention` (no recorder to consult), adds each branch's output into the
residual stream in place.

What a block computes is `Block.forward`'s and `Attention.forward`'s fast path, in the same order; a part this
module does not plan (the MLP, whatever its kind) is called as the module it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .decoder import Decoder, device_of
from .kernels import fused_attention
from .kv_cache import KVCache
from .layers import Attention, Rotation, apply_rope


@dataclass(frozen=True)
class _BlockPlan:
    """What one block's step needs, looked up once."""

    layer: int
    device: torch.device
    layer_type: str  # which rotation its attention uses
    ln1: nn.Module
    attn: Attention
    ln1_post: nn.Module | None
    ln2: nn.Module
    mlp: nn.Module
    ln2_post: nn.Module | None


class DecodeStep:
    """`step(token)`: the logits (V,) after one more token, the cache extended with its position.

    `net` is a `Decoder` in eval mode; `cache` holds the positions before (the prompt's pass fills it).
    Planned for the net's placement when made: make a new one after moving the model."""

    def __init__(self, net: Decoder, cache: KVCache) -> None:
        if net.training:
            raise ValueError("the lean decode step computes inference only: put the model in eval mode")
        self.net, self.cache = net, cache
        c = net.config
        self.blocks = [
            _BlockPlan(i, device_of(b), c.layer_type(i), b.ln1, b.attn, b.ln1_post, b.ln2, b.mlp, b.ln2_post)
            for i, b in enumerate(net.blocks)
        ]
        self.embed_device = device_of(net.embed)
        self.final_device, self.unembed_device = device_of(net.ln_final), device_of(net.unembed)

    def __call__(self, token: int) -> Tensor:
        net, cache = self.net, self.cache
        start = cache.length
        if start + 1 > net.config.block_size:
            raise ValueError(f"{start + 1} positions exceed the model's context of {net.config.block_size}")
        idx = torch.tensor([[token]], device=self.embed_device)
        x = net.embed_tokens(idx, start, None)  # (1, 1, D)
        ropes = {self.embed_device: net.rotations(1, start, 1, x.dtype, self.embed_device, None)}
        for p in self.blocks:
            if x.device != p.device:
                x = x.to(p.device)
            rope = None
            if ropes[self.embed_device]:
                if p.device not in ropes:
                    ropes[p.device] = {kind: (cos.to(p.device), sin.to(p.device))
                                       for kind, (cos, sin) in ropes[self.embed_device].items()}
                rope = ropes[p.device].get(p.layer_type)
            y = self._attention(p, p.ln1(x), rope)
            if p.ln1_post is not None:
                y = p.ln1_post(y)
            x = y.add_(x)  # x + attention's output (a new tensor of this step): the same sum, no new tensor
            y = p.mlp(p.ln2(x))
            if p.ln2_post is not None:
                y = p.ln2_post(y)
            x = y.add_(x)
        x = net.ln_final(x.to(self.final_device))
        return net.unembed(x.to(self.unembed_device))[0, -1]

    def _attention(self, p: _BlockPlan, x: Tensor, rope: Rotation | None) -> Tensor:
        """`Attention.forward` without a recorder, for the one new position."""
        a = p.attn
        q, k, v = a.project(x)
        q, k = a.norm_qk(q, k)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        k, v = self.cache.extend(p.layer, k, v)
        z = fused_attention(q, k, v, window=a.window, scale=a.scale)
        return a.o_proj(z.transpose(1, 2).reshape(1, 1, a.n_head * a.head_dim))
