"""One trained encoder-decoder with its vocabularies: validate input, trace, translate."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..errors import InputError
from ..models.recorder import Recorder
from .config import Seq2SeqConfig
from .model import EncoderDecoder, subsequent_mask
from .tasks import TASKS, Seq2SeqTask, make_task
from .trace import Seq2SeqTrace
from .vocab import BOS, PAD, Vocab

# Decoding stops at the end token or after this many tokens beyond the longest trained target.
DECODE_SLACK = 8


@dataclass
class Seq2SeqModel:
    net: EncoderDecoder
    src_vocab: Vocab
    tgt_vocab: Vocab
    task_name: str
    max_src_len: int  # longest source seen in training, in tokens
    max_tgt_len: int  # longest target seen in training, in tokens
    task_options: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)  # how it was trained and how well it does
    folder: Path | None = None

    def __post_init__(self) -> None:
        c = self.net.config
        if (len(self.src_vocab), len(self.tgt_vocab)) != (c.src_vocab_size, c.tgt_vocab_size):
            raise ValueError("vocabulary sizes differ from the model's")
        self.net.eval()

    @classmethod
    def for_task(cls, net: EncoderDecoder, task: Seq2SeqTask) -> Seq2SeqModel:
        m = cls(net, task.src_vocab, task.tgt_vocab, task.name, task.max_src_len, task.max_tgt_len,
                task.options())
        m.__dict__["task"] = task  # already built: no need to rebuild it from options
        return m

    @property
    def config(self) -> Seq2SeqConfig:
        return self.net.config

    @property
    def name(self) -> str:
        return self.task_name

    @cached_property
    def task(self) -> Seq2SeqTask | None:
        """The task, rebuilt from its options (None for a TSV task whose file is gone)."""
        if self.task_name not in TASKS:
            return None
        try:
            return make_task(self.task_name, **self.task_options)
        except (InputError, OSError):
            return None

    @property
    def max_decode_len(self) -> int:
        return self.max_tgt_len + DECODE_SLACK

    def __repr__(self) -> str:
        c = self.config
        return (f"Seq2SeqModel({self.task_name!r}, {c.n_encoder_layers}+{c.n_decoder_layers} layers, "
                f"d_model {c.d_model}, {c.n_head} heads, {self.net.num_params() / 1e6:.2f}M parameters)")

    # -- input -------------------------------------------------------------------------------------

    def encode_source(self, text: str) -> list[int]:
        """Source ids of `text`; InputError if it is empty, out of vocabulary or too long."""
        if not isinstance(text, str):
            raise InputError(f"text must be a string, got {type(text).__name__}")
        if not text.strip():
            raise InputError("the text is empty: type something to translate", code="text_empty")
        ids = self.src_vocab.encode(text, "input")
        if len(ids) > self.max_src_len:
            raise InputError(f"the input is {len(ids)} tokens long, but the {self.task_name!r} model was "
                             f"trained on at most {self.max_src_len}; shorten it", code="s2s_text_too_long",
                             tokens=len(ids), limit=self.max_src_len)
        return ids

    def encode_target(self, text: str) -> list[int]:
        if not text.strip():
            raise InputError("the target is empty", code="s2s_target_empty")
        return self.tgt_vocab.encode(text, "target")

    # -- running -----------------------------------------------------------------------------------

    def encode(self, src_ids: list[int], rec: Recorder | None = None) -> tuple[Tensor, Tensor]:
        """memory (1, S, D) and source mask (1, 1, S) of one unpadded source."""
        src = torch.tensor([src_ids])
        src_mask = src != PAD
        return self.net.encode(src, src_mask.unsqueeze(-2), rec), src_mask.unsqueeze(-2)

    def next_log_probs(self, memory: Tensor, src_mask: Tensor, ys: Tensor,
                       rec: Recorder | None = None) -> Tensor:
        """Log-probabilities (B, V) of the token after each prefix in `ys` (B, T); memory (B, S, D)."""
        out = self.net.decode(memory, src_mask, ys, subsequent_mask(ys.size(1), ys.device), rec)
        if rec is None:
            return self.net.generator(out[:, -1])
        return self.net.generator(out, rec)[:, -1]  # record logits at every position of the trace

    @torch.inference_mode()
    def trace(self, src_ids: list[int], tgt_ids: list[int]) -> Seq2SeqTrace:
        """Every intermediate of one pass: source `src_ids`, decoder input `tgt_ids` (start token
        first), all target positions at once as in training."""
        if not tgt_ids or tgt_ids[0] != BOS:
            raise InputError("the decoder input must begin with the start token")
        rec = Recorder()
        memory, src_mask = self.encode(src_ids, rec)
        self.next_log_probs(memory, src_mask, torch.tensor([tgt_ids]), rec)
        return self.make_trace(src_ids, tgt_ids, {k: v[0] for k, v in rec.values.items()})

    def make_trace(self, src_ids: list[int], tgt_ids: list[int], values: dict[str, Tensor]) -> Seq2SeqTrace:
        return Seq2SeqTrace(self.config, list(src_ids), self.src_vocab.token_texts(src_ids), list(tgt_ids),
                            self.tgt_vocab.token_texts(tgt_ids), values)
