"""One tensor by its name, or a slice of it (one head, one position, one row), encoded for the JSON
API: activations from a trace, weights from the model. Bounded: a slice larger than one answer may
hold is refused with a message that says how to ask for less."""

from __future__ import annotations

from torch import Tensor

from .encoding import encode_array
from .engine import ExplainerModel
from .errors import InputError
from .names import FAMILY_NAMES, describe, parse_name
from .schemas import EncodedTensor, TensorSpec
from .trace import Trace

MAX_ELEMENTS = 4_000_000  # per tensor in one answer (16 MB as float32): slice bigger ones by head/position/row


def _is_weight(suffix: str, family: str) -> bool:
    t = FAMILY_NAMES[family]
    return suffix in t.block_weights or suffix in t.global_weights


def _parse(name: str, family: str) -> tuple[int | None, str, tuple[str, ...]]:
    """Layer, stage and dims of `name` in the model family's naming scheme."""
    try:
        p = parse_name(name, family)
        dims, _ = describe(name, family)
    except (KeyError, ValueError):
        raise InputError(f"unknown tensor name {name!r}: names look like 'blocks.0.attn.pattern' or "
                         f"'embed.token' (GET /api/names lists them all)") from None
    return p.layer, p.suffix, dims


def _take(t: Tensor, dims: list[str], dim: str, index: int, what: str, name: str, offset: int = 0) -> Tensor:
    if dim not in dims:
        raise InputError(f"{name} has no {what} dimension (its dims are {', '.join(dims)})")
    axis = dims.index(dim)
    n = t.shape[axis]
    i = n + index if index < 0 else index - offset
    if not 0 <= i < n:
        hi = offset + n - 1
        raise InputError(f"{what} {index} is out of range for {name} ({offset}..{hi})")
    dims.pop(axis)
    return t.select(axis, i)


def _encode(name: str, spec: TensorSpec, t: Tensor, dims: list[str]) -> EncodedTensor:
    if t.numel() > MAX_ELEMENTS:
        raise InputError(f"{name} has {t.numel():,} values, more than the {MAX_ELEMENTS:,} one answer may hold; "
                         f"ask for one head, position or row")
    return EncodedTensor(name=name, head=spec.head, position=spec.position, row=spec.row, dims=dims,
                         shape=list(t.shape), dtype=spec.dtype, data=encode_array(t, spec.dtype))


def activation_tensor(trace: Trace, spec: TensorSpec) -> EncodedTensor:
    """An activation of `trace`, sliced by `spec.head` and `spec.position`."""
    layer, suffix, dims_t = _parse(spec.name, trace.config.family)
    if _is_weight(suffix, trace.config.family):
        raise InputError(f"{spec.name} is a weight, not an activation: ask POST /api/weights for it")
    if layer is not None and layer >= trace.config.n_layer:
        raise InputError(f"{spec.name}: the model has {trace.config.n_layer} blocks (0..{trace.config.n_layer - 1})")
    if spec.row is not None:
        raise InputError("`row` applies to weights; for activations use `head` and `position`")
    t = trace[spec.name]
    dims = list(dims_t)
    if spec.head is not None:
        t = _take(t, dims, "H", spec.head, "head", spec.name)
    if spec.position is not None:
        t = _take(t, dims, "T" if "T" in dims else "S", spec.position, "position", spec.name, trace.start)
    return _encode(spec.name, spec, t, dims)


def weight_tensor(model: ExplainerModel, spec: TensorSpec) -> EncodedTensor:
    """A weight of `model`, sliced by `spec.head` and `spec.row`."""
    layer, suffix, dims_t = _parse(spec.name, model.config.family)
    if not _is_weight(suffix, model.config.family):
        raise InputError(f"{spec.name} is an activation: ask POST /api/trace or /api/tensors for it")
    if layer is not None and layer >= model.config.n_layer:
        raise InputError(f"{spec.name}: the model has {model.config.n_layer} blocks")
    if spec.position is not None:
        raise InputError("`position` applies to activations; for weights use `head` and `row`")
    t = model.weight(spec.name)
    dims = list(dims_t)
    if spec.head is not None:
        t = _take(t, dims, "H", spec.head, "head", spec.name)
    if spec.row is not None:
        if not dims:
            raise InputError(f"{spec.name} has no rows")
        t = _take(t, dims, dims[0], spec.row, "row", spec.name)
    return _encode(spec.name, spec, t, dims)
