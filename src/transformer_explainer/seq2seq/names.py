"""The one naming scheme for every value recorded in the encoder-decoder.

Names extend the GPT-2 scheme (`names.py`) with the stack in front: `encoder.blocks.2.attn.pattern`,
`decoder.blocks.0.self_attn.pattern`, `decoder.blocks.0.cross_attn.pattern`, `encoder.embed`, `logits`.
Dims: S source positions, T target (decoder input) positions, H heads, D d_model, Dk head width,
F feed-forward width, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Stack = Literal["encoder", "decoder"]
Entry = tuple[tuple[str, ...], str]
STACKS: tuple[Stack, ...] = ("encoder", "decoder")


def _attention(prefix: str, q: str, k: str, what: str) -> dict[str, Entry]:
    """The stages of one multi-head attention whose queries run over `q` and keys over `k`."""
    return {
        f"{prefix}.q": (("H", q, "Dk"), f"queries of the {what}, split into heads"),
        f"{prefix}.k": (("H", k, "Dk"), f"keys of the {what}, split into heads"),
        f"{prefix}.v": (("H", k, "Dk"), f"values of the {what}, split into heads"),
        f"{prefix}.scores": (("H", q, k), "raw attention scores Q @ K^T"),
        f"{prefix}.scaled_scores": (("H", q, k), "scores / sqrt(d_k)"),
        f"{prefix}.masked_scores": (("H", q, k), "scaled scores with -inf where a key is hidden (padding, future)"),
        f"{prefix}.pattern": (("H", q, k), "softmax over keys of the masked scores; rows sum to 1"),
        f"{prefix}.z": (("H", q, "Dk"), "pattern @ V: each head's weighted sum of values"),
        f"{prefix}.concat": ((q, "D"), "the heads' z side by side, the input of W^O"),
    }


def _layer_norm(prefix: str, q: str, what: str) -> dict[str, Entry]:
    return {
        f"{prefix}.mean": ((q,), f"mean of each position's vector, {what}"),
        f"{prefix}.var": ((q,), f"variance (biased) of each position's vector, {what}"),
        f"{prefix}.normalized": ((q, "D"), "(x - mean) / sqrt(var + eps)"),
        f"{prefix}.out": ((q, "D"), "normalized * gain + bias"),
    }


def _feed_forward(q: str) -> dict[str, Entry]:
    return {
        "ff.pre": ((q, "F"), "x @ W_1 + b_1: the expanded hidden layer before ReLU"),
        "ff.post": ((q, "F"), "ReLU(ff.pre)"),
        "ff_out": ((q, "D"), "ff.post @ W_2 + b_2: the feed-forward sublayer's output"),
    }


# Post-LN blocks: each sublayer is x = LayerNorm(x + Sublayer(x)), so `lnN.in` is the residual sum.
ENCODER_BLOCK: dict[str, Entry] = {
    "resid_pre": (("S", "D"), "the block's input"),
    **_attention("attn", "S", "S", "encoder self-attention"),
    "attn_out": (("S", "D"), "concat @ W^O + b^O: what self-attention adds"),
    "ln1.in": (("S", "D"), "resid_pre + attn_out, before the first LayerNorm"),
    **_layer_norm("ln1", "S", "first LayerNorm"),
    "resid_mid": (("S", "D"), "ln1.out: the stream after the self-attention sublayer"),
    **_feed_forward("S"),
    "ln2.in": (("S", "D"), "resid_mid + ff_out, before the second LayerNorm"),
    **_layer_norm("ln2", "S", "second LayerNorm"),
    "resid_post": (("S", "D"), "ln2.out: the block's output"),
}

DECODER_BLOCK: dict[str, Entry] = {
    "resid_pre": (("T", "D"), "the block's input"),
    **_attention("self_attn", "T", "T", "masked decoder self-attention"),
    "self_attn_out": (("T", "D"), "concat @ W^O + b^O: what masked self-attention adds"),
    "ln1.in": (("T", "D"), "resid_pre + self_attn_out, before the first LayerNorm"),
    **_layer_norm("ln1", "T", "first LayerNorm"),
    "resid_mid": (("T", "D"), "ln1.out: the stream after the masked self-attention sublayer"),
    **_attention("cross_attn", "T", "S", "cross-attention (queries: decoder, keys and values: encoder output)"),
    "cross_attn_out": (("T", "D"), "concat @ W^O + b^O: what cross-attention adds"),
    "ln2.in": (("T", "D"), "resid_mid + cross_attn_out, before the second LayerNorm"),
    **_layer_norm("ln2", "T", "second LayerNorm"),
    "resid_cross": (("T", "D"), "ln2.out: the stream after the cross-attention sublayer"),
    **_feed_forward("T"),
    "ln3.in": (("T", "D"), "resid_cross + ff_out, before the third LayerNorm"),
    **_layer_norm("ln3", "T", "third LayerNorm"),
    "resid_post": (("T", "D"), "ln3.out: the block's output"),
}

BLOCKS: dict[Stack, dict[str, Entry]] = {"encoder": ENCODER_BLOCK, "decoder": DECODER_BLOCK}

GLOBAL: dict[str, Entry] = {
    "encoder.embed": (("S", "D"), "source token embeddings times sqrt(d_model)"),
    "encoder.pos_encoding": (("S", "D"), "sinusoidal positional encoding of each source position"),
    "encoder.embed_sum": (("S", "D"), "embed + pos_encoding: the input of encoder block 0"),
    "encoder.out": (("S", "D"), "the last encoder block's output: the memory that cross-attention reads"),
    "decoder.embed": (("T", "D"), "target token embeddings times sqrt(d_model)"),
    "decoder.pos_encoding": (("T", "D"), "sinusoidal positional encoding of each target position"),
    "decoder.embed_sum": (("T", "D"), "embed + pos_encoding: the input of decoder block 0"),
    "decoder.out": (("T", "D"), "the last decoder block's output: the generator's input"),
    "logits": (("T", "V"), "decoder.out @ W + b: the generator's score for every target token"),
    "log_probs": (("T", "V"), "log_softmax(logits): the next token's log-probabilities"),
}

# Stages computed on request from a recorded one instead of being stored: stage -> its source stage.
DERIVED: dict[str, str] = {
    **{f"{a}.{s}": f"{a}.scores" for a in ("attn", "self_attn", "cross_attn")
       for s in ("scaled_scores", "masked_scores")},
    **{f"{a}.concat": f"{a}.z" for a in ("attn", "self_attn", "cross_attn")},
    "encoder.embed_sum": "encoder.blocks.0.resid_pre",
    "decoder.embed_sum": "decoder.blocks.0.resid_pre",
    "encoder.out": "encoder.blocks.{last}.resid_post",
    "decoder.out": "decoder.blocks.{last}.resid_post",
    "log_probs": "logits",
}


def block_name(stack: Stack, layer: int, suffix: str) -> str:
    """`block_name("decoder", 1, "cross_attn.pattern") -> "decoder.blocks.1.cross_attn.pattern"`."""
    if stack not in BLOCKS:
        raise KeyError(f"unknown stack {stack!r}; expected 'encoder' or 'decoder'")
    if suffix not in BLOCKS[stack]:
        raise KeyError(f"unknown {stack} block stage {suffix!r}")
    return f"{stack}.blocks.{layer}.{suffix}"


@dataclass(frozen=True)
class ParsedName:
    stack: Stack | None  # None for the generator's names (`logits`, `log_probs`)
    layer: int | None  # None for names outside the blocks
    suffix: str  # the block stage (`self_attn.pattern`), or the whole name for global ones


def parse_name(name: str) -> ParsedName:
    """Split a full name into stack, layer and stage; KeyError for names outside the scheme."""
    if name in GLOBAL:
        stack = name.split(".", 1)[0]
        return ParsedName(stack if stack in BLOCKS else None, None, name)  # type: ignore[arg-type]
    parts = name.split(".", 3)
    if len(parts) == 4 and parts[0] in BLOCKS and parts[1] == "blocks" and parts[2].isdigit():
        stack: Stack = parts[0]  # type: ignore[assignment]
        if parts[3] in BLOCKS[stack]:
            return ParsedName(stack, int(parts[2]), parts[3])
    raise KeyError(f"unknown name {name!r}")


def encoder_names(n_layer: int) -> list[str]:
    """The encoder's activation names in computation order."""
    out = ["encoder.embed", "encoder.pos_encoding", "encoder.embed_sum"]
    for i in range(n_layer):
        out += [block_name("encoder", i, s) for s in ENCODER_BLOCK]
    return out + ["encoder.out"]


def decoder_names(n_layer: int) -> list[str]:
    """The decoder's and generator's activation names in computation order."""
    out = ["decoder.embed", "decoder.pos_encoding", "decoder.embed_sum"]
    for i in range(n_layer):
        out += [block_name("decoder", i, s) for s in DECODER_BLOCK]
    return out + ["decoder.out", "logits", "log_probs"]


def activation_names(n_encoder_layers: int, n_decoder_layers: int) -> list[str]:
    return encoder_names(n_encoder_layers) + decoder_names(n_decoder_layers)


def describe(name: str) -> Entry:
    """(dims, description) of any activation name."""
    p = parse_name(name)
    if p.layer is None:
        return GLOBAL[name]
    assert p.stack is not None
    return BLOCKS[p.stack][p.suffix]
