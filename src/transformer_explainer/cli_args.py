"""Argument types and the parser class of the command line: a bad value is refused while the
arguments are read, with one line on stderr and exit status 2, before any model is loaded."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

PROG = "transformer-explainer"


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line instead of the usage block, written as every other error of
    the command line is (`PROG: error: ...`, see `fail`), with the subcommand's help to read."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see {self.prog} --help)\n")


def fail(message: str) -> None:
    """Print a domain error the way every subcommand does."""
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def int_range(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """A whole number in [lo, hi] (no upper bound for hi=None)."""

    def parse(text: str) -> int:
        v = _int(text)
        if v < lo or (hi is not None and v > hi):
            span = f"at least {lo}" if hi is None else f"from {lo} to {hi}"
            raise argparse.ArgumentTypeError(f"must be a whole number {span}, got {text}")
        return v

    parse.__name__ = "whole number"
    return parse


positive_int = int_range(1)
non_negative_int = int_range(0)
port_number = int_range(0, 65535)


def finite_float(text: str) -> float:
    """A finite number, as an argparse type."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return v


def float_range(lo: float, hi: float) -> Callable[[str], float]:
    """A finite number in [lo, hi], as an argparse type."""

    def parse(text: str) -> float:
        v = finite_float(text)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be a number from {lo:g} to {hi:g}, got {text}")
        return v

    parse.__name__ = "number"
    return parse


def non_negative_float(text: str) -> float:
    v = finite_float(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return v


def positive_float(text: str) -> float:
    v = finite_float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return v


def fraction(text: str) -> float:
    """A share of something, 0 or more and below 1: a dropout rate, a label-smoothing epsilon."""
    v = finite_float(text)
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"must be 0 or more and below 1, got {text}")
    return v


def probability(text: str) -> float:
    """A top-p value: more than 0, at most 1."""
    v = finite_float(text)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 1, got {text}")
    return v


def text_value(text: str) -> str:
    """A text to run a model on: anything but the empty string (spaces are tokens too), refused here, before
    a model is loaded, with the engine's sentence."""
    if text == "":
        raise argparse.ArgumentTypeError("the text is empty: type at least one character")
    return text


text_value.__name__ = "text"


def output_file(*suffixes: str) -> Callable[[str], Path]:
    """A file to write: the right suffix, in a folder that exists, and not itself a folder. Checked
    before any work is done, so a long computation never ends in 'no such directory'."""

    def parse(text: str) -> Path:
        path = Path(text).expanduser()
        if path.suffix.lower() not in suffixes:
            raise argparse.ArgumentTypeError(f"must end in {' or '.join(suffixes)}, got {path.name!r}")
        if path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name in it")
        parent = path.parent
        if not parent.is_dir():
            what = "is a file, not a folder" if parent.exists() else "does not exist"
            raise argparse.ArgumentTypeError(f"cannot write {text}: the folder {parent} {what}")
        return path

    parse.__name__ = "output file"
    return parse


def dtype_arg(p: argparse.ArgumentParser) -> None:
    """`--dtype`: the weights' and activations' type of the model a command loads."""
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                   help="weights and activations: float32 (default), bfloat16 (half the memory), or float16 (half the "
                        "memory, on a GPU only)")


_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
_SIZE = re.compile(r"^\d+(\.\d+)?([KMG]i?B)?$", re.IGNORECASE)


def device_name(text: str) -> str:
    """A device's name (whether it is on this machine is checked when the model loads)."""
    name = text.strip().lower()
    if not _DEVICE.match(name):
        raise argparse.ArgumentTypeError(f"unknown device {text!r}: use auto, cpu, cuda, cuda:N (N: a GPU's number) "
                                         f"or mps")
    return name


device_name.__name__ = "device"


def max_memory(text: str) -> dict[str, str]:
    """`0=20GiB,cpu=64GiB`: the memory each device may give the model's weights (a GPU's number or cuda:N, cpu,
    mps), in bytes or with a unit (KB, MB, GB, KiB, MiB, GiB), as accelerate's `max_memory` takes them."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, eq, size = (s.strip() for s in item.partition("="))
        key = key.lower().removeprefix("cuda:")
        if not eq or not _SIZE.match(size) or not (key.isdigit() or key in ("cpu", "mps")):
            raise argparse.ArgumentTypeError(
                f"{item.strip()!r} is not DEVICE=SIZE: write e.g. 0=20GiB,cpu=64GiB (a GPU's number or cuda:N, cpu or "
                f"mps; a size in bytes or in KB, MB, GB, KiB, MiB or GiB)")
        out[key] = size
    return out


max_memory.__name__ = "max memory"


def device_args(p: argparse.ArgumentParser) -> None:
    """`--device`, `--device-map` and `--max-memory`: where the model a command loads runs."""
    p.add_argument("--device", type=device_name, default=None, metavar="DEVICE",
                   help="where the model runs: auto (default: a GPU if there is one, CUDA then Apple's MPS, else the "
                        "CPU), cpu, cuda, cuda:N or mps")
    p.add_argument("--device-map", choices=("auto",), default=None,
                   help="auto: place a model larger than one GPU with accelerate, whole blocks, the GPUs first and "
                        "the rest on the CPU (needs `pip install 'transformer-explainer[accelerate]'`)")
    p.add_argument("--max-memory", type=max_memory, default=None, metavar="DEVICE=SIZE,...",
                   help="with --device-map auto (which it implies): the memory each device may give the weights, "
                        "e.g. 0=20GiB,cpu=64GiB (default: what each has free)")
