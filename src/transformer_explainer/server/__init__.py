"""The web server: a JSON API over the engine, and the packaged browser app (`transformer-explainer serve`).

The names below are imported on first use, so that the CLI can register `serve` without importing
the web framework and torch."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import ServerSettings, create_app
    from .registry import ModelRegistry
    from .security import AccessSettings

_EXPORTS = {"AccessSettings": ".security", "ModelRegistry": ".registry", "ServerSettings": ".app",
            "create_app": ".app"}

__all__ = [
    "AccessSettings",
    "ModelRegistry",
    "ServerSettings",
    "create_app",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value
