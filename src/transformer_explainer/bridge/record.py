"""`record(model, input_ids, patches=...)`: one forward of a transformers decoder, every stage the bridge sees
recorded, values replaced where a patch says; `residual_logits(model, x)`: the logits the model would give were
x its last residual stream (the logit lens).

While a call is in flight the model runs attention through `te_record` (transformers' own eager function,
called through) and carries the bridge's dispatching hooks; when the last call on the model ends, its previous
attention implementation is set back and the hooks are removed, so the model's own forward is as before.
"""

from __future__ import annotations

import inspect
import re
import threading
import weakref
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..errors import InputError
from . import attention
from .hooks import install
from .state import Call, Patch, Recorder, active
from .structure import Structure, find_structure, first_tensor
from .vocabulary import generic_block_name


@dataclass(frozen=True)
class LayerKind:
    """What one decoder layer is: its mixer kinds (e.g. ("attention",), ("linear_attention",)), its local
    window (keys a query reads, None for full attention or a layer that is not attention) and whether the
    recording found a resid_mid (a point between the mixing sublayer and the MLP)."""

    index: int
    kinds: tuple[str, ...]
    window: int | None
    has_resid_mid: bool


@dataclass(frozen=True)
class Recording:
    """What `record` returns: the values by name (batch dimension dropped), what each layer is, the logits at the
    last position (V,) and each attention layer's scale and soft cap as its attention applied them (what derives
    its masked scores: `memo.values.applied_scores(q, k, mask, *scales[layer])`)."""

    values: dict[str, torch.Tensor]
    layers: tuple[LayerKind, ...]
    last_logits: torch.Tensor | None = None
    scales: dict[int, tuple[float, float | None]] = field(default_factory=dict)
    sums: dict[str, tuple[str, str]] = field(default_factory=dict)  # left out: each the sum of two values kept


# what a caller may ask `record` to leave out, deriving it on access instead: each layer's masked scores (an
# (H, T, S) product the attention's softmax read, from q, k, the mask and `Recording.scales`), z (pattern @ V, where
# no patch replaced it), resid_mid (where it is resid_pre + attn_out bit for bit: `Recording.sums`) and every
# position's logits but the last (from the last layer's output, by `residual_logits`)
LEAVE_OUT = frozenset({"attn.masked_scores", "attn.z", "resid_mid", "logits"})


@dataclass
class _Session:
    structure: Structure
    users: int
    previous: str | None
    handles: list[RemovableHandle]


_LOCK = threading.Lock()
_SESSIONS: weakref.WeakKeyDictionary[nn.Module, _Session] = weakref.WeakKeyDictionary()


@contextmanager
def _session(model: nn.Module) -> Iterator[Structure]:
    """While any call records `model`: attention through te_record and the hooks installed; undone after the
    last one."""
    with _LOCK:
        s = _SESSIONS.get(model)
        if s is None:
            structure = find_structure(model)
            attention.register()
            previous = model.config._attn_implementation
            if previous != attention.ATTENTION_NAME:
                model.set_attn_implementation(attention.ATTENTION_NAME)
            s = _SESSIONS[model] = _Session(structure, 0, previous, install(model, structure))
        s.users += 1
    try:
        yield s.structure
    finally:
        with _LOCK:
            s.users -= 1
            if s.users == 0:
                for h in s.handles:
                    h.remove()
                if s.previous != attention.ATTENTION_NAME:
                    model.set_attn_implementation(s.previous)
                del _SESSIONS[model]


def _ids(input_ids: torch.Tensor | list[int], vocab: int | None, device: torch.device) -> torch.Tensor:
    ids = torch.as_tensor(input_ids, device=device)
    if ids.ndim == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.ndim != 1 or ids.numel() == 0 or ids.dtype in (torch.float16, torch.bfloat16, torch.float32,
                                                            torch.float64, torch.bool):
        raise InputError("The bridge records one sequence of token ids at a time (a non-empty list of integers).")
    if vocab is not None and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise InputError(f"A token id is outside the vocabulary, whose ids are 0..{vocab - 1}.")
    return ids.long()[None]


# the stages a patch may replace, by what a layer needs for each
PATCHABLE: dict[str, str | None] = {"resid_pre": None, "attn_out": "attention", "attn.z": "attention",
                                    "mlp_out": "mlp", "resid_post": None}


def check_patches(patches: Mapping[str, Patch], structure: Structure) -> None:
    """An InputError (one sentence) for the first patch that names nothing this model computes."""
    n = len(structure.layers)
    for name, fn in patches.items():
        m = re.fullmatch(r"blocks\.(\d+)\.(.+)", name)
        if m is None or m.group(2) not in PATCHABLE:
            raise InputError(f"{name!r} cannot be patched: the bridge patches blocks.L.resid_pre, attn_out, attn.z, "
                             "mlp_out and resid_post.")
        i, stage = int(m.group(1)), m.group(2)
        if i >= n:
            raise InputError(f"{name!r} names layer {i}, but this model's layers are 0..{n - 1}.")
        layer, needs = structure.layers[i], PATCHABLE[stage]
        if needs == "attention" and "attention" not in layer.kinds:
            raise InputError(f"Layer {i} has no attention (its token mixers: {', '.join(layer.kinds)}), so "
                             f"{name!r} cannot be patched.")
        if needs == "mlp" and layer.mlp is None:
            raise InputError(f"Layer {i} has no MLP that the bridge can find, so {name!r} cannot be patched.")
        if not callable(fn):
            raise InputError(f"The patch of {name!r} is not a function of the value it replaces.")


def resid_mid(calls: list[Call], mixers: set[str], mlp: str | None, resid_post: torch.Tensor) -> torch.Tensor | None:
    """The residual stream between a layer's mixing sublayer and its MLP, where the layer has one: the input X
    of a child called after the last mixer (up to the MLP itself) to which the layer adds the MLP's branch B
    (the output of the MLP or of a child called after it) to give Y (the input of a later child, or the layer's
    output), exactly: X + B == Y as the layer computes it. None for parallel sublayers or no MLP."""
    names = [c.name for c in calls]
    if mlp not in names or not any(n in mixers for n in names):
        return None
    last_mixer = max(j for j, n in enumerate(names) if n in mixers)
    at_mlp = names.index(mlp, last_mixer) if mlp in names[last_mixer:] else None
    if at_mlp is None:
        return None
    xs = [c.input for c in calls[last_mixer + 1: at_mlp + 1] if c.input is not None]
    for b_at in range(at_mlp, len(calls)):
        b = calls[b_at].output
        ys = [c.input for c in calls[b_at + 1:] if c.input is not None] + [resid_post]
        for x in xs:
            for y in ys:
                if b is not None and x.shape == b.shape == y.shape and torch.equal(x + b, y):
                    return x
    return None


def takes_logits_to_keep(model: nn.Module) -> bool:
    """Whether the model's forward takes `logits_to_keep` (computes the logits of the last positions alone)."""
    return "logits_to_keep" in inspect.signature(type(model).forward).parameters


def record(model: nn.Module, input_ids: torch.Tensor | list[int], *,
           patches: Mapping[str, Patch] | None = None, leave_out: Collection[str] = ()) -> Recording:
    """Run `model` (a transformers `*ForCausalLM`, in eval mode) on one sequence and record every stage the
    bridge sees, under the project's names (`blocks.3.attn.pattern`, `blocks.3.resid_post`, `logits`).
    Safe to call from several threads at once on the same model, with patches or without.

    `patches` maps names to functions that replace the value as it is computed: `blocks.L.resid_pre` (the
    decoder layer's input), `blocks.L.attn_out` and `blocks.L.mlp_out` (the attention and MLP modules' outputs),
    `blocks.L.resid_post` (the layer's output) and `blocks.L.attn.z` (each head's pattern @ V, before the output
    projection). A patch sees the value with the batch dimension, e.g. (1, T, D) for resid_pre and (1, H, T, Dv)
    for attn.z (as the engine's `trace_ids` patches do), and returns a new tensor of that shape (the one it is
    given may be a view of a value recorded before it, so it is not to be changed in place); what is recorded is
    the patched value, and everything downstream computes from it. A name this model does not compute (attn.z
    of a layer with no attention, an unknown stage or layer) is refused with an InputError, before the forward
    where the structure shows it, after it where the forward never reached the value.

    `leave_out` (some of LEAVE_OUT) names what the caller derives itself, so the pass neither computes nor keeps
    it: "attn.masked_scores" (each attention layer's (H, T, S) scores: `memo.values.applied_scores` gives them
    from q, k, the mask and `Recording.scales`, by the same arithmetic), "attn.z" (`memo.values.attention_z` from
    the pattern and the values; kept where a patch replaced it or eager returned no pattern), "resid_mid" (left
    out where it equals resid_pre + attn_out bit for bit in this pass: `Recording.sums`) and "logits" (the forward
    runs with `logits_to_keep=1` where it takes it and the bridge finds the final norm, and `last_logits` is all it
    gives: `residual_logits(model, the last layer's resid_post)` gives the rest; ln_final.out is then the final norm
    run on the last layer's output at every position, by its own module; otherwise the logits it computed are kept). A
    caller leaving the logits out checks that a model's values are those of a whole forward (`GenericModel` does,
    once, on a probe: Gemma 4's forward runs its KV-sharing layers on the kept positions alone)."""
    if unknown := sorted(set(leave_out) - LEAVE_OUT):
        raise ValueError(f"record cannot leave out {unknown[0]!r}: only {sorted(LEAVE_OUT)}")
    ids = _ids(input_ids, getattr(model.config, "vocab_size", None), next(model.parameters()).device)
    patches = dict(patches or {})
    last_only = "logits" in leave_out and takes_logits_to_keep(model)
    with _session(model) as structure:
        check_patches(patches, structure)
        last_only = last_only and structure.final_norm is not None
        rec = Recorder(owner=id(model), layer_of=structure.layer_of(), patches=patches,
                       leave_out=frozenset(leave_out))
        with active(rec), torch.no_grad():
            out = model(input_ids=ids, use_cache=False, **({"logits_to_keep": 1} if last_only else {}))
    if missing := sorted(set(patches) - rec.applied):
        raise InputError(f"This model's forward never computed {missing[0]!r} where the bridge sees it, so it could "
                         "not be patched.")
    if not last_only:
        rec.values["logits"] = out.logits[0].detach()
    elif (post := rec.values.get(generic_block_name(structure.layers[-1].index, "resid_post"))) is not None:
        # the head read the last position alone: the final norm's output at every position is its own module's
        assert structure.final_norm is not None
        with torch.no_grad():
            normed = first_tensor(structure.final_norm(post[None]))
        if normed is not None:
            rec.values["ln_final.out"] = normed[0].detach()
    kinds, sums = [], {}
    for layer in structure.layers:
        post = rec.values.get(generic_block_name(layer.index, "resid_post"))
        mid = None if post is None else resid_mid(rec.calls.get(layer.index, []), set(layer.mixers), layer.mlp, post)
        pre, attn_out = (rec.values.get(generic_block_name(layer.index, s)) for s in ("resid_pre", "attn_out"))
        if mid is not None and not ("resid_mid" in leave_out and pre is not None and attn_out is not None and
                                    pre.shape == attn_out.shape == mid.shape and torch.equal(pre + attn_out, mid)):
            rec.put(layer.index, "resid_mid", mid)
        elif mid is not None:  # the sum the layer computed, the same numbers: derived on access
            sums[generic_block_name(layer.index, "resid_mid")] = (generic_block_name(layer.index, "resid_pre"),
                                                                  generic_block_name(layer.index, "attn_out"))
        kinds.append(LayerKind(layer.index, layer.kinds, rec.windows.get(layer.index), mid is not None))
    return Recording(rec.values, tuple(kinds), out.logits[0, -1].detach(), rec.scales, sums)


def residual_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The logits (T, V) that `model` would give were `x` (T, D) its last residual stream (the last decoder
    layer's output): the logit lens. Computed by the model's own code from the final norm on, so whatever its
    causal-LM head does after the unembedding is done too (Granite's logits_scaling, Falcon-H1's
    lm_head_multiplier, Gemma's final soft cap, Cohere's logit_scale): the model runs on one token, and its
    final norm reads `x` instead of that token's last residual stream, each row of `x` as a sequence of one
    position in a batch (so that the shapes after the norm are the ones the model makes). Refused (InputError,
    one sentence) where the bridge finds no final norm, or where the decoder does anything between its last
    layer and that norm (the logits would not be those of `x`). Safe to call from several threads at once, and
    beside `record`."""
    hidden = getattr(model.config, "hidden_size", None)
    if not isinstance(x, torch.Tensor) or x.ndim != 2 or x.shape[0] == 0 or (hidden is not None and
                                                                            x.shape[1] != hidden):
        raise InputError(f"The logit lens reads a residual stream of shape (positions, {hidden}), one row a "
                         "position.")
    param = next(model.parameters())
    with _session(model) as structure:
        if structure.final_norm is None:
            raise InputError(f"{type(model).__name__}'s decoder has no final norm that the bridge can find, so it "
                             "cannot give the logits of a residual stream.")
        rec = Recorder(owner=id(model), layer_of=structure.layer_of(),
                       lens=x.detach().to(device=param.device, dtype=param.dtype)[:, None])  # (T, 1, D)
        with active(rec), torch.no_grad():
            out = model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=param.device), use_cache=False)
    logits = out.logits  # (T, 1, V)
    if rec.lens_calls != 1 or not rec.lens_follows:
        raise InputError(f"{type(model).__name__} does not apply its final norm once, straight to its last layer's "
                         "output, so the bridge cannot give the logits of a residual stream.")
    if logits.shape[:2] != (x.shape[0], 1):
        raise InputError(f"{type(model).__name__}'s head does not give one row of logits for each position of a "
                         "residual stream put in its final norm, so the bridge cannot give the logits of one.")
    return logits[:, 0].detach()
