"""Model configurations: one frozen dataclass for the decoder families (GPT-2; Llama, Qwen2 and Mistral,
which share one architecture), plus the known GPT-2 presets."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

# The largest width, depth, vocabulary or context a config may state: far beyond any model, but small
# enough that sizes computed from it stay exact integers. Whether a model fits is decided at load time,
# against its weight files and the machine's memory (loading/budget.py).
MAX_DIMENSION = 2**40

SUPPORTED_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu", "silu")

# HF model_type -> the architecture (`CausalLM` class) of its checkpoints. Llama, Qwen2 and Mistral are
# one family here ("llama"): RMSNorm, rotary positions, grouped-query attention, a gated SiLU MLP.
LLAMA_FAMILY_TYPES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "mistral": "MistralForCausalLM",
}
MODEL_TYPES = ("gpt2", *LLAMA_FAMILY_TYPES)


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3.1's frequency-dependent stretch of the rotary frequencies (`rope_type: "llama3"`):
    slow rotations (wavelength above original_max_positions / low_freq_factor) are divided by
    `factor`, fast ones (below original_max_positions / high_freq_factor) kept, those between blended."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self) -> None:
        for name in ("factor", "low_freq_factor", "high_freq_factor"):
            _check_positive_real(f"rope scaling {name}", getattr(self, name))
        if not self.low_freq_factor < self.high_freq_factor:
            raise ValueError(f"rope scaling low_freq_factor ({self.low_freq_factor}) must be below "
                             f"high_freq_factor ({self.high_freq_factor})")
        _check_whole("rope scaling original_max_position_embeddings", self.original_max_position_embeddings)


@dataclass(frozen=True)
class DecoderConfig:
    """Shape of a GPT-2-family decoder. Field names follow nanoGPT; HF's names are mapped in `from_hf`."""

    vocab_size: int = 50257  # number of tokens; GPT-2's <|endoftext|> is the last id
    block_size: int = 1024  # longest context: rows in the position embedding (HF: n_positions)
    n_layer: int = 12  # number of transformer blocks
    n_head: int = 12  # attention heads per block
    n_embd: int = 768  # width of the residual stream, d_model
    d_mlp: int | None = None  # MLP hidden width; None: 4 * n_embd as in GPT-2 (filled in at construction)
    layer_norm_epsilon: float = 1e-5  # added to the variance inside every LayerNorm
    activation: str = "gelu_new"  # GPT-2 uses the tanh approximation of GELU
    dropout: float = 0.0  # used only in training; every dropout is inactive at inference
    # -- the Llama family (model_type llama / qwen2 / mistral); GPT-2 leaves these at their defaults --
    model_type: str = "gpt2"  # HF's model_type: "gpt2", "llama", "qwen2" or "mistral"
    n_kv_heads: int | None = None  # key/value heads (grouped-query attention); None: one per query head
    head_dim: int | None = None  # head width when the config names it; None: n_embd // n_head
    rope_theta: float = 10000.0  # base of the rotary frequencies
    rope_scaling: RopeScaling | None = None  # llama3 scaling of the rotary frequencies, if any
    tie_word_embeddings: bool = True  # lm_head shares the token embedding matrix
    qkv_bias: bool = True  # biases on the query, key and value projections (GPT-2, Qwen2)
    out_bias: bool = True  # bias on the attention output projection (GPT-2)
    mlp_bias: bool = True  # biases in the MLP (GPT-2)

    def __post_init__(self) -> None:
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"unsupported model_type {self.model_type!r}; expected one of {MODEL_TYPES}")
        if isinstance(self.rope_scaling, dict):  # from `to_dict`
            object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
        # every number is checked before it is used: a zero head count would divide by zero below, a NaN
        # epsilon would load and then turn every forward pass into NaN
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            _check_whole(self._key(name), getattr(self, name))
        for name in ("d_mlp", "n_kv_heads", "head_dim"):
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
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, int | float) or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be a number in [0, 1), got {self.dropout!r}")
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            raise ValueError(f"rope scaling must be an object, got {self.rope_scaling!r}")
        if self.activation not in SUPPORTED_ACTIVATIONS:
            raise ValueError(f"unsupported activation {self.activation!r}; expected one of {SUPPORTED_ACTIVATIONS}")
        if self.n_head % self.n_kv_heads != 0:
            raise ValueError(f"n_head ({self.n_head}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.family == "gpt2" and (self.n_kv_heads != self.n_head or not self.tie_word_embeddings
                                      or self.head_dim * self.n_head != self.n_embd or self.activation == "silu"):
            raise ValueError("GPT-2 has one key/value head per query head, tied embeddings and GELU")
        if self.family == "llama" and self.head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head width, got {self.head_dim}")

    def _key(self, name: str) -> str:
        """A field's name as the family's config.json spells it, for messages."""
        return _HF_KEYS[self.family].get(name, name)

    @property
    def family(self) -> str:
        """"gpt2", or "llama" for Llama, Qwen2 and Mistral (one architecture)."""
        return "gpt2" if self.model_type == "gpt2" else "llama"

    def to_hf(self) -> dict[str, Any]:
        """The `config.json` dict that transformers' GPT2LMHeadModel (or the Llama-family class) reads."""
        if self.family == "llama":
            return self._llama_to_hf()
        return {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "vocab_size": self.vocab_size,
            "n_positions": self.block_size,
            "n_ctx": self.block_size,
            "n_embd": self.n_embd,
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_inner": self.d_mlp if self.d_mlp != 4 * self.n_embd else None,
            "activation_function": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "resid_pdrop": self.dropout,
            "embd_pdrop": self.dropout,
            "attn_pdrop": self.dropout,
            "scale_attn_weights": True,
            "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False,
            "tie_word_embeddings": True,
            "bos_token_id": self.vocab_size - 1,
            "eos_token_id": self.vocab_size - 1,
        }

    def _llama_to_hf(self) -> dict[str, Any]:
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.rope_scaling is not None:
            rope = {**rope, "rope_type": "llama3", **asdict(self.rope_scaling)}
        return {
            "architectures": [LLAMA_FAMILY_TYPES[self.model_type]],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.block_size,
            "hidden_size": self.n_embd,
            "intermediate_size": self.d_mlp,
            "num_hidden_layers": self.n_layer,
            "num_attention_heads": self.n_head,
            "num_key_value_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": self.activation,
            "rms_norm_eps": self.layer_norm_epsilon,
            "rope_parameters": rope,
            "tie_word_embeddings": self.tie_word_embeddings,
            **({"attention_bias": self.qkv_bias, "mlp_bias": self.mlp_bias} if self.model_type == "llama" else {}),
        }

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> DecoderConfig:
        """Read an HF `config.json` (GPT-2, Llama, Qwen2, Mistral); refuse options that change the maths
        we implement."""
        model_type = hf.get("model_type", "gpt2")
        if model_type in LLAMA_FAMILY_TYPES:
            return cls._llama_from_hf(hf)
        if model_type != "gpt2":
            raise ValueError(f"model_type is {model_type!r}; supported: {', '.join(MODEL_TYPES)}")
        for key, expected in (
            ("scale_attn_weights", True),
            ("scale_attn_by_inverse_layer_idx", False),
            ("reorder_and_upcast_attn", False),
            ("add_cross_attention", False),
        ):
            if hf.get(key, expected) != expected:
                raise ValueError(f"config option {key}={hf[key]!r} is not supported (expected {expected!r})")
        if hf.get("tie_word_embeddings", True) is not True:
            raise ValueError("untied output embeddings are not supported: GPT-2 ties lm_head to wte")
        return cls(
            vocab_size=_whole(hf, "vocab_size"),
            block_size=_whole(hf, "n_positions", hf.get("n_ctx", 1024)),
            n_layer=_whole(hf, "n_layer"),
            n_head=_whole(hf, "n_head"),
            n_embd=_whole(hf, "n_embd"),
            d_mlp=_whole(hf, "n_inner", None),
            layer_norm_epsilon=_real(hf, "layer_norm_epsilon", 1e-5),
            activation=hf.get("activation_function", "gelu_new"),
        )

    @classmethod
    def _llama_from_hf(cls, hf: dict[str, Any]) -> DecoderConfig:
        model_type = hf["model_type"]
        archs = hf.get("architectures") or [LLAMA_FAMILY_TYPES[model_type]]
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise ValueError(f"architectures must be a list of names, got {archs!r}")
        if archs[0] != LLAMA_FAMILY_TYPES[model_type]:
            raise ValueError(f"architecture {archs[0]!r} is not a causal LM we run "
                             f"(expected {LLAMA_FAMILY_TYPES[model_type]!r})")
        act = hf.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act {act!r} is not supported (expected 'silu')")
        if _whole(hf, "pretraining_tp", 1) != 1:
            raise ValueError("pretraining_tp above 1 is not supported")
        theta, scaling = _rope_settings(hf)
        block_size = _whole(hf, "max_position_embeddings", 2048)
        # A sliding window (Mistral 7B v0.1, Qwen2 with use_sliding_window) only changes attention beyond
        # its width: the context is capped at the window, inside which the maths is exactly causal attention.
        window = _whole(hf, "sliding_window", None)
        if window is not None and (model_type == "mistral" or _flag(hf, "use_sliding_window", False)):
            block_size = min(block_size, window)
        qkv_bias = _flag(hf, "attention_bias", False) if model_type == "llama" else model_type == "qwen2"
        n_kv_heads = _whole(hf, "num_key_value_heads", None)  # absent: one key/value head per query head
        return cls(
            vocab_size=_whole(hf, "vocab_size"),
            block_size=block_size,
            n_layer=_whole(hf, "num_hidden_layers"),
            n_head=_whole(hf, "num_attention_heads"),
            n_embd=_whole(hf, "hidden_size"),
            d_mlp=_whole(hf, "intermediate_size"),
            layer_norm_epsilon=_real(hf, "rms_norm_eps", 1e-6),
            activation=act,
            model_type=model_type,
            n_kv_heads=n_kv_heads if n_kv_heads is not None else _whole(hf, "num_attention_heads"),
            head_dim=_whole(hf, "head_dim", None) or None,
            rope_theta=theta,
            rope_scaling=scaling,
            tie_word_embeddings=_flag(hf, "tie_word_embeddings", False),  # transformers' default for all three
            qkv_bias=qkv_bias,
            out_bias=_flag(hf, "attention_bias", False) if model_type == "llama" else False,
            mlp_bias=_flag(hf, "mlp_bias", False) if model_type == "llama" else False,
        )

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


def _rope_settings(hf: dict[str, Any]) -> tuple[float, RopeScaling | None]:
    """rope_theta and llama3 scaling from either spelling: hub checkpoints carry `rope_theta` and
    `rope_scaling`; transformers 5 writes both into `rope_parameters`."""
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    if not isinstance(params, dict) or not isinstance(scaling, dict):
        raise ValueError("rope_parameters / rope_scaling must be objects")
    theta = _real(params, "rope_theta", _real(hf, "rope_theta", 10000.0))
    merged = {**scaling, **params}
    kind = merged.get("rope_type", merged.get("type", "default"))
    if kind == "default":
        return theta, None
    if kind != "llama3":
        raise ValueError(f"rope type {kind!r} is not supported (supported: default, llama3)")
    return theta, RopeScaling(
        factor=_real(merged, "factor"),
        low_freq_factor=_real(merged, "low_freq_factor"),
        high_freq_factor=_real(merged, "high_freq_factor"),
        original_max_position_embeddings=_whole(merged, "original_max_position_embeddings"),
    )


# How config.json names our fields, where it differs (for messages about a bad value).
_HF_KEYS: dict[str, dict[str, str]] = {
    "gpt2": {"block_size": "n_positions", "d_mlp": "n_inner"},
    "llama": {"block_size": "max_position_embeddings", "n_layer": "num_hidden_layers",
              "n_head": "num_attention_heads", "n_embd": "hidden_size", "d_mlp": "intermediate_size",
              "n_kv_heads": "num_key_value_heads", "layer_norm_epsilon": "rms_norm_eps"},
}
_REQUIRED = object()


def _value(hf: dict[str, Any], key: str, default: Any) -> Any:
    if default is _REQUIRED:
        return hf[key]  # a KeyError names the missing key
    value = hf.get(key, default)
    return default if value is None else value


def _whole(hf: dict[str, Any], key: str, default: Any = _REQUIRED) -> Any:
    """config.json's whole number `key` (or `default` when absent or null): a JSON integer, not a string,
    a float or a boolean. Its range is checked by the config."""
    value = _value(hf, key, default)
    if value is not default and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{key} must be a whole number, got {value!r}")
    return value


def _real(hf: dict[str, Any], key: str, default: Any = _REQUIRED) -> float:
    value = _value(hf, key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number, got {value!r}")
    return float(value)


def _flag(hf: dict[str, Any], key: str, default: bool) -> bool:
    value = _value(hf, key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false, got {value!r}")
    return value


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
