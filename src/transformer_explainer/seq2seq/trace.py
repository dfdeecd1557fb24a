"""The typed record of one pass through the encoder-decoder: every intermediate value by name."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..trace_base import TraceBase
from .config import Seq2SeqConfig
from .model import subsequent_mask
from .names import DERIVED, activation_names, describe, parse_name


@dataclass
class Seq2SeqTrace(TraceBase):
    """Intermediates of one source and one decoder input, without the batch dimension.

    `trace["decoder.blocks.0.cross_attn.pattern"]` is (heads, target positions, source positions).
    The decoder input starts with the start token: position t holds the token the model was given
    at step t, and `logits[t]` scores the token that comes next. A single unpadded example, so the
    only mask is the decoder's causal one. Cheap stages (scaled and masked scores, concatenated
    heads, embedding sums, `encoder.out`, `decoder.out`, `log_probs`) are derived on access.
    """

    config: Seq2SeqConfig
    src_ids: list[int]
    src_tokens: list[str]
    tgt_ids: list[int]  # the decoder input, start token first
    tgt_tokens: list[str]
    values: dict[str, Tensor] = field(repr=False)

    describe_name = staticmethod(describe)

    def __post_init__(self) -> None:
        if len(self.src_ids) != len(self.src_tokens) or len(self.tgt_ids) != len(self.tgt_tokens):
            raise ValueError("ids and tokens differ in length")

    # -- access --------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Tensor:
        if name in self.values:
            return self.values[name]
        p = parse_name(name)  # KeyError for names outside the scheme
        if p.layer is not None:
            assert p.stack is not None
            n = self.config.n_encoder_layers if p.stack == "encoder" else self.config.n_decoder_layers
            if not 0 <= p.layer < n:
                raise KeyError(f"{name!r}: the {p.stack} has {n} blocks")
        if p.suffix not in DERIVED:
            raise KeyError(f"{name!r} is not an activation recorded in this trace")
        c = self.config
        if name in ("encoder.embed_sum", "decoder.embed_sum"):
            return self.values[f"{p.stack}.blocks.0.resid_pre"]
        if name == "encoder.out":
            return self.values[f"encoder.blocks.{c.n_encoder_layers - 1}.resid_post"]
        if name == "decoder.out":
            return self.values[f"decoder.blocks.{c.n_decoder_layers - 1}.resid_post"]
        if name == "log_probs":
            return torch.log_softmax(self.values["logits"], dim=-1)
        attn, stage = p.suffix.split(".")
        src = self.values[f"{p.stack}.blocks.{p.layer}.{DERIVED[p.suffix]}"]
        if stage == "concat":  # (H, T, Dk) -> (T, H*Dk)
            return src.transpose(0, 1).reshape(src.shape[1], -1)
        scaled = src / math.sqrt(c.d_k)
        if stage == "scaled_scores" or attn != "self_attn":
            return scaled  # encoder and cross-attention hide nothing in an unpadded example
        t = scaled.shape[-1]
        return scaled.masked_fill(~subsequent_mask(t, scaled.device)[0], float("-inf"))

    def names(self) -> list[str]:
        """Every name this trace answers, in computation order."""
        return activation_names(self.config.n_encoder_layers, self.config.n_decoder_layers)

    def title(self) -> str:
        return f"Trace of {len(self.src_ids)} source and {len(self.tgt_ids)} target tokens"

    # -- convenience -----------------------------------------------------------------------------

    def pattern(self, kind: str, layer: int) -> Tensor:
        """Attention pattern (H, queries, keys) of `kind` = "encoder", "self" or "cross"."""
        stage = {"encoder": "encoder.blocks.{}.attn.pattern", "self": "decoder.blocks.{}.self_attn.pattern",
                 "cross": "decoder.blocks.{}.cross_attn.pattern"}[kind]
        return self[stage.format(layer)]

    def cross_attention(self) -> Tensor:
        """(L, H, T, S): every decoder layer's cross-attention."""
        return torch.stack([self.pattern("cross", i) for i in range(self.config.n_decoder_layers)])

    def self_attention(self) -> Tensor:
        """(L, H, T, T): every decoder layer's masked self-attention."""
        return torch.stack([self.pattern("self", i) for i in range(self.config.n_decoder_layers)])

    @property
    def log_probs(self) -> Tensor:
        return self["log_probs"]
