"""Where the built web app (index.html and its assets) lies inside the installed package."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def package_static_dir() -> Path:
    return Path(str(resources.files("transformer_explainer") / "web_dist"))
