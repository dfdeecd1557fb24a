"""Which modules of a transformers decoder are what: the embedding, the decoder layers, each layer's mixers
(attention, or a linear-attention / short-convolution / state-space layer) and MLP, the final norm and the
unembedding.

Found from the model's own accessors (`get_input_embeddings`, `get_output_embeddings`, `get_decoder`) and its
layer list, then each layer's direct children by class: nothing per family.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..errors import CheckpointError

_MLP_NAMES = ("mlp", "feed_forward", "ffn", "block_sparse_moe", "moe")
_MLP_CLASS_WORDS = ("MLP", "MoE", "Moe", "FeedForward", "Experts")
# class-name word -> mixer kind (checked in this order: "Attention" last, a linear attention's class says both)
_MIXER_KINDS = (("DeltaNet", "linear_attention"), ("LinearAttention", "linear_attention"),
                ("ShortConv", "short_conv"), ("Conv", "short_conv"), ("Mamba", "state_space"),
                ("SSM", "state_space"), ("Mixer", "state_space"), ("Attention", "attention"))
# what a decoder calls its final norm where it has several norms of its own (Gemma 4: a per-layer input's too)
_FINAL_NORM_NAMES = ("norm", "ln_f", "final_layernorm", "final_layer_norm", "final_norm", "norm_f")


@dataclass(frozen=True)
class Layer:
    """One decoder layer: its module, its mixers (attribute name -> kind) and its MLP's attribute name."""

    index: int
    module: nn.Module
    mixers: dict[str, str]
    mlp: str | None

    @property
    def kinds(self) -> tuple[str, ...]:
        """The layer's mixer kinds, e.g. ("attention",) or ("state_space", "attention") (Falcon-H1)."""
        return tuple(self.mixers.values())


@dataclass(frozen=True)
class Structure:
    """The parts of a decoder the bridge hooks."""

    embedding: nn.Module
    layers: tuple[Layer, ...]
    unembedding: nn.Module
    # the decoder's norm after its last layer, whose output the unembedding reads (None where it has no norm of
    # its own, or several and none by a final norm's name); `residual_logits` checks that it follows the last
    # layer before it trusts it
    final_norm: nn.Module | None = None

    def layer_of(self) -> dict[int, int]:
        """id(module) -> layer index, for every module inside a decoder layer."""
        return {id(m): layer.index for layer in self.layers for m in layer.module.modules()}


def _mixer_kind(name: str, child: nn.Module) -> str | None:
    """A mixer's kind by its class's words (checked before the MLP's: Qwen3MoeAttention says "Moe" too)."""
    cls = type(child).__name__
    if name in _MLP_NAMES or "Norm" in cls or not any(True for _ in child.parameters()):
        return None
    return next((kind for word, kind in _MIXER_KINDS if word in cls), None)


def _is_norm(module: nn.Module) -> bool:
    return isinstance(module, (nn.LayerNorm, nn.RMSNorm)) or "Norm" in type(module).__name__


def _final_norm(decoder: nn.Module) -> nn.Module | None:
    """The decoder's own norm (a direct child): the only one, or the one named as a final norm."""
    norms = [(n, c) for n, c in decoder.named_children() if _is_norm(c)]
    if len(norms) == 1:
        return norms[0][1]
    named = [c for n, c in norms if n in _FINAL_NORM_NAMES]
    return named[0] if len(named) == 1 else None


def _mlp_name(layer: nn.Module) -> str | None:
    for name, child in layer.named_children():
        cls = type(child).__name__
        if name in _MLP_NAMES or (_mixer_kind(name, child) is None and any(w in cls for w in _MLP_CLASS_WORDS)):
            return name
    return None


def find_structure(model: nn.Module) -> Structure:
    """The parts of `model` (a transformers `*ForCausalLM`), or a CheckpointError that says what is missing."""
    name = type(model).__name__
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    unembedding = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if decoder is None or embedding is None or unembedding is None:
        raise CheckpointError(f"{name} is not a causal language model with an embedding, decoder layers and an "
                              "unembedding, so the bridge cannot record it.")
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    lists = [c for c in decoder.modules() if isinstance(c, nn.ModuleList) and len(c) > 0 and (n is None or len(c) == n)]
    if not lists:
        raise CheckpointError(f"{name} has no list of {n} decoder layers that the bridge can find.")
    layers = []
    for i, module in enumerate(lists[0]):
        mixers = {k: kind for k, c in module.named_children() if (kind := _mixer_kind(k, c)) is not None}
        if not mixers:
            raise CheckpointError(f"{name}'s layer {i} ({type(module).__name__}) has no attention or other token "
                                  "mixer that the bridge can find.")
        layers.append(Layer(i, module, mixers, _mlp_name(module)))
    return Structure(embedding, tuple(layers), unembedding, _final_norm(decoder))


def first_tensor(value: object) -> torch.Tensor | None:
    """A module's output or input as one tensor: itself, or the first tensor of a tuple/list."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    return None
