"""Package attributes imported on first use (PEP 562), so that `import transformer_explainer` and the
CLI's argument parsing do not pay for torch, fastapi or transformers before a command needs them."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_getattr(package: str, exports: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `name` from its submodule `exports[name]`
    (relative, e.g. ".engine") on first access and keeps it in `namespace` (the package's globals()),
    so later accesses are plain attribute reads."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(exports[name], package), name)
        namespace[name] = value
        return value

    return __getattr__
