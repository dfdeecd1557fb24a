"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017), in the
vocabulary of the Annotated Transformer: `encode`, `decode`, `generator`, `subsequent_mask`.

Post-LayerNorm residual blocks (x = LayerNorm(x + Sublayer(x))), sinusoidal positional encoding,
embeddings scaled by sqrt(d_model), ReLU feed-forward. Every module has one forward with an optional
`rec`: with `rec=None` it takes the fast path (fused attention, nothing kept); with a `Recorder` it
computes attention explicitly and records each step under the names of `seq2seq/names.py`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.layers import LayerNorm
from ..models.recorder import Recorder, scope
from ..names import block_part
from .config import Seq2SeqConfig


def subsequent_mask(size: int, device: torch.device | None = None) -> Tensor:
    """(1, size, size) bool, True where query position i may attend to key position j, i.e. j <= i."""
    return torch.tril(torch.ones(1, size, size, dtype=torch.bool, device=device))


def pad_mask(ids: Tensor, pad_id: int) -> Tensor:
    """(B, 1, S) bool, True at real tokens: padding keys are hidden from every query."""
    return (ids != pad_id).unsqueeze(-2)


def target_mask(tgt: Tensor, pad_id: int) -> Tensor:
    """(B, T, T) bool: the decoder's self-attention mask, padding and future positions hidden."""
    return pad_mask(tgt, pad_id) & subsequent_mask(tgt.size(-1), tgt.device)


def positional_encoding(n_positions: int, d_model: int) -> Tensor:
    """(n_positions, d_model): PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same)."""
    pos = torch.arange(n_positions, dtype=torch.float32).unsqueeze(1)  # (P, 1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))  # (D/2,)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


class Embeddings(nn.Module):
    """Token embedding, multiplied by sqrt(d_model) as in section 3.4 of the paper."""

    def __init__(self, vocab_size: int, d_model: int) -> None:
        super().__init__()
        self.lut = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, ids: Tensor) -> Tensor:
        return self.lut(ids) * math.sqrt(self.d_model)  # (B, T, D)


class PositionalEncoding(nn.Module):
    """The sinusoid table (fixed, not learned: kept out of the checkpoint) and the dropout that
    follows embedding + encoding."""

    def __init__(self, d_model: int, dropout: float, max_len: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", positional_encoding(max_len, d_model), persistent=False)

    def table(self, n: int) -> Tensor:
        """(n, D) encodings of positions 0..n-1, beyond `max_len` too."""
        pe: Tensor = self.pe  # type: ignore[assignment]
        return pe[:n] if n <= pe.size(0) else positional_encoding(n, self.d_model).to(pe.device)

    def forward(self, embedded: Tensor, rec: Recorder | None = None) -> Tensor:
        pe = self.table(embedded.size(1))  # (T, D)
        if rec is not None:
            embedded = rec("embed", embedded)
            pe = rec("pos_encoding", pe.expand_as(embedded))
        return self.dropout(embedded + pe)


class MultiHeadedAttention(nn.Module):
    """softmax(Q K^T / sqrt(d_k)) V for h heads at once, then W^O. Queries come from `query`, keys
    and values from `key`/`value`: the same sequence for self-attention, the encoder's output for
    cross-attention."""

    def __init__(self, d_model: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.n_head = n_head
        self.d_k = d_model // n_head
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.attn_dropout = nn.Dropout(dropout)
        self.dropout = dropout

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None,
                rec: Recorder | None = None) -> Tensor:
        """`mask`: bool, (B, 1, S) or (B, T, S), True where a key may be attended."""
        B, T, D = query.shape
        S = key.size(1)
        q = self.w_q(query).view(B, T, self.n_head, self.d_k).transpose(1, 2)  # (B, H, T, Dk)
        k = self.w_k(key).view(B, S, self.n_head, self.d_k).transpose(1, 2)  # (B, H, S, Dk)
        v = self.w_v(value).view(B, S, self.n_head, self.d_k).transpose(1, 2)  # (B, H, S, Dk)
        keep = None if mask is None else mask.unsqueeze(1)  # same mask for every head
        if rec is None:
            p = self.dropout if self.training else 0.0
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=p)
        else:
            q, k, v = rec("q", q), rec("k", k), rec("v", v)
            scores = rec("scores", q @ k.transpose(-2, -1))  # (B, H, T, S)
            scaled = scores * (1.0 / math.sqrt(self.d_k))
            if keep is not None:
                scaled = scaled.masked_fill(~keep, float("-inf"))
            pattern = rec("pattern", torch.softmax(scaled, dim=-1))
            z = rec("z", self.attn_dropout(pattern) @ v)  # (B, H, T, Dk)
        return self.w_o(z.transpose(1, 2).contiguous().view(B, T, D))  # heads side by side, then W^O


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, the same at every position."""

    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        if rec is None:
            return self.w_2(self.dropout(F.relu(self.w_1(x))))
        pre = rec("pre", self.w_1(x))
        post = rec("post", F.relu(pre))
        return self.w_2(self.dropout(post))


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward; each wrapped as LayerNorm(x + Dropout(Sublayer(x)))."""

    def __init__(self, c: Seq2SeqConfig) -> None:
        super().__init__()
        self.attn = MultiHeadedAttention(c.d_model, c.n_head, c.dropout)
        self.ln_1 = LayerNorm(c.d_model, c.layer_norm_eps)
        self.ff = PositionwiseFeedForward(c.d_model, c.d_ff, c.dropout)
        self.ln_2 = LayerNorm(c.d_model, c.layer_norm_eps)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x: Tensor, mask: Tensor, rec: Recorder | None = None) -> Tensor:
        if rec is None:
            x = self.ln_1(x + self.drop(self.attn(x, x, x, mask)))
            return self.ln_2(x + self.drop(self.ff(x)))
        x = rec("resid_pre", x)
        attn_out = rec("attn_out", self.drop(self.attn(x, x, x, mask, rec.scope("attn"))))
        x = rec("resid_mid", self.ln_1(rec("ln1.in", x + attn_out), rec.scope("ln1")))
        ff_out = rec("ff_out", self.drop(self.ff(x, rec.scope("ff"))))
        return rec("resid_post", self.ln_2(rec("ln2.in", x + ff_out), rec.scope("ln2")))


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder's output, feed-forward."""

    def __init__(self, c: Seq2SeqConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadedAttention(c.d_model, c.n_head, c.dropout)
        self.ln_1 = LayerNorm(c.d_model, c.layer_norm_eps)
        self.cross_attn = MultiHeadedAttention(c.d_model, c.n_head, c.dropout)
        self.ln_2 = LayerNorm(c.d_model, c.layer_norm_eps)
        self.ff = PositionwiseFeedForward(c.d_model, c.d_ff, c.dropout)
        self.ln_3 = LayerNorm(c.d_model, c.layer_norm_eps)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor | None, tgt_mask: Tensor,
                rec: Recorder | None = None) -> Tensor:
        m = memory
        if rec is None:
            x = self.ln_1(x + self.drop(self.self_attn(x, x, x, tgt_mask)))
            x = self.ln_2(x + self.drop(self.cross_attn(x, m, m, src_mask)))
            return self.ln_3(x + self.drop(self.ff(x)))
        x = rec("resid_pre", x)
        sa = rec("self_attn_out", self.drop(self.self_attn(x, x, x, tgt_mask, rec.scope("self_attn"))))
        x = rec("resid_mid", self.ln_1(rec("ln1.in", x + sa), rec.scope("ln1")))
        ca = rec("cross_attn_out", self.drop(self.cross_attn(x, m, m, src_mask, rec.scope("cross_attn"))))
        x = rec("resid_cross", self.ln_2(rec("ln2.in", x + ca), rec.scope("ln2")))
        ff_out = rec("ff_out", self.drop(self.ff(x, rec.scope("ff"))))
        return rec("resid_post", self.ln_3(rec("ln3.in", x + ff_out), rec.scope("ln3")))


class Encoder(nn.Module):
    def __init__(self, c: Seq2SeqConfig) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([EncoderLayer(c) for _ in range(c.n_encoder_layers)])

    def forward(self, x: Tensor, mask: Tensor, rec: Recorder | None = None) -> Tensor:
        for i, block in enumerate(self.blocks):
            x = block(x, mask, scope(rec, block_part(i)))
        return x  # post-LN: the last block already ends in a LayerNorm, so none is added here


class Decoder(nn.Module):
    def __init__(self, c: Seq2SeqConfig) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([DecoderLayer(c) for _ in range(c.n_decoder_layers)])

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor | None, tgt_mask: Tensor,
                rec: Recorder | None = None) -> Tensor:
        for i, block in enumerate(self.blocks):
            x = block(x, memory, src_mask, tgt_mask, scope(rec, block_part(i)))
        return x


class Generator(nn.Module):
    """The final linear layer and softmax: decoder output -> log-probabilities of the next token."""

    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        logits = self.proj(x)  # (B, T, V)
        if rec is not None:
            logits = rec("logits", logits)
        return F.log_softmax(logits, dim=-1)


class EncoderDecoder(nn.Module):
    """src ids -> `encode` -> memory; memory + target prefix -> `decode` -> `generator` -> next token."""

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        self.src_embed = Embeddings(config.src_vocab_size, config.d_model)
        self.tgt_embed = Embeddings(config.tgt_vocab_size, config.d_model)
        self.pos_encoding = PositionalEncoding(config.d_model, config.dropout, config.max_len)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.generator = Generator(config.d_model, config.tgt_vocab_size)
        for p in self.parameters():  # Glorot init of every matrix, as the Annotated Transformer does
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor, tgt_mask: Tensor,
                rec: Recorder | None = None) -> Tensor:
        """Decoder output (B, T, D) for every target position at once (teacher forcing)."""
        return self.decode(self.encode(src, src_mask, rec), src_mask, tgt, tgt_mask, rec)

    def encode(self, src: Tensor, src_mask: Tensor, rec: Recorder | None = None) -> Tensor:
        """(B, S) ids, (B, 1, S) mask -> memory (B, S, D)."""
        r = scope(rec, "encoder")
        return self.encoder(self.pos_encoding(self.src_embed(src), r), src_mask, r)

    def decode(self, memory: Tensor, src_mask: Tensor | None, tgt: Tensor, tgt_mask: Tensor,
               rec: Recorder | None = None) -> Tensor:
        """memory (B, S, D), target prefix (B, T), masks (B, 1, S) and (B|1, T, T) -> (B, T, D)."""
        r = scope(rec, "decoder")
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt), r), memory, src_mask, tgt_mask, r)
