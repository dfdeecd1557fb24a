"""Activation patching: which activations carry the difference between two prompts.

Two prompts of the same token length, a clean one and a corrupted one (one word changed), an answer token
and a wrong one. The metric is the logit difference answer - wrong at the last position. Each cell of a grid
runs the corrupted prompt with one activation replaced by its value in the clean run, and reports the
metric normalised so that 0 is the corrupted run and 1 the clean one: a cell near 1 carries what made the
clean prompt's answer. A patched run starts at the patched block, from the corrupted run's residual stream
entering it: the blocks before it would compute the same values every time.

The grids and their semantics follow TransformerLens's `patching.get_act_patch_*` (`resid_pre`,
`attn_out`, `mlp_out` per layer and position; `heads`, each head's `z` over all positions, per layer and head:
`get_act_patch_attn_head_out_all_pos`), so a result can be checked against it. The patched runs go through
the model in batches (many rows of the same corrupted prompt, each with its own cell patched), recording
nothing; the blocks no patch reaches take the fast path. `ExplainerModel.patch` is the entry point.
A decoder that runs through transformers (`GenericModel.patch`) patches through the bridge
(`generic_activation_patching`): the same grids, one full forward per cell, NaN where the model has no such site.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

from .config import DecoderConfig
from .errors import InputError
from .models.decoder import Decoder
from .models.recorder import Recorder
from .names import block_name
from .trace import Trace


class GenericShape(Protocol):
    """What patching reads of a decoder that runs through transformers (`generic.GenericConfig`, which imports this
    module: the shape is named here rather than imported back)."""

    n_layer: int
    n_head: int

    def computes(self, layer: int, stage: str) -> bool: ...
    def pass_gflop(self, n_tokens: int) -> float: ...


Kind = Literal["resid_pre", "attn_out", "mlp_out", "heads"]
KINDS: tuple[Kind, ...] = ("resid_pre", "attn_out", "mlp_out", "heads")
# the activation each grid patches, per block
SITE: dict[Kind, str] = {"resid_pre": "resid_pre", "attn_out": "attn_out", "mlp_out": "mlp_out", "heads": "attn.z"}


class Cancelled(Exception):  # noqa: N818 (it is not an error: the caller asked to stop)
    """The caller's `cancelled()` said stop, between two batches of patched runs."""


@dataclass(frozen=True)
class Patching:
    """The grids of one clean/corrupted pair. `grids[kind]` is normalised ((L, T) per layer and position, or
    (L, H) for `heads`); `raw[kind]` holds the patched runs' metrics (logit differences) themselves."""

    clean_tokens: list[str]
    corrupted_tokens: list[str]
    answer: int
    answer_text: str
    wrong: int
    wrong_text: str
    clean: float  # the metric of the clean run
    corrupted: float  # the metric of the corrupted run
    grids: dict[str, Tensor] = field(repr=False)
    raw: dict[str, Tensor] = field(repr=False)

    @property
    def clean_below_corrupted(self) -> bool:
        """True when the clean run's metric is below the corrupted run's: the grids divide by a negative span."""
        return self.clean < self.corrupted

    @property
    def reading(self) -> str:
        """What a cell of the grids means for this pair, in one sentence (it depends on which run is above)."""
        a, w = repr(self.answer_text), repr(self.wrong_text)
        if not self.clean_below_corrupted:
            return (f"0 = the corrupted run's difference, 1 = the clean run's: a cell near 1 carries what moves "
                    f"logit({a}) - logit({w}) up, towards {a}, as the clean prompt does")
        return (f"the clean run's difference ({self.clean:.4f}) is below the corrupted run's ({self.corrupted:.4f}), "
                f"so the span the grids are divided by is negative: 0 is still the corrupted run and 1 the clean "
                f"run, but a cell near 1 carries what moves logit({a}) - logit({w}) down, towards {w}, and a cell "
                f"below 0 what moves it up, towards {a} (the grids are those of the pair with {a} and {w} swapped)")

    def __repr__(self) -> str:
        cells = []
        for kind, grid in self.grids.items():
            flat = int(torch.nan_to_num(grid.float(), nan=float("-inf")).argmax())
            row, col = divmod(flat, grid.shape[1])
            where = f"L{row}H{col}" if kind == "heads" else f"layer {row}, position {col} ({self.clean_tokens[col]!r})"
            cells.append(f"  {kind:<9} {tuple(grid.shape)}, highest {float(grid[row, col]):.2f} at {where}")
        return "\n".join([
            f"Patching: logit({self.answer_text!r}) - logit({self.wrong_text!r}) at the last position, clean "
            f"{self.clean:.4f}, corrupted {self.corrupted:.4f}",
            f"  {self.reading}", *cells,
            "  (.grids[kind]: normalised, (layers, positions) or (layers, heads) for heads; .raw[kind]: the patched "
            "runs' differences)"])

    def to_dict(self) -> dict[str, Any]:
        return {"clean_tokens": self.clean_tokens, "corrupted_tokens": self.corrupted_tokens,
                "answer": {"id": self.answer, "text": self.answer_text},
                "wrong": {"id": self.wrong, "text": self.wrong_text},
                "clean": self.clean, "corrupted": self.corrupted,
                "grids": {k: _cells(v) for k, v in self.grids.items()},
                "raw": {k: _cells(v) for k, v in self.raw.items()}}


def _cells(grid: Tensor) -> list[list[float | None]]:
    """A grid as nested lists, a cell the model does not compute (NaN) as None: strict JSON has no NaN."""
    return [[None if x != x else x for x in row] for row in grid.tolist()]


def _metric(logits: Tensor, answer: int, wrong: int) -> Tensor:
    """answer - wrong at the last position, per row of (B, V) logits, in float64 on the CPU (the B values are the
    answer; some GPUs have no float64)."""
    pair = logits[:, [answer, wrong]].cpu().double()
    return pair[:, 0] - pair[:, 1]


def _replace(rows: Tensor, cells: list[int], clean: Tensor) -> Callable[[Tensor], Tensor]:
    """A patch for one block's activation: row b of the batch gets the clean value at cell `cells[b]` (a
    position, or a head for `heads`, over all positions)."""

    def patch(value: Tensor) -> Tensor:
        out = value.clone()
        c = torch.tensor(cells, device=value.device)
        # z (B, H, T, Dh): head c of row b at every position; (B, T, D): position c of row b
        out[rows, c] = clean[c].to(out.dtype)
        return out

    return patch


@torch.inference_mode()
def patched_metrics(net: Decoder, ids: list[int], layer: int, kind: Kind, cells: Sequence[int],
                    clean: Tensor, answer: int, wrong: int, resid: Tensor | None = None) -> Tensor:
    """The metric of the corrupted prompt `ids` run once per cell, with block `layer`'s activation of `kind`
    replaced at that cell by `clean` (that block's value in the clean run, without the batch dimension).
    With `resid` (T, D), the corrupted run's residual stream entering block `layer`, the runs start there."""
    B, device = len(cells), net.embed.weight.device  # the ids go where the embedding is
    rows = torch.arange(B, device=clean.device)
    patches = {block_name(layer, SITE[kind]): _replace(rows, list(cells), clean)}
    batch = torch.tensor([ids] * B, device=device)
    rec = Recorder(patches=patches, store=False)
    if resid is None:
        logits = net(batch, rec=rec, logits_for="last")[:, -1]
    else:
        start = resid.to(net.unembed.weight.dtype).expand(B, *resid.shape)
        logits = net(batch, rec=rec, logits_for="last", start_layer=layer, resid=start)[:, -1]
    return _metric(logits, answer, wrong)


@torch.inference_mode()
def residuals_entering_blocks(net: Decoder, ids: list[int]) -> list[Tensor]:
    """The residual stream (T, D) entering each block in one unrecorded run of `ids`."""
    out: list[Tensor] = []

    def keep(x: Tensor) -> Tensor:
        out.append(x[0].clone())
        return x

    patches = {block_name(i, "resid_pre"): keep for i in range(net.config.n_layer)}
    net(torch.tensor([ids], device=net.embed.weight.device), rec=Recorder(patches=patches, store=False),
        logits_for="last")
    return out


def check_kinds(what: Sequence[str]) -> tuple[Kind, ...]:
    """The grids asked for, or an InputError naming the first unknown one."""
    unknown = [k for k in what if k not in KINDS]
    if unknown or not what:
        raise InputError(f"unknown patching grid {unknown[0] if unknown else '(none)'}; choose from {', '.join(KINDS)}")
    return tuple(what)  # type: ignore[return-value]


@torch.inference_mode()
def activation_patching(net: Decoder, clean: Trace, corrupted_ids: list[int], corrupted_metric: float,
                        answer: int, wrong: int, what: Sequence[Kind] = KINDS, *, batch_tokens: int = 2048,
                        progress: Callable[[int, int], None] | None = None,
                        cancelled: Callable[[], bool] | None = None) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The normalised and raw grids: each activation of `what` patched from the `clean` trace into the corrupted
    run, one cell at a time (`ExplainerModel.patch` checks the pair and computes the two runs' metrics).

    `batch_tokens` bounds the tokens of one batched pass (rows x length); `progress(done, total)` is told after
    each batch, and `cancelled()` is asked before each: when it says so, `Cancelled` is raised."""
    cfg = net.config
    m_clean = float(_metric(clean.next_token_logits()[None], answer, wrong)[0])
    span = m_clean - corrupted_metric
    L, H, T = cfg.n_layer, cfg.n_head, len(corrupted_ids)
    per_batch = max(1, batch_tokens // T)
    jobs = [(k, layer) for k in what for layer in range(L)]
    total = sum(H if k == "heads" else T for k, _ in jobs)
    raw = {k: torch.empty(L, H if k == "heads" else T, dtype=torch.float64, device="cpu") for k in what}  # answers
    done = 0
    entering = residuals_entering_blocks(net, corrupted_ids)  # the same for every patched run of a block
    # the clean values block by block: a trace runs each block again once for all of its sites
    clean_values = {(k, layer): clean[block_name(layer, SITE[k])] for layer in range(L) for k in what}
    for kind, layer in jobs:
        value = clean_values[kind, layer]
        n = H if kind == "heads" else T
        for start in range(0, n, per_batch):
            if cancelled is not None and cancelled():
                raise Cancelled()
            cells = list(range(start, min(n, start + per_batch)))
            raw[kind][layer, cells] = patched_metrics(net, corrupted_ids, layer, kind, cells, value, answer, wrong,
                                                      entering[layer])
            done += len(cells)
            if progress is not None:
                progress(done, total)
    grids = {k: ((v - corrupted_metric) / span).to(torch.float32) for k, v in raw.items()}
    return grids, {k: v.to(torch.float32) for k, v in raw.items()}


# -- a decoder that runs through transformers' own modules (generic.GenericModel) ----------------------------


def generic_cells(config: GenericShape, kind: Kind) -> list[int]:
    """The layers of a generic model (`generic.GenericConfig`) where grid `kind` has cells: every layer for
    resid_pre, those with attention for attn_out and heads, those with an MLP for mlp_out."""
    return [i for i in range(config.n_layer) if config.computes(i, SITE[kind])]


@torch.inference_mode()
def generic_activation_patching(hf: torch.nn.Module, config: GenericShape, clean: Trace, corrupted_ids: list[int],
                                clean_metric: float, corrupted_metric: float, answer: int, wrong: int,
                                what: Sequence[Kind] = KINDS, *, progress: Callable[[int, int], None] | None = None,
                                cancelled: Callable[[], bool] | None = None
                                ) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """`activation_patching` for a decoder that runs through transformers' own modules (`hf`, its config
    `config`): the same grids, cells and normalisation, each cell a forward of the corrupted prompt through
    transformers with one bridge patch (`bridge.record`) that puts the clean run's value there (a position of
    resid_pre, attn_out or mlp_out, or one head's z at every position). The runs go one at a time, from the
    first layer (the bridge records one sequence and cannot start at a layer). A cell the model does not
    compute (attn_out and heads of a layer without attention, mlp_out of a layer without an MLP) is NaN."""
    from .bridge import record

    span = clean_metric - corrupted_metric
    L, H, T = config.n_layer, config.n_head, len(corrupted_ids)
    sites = {k: generic_cells(config, k) for k in what}
    total = sum(len(layers) * (H if k == "heads" else T) for k, layers in sites.items())
    raw = {k: torch.full((L, H if k == "heads" else T), float("nan"), dtype=torch.float64, device="cpu")
           for k in what}  # the answers, as Python's floats: on the CPU
    done = 0
    for kind in what:
        for layer in sites[kind]:
            name = block_name(layer, SITE[kind])
            value = clean[name]  # (T, D), or (H, T, Dv) for a head's z
            for cell in range(value.shape[0]):
                if cancelled is not None and cancelled():
                    raise Cancelled()
                rows = torch.zeros(1, dtype=torch.long, device=value.device)
                logits = record(hf, corrupted_ids, patches={name: _replace(rows, [cell], value)}).values["logits"]
                raw[kind][layer, cell] = _metric(logits[-1:], answer, wrong)[0]
                done += 1
                if progress is not None:
                    progress(done, total)
    grids = {k: ((v - corrupted_metric) / span).to(torch.float32) for k, v in raw.items()}
    return grids, {k: v.to(torch.float32) for k, v in raw.items()}


# -- what a request costs, before it runs -----------------------------------------------------------------


def patched_runs(config: DecoderConfig | GenericShape, n_tokens: int, what: Sequence[Kind]) -> int:
    """How many patched runs the grids `what` take: one per layer and position (`resid_pre`, `attn_out`,
    `mlp_out`), or per layer and head (`heads`)."""
    if not isinstance(config, DecoderConfig):  # a generic model: only the layers that compute the site
        return sum(len(generic_cells(config, k)) * (config.n_head if k == "heads" else n_tokens) for k in what)
    return sum(config.n_layer * (config.n_head if k == "heads" else n_tokens) for k in what)


def run_gflop(config: DecoderConfig | GenericShape, n_tokens: int) -> float:
    """Billions of floating-point operations of one patched run over `n_tokens` tokens: every block's weight
    products and attention at every position (2 per multiply-add), the unembedding at the last position only."""
    if not isinstance(config, DecoderConfig):  # a generic model: its config's estimate of a whole pass
        return float(config.pass_gflop(n_tokens))
    T, D, M = n_tokens, config.n_embd, config.d_mlp
    q = config.n_head * config.head_dim  # query (and output) width
    kv = config.n_kv_heads * config.head_dim  # key and value width
    mlp_matrices = 3 if config.arch.mlp == "gated" else 2  # gated: gate, up, down; GELU: up, down
    per_token = 2 * D * (2 * q + 2 * kv) + mlp_matrices * 2 * D * M + 2 * 2 * T * q
    return (config.n_layer * T * per_token + 2 * D * config.vocab_size) / 1e9


@dataclass(frozen=True)
class PatchingCost:
    """The patched runs of the grids `what` for a prompt pair of `n_tokens` tokens, and their arithmetic.
    The cost grows with tokens x layers for the per-position grids and with layers x heads for `heads`, each
    run over all the tokens: a server bounds it before any run starts (`check`)."""

    config: DecoderConfig | GenericShape
    n_tokens: int
    what: tuple[Kind, ...]

    @property
    def runs(self) -> int:
        return patched_runs(self.config, self.n_tokens, self.what)

    @property
    def gflop(self) -> float:
        return self.runs * run_gflop(self.config, self.n_tokens)

    def longest_prompt_within(self, max_gflop: float) -> int:
        """The most tokens a prompt pair may have for the same grids to stay within `max_gflop` (0: none)."""
        lo, hi = 0, self.n_tokens  # the cost grows with the tokens: bisect
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if PatchingCost(self.config, mid, self.what).gflop <= max_gflop:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def check(self, max_gflop: float | None) -> None:
        """An InputError (one sentence, with what would fit: fewer grids, a shorter prompt) when the runs
        would cost more than `max_gflop`; None: no bound."""
        if max_gflop is None or self.gflop <= max_gflop:
            return
        options = []
        alone = [k for k in self.what if PatchingCost(self.config, self.n_tokens, (k,)).gflop <= max_gflop]
        if alone and len(self.what) > 1:
            cheapest = min(alone, key=lambda k: patched_runs(self.config, self.n_tokens, (k,)))
            options.append(f"fewer grids ({cheapest} alone takes "
                           f"{patched_runs(self.config, self.n_tokens, (cheapest,)):,} runs)")
        fits = self.longest_prompt_within(max_gflop)
        if fits >= 2:
            options.append(f"prompts of at most {fits:,} tokens")
        hint = f": ask for {' or '.join(options)}" if options else ""
        raise InputError(f"patching {', '.join(self.what)} for prompts of {self.n_tokens:,} tokens takes "
                         f"{self.runs:,} patched runs (about {self.gflop:,.0f} GFLOP), more than this server "
                         f"computes for one request ({max_gflop:,.0f} GFLOP){hint}")
