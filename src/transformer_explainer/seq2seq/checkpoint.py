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
from safetensors.torch import save_file

from ..errors import CheckpointError, InputError
from ..loading.budget import check_block_counts, check_memory
from ..loading.checkpoint import FLOAT_DTYPES, atomic_write_bytes, open_weights, read_safetensors
from ..loading.files import is_regular_file, read_json
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
        max_src, max_tgt = _length(meta, "max_src_len"), _length(meta, "max_tgt_len")
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{folder} has an unusable config.json or vocab.json: {e}") from None
    weights = folder / "model.safetensors"
    if not is_regular_file(weights):
        raise CheckpointError(f"{weights} is missing")
    # everything the config implies is checked against the file's header before anything is allocated
    # (loading/budget.py): a config of a million layers or a billion positions is refused in one line
    info = open_weights(folder).info
    check_block_counts(EncoderDecoder, config, ("n_encoder_layers", "n_decoder_layers"), file_tensors=len(info),
                       config_path=folder / "config.json")
    with torch.device("meta"):
        planned = EncoderDecoder(config)
    expected = planned.state_dict()
    missing, extra = set(expected) - set(info), set(info) - set(expected)
    if missing or extra:
        which = f"missing {sorted(missing)[0]!r}" if missing else f"unexpected {sorted(extra)[0]!r}"
        raise CheckpointError(f"{weights} does not match config.json: {which}")
    for key, t in info.items():
        if t.shape != tuple(expected[key].shape):
            raise CheckpointError(f"tensor {key!r} has shape {t.shape}, config.json implies "
                                  f"{tuple(expected[key].shape)}")
        if t.dtype not in FLOAT_DTYPES:
            raise CheckpointError(f"tensor {key!r} has dtype {t.dtype}, not a floating-point type")
    check_memory(planned, torch.float32, f"the model in {folder}")
    state = read_safetensors(weights)
    for key, t in state.items():
        if not torch.isfinite(t).all():
            raise CheckpointError(f"tensor {key!r} contains NaN or infinite values")
    net = EncoderDecoder(config)
    net.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    try:
        return Seq2SeqModel(net, src_vocab, tgt_vocab, str(meta["task"]), max_src, max_tgt,
                            dict(meta.get("task_options") or {}), dict(meta.get("training") or {}), folder)
    except ValueError as e:
        raise CheckpointError(f"{folder}: {e}") from None


MAX_SEQUENCE = 1 << 16  # far longer than any toy task's texts; decoding runs up to max_tgt_len steps


def _length(meta: dict, key: str) -> int:
    value = meta[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SEQUENCE:
        raise ValueError(f"{key} must be a whole number from 1 to {MAX_SEQUENCE}, got {value!r}")
    return value


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
        raise InputError(f"no shipped checkpoint for task {task!r}; available: {have}", code="s2s_unknown_task",
                         task=task, tasks=have)
    return load_seq2seq(found[task])
