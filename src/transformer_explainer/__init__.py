"""transformer_explainer: see inside a real Transformer, every number real.

The public names are imported on first use (PEP 562), so that `import transformer_explainer.cli`
and commands that need no model (`--help`, `models`, argument errors) do not pay for torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from .config import DecoderConfig
    from .engine import ExplainerModel, load_model
    from .errors import CheckpointError, ExplainerError, InputError, ModelNotFoundError
    from .sampling import NextTokenDistribution, SamplingParams
    from .text_model import GeneratedToken
    from .trace import Trace

_EXPORTS = {
    "CheckpointError": ".errors",
    "ExplainerError": ".errors",
    "ExplainerModel": ".engine",
    "DecoderConfig": ".config",
    "GeneratedToken": ".text_model",
    "InputError": ".errors",
    "ModelNotFoundError": ".errors",
    "NextTokenDistribution": ".sampling",
    "SamplingParams": ".sampling",
    "Trace": ".trace",
    "load_model": ".engine",
}

__all__ = [
    "CheckpointError",
    "ExplainerError",
    "ExplainerModel",
    "DecoderConfig",
    "GeneratedToken",
    "InputError",
    "ModelNotFoundError",
    "NextTokenDistribution",
    "SamplingParams",
    "Trace",
    "load_model",
]


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
