"""One tensor by its name, or a slice of it (one head, one position, one row), encoded for the JSON
API: activations from a trace, weights from the model. Bounded per answer: the tensors one request
asks for may hold `MAX_ELEMENTS` values together, and more is refused, before anything is encoded,
with a message that says how to ask for less. An activation whose last dims are (T, S) with nothing
above the diagonal (one head's pattern) can be sent as its lower triangle (`triangle`): half the values
(the whole tensor where an entry above is not 0; the answer says which).

A derived attention stage (scores, scaled, masked: `names.DERIVATIONS`) asked for one head is computed
for that head alone, by the rule that derives the whole stage: the same numbers at 1/H of the cost.

Names are the model family's (`names.FAMILY_NAMES`). `head` indexes query heads, by the rule of the
dim that holds heads (`names.HEAD_DIMS`): a tensor with a key/value-head dim G instead (grouped-query
attention: keys, values, their weights) is sliced at key/value head h // (H / G), the one query head h
reads, and the answer says which (`kv_head`). `position` takes the first of `names.POSITION_DIMS`. The
offline snapshot page follows the same tables (web/src/snapshot/slicing.ts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .config import DecoderConfig
from .encoding import encode_array, lower_triangle
from .engine import ExplainerModel
from .errors import InputError
from .memo.recipes import attention_scores
from .models.kernels import hidden_keys
from .names import HEAD_DIMS, POSITION_DIMS, block_name, describe, is_weight, kv_head_of, names_for, parse_name
from .schemas import EncodedTensor, TensorSpec
from .trace import Trace

MAX_ELEMENTS = 4_000_000  # values in one answer, its tensors together (16 MB as float32): slice by head/position/row


def _parse(name: str, family: str) -> tuple[int | None, str, tuple[str, ...]]:
    try:
        p = parse_name(name, family)
        dims, _ = describe(name, family)
    except (KeyError, ValueError):
        raise InputError(f"unknown tensor name {name!r} for a {family} model: names look like "
                         f"'blocks.0.attn.pattern' or 'embed.token' (GET /api/names?family={family} lists them "
                         f"all)") from None
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


def _take_head(t: Tensor, dims: list[str], head: int, name: str, config: DecoderConfig,
               heads: tuple[int, int] | None = None) -> tuple[Tensor, int | None]:
    """The slice of query head `head`, and the key/value head it was taken at (for a G dim); `heads`: the (H, G)
    of a layer whose heads are not its attention's (a linear-attention layer's value and key heads)."""
    dim = next((d for d in HEAD_DIMS if d in dims), None)
    if dim is None:
        raise InputError(f"{name} has no head dimension (its dims are {', '.join(dims)})")
    if HEAD_DIMS[dim] == "query_head":
        return _take(t, dims, dim, head, "head", name), None
    H, G = heads or (config.n_head, config.n_kv_heads)
    if not -H <= head < H:
        raise InputError(f"head {head} is out of range for {name} (0..{H - 1})")
    g = kv_head_of(head % H, H, G)
    return _take(t, dims, dim, g, "key/value head", name), g


def _position_dim(dims: list[str]) -> str:
    return next((d for d in POSITION_DIMS if d in dims), POSITION_DIMS[0])  # none: _take says so


@dataclass(frozen=True)
class _Slice:
    """A requested tensor, sliced (a view: nothing copied yet)."""

    spec: TensorSpec
    t: Tensor
    dims: list[str]
    kv_head: int | None
    triangle: bool = False  # send the lower triangle of its last two dims (nothing lies above it)

    def encode(self) -> EncodedTensor:
        s = self.spec
        t = lower_triangle(self.t) if self.triangle else self.t
        return EncodedTensor(name=s.name, head=s.head, kv_head=self.kv_head, position=s.position, row=s.row,
                             triangle=self.triangle, dims=self.dims, shape=list(self.t.shape), dtype=s.dtype,
                             data=encode_array(t, s.dtype))

    def size(self) -> int:
        """The values its answer holds: with `triangle`, row i of each (T, S) matrix up to key S - T + i."""
        if not self.triangle:
            return self.t.numel()
        T, S = self.t.shape[-2:]
        return self.t.numel() // (T * S) * (T * (S - T + 1) + T * (T - 1) // 2)


def _check_total(sizes: list[tuple[str, int]]) -> None:
    """InputError when the tensors (name, values) together are more than one answer may hold."""
    total = sum(n for _, n in sizes)
    if total <= MAX_ELEMENTS:
        return
    big, most = max(sizes, key=lambda s: s[1])
    what = (f"{big} has {total:,} values" if len(sizes) == 1 else
            f"the {len(sizes)} tensors asked for hold {total:,} values together (the largest, {big}, {most:,})")
    raise InputError(f"{what}, more than the {MAX_ELEMENTS:,} one answer may hold; ask for one head, position or "
                     f"row, or for fewer tensors at a time")


def _encode_all(slices: list[_Slice]) -> list[EncodedTensor]:
    """The slices encoded, when together they fit in one answer (else InputError, before any is encoded)."""
    _check_total([(s.spec.name, s.size()) for s in slices])
    return [s.encode() for s in slices]


def check_activations_fit(config: DecoderConfig, n_tokens: int, specs: Sequence[TensorSpec]) -> None:
    """Before a forward pass: refuse (InputError) activations `specs` of a trace of `n_tokens` tokens
    that would not fit in one answer together, or that name no activation; so that asking for too
    much costs no pass. Sizes come from the names' dims and the model's shape."""
    sizes = {"T": n_tokens, "S": n_tokens, "D": config.n_embd, "Dh": config.head_dim, "H": config.n_head,
             "G": config.n_kv_heads, "M": config.d_mlp, "V": config.vocab_size, "R": config.head_dim // 2,
             "H*Dh": config.n_head * config.head_dim, "G*Dh": config.n_kv_heads * config.head_dim,
             "E": config.n_experts or 1, "K": config.top_k or 1}
    out = []
    for spec in specs:
        _layer, suffix, dims = _parse(spec.name, config.family)
        if is_weight(suffix, config.family):
            continue  # refused by activation_tensors, at no cost
        kept = list(dims)
        for index, axes in ((spec.head, tuple(HEAD_DIMS)), (spec.position, POSITION_DIMS)):  # as the slicing takes them
            taken = next((d for d in axes if d in kept), None)
            if index is not None and taken is not None:
                kept.remove(taken)
        n = math.prod(sizes.get(d, 1) for d in kept)
        if spec.triangle and kept[-2:] == ["T", "S"]:  # what it sends: row i up to its own key (S = T here)
            n = n // n_tokens**2 * (n_tokens * (n_tokens + 1) // 2)
        out.append((spec.name, n))
    if out:
        _check_total(out)


def activation_tensors(trace: Trace, specs: Sequence[TensorSpec]) -> list[EncodedTensor]:
    """The activations `specs` of `trace`, each sliced by its `head` and `position` (and cut to its lower
    triangle where asked), within one answer's size."""
    heads: dict[tuple[int, str, int], Tensor] = {}  # derived stages computed for one head, shared by the specs
    return _encode_all([_activation_slice(trace, s, heads) for s in specs])


def weight_tensors(model: ExplainerModel, specs: Sequence[TensorSpec]) -> list[EncodedTensor]:
    """The weights `specs` of `model`, each sliced by its `head` and `row`, within one answer's size."""
    return _encode_all([_weight_slice(model, s) for s in specs])


def activation_tensor(trace: Trace, spec: TensorSpec) -> EncodedTensor:
    """An activation of `trace`, sliced by `spec.head` and `spec.position`."""
    return activation_tensors(trace, [spec])[0]


def weight_tensor(model: ExplainerModel, spec: TensorSpec) -> EncodedTensor:
    """A weight of `model`, sliced by `spec.head` and `spec.row`."""
    return weight_tensors(model, [spec])[0]


# the derived attention stages (names.DERIVATION_OPS) that one head's slice can be computed for from that head's
# sources alone: the scores' product, the scale and the mask, element by element or head by head
_PER_HEAD_OPS = ("scores", "scale", "causal_mask")


def _recorded(trace: Trace, name: str) -> bool:
    """Whether the trace holds `name` itself rather than deriving it (a stage a patched pass edited)."""
    memory = trace.memory
    blocks = getattr(memory, "blocks", None)
    return name in memory.kept or (blocks is not None and blocks.patched(name))


def _derived_head(trace: Trace, layer: int, suffix: str, head: int,
                  heads: dict[tuple[int, str, int], Tensor]) -> Tensor | None:
    """(T, S): the derived attention stage `suffix` of block `layer` at query head `head`, computed from that
    head's sources by the rule that derives the whole stage (memo.values: the same products, the same scale and
    mask, so the same numbers) at 1/H of its cost; None where `suffix` is not such a stage, or the trace holds it."""
    cfg = trace.config
    d = names_for(cfg.family).derivations.get(suffix)
    if d is None or d.op not in _PER_HEAD_OPS or not 0 <= head < cfg.n_head or _recorded(trace,
                                                                                       block_name(layer, suffix)):
        return None
    key = (layer, suffix, head)
    if key in heads:
        return heads[key]
    if d.op == "scores":
        q, k = trace[block_name(layer, d.sources[0])], trace[block_name(layer, d.sources[1])]  # (H, T, Dh), (G, S, Dh)
        per = q.shape[0] // k.shape[0]
        g = head // per
        # the group of query heads that reads key/value head g, in one product as attention_scores batches it
        out = attention_scores(q[g * per:(g + 1) * per], k[g:g + 1])[head - g * per]
    else:
        src = _derived_head(trace, layer, d.sources[0], head, heads)
        if src is None:
            src = trace[block_name(layer, d.sources[0])][head]
        if d.op == "scale":
            out = src * cfg.attn_scale
        else:
            t, s = src.shape[-2:]
            out = src.masked_fill(hidden_keys(t, s, cfg.window(layer), src.device), float("-inf"))
    heads[key] = out
    return out


def _activation_slice(trace: Trace, spec: TensorSpec,
                      heads: dict[tuple[int, str, int], Tensor] | None = None) -> _Slice:
    cfg = trace.config
    layer, suffix, dims_t = _parse(spec.name, cfg.family)
    if is_weight(suffix, cfg.family):
        raise InputError(f"{spec.name} is a weight, not an activation: ask POST /api/weights for it")
    if layer is not None and layer >= cfg.n_layer:
        raise InputError(f"{spec.name}: the model has {cfg.n_layer} blocks (0..{cfg.n_layer - 1})")
    if spec.row is not None:
        raise InputError("`row` applies to weights; for activations use `head` and `position`")
    dims = list(dims_t)
    kv_head = None
    one = None if spec.head is None or layer is None else _derived_head(trace, layer, suffix, spec.head,
                                                                          {} if heads is None else heads)
    if one is not None:  # computed for this head alone
        t = one
        dims.remove("H")
    else:
        t = trace[spec.name]
        if spec.head is not None:
            t, kv_head = _take_head(t, dims, spec.head, spec.name, cfg, _linear_heads(trace, layer, suffix, t, dims))
    if spec.position is not None:
        t = _take(t, dims, _position_dim(dims), spec.position, "position", spec.name, trace.start)
    return _Slice(spec, t, dims, kv_head, spec.triangle and _lower_triangular(t, dims, spec.name))


def _linear_heads(trace: Trace, layer: int | None, suffix: str, t: Tensor, dims: list[str]) -> tuple[int, int] | None:
    """A linear-attention layer's (value heads H, query/key heads G), for its queries' and keys' G dim: its own,
    not its model's attention's (a Gated DeltaNet layer of Qwen3.5 has 32 value heads on 16 key heads)."""
    if layer is None or not suffix.startswith("linear_attn.") or "G" not in dims:
        return None
    return int(trace[block_name(layer, "linear_attn.v")].shape[0]), int(t.shape[dims.index("G")])


def _lower_triangular(t: Tensor, dims: list[str], name: str) -> bool:
    """Whether nothing lies above the diagonal of `t`'s last two dims (row i holds keys up to its own position,
    S - T + i): then its lower triangle holds all of it. InputError unless those dims are (T, S)."""
    if dims[-2:] != ["T", "S"]:
        raise InputError(f"`triangle` applies to a tensor whose last dims are query and key positions (T, S), such "
                         f"as one head's attention pattern; {name} sliced so has dims {', '.join(dims) or 'none'}")
    T, S = t.shape[-2:]
    return not torch.triu(t, diagonal=S - T + 1).any()  # masked scores: -inf above, sent whole


def _weight_slice(model: ExplainerModel, spec: TensorSpec) -> _Slice:
    cfg = model.config
    layer, suffix, dims_t = _parse(spec.name, cfg.family)
    if not is_weight(suffix, cfg.family):
        raise InputError(f"{spec.name} is an activation: ask POST /api/trace or /api/tensors for it")
    if layer is not None and layer >= cfg.n_layer:
        raise InputError(f"{spec.name}: the model has {cfg.n_layer} blocks")
    if spec.position is not None or spec.triangle:
        raise InputError("`position` and `triangle` apply to activations; for weights use `head` and `row`")
    dims = list(dims_t)
    one_expert = spec.row is not None and dims[:1] == ["E"]  # one expert's matrix: the others are not stacked
    try:
        if one_expert:
            E = cfg.n_experts or 0
            if not -E <= spec.row < E:
                raise InputError(f"row {spec.row} is out of range for {spec.name} (0..{E - 1})")
            t = model.net.expert_weight(spec.name, spec.row % E)
            dims.pop(0)
        else:
            t = model.weight(spec.name)
    except KeyError as e:  # a name of the family this model lacks (a bias of a model without biases)
        raise InputError(f"{spec.name}: {model.name} has no such weight ({e.args[0]})") from None
    kv_head = None
    if spec.head is not None:
        t, kv_head = _take_head(t, dims, spec.head, spec.name, cfg)
    if spec.row is not None and not one_expert:
        if not dims:
            raise InputError(f"{spec.name} has no rows")
        t = _take(t, dims, dims[0], spec.row, "row", spec.name)
    return _Slice(spec, t, dims, kv_head)
