"""Request and response bodies of the JSON API's core (trace, tensors, next token, generate, models).
The field names are the API's contract; the TypeScript types of the web app are generated from these
models (see `server/codegen.py`). Plain pydantic: the domain builds these, the server only routes them."""

from __future__ import annotations

import unicodedata
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic import Strict as PydStrict

from .errors import ERROR_CODES, InputError
from .limits import MAX_TEMPERATURE, MAX_TENSORS_PER_REQUEST, MAX_TEXT_CHARS, MAX_TOP_N
from .names import NAME_TABLES

MAX_IDS = 4096

TensorDtype = Literal["float16", "float32"]
# the codes of errors.ERROR_CODES, as a named type of the schema (and of the generated TypeScript)
ErrorCode = StrEnum("ErrorCode", {code: code for code in ERROR_CODES})  # type: ignore[misc]


class Strict(BaseModel):
    """A request body: unknown fields are refused, so a misspelt option is an error, not a silent default;
    values are taken as the schema types them (strict), so `true` is not the number 1 nor "1" a number."""

    model_config = ConfigDict(extra="forbid", strict=True)


# a model by its name on this server; None: the server's default model
ModelName = Annotated[str, Field(max_length=200)] | None
MAX_TOKEN_CHARS = 100
# a token id or a word; the id must be a JSON number (strict), so a too-long string of digits is refused,
# not read as an id
TokenArg = Annotated[int, PydStrict()] | Annotated[str, Field(min_length=1, max_length=MAX_TOKEN_CHARS)]


def check_text(text: str) -> str:
    """Reject what no tokenizer should see: lone surrogates (not valid UTF-8) and control
    characters other than tab, newline and carriage return."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError("the text is not valid Unicode (it contains a lone surrogate)",
                         code="text_not_unicode") from None
    for i, ch in enumerate(text):
        if ch not in "\t\n\r" and unicodedata.category(ch) == "Cc":
            raise InputError(f"the text contains the control character U+{ord(ch):04X} at index {i}; remove it",
                             code="text_control_char", char=f"U+{ord(ch):04X}", index=i)
    return text


class SamplingIn(Strict):
    """How the next token is chosen. Temperature 0 means greedy (always the most likely token)."""

    temperature: Annotated[float, Field(ge=0, le=MAX_TEMPERATURE, allow_inf_nan=False)] = 1.0
    top_k: Annotated[int, Field(ge=1)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    seed: Annotated[int, Field(ge=0, lt=2**63)] | None = None


class TensorSpec(Strict):
    """One tensor (or a slice of it) by its name in the shared name scheme."""

    name: Annotated[str, Field(min_length=1, max_length=64, examples=["blocks.0.attn.pattern"])]
    # index into the H dim (query heads); a tensor with a G dim instead (keys, values) is sliced at
    # key/value head head // (H / G), the one that query head reads
    head: Annotated[int, Field(ge=0)] | None = None
    # index into the T dim (the query position); negative counts from the end, -1 is the last token
    position: Annotated[int, Field(ge=-MAX_IDS, lt=MAX_IDS)] | None = None
    row: Annotated[int, Field(ge=0)] | None = None  # weights only: index into the first non-head dim
    # activations whose last dims are (T, S) with nothing above the diagonal (a causal pattern): send each
    # row's keys up to its own position only, about half the values (the whole tensor where an entry above is
    # not 0: the answer's `triangle` says which)
    triangle: bool = False
    dtype: TensorDtype = "float16"


class InputIn(Strict):
    """A text, or token ids (what generation continues from: re-tokenizing decoded text can merge
    tokens). Exactly one of the two."""

    model: ModelName = None
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)] | None = None
    ids: Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=MAX_IDS)] | None = None
    truncate: bool = False  # keep the last tokens of an over-long input instead of refusing it

    @field_validator("text")
    @classmethod
    def _text_ok(cls, v: str | None) -> str | None:
        return None if v is None else check_text(v)

    @model_validator(mode="after")
    def _one_input(self) -> InputIn:
        if (self.text is None) == (self.ids is None):
            raise ValueError("give exactly one of `text` or `ids`")
        if self.text is not None and self.text == "":
            raise InputError("the text is empty: type at least one character", code="text_empty")
        if self.ids is not None and not self.ids:
            raise InputError("`ids` is empty: give at least one token id", code="ids_empty")
        return self


class TraceIn(InputIn):
    sampling: SamplingIn = SamplingIn()
    top_n: Annotated[int, Field(ge=1, le=MAX_TOP_N)] = 10
    include: Annotated[list[TensorSpec], Field(max_length=MAX_TENSORS_PER_REQUEST)] = []


class TensorsIn(InputIn):
    tensors: Annotated[list[TensorSpec], Field(min_length=1, max_length=MAX_TENSORS_PER_REQUEST)]


class NextTokenIn(InputIn):
    sampling: SamplingIn = SamplingIn()
    top_n: Annotated[int, Field(ge=1, le=MAX_TOP_N)] = 10


class GenerateIn(NextTokenIn):
    token_id: Annotated[int, Field(ge=0)] | None = None  # the token to append; None: sample one
    include: Annotated[list[TensorSpec], Field(max_length=MAX_TENSORS_PER_REQUEST)] = []


class WeightIn(Strict):
    model: ModelName = None
    tensors: Annotated[list[TensorSpec], Field(min_length=1, max_length=MAX_TENSORS_PER_REQUEST)]


# -- responses -------------------------------------------------------------------------------------


# the name of a model family, as its declaration has it (gpt2, llama, qwen3, gemma3), or "generic": any decoder
# that runs through transformers' own modules (names.NAME_TABLES)
FamilyName = Literal[tuple(NAME_TABLES)]  # type: ignore[valid-type]


class LatentCacheOut(BaseModel):
    """What the KV cache of a model's multi-head latent attention layers holds for one sequence
    (`bridge.latent_lens.LatentMemory`): a latent and a rotary key per token and layer, against multi-head and
    grouped-query attention of the same heads and widths; per token and layer, and over those layers after each
    number of `tokens`, in the model's dtype."""

    layers: list[int]  # the latent-attention layers
    n_heads: int
    kv_lora_rank: int  # d_c: the latent's width
    qk_rope_head_dim: int  # d_R: the rotary key's, shared by every head
    qk_nope_head_dim: int  # a head's key width without position
    v_head_dim: int  # a head's value width
    gqa_heads: int  # the key/value heads of the grouped-query attention compared with
    mla_per_token: int  # bytes one token costs one layer
    mha_per_token: int
    gqa_per_token: int
    tokens: list[int]  # 1k, 32k and 1M
    mla_bytes: list[int]  # the latent-attention layers' cache after each of `tokens`
    mha_bytes: list[int]
    gqa_bytes: list[int]
    dtype: str


class StateMemoryOut(BaseModel):
    """What a model with Gated DeltaNet layers keeps between tokens, for one sequence
    (`bridge.mechanisms.HybridMemory`): its DeltaNet layers' states and convolution windows, a fixed size, against
    its full-attention layers' KV cache after each number of `tokens`."""

    linear_layers: list[int]  # the Gated DeltaNet layers
    full_attention_layers: list[int]  # the attention layers without a local window
    state_bytes: int  # every DeltaNet layer's states (H x Dk x Dv each), in float32 as transformers keeps them
    conv_bytes: int  # every DeltaNet layer's convolution window (kernel - 1 positions of its q, k, v channels)
    tokens: list[int]  # 1k, 32k and 1M
    kv_cache_bytes: list[int]  # the full-attention layers' keys and values after each of `tokens`
    dtype: str  # the model's: the convolution windows' and the KV cache's


class PerLayerOut(BaseModel):
    """A model with per-layer inputs and KV sharing (Gemma 4; `bridge.per_layer_lens.PerLayerMemory`): the values
    each layer reads per token, which layers read them, and which layer's keys and values each layer attends with,
    with the KV cache that saves after each number of `tokens`."""

    d_per_layer: int  # P: the per-layer values each layer reads per token
    per_layer_layers: list[int]  # the layers that read a per-layer input (each answers per_layer.* by the lens)
    per_layer_table_params: int  # the per-layer table's parameters (looked up, never multiplied)
    kv_sources: list[int]  # per layer: the layer whose keys and values it attends with (itself, or an earlier one)
    tokens: list[int]  # 1k, 32k and 1M
    kv_unshared_bytes: list[int]  # were every layer to keep its own keys and values
    kv_shared_bytes: list[int]  # as the model keeps them: a layer that reuses another's keeps none
    kv_saved_bytes: list[int]
    dtype: str  # the model's


class CapabilitiesOut(BaseModel):
    """What a model's blocks are made of and which options it has: what the views branch on. The first
    fields are its family's (`families/`: the declaration's `Architecture`); the others this model's. A model
    that runs through transformers' own modules (`runs` "transformers") has no declaration: the family's fields
    are null for it (its norms, positions and MLP are transformers' code, not named here), and the per-layer
    fields at the end say what each of its layers is and records."""

    norm: Literal["layer", "rms"] | None  # LayerNorm (mean, variance, scale, shift) or RMSNorm (rms, scale)
    norm_offset: bool | None  # RMSNorm scales by 1 + weight (Gemma)
    positions: Literal["learned", "rope"] | None  # a position embedding table, or rotary positions inside attention
    qkv: Literal["fused", "split"] | None  # one input projection for q, k and v (GPT-2), or three
    # up, GELU, down; or down(act(gate) * up); or a mixture of experts: a router sends each token to top_k of
    # n_experts gated MLPs and adds their outputs, weighted (Mixtral, Qwen3-MoE, OLMoE)
    mlp: Literal["gelu", "gated", "moe"] | None
    qk_norm: bool | None  # an RMSNorm over the queries and keys before the rotation (Qwen3, Gemma 3, OLMoE)
    # QK-norm over each head's query and key ("head"), or over all heads' together as projected ("projection": OLMoE)
    qk_norm_scope: Literal["head", "projection"] | None = "head"
    sandwich_norm: bool | None  # norms after attention and after the MLP too (Gemma)
    embed_scale: bool | None  # the token embedding times sqrt(d_model) (Gemma)
    kv_groups: int  # query heads per key/value head (1: each query head has its own)
    local_window: int | None  # keys a local layer's query sees, itself included; None: no local layers
    # each block's attention; None for a layer without attention (a model that runs through transformers)
    layer_types: list[Literal["full_attention", "sliding_attention"] | None]
    attn_scale: float | None  # what the scores are multiplied by: 1 / sqrt(head_dim) or 1 / sqrt(query_pre_attn_scalar)
    rope_local_theta: float | None  # the local layers' own rotary base (Gemma 3)
    # mixtures of experts (mlp "moe"); None / [] / false for a dense model
    n_experts: int | None = None  # experts per block with experts
    top_k: int | None = None  # experts each token is sent to
    d_expert: int | None = None  # an expert's hidden width
    norm_topk_prob: bool = False  # the chosen experts' weights renormalised to sum to 1 (Mixtral: always)
    moe_layers: list[int] = []  # the blocks whose MLP is a mixture of experts (Qwen3-MoE may keep some dense)
    # how the router chooses and weighs: "softmax" (a softmax over every expert, its top_k chosen: Mixtral, Qwen3-MoE,
    # OLMoE), "sigmoid_grouped" (DeepSeek-V3: a sigmoid score per expert, the top_k of the best groups chosen by
    # score + a per-expert bias, the weights from the scores alone times routed_scaling), "softmax_topk" (gpt-oss:
    # the top_k logits, a softmax over them alone); None: no experts, or none whose router the trace shows
    router: Literal["softmax", "sigmoid_grouped", "softmax_topk"] | None = None
    n_groups: int | None = None  # sigmoid_grouped: the experts' groups (n_group)
    topk_groups: int | None = None  # sigmoid_grouped: the groups a token's experts may come from (topk_group)
    routed_scaling: float | None = None  # sigmoid_grouped: the routed weights' factor (routed_scaling_factor)
    d_shared: int | None = None  # the shared expert's width (every token goes through it); None: no shared expert
    swiglu_limit: float | None = None  # softmax_topk: the experts' clamp (gate <= limit, up in [-limit, limit])
    swiglu_alpha: float | None = None  # softmax_topk: the SwiGLU's slope, act = gate * sigmoid(alpha * gate)
    # which way the model runs: "own" (a family with code of our own, every intermediate named) or
    # "transformers" (transformers' own modules, recorded at their inputs and outputs: generic.GenericModel)
    runs: Literal["own", "transformers"] = "own"
    # per layer: its token mixers' kinds ("attention", "linear_attention", "short_conv", "state_space", "mixer")
    mixers: list[list[str]] = []
    windows: list[int | None] = []  # per layer: the keys a query of its attention reads (None: all, or no attention)
    attention_layers: list[int] = []  # the layers with attention (every layer of an own-code model)
    resid_mid: list[bool] = []  # per layer: whether it has a residual point between its mixer and its MLP
    sinks: list[bool] = []  # per layer: whether its attention has a learned sink logit (gpt-oss)
    # per layer: the stages its trace records (names.GENERIC_BLOCK_ACTIVATIONS), for a model that runs through
    # transformers; None for an own-code model, whose family's table names every stage of every layer
    layer_stages: list[list[str]] | None = None
    # per layer: the mechanism our own code explains its mixer by (bridge/mechanisms.py: "gated_deltanet"; None where
    # there is none, and for every layer of an own-code model)
    mechanisms: list[str | None] = []
    # a model with Gated DeltaNet layers: their fixed memory against its full-attention layers' KV cache
    state_memory: StateMemoryOut | None = None
    # a model with multi-head latent attention (DeepSeek-V3): its widths and its cache against MHA's and GQA's
    kv_latent: LatentCacheOut | None = None
    # a model with per-layer inputs (Gemma 4): their width and layers, and its KV sharing
    per_layer: PerLayerOut | None = None
    # per layer: [attention's, the MLP's] write bound sqrt(D) * max|gamma| where the layer norms what each sublayer
    # writes before adding it (OLMo 2, 3: its writes are ln1_post.out and ln2_post.out), else None
    write_bounds: list[list[float] | None] = []


class ModelConfigOut(BaseModel):
    n_layer: int
    n_head: int
    n_embd: int
    head_dim: int
    d_mlp: int | None  # None: a model that runs through transformers whose config states no MLP width
    vocab_size: int
    block_size: int
    layer_norm_epsilon: float | None  # None where the model runs through transformers (its norms are its own)
    activation: str | None  # the MLP's activation; None where the model runs through transformers
    # the family's name (families.FAMILIES): gpt2, llama (Llama, Qwen2, Mistral), qwen3, gemma3, ...; "generic" for
    # a model that runs through transformers' own modules
    family: str = "gpt2"
    model_type: str = "gpt2"  # HF's model_type: "gpt2", "llama", "qwen2", "mistral", "qwen3", "qwen3_5_text", ...
    architecture: str | None = None  # transformers' class a model that runs through it is ("Qwen3_5ForCausalLM")
    n_kv_heads: int = 0  # key/value heads; n_head // n_kv_heads query heads share each (GQA)
    capabilities: CapabilitiesOut
    rope_theta: float | None = None  # base of the rotary frequencies (rope models; their global layers)
    rope_scaling: str | None = None  # "llama3" or "linear" when the frequencies are rescaled
    # the weights' options (None where the model runs through transformers: its weights are not named here)
    tie_word_embeddings: bool | None = True  # the unembedding is the token embedding's transpose
    qkv_bias: bool | None = True
    out_bias: bool | None = True  # a bias on the attention's output projection
    mlp_bias: bool | None = True  # biases in the MLP
    dtype: str = "float32"  # weights' dtype: "float32", or "bfloat16" when loaded so
    file_dtype: str | None = None  # the type the checkpoint's file stores the weights in ("float16"); None if unknown


class ModelInfo(BaseModel):
    name: str
    source: str  # "builtin", "local", "hub", or "given" (passed in by the program)
    loaded: bool
    default: bool
    config: ModelConfigOut | None = None  # known once loaded
    n_params: int | None = None
    # the parameters one token's forward pass uses: all but the experts it is not sent to (= n_params when dense)
    n_active_params: int | None = None
    # the parameters of the experts, every block's together (0 for a dense model)
    n_expert_params: int | None = None


class ModelList(BaseModel):
    default: str
    models: list[ModelInfo]


class TokenOut(BaseModel):
    id: int
    text: str  # the token's own text, leading space kept; a byte of a split character as <0xF0>
    raw: str  # the vocabulary entry as stored, e.g. "Ġthe"


class CharGroupOut(BaseModel):
    """Tokens [start, end) that split characters between them (e.g. the four bytes of an emoji)."""

    start: int
    end: int
    text: str  # what they make together, e.g. "🎉"


class EncodedTensor(BaseModel):
    name: str
    head: int | None = None
    # grouped-query attention: the key/value head a tensor with a G dim was sliced at for `head`
    kv_head: int | None = None
    position: int | None = None
    row: int | None = None
    # `data` holds the lower triangle of the last two dims only, row after row (row i: keys 0..S - T + i); the
    # entries above it are 0. `shape` is the whole tensor's
    triangle: bool = False
    # the dims left after slicing, from the name scheme (T, S, H, G, D, Dh, R, M, V, P, E, K, ...)
    dims: list[str]
    shape: list[int]
    dtype: TensorDtype
    data: str  # base64 of little-endian values, row-major


class Candidate(BaseModel):
    id: int
    text: str
    logit: float
    scaled_logit: float  # logit / temperature (the logit itself when greedy)
    kept: bool  # survived the top-k and top-p cuts
    prob: float  # after renormalising over the kept tokens
    prob_no_cut: float  # softmax(logits / T) over the whole vocabulary, before the cuts


class Histogram(BaseModel):
    lo: float
    hi: float
    counts: list[int]  # equal-width bins from lo to hi


class SampledOut(BaseModel):
    id: int
    text: str
    prob: float
    logit: float


class NextTokenOut(BaseModel):
    temperature: float
    top_k: int | None
    top_p: float | None
    seed: int  # the seed used (chosen by the server when none was given), so a draw can be repeated
    greedy: bool
    position: int  # the position whose logits these are (the last one)
    candidates: list[Candidate]  # the top_n tokens by logit, best first
    n_kept: int  # how many vocabulary entries survived the cuts
    sampled: SampledOut
    logit_histogram: Histogram  # all vocabulary logits


class AttentionOverview(BaseModel):
    """All layers' and heads' patterns as small thumbnails (exact up to 8-bit rounding when the text
    has at most `size` tokens; pooled into `size` groups of positions beyond that)."""

    n_layer: int  # the thumbnails' layers: len(layers)
    n_head: int
    size: int  # thumbnails are size x size
    pooled: bool
    encoding: Literal["uint8-lower-triangle"]  # value * 255, row i holds columns 0..i
    data: str  # base64, (n_layer, n_head, size*(size+1)/2)
    # the model's layers the thumbnails are of, in order: its attention layers (every layer of an own-code model;
    # a convolution, state-space or linear-attention layer has no pattern to draw)
    layers: list[int] = []


class PassCostOut(BaseModel):
    """The arithmetic of the trace's forward pass over its tokens (analysis/cost.py pass_gflop: the weight
    products, the attention scores and the unembedding, 2 FLOPs per multiply-add). In a mixture of experts
    `gflop` counts the experts each token was sent to, `gflop_all_experts` what the pass would cost if every
    token ran every expert (equal to `gflop` for a dense model)."""

    n_tokens: int
    gflop: float
    gflop_all_experts: float


class TraceOut(BaseModel):
    model: str
    text: str
    token_ids: list[int]
    tokens: list[TokenOut]
    char_groups: list[CharGroupOut]  # runs of tokens that together make whole characters
    start: int  # position of the first token (0 for a full trace)
    truncated: bool  # the input was cut to the last context-length tokens
    context_length: int
    config: ModelConfigOut
    next: NextTokenOut
    attention: AttentionOverview
    resid_norms: EncodedTensor  # (L+1, T): |x| of the residual stream entering each block, and the output
    tensors: list[EncodedTensor]  # what `include` asked for, in order
    computed_positions: list[int]  # [first, last + 1) of the positions computed for this answer
    timings_ms: dict[str, float]
    cost: PassCostOut | None = None  # the forward pass's arithmetic over the trace's tokens


class TensorsOut(BaseModel):
    model: str
    token_ids: list[int]
    tensors: list[EncodedTensor]


class GenerateOut(BaseModel):
    token: SampledOut  # the appended token
    chosen: bool  # True when the client picked it, False when it was sampled
    trace: TraceOut  # the trace of the longer text (only its new position was computed)


class NameEntry(BaseModel):
    dims: list[str]
    description: str


class NamesOut(BaseModel):
    family: str = "gpt2"
    block_activations: dict[str, NameEntry]
    global_activations: dict[str, NameEntry]
    block_weights: dict[str, NameEntry]
    global_weights: dict[str, NameEntry]
    derived: dict[str, str]


class CacheStats(BaseModel):
    traces: int
    mb: float
    max_mb: int
    hits: int
    misses: int


class HealthOut(BaseModel):
    status: Literal["ok"]
    pending: int  # model calls running or waiting
    pending_light: int
    cache: CacheStats


class ErrorOut(BaseModel):
    """An error answer. `detail` is the English sentence; `code` (errors.ERROR_CODES) and `params` are for
    programs: the web app shows its own sentence for the code in the learner's language."""

    detail: str  # what went wrong and what to do, in a sentence
    code: ErrorCode  # what went wrong, as a stable name
    params: dict[str, str | int | float] = {}  # the values the code's sentence names (ERROR_CODES[code].params)
    errors: list[dict] | None = None  # field-level details for invalid requests
