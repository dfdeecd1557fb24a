"""The mixtures of experts of DeepSeek-V3 and gpt-oss read by our own modules: mechanisms of the lens
(`bridge/mechanisms.py`).

transformers computes the MLP (`DeepseekV3MoE`, `GptOssMLP`); the bridge records its output (`mlp_out`), not the
router's choice. Our `models.deepseek_moe.DeepSeekMoE` (sigmoid scores, group-limited routing, the choice bias, a
shared expert beside the routed ones) and `models.sink_attention.ClampedMoE` (a softmax over the top-k logits alone,
clamped SwiGLU experts), built on the module's own tensors (assigned, not copied: the parameter names are
transformers'), derive the inside on access. Their input is the MLP's: the decoder layer's own
`post_attention_layernorm` applied to the layer's `resid_mid` (recorded, or resid_pre + attn_out where the trace
derives it), as the layer does before calling its MLP. `derive_from` returns the module's output too (`mlp_out`):
the check that ours is the module's maths. DeepSeek-V3's first `first_k_dense_replace` layers have a dense MLP
(`DeepseekV3MLP`): no lens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..models.deepseek_moe import DeepSeekMoE, DeepSeekMoEConfig
from ..models.recorder import Recorder
from ..models.sink_attention import ClampedMoE, ClampedMoEConfig
from ..name_options import CLAMPED_MOE_LENS, DEEPSEEK_MOE_LENS
from ..names import block_name

# the stages each mixture derives, in computation order: their declarations' (name_options.DEEPSEEK_MOE_LENS and
# CLAMPED_MOE_LENS: gpt-oss's clamped SwiGLU per (token, choice), (T, K, M) each)
DEEPSEEK_MOE_STAGES = DEEPSEEK_MOE_LENS.stages
CLAMPED_MOE_STAGES = CLAMPED_MOE_LENS.stages


@dataclass(frozen=True)
class MoELens:
    """An MLP module of decoder layer `index` (`module`) read by our module of the same maths (`build`'s); `norm` is
    the layer's post_attention_layernorm, which makes the MLP's input from resid_mid."""

    module: nn.Module
    norm: nn.Module
    index: int
    kind: str  # "deepseek_moe" or "clamped_moe"
    stages: tuple[str, ...]
    config: DeepSeekMoEConfig | ClampedMoEConfig
    input_stage: str = "resid_mid"  # (`derive_from`: resid_pre + attn_out where the trace derives it)
    output_stage: str = "mlp_out"

    def ours(self) -> nn.Module:
        """Our module on the transformers module's own tensors (assigned, not copied)."""
        with torch.device("meta"):
            moe = DeepSeekMoE(self.config) if isinstance(self.config, DeepSeekMoEConfig) else ClampedMoE(self.config)
        moe.load_state_dict(dict(self.module.state_dict()), strict=True, assign=True)
        return moe.eval()

    @torch.no_grad()
    def derive(self, resid_mid: Tensor) -> dict[str, Tensor]:
        """Every stage of `stages` and mlp_out (batch dropped) from the layer's resid_mid (T, D): the layer's norm,
        then our mixture."""
        x = self.norm(resid_mid[None])  # (1, T, D): the MLP's input
        rec = Recorder()
        out = self.ours()(x, rec.scope("mlp"))
        values = {name: value[0] for name, value in rec.values.items()}
        values["mlp_out"] = out[0]
        return {name: values[name] for name in (*self.stages, self.output_stage)}

    def derive_from(self, values: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """`derive` on the trace's resid_mid of this layer."""
        return self.derive(values[block_name(self.index, "resid_mid")])


def _layer_norm(layer: nn.Module | None) -> nn.Module:
    norm = getattr(layer, "post_attention_layernorm", None)
    if not isinstance(norm, nn.Module):
        raise ValueError("a mixture-of-experts lens reads its input through its decoder layer's "
                         "post_attention_layernorm")
    return norm


def deepseek_v3_moe(module: nn.Module, config: Any, layer: nn.Module | None, index: int) -> MoELens:
    """The lens of a DeepseekV3MoE `module` in decoder layer `layer` (number `index`)."""
    return MoELens(module, _layer_norm(layer), index, "deepseek_moe", DEEPSEEK_MOE_STAGES,
                   DeepSeekMoEConfig.from_hf(config))


def gpt_oss_moe(module: nn.Module, config: Any, layer: nn.Module | None, index: int) -> MoELens:
    """The lens of a GptOssMLP `module` in decoder layer `layer` (number `index`)."""
    return MoELens(module, _layer_norm(layer), index, "clamped_moe", CLAMPED_MOE_STAGES,
                   ClampedMoEConfig.from_hf(config))


@dataclass(frozen=True)
class LayerLenses:
    """Several mechanisms of one decoder layer (DeepSeek-V3's: latent attention and a mixture of experts), answered
    as one: the first part's kind (the mixer's, which names the layer's view), every part's stages."""

    index: int
    parts: tuple[Any, ...]

    @property
    def kind(self) -> str:
        return str(self.parts[0].kind)

    @property
    def input_stage(self) -> str:
        return str(self.parts[0].input_stage)

    @property
    def output_stage(self) -> str:
        return str(self.parts[0].output_stage)

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(s for p in self.parts for s in p.stages)

    def derive_from(self, values: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Every part's stages, each by its own `derive_from`, or `derive` on its recorded input."""
        out: dict[str, Tensor] = {}
        for p in self.parts:
            several = getattr(p, "derive_from", None)
            out.update(several(values) if several is not None
                       else p.derive(values[block_name(self.index, p.input_stage)]))
        return out


def first_part(lens: Any) -> Any:
    """The mixer's (or layer's) mechanism of a layer's lens: itself, or the first of a `LayerLenses`."""
    return lens.parts[0] if isinstance(lens, LayerLenses) else lens
