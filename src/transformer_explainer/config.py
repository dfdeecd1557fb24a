"""Model configurations: one frozen dataclass per architecture, plus the known GPT-2 presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

SUPPORTED_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu")


@dataclass(frozen=True)
class GPTConfig:
    """Shape of a GPT-2-family decoder. Field names follow nanoGPT; HF's names are mapped in `from_hf`."""

    vocab_size: int = 50257  # number of tokens; GPT-2's <|endoftext|> is the last id
    block_size: int = 1024  # longest context: rows in the position embedding (HF: n_positions)
    n_layer: int = 12  # number of transformer blocks
    n_head: int = 12  # attention heads per block
    n_embd: int = 768  # width of the residual stream, d_model
    n_inner: int | None = None  # MLP hidden width; None means 4 * n_embd as in GPT-2
    layer_norm_epsilon: float = 1e-5  # added to the variance inside every LayerNorm
    activation: str = "gelu_new"  # GPT-2 uses the tanh approximation of GELU
    dropout: float = 0.0  # used only in training; every dropout is inactive at inference

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.activation not in SUPPORTED_ACTIVATIONS:
            raise ValueError(f"unsupported activation {self.activation!r}; expected one of {SUPPORTED_ACTIVATIONS}")
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def d_mlp(self) -> int:
        return self.n_inner if self.n_inner is not None else 4 * self.n_embd

    def to_hf(self) -> dict[str, Any]:
        """The `config.json` dict that transformers' GPT2LMHeadModel reads."""
        return {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "vocab_size": self.vocab_size,
            "n_positions": self.block_size,
            "n_ctx": self.block_size,
            "n_embd": self.n_embd,
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_inner": self.n_inner,
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

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> GPTConfig:
        """Read an HF GPT-2 `config.json`; refuse options that change the maths we implement."""
        model_type = hf.get("model_type", "gpt2")
        if model_type != "gpt2":
            raise ValueError(f"model_type is {model_type!r}; only the GPT-2 architecture ('gpt2') is supported")
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
            vocab_size=int(hf["vocab_size"]),
            block_size=int(hf.get("n_positions", hf.get("n_ctx", 1024))),
            n_layer=int(hf["n_layer"]),
            n_head=int(hf["n_head"]),
            n_embd=int(hf["n_embd"]),
            n_inner=hf.get("n_inner"),
            layer_norm_epsilon=float(hf.get("layer_norm_epsilon", 1e-5)),
            activation=hf.get("activation_function", "gelu_new"),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GPTConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# The public GPT-2 checkpoints on the Hugging Face hub: shapes and download sizes (model.safetensors).
GPT2_PRESETS: dict[str, GPTConfig] = {
    "gpt2": GPTConfig(n_layer=12, n_head=12, n_embd=768),
    "gpt2-medium": GPTConfig(n_layer=24, n_head=16, n_embd=1024),
    "gpt2-large": GPTConfig(n_layer=36, n_head=20, n_embd=1280),
    "gpt2-xl": GPTConfig(n_layer=48, n_head=25, n_embd=1600),
    "distilgpt2": GPTConfig(n_layer=6, n_head=12, n_embd=768),
}
