"""The models a server may use: those it was started with, plus (when asked) the built-in models and
the GPT-2 checkpoints already in the local cache. A client picks among these by name only, so no
request can make the server read an arbitrary path or start a download."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..engine import ExplainerModel
from ..errors import ModelNotFoundError
from ..loading.resolve import ResolvedModel, builtin_models, cached_gpt2_models

log = logging.getLogger(__name__)


@dataclass
class _Entry:
    name: str
    source: str  # "given", "builtin", "local", "hub"
    folder: Path | None  # None for models handed in already loaded
    pinned: bool  # never evicted (models handed in, and the default)


class ModelRegistry:
    """Name -> model, loaded on first use; at most `max_loaded` unpinned models kept in memory."""

    def __init__(self, default: str, max_loaded: int = 2) -> None:
        self._entries: dict[str, _Entry] = {}
        self._loaded: OrderedDict[str, ExplainerModel] = OrderedDict()
        self._lock = threading.Lock()
        self.default = default
        self.max_loaded = max_loaded

    @classmethod
    def from_models(cls, models: dict[str, ExplainerModel], default: str | None = None) -> ModelRegistry:
        if not models:
            raise ValueError("a server needs at least one model")
        reg = cls(default or next(iter(models)))
        for name, m in models.items():
            reg.add_loaded(name, m)
        return reg

    def add_loaded(self, name: str, model: ExplainerModel) -> None:
        self._entries[name] = _Entry(name, "given", model.folder, pinned=True)
        self._loaded[name] = model

    def add_folder(self, name: str, folder: Path, source: str, *, pinned: bool = False) -> None:
        if name not in self._entries:
            self._entries[name] = _Entry(name, source, folder, pinned)

    def add_resolved(self, r: ResolvedModel, *, pinned: bool = False) -> None:
        self.add_folder(r.name, r.folder, r.source, pinned=pinned)

    def discover(self) -> None:
        """List the built-in models and the cached GPT-2 checkpoints (not loaded until used)."""
        for name, folder in builtin_models().items():
            self.add_folder(name, folder, "builtin")
        for name, folder in cached_gpt2_models().items():
            self.add_folder(name, folder, "hub")

    def names(self) -> list[str]:
        return list(self._entries)

    def source(self, name: str) -> str:
        return self._entries[name].source

    def is_loaded(self, name: str) -> bool:
        return name in self._loaded

    def loaded_model(self, name: str) -> ExplainerModel | None:
        return self._loaded.get(name)

    def get(self, name: str | None) -> ExplainerModel:
        return self.lookup(name)[1]

    def lookup(self, name: str | None) -> tuple[str, ExplainerModel]:
        """(its name here, the model) for `name` (the default for None), loading it if needed."""
        name = self.default if name in (None, "", "default") else name
        entry = self._entries.get(name)
        if entry is None:
            raise ModelNotFoundError(f"unknown model {name!r}; this server offers: {', '.join(self._entries)}")
        with self._lock:
            model = self._loaded.get(name)
            if model is not None:
                self._loaded.move_to_end(name)
                return name, model
            assert entry.folder is not None
            log.info("loading model %s from %s", name, entry.folder)
            model = ExplainerModel.from_resolved(ResolvedModel(name, entry.folder, "local"))
            model.source = entry.source
            self._loaded[name] = model
            self._evict()
            return name, model

    def _evict(self) -> None:
        unpinned = [n for n in self._loaded if not self._entries[n].pinned and n != self.default]
        while len(unpinned) > self.max_loaded:
            victim = unpinned.pop(0)
            log.info("unloading model %s", victim)
            del self._loaded[victim]
