"""The models a server may use: those it was started with, plus (when asked) the built-in models and
the GPT-2 checkpoints already in the local cache. A client picks among these by name only, so no
request can make the server read an arbitrary path. A request starts a download only when the
server was started with API downloads on (`serve --api-downloads`), only of the known GPT-2
hub checkpoints, and only by using the model (`lookup`, from a POST: the Origin check keeps other
sites out); looking at what is offered (`known`, for GETs) loads and downloads nothing."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..engine import ExplainerModel, open_resolved
from ..errors import ModelNotFoundError
from ..loading.resolve import (
    KNOWN_HUB_MODELS,
    ResolvedModel,
    builtin_models,
    builtin_root,
    cached_gpt2_models,
    resolve,
)

log = logging.getLogger(__name__)


@dataclass
class _Entry:
    name: str
    source: str  # "given", "builtin", "local", "hub"
    folder: Path | None  # None for models handed in already loaded, and for hub models not yet downloaded
    pinned: bool  # never evicted (models handed in, and the default)


# recorded training runs the package ships whose final model the app opens: name -> the model's folder under builtin/
RUN_MODELS = {"induction-run": "induction-run/main/model", "induction-text-run": "induction-text-run/model"}


def builtin_run_models() -> dict[str, Path]:
    """The final models of the shipped recorded runs (not built-in models of their own: `builtin_models` leaves the
    runs' folders out), where the package has them."""
    root = builtin_root()
    return {name: root / sub for name, sub in RUN_MODELS.items() if (root / sub / "config.json").is_file()}


class ModelRegistry:
    """Name -> model, loaded on first use; at most `max_loaded` unpinned models kept in memory."""

    def __init__(self, default: str, max_loaded: int = 2, *, api_downloads: bool = False,
                 dtype: str = "float32", device: str | None = "cpu", device_map: str | None = None,
                 max_memory: dict[str, str] | None = None) -> None:
        self._entries: dict[str, _Entry] = {}
        self._loaded: OrderedDict[str, ExplainerModel] = OrderedDict()
        self._lock = threading.Lock()  # the tables above, held only to read or change them
        self._load_lock = threading.Lock()  # one model loads at a time
        self._download_lock = threading.Lock()  # one download at a time
        self.default = default
        self.max_loaded = max_loaded
        self.api_downloads = api_downloads  # may a request download a known hub model (off by default)
        self.dtype = dtype  # of every model it loads
        self.device, self.device_map, self.max_memory = device, device_map, max_memory  # where each of them runs

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

    def add_folder(self, name: str, folder: Path | None, source: str, *, pinned: bool = False) -> None:
        if name not in self._entries:
            self._entries[name] = _Entry(name, source, folder, pinned)

    def add_resolved(self, r: ResolvedModel, *, pinned: bool = False) -> None:
        self.add_folder(r.name, r.folder, r.source, pinned=pinned)

    def discover(self) -> None:
        """List the built-in models and the cached GPT-2 checkpoints (not loaded until used)."""
        for name, folder in builtin_models().items():
            self.add_folder(name, folder, "builtin")
        for name, folder in builtin_run_models().items():
            self.add_folder(name, folder, "builtin")
        for name, folder in cached_gpt2_models().items():
            self.add_folder(name, folder, "hub")
        if self.api_downloads:
            for name in KNOWN_HUB_MODELS:
                self.add_folder(name, None, "hub")  # downloaded on first use

    def add_downloaded(self, name: str, folder: Path) -> None:
        """A hub model just downloaded (serve's download panel): offer it from now on."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                self._entries[name] = _Entry(name, "hub", folder, pinned=False)
            elif entry.folder is None:
                entry.folder = folder

    def has_files(self, name: str) -> bool:
        """Whether `name` is offered and on disk (or in memory), so using it downloads nothing."""
        entry = self._entries.get(name)
        return entry is not None and (entry.folder is not None or name in self._loaded)

    def names(self) -> list[str]:
        return list(self._entries)

    def source(self, name: str) -> str:
        return self._entries[name].source

    def loaded_model(self, name: str) -> ExplainerModel | None:
        return self._loaded.get(name)

    def get(self, name: str | None) -> ExplainerModel:
        return self.lookup(name)[1]

    def canonical(self, name: str | None) -> str:
        return self.default if name in (None, "", "default") else name

    def known(self, name: str | None) -> str:
        """The name here of `name` (the default for None), if this server offers it
        (ModelNotFoundError otherwise); nothing is loaded or downloaded."""
        name = self.canonical(name)
        if name not in self._entries:
            hint = ""
            if name in KNOWN_HUB_MODELS and not self.api_downloads:
                hint = (f" ({name} is not downloaded on this server, and downloads from the API are off: "
                        f"start the server with --model {name} or --api-downloads)")
            raise ModelNotFoundError(f"unknown model {name!r}{hint}; this server offers: {', '.join(self._entries)}",
                                     code="model_unknown", model=str(name), offered=", ".join(self._entries))
        return name

    def in_memory(self, name: str | None) -> tuple[str, ExplainerModel] | None:
        """(its name here, the model) if `name` is offered and in memory, else None; never loads, never waits for
        a load (the light lane's lookup)."""
        name = self.known(name)
        with self._lock:
            model = self._loaded.get(name)
            if model is not None:
                self._loaded.move_to_end(name)
                return name, model
        return None

    def lookup(self, name: str | None) -> tuple[str, ExplainerModel]:
        """(its name here, the model) for `name` (the default for None), loading it if needed. A model in memory is
        answered at once, whatever is loading meanwhile: loads take `_load_lock` (one at a time, each a second or
        more), the table's `_lock` is held only to read or change it."""
        found = self.in_memory(name)
        if found is not None:
            return found
        name = self.known(name)
        entry = self._entries[name]
        if entry.folder is None:
            with self._download_lock:  # a download takes minutes
                if entry.folder is None:
                    entry.folder = resolve(name, allow_download=True).folder
        with self._load_lock:
            found = self.in_memory(name)  # loaded by the request this one waited for
            if found is not None:
                return found
            assert entry.folder is not None
            log.info("loading model %s from %s", name, entry.folder)
            model = open_resolved(ResolvedModel(name, entry.folder, "local"), self.dtype, device=self.device,
                                  device_map=self.device_map, max_memory=self.max_memory)
            model.source = entry.source
            log.info("model %s runs on %s", name, model.describe_devices())
            with self._lock:
                self._loaded[name] = model
                self._evict()
            return name, model

    def _evict(self) -> None:
        unpinned = [n for n in self._loaded if not self._entries[n].pinned and n != self.default]
        while len(unpinned) > self.max_loaded:
            victim = unpinned.pop(0)
            log.info("unloading model %s", victim)
            del self._loaded[victim]
