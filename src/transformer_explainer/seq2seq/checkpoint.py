"""Seq2seq checkpoint folders: `config.json` + `model.safetensors` + `vocab.json` (+ `README.md`).

Weights are read with safetensors only; every tensor is checked against the config's shapes.
"""

from __future__ import annotations

import json
import tempfile
from functools import lru_cache
from importlib import resources
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import CheckpointError, InputError
from ..loading.checkpoint import atomic_write_bytes, read_json
from .config import Seq2SeqConfig
from .engine import Seq2SeqModel
from .model import EncoderDecoder
from .vocab import Vocab

FORMAT = "transformer-explainer-seq2seq"
VERSION = 1


def save_seq2seq(model: Seq2SeqModel, folder: Path, dtype: torch.dtype = torch.float32,
                 readme: str | None = None) -> None:
    """Write the folder; each file appears whole or not at all. float16 halves the weights file; the
    model loaded back computes in float32 from those float16 numbers."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(dtype).contiguous().clone() for k, v in model.net.state_dict().items()}
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        f = Path(tmp) / "model.safetensors"
        save_file(state, str(f), metadata={"format": FORMAT})
        atomic_write_bytes(folder / "model.safetensors", f.read_bytes())
    config = {
        "format": FORMAT,
        "version": VERSION,
        "task": model.task_name,
        "task_options": model.task_options,
        "max_src_len": model.max_src_len,
        "max_tgt_len": model.max_tgt_len,
        "dtype": str(dtype).removeprefix("torch."),
        "model": model.config.to_dict(),
        "training": model.training,
    }
    vocab = {"src": model.src_vocab.to_dict(), "tgt": model.tgt_vocab.to_dict()}
    atomic_write_bytes(folder / "vocab.json", (json.dumps(vocab, ensure_ascii=False, indent=1) + "\n").encode())
    atomic_write_bytes(folder / "config.json", (json.dumps(config, ensure_ascii=False, indent=2) + "\n").encode())
    if readme is not None:
        atomic_write_bytes(folder / "README.md", readme.encode())


def load_seq2seq(folder: Path) -> Seq2SeqModel:
    """Load a checkpoint folder; errors name the file or tensor at fault."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder")
    meta = read_json(folder / "config.json")
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{folder / 'config.json'} is not a seq2seq checkpoint (format {meta.get('format')!r})")
    vocab = read_json(folder / "vocab.json")
    try:
        config = Seq2SeqConfig.from_dict(meta["model"])
        src_vocab, tgt_vocab = Vocab.from_dict(vocab["src"]), Vocab.from_dict(vocab["tgt"])
        max_src, max_tgt = int(meta["max_src_len"]), int(meta["max_tgt_len"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{folder} has an unusable config.json or vocab.json: {e}") from None
    try:
        state = load_file(str(folder / "model.safetensors"))
    except FileNotFoundError:
        raise CheckpointError(f"{folder / 'model.safetensors'} is missing") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{folder / 'model.safetensors'} is corrupt or truncated: {e}") from None
    net = EncoderDecoder(config)
    expected = net.state_dict()
    missing, extra = set(expected) - set(state), set(state) - set(expected)
    if missing or extra:
        which = f"missing {sorted(missing)[0]!r}" if missing else f"unexpected {sorted(extra)[0]!r}"
        raise CheckpointError(f"{folder / 'model.safetensors'} does not match config.json: {which}")
    for key, t in state.items():
        if tuple(t.shape) != tuple(expected[key].shape):
            raise CheckpointError(f"tensor {key!r} has shape {tuple(t.shape)}, config.json implies "
                                  f"{tuple(expected[key].shape)}")
        if not torch.isfinite(t).all():
            raise CheckpointError(f"tensor {key!r} contains NaN or infinite values")
    net.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    try:
        return Seq2SeqModel(net, src_vocab, tgt_vocab, str(meta["task"]), max_src, max_tgt,
                            dict(meta.get("task_options") or {}), dict(meta.get("training") or {}), folder)
    except ValueError as e:
        raise CheckpointError(f"{folder}: {e}") from None


def builtin_root() -> Path:
    return Path(str(resources.files("transformer_explainer") / "builtin" / "seq2seq"))


def builtin_checkpoints() -> dict[str, Path]:
    """Shipped checkpoints: task name -> folder."""
    root = builtin_root()
    if not root.is_dir():
        return {}
    return {p.name: p for p in sorted(root.iterdir()) if (p / "config.json").is_file()}


@lru_cache(maxsize=8)
def load_builtin(task: str) -> Seq2SeqModel:
    """The shipped model of a built-in task (loaded once per process; inference only)."""
    found = builtin_checkpoints()
    if task not in found:
        have = ", ".join(found) or "none"
        raise InputError(f"no shipped checkpoint for task {task!r}; available: {have}")
    return load_seq2seq(found[task])
