"""The induction run on text: the induction run's small Llama-shaped decoder (training/induction.py) trained on the
project's corpus with the built-in models' tokenizer, its heads' roles read as it learns.

Every `record_every` steps the run measures the loss on held-out text (windows spread over the corpus's valid split,
as `train lm` measures it) and every head's role scores with the Experiments area's definitions and texts
(analysis/roles.py: its reference sentences and its repeated-random-tokens probe), through an `ExplainerModel` made
from a copy of the network being trained, so the scores are exactly those the app shows for the saved model. Each
record goes to `log.jsonl` and to a callback; the final model is saved as an HF folder the app opens.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..analysis.roles import ROLES, HeadRoles, reference_head_roles
from ..config import DecoderConfig
from ..engine import ExplainerModel
from ..errors import InputError
from ..loading.checkpoint import save_decoder
from ..loading.resolve import builtin_root
from ..loading.tokenizer import TextTokenizer
from ..models.decoder import Decoder
from .induction import INDUCTION_BAR, crossing, fit_with_log
from .induction_text_limits import TEXT_LIMITS
from .lm import LMTask, evaluate_lm, token_byte_lengths, tokenize_file
from .trainer import TrainConfig, Trainer

log = logging.getLogger(__name__)

SETTINGS = "settings.json"  # the run's TextRunConfig, in its folder (not config.json: that makes a model folder)
MODEL_NAME = "induction-text-run"  # the name the shipped run's model opens under
TOKENIZER_MODEL = "explainer-llama"  # the built-in model whose tokenizer (shared by all of them) the run uses


@dataclass(frozen=True)
class TextRunConfig:
    layers: int = 2  # decoder blocks (the induction run's two)
    width: int = 64  # d_model (the induction run's: wider costs more time per step than this machine has)
    heads: int = 4  # attention heads per block (the induction run's four)
    steps: int = 600  # optimizer steps
    lr: float = 3e-3  # AdamW's peak learning rate (warmup, then cosine to a tenth)
    batch: int = 16  # windows per step
    seq_len: int = 128  # tokens per window (and the model's context)
    seed: int = 0  # initialisation and the training windows
    record_every: int = 20  # a record every this many steps (and at step 0 and the end)
    checkpoint_every: int = 100  # a resumable checkpoint every this many steps (and at the end)
    heldout_tokens: int = 4096  # held-out tokens the loss is measured on

    def check(self) -> None:
        """One sentence for the first value out of range."""
        for name, (lo, hi) in TEXT_LIMITS.items():
            v = getattr(self, name)
            whole = name != "lr"
            ok = isinstance(v, int) if whole else isinstance(v, int | float)
            if isinstance(v, bool) or not (ok and math.isfinite(v) and lo <= v <= hi):
                raise InputError(f"{name} must be {'a whole number' if whole else 'a number'} from {lo:g} to {hi:g}, "
                                 f"got {v}")
        if self.width % self.heads or (self.width // self.heads) % 2:
            raise InputError(f"width {self.width} must split into {self.heads} heads of an even size (rotary "
                             f"positions turn pairs of dimensions)")

    def decoder_config(self, vocab_size: int) -> DecoderConfig:
        return DecoderConfig(vocab_size=vocab_size, block_size=self.seq_len, n_layer=self.layers, n_head=self.heads,
                             n_embd=self.width, d_mlp=4 * self.width, model_type="llama", layer_norm_epsilon=1e-5,
                             activation="silu", tie_word_embeddings=True, qkv_bias=False, out_bias=False,
                             mlp_bias=False)


@dataclass
class TextRecord:
    """What the run measured at one step."""

    step: int
    tokens: int  # training tokens seen up to this step
    train_loss: float | None  # the last training batch's loss (None at step 0)
    heldout_loss: float  # mean next-token loss on held-out text (nats/token)
    roles: dict[str, list[list[float | None]]]  # role -> (layer, head) score, analysis/roles.py's reference roles
    elapsed_s: float = 0.0  # training wall time up to this step

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def default_tokenizer_folder() -> Path:
    return builtin_root() / TOKENIZER_MODEL


def explainer_of(net: Decoder, tokenizer: TextTokenizer, name: str = MODEL_NAME) -> ExplainerModel:
    """An `ExplainerModel` of a copy of `net` (the engine switches its network to the inference layout, which the
    one being trained must not get)."""
    return ExplainerModel(copy.deepcopy(net).float(), tokenizer, name)


def role_scores(roles: HeadRoles) -> dict[str, list[list[float | None]]]:
    """The record's form of the reference roles: role -> (layer, head), 4 decimals (None where undefined)."""
    out = roles.to_dict()["scores"]
    return {r: [[None if v is None else round(v, 4) for v in row] for row in out[r]] for r in ROLES}


def measure_roles(net: Decoder, tokenizer: TextTokenizer) -> dict[str, list[list[float | None]]]:
    return role_scores(reference_head_roles(explainer_of(net, tokenizer)))


def best(record: dict[str, Any], role: str) -> tuple[float, int, int]:
    """(score, layer, head) of the record's highest score for `role`."""
    return max((v, i, h) for i, row in enumerate(record["roles"][role]) for h, v in enumerate(row) if v is not None)


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per role, the best head at the end and the step from which some head stays at or above 0.5; the losses."""
    first, last = records[0], records[-1]
    roles = {}
    for role in ROLES:
        score, layer, head = best(last, role)
        roles[role] = {"final_best": score, "layer": layer, "head": head,
                       "step": crossing(records, lambda r, role=role: best(r, role)[0] >= INDUCTION_BAR),
                       "peak": max(best(r, role)[0] for r in records)}
    return {"steps": last["step"], "tokens": last["tokens"], "elapsed_s": last["elapsed_s"],
            "first_heldout_loss": first["heldout_loss"], "final_heldout_loss": last["heldout_loss"], "roles": roles}


def save_model_folder(net: Decoder, tokenizer_folder: Path, folder: Path, eos: int | None) -> None:
    """An HF LlamaForCausalLM folder (float32) with the corpus tokenizer: what `load_model(folder)` opens."""
    special = {"bos_token_id": eos, "eos_token_id": eos} if eos is not None else None
    save_decoder(net, folder, torch.float32, special)
    (folder / "tokenizer.json").write_bytes((tokenizer_folder / "tokenizer.json").read_bytes())


class TextRoleTask(LMTask):
    """`train lm`'s task (random windows, batch `step` from `(seed, step)`), evaluated by held-out loss and the
    heads' reference roles."""

    def __init__(self, train_ids: np.ndarray, valid_ids: np.ndarray, tokenizer: TextTokenizer,
                 config: TextRunConfig) -> None:
        super().__init__(train_ids, valid_ids, token_byte_lengths(tokenizer), config.seq_len, config.batch,
                         seed=config.seed, eval_tokens=config.heldout_tokens)
        self.tokenizer = tokenizer
        self.last: dict[str, Any] = {}

    def evaluate(self, model: Decoder) -> dict[str, float]:
        loss = evaluate_lm(model, self.valid_ids, self.token_bytes, self.block_size, self.eval_tokens)["loss"]
        self.last = {"heldout_loss": loss, "roles": measure_roles(model, self.tokenizer)}
        return {"heldout_loss": loss, "best_induction": best(self.last, "induction")[0]}


def train_text_run(config: TextRunConfig, corpus: Path, out: Path, *, tokenizer_folder: Path | None = None,
                   on_record: Callable[[TextRecord], None] | None = None, should_stop: Callable[[], bool] | None = None,
                   progress: bool = False, minutes: float | None = None) -> dict[str, Any]:
    """Train on `corpus/train.txt`, measure on `corpus/valid.txt`, into `out`: settings.json, log.jsonl, run.json
    (the config and summary), model/ (HF folder) and resume/ (the latest checkpoint: a run stopped there resumes).
    With `minutes`, training stops cleanly (a record, a checkpoint, the model) after that much wall time; run it
    again to go on. Same config, corpus and seed, same numbers at each step."""
    config.check()
    corpus, out = Path(corpus), Path(out)
    for split in ("train", "valid"):
        if not (corpus / f"{split}.txt").is_file():
            raise InputError(f"{corpus} must hold train.txt and valid.txt (see scripts/build_corpus.py)")
    tokenizer_folder = Path(tokenizer_folder or default_tokenizer_folder())
    tok = TextTokenizer.from_folder(tokenizer_folder, special_tokens=True)
    train_ids, valid_ids = tokenize_file(tok, corpus / "train.txt"), tokenize_file(tok, corpus / "valid.txt")
    if len(train_ids) <= config.seq_len + 1 or len(valid_ids) < 2:
        raise InputError(f"{corpus} holds too little text for windows of {config.seq_len} tokens")
    out.mkdir(parents=True, exist_ok=True)
    settings = out / SETTINGS
    if settings.is_file() and json.loads(settings.read_text()) != asdict(config):
        raise InputError(f"{out} holds a run with another configuration; choose another --out")
    settings.write_text(json.dumps(asdict(config), indent=1) + "\n")

    torch.manual_seed(config.seed)
    model = Decoder(config.decoder_config(tok.vocab_size))
    task = TextRoleTask(train_ids, valid_ids, tok, config)
    tcfg = TrainConfig(max_steps=config.steps, lr=config.lr, min_lr=config.lr / 10,
                       warmup_steps=min(200, config.steps // 10), weight_decay=0.1, betas=(0.9, 0.95),
                       eval_interval=config.record_every, checkpoint_interval=config.checkpoint_every,
                       max_minutes=minutes, seed=config.seed)
    trainer = Trainer(model, task, tcfg, out / "resume", progress=progress, should_stop=should_stop)

    def make_record(train_loss: float | None) -> TextRecord:
        m = task.last
        return TextRecord(step=trainer.state.step, tokens=trainer.state.tokens,
                          train_loss=round(train_loss, 4) if train_loss is not None else None,
                          heldout_loss=round(m["heldout_loss"], 4), roles=m["roles"],
                          elapsed_s=round(trainer.state.elapsed_s, 3))

    t0 = time.perf_counter()
    records = fit_with_log(trainer, out / "log.jsonl", make_record, on_record or (lambda rec: None))
    save_model_folder(model.eval(), tokenizer_folder, out / "model", tok.eos_id())
    result = {"config": asdict(config), "tokenizer": tokenizer_folder.name, "parameters": model.num_params(),
              "summary": summary(records), "wall_s": round(time.perf_counter() - t0, 1)}
    (out / "run.json").write_text(json.dumps(result, indent=1) + "\n")
    log.info("text run: %s", result["summary"])
    return result
