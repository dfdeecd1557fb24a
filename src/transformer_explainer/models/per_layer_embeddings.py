"""Gemma 4's per-layer embeddings and its KV sharing, written to be read.

Per-layer embeddings (PLE). Besides the main embedding x0 = E[id] * sqrt(D) that enters block 0, each token looks up a
second, small embedding of L * P values, P for each of the L layers (P = hidden_size_per_layer_input, 256 in the
released models, D 1536 or more). Each layer's P values are the mean of two parts, one that knows only the token and
one that knows the main embedding:

    per_layer            = E_pl[id] * sqrt(P)                                    (T, L, P)  the token's own
    per_layer_projected  = rmsnorm_P((x0 @ W_pl) / sqrt(D))                       (T, L, P)  from the main embedding
    per_layer_inputs     = (per_layer_projected + per_layer) / sqrt(2)            (T, L, P)

(transformers' `get_per_layer_inputs` and `project_per_layer_inputs`). Layer l reads its slice p = per_layer_inputs[:,
l] at its end, after the MLP's write, and adds one more write to the residual stream x:

    gate = x @ W_gate                   (T, P)   the stream, narrowed to P
    act  = gelu_tanh(gate)
    post = act * p                      (T, P)   the token's per-layer values, gated by what the stream holds
    out  = post @ W_proj                (T, D)
    x    = x + rmsnorm_D(out)                    per_layer_out: what the per-layer input adds

(then the block multiplies by its `layer_scalar`, outside this module). The large table E_pl is only looked up, one row
per token and no matrix product, so it can stay out of the accelerator's memory; the small Gemma 4 models' names ("E2B",
"E4B": the effective size) count their parameters without it.

KV sharing. The last `num_kv_shared_layers` layers compute no keys and values of their own (no k_proj, v_proj, k_norm,
v_norm): each attends with those of the last earlier layer of its own kind (sliding or full) that does compute them,
and stores nothing in the cache (`kv_sharing`, `kv_cache_bytes`).

Parameter names are transformers' (`embed_tokens_per_layer`, `per_layer_model_projection`, `per_layer_projection_norm`
on Gemma4TextModel; `per_layer_input_gate`, `per_layer_projection`, `post_per_layer_input_norm` on each
Gemma4TextDecoderLayer), so their weights load key for key. Numerics follow transformers: the embedding's scale cast to
the table's dtype before the product, the norms in float32 with the weight multiplied before the cast back (no 1 +
weight: Gemma 4's norms use the weight as it is).

Dims: B batch, T positions, D d_model, L layers, P the per-layer width. Recorded (`name_options.PER_LAYER_EMBEDDING_
ACTIVATIONS`, `PER_LAYER_GATE_ACTIVATIONS`): embed.per_layer, embed.per_layer_projected, embed.per_layer_inputs; under
a block's scope per_layer.input, per_layer.gate, per_layer.act, per_layer.post, per_layer.out, per_layer_out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .kernels import Linear
from .layers import record
from .recorder import Recorder


@dataclass(frozen=True)
class PerLayerConfig:
    """The shape of Gemma 4's per-layer embeddings (Gemma4TextConfig's fields)."""

    vocab_size: int  # vocab_size_per_layer_input: rows of the per-layer table
    d_model: int  # hidden_size (D)
    n_layers: int  # num_hidden_layers (L)
    d_per_layer: int  # hidden_size_per_layer_input (P)
    eps: float = 1e-6  # rms_norm_eps

    def __post_init__(self) -> None:
        if self.d_per_layer < 1:
            raise ValueError(f"a per-layer width of {self.d_per_layer} gives the layers nothing to read")

    @classmethod
    def from_hf(cls, config: Any) -> PerLayerConfig:
        """A transformers Gemma4TextConfig."""
        act = getattr(config, "hidden_activation", "gelu_pytorch_tanh")
        if act != "gelu_pytorch_tanh":
            raise ValueError(f"the per-layer gate here is GELU (tanh), not {act}")
        return cls(config.vocab_size_per_layer_input, config.hidden_size, config.num_hidden_layers,
                   config.hidden_size_per_layer_input or 0, config.rms_norm_eps)


class RMSNorm(nn.Module):
    """y / sqrt(mean(y^2) + eps) * weight over the last axis, in float32, cast back after the product (Gemma 4's)."""

    def __init__(self, ndim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.eps = eps

    def forward(self, y: Tensor) -> Tensor:
        y32 = y.float()
        normalized = y32 * torch.pow(y32.square().mean(dim=-1, keepdim=True) + self.eps, -0.5)
        return (normalized * self.weight.float()).to(y.dtype)


class PerLayerEmbeddings(nn.Module):
    """Token ids (B, T) and the main embedding x0 (B, T, D) -> each layer's per-layer input (B, T, L, P)."""

    def __init__(self, config: PerLayerConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        self.embed_tokens_per_layer = nn.Embedding(c.vocab_size, c.n_layers * c.d_per_layer)  # L tables side by side
        self.per_layer_model_projection = Linear(c.d_model, c.n_layers * c.d_per_layer, bias=False)
        self.per_layer_projection_norm = RMSNorm(c.d_per_layer, c.eps)  # over each layer's P values on their own

    def forward(self, idx: Tensor, x0: Tensor, rec: Recorder | None = None) -> Tensor:
        """`x0`: the main embedding as block 0 reads it, E[id] * sqrt(D). Records under `embed.`."""
        c = self.config
        B, T = idx.shape
        table = self.embed_tokens_per_layer.weight
        scale = torch.tensor(math.sqrt(c.d_per_layer), device=table.device).to(table.dtype)  # rounded, as transformers
        per_layer = record(rec, "embed.per_layer", (F.embedding(idx, table) * scale).view(B, T, c.n_layers, -1))
        projected = self.per_layer_model_projection(x0) * c.d_model**-0.5  # (B, T, L * P)
        projected = record(rec, "embed.per_layer_projected",
                           self.per_layer_projection_norm(projected.view(B, T, c.n_layers, -1)))
        return record(rec, "embed.per_layer_inputs", (projected + per_layer) * 2**-0.5)  # (B, T, L, P)


class PerLayerGate(nn.Module):
    """A block's last write: x (B, T, D) and its layer's per-layer input (B, T, P) -> x + rmsnorm(...) (B, T, D)."""

    def __init__(self, config: PerLayerConfig) -> None:
        super().__init__()
        c = config
        self.per_layer_input_gate = Linear(c.d_model, c.d_per_layer, bias=False)
        self.per_layer_projection = Linear(c.d_per_layer, c.d_model, bias=False)
        self.post_per_layer_input_norm = RMSNorm(c.d_model, c.eps)

    def forward(self, x: Tensor, per_layer_input: Tensor, rec: Recorder | None = None) -> Tensor:
        """`x`: the residual stream after the MLP's write. Records under the scope the block gives."""
        p = record(rec, "per_layer.input", per_layer_input)  # (B, T, P)
        gate = record(rec, "per_layer.gate", self.per_layer_input_gate(x))  # (B, T, P)
        act = record(rec, "per_layer.act", F.gelu(gate, approximate="tanh"))
        post = record(rec, "per_layer.post", act * p)
        out = record(rec, "per_layer.out", self.per_layer_projection(post))  # (B, T, D)
        return x + record(rec, "per_layer_out", self.post_per_layer_input_norm(out))


# -- KV sharing ---------------------------------------------------------------------------------------------------


def kv_sharing(config: Any) -> tuple[int, ...]:
    """Which layer's keys and values each layer attends with: itself, or, for the last `num_kv_shared_layers`
    layers, the last earlier layer of the same kind (`layer_types`) that computes its own."""
    L, shared = config.num_hidden_layers, getattr(config, "num_kv_shared_layers", 0) or 0
    types = list(getattr(config, "layer_types", None) or ["full_attention"] * L)
    if not 0 <= shared < L:
        raise ValueError(f"{shared} of {L} layers sharing keys and values leaves none to compute them")
    first = L - shared
    source = list(range(first))
    for i in range(first, L):
        earlier = [j for j in range(first) if types[j] == types[i]]
        if not earlier:
            raise ValueError(f"layer {i} ({types[i]}) would reuse keys and values, but no earlier layer of its kind "
                             "computes them")
        source.append(earlier[-1])
    return tuple(source)


def cached_positions(config: Any, layer: int, tokens: int) -> int:
    """How many positions' keys and values a layer that computes its own keeps after `tokens` tokens, as transformers'
    cache does: all of them in a full layer, the last sliding_window - 1 in a sliding one (the next query brings the
    window's last)."""
    types = getattr(config, "layer_types", None)
    if types is not None and types[layer] == "sliding_attention":
        return min(tokens, config.sliding_window - 1)
    return tokens


def kv_shape(config: Any, layer: int) -> tuple[int, int]:
    """(key/value heads, head width) of a layer: Gemma 4's full layers may have their own (`per_layer_config`)."""
    per_layer = getattr(config, "per_layer_config", None)
    if per_layer is not None:
        return per_layer[layer].num_key_value_heads, per_layer[layer].head_dim
    return config.num_key_value_heads, getattr(config, "head_dim", None) or config.hidden_size // \
        config.num_attention_heads


def kv_cache_bytes(config: Any, tokens: int, bytes_per_value: int = 2) -> dict[str, int]:
    """The KV cache after `tokens` tokens, in bytes: `unshared` if every layer kept its own keys and values, `shared`
    with the last layers reusing earlier ones' (they keep nothing), and `saved`, the difference. Keys and values both,
    `bytes_per_value` each (2: bfloat16)."""
    sources = kv_sharing(config)

    def layer_bytes(i: int) -> int:
        heads, width = kv_shape(config, i)
        return 2 * cached_positions(config, i, tokens) * heads * width * bytes_per_value

    unshared = sum(layer_bytes(i) for i in range(len(sources)))
    shared = sum(layer_bytes(i) for i, j in enumerate(sources) if i == j)
    return {"unshared": unshared, "shared": shared, "saved": unshared - shared}
