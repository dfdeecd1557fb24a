"""Export a trace: `.npz` with every tensor by name (round-trips exactly), or JSON with the
metadata and chosen tensors (for the web, notebooks and other languages)."""

from __future__ import annotations

import fnmatch
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import DecoderConfig
from ..errors import InputError
from ..loading.checkpoint import atomic_write_bytes, atomic_writer
from ..memo import TraceValues
from ..names import describe
from ..trace import Trace

FORMAT = "transformer-explainer-trace"
VERSION = 1
META_KEY = "__meta__"  # a name no activation can have
DEFAULT_JSON_NAMES = ("blocks.*.attn.pattern",)


def select_names(trace: Trace, patterns: Sequence[str] | None) -> list[str]:
    """Trace names matching any of the patterns (exact names or globs like `blocks.*.attn.pattern`),
    in computation order; all names for None."""
    names = trace.names()
    if patterns is None:
        return names
    out = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if unmatched:
        raise InputError(f"no activation is called {unmatched[0]!r}; names look like blocks.0.attn.pattern, "
                         f"blocks.*.resid_post or logits")
    return out


def trace_metadata(trace: Trace, names: Sequence[str]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "model_name": trace.model_name,
        "config": trace.config.to_dict(),
        "text": trace.text,
        "token_ids": list(trace.token_ids),
        "tokens": list(trace.tokens),
        "start": trace.start,
        "prefix_ids": list(trace.prefix_ids),
        "tensors": {n: {"shape": list(trace[n].shape), "dtype": str(trace[n].dtype).removeprefix("torch."),
                        "dims": list(describe(n, trace.config.family)[0])} for n in names},
    }


def save_npz(trace: Trace, path: str | Path, names: Sequence[str] | None = None, *, compress: bool = True) -> Path:
    """Write the trace's tensors (all by default) and a JSON metadata string to `path`.

    Readable with plain numpy: `np.load(path)["blocks.0.attn.pattern"]`,
    `json.loads(str(np.load(path)["__meta__"]))`.
    """
    path = Path(path)
    chosen = select_names(trace, names)
    arrays: dict[str, np.ndarray] = {n: trace[n].detach().cpu().numpy() for n in chosen}
    arrays[META_KEY] = np.array(json.dumps(trace_metadata(trace, chosen), ensure_ascii=False))
    with atomic_writer(path) as f:  # a file object, so numpy keeps the name as given; no half-written file
        (np.savez_compressed if compress else np.savez)(f, **arrays)
    return path


def load_npz(path: str | Path) -> Trace:
    """A Trace back from `save_npz`: the same tensors, dtypes and tokens. A partial export gives a
    trace that holds only the saved names."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            if META_KEY not in data.files:
                raise InputError(f"{path} is not a trace export (no {META_KEY} entry)")
            meta = json.loads(str(data[META_KEY]))
            values = {n: torch.from_numpy(data[n].copy()) for n in meta["tensors"]}
    except (OSError, ValueError, KeyError) as e:
        raise InputError(f"{path} could not be read as a trace export: {e}") from None
    if meta.get("format") != FORMAT:
        raise InputError(f"{path} is not a trace export")
    config = DecoderConfig.from_dict(meta["config"])
    return Trace(
        model_name=meta["model_name"],
        config=config,
        text=meta["text"],
        token_ids=meta["token_ids"],
        tokens=meta["tokens"],
        memory=TraceValues(config=config, token_ids=meta["token_ids"], start=meta["start"], kept=values),
        start=meta["start"],
        prefix_ids=meta["prefix_ids"],
    )


def _json_ready(x: Any) -> Any:
    """Nested lists with -inf / inf / NaN (masked scores) as None: strict JSON has no infinities."""
    if isinstance(x, list):
        return [_json_ready(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def trace_to_json(trace: Trace, names: Sequence[str] | None = DEFAULT_JSON_NAMES) -> dict[str, Any]:
    """Metadata plus the chosen tensors as nested lists (default: every attention pattern; None: all,
    which for a real model is large). Non-finite numbers become null."""
    chosen = select_names(trace, names)
    out = trace_metadata(trace, chosen)
    out["values"] = {n: _json_ready(trace[n].to(torch.float32).tolist()) for n in chosen}
    return out


def save_json(trace: Trace, path: str | Path, names: Sequence[str] | None = DEFAULT_JSON_NAMES) -> Path:
    path = Path(path)
    data = json.dumps(trace_to_json(trace, names), ensure_ascii=False, allow_nan=False)
    atomic_write_bytes(path, data.encode("utf-8"))
    return path
