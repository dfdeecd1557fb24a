"""Reading the small files of a model folder (config.json, the shard index, tokenizer files) when the
folder may be hostile: only regular files are read (a symlink to one is fine: the Hugging Face cache is
made of them), never a device that streams forever (/dev/zero) or a FIFO that blocks the reader until
someone writes to it, and never more than a size cap."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ..errors import CheckpointError

MAX_JSON_BYTES = 64 * 1024 * 1024  # a Llama 3 tokenizer.json is 9 MB; a config.json a few kB


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def is_regular_file(path: Path) -> bool:
    """True for a regular file (or a symlink to one), False when nothing is there; a CheckpointError
    for anything else there (a FIFO, a device, a folder), which no loader may open."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return False
    except OSError as e:
        raise CheckpointError(f"{path} cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"{path} is {_kind(mode)}, not a regular file")
    return True


def read_regular_bytes(path: Path, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes`. The file is opened without blocking and
    checked through its descriptor, so a FIFO swapped in after a check cannot hang the reader."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except OSError as e:
        raise CheckpointError(f"{path} cannot be read: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{path} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise CheckpointError(f"{path} is {st.st_size:,} bytes, more than the {max_bytes:,} such a file may have")
        data = f.read(max_bytes + 1)  # a file that grows while it is read stops at the cap too
    if len(data) > max_bytes:
        raise CheckpointError(f"{path} is more than the {max_bytes:,} bytes such a file may have")
    return data


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """A JSON object from `path`, or a CheckpointError saying what is wrong with the file."""
    data = read_regular_bytes(path, max_bytes)
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path} is not readable JSON: {e}") from None
    except RecursionError:  # the decoder recurses once per level of nesting
        raise CheckpointError(f"{path} is not usable JSON: it is nested too deeply") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} does not hold a JSON object")
    return value
