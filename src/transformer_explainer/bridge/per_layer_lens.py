"""Gemma 4's per-layer embeddings read by our own modules: a mechanism of the lens (`bridge/mechanisms.py`).

transformers computes the model (`Gemma4TextModel`, `Gemma4TextDecoderLayer`); the bridge records each layer's input,
its attention's and MLP's outputs, resid_mid and its output, not the per-layer input a layer reads nor what it writes
from it. Our `models.per_layer_embeddings` modules, built on the model's own tensors (assigned, not copied: the
parameter names are transformers'), derive them on access, nothing more recorded in the forward:

- the model's three per-layer stages (`PerLayerInputsLens`, global: embed.per_layer, embed.per_layer_projected,
  embed.per_layer_inputs, (T, L, P)) from the token ids and the recorded main embedding `embed.token` (the scaled
  embedding block 0 reads, which transformers projects);
- each layer's gated write (`PerLayerGateLens`: per_layer.resid, per_layer.input, per_layer.gate, per_layer.act,
  per_layer.post, per_layer.out, per_layer_out). The gate reads the residual stream after the MLP's write, which the
  bridge does not record: the decoder layer computes it as resid_mid + post_feedforward_layernorm(mlp), and the lens
  does the same with the layer's own norm on the recorded resid_mid and mlp_out (the same numbers: the same module on
  the same tensor), `per_layer.resid`. The layer's output is then (per_layer.resid + per_layer_out) * layer_scalar.

A layer with a mixture-of-experts block beside its MLP (`enable_moe_block`) adds the experts' normed output to the MLP's
before that norm, a value the bridge does not record: such a layer gets no lens (Gemma 4's released models with
per-layer inputs have none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ..models.per_layer_embeddings import PerLayerConfig, PerLayerEmbeddings, PerLayerGate, kv_cache_bytes, kv_sharing
from ..models.recorder import Recorder
from ..name_options import PER_LAYER_GATE_LENS, PER_LAYER_INPUTS_LENS
from ..names import block_name

# the model's per-layer stages, in computation order, as declared (name_options.PER_LAYER_INPUTS_LENS:
# PER_LAYER_EMBEDDING_ACTIVATIONS's)
PER_LAYER_GLOBAL_STAGES = PER_LAYER_INPUTS_LENS.stages
# a layer's (name_options.PER_LAYER_GATE_LENS): the stream its gate reads, then PER_LAYER_GATE_ACTIVATIONS's
PER_LAYER_STAGES = PER_LAYER_GATE_LENS.stages


def _assigned(module: nn.Module, owner: nn.Module, names: tuple[str, ...]) -> nn.Module:
    """`module` (built on the meta device) holding `owner`'s own tensors of those parameter names."""
    state = {f"{n}.weight": getattr(owner, n).weight for n in names}
    module.load_state_dict(state, strict=True, assign=True)
    return module.eval()


@dataclass(frozen=True)
class PerLayerInputsLens:
    """A Gemma 4 text model's per-layer embeddings (`decoder`: its Gemma4TextModel) read by `PerLayerEmbeddings`."""

    decoder: nn.Module
    config: PerLayerConfig
    stages: tuple[str, ...] = PER_LAYER_GLOBAL_STAGES

    def ours(self) -> PerLayerEmbeddings:
        with torch.device("meta"):
            net = PerLayerEmbeddings(self.config)
        return _assigned(net, self.decoder, ("embed_tokens_per_layer", "per_layer_model_projection",
                                             "per_layer_projection_norm"))  # type: ignore[return-value]

    @torch.no_grad()
    def derive_from(self, values: Any) -> dict[str, Tensor]:
        """The three stages (T, L, P) from `values` (a trace's: its `token_ids` and its recorded embed.token)."""
        x0 = values["embed.token"]  # (T, D): E[id] * sqrt(D), what transformers projects
        ids = torch.as_tensor(values.token_ids, device=x0.device)[None]
        rec = Recorder()
        self.ours()(ids, x0[None], rec)
        return {name: rec.values[name][0] for name in self.stages}


@dataclass(frozen=True)
class PerLayerGateLens:
    """Layer `index`'s per-layer write (its Gemma4TextDecoderLayer `layer`) read by `PerLayerGate`."""

    layer: nn.Module
    index: int
    config: PerLayerConfig
    kind: str = "per_layer_input"
    input_stage: str = "resid_mid"  # with mlp_out and embed.per_layer_inputs (`derive_from`)
    output_stage: str = "resid_post"
    stages: tuple[str, ...] = field(default=PER_LAYER_STAGES)

    def ours(self) -> PerLayerGate:
        with torch.device("meta"):
            gate = PerLayerGate(self.config)
        return _assigned(gate, self.layer, ("per_layer_input_gate", "per_layer_projection",
                                            "post_per_layer_input_norm"))  # type: ignore[return-value]

    @torch.no_grad()
    def write(self, resid: Tensor, per_layer_input: Tensor) -> dict[str, Tensor]:
        """Every stage and resid_post, from the stream the gate reads resid (T, D) and the layer's slice (T, P)."""
        rec = Recorder()
        x = self.ours()(resid[None], per_layer_input[None], rec)[0]
        values = {name: value[0] for name, value in rec.values.items()}
        values["per_layer.resid"] = resid
        values["resid_post"] = x * self.layer.layer_scalar.to(x.dtype)
        return {name: values[name] for name in (*self.stages, self.output_stage)}

    @torch.no_grad()
    def derive_from(self, values: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """From a trace's values: the layer's own post_feedforward_layernorm on its recorded mlp_out, added to its
        resid_mid (the stream the gate reads, as the layer computes it), and its slice of embed.per_layer_inputs."""
        i = self.index
        mlp = values[block_name(i, "mlp_out")]
        resid = values[block_name(i, "resid_mid")] + self.layer.post_feedforward_layernorm(mlp[None])[0]
        return self.write(resid, values["embed.per_layer_inputs"][:, i])


def _config(text: Any) -> PerLayerConfig | None:
    if not (getattr(text, "hidden_size_per_layer_input", 0) or 0):
        return None
    return PerLayerConfig.from_hf(text)


def gemma4_per_layer_gate(module: nn.Module, config: Any, _layer: nn.Module | None = None) -> PerLayerGateLens | None:
    """The lens of a Gemma4TextDecoderLayer `module` (None where it has no per-layer input, or experts beside its MLP,
    whose output the bridge does not record)."""
    c = _config(config)
    if c is None or getattr(module, "enable_moe_block", False) or not hasattr(module, "per_layer_input_gate"):
        return None
    return PerLayerGateLens(module, int(module.layer_idx), c)


def find_per_layer_inputs(model: nn.Module) -> PerLayerInputsLens | None:
    """The per-layer embeddings' lens of `model` (a transformers `*ForCausalLM`), or None where its decoder has none."""
    cfg = model.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    c = _config(text)
    if c is None or decoder is None or not all(hasattr(decoder, n) for n in (
            "embed_tokens_per_layer", "per_layer_model_projection", "per_layer_projection_norm")):
        return None
    return PerLayerInputsLens(decoder, c)


# -- the capabilities' table --------------------------------------------------------------------------------------

MEMORY_TOKENS = (1024, 32768, 1048576)


@dataclass(frozen=True)
class PerLayerMemory:
    """A model with per-layer inputs and KV sharing (Gemma 4): each layer's per-layer input, which layer's keys and
    values each attends with, and the KV cache those layers that share save, for one sequence in the model's dtype."""

    d_per_layer: int  # P: the values each layer reads per token
    per_layer_layers: tuple[int, ...]  # the layers that read a per-layer input (and that the lens explains)
    per_layer_table_params: int  # the per-layer table's parameters: vocab_size_per_layer_input * L * P
    kv_sources: tuple[int, ...]  # per layer: the layer whose keys and values it attends with (itself, or an earlier)
    tokens: tuple[int, ...]
    kv_unshared_bytes: tuple[int, ...]  # the KV cache were every layer to keep its own, after each of `tokens`
    kv_shared_bytes: tuple[int, ...]  # as the model keeps it: the sharing layers keep nothing
    kv_saved_bytes: tuple[int, ...]
    dtype: str


def per_layer_memory(model: nn.Module, lenses: Mapping[int, Any],
                     tokens: tuple[int, ...] = MEMORY_TOKENS) -> PerLayerMemory | None:
    """The table of a model whose per-layer embeddings have a lens (None where none), by
    `models.per_layer_embeddings.kv_sharing` and `kv_cache_bytes` on its text config."""
    lens = find_per_layer_inputs(model)
    if lens is None:
        return None
    cfg = model.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    weight = lens.decoder.embed_tokens_per_layer.weight
    size = weight.element_size()
    kv = [kv_cache_bytes(text, n, bytes_per_value=size) for n in tokens]
    layers = tuple(sorted(i for i, m in lenses.items() if isinstance(m, PerLayerGateLens)))
    return PerLayerMemory(lens.config.d_per_layer, layers, int(weight.numel()), kv_sharing(text), tuple(tokens),
                          tuple(k["unshared"] for k in kv), tuple(k["shared"] for k in kv),
                          tuple(k["saved"] for k in kv), str(weight.dtype).removeprefix("torch."))
