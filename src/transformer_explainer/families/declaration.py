"""What a model family is: one declaration that says how its HF config maps to ours, which parts build
its blocks, which HF parameter name each of our parameters has, and so what it can show (its
capabilities, which the web app branches on). Its trace names are derived from the declaration
(`names.name_table`: from `arch` and the naming facts below it) into `names.FAMILY_NAMES`.

The model (`models/decoder.py`) is one composed decoder for every family: it reads the family's
`Architecture` and builds each block from the parts named there. Adding a family is a file in this
package (its declaration) and its line in `FAMILIES` (`__init__.py`), with parts in `models/layers.py` and
names in `names.py` only where it needs a kind of norm, attention or MLP that no family had before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

Norm = Literal["layer", "rms"]
Positions = Literal["learned", "rope"]
Projection = Literal["fused", "split"]
MlpKind = Literal["gelu", "gated", "moe"]
QkNormScope = Literal["head", "projection"]


@dataclass(frozen=True)
class Architecture:
    """The parts of a block and the steps around them, as the family's maths has them. Each field is a
    capability the views branch on (exported to TypeScript by `server/codegen.py`)."""

    norm: Norm  # "layer": LayerNorm (mean, variance, scale and shift); "rms": RMSNorm (root mean square, scale)
    positions: Positions  # "learned": a position embedding table; "rope": rotary positions inside attention
    qkv: Projection  # "fused": one input projection makes q, k and v (GPT-2's c_attn); "split": three
    # "gelu": up, GELU, down; "gated": down(act(gate) * up); "moe": a router sends each token to top_k of
    # n_experts gated MLPs and adds their outputs, weighted (Mixtral, Qwen3-MoE, OLMoE)
    mlp: MlpKind
    norm_offset: bool = False  # RMSNorm scales by 1 + weight, computed in float32 (Gemma)
    qk_norm: bool = False  # an RMSNorm over the queries and keys, before the rotation (Qwen3, Gemma 3, OLMoE)
    # "head": over each head's query and key (Qwen3, Gemma 3); "projection": over all heads' queries together,
    # and all keys together, as the projections make them (OLMoE)
    qk_norm_scope: QkNormScope = "head"
    sandwich_norm: bool = False  # a norm after attention and after the MLP too, before each adds (Gemma)
    embed_scale: bool = False  # the token embedding is multiplied by sqrt(n_embd) (Gemma)
    softmax_in_float32: bool = False  # attention's softmax in float32 whatever the dtype (the rotary families)
    # the chosen experts' weights stay float32 and multiply their outputs in float32, rounded to the model's
    # dtype after the sum (Mixtral); else they are rounded to the model's dtype first (Qwen3-MoE, OLMoE)
    expert_weights_in_float32: bool = False

    def __post_init__(self) -> None:
        for name, allowed in (("norm", ("layer", "rms")), ("positions", ("learned", "rope")),
                              ("qkv", ("fused", "split")), ("mlp", ("gelu", "gated", "moe")),
                              ("qk_norm_scope", ("head", "projection"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"architecture {name} must be one of {allowed}, got {getattr(self, name)!r}")
        if (self.norm_offset or self.qk_norm) and self.norm != "rms":
            raise ValueError("norm_offset and qk_norm are RMSNorm options")
        if self.expert_weights_in_float32 and self.mlp != "moe":
            raise ValueError("expert_weights_in_float32 is an option of mixtures of experts")


# placeholders in a key pattern: "{i}" a block index, "{e}" an expert's index within its block
_PLACEHOLDER = re.compile(r"\{([ie])\}")


def _key_regex(pattern: str) -> re.Pattern[str]:
    """A prefix pattern with placeholders -> a regex matching it at the start of a name, one group per placeholder."""
    parts = _PLACEHOLDER.split(pattern)  # text, name, text, name, ..., text
    body = "".join(re.escape(p) if n % 2 == 0 else rf"(?P<{p}>\d+)" for n, p in enumerate(parts))
    return re.compile("^" + body)


def _fill(pattern: str, m: re.Match[str]) -> str:
    return _PLACEHOLDER.sub(lambda p: m.group(p.group(1)), pattern)


@dataclass(frozen=True)
class Family:
    """One model family, declared once."""

    name: str  # our name for it: the key of FAMILIES, names.FAMILY_NAMES and the web app's tables
    label: str  # how people write it ("Gemma 3")
    architectures: Mapping[str, str]  # HF model_type -> the CausalLM class its checkpoints name
    arch: Architecture
    # our parameter name prefix <- the checkpoint's, "{i}" standing for a block index and "{e}" for an expert's;
    # the first pair that matches a name maps it; past the prefix the parameter names are the same on both sides
    hf_keys: tuple[tuple[str, str], ...]
    # config.json -> our config's fields (a ValueError names what we do not run); and back
    read_hf: Callable[[Mapping[str, Any]], dict[str, Any]]
    write_hf: Callable[[Any], dict[str, Any]]
    # rules every config of the family obeys, however it was made (a ValueError says which is broken)
    check: Callable[[Any], None] = lambda config: None
    config_keys: Mapping[str, str] = field(default_factory=dict)  # our field -> config.json's key (messages)
    transposed: tuple[str, ...] = ()  # our parameters the checkpoint stores (in, out): GPT-2's Conv1D
    base_prefix: str = ""  # HF's base model prefix: a bare base model's checkpoint lacks it
    ignored: tuple[str, ...] = ()  # suffixes of tensors a checkpoint may carry that are not weights (old buffers)
    special_tokens: bool = True  # BOS / EOS from tokenizer_config.json and config.json (GPT-2 has only its own)
    # What its trace and weight names say beyond `arch` (`names.name_table` derives the family's names from these):
    # the biases its checkpoints may have, "qkv" (on q, k and v), "o" (attention's output) or "mlp", each with the
    # config option that adds it ("Llama with mlp_bias"); biases with the same option are one group
    biases: Mapping[str, str] = field(default_factory=dict)
    gated_activation: Literal["silu", "gelu_tanh"] = "silu"  # the gate's: SiLU (SwiGLU) or tanh-GELU (GeGLU)
    scores_scaled_by: Literal["head_dim", "query_pre_attn_scalar"] = "head_dim"  # scores / sqrt(this)
    local_layers: bool = False  # local and global layers alternate, each kind with its own rotary base (Gemma 3)
    dense_blocks: bool = False  # a mixture of experts some of whose blocks may have a dense MLP (Qwen3-MoE)

    @cached_property
    def _patterns(self) -> list[tuple[re.Pattern[str], str, re.Pattern[str], str]]:
        return [(_key_regex(ours), theirs, _key_regex(theirs), ours) for ours, theirs in self.hf_keys]

    def hf_key(self, ours: str) -> str:
        """The checkpoint's name of our parameter `ours` (`blocks.3.ln1.weight` -> `model.layers.3.input_layernorm
        .weight`)."""
        for pattern, theirs, _, _ in self._patterns:
            m = pattern.match(ours)
            if m:
                return _fill(theirs, m) + ours[m.end():]
        raise KeyError(f"{self.name}: no checkpoint name for {ours!r}")

    def our_key(self, theirs: str) -> str | None:
        """Our name of the checkpoint's tensor `theirs`, or None when it is none of our parameters."""
        if self.base_prefix and not theirs.startswith(self.base_prefix) and not theirs.startswith("lm_head."):
            theirs = self.base_prefix + theirs
        for _, _, pattern, ours in self._patterns:
            m = pattern.match(theirs)
            if m:
                return _fill(ours, m) + theirs[m.end():]
        return None

    def is_transposed(self, ours: str) -> bool:
        return ours.endswith(self.transposed) if self.transposed else False
