"""How good an autoencoder is, on held-out text, by the figures the field reports (Gao et al. 2024; SAELens):

- explained variance: 1 - sum ||x - x_hat||^2 / sum ||x - mean(x)||^2 over every token's activation;
- cross-entropy loss recovered: the model's next-token loss with the activation replaced by its reconstruction
  (spliced into the forward pass at the hook), placed between the clean loss (1) and the loss with the activation
  zero-ablated (0): (CE_zero - CE_sae) / (CE_zero - CE_clean);
- L0: the mean number of latents active per token;
- dead fraction: the share of latents that fire on none of these tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..models.decoder import Decoder
from ..models.recorder import Recorder
from .sae import SparseAutoencoder, trace_name


@dataclass(frozen=True)
class Quality:
    hook: str
    tokens: int  # tokens measured on (their activations; the losses predict all but each window's first)
    explained_variance: float
    ce_loss_recovered: float
    ce_clean: float  # nats per token
    ce_with_sae: float
    ce_zero_ablation: float
    l0: float
    dead_fraction: float  # latents that fired on none of the tokens

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _ce(logits: Tensor, ids: Tensor) -> float:
    """Summed next-token cross-entropy of windows ids (B, T) under logits (B, T, V)."""
    V = logits.shape[-1]
    return float(F.cross_entropy(logits[:, :-1].reshape(-1, V).float(), ids[:, 1:].reshape(-1), reduction="sum"))


def capturing(names: Iterable[str]) -> tuple[dict[str, Callable[[Tensor], Tensor]], dict[str, Tensor]]:
    """Recorder patches that keep the values of `names` as they pass (unchanged), and the dict they fill."""
    got: dict[str, Tensor] = {}

    def keep(name: str) -> Callable[[Tensor], Tensor]:
        def f(v: Tensor) -> Tensor:
            got[name] = v
            return v
        return f

    return {n: keep(n) for n in names}, got


def _run(net: Decoder, ids: Tensor, patches: Mapping[str, Callable[[Tensor], Tensor]]) -> Tensor:
    rec = Recorder(patches=patches, store=False)
    return net(ids, rec=rec)


@torch.inference_mode()
def measure(net: Decoder, saes: Mapping[str, SparseAutoencoder], windows: Tensor, *, losses: bool = True,
            batch_windows: int = 32) -> dict[str, Quality]:
    """The figures of each hook's autoencoder over token windows (n, T); `losses=False` skips the three kinds of
    forward pass the losses need beyond the one that reads the activations (explained variance, L0 and dead
    fraction only; the loss figures are then NaN)."""
    names = {h: trace_name(h) for h in saes}
    acc: dict[str, dict[str, Any]] = {h: {"sse": 0.0, "sum": 0.0, "sumsq": 0.0, "n": 0, "l0": 0.0, "clean": 0.0,
                                          "sae": 0.0, "zero": 0.0,
                                          "fired": torch.zeros(s.cfg.d_sae, dtype=torch.bool, device=s.W_enc.device)}
                                      for h, s in saes.items()}
    n_pred = 0
    for i in range(0, windows.shape[0], batch_windows):
        ids = windows[i:i + batch_windows]
        patches, got = capturing(names.values())
        logits = _run(net, ids, patches)
        clean = _ce(logits, ids) if losses else 0.0
        n_pred += ids[:, 1:].numel()
        for h, sae in saes.items():
            a = acc[h]
            x = got[names[h]].reshape(-1, sae.cfg.d_in).double()
            recon, f = sae(x.to(sae.W_enc.dtype))
            a["sse"] += float((x - recon.double()).pow(2).sum())
            a["sum"] = a["sum"] + x.sum(0)
            a["sumsq"] += float(x.pow(2).sum())
            a["n"] += x.shape[0]
            active = f != 0
            a["l0"] += float(active.sum())
            a["fired"] |= active.any(0)
            if losses:
                a["clean"] += clean

                def splice(v: Tensor, sae: SparseAutoencoder = sae) -> Tensor:
                    return sae(v)[0].to(v.dtype)

                a["sae"] += _ce(_run(net, ids, {names[h]: splice}), ids)
                a["zero"] += _ce(_run(net, ids, {names[h]: torch.zeros_like}), ids)
    out = {}
    for h, a in acc.items():
        n = a["n"]
        total = a["sumsq"] - float(a["sum"].pow(2).sum()) / n  # sum ||x - mean||^2
        nan = float("nan")
        clean, sae_ce, zero = ((a[k] / n_pred if losses else nan) for k in ("clean", "sae", "zero"))
        recovered = (zero - sae_ce) / (zero - clean) if losses and zero != clean else nan
        out[h] = Quality(hook=h, tokens=n, explained_variance=1 - a["sse"] / total, ce_loss_recovered=recovered,
                         ce_clean=clean, ce_with_sae=sae_ce, ce_zero_ablation=zero, l0=a["l0"] / n,
                         dead_fraction=1 - float(a["fired"].float().mean()))
    return out


def heldout_windows(ids: Any, context: int, tokens: int) -> Tensor:
    """Consecutive windows of `context` tokens from the start of a held-out id array, `tokens` in all (at most
    what it holds)."""
    n = min(tokens, len(ids)) // context
    return torch.from_numpy(np.asarray(ids[:n * context], dtype=np.int64)).view(n, context)
