"""The web server: a JSON API over the engine, and the packaged browser app (`transformer-explainer serve`)."""

from .app import ServerSettings, create_app
from .registry import ModelRegistry
from .security import AccessSettings

__all__ = ["AccessSettings", "ModelRegistry", "ServerSettings", "create_app"]
