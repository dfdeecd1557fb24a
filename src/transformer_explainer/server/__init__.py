"""The web server: a JSON API over the engine, and the packaged browser app (`transformer-explainer serve`).

The names below are imported on first use, so that the CLI can register `serve` without importing
the web framework and torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy_exports import lazy_getattr

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


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
