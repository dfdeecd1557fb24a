"""What a model family is: one declaration that says how its HF config maps to ours, which parts build
its blocks, which HF parameter name each of our parameters has, and so what it can show (its
capabilities, which the web app branches on). Its trace names are its entry in `names.FAMILY_NAMES`.

The model (`models/decoder.py`) is one composed decoder for every family: it reads the family's
`Architecture` and builds each block from the parts named there. Adding a dense family is a file in
this package (its declaration), its entry in `names.py`, and parts in `models/layers.py` only where it
needs a kind of norm, attention or MLP that no family had before.
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
MlpKind = Literal["gelu", "gated"]


@dataclass(frozen=True)
class Architecture:
    """The parts of a block and the steps around them, as the family's maths has them. Each field is a
    capability the views branch on (exported to TypeScript by `server/codegen.py`)."""

    norm: Norm  # "layer": LayerNorm (mean, variance, scale and shift); "rms": RMSNorm (root mean square, scale)
    positions: Positions  # "learned": a position embedding table; "rope": rotary positions inside attention
    qkv: Projection  # "fused": one input projection makes q, k and v (GPT-2's c_attn); "split": three
    mlp: MlpKind  # "gelu": up, GELU, down; "gated": down(act(gate) * up)
    norm_offset: bool = False  # RMSNorm scales by 1 + weight, computed in float32 (Gemma)
    qk_norm: bool = False  # an RMSNorm over each head's query and key, before the rotation (Qwen3, Gemma 3)
    sandwich_norm: bool = False  # a norm after attention and after the MLP too, before each adds (Gemma)
    embed_scale: bool = False  # the token embedding is multiplied by sqrt(n_embd) (Gemma)
    softmax_in_float32: bool = False  # attention's softmax in float32 whatever the dtype (the rotary families)

    def __post_init__(self) -> None:
        for name, allowed in (("norm", ("layer", "rms")), ("positions", ("learned", "rope")),
                              ("qkv", ("fused", "split")), ("mlp", ("gelu", "gated"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"architecture {name} must be one of {allowed}, got {getattr(self, name)!r}")
        if (self.norm_offset or self.qk_norm) and self.norm != "rms":
            raise ValueError("norm_offset and qk_norm are RMSNorm options")


_BLOCK = "{i}"  # a block index in a key pattern


@dataclass(frozen=True)
class Family:
    """One model family, declared once."""

    name: str  # our name for it: the key of names.FAMILY_NAMES and of the web app's tables
    label: str  # how people write it ("Gemma 3")
    architectures: Mapping[str, str]  # HF model_type -> the CausalLM class its checkpoints name
    arch: Architecture
    # our parameter name prefix <- the checkpoint's, "{i}" standing for a block index; within a part
    # (attention, MLP, norm) the parameter names are the same on both sides
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

    @cached_property
    def _patterns(self) -> list[tuple[re.Pattern[str], str, re.Pattern[str], str]]:
        out = []
        for ours, theirs in self.hf_keys:
            out.append((re.compile("^" + re.escape(ours).replace(re.escape(_BLOCK), r"(\d+)")), theirs,
                        re.compile("^" + re.escape(theirs).replace(re.escape(_BLOCK), r"(\d+)")), ours))
        return out

    def hf_key(self, ours: str) -> str:
        """The checkpoint's name of our parameter `ours` (`blocks.3.ln1.weight` -> `model.layers.3.input_layernorm
        .weight`)."""
        for pattern, theirs, _, _ in self._patterns:
            m = pattern.match(ours)
            if m:
                return theirs.replace(_BLOCK, m.group(1) if m.groups() else "") + ours[m.end():]
        raise KeyError(f"{self.name}: no checkpoint name for {ours!r}")

    def our_key(self, theirs: str) -> str | None:
        """Our name of the checkpoint's tensor `theirs`, or None when it is none of our parameters."""
        if self.base_prefix and not theirs.startswith(self.base_prefix) and not theirs.startswith("lm_head."):
            theirs = self.base_prefix + theirs
        for _, _, pattern, ours in self._patterns:
            m = pattern.match(theirs)
            if m:
                return ours.replace(_BLOCK, m.group(1) if m.groups() else "") + theirs[m.end():]
        return None

    def is_transposed(self, ours: str) -> bool:
        return ours.endswith(self.transposed) if self.transposed else False
