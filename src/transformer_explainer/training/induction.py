"""The induction run (Olsson et al. 2022, "In-context Learning and Induction Heads"): a small Llama-shaped decoder
trained on random tokens in which a segment repeats, recorded as it learns to copy in context.

A sequence is `seq_len` distinct random tokens, except that a segment of random length, starting after a prefix of
random length, is repeated straight after itself; so no position says where the repeat starts, and a token seen
before can only be predicted by finding what followed it the first time. Every `record_every` steps the run
measures, on held-out sequences, the loss on the segment's first occurrence and on its repeat, and each head's
previous-token score (attention from t to t-1) and induction score (attention from a repeated token to the token
after its earlier occurrence), plus every head's attention map on one fixed example; it writes each record to
`log.jsonl` and hands it to a callback, so a server can stream a live run and replay a recorded one. A one-layer
control run on the same data and budget cannot compose a previous-token head with a matching head, so it never
forms an induction head.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..config import DecoderConfig
from ..errors import InputError
from ..loading.checkpoint import save_decoder
from ..models.decoder import Decoder
from ..models.recorder import Recorder
from ..names import block_name
from .induction_limits import LIMITS
from .trainer import TrainConfig, Trainer, TrainEvent

log = logging.getLogger(__name__)

# the run's bars (issue 36): the repeat loss below a third of the first-occurrence loss, a head scoring 0.5
REPEAT_LOSS_RATIO = 1 / 3
INDUCTION_BAR = 0.5
SYMBOLS = [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [
    str(d) for d in range(10)]
UNK = "<unk>"
SETTINGS = "settings.json"  # the run's InductionConfig, in its folder


@dataclass(frozen=True)
class InductionConfig:
    layers: int = 2  # decoder blocks; the control run has one
    width: int = 64  # d_model
    heads: int = 4  # attention heads per block
    steps: int = 3000  # optimizer steps of each run
    lr: float = 3e-3  # AdamW's peak learning rate
    batch: int = 32  # sequences per step
    seed: int = 0  # model initialisation and data
    vocab: int = 62  # the task's symbols (SYMBOLS[:vocab]); the tokenizer adds <unk>
    seq_len: int = 48  # tokens per sequence
    min_segment: int = 10  # shortest repeated segment
    max_segment: int = 23  # longest repeated segment (2 * max_segment + 1 <= seq_len)
    record_every: int = 50  # a record every this many steps (and at step 0 and the end)
    checkpoint_every: int = 500  # a checkpoint every this many steps (and at the end)
    heldout: int = 256  # held-out sequences the scores are measured on
    control: bool = True  # also train the one-layer control
    family: str = "llama"  # the family code the decoder is built with

    def check(self) -> None:
        """One sentence for the first value out of range."""
        for name, (lo, hi) in LIMITS.items():
            v = getattr(self, name)
            whole = isinstance(lo, int)
            ok = isinstance(v, int) if whole else isinstance(v, int | float)
            if isinstance(v, bool) or not (ok and math.isfinite(v) and lo <= v <= hi):
                what = "a whole number" if whole else "a number"
                raise InputError(f"{name} must be {what} from {lo:g} to {hi:g}, got {v}")
        if self.width % self.heads:
            raise InputError(f"width {self.width} is not a multiple of heads {self.heads}")
        if self.family != "llama":
            raise InputError(f"the induction run builds a llama-family decoder, not {self.family!r}")
        if not EXAMPLE[2] - EXAMPLE[1] <= self.vocab <= len(SYMBOLS):
            raise InputError(f"vocab must be from {EXAMPLE[2] - EXAMPLE[1]} to {len(SYMBOLS)}, got {self.vocab}")
        if not 2 <= self.min_segment <= self.max_segment or 2 * self.max_segment + 1 > self.seq_len:
            raise InputError(f"segments of {self.min_segment} to {self.max_segment} tokens and their repeat do not "
                             f"fit {self.seq_len} tokens after a prefix of at least one")
        if self.seq_len - self.min_segment > self.vocab:
            need = self.seq_len - self.min_segment
            raise InputError(f"{self.seq_len} tokens with a segment of {self.min_segment} need {need} "
                             f"distinct symbols, more than vocab {self.vocab}")

    def decoder_config(self, layers: int | None = None) -> DecoderConfig:
        return DecoderConfig(vocab_size=self.vocab + 1, block_size=self.seq_len, n_layer=layers or self.layers,
                             n_head=self.heads, n_embd=self.width, d_mlp=4 * self.width, model_type="llama",
                             layer_norm_epsilon=1e-5, activation="silu", tie_word_embeddings=True, qkv_bias=False,
                             out_bias=False, mlp_bias=False)


@dataclass(frozen=True)
class Batch:
    """Sequences and where in each the segment and its repeat start (the repeat starts at start + length)."""

    ids: Tensor  # (B, T)
    start: Tensor  # (B,) the segment's first position
    length: Tensor  # (B,) the segment's length


def make_batch(config: InductionConfig, rng: np.random.Generator, n: int) -> Batch:
    """`n` sequences: distinct random symbols, except the segment [s, s+L) repeated at [s+L, s+2L)."""
    T, V = config.seq_len, config.vocab
    ids = np.empty((n, T), dtype=np.int64)
    lengths = rng.integers(config.min_segment, config.max_segment + 1, size=n)
    starts = np.empty(n, dtype=np.int64)
    for b in range(n):
        L = int(lengths[b])
        s = int(rng.integers(1, T - 2 * L + 1))  # a prefix of at least one token
        fresh = rng.permutation(V)[: T - L]  # every token distinct but the repeat
        ids[b, : s + L] = fresh[: s + L]
        ids[b, s + L : s + 2 * L] = ids[b, s : s + L]
        ids[b, s + 2 * L :] = fresh[s + L : T - L]
        starts[b] = s
    return Batch(torch.from_numpy(ids), torch.from_numpy(starts), torch.from_numpy(lengths.astype(np.int64)))


def segment_positions(batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
    """(row, first, repeat) index tensors: for j in 0..L-2, the query position s+j predicting s+j+1 in the first
    occurrence, and r+j predicting r+j+1 in the repeat (r = s+L); the earlier occurrence of the token at r+j is s+j,
    so an induction head at r+j attends to s+j+1."""
    rows, first, rep = [], [], []
    for b, (s, L) in enumerate(zip(batch.start.tolist(), batch.length.tolist(), strict=True)):
        j = torch.arange(L - 1)
        rows.append(torch.full((L - 1,), b))
        first.append(s + j)
        rep.append(s + L + j)
    return torch.cat(rows), torch.cat(first), torch.cat(rep)


@dataclass
class Record:
    """What the run measured at one step: on held-out sequences, the losses and each head's scores; on the fixed
    example, every head's attention map."""

    step: int
    train_loss: float | None  # the last training batch's loss (None at step 0)
    first_loss: float  # mean loss predicting the segment's tokens on their first occurrence (nats)
    repeat_loss: float  # ... on their repeat
    icl_score: float  # in-context learning score: repeat_loss - first_loss (the loss late minus the loss early)
    previous_token: list[list[float]]  # (layer, head): mean attention from t to t-1
    induction: list[list[float]]  # (layer, head): mean attention from a repeated token to the one after its first
    example_attention: list[list[list[list[float]]]]  # (layer, head, query, key) on the example, 2 decimals
    elapsed_s: float = 0.0  # training wall time up to this step

    @property
    def best_induction(self) -> float:
        return max(max(row) for row in self.induction)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@torch.no_grad()
def measure(model: Decoder, heldout: Batch, example: Tensor) -> dict[str, Any]:
    """The record's measurements of `model` (eval mode, recorded attention path)."""
    was = model.training
    model.eval()
    n = model.config.n_layer
    names = [block_name(i, "attn.pattern") for i in range(n)]
    rec = Recorder(keep=lambda name: name in names)
    logits = model(heldout.ids, rec=rec)
    nll = F.cross_entropy(logits[:, :-1].transpose(1, 2), heldout.ids[:, 1:], reduction="none")  # (B, T-1)
    rows, first, rep = segment_positions(heldout)
    out: dict[str, Any] = {
        "first_loss": float(nll[rows, first].mean()), "repeat_loss": float(nll[rows, rep].mean()),
        "previous_token": [], "induction": [],
    }
    out["icl_score"] = out["repeat_loss"] - out["first_loss"]
    for name in names:
        p = rec.values[name]  # (B, H, T, T)
        t = torch.arange(1, p.shape[-1])
        out["previous_token"].append(p[:, :, t, t - 1].mean(dim=(0, 2)).tolist())
        # from a repeated token at r+j to the token after its earlier occurrence, s+j+1
        out["induction"].append(p[rows, :, rep, first + 1].mean(dim=0).tolist())
    rec = Recorder(keep=lambda name: name in names)
    model(example[None], rec=rec)
    out["example_attention"] = [np.round(rec.values[name][0].numpy(), 2).tolist() for name in names]
    model.train(was)
    return out


EXAMPLE = (3, 12, 32)  # the example's prefix, segment and total length


def example_sequence(config: InductionConfig) -> Batch:
    """The fixed example whose attention maps every record carries (the same for every seed): 32 distinct symbols
    but for a segment of 12 after a prefix of 3, repeated at once."""
    s, L, T = EXAMPLE
    fresh = np.random.default_rng(20220308).permutation(config.vocab)[: T - L]
    ids = np.concatenate([fresh[: s + L], fresh[s : s + L], fresh[s + L :]])
    return Batch(torch.from_numpy(ids[None].astype(np.int64)), torch.tensor([s]), torch.tensor([L]))


def heldout_batch(config: InductionConfig) -> Batch:
    """Held-out sequences: another random stream than training's `(seed, step)`."""
    return make_batch(config, np.random.default_rng((config.seed, 2**31)), config.heldout)


@dataclass
class InductionTask:
    """The trainer's task: batch `step` from `(seed, step)`, next-token loss at every position."""

    config: InductionConfig
    heldout: Batch = field(init=False)
    example: Batch = field(init=False)
    last: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.heldout = heldout_batch(self.config)
        self.example = example_sequence(self.config)

    def batch(self, step: int) -> Tensor:
        return make_batch(self.config, np.random.default_rng((self.config.seed, step)), self.config.batch).ids

    def loss(self, model: Decoder, batch: Tensor) -> Tensor:
        logits = model(batch[:, :-1])
        return F.cross_entropy(logits.transpose(1, 2), batch[:, 1:])

    def batch_tokens(self, batch: Tensor) -> int:
        return batch[:, 1:].numel()

    def evaluate(self, model: Decoder) -> dict[str, float]:
        self.last = measure(model, self.heldout, self.example.ids[0])
        return {"first_loss": self.last["first_loss"], "repeat_loss": self.last["repeat_loss"],
                "best_induction": max(max(r) for r in self.last["induction"])}


def tokenizer_json(config: InductionConfig) -> str:
    """A word-level tokenizer of the task's symbols (split on spaces), which the app opens as any tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {s: i for i, s in enumerate(SYMBOLS[: config.vocab])} | {UNK: config.vocab}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins the symbols with spaces
    return tok.to_str()


def text_of(config: InductionConfig, ids: Tensor) -> str:
    return " ".join(SYMBOLS[i] for i in ids.tolist())


def save_model_folder(model: Decoder, config: InductionConfig, folder: Path) -> None:
    """An HF LlamaForCausalLM folder (float32) with the task's tokenizer: what `load_model(folder)` opens."""
    save_decoder(model, folder, torch.float32)
    (folder / "tokenizer.json").write_text(tokenizer_json(config))


def crossing(records: list[dict[str, Any]], test: Callable[[dict[str, Any]], bool]) -> int | None:
    """The first recorded step at which `test` holds (and holds from then on, to the last record), or None."""
    found = None
    for r in records:
        if test(r):
            found = r["step"] if found is None else found
        else:
            found = None
    return found


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's milestones, each a step where the record first passes a bar and stays past it:
    - repeat_loss_falls: the repeat loss below half the first-occurrence loss (the copy is learnt);
    - repeat_loss_third: below a third of it (the issue's bar);
    - induction_head: some head's induction score >= 0.5;
    - previous_token_head: some head's previous-token score >= 0.5."""
    last = records[-1]
    return {
        "repeat_loss_falls": crossing(records, lambda r: r["repeat_loss"] < 0.5 * r["first_loss"]),
        "repeat_loss_third": crossing(records, lambda r: r["repeat_loss"] < REPEAT_LOSS_RATIO * r["first_loss"]),
        "induction_head": crossing(records, lambda r: max(map(max, r["induction"])) >= INDUCTION_BAR),
        "previous_token_head": crossing(records, lambda r: max(map(max, r["previous_token"])) >= INDUCTION_BAR),
        "final_first_loss": last["first_loss"], "final_repeat_loss": last["repeat_loss"],
        "final_best_induction": max(map(max, last["induction"])),
        "final_best_previous_token": max(map(max, last["previous_token"])),
        "steps": last["step"], "elapsed_s": last["elapsed_s"],
        "steps_per_s": last["step"] / last["elapsed_s"] if last["elapsed_s"] else None,
    }


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Loggable(Protocol):
    def to_json(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=Loggable)


def fit_with_log(trainer: Trainer, log_path: Path, make_record: Callable[[float | None], R],
                 on_record: Callable[[R], None]) -> list[dict[str, Any]]:
    """Train with a record at each evaluation (and of the untrained model at step 0): `make_record(last training
    loss, None at step 0)` makes it, `log_path` gets it as a JSON line, then `on_record` sees it. Resumes from the
    trainer's latest checkpoint where there is one, keeping the log's records up to its step. Returns every record
    of the run, the resumed ones included."""
    records = read_log(log_path) if trainer.resume() and log_path.is_file() else []
    records = [r for r in records if r["step"] <= trainer.state.step]
    log_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    last_loss: list[float] = []

    def callback(event: TrainEvent) -> None:
        if event.kind == "step":
            last_loss[:] = [event.metrics["loss"]]
        elif event.kind == "eval":
            rec = make_record(last_loss[-1] if last_loss else None)
            records.append(rec.to_json())
            with log_path.open("a") as f:
                f.write(json.dumps(rec.to_json()) + "\n")
            on_record(rec)

    trainer.callbacks.append(callback)
    if not records:  # step 0: the untrained model
        trainer.evaluate()
    trainer.fit()
    return records


def _train_one(config: InductionConfig, layers: int, folder: Path, on_record: Callable[[str, Record], None],
               name: str, should_stop: Callable[[], bool]) -> list[dict[str, Any]]:
    """One run into `folder`: log.jsonl, checkpoints/step-NNNNN/ (HF folders), model/ (the final one); resumes
    from folder/resume/ where an earlier run of the same config stopped."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    model = Decoder(config.decoder_config(layers))
    task = InductionTask(config)
    tcfg = TrainConfig(max_steps=config.steps, lr=config.lr, min_lr=config.lr / 10,
                       warmup_steps=min(100, config.steps // 10), weight_decay=0.1, betas=(0.9, 0.98),
                       eval_interval=config.record_every, checkpoint_interval=config.checkpoint_every,
                       seed=config.seed)
    trainer = Trainer(model, task, tcfg, folder / "resume", progress=False, should_stop=should_stop)

    def make_record(train_loss: float | None) -> Record:
        m = task.last
        return Record(step=trainer.state.step, train_loss=train_loss, first_loss=m["first_loss"],
                      repeat_loss=m["repeat_loss"], icl_score=m["icl_score"], previous_token=m["previous_token"],
                      induction=m["induction"], example_attention=m["example_attention"],
                      elapsed_s=round(trainer.state.elapsed_s, 3))

    def recorded(rec: Record) -> None:
        on_record(name, rec)
        if rec.step % config.checkpoint_every == 0 or rec.step == config.steps:
            save_model_folder(model, config, folder / "checkpoints" / f"step-{rec.step:05d}")

    records = fit_with_log(trainer, folder / "log.jsonl", make_record, recorded)
    save_model_folder(model.eval(), config, folder / "model")
    return records


def train_induction(config: InductionConfig, out: Path, on_record: Callable[[str, Record], None] | None = None,
                    should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Train the run (`out/main`) and, with `config.control`, the one-layer control (`out/control`) on the same
    data and budget; `on_record(run_name, record)` sees each record as it is made. Writes `out/settings.json` (the
    config) and `out/run.json` (the config and each run's milestones) and returns it. Same config and seed, same
    numbers."""
    config.check()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config_file = out / SETTINGS  # not config.json: a folder with one would pass for a model folder
    if config_file.is_file() and json.loads(config_file.read_text()) != asdict(config):
        raise InputError(f"{out} holds a run with another configuration; choose another --out")
    config_file.write_text(json.dumps(asdict(config), indent=1) + "\n")
    on_record = on_record or (lambda name, r: None)
    stop = should_stop or (lambda: False)
    runs = {"main": config.layers} | ({"control": 1} if config.control else {})
    result: dict[str, Any] = {"config": asdict(config), "runs": {}}
    for name, layers in runs.items():
        t0 = time.perf_counter()
        records = _train_one(config, layers, out / name, on_record, name, stop)
        result["runs"][name] = {"layers": layers, **summary(records), "wall_s": round(time.perf_counter() - t0, 1)}
        log.info("%s run: %s", name, result["runs"][name])
        if stop():
            break
    (out / "run.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def replay(folder: Path) -> Iterator[dict[str, Any]]:
    """The records of a recorded run's `log.jsonl`, in order (what a server replays)."""
    yield from read_log(Path(folder) / "log.jsonl")


def measure_folder(model_folder: Path, config: InductionConfig) -> dict[str, Any]:
    """The record's measurements of a saved checkpoint (an HF folder), on the run's held-out sequences."""
    from ..loading.checkpoint import load_decoder

    model = load_decoder(Path(model_folder), torch.float32)
    return measure(model, heldout_batch(config), example_sequence(config).ids[0])
