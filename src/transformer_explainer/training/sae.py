"""Training TopK sparse autoencoders on a model's activations, as Gao et al. 2024 ("Scaling and evaluating sparse
autoencoders") describe it.

- Activations come from the model run on random windows of the tokenized corpus; one forward pass serves every
  hook asked for. A chunk of windows is a shuffled buffer: its vectors are mixed across windows before batching.
- The autoencoder trains on activations scaled so that E||x||^2 = d_in (the scale is folded into the biases when
  it is saved, so the files read raw activations and keep unit-norm decoder rows).
- TopK: the k largest pre-activations, ReLU'd. b_dec starts at the activations' mean, W_dec's rows are random unit
  vectors, W_enc starts as W_dec's transpose; after each Adam step the decoder rows are put back to unit norm.
- The loss is the reconstruction's squared error over the batch's variance (the fraction unexplained), plus
  1/32 of the AuxK loss: the k_aux (d_in / 2) largest pre-activations among the dead latents (not fired in the
  last `dead_tokens` tokens) reconstruct what the live ones missed, which brings dead latents back.
- Only the k (and k_aux) chosen latents get gradients: their encoder columns and decoder rows are gathered, so a
  step costs one dense encoder product without gradient plus O(batch x k x d_in).

A run is resumable: every few chunks it writes its parameters, Adam's moments and the latents' firing counters
(safetensors) beside a json state; a resumed run continues from there and gives the same weights as one that
was never interrupted (a chunk and its order depend only on the seed and the chunk's index).
"""

from __future__ import annotations

import json
import logging
import math
import platform
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import Tensor, nn

from ..errors import InputError
from ..features.quality import capturing
from ..features.sae import SAEConfig, SparseAutoencoder, parse_hook, trace_name
from ..loading.checkpoint import atomic_write_bytes
from ..models.decoder import Decoder
from ..models.recorder import Recorder

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint"
STATE_FILE = "state.json"


@dataclass(frozen=True)
class SAETrainConfig:
    """One `train sae` run: several hooks of one model, one autoencoder each, from the same activations."""

    model: str  # the model's name as given (a built-in name, a folder, a hub id)
    hooks: tuple[str, ...]  # TransformerLens hook names, e.g. blocks.3.hook_resid_post
    d_sae: int  # latents per autoencoder
    k: int = 32  # latents kept per vector
    tokens: int = 2_000_000  # activation vectors each autoencoder trains on
    batch: int = 4096  # vectors per Adam step
    context: int = 128  # tokens per corpus window
    windows_per_chunk: int = 256  # windows whose vectors are shuffled together (the buffer)
    lr: float = 4e-4  # Adam's learning rate: 1% warm-up, constant, linear decay to 0 over the last 20%
    aux_coef: float = 1 / 32  # weight of the AuxK loss
    dead_tokens: int = 262_144  # a latent not fired in this many training tokens is dead
    seed: int = 0
    checkpoint_chunks: int = 8  # write a checkpoint every this many chunks

    @property
    def steps(self) -> int:
        return max(1, self.tokens // self.batch)

    @property
    def batches_per_chunk(self) -> int:
        return self.windows_per_chunk * self.context // self.batch

    def check(self) -> None:
        if not self.hooks:
            raise InputError("name at least one --hook, e.g. blocks.3.hook_resid_post")
        if len(set(self.hooks)) != len(self.hooks):
            raise InputError("a --hook is named twice")
        if not 1 <= self.k <= self.d_sae:
            raise InputError(f"--k must be between 1 and the width ({self.d_sae}), not {self.k}")
        if self.batches_per_chunk < 1:
            raise InputError(f"a chunk of {self.windows_per_chunk} windows of {self.context} tokens is smaller than "
                             f"a batch of {self.batch}")


def parse_width(text: str, d_in: int) -> int:
    """`16x` -> 16 * d_in, `4096` -> 4096; an InputError in one sentence otherwise."""
    t = text.strip().lower()
    try:
        n = round(float(t[:-1]) * d_in) if t.endswith("x") else int(t)
    except ValueError:
        n = 0
    if n < 1:
        raise InputError(f"--width {text!r} is neither a multiple of d_model such as 16x nor a number of latents")
    return n


class SparseCode(torch.autograd.Function):
    """The decoder applied to a few chosen latents per vector, with the backward pass written out sparse: the
    gradients of the encoder columns and decoder rows come from (d_sae x B) sparse matrices with n entries per
    vector, which costs O(B n d_in) where the dense products would cost O(B d_sae d_in)."""

    @staticmethod
    def forward(ctx: Any, xc: Tensor, W_enc_t: Tensor, b_enc: Tensor, W_dec: Tensor, idx: Tensor, pre: Tensor,
                relu: bool) -> Tensor:
        a = pre.relu() if relu else pre  # (B, n)
        ctx.save_for_backward(xc, W_enc_t, W_dec, idx, a, pre > 0 if relu else torch.ones_like(pre, dtype=torch.bool))
        return F.embedding_bag(idx, W_dec, per_sample_weights=a, mode="sum")  # (B, d_in)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        xc, W_enc_t, W_dec, idx, a, live = ctx.saved_tensors
        B, n = idx.shape
        S = W_dec.shape[0]
        g = g.contiguous()
        ga = (F.embedding(idx, W_dec) * g.unsqueeze(1)).sum(-1)  # (B, n): d loss / d a
        gpre = (ga * live).reshape(-1)  # d loss / d pre at the chosen latents
        rows = idx.reshape(-1)
        # the (d_sae x B) matrices in compressed-row form: entries sorted by latent (numpy's radix sort is the fastest)
        order = torch.from_numpy(np.argsort(rows.cpu().numpy(), kind="stable")).to(rows.device)
        crow = torch.zeros(S + 1, dtype=torch.long, device=idx.device)
        crow[1:] = torch.bincount(rows, minlength=S).cumsum(0)
        cols = torch.div(order, n, rounding_mode="floor")  # the vector each entry belongs to

        def by_latent(values: Tensor) -> Tensor:
            with warnings.catch_warnings():  # "sparse CSR support is in beta": the product used here is tested
                warnings.simplefilter("ignore", UserWarning)
                return torch.sparse_csr_tensor(crow, cols, values[order], (S, B), check_invariants=False)

        grad_W_enc_t = by_latent(gpre) @ xc  # (S, d_in)
        grad_b_enc = torch.zeros(S, dtype=g.dtype, device=g.device).index_add_(0, rows, gpre)
        grad_xc = F.embedding_bag(idx, W_enc_t, per_sample_weights=gpre.view(B, n), mode="sum")  # (B, d_in)
        grad_W_dec = by_latent(a.reshape(-1)) @ g  # (S, d_in)
        return grad_xc, grad_W_enc_t, grad_b_enc, grad_W_dec, None, None, None


class TopKTraining(nn.Module):
    """The trainable form of a TopK autoencoder: the encoder stored latent-major (W_enc_t [d_sae, d_in]) so that
    the chosen latents' columns are gathered as rows. It works on scaled activations (x * scale)."""

    def __init__(self, d_in: int, d_sae: int, k: int, generator: torch.Generator) -> None:
        super().__init__()
        self.k = k
        w = torch.empty(d_sae, d_in)
        bound = math.sqrt(6 / d_in)  # kaiming-uniform's bound, then unit rows
        w.uniform_(-bound, bound, generator=generator)
        w = w / w.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(w.clone())
        self.W_enc_t = nn.Parameter(w.clone())  # W_enc = W_dec^T at the start
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.b_dec = nn.Parameter(torch.zeros(d_in))

    def pre_activation(self, x: Tensor) -> Tensor:
        """(x - b_dec) @ W_enc + b_enc for every latent (B, d_sae), without gradient: it only chooses the latents."""
        with torch.no_grad():
            return torch.addmm(self.b_enc, x - self.b_dec, self.W_enc_t.t())

    def code(self, x: Tensor, idx: Tensor, pre: Tensor, relu: bool) -> Tensor:
        """sum_j a_j W_dec[idx_j] (B, d_in), a the pre-activations `pre` (B, n) of the latents `idx` (ReLU'd where
        `relu`), with gradients to W_enc, b_enc, b_dec (through x - b_dec) and W_dec as if `pre` had been computed
        from them: only the chosen latents' encoder columns and decoder rows get any."""
        return SparseCode.apply(x - self.b_dec, self.W_enc_t, self.b_enc, self.W_dec, idx, pre, relu)

    @torch.no_grad()
    def normalize_decoder_(self) -> None:
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12))

    def export(self, cfg: SAEConfig, scale: float) -> SparseAutoencoder:
        """The autoencoder of raw activations: trained on x * scale, its features of x are those of x * scale over
        scale (TopK and ReLU commute with a positive factor), so only the biases change."""
        sae = SparseAutoencoder(cfg)
        with torch.no_grad():
            sae.W_enc.copy_(self.W_enc_t.t())
            sae.W_dec.copy_(self.W_dec)
            sae.b_enc.copy_(self.b_enc / scale)
            sae.b_dec.copy_(self.b_dec / scale)
        return sae.eval().requires_grad_(False)


@dataclass
class HookRun:
    """One autoencoder's training state."""

    hook: str
    net: TopKTraining
    opt: torch.optim.Adam
    since_fired: Tensor  # (d_sae,) tokens since each latent last fired
    scale: float = 0.0  # x * scale has E||x||^2 = d_in (0: not measured yet)
    last: dict[str, float] = field(default_factory=dict)  # the last step's figures


def corpus_ids(tokenizer: Any, corpus: Path, split: str) -> np.ndarray:
    """Token ids of the corpus split (`train`, `valid`): the cached `split.<vocab>-<digest>.npy` that
    `training.lm.tokenize_file` writes, or the text `split.txt` tokenized (and cached) now."""
    import hashlib

    from .lm import tokenize_file

    text = corpus / f"{split}.txt"
    if text.is_file():
        return tokenize_file(tokenizer, text)
    digest = hashlib.sha1(tokenizer.tokenizer.to_str().encode()).hexdigest()[:10]
    cached = corpus / f"{split}.{tokenizer.vocab_size}-{digest}.npy"
    if cached.is_file():
        return np.load(cached, mmap_mode="r")
    raise InputError(f"{corpus} holds neither {split}.txt nor its tokens for this model's tokenizer ({cached.name}); "
                     "build the corpus with scripts/build_corpus.py")


def windows(ids: np.ndarray, context: int, n: int, rng: np.random.Generator) -> Tensor:
    """`n` random windows of `context` tokens (n, context)."""
    starts = rng.integers(0, len(ids) - context, size=n)
    return torch.from_numpy(np.stack([np.asarray(ids[s:s + context], dtype=np.int64) for s in starts]))


@torch.inference_mode()
def activations(net: Decoder, idx: Tensor, hooks: Sequence[str], batch_windows: int = 64) -> dict[str, Tensor]:
    """hook -> its activations (n_windows * context, d) in float32, every hook from one forward pass per batch; the
    pass stops at the last hook's block."""
    names = {trace_name(h): h for h in hooks}
    last = max(names, key=lambda n: (parse_hook(names[n])[0], n))
    out: dict[str, list[Tensor]] = {h: [] for h in hooks}
    for i in range(0, idx.shape[0], batch_windows):
        patches, got = capturing(names)
        rec = Recorder(patches=patches, store=False, stop_after=last)
        ids = idx[i:i + batch_windows]
        rec.run(lambda ids=ids, rec=rec: net(ids, rec=rec))
        for n, h in names.items():
            out[h].append(got[n].reshape(-1, got[n].shape[-1]).float())
    return {h: torch.cat(v) for h, v in out.items()}


def lr_at(step: int, cfg: SAETrainConfig) -> float:
    warm = max(1, cfg.steps // 100)
    decay_from = int(cfg.steps * 0.8)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    if step >= decay_from:
        return cfg.lr * max(0.0, (cfg.steps - step) / max(1, cfg.steps - decay_from))
    return cfg.lr


def train_step(run: HookRun, x: Tensor, cfg: SAETrainConfig, lr: float) -> None:
    """One Adam step of one autoencoder on a batch x (B, d_in) of scaled activations."""
    net = run.net
    pre = net.pre_activation(x)
    top = pre.topk(cfg.k, dim=-1)
    idx = top.indices
    acts = top.values.relu()
    recon = net.code(x, idx, top.values, relu=True) + net.b_dec
    var = (x - x.mean(0)).pow(2).sum()
    mse = (recon - x).pow(2).sum() / var
    loss = mse
    dead = run.since_fired >= cfg.dead_tokens
    n_dead = int(dead.sum())
    aux = torch.zeros(())
    if n_dead:
        k_aux = min(x.shape[-1] // 2, n_dead)
        aux_top = pre.masked_fill(~dead, -torch.inf).topk(k_aux, dim=-1)
        error = (x - recon).detach()
        # as SAELens and EleutherAI: the dead latents' pre-activations as they are (no ReLU), no bias
        aux = (net.code(x, aux_top.indices, aux_top.values, relu=False) - error).pow(2).sum() / var
        loss = loss + cfg.aux_coef * min(n_dead / k_aux, 1.0) * aux
    for group in run.opt.param_groups:
        group["lr"] = lr
    run.opt.zero_grad(set_to_none=True)
    loss.backward()
    run.opt.step()
    net.normalize_decoder_()
    with torch.no_grad():
        fired = torch.zeros_like(dead)
        fired[idx[acts > 0]] = True
        run.since_fired += x.shape[0]
        run.since_fired[fired] = 0
        run.last = {"fvu": float(mse), "aux": float(aux), "dead": n_dead / dead.numel(),
                    "l0": float((acts > 0).sum(-1).float().mean())}


# -- checkpoints ------------------------------------------------------------------------------------------


def _tensors(run: HookRun) -> dict[str, Tensor]:
    out = {f"param.{n}": p.detach() for n, p in run.net.named_parameters()}
    for n, p in run.net.named_parameters():
        st = run.opt.state.get(p, {})
        for key in ("exp_avg", "exp_avg_sq"):
            if key in st:
                out[f"adam.{n}.{key}"] = st[key]
    out["since_fired"] = run.since_fired
    return {k: v.contiguous() for k, v in out.items()}


def save_checkpoint(folder: Path, runs: Sequence[HookRun], state: dict[str, Any]) -> None:
    """The runs' tensors (one safetensors file per hook) and the json state; the state is written last, so a run
    cut off while writing resumes from the previous checkpoint's state and its files are rewritten whole."""
    folder.mkdir(parents=True, exist_ok=True)
    for run in runs:
        atomic_write_bytes(folder / f"{run.hook}.safetensors", safetensors_bytes(_tensors(run)))
    atomic_write_bytes(folder / STATE_FILE, (json.dumps(state, indent=1) + "\n").encode())


def load_checkpoint(folder: Path, runs: Sequence[HookRun], state: dict[str, Any]) -> None:
    steps = int(state["step"])
    for run in runs:
        t = load_file(str(folder / f"{run.hook}.safetensors"))
        with torch.no_grad():
            for n, p in run.net.named_parameters():
                p.copy_(t[f"param.{n}"])
                if f"adam.{n}.exp_avg" in t:
                    run.opt.state[p] = {"step": torch.tensor(float(steps)), "exp_avg": t[f"adam.{n}.exp_avg"].clone(),
                                        "exp_avg_sq": t[f"adam.{n}.exp_avg_sq"].clone()}
        run.since_fired = t["since_fired"].clone()
        run.scale = float(state["scales"][run.hook])


# -- the run ----------------------------------------------------------------------------------------------


@dataclass
class TrainResult:
    saes: dict[str, SparseAutoencoder]  # hook -> the trained autoencoder (raw activations, float32)
    seconds: float  # training time, all runs of a resumed training together
    state: dict[str, Any]


def machine() -> str:
    """This machine in a few words, for the card."""
    import os

    n = torch.get_num_threads()
    return f"{os.cpu_count()}-core {platform.machine()} ({platform.processor() or platform.system()}), " \
           f"{n} torch thread{'' if n == 1 else 's'}"


def train_saes(net: Decoder, train_ids: np.ndarray, cfg: SAETrainConfig, out: Path, *, model_name: str,
               resume: bool = False, progress: Callable[[str], None] | None = None,
               stop_after_chunks: int | None = None) -> TrainResult:
    """Train one TopK autoencoder per hook of `cfg` on `net`'s activations over `train_ids`; checkpoints under
    out/checkpoint. `stop_after_chunks` ends the run early (as an interruption would), for tests."""
    d_in = net.config.n_embd
    cfg.check()
    for h in cfg.hooks:
        layer, _ = parse_hook(h)
        if layer >= net.config.n_layer:
            raise InputError(f"{model_name} has {net.config.n_layer} layers: it has no {h}")
    if len(train_ids) <= cfg.context + 1:
        raise InputError(f"the corpus has {len(train_ids)} tokens, too few for windows of {cfg.context}")
    ckpt = out / CHECKPOINT
    state_path = ckpt / STATE_FILE
    if state_path.is_file() and not resume:
        raise InputError(f"{out} holds a run already: pass --resume to continue it, or choose another --out")
    say = progress or (lambda s: log.info("%s", s))
    torch.manual_seed(cfg.seed)
    runs: list[HookRun] = []
    for i, h in enumerate(cfg.hooks):
        g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + i)
        tnet = TopKTraining(d_in, cfg.d_sae, cfg.k, g)
        opt = torch.optim.Adam(tnet.parameters(), lr=cfg.lr, betas=(0.9, 0.999), eps=6.25e-10)
        runs.append(HookRun(h, tnet, opt, torch.zeros(cfg.d_sae, dtype=torch.long)))
    state: dict[str, Any] = {"config": asdict(cfg), "step": 0, "chunk": 0, "seconds": 0.0, "scales": {},
                             "log": []}
    if resume and state_path.is_file():
        saved = json.loads(state_path.read_text())
        now = json.loads(json.dumps(asdict(cfg)))
        diff = [k for k in now if saved["config"].get(k) != now[k] and k != "tokens"]
        if diff:
            raise InputError(f"{out} holds a run with other settings ({', '.join(diff)}): resume it with the same "
                             "ones (only --tokens may change), or choose another --out")
        if saved["config"]["tokens"] != cfg.tokens:  # a run lengthened or shortened: the schedule is the new total's
            if saved["step"] > cfg.steps:
                raise InputError(f"{out} holds a run {saved['step']} steps in: --tokens {cfg.tokens} ends before that")
            saved.setdefault("tokens_changes", []).append(
                {"at_step": saved["step"], "from": saved["config"]["tokens"], "to": cfg.tokens})
            saved["config"] = now
        state = saved
        load_checkpoint(ckpt, runs, state)
        say(f"resuming at step {state['step']} of {cfg.steps}")
    start = time.perf_counter() - float(state["seconds"])
    chunks_done = 0
    while state["step"] < cfg.steps:
        c = int(state["chunk"])
        rng = np.random.default_rng((cfg.seed, c))
        acts = activations(net, windows(train_ids, cfg.context, cfg.windows_per_chunk, rng), cfg.hooks)
        order = torch.randperm(cfg.windows_per_chunk * cfg.context,
                               generator=torch.Generator().manual_seed(cfg.seed * 7919 + c))
        for run in runs:
            if not run.scale:  # from the first chunk: E||x||^2 = d_in after scaling; b_dec at the mean
                a = acts[run.hook]
                run.scale = float(math.sqrt(d_in / a.pow(2).sum(-1).mean()))
                state["scales"][run.hook] = run.scale
                with torch.no_grad():
                    run.net.b_dec.copy_(a.mean(0) * run.scale)
        for b in range(cfg.batches_per_chunk):
            if state["step"] >= cfg.steps:
                break
            rows = order[b * cfg.batch:(b + 1) * cfg.batch]
            lr = lr_at(state["step"], cfg)
            for run in runs:
                train_step(run, acts[run.hook][rows] * run.scale, cfg, lr)
            state["step"] += 1
        state["chunk"] = c + 1
        chunks_done += 1
        state["seconds"] = time.perf_counter() - start
        step = state["step"]
        line = {"step": step, "tokens": step * cfg.batch, "seconds": round(state["seconds"], 1),
                **{r.hook: {k: round(v, 4) for k, v in r.last.items()} for r in runs}}
        state["log"].append(line)
        rate = step * cfg.batch / max(state["seconds"], 1e-9)
        say(f"step {step}/{cfg.steps}  {step * cfg.batch:,} tokens  {rate:,.0f} tokens/s  " + "  ".join(
            f"{r.hook}: fvu {r.last['fvu']:.3f} dead {r.last['dead']:.1%} aux {r.last['aux']:.3f}" for r in runs))
        if state["step"] >= cfg.steps or chunks_done % cfg.checkpoint_chunks == 0:
            save_checkpoint(ckpt, runs, state)
        if stop_after_chunks is not None and chunks_done >= stop_after_chunks:
            save_checkpoint(ckpt, runs, state)
            break
    saes = {}
    for run in runs:
        sae_cfg = SAEConfig(d_in=d_in, d_sae=cfg.d_sae, k=cfg.k, hook_name=run.hook, architecture="topk",
                            model_name=model_name, context_size=cfg.context, dataset_path="project corpus (train)")
        saes[run.hook] = run.net.export(sae_cfg, run.scale)
    return TrainResult(saes, float(state["seconds"]), state)
