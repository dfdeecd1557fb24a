"""The mechanism lens: a transformers layer module that our own code implements, explained in our named stages.

A model that runs through transformers is recorded at its modules' inputs and outputs (`hooks.py`); the inside of
a mixer that is not attention is transformers' code, not named there. Where our code implements that module's
maths (`models/`), a `Mechanism` is built from the layer's own weights (shared, not copied, where the layouts are the
same) and `derive`s the module's internals on access from its recorded input: the forward stays transformers', and
the views read the mechanism in our names (`names.GENERIC_BLOCK_ACTIVATIONS`). Nothing is recorded in the forward.

`MECHANISMS` is the registry: one row per mechanism, (transformers module, class name, builder). A builder takes the
module, the model's text config and the decoder layer that holds the module (DeepSeek-V3's latent attention reads its
input through the layer's norm) and gives a `Mechanism`, whose contract is:
- `kind`: what it is ("gated_deltanet"), the same for every model that has it;
- `input_stage`: the stage suffix the bridge records that it reads ("linear_attn.in": the module's input, (T, D));
  a mechanism that reads several (Gemma 4's per-layer write: `per_layer_lens.py`) has `derive_from(values)`, which a
  trace calls with its values instead;
- `output_stage`: the stage suffix the bridge records of the module's output, which `derive` computes too (the
  check that ours is the module's maths: equal within float rounding);
- `stages`: the stage suffixes it adds to the trace, in computation order: its declaration's
  (`name_options.LENS_NAMES`, from which `names.GENERIC_BLOCK_ACTIVATIONS` is composed);
- `derive(x)`: from the recorded input x (batch dimension dropped), a dict with every stage of `stages` and
  `output_stage`, each batch dimension dropped, computed together in one run of our module (in `torch.no_grad`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from ..models.gated_deltanet import (
    GatedDeltaNet,
    GatedDeltaNetConfig,
    implied_attention,
    qwen3_next_weights,
    state_memory,
)
from ..models.recorder import Recorder
from ..name_options import DELTANET_LENS
from .latent_lens import deepseek_v3_latent
from .moe_lens import LayerLenses, deepseek_v3_moe, gpt_oss_moe
from .per_layer_lens import gemma4_per_layer_gate
from .structure import find_structure


class Mechanism(Protocol):
    """A layer's module explained by our own code (the module docstring's contract)."""

    kind: str
    input_stage: str
    output_stage: str
    stages: tuple[str, ...]

    def derive(self, x: Tensor) -> dict[str, Tensor]: ...


# the stages a Gated DeltaNet layer derives, as its declaration names them (name_options.DELTANET_LENS:
# GATED_DELTANET_ACTIVATIONS without the state per token, which holds H * T * Dk * Dv values, and the attention matrix
# its recurrence implies)
DELTANET_STAGES = DELTANET_LENS.stages


@dataclass(frozen=True)
class GatedDeltaNetLens:
    """A Qwen3.5 / Qwen3-Next Gated DeltaNet module read by `models.gated_deltanet.GatedDeltaNet`: its weights under
    Qwen3.5's names (`weights()`: the module's own tensors, or Qwen3-Next's rearranged by `qwen3_next_weights`)."""

    module: nn.Module
    config: GatedDeltaNetConfig
    weights: Callable[[], dict[str, Tensor]]
    kind: str = "gated_deltanet"
    input_stage: str = "linear_attn.in"
    output_stage: str = "linear_attn.out"
    stages: tuple[str, ...] = DELTANET_STAGES

    def ours(self) -> GatedDeltaNet:
        """Our module on the transformers module's own tensors (assigned, not copied)."""
        with torch.device("meta"):
            net = GatedDeltaNet(self.config)
        net.load_state_dict(self.weights(), strict=True, assign=True)
        return net.eval()

    @torch.no_grad()
    def derive(self, x: Tensor) -> dict[str, Tensor]:
        """q, k (G, T, Dk), v, o, gate (H, T, Dv), beta, decay (H, T), implied_pattern (H, T, T) and out (T, D) of
        the input x (T, D), by our module's recorded forward (the state per token is not kept)."""
        rec = Recorder()
        out = self.ours()(x[None], rec.scope("linear_attn"))
        values = {name: value[0] for name, value in rec.values.items()}
        values["linear_attn.out"] = out[0]
        values["linear_attn.implied_pattern"] = implied_attention(
            values["linear_attn.q"], values["linear_attn.k"], values["linear_attn.beta"], values["linear_attn.decay"])
        return {name: values[name] for name in (*self.stages, self.output_stage)}


def _qwen3_5_deltanet(module: nn.Module, config: Any, _layer: nn.Module | None = None) -> Mechanism:
    c = GatedDeltaNetConfig.from_hf(config)
    return GatedDeltaNetLens(module, c, lambda: dict(module.state_dict()))


def _qwen3_next_deltanet(module: nn.Module, config: Any, _layer: nn.Module | None = None) -> Mechanism:
    c = GatedDeltaNetConfig.from_hf(config)
    return GatedDeltaNetLens(module, c, lambda: qwen3_next_weights(module.state_dict(), c))


# transformers module (its modeling module, its class) -> the builder of our mechanism (the module, the model's text
# config and the decoder layer that holds the module); one row per mechanism
MECHANISMS: tuple[tuple[str, str, Callable[[nn.Module, Any, nn.Module | None], Mechanism]], ...] = (
    ("transformers.models.qwen3_5.modeling_qwen3_5", "Qwen3_5GatedDeltaNet", _qwen3_5_deltanet),
    ("transformers.models.qwen3_next.modeling_qwen3_next", "Qwen3NextGatedDeltaNet", _qwen3_next_deltanet),
    ("transformers.models.deepseek_v3.modeling_deepseek_v3", "DeepseekV3Attention", deepseek_v3_latent),
)
# the same for a mechanism of the decoder layer itself rather than its mixer (the builder gets the layer as its module
# and may answer None: a layer without it); a layer whose mixer has a mechanism keeps that one
LAYER_MECHANISMS: tuple[tuple[str, str, Callable[[nn.Module, Any, nn.Module | None], Mechanism | None]], ...] = (
    ("transformers.models.gemma4.modeling_gemma4", "Gemma4TextDecoderLayer", gemma4_per_layer_gate),
)

# the same for a layer's MLP (`bridge/moe_lens.py`: a mixture of experts); the builder also gets the layer's index. A
# layer may have one beside its mixer's (DeepSeek-V3: latent attention and experts): `find_mlp_mechanisms`
MLP_MECHANISMS: tuple[tuple[str, str, Callable[[nn.Module, Any, nn.Module | None, int], Mechanism]], ...] = (
    ("transformers.models.deepseek_v3.modeling_deepseek_v3", "DeepseekV3MoE", deepseek_v3_moe),
    ("transformers.models.gpt_oss.modeling_gpt_oss", "GptOssMLP", gpt_oss_moe),
)


def _class(module_path: str, name: str) -> type | None:
    """transformers' class, or None where this transformers has none of that name."""
    try:
        return getattr(importlib.import_module(module_path), name, None)
    except ImportError:
        return None


def mechanism_of(module: nn.Module, config: Any, layer: nn.Module | None = None,
                 rows: Sequence[tuple[str, str, Callable[..., Mechanism | None]]] = MECHANISMS) -> Mechanism | None:
    """Our mechanism for a transformers module of decoder layer `layer` (None where our code implements none of its
    class), by the registry `rows`."""
    for module_path, name, build in rows:
        cls = _class(module_path, name)
        if cls is not None and isinstance(module, cls):
            return build(module, config, layer)
    return None


def find_mechanisms(model: nn.Module) -> dict[int, Mechanism]:
    """Layer index -> the mechanism of its mixer, for every layer of `model` (a transformers `*ForCausalLM`) with a
    mixer our code implements; else of the layer itself (`LAYER_MECHANISMS`: Gemma 4's per-layer input)."""
    cfg = model.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    out: dict[int, Mechanism] = {}
    for layer in find_structure(model).layers:
        for name in layer.mixers:
            m = mechanism_of(getattr(layer.module, name), text, layer.module)
            if m is not None:
                out[layer.index] = m
        if layer.index not in out and (m := mechanism_of(layer.module, text, layer.module, LAYER_MECHANISMS)):
            out[layer.index] = m
    return out


def find_mlp_mechanisms(model: nn.Module) -> dict[int, Mechanism]:
    """Layer index -> the mechanism of its MLP (`MLP_MECHANISMS`), for every layer of `model` whose MLP our code
    implements (not DeepSeek-V3's first, dense, layers)."""
    cfg = model.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    out: dict[int, Mechanism] = {}
    for layer in find_structure(model).layers:
        if layer.mlp is None:
            continue
        module = getattr(layer.module, layer.mlp)
        for module_path, name, build in MLP_MECHANISMS:
            cls = _class(module_path, name)
            if cls is not None and isinstance(module, cls):
                out[layer.index] = build(module, text, layer.module, layer.index)
                break
    return out


def with_mlp_mechanisms(model: nn.Module, mechanisms: Mapping[int, Mechanism]) -> dict[int, Mechanism]:
    """`mechanisms` with each layer's MLP mechanism added: alone, or after the layer's own in a `LayerLenses`."""
    out = dict(mechanisms)
    for i, lens in find_mlp_mechanisms(model).items():
        out[i] = lens if i not in out else LayerLenses(i, (out[i], lens))  # type: ignore[assignment]
    return out


# -- memory: what a hybrid model keeps between tokens ----------------------------------------------------------------

MEMORY_TOKENS = (1024, 32768, 1048576)  # 1k, 32k and 1M tokens (powers of two)


@dataclass(frozen=True)
class HybridMemory:
    """What a model with Gated DeltaNet layers keeps between tokens, for one sequence: every DeltaNet layer's state
    and convolution window (a fixed size, whatever the text's length) against the KV cache of its full-attention
    layers after each of `tokens`. The states in float32 (transformers' recurrence keeps them so, whatever the model's
    dtype), the convolution windows and the KV cache in the model's dtype."""

    linear_layers: tuple[int, ...]  # the Gated DeltaNet layers
    full_attention_layers: tuple[int, ...]  # the attention layers without a local window
    state_bytes: int  # every DeltaNet layer's states: H * Dk * Dv float32 values each
    conv_bytes: int  # every DeltaNet layer's convolution window: (kernel - 1) positions of its q, k, v channels
    tokens: tuple[int, ...]
    kv_cache_bytes: tuple[int, ...]  # the full-attention layers' keys and values after each of `tokens`
    dtype: str  # the model's (the convolution windows' and the KV cache's)


def hybrid_memory(mechanisms: Mapping[int, Mechanism], full_attention_layers: Sequence[int], n_kv_heads: int,
                  head_dim: int, dtype: torch.dtype, tokens: Sequence[int] = MEMORY_TOKENS) -> HybridMemory | None:
    """The memory table of a model whose Gated DeltaNet layers are `mechanisms`' of that kind (None where it has
    none), by `models.gated_deltanet.state_memory` per layer: `n_kv_heads` key/value heads of `head_dim` in each of
    the `full_attention_layers`."""
    deltanet = {i: m for i, m in mechanisms.items() if isinstance(m, GatedDeltaNetLens)}
    if not deltanet:
        return None
    size = dtype.itemsize
    per_layer = [state_memory(m.config, n_kv_heads, head_dim, tokens, bytes_per_value=size) for m in deltanet.values()]
    kv = per_layer[0].kv_cache_bytes  # one full-attention layer's: the same for every DeltaNet layer's call
    return HybridMemory(tuple(sorted(deltanet)), tuple(full_attention_layers),
                        sum(m.state_bytes for m in per_layer), sum(m.conv_bytes for m in per_layer), tuple(tokens),
                        tuple(len(full_attention_layers) * kv[n] for n in tokens), str(dtype).removeprefix("torch."))
