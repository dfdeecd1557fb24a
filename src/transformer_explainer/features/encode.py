"""The features of a text: the activation a trace recorded at an autoencoder's hook, encoded by that sparse
autoencoder (`sae.py`), per position the active features by decreasing activation, with what the autoencoder
misses said as it is: the reconstruction error's size per position (||x - x_hat|| / ||x||) and the variance
it explains over the text. `error` is x - decode(f) exactly, so decode(f) + error == x: the features and the
error together are the activation.

Which autoencoder: one given (a `SparseAutoencoder`, or a folder / hub reference `load_sae` reads), or one the
built-in model ships (`builtin_saes`), by default the one at its middle depth."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import InputError
from ..loading.resolve import builtin_models
from ..trace import Trace
from .sae import SparseAutoencoder, builtin_saes, check_fits, load_sae, parse_hook, trace_name

SaeLike = SparseAutoencoder | str | Path  # an autoencoder, or where `load_sae` finds one


@dataclass(frozen=True)
class Feature:
    id: int
    activation: float


@dataclass(frozen=True)
class TextFeatures:
    """A text's features at one hook. Row t of every (T, ...) tensor is the trace's position t."""

    hook: str  # TransformerLens's spelling (blocks.3.hook_resid_post)
    name: str  # the trace's name of that activation (blocks.3.resid_post)
    d_sae: int  # the autoencoder's features
    k: int | None  # at most this many active per position (a TopK autoencoder); None: no such bound
    source: str  # where the autoencoder came from: "builtin" or what was given
    tokens: list[str]
    token_ids: list[int]
    active_ids: Tensor  # (T, n) long: every feature active at the position, by decreasing activation; n the most
    active_values: Tensor  # (T, n) float32: their activations; 0 past a position's active ones (`counts`)
    counts: Tensor  # (T,) long: features active per position (L0)
    x: Tensor  # (T, D) float32: the activation at the hook
    reconstruction: Tensor  # (T, D) float32: decode(f)
    error: Tensor  # (T, D) float32: x - reconstruction, exactly

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def relative_error(self) -> Tensor:
        """(T,): ||x - x_hat|| / ||x|| per position (inf where x is 0 and x_hat is not)."""
        return self.error.norm(dim=-1) / self.x.norm(dim=-1)

    @property
    def explained_variance(self) -> float | None:
        """1 - sum ||x - x_hat||^2 / sum ||x - mean(x)||^2 over the text's positions (the mean over the text); None
        where the text has one position, or positions all equal (no variance to explain)."""
        spread = float(((self.x - self.x.mean(0)) ** 2).sum())
        if self.n_tokens < 2 or spread == 0.0:
            return None
        return 1.0 - float((self.error**2).sum()) / spread

    def dense(self) -> Tensor:
        """(T, d_sae) float32: the feature activations f as the autoencoder's encode gives them (zeros elsewhere)."""
        f = torch.zeros(self.n_tokens, self.d_sae, dtype=torch.float32, device=self.active_values.device)
        return f.scatter_(1, self.active_ids, self.active_values)

    def at(self, position: int, top: int | None = None) -> list[Feature]:
        """The features active at `position` by decreasing activation, the first `top` of them (all: None)."""
        n = int(self.counts[position])
        n = n if top is None else min(n, top)
        ids, vals = self.active_ids[position, :n].tolist(), self.active_values[position, :n].tolist()
        return [Feature(int(i), float(a)) for i, a in zip(ids, vals, strict=True)]


# -- which autoencoder -------------------------------------------------------------------------------------------

# where each hook point of a block sits in it, first to last
_DEPTH = {"resid_pre": 0, "attn_out": 1, "resid_mid": 2, "mlp_out": 3, "resid_post": 4}


def depth(hook: str) -> tuple[int, int]:
    layer, stage = parse_hook(hook)
    return layer, _DEPTH[stage]


def default_hook(hooks: list[str]) -> str:
    """The middle one of the shipped autoencoders' hooks, by depth (of blocks 1, 3 and 5's outputs: block 3's)."""
    ordered = sorted(hooks, key=depth)
    return ordered[(len(ordered) - 1) // 2]


@functools.lru_cache(maxsize=8)
def _load_cached(source: str, stamp: float, device: str) -> SparseAutoencoder:
    """One autoencoder read per folder (and its files' time) and device: a server and a notebook read it once."""
    return load_sae(source, device=device, dtype=torch.float32)


def load_for(source: str | Path, device: torch.device | str) -> SparseAutoencoder:
    """`load_sae(source)` in float32 on `device`, read again only when its weights file changed."""
    path = Path(source)
    weights = path / "sae_weights.safetensors"
    stamp = weights.stat().st_mtime if weights.is_file() else 0.0
    return _load_cached(str(source), stamp, str(device))


def choose_sae(model: Any, hook: str | None = None, sae: SaeLike | None = None,
               device: torch.device | str = "cpu") -> tuple[SparseAutoencoder, str, str]:
    """(the autoencoder, its hook, where it came from) for `model`: `sae` when given (its hook must be `hook` when
    both are), else the one the model ships at `hook` (default: its middle one); checked against the model
    (`check_fits`). Every refusal is one sentence."""
    if hook is not None:
        trace_name(hook)  # a hook spelt in a way no trace answers: one sentence saying the spellings
    if sae is not None:
        a = sae if isinstance(sae, SparseAutoencoder) else load_for(sae, device)
        source = "given" if isinstance(sae, SparseAutoencoder) else str(sae)
        if hook is not None and hook != a.cfg.hook_name:
            raise InputError(f"the autoencoder was trained at {a.cfg.hook_name}, not at {hook}: leave the hook out "
                             f"or give an autoencoder of {hook}")
    else:
        folders = builtin_saes(model)
        if not folders:
            ship = [name for name in builtin_models() if builtin_saes(name)]
            raise InputError(f"{model.name} ships no sparse autoencoder; give one (a folder with cfg.json and "
                             f"sae_weights.safetensors, or hf:owner/repo/subfolder)"
                             + (f", or use a built-in model that ships them: {', '.join(ship)}" if ship else ""))
        hook = hook or default_hook(list(folders))
        if hook not in folders:
            raise InputError(f"{model.name} ships autoencoders at {', '.join(folders)}, none at {hook}; choose one "
                             f"of those or give an autoencoder of {hook}")
        a, source = load_for(folders[hook], device), "builtin"
    check_fits(a, model)
    return a, a.cfg.hook_name, source


# -- encoding ----------------------------------------------------------------------------------------------------


@torch.inference_mode()
def encode_activation(sae: SparseAutoencoder, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """x (T, D) through `sae`: (active ids (T, n), their activations (T, n) by decreasing value, active counts
    (T,), x as float32, reconstruction (T, D)); n the most features active at any position (k for TopK)."""
    W_dec, b_dec = sae.W_dec, sae.b_dec
    x32 = x.to(device=W_dec.device, dtype=torch.float32)
    if sae.cfg.architecture == "topk" and sae.cfg.k is not None:
        # TopK read sparsely: the k largest pre-activations, ReLU'd, in decreasing order (the entries `sae.encode`
        # scatters into its dense answer), without the (T, d_sae) tensor of zeros
        top = sae.pre_activation(x32).topk(min(sae.cfg.k, sae.cfg.d_sae), dim=-1)
        vals, ids = top.values.relu(), top.indices
    else:
        f = sae.encode(x32)
        vals, ids = f.topk(max(int((f != 0).sum(-1).max(initial=0)), 1) if f.shape[0] else 1, dim=-1)
    counts = (vals > 0).sum(-1)
    # a position with fewer active features than n: its extra entries are 0, not features
    keep = torch.arange(vals.shape[-1], device=vals.device)[None] < counts[:, None]
    ids, vals = ids.where(keep, 0), vals.where(keep, 0.0)
    # decode(f) from the active rows of W_dec alone: sum_i f_i W_dec[i] + b_dec, summed where the rows are
    recon = F.embedding_bag(ids, W_dec, per_sample_weights=vals.to(W_dec.dtype), mode="sum") + b_dec
    return ids, vals.float(), counts, x32, recon.float()


def text_features(model: Any, text_or_trace: str | Trace, hook: str | None = None,
                  sae: SaeLike | None = None) -> TextFeatures:
    """The features of a text (or of a trace's text) at `hook` (TransformerLens's spelling, `blocks.3.hook_resid_post`;
    see `choose_sae` for which autoencoder), from the activation the trace recorded there: per position the active
    features by decreasing activation, with the reconstruction and its error (`error` is x - decode(f), so the two
    add up to the activation). `sae`: an autoencoder, or a folder / `hf:owner/repo/folder` in SAELens's format;
    default: the one the model ships at `hook`, or at its middle depth."""
    a, hook, source = choose_sae(model, hook, sae, _model_device(model))
    trace = text_or_trace if isinstance(text_or_trace, Trace) else model.trace(text_or_trace)
    x = trace[trace_name(hook)]  # (T, D)
    ids, vals, counts, x32, recon = encode_activation(a, x)
    return TextFeatures(hook=hook, name=trace_name(hook), d_sae=a.cfg.d_sae, k=sae_k(a), source=source,
                        tokens=list(trace.tokens), token_ids=list(trace.token_ids), active_ids=ids,
                        active_values=vals, counts=counts, x=x32, reconstruction=recon, error=x32 - recon)


def sae_k(sae: SparseAutoencoder) -> int | None:
    """A TopK autoencoder's k (at most k features active at a position); None for the other architectures."""
    k = getattr(sae.cfg, "k", None)
    return k if isinstance(k, int) and getattr(sae.cfg, "architecture", "topk") == "topk" else None


def _model_device(model: Any) -> torch.device:
    d = getattr(model, "device", None)
    return d if isinstance(d, torch.device) else torch.device("cpu")


def check_top(top: int | None, k: int | None, d_sae: int, default: int = 10) -> int:
    """`top`, or `default` (at most the most features that can be active at a position when not given): a number of
    features to list per position, 1 up to that most: k for a TopK autoencoder (`sae_k`), else its width `d_sae`."""
    most = k if k is not None else d_sae
    if top is None:
        return min(default, most)
    if not 1 <= top <= most:
        why = (f"a TopK autoencoder with k {most} makes at most {most} features active" if k is not None
               else f"the autoencoder has {most} features")
        raise InputError(f"top {top} is out of range: {why} at a position; give 1..{most}")
    return top
