"""Model configurations: one frozen dataclass for every decoder family (GPT-2, the Llama family, Qwen3,
Gemma 3, and the mixtures of experts Mixtral, Qwen3-MoE and OLMoE: `families/`), plus the known GPT-2
presets. The family's declaration maps HF's config.json to these fields and back, and says which parts
build the model."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from .families import Architecture, Family, family_for_hf, family_of_model_type
from .families.hf import FULL, SLIDING
from .names import NameTable, activation_names, names_for

# The largest width, depth, vocabulary or context a config may state: far beyond any model, but small
# enough that sizes computed from it stay exact integers. Whether a model fits is decided at load time,
# against its weight files and the machine's memory (loading/budget.py).
MAX_DIMENSION = 2**40

SUPPORTED_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu", "silu")
LAYER_TYPES = (FULL, SLIDING)  # global attention, or a local window (HF's names)


@dataclass(frozen=True)
class RopeScaling:
    """A stretch of the rotary frequencies. "llama3" (Llama 3.1): slow rotations (wavelength above
    original_max_positions / low_freq_factor) are divided by `factor`, fast ones (below
    original_max_positions / high_freq_factor) kept, those between blended. "linear" (Gemma 3's global
    layers): every frequency divided by `factor`."""

    factor: float
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    original_max_position_embeddings: int | None = None
    rope_type: str = "llama3"

    def __post_init__(self) -> None:
        _check_positive_real("rope scaling factor", self.factor)
        if self.rope_type == "linear":
            return
        if self.rope_type != "llama3":
            raise ValueError(f"rope type {self.rope_type!r} is not supported (supported: default, linear, llama3)")
        for name in ("low_freq_factor", "high_freq_factor"):
            _check_positive_real(f"rope scaling {name}", getattr(self, name))
        assert self.low_freq_factor is not None and self.high_freq_factor is not None
        if not self.low_freq_factor < self.high_freq_factor:
            raise ValueError(f"rope scaling low_freq_factor ({self.low_freq_factor}) must be below "
                             f"high_freq_factor ({self.high_freq_factor})")
        _check_whole("rope scaling original_max_position_embeddings", self.original_max_position_embeddings)

    def to_hf(self) -> dict[str, Any]:
        """The fields of HF's `rope_parameters` that say this."""
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class DecoderConfig:
    """Shape and options of a decoder of any family. Field names follow nanoGPT; HF's names are mapped by
    the family's declaration (`from_hf`, `to_hf`)."""

    vocab_size: int = 50257  # number of tokens; GPT-2's <|endoftext|> is the last id
    block_size: int = 1024  # longest context: rows in the position embedding (HF: n_positions)
    n_layer: int = 12  # number of transformer blocks
    n_head: int = 12  # attention heads per block
    n_embd: int = 768  # width of the residual stream, d_model
    d_mlp: int | None = None  # MLP hidden width; None: 4 * n_embd as in GPT-2 (filled in at construction)
    layer_norm_epsilon: float = 1e-5  # added to the variance (or mean square) inside every norm
    activation: str = "gelu_new"  # GPT-2 uses the tanh approximation of GELU
    dropout: float = 0.0  # used only in training; every dropout is inactive at inference
    model_type: str = "gpt2"  # HF's model_type; says the family (`families.BY_MODEL_TYPE`)
    n_kv_heads: int | None = None  # key/value heads (grouped-query attention); None: one per query head
    head_dim: int | None = None  # head width when the config names it; None: n_embd // n_head
    rope_theta: float = 10000.0  # base of the rotary frequencies (of the global layers, where they differ)
    rope_scaling: RopeScaling | None = None  # a stretch of the rotary frequencies, if any
    tie_word_embeddings: bool = True  # the unembedding shares the token embedding matrix
    qkv_bias: bool = True  # biases on the query, key and value projections (GPT-2, Qwen2)
    out_bias: bool = True  # bias on the attention output projection (GPT-2)
    mlp_bias: bool = True  # biases in the MLP (GPT-2)
    # per block, "full_attention" (every earlier position) or "sliding_attention" (a local window); None: all full
    layer_types: tuple[str, ...] | None = None
    sliding_window: int | None = None  # the keys a local layer's query sees, itself included
    rope_local_theta: float | None = None  # rotary base of the local layers, where they have their own (Gemma 3)
    query_pre_attn_scalar: float | None = None  # scores are scaled by 1 / sqrt(this) (Gemma); None: head_dim
    # mixtures of experts (families whose architecture's mlp is "moe"): each token goes to top_k of n_experts
    n_experts: int | None = None  # experts per block with experts; None: a dense MLP
    top_k: int | None = None  # experts each token is sent to (HF: num_experts_per_tok)
    d_expert: int | None = None  # an expert's hidden width; None: d_mlp (Qwen3-MoE: moe_intermediate_size)
    norm_topk_prob: bool = False  # the chosen experts' probabilities renormalised to sum to 1 (Mixtral: always)
    dense_layers: tuple[int, ...] = ()  # blocks with a dense gated MLP of width d_mlp instead (Qwen3-MoE's options)

    def __post_init__(self) -> None:
        decl = family_of_model_type(self.model_type)  # a ValueError naming the supported ones
        if isinstance(self.rope_scaling, dict):  # from `to_dict`
            object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
        if isinstance(self.layer_types, list):  # from `to_dict` via JSON
            object.__setattr__(self, "layer_types", tuple(self.layer_types))
        if isinstance(self.dense_layers, list):
            object.__setattr__(self, "dense_layers", tuple(self.dense_layers))
        # every number is checked before it is used: a zero head count would divide by zero below, a NaN
        # epsilon would load and then turn every forward pass into NaN
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            _check_whole(self._key(name), getattr(self, name))
        for name in ("d_mlp", "n_kv_heads", "head_dim", "sliding_window", "n_experts", "top_k", "d_expert"):
            if getattr(self, name) is not None:
                _check_whole(self._key(name), getattr(self, name))
        if self.head_dim is None and self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        # the derived sizes, filled in once: every reader sees whole numbers
        for name, default in (("d_mlp", 4 * self.n_embd), ("n_kv_heads", self.n_head),
                              ("head_dim", self.n_embd // self.n_head)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
        _check_positive_real(self._key("layer_norm_epsilon"), self.layer_norm_epsilon)
        _check_positive_real(self._key("rope_theta"), self.rope_theta)
        for name in ("rope_local_theta", "query_pre_attn_scalar"):
            if getattr(self, name) is not None:
                _check_positive_real(self._key(name), getattr(self, name))
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, int | float) or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be a number in [0, 1), got {self.dropout!r}")
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            raise ValueError(f"rope scaling must be an object, got {self.rope_scaling!r}")
        if self.activation not in SUPPORTED_ACTIVATIONS:
            raise ValueError(f"unsupported activation {self.activation!r}; expected one of {SUPPORTED_ACTIVATIONS}")
        assert self.n_kv_heads is not None and self.head_dim is not None
        if self.n_head % self.n_kv_heads != 0:
            raise ValueError(f"n_head ({self.n_head}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.layer_types is not None:
            if not isinstance(self.layer_types, tuple) or any(t not in LAYER_TYPES for t in self.layer_types):
                raise ValueError(f"layer_types must list {FULL!r} or {SLIDING!r} for each layer, "
                                 f"got {self.layer_types!r}")
            if len(self.layer_types) != self.n_layer:
                raise ValueError(f"layer_types lists {len(self.layer_types)} layers, but the model has "
                                 f"{self.n_layer}")
            if SLIDING in self.layer_types and self.sliding_window is None:
                raise ValueError("local layers need a sliding_window")
        if decl.arch.positions == "rope" and self.head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head width, got {self.head_dim}")
        self._check_experts(decl.arch.mlp == "moe")
        decl.check(self)

    def _check_experts(self, moe: bool) -> None:
        """A mixture of experts names its experts and how many each token gets, at most all of them; a dense
        model names none."""
        if not moe:
            if self.n_experts is not None or self.top_k is not None or self.d_expert is not None or self.dense_layers:
                raise ValueError(f"the {self.declaration.label} family has no experts: its MLP is dense")
            return
        if self.n_experts is None or self.top_k is None:
            raise ValueError(f"a mixture of experts needs {self._key('n_experts')} and {self._key('top_k')}")
        if self.top_k > self.n_experts:
            raise ValueError(f"{self._key('top_k')} ({self.top_k}) must be at most the number of experts, "
                             f"{self._key('n_experts')} ({self.n_experts})")
        if self.d_expert is None:
            object.__setattr__(self, "d_expert", self.d_mlp)
        if not isinstance(self.norm_topk_prob, bool):
            raise ValueError(f"norm_topk_prob must be true or false, got {self.norm_topk_prob!r}")
        if not isinstance(self.dense_layers, tuple) or any(
                isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.n_layer for i in self.dense_layers):
            raise ValueError(f"the blocks without experts must be block indices from 0 to {self.n_layer - 1}, "
                             f"got {list(self.dense_layers)!r}")
        if list(self.dense_layers) != sorted(set(self.dense_layers)):
            object.__setattr__(self, "dense_layers", tuple(sorted(set(self.dense_layers))))

    def _key(self, name: str) -> str:
        """A field's name as the family's config.json spells it, for messages."""
        return family_of_model_type(self.model_type).config_keys.get(name, name)

    # -- what the family says ------------------------------------------------------------------------

    @property
    def declaration(self) -> Family:
        """The family's declaration (`families/`): its parts, HF names and capabilities."""
        return family_of_model_type(self.model_type)

    @property
    def family(self) -> str:
        """The family's name: "gpt2", "llama" (Llama, Qwen2, Mistral), "qwen3", "gemma3", "mixtral", "qwen3_moe"
        or "olmoe"."""
        return self.declaration.name

    @property
    def arch(self) -> Architecture:
        """What the family's blocks are made of (norm kind, positions, attention options, MLP kind)."""
        return self.declaration.arch

    @property
    def names(self) -> NameTable:
        """The trace and weight names of the family (`names.FAMILY_NAMES`)."""
        return names_for(self.family)

    # -- per layer -------------------------------------------------------------------------------------

    def has_experts(self, layer: int) -> bool:
        """Whether block `layer`'s MLP is a mixture of experts (else a dense MLP)."""
        return self.arch.mlp == "moe" and layer not in self.dense_layers

    @property
    def moe_layers(self) -> list[int]:
        """The blocks whose MLP is a mixture of experts."""
        return [i for i in range(self.n_layer) if self.has_experts(i)]

    def layer_type(self, layer: int) -> str:
        """"full_attention" or "sliding_attention" (a local window) for block `layer`."""
        return FULL if self.layer_types is None else self.layer_types[layer]

    def window(self, layer: int) -> int | None:
        """The keys a query of block `layer` sees, itself included, when the layer is local; None: all before it."""
        return self.sliding_window if self.layer_type(layer) == SLIDING else None

    @property
    def attn_scale(self) -> float:
        """What the attention scores are multiplied by before the softmax: 1 / sqrt(head_dim), or
        1 / sqrt(query_pre_attn_scalar) where the config names it."""
        assert self.head_dim is not None
        return 1.0 / math.sqrt(self.query_pre_attn_scalar if self.query_pre_attn_scalar is not None
                               else self.head_dim)

    def rope_of(self, layer_type: str) -> tuple[float, RopeScaling | None]:
        """(base, scaling) of the rotary frequencies of a kind of layer: the local layers' own base where the
        family gives them one (Gemma 3, without scaling), else the model's."""
        if layer_type == SLIDING and self.rope_local_theta is not None:
            return self.rope_local_theta, None
        return self.rope_theta, self.rope_scaling

    # -- HF's config.json ----------------------------------------------------------------------------

    def to_hf(self) -> dict[str, Any]:
        """The `config.json` dict that transformers' class for the family reads."""
        return self.declaration.write_hf(self)

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> DecoderConfig:
        """Read an HF `config.json` of a supported family; refuse options that change the maths we
        implement (a ValueError in one sentence)."""
        return cls(**family_for_hf(hf).read_hf(hf))

    def activation_names(self) -> list[str]:
        """Every activation name a trace of this model answers, in computation order (`names.activation_names`)."""
        return activation_names(self.n_layer, self.family, self.dense_layers)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DecoderConfig:
        """From `to_dict`'s output, also as written before the fields' renames (n_inner, n_kv_head, d_head)."""
        d = {_RENAMED.get(k, k): v for k, v in d.items()}
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# fields saved under their old names (training runs, exported traces)
_RENAMED = {"n_inner": "d_mlp", "n_kv_head": "n_kv_heads", "d_head": "head_dim"}


def _check_whole(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIMENSION:
        raise ValueError(f"{name} must be a whole number from 1 to 2**40, got {value!r}")


def _check_positive_real(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number above 0, got {value!r}")


# The public GPT-2 checkpoints on the Hugging Face hub: shapes and download sizes (model.safetensors).
GPT2_PRESETS: dict[str, DecoderConfig] = {
    "gpt2": DecoderConfig(n_layer=12, n_head=12, n_embd=768),
    "gpt2-medium": DecoderConfig(n_layer=24, n_head=16, n_embd=1024),
    "gpt2-large": DecoderConfig(n_layer=36, n_head=20, n_embd=1280),
    "gpt2-xl": DecoderConfig(n_layer=48, n_head=25, n_embd=1600),
    "distilgpt2": DecoderConfig(n_layer=6, n_head=12, n_embd=768),
}
