"""Feature pages: what each feature of an autoencoder does on the project's corpus, computed once and shipped
beside the autoencoder (`feature_pages.npz` + `feature_pages.json` in its folder).

A page holds, for one feature:
- its top-activating contexts: the windows of the corpus where it fires most (one context per window, at the
  window's most active token), `before` tokens before that token and `after` after it, with the feature's
  activation at every token;
- contexts at a few quantiles of its nonzero activations (what a typical firing looks like, not only the peak);
- the histogram of those activations and the feature's density: the fraction of the corpus's tokens where it is
  active;
- the tokens its decoder direction promotes and suppresses: the logits the direction alone gives through the
  model's final norm and unembedding, as the logit lens reads the residual stream (`model.residual_logits`), less
  what the zero vector gives there (the final norm's shift, the same for every feature).

The corpus is cut into windows of `window` tokens and each traced on its own; a window's first token is not chosen
for a context (its residual stream has no context before it: the cut is arbitrary), though it is shown where it
falls inside one. The arrays are stored compressed (numpy's npz, read without pickle); the json says what they
were computed on."""

from __future__ import annotations

import functools
import io
import json
import time
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import CheckpointError, InputError, ModelNotFoundError
from ..loading.checkpoint import atomic_write_bytes
from ..loading.files import read_json
from .sae import SparseAutoencoder, builtin_saes, trace_name

PAGES_FILE = "feature_pages.npz"
META_FILE = "feature_pages.json"
FORMAT = 1


@dataclass(frozen=True)
class PageSpec:
    """What a page holds and how the corpus is read."""

    top: int = 10  # top-activating contexts per feature (one per window)
    quantiles: tuple[float, ...] = (0.25, 0.5, 0.75)  # of a feature's nonzero activations
    per_quantile: int = 2  # contexts at each quantile (the tokens ranked there and just above)
    before: int = 8  # tokens shown before a context's token
    after: int = 3  # and after it
    bins: int = 20  # histogram bins, equal widths from 0 to the feature's largest activation
    logits: int = 10  # promoted and suppressed tokens
    window: int = 128  # corpus tokens per traced window

    @property
    def width(self) -> int:
        return self.before + 1 + self.after


# -- the contexts and their activations ---------------------------------------------------------------------------


def _most(sae: SparseAutoencoder) -> int:
    """Feature activations kept per token: k for a TopK autoencoder (all of them), else at most 256."""
    return sae.cfg.k if sae.cfg.architecture == "topk" and sae.cfg.k is not None else min(sae.cfg.d_sae, 256)


@torch.inference_mode()
def corpus_features(model: Any, saes: Sequence[SparseAutoencoder], windows: np.ndarray,
                    progress: Callable[[int, int], None] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each window (S, L) traced by `model` once, and its activation at each autoencoder's hook encoded: per
    autoencoder and token the largest feature activations (`_most`; N = S*L rows: ids int32, values float32, by
    decreasing value, 0 past the active ones)."""
    S, L = windows.shape
    out = [(np.zeros((S * L, _most(a)), dtype=np.int32), np.zeros((S * L, _most(a)), dtype=np.float32))
           for a in saes]
    for s in range(S):
        trace = model.trace_ids([int(i) for i in windows[s]])
        for a, (ids, vals) in zip(saes, out, strict=True):
            p = a.W_enc
            f = a.encode(trace[trace_name(a.cfg.hook_name)].to(device=p.device, dtype=p.dtype)).float()
            v, i = f.topk(_most(a), dim=-1)
            ids[s * L:(s + 1) * L] = i.cpu().numpy()
            vals[s * L:(s + 1) * L] = v.clamp_min(0).cpu().numpy()
        if progress is not None:
            progress(s + 1, S)
    return out


def _ranks(groups: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """For sorted `groups`: each entry's rank inside its group, and each group's first index."""
    starts = np.searchsorted(groups, np.arange(n_groups))
    return np.arange(len(groups)) - starts[groups], starts


def page_arrays(ids: np.ndarray, vals: np.ndarray, tokens: np.ndarray, window: int, d_sae: int,
                spec: PageSpec) -> dict[str, np.ndarray]:
    """The pages' statistics from the corpus's feature activations (`corpus_features`) and its tokens (N,): every
    array but the promoted and suppressed tokens. Positions index the corpus's N tokens; -1 is none."""
    N, most = ids.shape
    F, B = d_sae, spec.bins
    pos = np.repeat(np.arange(N, dtype=np.int64), most)
    feat, val = ids.ravel().astype(np.int64), vals.ravel()
    keep = (val > 0) & (pos % window != 0)  # a window's first token is not chosen (the module says why)
    pos, feat, val = pos[keep], feat[keep], val[keep]
    counted = N - N // window
    fires = np.bincount(feat, minlength=F)
    max_act = np.zeros(F, dtype=np.float32)
    np.maximum.at(max_act, feat, val)

    # top contexts: each window's most active token for the feature (the earliest on a tie), the top windows
    seq = pos // window
    o = np.lexsort((pos, -val, seq, feat))
    first = np.ones(len(o), dtype=bool)
    first[1:] = (feat[o][1:] != feat[o][:-1]) | (seq[o][1:] != seq[o][:-1])
    best = o[first]
    best = best[np.lexsort((pos[best], -val[best], feat[best]))]
    rank, _ = _ranks(feat[best], F)
    take = rank < spec.top
    top_pos = np.full((F, spec.top), -1, dtype=np.int64)
    top_pos[feat[best][take], rank[take]] = pos[best][take]

    # quantile contexts: the tokens ranked at each quantile of the feature's activations, ascending, and above it
    o = np.lexsort((pos, val, feat))
    _, starts = _ranks(feat[o], F)
    Q, E = len(spec.quantiles), spec.per_quantile
    q_pos = np.full((F, Q, E), -1, dtype=np.int64)
    q_value = np.zeros((F, Q), dtype=np.float32)
    has = fires > 0
    for qi, q in enumerate(spec.quantiles):
        at = np.rint(q * np.maximum(fires - 1, 0)).astype(np.int64)
        q_value[has, qi] = val[o[starts[has] + at[has]]]
        for e in range(E):
            ok = has & (at + e < fires)
            q_pos[ok, qi, e] = pos[o[starts[ok] + at[ok] + e]]

    # histogram of the nonzero activations, bins of equal width from 0 to the largest
    b = np.minimum(B - 1, np.floor(val / max_act[feat] * B).astype(np.int64))
    counts = np.bincount(feat * B + b, minlength=F * B).reshape(F, B).astype(np.int32)

    top_acts = _window_activations(top_pos, feat_of(top_pos), ids, vals, window, spec)
    q_acts = _window_activations(q_pos, feat_of(q_pos), ids, vals, window, spec)
    # the corpus's tokens once: a context's tokens are read from it at its position
    small = np.uint16 if int(tokens.max(initial=0)) < 2**16 else np.uint32
    return {"density": (fires / counted).astype(np.float32), "max_activation": max_act, "counts": counts,
            "top_pos": top_pos.astype(np.int32), "top_acts": top_acts, "quantile_value": q_value,
            "quantile_pos": q_pos.astype(np.int32), "quantile_acts": q_acts, "corpus_ids": tokens.astype(small),
            "window": np.array(window, dtype=np.int64), "corpus_tokens": np.array(counted, dtype=np.int64)}


def feat_of(positions: np.ndarray) -> np.ndarray:
    """The feature each entry of a (F, ...) array of positions belongs to."""
    return np.broadcast_to(np.arange(positions.shape[0]).reshape(-1, *([1] * (positions.ndim - 1))),
                           positions.shape)


def _window_activations(positions: np.ndarray, features: np.ndarray, ids: np.ndarray, vals: np.ndarray,
                        window: int, spec: PageSpec, chunk: int = 4096) -> np.ndarray:
    """The feature's activation (..., W) at the tokens around each position, from `before` before it to `after`
    after it (0 outside its window or for no position)."""
    P, J = positions.reshape(-1), features.reshape(-1)
    N = ids.shape[0]
    offs = np.arange(-spec.before, spec.after + 1)
    acts = np.zeros((len(P), spec.width), dtype=np.float32)
    for a in range(0, len(P), chunk):
        p, j = P[a:a + chunk], J[a:a + chunk]
        q = p[:, None] + offs
        inside = (p[:, None] >= 0) & (q >= 0) & (q < N) & (q // window == p[:, None] // window)
        qc = np.clip(q, 0, N - 1)
        hit = ids[qc] == j[:, None, None]  # (n, W, most)
        acts[a:a + chunk] = np.where(inside, (vals[qc] * hit).sum(-1), 0.0)
    return acts.reshape(*positions.shape, spec.width)


@torch.inference_mode()
def direction_logits(model: Any, sae: SparseAutoencoder, n: int, chunk: int = 256) -> dict[str, np.ndarray]:
    """The `n` tokens each feature's decoder direction promotes most and suppresses most: `model.residual_logits`
    of the direction (the final norm and the unembedding, as the logit lens reads a residual stream) less that of
    the zero vector (the norm's shift, the same for every feature)."""
    W = sae.W_dec.detach()
    D = W.shape[1]
    dtype = getattr(model, "dtype", torch.float32)
    base = model.residual_logits(torch.zeros(1, D, dtype=dtype, device=model.device)).float()
    out: dict[str, list[np.ndarray]] = {"promoted_ids": [], "promoted_logits": [], "suppressed_ids": [],
                                        "suppressed_logits": []}
    for a in range(0, W.shape[0], chunk):
        lg = model.residual_logits(W[a:a + chunk].to(device=model.device, dtype=dtype)).float() - base
        up, down = lg.topk(n, dim=-1), (-lg).topk(n, dim=-1)
        out["promoted_ids"].append(up.indices.int().cpu().numpy())
        out["promoted_logits"].append(up.values.cpu().numpy())
        out["suppressed_ids"].append(down.indices.int().cpu().numpy())
        out["suppressed_logits"].append((-down.values).cpu().numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


def build_pages(model: Any, saes: Sequence[SparseAutoencoder], corpus: np.ndarray, spec: PageSpec = PageSpec(), *,
                corpus_name: str = "corpus", progress: Callable[[int, int], None] | None = None
                ) -> list[tuple[dict[str, np.ndarray], dict[str, Any]]]:
    """The pages of every feature of each autoencoder in `saes` on `model` (the corpus traced once for all), from the
    corpus's token ids (1-D; cut into windows of `spec.window`, a partial last window left out): per autoencoder
    (arrays, meta), as `write_pages` stores them."""
    t0 = time.perf_counter()
    S = len(corpus) // spec.window
    if S < 1:
        raise ValueError(f"the corpus has {len(corpus)} tokens, fewer than one window of {spec.window}")
    windows = np.asarray(corpus[:S * spec.window], dtype=np.int64).reshape(S, spec.window)
    out = []
    for sae, (ids, vals) in zip(saes, corpus_features(model, saes, windows, progress), strict=True):
        arrays = page_arrays(ids, vals, windows.reshape(-1), spec.window, sae.cfg.d_sae, spec)
        arrays.update(direction_logits(model, sae, spec.logits))
        meta = {"format": FORMAT, "model": getattr(model, "name", None), "hook": sae.cfg.hook_name,
                "d_sae": sae.cfg.d_sae, "corpus": corpus_name, "windows": S,
                "corpus_tokens": int(arrays["corpus_tokens"]), "stored_per_token": _most(sae), "spec": asdict(spec),
                "seconds": round(time.perf_counter() - t0, 1)}
        out.append((arrays, meta))
    return out


# the arrays as stored: compact types (the activations in float16, token ids in the smallest type that holds them)
_STORED = {"top_acts": np.float16, "quantile_acts": np.float16, "promoted_logits": np.float16,
           "suppressed_logits": np.float16}


def write_pages(folder: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """`feature_pages.npz` (compressed) and `feature_pages.json` in `folder`, each written whole or not at all."""
    stored = {k: v.astype(_STORED[k]) if k in _STORED else v for k, v in arrays.items()}
    buf = io.BytesIO()
    np.savez_compressed(buf, **stored)
    atomic_write_bytes(folder / PAGES_FILE, buf.getvalue())
    atomic_write_bytes(folder / META_FILE, (json.dumps(meta, indent=2) + "\n").encode())


# -- reading one page --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    token_ids: list[int]
    tokens: list[str]
    activations: list[float]
    center: int  # index of the token the context was chosen for
    activation: float  # the activation there


@dataclass(frozen=True)
class Quantile:
    quantile: float
    activation: float
    contexts: list[Context]


@dataclass(frozen=True)
class FeaturePage:
    hook: str
    id: int
    d_sae: int
    corpus: str
    corpus_tokens: int
    density: float  # fraction of the corpus's tokens where the feature is active
    max_activation: float
    top_contexts: list[Context]
    quantiles: list[Quantile]
    bin_edges: list[float]  # bins + 1 edges, from 0 to max_activation
    counts: list[int]  # nonzero activations per bin
    promoted: list[tuple[int, str, float]]  # (token id, its text, its logit)
    suppressed: list[tuple[int, str, float]]
    description: str | None = None  # what the project wrote the feature detects, having read its page; None: nothing

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("promoted", "suppressed"):
            d[key] = [{"id": i, "token": t, "logit": v} for i, t, v in getattr(self, key)]
        return d


class FeaturePages:
    """The pages of one autoencoder, as stored; `page(i, token_text)` reads feature i's."""

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        self.a, self.meta = arrays, meta
        self.spec = PageSpec(**{**meta["spec"], "quantiles": tuple(meta["spec"]["quantiles"])})
        # what the project wrote of some features after reading their pages ({"id": "text"} in the json)
        self.descriptions = {int(k): str(v) for k, v in (meta.get("descriptions") or {}).items()}

    @property
    def d_sae(self) -> int:
        return int(self.meta["d_sae"])

    def page(self, feature: int, token_text: Callable[[int], str]) -> FeaturePage:
        a, c = self.a, self.spec.before

        corpus, window = a["corpus_ids"], int(a["window"])

        def context(pos: int, acts: np.ndarray) -> Context:
            start = pos - pos % window  # the context stays inside the window it was traced in
            lo, hi = max(start, pos - c), min(start + window, pos + self.spec.after + 1)
            ids = [int(t) for t in corpus[lo:hi]]
            vals = [float(v) for v in acts[c - (pos - lo):c + (hi - pos)]]
            return Context(ids, [token_text(i) for i in ids], vals, pos - lo, vals[pos - lo])

        tops = [context(int(a["top_pos"][feature, r]), a["top_acts"][feature, r])
                for r in range(a["top_pos"].shape[1]) if a["top_pos"][feature, r] >= 0]
        quantiles = []
        for qi, q in enumerate(self.spec.quantiles):
            ctxs = [context(int(a["quantile_pos"][feature, qi, e]), a["quantile_acts"][feature, qi, e])
                    for e in range(a["quantile_pos"].shape[2]) if a["quantile_pos"][feature, qi, e] >= 0]
            if ctxs:
                quantiles.append(Quantile(q, float(a["quantile_value"][feature, qi]), ctxs))
        top_act = float(a["max_activation"][feature])
        B = a["counts"].shape[1]

        def logits(kind: str) -> list[tuple[int, str, float]]:
            return [(int(i), token_text(int(i)), float(v))
                    for i, v in zip(a[f"{kind}_ids"][feature], a[f"{kind}_logits"][feature], strict=True)]

        return FeaturePage(hook=self.meta["hook"], id=feature, d_sae=self.d_sae, corpus=self.meta["corpus"],
                           corpus_tokens=int(a["corpus_tokens"]), density=float(a["density"][feature]),
                           max_activation=top_act, top_contexts=tops, quantiles=quantiles,
                           bin_edges=[top_act * i / B for i in range(B + 1)],
                           counts=[int(n) for n in a["counts"][feature]], promoted=logits("promoted"),
                           suppressed=logits("suppressed"), description=self.descriptions.get(feature))


# the per-feature arrays (first dimension: the features), and the rest
_KEYS = ("density", "max_activation", "counts", "top_pos", "top_acts", "quantile_value", "quantile_pos",
         "quantile_acts", "promoted_ids", "promoted_logits", "suppressed_ids", "suppressed_logits")
_SHARED = ("corpus_ids", "window", "corpus_tokens")


@functools.lru_cache(maxsize=8)
def _load(folder: str, stamp: int) -> FeaturePages:
    path = Path(folder) / PAGES_FILE
    meta = read_json(Path(folder) / META_FILE)
    if meta.get("format") != FORMAT or not isinstance(meta.get("spec"), dict):
        raise CheckpointError(f"{Path(folder) / META_FILE} is not feature pages of format {FORMAT}")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:  # cut short, or not an npz
        raise CheckpointError(f"{path} is not readable feature pages: {e}") from None
    missing = [k for k in (*_KEYS, *_SHARED) if k not in arrays]
    F = meta.get("d_sae")
    if missing or not isinstance(F, int) or any(arrays[k].shape[0] != F for k in _KEYS):
        raise CheckpointError(f"{path} does not hold the pages of {F} features "
                              f"({'it lacks ' + ', '.join(missing) if missing else 'their arrays disagree'})")
    n = len(arrays["corpus_ids"])
    if max(int(arrays["top_pos"].max(initial=-1)), int(arrays["quantile_pos"].max(initial=-1))) >= n:
        raise CheckpointError(f"{path} points past its corpus of {n} tokens")
    for k in ("top_acts", "quantile_acts", "promoted_logits", "suppressed_logits"):
        arrays[k] = arrays[k].astype(np.float32)
    try:
        return FeaturePages(arrays, meta)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{Path(folder) / META_FILE} is not readable feature pages: {e!r}") from None


def load_pages(folder: Path) -> FeaturePages | None:
    """The pages shipped in an autoencoder's folder (read once per file version), or None when it has none."""
    path = folder / PAGES_FILE
    if not path.is_file() or not (folder / META_FILE).is_file():
        return None
    return _load(str(folder), path.stat().st_mtime_ns)


def pages_size(folder: Path) -> int:
    """Bytes of the pages in `folder`."""
    return sum((folder / n).stat().st_size for n in (PAGES_FILE, META_FILE) if (folder / n).is_file())


def shipped_page(name: str, folders: dict[str, Path], hook: str, feature: int,
                 token_text: Callable[[int], str]) -> FeaturePage:
    """Feature `feature`'s page of the autoencoder shipped at `hook` (`folders`: what `builtin_saes` gives for the
    model called `name`); one sentence when there is none."""
    if hook not in folders:
        shipped = f"ships autoencoders at {', '.join(folders)}" if folders else "ships no autoencoder"
        raise ModelNotFoundError(f"{name} {shipped}, none at {hook}")
    pages = load_pages(folders[hook])
    if pages is None:
        raise ModelNotFoundError(f"the autoencoder of {name} at {hook} ships without feature pages")
    if not 0 <= feature < pages.d_sae:
        raise InputError(f"feature {feature} is out of range: the autoencoder at {hook} has features "
                         f"0..{pages.d_sae - 1}")
    return pages.page(feature, token_text)


def feature_page(model: Any, hook: str, feature: int) -> FeaturePage:
    """Feature `feature`'s page of the autoencoder `model` ships at `hook` (what the server's page route answers)."""
    return shipped_page(model.name, builtin_saes(model), hook, feature, model.tokenizer.token_text)
