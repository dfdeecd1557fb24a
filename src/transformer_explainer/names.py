"""The one naming scheme for every recorded value and every weight matrix.

Names follow TransformerLens (`blocks.3.attn.pattern`, `blocks.3.resid_post`, `logits`). The same
table feeds the Python trace, the JSON API and the TypeScript types of the web app, so nothing else
builds a name by hand.

One table per model family (`FAMILY_NAMES`, the key its declaration in `families/` has), derived from the
declaration (`name_table`), so that a family is declared once: GPT-2's tables (those without a prefix), or
for the rotary RMSNorm families the Llama family's (`LLAMA_`: RMSNorm, rotary positions, grouped-query
attention, the gated MLP) with what each of the declaration's options adds or changes (`name_options.py`):
QK-norm per head (Qwen3, Gemma 3) or over the whole projection (OLMoE), Gemma 3's sandwich and 1 + weight
norms, scaled embedding, local layers and GeGLU, a mixture of experts' router and experts (Mixtral,
Qwen3-MoE, OLMoE; Qwen3-MoE's blocks without experts keep the dense MLP's names), and the biases the
checkpoints may have.
Stages the families share keep one name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .families import FAMILIES, Architecture, Family
from .name_options import (
    ATTN_BIASES,
    BIAS_AFTER,
    BIASES,
    DENSE_BLOCKS_STAGES,
    DENSE_BLOCKS_WEIGHTS,
    DENSE_MLP_STAGES,
    DENSE_MLP_WEIGHTS,
    GEGLU_ACT,
    GLOBAL_LAYERS_ANGLES,
    GLOBAL_LENS_NAMES,
    KV_SLICE,
    LENS_NAMES,
    LOCAL_ANGLES,
    MASKED_IN_LOCAL_LAYERS,
    MLP_BIASES,
    MOE_ACTIVATIONS,
    MOE_MLP_OUT,
    MOE_STAGES,
    MOE_WEIGHTS,
    OFFSET_FINAL_NORM_OUT,
    OFFSET_FINAL_NORM_WEIGHT,
    OFFSET_NORM_OUTPUTS,
    OFFSET_NORM_WEIGHTS,
    OFFSET_QK_NORM_OUTPUTS,
    QK_NORM_ACTIVATIONS,
    QK_NORM_OVER_PROJECTION_ACTIVATIONS,
    QK_NORM_OVER_PROJECTION_WEIGHTS,
    QK_NORM_WEIGHTS,
    QK_NORMED_QKV,
    SANDWICH_AFTER_ATTENTION,
    SANDWICH_AFTER_MLP,
    SANDWICH_OUTPUTS,
    SCALED_BY_QUERY_PRE_ATTN_SCALAR,
    SCALED_EMBEDDING,
    TOKEN_BEFORE_SCALING,
    Z_BEFORE_PROJECTION,
    Entry,
    LensNames,
)

# Per-block activations: suffix -> (dims, what it is). Dims use: T query positions, S key positions
# (S = T without a cache), H heads, G key/value heads, D d_model, Dh head dim, R = Dh/2 rotation
# pairs, M MLP width (an expert's, in an expert's weights), V vocabulary, P positions, E experts, K the
# experts chosen per token (top_k).
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
    "attn.scaled_scores": (("H", "T", "S"), "scores / sqrt(head_dim)"),
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

# Stages computed on request from recorded ones instead of being stored: the rule (`Derivation`) that
# the trace follows, and the offline snapshot page too (web/src/snapshot/derive.ts, from the generated
# TypeScript of this table).
@dataclass(frozen=True)
class Derivation:
    """A stage computed by `op` (one of `DERIVATION_OPS`) from `sources`: stages of the same block,
    or full names where the stage is a global one."""

    op: str
    sources: tuple[str, ...]


DERIVATION_OPS: dict[str, str] = {
    "same": "the source itself, under a second name",
    "scores": "queries @ keys^T, each query head against the keys of the key/value head it reads",
    "scale": "the source times the attention scale: 1 / sqrt(head_dim), or 1 / sqrt(query_pre_attn_scalar) "
             "where the model names one",
    "causal_mask": "the source with -inf where the key lies after the query, and in a layer with a local window "
                   "where it lies `sliding_window` or more positions before it",
    "concat_heads": "(H, T, Dh) -> (T, H*Dh): each position's heads side by side",
    "kv_head_index": "for each query head h (of the source's H), the key/value head it reads: h // (H / G)",
}

DERIVATIONS: dict[str, Derivation] = {
    # q @ k^T: recomputing it costs less than keeping (H, T, S) per block
    "attn.scores": Derivation("scores", ("attn.q", "attn.k")),
    "attn.scaled_scores": Derivation("scale", ("attn.scores",)),
    "attn.masked_scores": Derivation("causal_mask", ("attn.scaled_scores",)),
    "attn.concat": Derivation("concat_heads", ("attn.z",)),
    "embed.sum": Derivation("same", ("blocks.0.resid_pre",)),
}


def recorded_sources(derivations: dict[str, Derivation]) -> dict[str, str]:
    """Each derived stage's first recorded source (what /api/names calls `derived`): the first source,
    followed through the stages that are derived themselves."""
    out = {}
    for stage, d in derivations.items():
        src = d.sources[0]
        while src in derivations:
            src = derivations[src].sources[0]
        out[stage] = src
    return out


DERIVED: dict[str, str] = recorded_sources(DERIVATIONS)

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


# -- the Llama family (Llama, Qwen2, Mistral) ----------------------------------------------------------

LLAMA_BLOCK_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "resid_pre": (("T", "D"), "residual stream entering the block"),
    "ln1.rms": (("T",), "root mean square of each position's vector, sqrt(mean(x^2) + eps), first RMSNorm"),
    "ln1.normalized": (("T", "D"), "x / rms: no mean is subtracted"),
    "ln1.out": (("T", "D"), "normalized * scale (no shift): the attention input"),
    "attn.q": (("H", "T", "Dh"), "queries, ln1.out @ W_Q (+ b_Q), split into heads, before rotation"),
    "attn.k": (("G", "T", "Dh"), "keys of the new positions before rotation, one set per key/value head"
                                 + KV_SLICE),
    "attn.v": (("G", "S", "Dh"), "values, one set per key/value head (never rotated)" + KV_SLICE),
    "attn.rot_q": (("H", "T", "Dh"), "queries rotated by their position's angles (RoPE)"),
    "attn.rot_k": (("G", "S", "Dh"), "keys rotated by their position's angles (RoPE): what the cache keeps"
                                     + KV_SLICE),
    "attn.kv_head": (("H",), "the key/value head each query head reads: h // (H / G)"),
    "attn.scores": (("H", "T", "S"), "raw attention scores rot_q @ rot_k^T of the head's key/value head"),
    "attn.scaled_scores": (("H", "T", "S"), "scores / sqrt(head_dim)"),
    "attn.masked_scores": (("H", "T", "S"), "scaled scores with -inf where the key is after the query"),
    "attn.pattern": (("H", "T", "S"), "softmax over keys of the masked scores; rows sum to 1"),
    "attn.z": (("H", "T", "Dh"), "pattern @ V of the head's key/value head: each head's weighted sum"),
    "attn.concat": (("T", "H*Dh"), "the heads' z side by side, the input of the output projection"),
    "attn_out": (("T", "D"), "concat @ W_O: what attention adds to the residual stream"),
    "resid_mid": (("T", "D"), "resid_pre + attn_out"),
    "ln2.rms": (("T",), "root mean square of each position's vector, second RMSNorm"),
    "ln2.normalized": (("T", "D"), "x / rms"),
    "ln2.out": (("T", "D"), "normalized * scale: the MLP input"),
    "mlp.gate": (("T", "M"), "ln2.out @ W_gate: the gate, before its activation"),
    "mlp.up": (("T", "M"), "ln2.out @ W_in: the linear branch"),
    "mlp.act": (("T", "M"), "SiLU(gate) = gate * sigmoid(gate)"),
    "mlp.post": (("T", "M"), "act * up: the gated hidden layer"),
    "mlp_out": (("T", "D"), "mlp.post @ W_out: what the MLP adds to the residual stream"),
    "resid_post": (("T", "D"), "resid_mid + mlp_out: the block's output"),
}

LLAMA_GLOBAL_ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "embed.token": (("T", "D"), "row of the token embedding matrix W_E for each token: the input of block 0"),
    "rope.angles": (("T", "R"), "rotation angle of each position for each pair of a head's dimensions: "
                                "position * frequency; shared by every block and head"),
    "ln_final.rms": (("T",), "root mean square, final RMSNorm"),
    "ln_final.normalized": (("T", "D"), "x / rms"),
    "ln_final.out": (("T", "D"), "normalized * scale: the unembedding input"),
    "logits": (("T", "V"), "ln_final.out @ W_U: one score per vocabulary entry (no bias)"),
}

LLAMA_DERIVATIONS: dict[str, Derivation] = {
    "attn.scores": Derivation("scores", ("attn.rot_q", "attn.rot_k")),  # the rotated queries and keys
    "attn.scaled_scores": Derivation("scale", ("attn.scores",)),
    "attn.masked_scores": Derivation("causal_mask", ("attn.scaled_scores",)),
    "attn.concat": Derivation("concat_heads", ("attn.z",)),
    "attn.kv_head": Derivation("kv_head_index", ("attn.rot_q",)),  # from the model's shape
}
LLAMA_DERIVED: dict[str, str] = recorded_sources(LLAMA_DERIVATIONS)

LLAMA_BLOCK_WEIGHTS: dict[str, tuple[tuple[str, ...], str]] = {
    "ln1.w": (("D",), "first RMSNorm scale"),
    "attn.W_Q": (("H", "D", "Dh"), "query weights per head"),
    "attn.W_K": (("G", "D", "Dh"), "key weights per key/value head" + KV_SLICE),
    "attn.W_V": (("G", "D", "Dh"), "value weights per key/value head" + KV_SLICE),
    "attn.b_Q": (("H", "Dh"), "query bias per head (Qwen2; absent where the model has none)"),
    "attn.b_K": (("G", "Dh"), "key bias per key/value head (Qwen2)" + KV_SLICE),
    "attn.b_V": (("G", "Dh"), "value bias per key/value head (Qwen2)" + KV_SLICE),
    "attn.W_O": (("H", "Dh", "D"), "output projection, rows grouped by head"),
    "attn.b_O": (("D",), "output projection bias (Llama with attention_bias; absent where the model has none)"),
    "ln2.w": (("D",), "second RMSNorm scale"),
    "mlp.W_gate": (("D", "M"), "MLP gate projection"),
    "mlp.b_gate": (("M",), "MLP gate bias (Llama with mlp_bias; absent where the model has none)"),
    "mlp.W_in": (("D", "M"), "MLP up projection (the linear branch)"),
    "mlp.b_in": (("M",), "MLP up bias (Llama with mlp_bias)"),
    "mlp.W_out": (("M", "D"), "MLP down projection back to d_model"),
    "mlp.b_out": (("D",), "MLP down bias (Llama with mlp_bias)"),
}

LLAMA_GLOBAL_WEIGHTS: dict[str, tuple[tuple[str, ...], str]] = {
    "embed.W_E": (("V", "D"), "token embedding matrix"),
    "ln_final.w": (("D",), "final RMSNorm scale"),
    "unembed.W_U": (("D", "V"), "unembedding: the transpose of W_E when tied, its own matrix when not"),
}


# -- what a family's options add to the Llama family's names (`name_table` composes them) -----------------------

def _with(table: dict[str, Entry], after: str | None = None, add: dict[str, Entry] | None = None,
          replace: dict[str, Entry] | None = None) -> dict[str, Entry]:
    """A copy of `table` (its order kept) with entries replaced, and `add` inserted after `after` (at the end
    when None)."""
    out: dict[str, Entry] = {}
    for key, entry in table.items():
        out[key] = (replace or {}).get(key, entry)
        if key == after:
            out.update(add or {})
    if after is None:
        out.update(add or {})
    return out


def _without(table: dict[str, Entry], *keys: str) -> dict[str, Entry]:
    return {k: v for k, v in table.items() if k not in keys}


@dataclass(frozen=True)
class NameTable:
    """The names one model family answers."""

    block_activations: dict[str, Entry]
    global_activations: dict[str, Entry]
    block_weights: dict[str, Entry]
    global_weights: dict[str, Entry]
    derivations: dict[str, Derivation]  # stages computed from recorded ones
    globals_before_blocks: tuple[str, ...]  # the global activations computed before block 0
    # a family whose blocks may have experts or a dense MLP (Qwen3-MoE): the stages only the one kind has
    moe_stages: tuple[str, ...] = ()
    dense_mlp_stages: tuple[str, ...] = ()

    def block_stages(self, has_experts: bool) -> list[str]:
        """The stages a block answers, in computation order: with experts, or with a dense MLP."""
        skip = self.dense_mlp_stages if has_experts else self.moe_stages
        return [s for s in self.block_activations if s not in skip]

    @property
    def derived(self) -> dict[str, str]:
        """Each derived stage's recorded source."""
        return recorded_sources(self.derivations)


GPT2_ARCH = Architecture(norm="layer", positions="learned", qkv="fused", mlp="gelu")


def name_table(family: Family) -> NameTable:
    """The names a family answers, from its declaration: GPT-2's tables for its architecture; for the rotary
    RMSNorm families, the Llama family's tables with what each option of the declaration adds or changes
    (QK-norm, the sandwich and 1 + weight norms, the scaled embedding, local layers, the attention scale,
    GeGLU, a mixture of experts, the biases its checkpoints may have)."""
    a = family.arch
    if a.norm == "layer":
        if a != GPT2_ARCH:
            raise ValueError(f"{family.label}: names are written for LayerNorm with GPT-2's parts only")
        return NameTable(BLOCK_ACTIVATIONS, GLOBAL_ACTIVATIONS, BLOCK_WEIGHTS, GLOBAL_WEIGHTS, DERIVATIONS,
                         ("embed.token", "embed.position", "embed.sum"))
    if a.positions != "rope" or a.qkv != "split" or a.mlp == "gelu":
        raise ValueError(f"{family.label}: names are written for RMSNorm with rotary positions, q, k and v "
                         "projected apart, and a gated MLP or experts")
    acts = dict(LLAMA_BLOCK_ACTIVATIONS)
    weights = _without(LLAMA_BLOCK_WEIGHTS, *ATTN_BIASES, *MLP_BIASES)
    if a.qk_norm:
        over_projection = a.qk_norm_scope == "projection"
        acts = _with(acts, after="attn.k", replace=QK_NORMED_QKV,
                     add=QK_NORM_OVER_PROJECTION_ACTIVATIONS if over_projection else QK_NORM_ACTIVATIONS)
        weights = _with(weights, after="attn.W_V",
                        add=QK_NORM_OVER_PROJECTION_WEIGHTS if over_projection else QK_NORM_WEIGHTS)
    if a.sandwich_norm:
        acts = _with(_with(acts, after="attn.concat", add=SANDWICH_AFTER_ATTENTION), after="mlp.post",
                     add=SANDWICH_AFTER_MLP, replace=SANDWICH_OUTPUTS)
        weights = _with(_with(weights, after="attn.W_O", add={
            "ln1_post.w": (("D",), "the norm after attention: its effective scale, 1 + weight"),
        }), add={"ln2_post.w": (("D",), "the norm after the MLP: its effective scale, 1 + weight")})
    if a.norm_offset:
        acts = _with(acts, replace={**OFFSET_NORM_OUTPUTS, **(OFFSET_QK_NORM_OUTPUTS if a.qk_norm else {})})
        weights = _with(weights, replace=OFFSET_NORM_WEIGHTS)
    if family.scores_scaled_by == "query_pre_attn_scalar":
        acts = _with(acts, replace={"attn.scaled_scores": SCALED_BY_QUERY_PRE_ATTN_SCALAR})
    if family.local_layers:
        acts = _with(acts, replace={"attn.masked_scores": MASKED_IN_LOCAL_LAYERS})
    if family.gated_activation == "gelu_tanh":
        acts = _with(acts, replace={"mlp.act": GEGLU_ACT})
    if a.mlp == "moe":
        if family.dense_blocks:  # the dense MLP's stages and weights stay, for the blocks without experts
            acts = _with(acts, after="mlp.post", add=MOE_ACTIVATIONS, replace=DENSE_BLOCKS_STAGES)
            weights = _with(weights, replace=DENSE_BLOCKS_WEIGHTS)
        else:
            acts = _with(_without(acts, *DENSE_MLP_STAGES), after="ln2.out", add=MOE_ACTIVATIONS,
                         replace={"mlp_out": MOE_MLP_OUT})
            weights = _without(weights, *DENSE_MLP_WEIGHTS)
        weights = _with(weights, add=MOE_WEIGHTS)
    weights = _with_biases(weights, family.biases)

    globals_ = dict(LLAMA_GLOBAL_ACTIVATIONS)
    before = ("embed.token", "rope.angles")
    if family.local_layers:
        globals_ = _with(globals_, after="rope.angles", add=LOCAL_ANGLES,
                         replace={"rope.angles": GLOBAL_LAYERS_ANGLES})
        before += tuple(LOCAL_ANGLES)
    derivations = dict(LLAMA_DERIVATIONS)
    if a.embed_scale:
        after = "rope.local_angles" if family.local_layers else "rope.angles"
        globals_ = _with(globals_, after=after, add=SCALED_EMBEDDING,
                         replace={"embed.token": TOKEN_BEFORE_SCALING})
        before += tuple(SCALED_EMBEDDING)
        derivations["embed.scaled"] = Derivation("same", ("blocks.0.resid_pre",))
    global_weights = dict(LLAMA_GLOBAL_WEIGHTS)
    if a.norm_offset:
        globals_ = _with(globals_, replace={"ln_final.out": OFFSET_FINAL_NORM_OUT})
        global_weights = _with(global_weights, replace={"ln_final.w": OFFSET_FINAL_NORM_WEIGHT})
    moe = a.mlp == "moe"
    return NameTable(acts, globals_, weights, global_weights, derivations, before,
                     MOE_STAGES if moe else (), DENSE_MLP_STAGES if moe and family.dense_blocks else ())


def _with_biases(weights: dict[str, Entry], biases: Mapping[str, str]) -> dict[str, Entry]:
    """`weights` with the biases a family's checkpoints may have, each after its matrix and saying which option
    adds it; the first of each option's biases says too that a model without the option has none."""
    said: set[str] = set()
    for group, option in biases.items():
        previous = BIAS_AFTER[next(iter(BIASES[group]))]
        if previous not in weights:  # a mixture of experts' MLP has no dense biases
            continue
        for name, (dims, what) in BIASES[group].items():
            note = option if option in said else f"{option}; absent where the model has none"
            said.add(option)
            previous = BIAS_AFTER.get(name, previous)
            what = f"{what} ({note})" + (KV_SLICE if "G" in dims else "")
            weights = _with(weights, after=previous, add={name: (dims, what)})
            previous = name
    return weights


# One table per family (`families.FAMILIES`, in its order), derived from its declaration.
FAMILY_NAMES: dict[str, NameTable] = {name: name_table(f) for name, f in FAMILIES.items()}

# -- the generic family: any transformers decoder, recorded through its own modules (bridge/) --------------
# The stages such a model shows: those names.py's families share keep their meaning; the rest (the mask as
# applied, a sink, a mixer that is not attention) are the bridge's. Dims as above; Dv where values have a width
# of their own. A layer answers only the stages it has (an attention layer's attn.*, a short convolution's
# conv.*): `GenericConfig.activation_names`.
# What the bridge records (hooks on transformers' modules, its attention function): the stages every generic model
# may answer, before the lens adds its mechanisms'.
GENERIC_RECORDED_BLOCK_ACTIVATIONS: dict[str, Entry] = {
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
    "attn.sink_weight": (("H", "T"), "the weight the sink takes from each query: the softmax's sink column, which "
                         "eager computes and drops (1 - the pattern's row sum, to rounding)"),
    "attn.z": (("H", "T", "Dv"), Z_BEFORE_PROJECTION),
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

GENERIC_RECORDED_GLOBAL_ACTIVATIONS: dict[str, Entry] = {
    "embed.token": (("T", "D"), "the token embedding module's output (scaled where that module scales)"),
    "ln_final.out": (("T", "D"), "the input of the unembedding: the final norm's output"),
    "logits": (("T", "V"), "the model's logits, as its forward returns them (soft-capped where the model caps)"),
}


def _merged_order(orders: list[tuple[str, ...]]) -> list[str]:
    """One order that keeps each of `orders` (stages that several mechanisms share keep each mechanism's order), a stage
    as early as they allow, ties by first mention."""
    first = list(dict.fromkeys(s for order in orders for s in order))
    before: dict[str, set[str]] = {s: set() for s in first}
    for order in orders:
        for a, b in zip(order, order[1:], strict=False):
            before[b].add(a)
    out: list[str] = []
    while len(out) < len(first):
        ready = next((s for s in first if s not in out and before[s] <= set(out)), None)
        if ready is None:
            raise ValueError(f"the mechanisms order their stages in a cycle: {orders}")
        out.append(ready)
    return out


def with_lenses(recorded: dict[str, Entry], lenses: tuple[LensNames, ...]) -> dict[str, Entry]:
    """`recorded` with every lens's stages after the recorded stage its declaration names. A stage that several
    lenses answer (a router's logits) has one entry: its description where they agree, else each, saying whose; the
    other stages of lenses that share names (the two mixtures') say whose they are too."""
    said: dict[str, list[tuple[LensNames, Entry]]] = {}
    for lens in lenses:
        for name, entry in lens.entries.items():
            said.setdefault(name, []).append((lens, entry))
    sharing = [lens for lens in lenses if any(len(said[n]) > 1 for n in lens.entries)]
    unplaced = {a for lens in lenses for a in lens.after} - set(recorded)
    if unplaced:
        raise ValueError(f"lens stages placed after stages the bridge does not record: {sorted(unplaced)}")
    out: dict[str, Entry] = {}
    for stage, entry in recorded.items():
        out[stage] = entry
        for name in _merged_order([lens.after[stage] for lens in lenses if stage in lens.after]):
            if name in recorded:
                raise ValueError(f"{name} is recorded by the bridge and derived by a lens")
            dims = {e[0] for _, e in said[name]}
            if len(dims) > 1:
                raise ValueError(f"the lenses give {name} different dims: {sorted(dims)}")
            texts = list(dict.fromkeys(e[1] for _, e in said[name]))
            if len(texts) == 1 and len(said[name]) == 1 and any(said[name][0][0] is x for x in sharing):
                texts = [f"{texts[0]} ({said[name][0][0].models})"]
            out[name] = (dims.pop(), texts[0] if len(texts) == 1 else "; ".join(
                f"{text} ({lens.models})" for lens, (_, text) in said[name]))
    return out


# The generic tables: what the bridge records, and what each mechanism our code explains derives on access
# (name_options.LENS_NAMES: Gated DeltaNet, multi-head latent attention, the norms after each sublayer, the mixtures
# of experts of DeepSeek-V3 and gpt-oss, Gemma 4's per-layer inputs)
GENERIC_BLOCK_ACTIVATIONS: dict[str, Entry] = with_lenses(GENERIC_RECORDED_BLOCK_ACTIVATIONS, LENS_NAMES)
GENERIC_GLOBAL_ACTIVATIONS: dict[str, Entry] = with_lenses(GENERIC_RECORDED_GLOBAL_ACTIVATIONS, GLOBAL_LENS_NAMES)

GENERIC_NAMES = NameTable(GENERIC_BLOCK_ACTIVATIONS, GENERIC_GLOBAL_ACTIVATIONS, {}, {}, {}, ("embed.token",))
# Every table by family: the families with code of their own, and "generic" (any transformers decoder).
NAME_TABLES: dict[str, NameTable] = {**FAMILY_NAMES, "generic": GENERIC_NAMES}

# How `head` (query head h of the model's H) slices a tensor: at the first of these dims the tensor
# has, by the rule named. "query_head": index h itself; "kv_head_of_query": the key/value head that
# query head h reads under grouped-query attention, `kv_head_of(h, H, G)`. The server's slicing and the
# offline snapshot page (web/src/snapshot/slicing.ts, from the generated TypeScript) both follow it.
HEAD_DIMS: dict[str, str] = {"H": "query_head", "G": "kv_head_of_query"}
# `position` slices at the first of these dims a tensor has: its query positions, else its key positions.
POSITION_DIMS: tuple[str, ...] = ("T", "S")


def kv_head_of(head: int, n_head: int, n_kv_heads: int) -> int:
    """The key/value head that query head `head` (0 <= head < n_head) reads: query heads
    g*H/G .. (g+1)*H/G - 1 share key/value head g."""
    return head // (n_head // n_kv_heads)


def names_for(family: str) -> NameTable:
    if family not in NAME_TABLES:
        raise KeyError(f"unknown model family {family!r}; expected one of {sorted(NAME_TABLES)}")
    return NAME_TABLES[family]


def block_name(layer: int, suffix: str) -> str:
    """`block_name(3, "attn.pattern") -> "blocks.3.attn.pattern"`."""
    if not any(suffix in t.block_activations or suffix in t.block_weights for t in NAME_TABLES.values()):
        raise KeyError(f"unknown block stage {suffix!r}")
    return f"blocks.{layer}.{suffix}"


def block_part(layer: int) -> str:
    """`block_part(3) -> "blocks.3"`: block 3 as one part of the model (a recorder's scope, a device map's key)."""
    return f"blocks.{layer}"


def blocks_label(layers: str, suffix: str) -> str:
    """A stage of several blocks, as a list shows it: `blocks_label("*", "attn.q") -> "blocks.*.attn.q"`,
    `blocks_label("1-5", "attn.q") -> "blocks.1-5.attn.q"`."""
    return f"blocks.{layers}.{suffix}"


def block_prefix(layer: int) -> str:
    """`block_prefix(3) -> "blocks.3."`: what every name of block 3 begins with (a recorder's scope)."""
    return f"blocks.{layer}."


def layer_of(name: str) -> int | None:
    """The block a full name belongs to (`"blocks.3.attn.pattern" -> 3`), in any family's scheme; None for a name
    outside the blocks (or no name at all: the caller refuses those in a sentence of its own)."""
    parts = name.split(".", 2)
    return int(parts[1]) if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit() else None


@dataclass(frozen=True)
class ParsedName:
    layer: int | None  # None for names outside the blocks
    suffix: str  # the stage, e.g. "attn.pattern", or the whole name for global ones


def parse_name(name: str, family: str = "gpt2") -> ParsedName:
    """Split a full name into its layer and stage; raise KeyError for names outside the family's scheme."""
    t = names_for(family)
    if name.startswith("blocks."):
        parts = name.split(".", 2)
        if len(parts) != 3 or not parts[1].isdigit() or (
                parts[2] not in t.block_activations and parts[2] not in t.block_weights):
            raise KeyError(f"unknown name {name!r}")
        return ParsedName(int(parts[1]), parts[2])
    if name in t.global_activations or name in t.global_weights:
        return ParsedName(None, name)
    raise KeyError(f"unknown name {name!r}")


def activation_names(n_layer: int, family: str = "gpt2", dense_layers: tuple[int, ...] = ()) -> list[str]:
    """All activation names of a model with `n_layer` blocks, in computation order; in a mixture of experts,
    the blocks `dense_layers` have a dense MLP's stages and the others the experts'."""
    t = names_for(family)
    out = list(t.globals_before_blocks)
    for i in range(n_layer):
        out += [f"blocks.{i}.{s}" for s in t.block_stages(i not in dense_layers)]
    out += [n for n in t.global_activations if n not in t.globals_before_blocks]
    return out


def weight_names(n_layer: int, family: str = "gpt2") -> list[str]:
    """All weight names of a model with `n_layer` blocks (for the Llama family, biases only where
    the model has them: see the model's `weight_names`)."""
    t = names_for(family)
    after = ("ln_final.w", "ln_final.b", "unembed.W_U")
    out = [n for n in t.global_weights if n not in after]
    for i in range(n_layer):
        out += [f"blocks.{i}.{s}" for s in t.block_weights]
    out += [n for n in after if n in t.global_weights]
    return out


def is_weight(suffix: str, family: str = "gpt2") -> bool:
    """Whether a stage (`attn.W_Q`) or a global name (`embed.W_E`) is a weight of the family."""
    t = names_for(family)
    return suffix in t.block_weights or suffix in t.global_weights


def describe(name: str, family: str = "gpt2") -> tuple[tuple[str, ...], str]:
    """(dims, description) of any activation or weight name."""
    t = names_for(family)
    p = parse_name(name, family)
    if p.layer is None:
        return t.global_activations.get(name) or t.global_weights[name]
    return t.block_activations.get(p.suffix) or t.block_weights[p.suffix]
