"""transformer_explainer: see inside a real Transformer, every number real."""

from .config import GPTConfig
from .engine import ExplainerModel, GeneratedToken, load_model
from .errors import CheckpointError, ExplainerError, InputError, ModelNotFoundError
from .sampling import NextTokenDistribution, SamplingParams
from .trace import Trace

__all__ = [
    "CheckpointError",
    "ExplainerError",
    "ExplainerModel",
    "GPTConfig",
    "GeneratedToken",
    "InputError",
    "ModelNotFoundError",
    "NextTokenDistribution",
    "SamplingParams",
    "Trace",
    "load_model",
]
