"""The names the bridge records under, in the project's vocabulary (TransformerLens's, as names.py).

The stages any transformers decoder shows through its own modules: a table of the same shape as names.py's
(suffix -> (dims, what it is)), so that names.py can adopt it as the generic family's table. Stages names.py
already knows keep their meaning; the ones it does not know yet (a sink, a mixer that is not attention, the
mask as applied) are declared here first. Dims as in names.py: T query positions, S key positions, H query
heads, G key/value heads, D d_model, Dh head dim (Dv where values have a width of their own), V vocabulary.
"""

from __future__ import annotations

from ..names import block_part

GENERIC_BLOCK_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "resid_pre": (("T", "D"), "residual stream entering the block (the decoder layer's input)"),
    "attn.q": (("H", "T", "Dh"), "queries as attention uses them: after the model's norms and rotations"),
    "attn.k": (("G", "S", "Dh"), "keys as attention uses them: after the model's norms and rotations"),
    "attn.v": (("G", "S", "Dv"), "values"),
    "attn.mask": (("T", "S"), "the additive mask as the model applies it: 0 where the query may read the key, "
                  "a large negative number where it may not (a later key, or one outside a local window)"),
    "attn.masked_scores": (("H", "T", "S"), "q @ k^T times the scale (soft-capped where the model caps), plus the "
                           "mask: the scores the softmax reads"),
    "attn.pattern": (("H", "T", "S"), "the weights over the keys, as transformers' eager attention returns them"),
    "attn.sink": (("H",), "the learned sink logit per head: one more entry in the softmax's denominator"),
    "attn.sink_weight": (("H", "T"), "the weight the sink takes from each query: 1 - the pattern's row sum"),
    "attn.z": (("H", "T", "Dv"), "pattern @ V: each head's weighted sum of values, before the output projection"),
    "attn_out": (("T", "D"), "the attention module's output (after its output projection; before a norm that the "
                 "layer applies after it, where it has one)"),
    "linear_attn.in": (("T", "D"), "input of a linear-attention layer (e.g. Gated DeltaNet)"),
    "linear_attn.out": (("T", "D"), "output of a linear-attention layer"),
    "conv.in": (("T", "D"), "input of a short-convolution layer"),
    "conv.out": (("T", "D"), "output of a short-convolution layer"),
    "ssm.in": (("T", "D"), "input of a state-space layer (e.g. Mamba)"),
    "ssm.out": (("T", "D"), "output of a state-space layer"),
    "mixer.in": (("T", "D"), "input of a token mixer of another kind"),
    "mixer.out": (("T", "D"), "output of a token mixer of another kind"),
    "resid_mid": (("T", "D"), "the residual stream between the mixing sublayer and the MLP (what the MLP's "
                  "branch is added to); absent where the layer has no such point (parallel sublayers)"),
    "mlp_out": (("T", "D"), "the MLP module's output (dense or mixture of experts; before a norm the layer applies "
                "after it, where it has one)"),
    "resid_post": (("T", "D"), "the decoder layer's output"),
}

GENERIC_GLOBAL_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "embed.token": (("T", "D"), "the token embedding module's output (scaled where that module scales)"),
    "ln_final.out": (("T", "D"), "the input of the unembedding: the final norm's output"),
    "logits": (("T", "V"), "the model's logits, as its forward returns them (soft-capped where the model caps)"),
}

# The mixers a decoder layer may have besides attention, by kind: kind -> the stage prefix it records under.
MIXER_PREFIX: dict[str, str] = {"linear_attention": "linear_attn", "short_conv": "conv", "state_space": "ssm",
                                "mixer": "mixer"}


def generic_block_name(layer: int, suffix: str) -> str:
    """`generic_block_name(3, "attn.pattern") -> "blocks.3.attn.pattern"`, for a suffix of the generic table."""
    if suffix not in GENERIC_BLOCK_ACTIVATIONS:
        raise KeyError(f"unknown generic block stage {suffix!r}")
    return f"{block_part(layer)}.{suffix}"
