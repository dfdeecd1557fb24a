"""Shape of the 2017 encoder-decoder Transformer, with the paper's `base` model and small presets."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ..config import MAX_DIMENSION


@dataclass(frozen=True)
class Seq2SeqConfig:
    """Field names follow "Attention Is All You Need" (d_model, h, d_ff, N)."""

    src_vocab_size: int = 64  # source tokens, specials included
    tgt_vocab_size: int = 64  # target tokens, specials included
    n_encoder_layers: int = 6  # N for the encoder stack
    n_decoder_layers: int = 6  # N for the decoder stack
    d_model: int = 512  # width of the residual stream and of every embedding
    n_head: int = 8  # h: attention heads per attention layer; d_k = d_v = d_model / h
    d_ff: int = 2048  # inner width of the position-wise feed-forward network
    dropout: float = 0.1  # P_drop, on sublayer outputs and on embedding + positional encoding sums
    layer_norm_eps: float = 1e-5  # added to the variance inside every LayerNorm (torch's default)
    max_len: int = 256  # positions whose sinusoidal encoding is precomputed (longer inputs still work)
    pad_id: int = 0  # padding token in both vocabularies: never attended to, never a loss target

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "n_encoder_layers", "n_decoder_layers", "d_model",
                     "n_head", "d_ff", "max_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIMENSION:
                raise ValueError(f"{name} must be a whole number from 1 to 2**40, got {value!r}")
        eps = self.layer_norm_eps
        if isinstance(eps, bool) or not isinstance(eps, int | float) or not math.isfinite(eps) or eps <= 0:
            raise ValueError(f"layer_norm_eps must be a finite number above 0, got {eps!r}")
        if isinstance(self.pad_id, bool) or not isinstance(self.pad_id, int) or not (
                0 <= self.pad_id < min(self.src_vocab_size, self.tgt_vocab_size)):
            raise ValueError(f"pad_id must be an id in both vocabularies, got {self.pad_id!r}")
        if self.d_model % self.n_head != 0:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if self.d_model % 2 != 0:
            raise ValueError(f"d_model ({self.d_model}) must be even for the sinusoidal encoding")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, int | float) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be a number in [0, 1), got {self.dropout!r}")

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_head

    def with_vocab(self, src_vocab_size: int, tgt_vocab_size: int) -> Seq2SeqConfig:
        return replace(self, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Seq2SeqConfig:
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown config fields {sorted(unknown)}")
        return cls(**d)


# The paper's base model (Table 3) and smaller shapes for the toy tasks; vocabulary sizes come from
# the task at training time.
PRESETS: dict[str, Seq2SeqConfig] = {
    "base": Seq2SeqConfig(n_encoder_layers=6, n_decoder_layers=6, d_model=512, n_head=8, d_ff=2048, dropout=0.1),
    "small": Seq2SeqConfig(n_encoder_layers=2, n_decoder_layers=2, d_model=128, n_head=4, d_ff=256, dropout=0.0),
    "tiny": Seq2SeqConfig(n_encoder_layers=2, n_decoder_layers=2, d_model=64, n_head=4, d_ff=128, dropout=0.0),
}

# the widest beam search allowed (here, apart from the decoding code, so the CLI can say it without torch)
MAX_BEAM = 16
