"""Next-token language-model training of our decoder on a tokenized text corpus."""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..loading.tokenizer import TextTokenizer
from ..models.decoder import Decoder
from ..models.recorder import Recorder
from ..names import block_name

log = logging.getLogger(__name__)


def tokenize_file(tokenizer: TextTokenizer, path: Path, cache: bool = True) -> np.ndarray:
    """Token ids of a text file as uint16 (uint32 for large vocabularies); documents (blank-line
    separated) are joined with <|endoftext|>. Cached beside the file, keyed by the tokenizer."""
    digest = hashlib.sha1(tokenizer.tokenizer.to_str().encode()).hexdigest()[:10]
    vocab_tag = f"{tokenizer.vocab_size}-{digest}"
    cached = path.with_suffix(f".{vocab_tag}.npy")
    if cache and cached.is_file() and cached.stat().st_mtime >= path.stat().st_mtime:
        return np.load(cached)
    dtype = np.uint16 if tokenizer.vocab_size <= 65536 else np.uint32
    eos = tokenizer.eos_id()
    docs = [d.strip() for d in path.read_text(encoding="utf-8").split("\n\n") if d.strip()]
    out: list[np.ndarray] = []
    for i in range(0, len(docs), 4096):
        for enc in tokenizer.tokenizer.encode_batch(docs[i : i + 4096], add_special_tokens=False):
            out.append(np.asarray(enc.ids, dtype=dtype))
            if eos is not None:
                out.append(np.asarray([eos], dtype=dtype))
    ids = np.concatenate(out) if out else np.zeros(0, dtype=dtype)
    if cache:
        np.save(cached, ids)
    return ids


def token_byte_lengths(tokenizer: TextTokenizer) -> np.ndarray:
    """UTF-8 bytes of each vocabulary entry (0 for special tokens), for bits per byte."""
    V = tokenizer.vocab_size
    eos = tokenizer.eos_id()
    return np.array([0 if i == eos else len(tokenizer.token_bytes(i)) for i in range(V)], dtype=np.int64)


@torch.no_grad()
def evaluate_lm(model: Decoder, ids: np.ndarray, token_bytes: np.ndarray, block_size: int,
                max_tokens: int | None = None, batch_size: int = 8) -> dict[str, float]:
    """Loss (nats/token), perplexity and bits per byte over consecutive windows of `ids`.

    Each window of `block_size` tokens predicts its tokens 1..T from those before it within the
    window; bits per byte divides the total negative log-likelihood, in bits, by the UTF-8 bytes of
    the predicted tokens. With `max_tokens`, about that many tokens are scored in windows spread
    evenly over the whole of `ids` (held-out files are often ordered by source, so a prefix would
    measure only the first sources).
    """
    was_training = model.training
    model.eval()
    starts = np.arange(0, max(len(ids) - 1, 0), block_size)
    if max_tokens is not None and len(starts) * block_size > max_tokens:
        keep = max(1, max_tokens // block_size)
        starts = starts[np.unique(np.linspace(0, len(starts) - 1, keep).round().astype(np.int64))]
    windows = [ids[s : s + block_size + 1] for s in starts]
    windows = [w for w in windows if len(w) >= 2]
    nll, count, nbytes = 0.0, 0, 0
    for i in range(0, len(windows), batch_size):
        chunk = windows[i : i + batch_size]
        T = max(len(w) for w in chunk) - 1
        x = torch.zeros(len(chunk), T, dtype=torch.long)
        y = torch.full((len(chunk), T), -100, dtype=torch.long)
        for j, w in enumerate(chunk):
            w = torch.from_numpy(w.astype(np.int64))
            x[j, : len(w) - 1], y[j, : len(w) - 1] = w[:-1], w[1:]
        logits = model(x)
        nll += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100,
                                     reduction="sum"))
        valid = y[y >= 0].numpy()
        count += len(valid)
        nbytes += int(token_bytes[valid].sum())
    if was_training:
        model.train()
    loss = nll / max(count, 1)
    return {"loss": loss, "ppl": math.exp(min(loss, 50)), "bpb": nll / math.log(2) / max(nbytes, 1),
            "tokens": float(count)}


class CausalLMLogits(nn.Module):
    """A transformers causal language model seen as the training loop sees our decoders: token ids (B, T) ->
    next-token logits (B, T, V). Its weights are the transformers model's own (`self.lm`), initialised by its
    `post_init`, and saved from there with `save_pretrained`."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, ids: Tensor) -> Tensor:
        return self.lm(input_ids=ids, use_cache=False).logits

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # a tied table is one parameter: counted once


@dataclass
class LMTask:
    """Random windows of the training tokens; batch `step` depends only on (seed, step)."""

    train_ids: np.ndarray
    valid_ids: np.ndarray
    token_bytes: np.ndarray
    block_size: int
    batch_size: int
    seed: int = 1337
    eval_tokens: int = 65536
    extra_evals: dict[str, np.ndarray] | None = None  # more held-out sets, reported as NAME_loss, NAME_bpb

    def batch(self, step: int) -> tuple[Tensor, Tensor]:
        rng = np.random.default_rng((self.seed, step))
        starts = rng.integers(0, len(self.train_ids) - self.block_size - 1, size=self.batch_size)
        w = np.stack([self.train_ids[s : s + self.block_size + 1] for s in starts]).astype(np.int64)
        w = torch.from_numpy(w)
        return w[:, :-1], w[:, 1:]

    def loss(self, model: Decoder, batch: tuple[Tensor, Tensor]) -> Tensor:
        x, y = batch
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def batch_tokens(self, batch: tuple[Tensor, Tensor]) -> int:
        return batch[1].numel()

    def evaluate(self, model: Decoder) -> dict[str, float]:
        m = evaluate_lm(model, self.valid_ids, self.token_bytes, self.block_size, self.eval_tokens)
        out = {"val_loss": m["loss"], "val_bpb": m["bpb"]}
        for name, ids in (self.extra_evals or {}).items():
            e = evaluate_lm(model, ids, self.token_bytes, self.block_size, self.eval_tokens)
            out[f"{name}_loss"], out[f"{name}_bpb"] = e["loss"], e["bpb"]
        return out


def load_balancing_loss(router_logits: list[Tensor], n_experts: int, top_k: int) -> Tensor:
    """The Switch Transformer's auxiliary loss (Fedus et al., 2021, eq. 4-6), as transformers computes it for
    Mixtral: over the tokens of every block with experts, n_experts * sum over experts e of f_e * P_e, where f_e
    is the fraction of (token, choice) pairs sent to e (they sum to top_k) and P_e the mean probability the
    router gives e. It is smallest, top_k, when tokens are spread evenly; its gradient flows through P_e, so
    it pushes probability away from the experts that get more than their share."""
    probs = torch.softmax(torch.cat([r.reshape(-1, n_experts) for r in router_logits]).float(), dim=-1)
    chosen = torch.topk(probs, top_k, dim=-1).indices.reshape(-1)
    sent = torch.zeros(n_experts, device=probs.device).index_add_(0, chosen, torch.ones_like(chosen,
                                                                                          dtype=torch.float32))
    return n_experts * (sent / probs.shape[0] * probs.mean(dim=0)).sum()


@dataclass
class MoeLMTask(LMTask):
    """`LMTask` plus, for a mixture of experts, `aux_loss_coef` times the load-balancing loss of its routers
    (their logits taken on the way through the forward pass, which otherwise records nothing)."""

    aux_loss_coef: float = 0.0

    def loss(self, model: Decoder, batch: tuple[Tensor, Tensor]) -> Tensor:
        if not self.aux_loss_coef or not model.config.moe_layers:
            return super().loss(model, batch)
        c = model.config
        assert c.n_experts is not None and c.top_k is not None
        x, y = batch
        kept: list[Tensor] = []

        def keep(logits: Tensor) -> Tensor:
            kept.append(logits)
            return logits

        rec = Recorder(patches={block_name(i, "mlp.router_logits"): keep for i in c.moe_layers}, store=False)
        logits = model(x, rec=rec)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        return ce + self.aux_loss_coef * load_balancing_loss(kept, c.n_experts, c.top_k)
