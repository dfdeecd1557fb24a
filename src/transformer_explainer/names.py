"""The one naming scheme for every recorded value and every weight matrix.

Names follow TransformerLens (`blocks.3.attn.pattern`, `blocks.3.resid_post`, `logits`). The same
table feeds the Python trace, the JSON API and the TypeScript types of the web app, so nothing else
builds a name by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

# Per-block activations: suffix -> (dims, what it is). Dims use: T query positions, S key positions
# (S = T without a cache), H heads, D d_model, Dh head dim, M MLP width.
BLOCK_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "resid_pre": (("T", "D"), "residual stream entering the block"),
    "ln1.mean": (("T",), "mean of each position's vector, first LayerNorm"),
    "ln1.var": (("T",), "variance (biased) of each position's vector, first LayerNorm"),
    "ln1.normalized": (("T", "D"), "(x - mean) / sqrt(var + eps)"),
    "ln1.out": (("T", "D"), "normalized * scale + shift: the attention input"),
    "attn.q": (("H", "T", "Dh"), "queries, ln1.out @ W_Q + b_Q, split into heads"),
    "attn.k": (("H", "S", "Dh"), "keys, split into heads"),
    "attn.v": (("H", "S", "Dh"), "values, split into heads"),
    "attn.scores": (("H", "T", "S"), "raw attention scores Q @ K^T"),
    "attn.scaled_scores": (("H", "T", "S"), "scores / sqrt(d_head)"),
    "attn.masked_scores": (("H", "T", "S"), "scaled scores with -inf where the key is after the query"),
    "attn.pattern": (("H", "T", "S"), "softmax over keys of the masked scores; rows sum to 1"),
    "attn.z": (("H", "T", "Dh"), "pattern @ V: each head's weighted sum of values"),
    "attn.concat": (("T", "D"), "the heads' z side by side, the input of the output projection"),
    "attn_out": (("T", "D"), "concat @ W_O + b_O: what attention adds to the residual stream"),
    "resid_mid": (("T", "D"), "resid_pre + attn_out"),
    "ln2.mean": (("T",), "mean of each position's vector, second LayerNorm"),
    "ln2.var": (("T",), "variance (biased), second LayerNorm"),
    "ln2.normalized": (("T", "D"), "(x - mean) / sqrt(var + eps)"),
    "ln2.out": (("T", "D"), "normalized * scale + shift: the MLP input"),
    "mlp.pre": (("T", "M"), "ln2.out @ W_in + b_in: the expanded hidden layer before GELU"),
    "mlp.post": (("T", "M"), "GELU(mlp.pre)"),
    "mlp_out": (("T", "D"), "mlp.post @ W_out + b_out: what the MLP adds to the residual stream"),
    "resid_post": (("T", "D"), "resid_mid + mlp_out: the block's output"),
}

GLOBAL_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "embed.token": (("T", "D"), "row of the token embedding matrix W_E for each token"),
    "embed.position": (("T", "D"), "row of the position embedding matrix W_pos for each position"),
    "embed.sum": (("T", "D"), "token + position embedding: the input of block 0"),
    "ln_final.mean": (("T",), "mean, final LayerNorm"),
    "ln_final.var": (("T",), "variance (biased), final LayerNorm"),
    "ln_final.normalized": (("T", "D"), "(x - mean) / sqrt(var + eps)"),
    "ln_final.out": (("T", "D"), "normalized * scale + shift: the unembedding input"),
    "logits": (("T", "V"), "ln_final.out @ W_U: one score per vocabulary entry (GPT-2 has no bias here)"),
}

# Stages computed on request from a recorded one instead of being stored.
DERIVED: dict[str, str] = {
    "attn.scores": "attn.q",  # q @ k^T: recomputing it costs less than keeping (H, T, S) per block
    "attn.scaled_scores": "attn.q",
    "attn.masked_scores": "attn.q",
    "attn.concat": "attn.z",
    "embed.sum": "blocks.0.resid_pre",
}

BLOCK_WEIGHTS: dict[str, tuple[tuple[str, ...], str]] = {
    "ln1.w": (("D",), "first LayerNorm scale"),
    "ln1.b": (("D",), "first LayerNorm shift"),
    "attn.W_Q": (("H", "D", "Dh"), "query weights per head"),
    "attn.W_K": (("H", "D", "Dh"), "key weights per head"),
    "attn.W_V": (("H", "D", "Dh"), "value weights per head"),
    "attn.b_Q": (("H", "Dh"), "query bias per head"),
    "attn.b_K": (("H", "Dh"), "key bias per head"),
    "attn.b_V": (("H", "Dh"), "value bias per head"),
    "attn.W_O": (("H", "Dh", "D"), "output projection, rows grouped by head"),
    "attn.b_O": (("D",), "output projection bias"),
    "ln2.w": (("D",), "second LayerNorm scale"),
    "ln2.b": (("D",), "second LayerNorm shift"),
    "mlp.W_in": (("D", "M"), "MLP expansion"),
    "mlp.b_in": (("M",), "MLP expansion bias"),
    "mlp.W_out": (("M", "D"), "MLP projection back to d_model"),
    "mlp.b_out": (("D",), "MLP projection bias"),
}

GLOBAL_WEIGHTS: dict[str, tuple[tuple[str, ...], str]] = {
    "embed.W_E": (("V", "D"), "token embedding matrix"),
    "embed.W_pos": (("P", "D"), "position embedding matrix"),
    "ln_final.w": (("D",), "final LayerNorm scale"),
    "ln_final.b": (("D",), "final LayerNorm shift"),
    "unembed.W_U": (("D", "V"), "unembedding: the transpose of W_E (tied), no bias"),
}


def block_name(layer: int, suffix: str) -> str:
    """`block_name(3, "attn.pattern") -> "blocks.3.attn.pattern"`."""
    if suffix not in BLOCK_ACTIVATIONS and suffix not in BLOCK_WEIGHTS:
        raise KeyError(f"unknown block stage {suffix!r}")
    return f"blocks.{layer}.{suffix}"


@dataclass(frozen=True)
class ParsedName:
    layer: int | None  # None for names outside the blocks
    suffix: str  # the stage, e.g. "attn.pattern", or the whole name for global ones


def parse_name(name: str) -> ParsedName:
    """Split a full name into its layer and stage; raise KeyError for names outside the scheme."""
    if name.startswith("blocks."):
        _, layer, suffix = name.split(".", 2)
        if not layer.isdigit() or (suffix not in BLOCK_ACTIVATIONS and suffix not in BLOCK_WEIGHTS):
            raise KeyError(f"unknown name {name!r}")
        return ParsedName(int(layer), suffix)
    if name in GLOBAL_ACTIVATIONS or name in GLOBAL_WEIGHTS:
        return ParsedName(None, name)
    raise KeyError(f"unknown name {name!r}")


def activation_names(n_layer: int) -> list[str]:
    """All activation names of a model with `n_layer` blocks, in computation order."""
    out = ["embed.token", "embed.position", "embed.sum"]
    for i in range(n_layer):
        out += [block_name(i, s) for s in BLOCK_ACTIVATIONS]
    out += ["ln_final.mean", "ln_final.var", "ln_final.normalized", "ln_final.out", "logits"]
    return out


def weight_names(n_layer: int) -> list[str]:
    out = ["embed.W_E", "embed.W_pos"]
    for i in range(n_layer):
        out += [block_name(i, s) for s in BLOCK_WEIGHTS]
    out += ["ln_final.w", "ln_final.b", "unembed.W_U"]
    return out


def describe(name: str) -> tuple[tuple[str, ...], str]:
    """(dims, description) of any activation or weight name."""
    p = parse_name(name)
    if p.layer is None:
        return GLOBAL_ACTIVATIONS.get(name) or GLOBAL_WEIGHTS[name]
    return BLOCK_ACTIVATIONS.get(p.suffix) or BLOCK_WEIGHTS[p.suffix]
