"""Argument types and the parser class of the command line: a bad value is refused while the
arguments are read, with one line on stderr and exit status 2, before any model is loaded."""

from __future__ import annotations

import argparse
import math
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


def _float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return v


def non_negative_float(text: str) -> float:
    v = _float(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return v


def positive_float(text: str) -> float:
    v = _float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return v


def fraction(text: str) -> float:
    """A share of something, 0 or more and below 1: a dropout rate, a label-smoothing epsilon."""
    v = _float(text)
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"must be 0 or more and below 1, got {text}")
    return v


def probability(text: str) -> float:
    """A top-p value: more than 0, at most 1."""
    v = _float(text)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 1, got {text}")
    return v


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
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="weights and activations: float32 (default) or bfloat16 (half the memory)")
