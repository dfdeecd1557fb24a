"""`transformer-explainer train lm`: corpus + tokenizer -> trained GPT -> HF-format folder."""

from __future__ import annotations

import argparse
import json
import logging
import platform
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ..config import DecoderConfig
from ..errors import InputError
from ..loading.checkpoint import save_decoder
from ..loading.tokenizer import TextTokenizer
from ..models.decoder import Decoder
from .lm import MoeLMTask, token_byte_lengths, tokenize_file
from .lm_args import add_lm_args  # noqa: F401  (re-exported: the CLI's arguments)
from .trainer import TrainConfig, Trainer

log = logging.getLogger(__name__)

SAMPLE_PROMPTS = ["Data visualization empowers users to", "The king said", "In the morning, the", "Science is"]


def model_config(args: argparse.Namespace, vocab_size: int) -> DecoderConfig:
    """The shape `train lm` builds from its flags; an InputError for one no model has (e.g. --n-embd
    not a multiple of --n-head)."""
    try:
        if getattr(args, "family", "gpt2") == "gpt2":
            if args.n_kv_head not in (None, args.n_head):
                raise InputError("--n-kv-head is for --family llama: GPT-2 has one key/value head per query head")
            return DecoderConfig(vocab_size=vocab_size, block_size=args.block_size, n_layer=args.n_layer,
                                 n_head=args.n_head, n_embd=args.n_embd, d_mlp=args.n_inner, dropout=args.dropout)
        if args.dropout:
            raise InputError(f"--dropout is not supported with --family {args.family} (the family has no dropout)")
        moe = args.family == "mixtral"
        d_mlp = args.n_inner or (args.n_embd if moe else 64 * round(8 * args.n_embd / 3 / 64))
        experts = dict(n_experts=args.n_experts, top_k=args.top_k, norm_topk_prob=True) if moe else {}
        return DecoderConfig(vocab_size=vocab_size, block_size=args.block_size, n_layer=args.n_layer,
                             n_head=args.n_head, n_embd=args.n_embd, d_mlp=d_mlp, model_type=args.family,
                             n_kv_heads=args.n_kv_head,
                             layer_norm_epsilon=1e-5, activation="silu", rope_theta=args.rope_theta,
                             tie_word_embeddings=True, qkv_bias=False, out_bias=False, mlp_bias=False, **experts)
    except InputError:
        raise
    except ValueError as e:
        raise InputError(f"bad model shape: {e}") from None


class _Autocast(MoeLMTask):
    def loss(self, model, batch):  # type: ignore[override]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return super().loss(model, batch)


def run_lm_training(args: argparse.Namespace) -> Path:
    if args.threads:
        torch.set_num_threads(args.threads)
    corpus: Path = args.corpus
    if not (corpus / "train.txt").is_file() or not (corpus / "valid.txt").is_file():
        raise InputError(f"{corpus} must hold train.txt and valid.txt (see scripts/build_corpus.py)")
    run_file = args.out / "run.json"
    if not run_file.is_file():  # a new run: refuse a bad shape now, not after tokenizing the corpus
        model_config(args, args.vocab_size)
    if not (args.tokenizer / "tokenizer.json").is_file():
        from .bpe import train_bpe_tokenizer

        log.warning("training a %d-token BPE tokenizer into %s", args.vocab_size, args.tokenizer)
        train_bpe_tokenizer([corpus / "train.txt"], args.vocab_size, args.tokenizer)
    tok = TextTokenizer.from_folder(args.tokenizer)
    train_ids = tokenize_file(tok, corpus / "train.txt")
    valid_ids = tokenize_file(tok, corpus / "valid.txt")
    extra = {}
    if (corpus / "general_eval.txt").is_file():
        extra["general"] = tokenize_file(tok, corpus / "general_eval.txt")
    log.warning("corpus: %d train tokens, %d valid tokens", len(train_ids), len(valid_ids))

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if run_file.is_file():  # resuming: the model's shape is the one the run started with
        run = json.loads(run_file.read_text())
        config = DecoderConfig.from_dict(run["model"])
    else:
        config = model_config(args, tok.vocab_size)
        run = {"model": asdict(config), "args": {k: str(v) for k, v in vars(args).items() if k != "func"}}
        run_file.write_text(json.dumps(run, indent=1))
    tcfg = TrainConfig(max_steps=args.max_steps, lr=args.lr, min_lr=args.min_lr, warmup_steps=args.warmup,
                       eval_interval=args.eval_interval, checkpoint_interval=args.checkpoint_interval,
                       max_minutes=args.max_minutes, seed=args.seed)
    torch.manual_seed(args.seed)
    model = Decoder(config)  # with fresh weights (init_weights_)
    task_cls = _Autocast if args.bf16 else MoeLMTask
    # the load-balancing loss applies to mixtures of experts only (a dense model has no router)
    aux = getattr(args, "aux_loss_coef", 0.01) if config.arch.mlp == "moe" else 0.0
    task = task_cls(train_ids, valid_ids, token_byte_lengths(tok), config.block_size, args.batch_size,
                    seed=args.seed, extra_evals=extra, aux_loss_coef=aux)
    trainer = Trainer(model, task, tcfg, out / "checkpoints", progress=not args.no_progress)
    trainer.resume()
    t0 = time.time()
    state = trainer.fit()
    log.warning("trained to step %d (%d tokens, %.0f s this session); eval %s", state.step, state.tokens,
                time.time() - t0, state.last_eval)
    (out / "history.json").write_text(json.dumps(asdict(state), indent=1))
    if args.export:
        export_builtin(model.eval(), args.tokenizer, args.export, state, args, len(train_ids))
    return out


_GPT2_INTRO = [
    "A small GPT-2-architecture language model trained by this project so that the explainer works",
    "offline. Same code path as GPT-2: HF GPT-2 format (`config.json`, `model.safetensors`,",
    "`tokenizer.json`), byte-level BPE tokenizer trained with `tokenizers` like GPT-2's.",
]
_MIXTRAL_INTRO = [
    "A small mixture-of-experts language model trained by this project so that routing can be explored",
    "offline: Llama-style attention (RMSNorm, rotary positions, grouped-query attention) and, in place of",
    "the MLP, a router that sends each token to 2 of 8 gated SiLU experts. Same code path as Mixtral",
    "checkpoints: HF MixtralForCausalLM format (`config.json`, `model.safetensors`, `tokenizer.json`).",
]
_LLAMA_INTRO = [
    "A small Llama-architecture language model trained by this project so that today's decoder design",
    "can be explored offline: RMSNorm, rotary position embeddings, grouped-query attention and a gated",
    "SiLU MLP, no biases. Same code path as Llama, Qwen2 and Mistral checkpoints: HF LlamaForCausalLM",
    "format (`config.json`, `model.safetensors`, `tokenizer.json`).",
]


def export_builtin(model: Decoder, tokenizer_dir: Path, folder: Path, state, args: argparse.Namespace,
                   train_tokens: int) -> None:
    """An HF folder (GPT2LMHeadModel, LlamaForCausalLM or MixtralForCausalLM, as the model's family) + tokenizer + model
    card, then reload it through `load_model` to write the card's samples."""
    from ..engine import load_model
    from ..sampling import SamplingParams

    dtype = torch.float16 if args.export_dtype == "float16" else torch.float32
    special = None
    if model.config.declaration.special_tokens:
        eos = TextTokenizer.from_folder(tokenizer_dir).eos_id()
        special = {"bos_token_id": eos, "eos_token_id": eos} if eos is not None else None
    save_decoder(model, folder, dtype, special)
    shutil.copy(tokenizer_dir / "tokenizer.json", folder / "tokenizer.json")
    loaded = load_model(str(folder), allow_download=False)
    samples = []
    for prompt in SAMPLE_PROMPTS:
        greedy = "".join(t.text for t in loaded.generate(prompt, 24, SamplingParams(temperature=0)))
        sampled = "".join(t.text for t in loaded.generate(prompt, 24, SamplingParams(temperature=0.8, top_k=40,
                                                                                     seed=0)))
        samples.append((prompt, greedy, sampled))
    c = model.config
    ev = state.last_eval
    size_mb = (folder / "model.safetensors").stat().st_size / 1e6
    lines = [
        f"# {folder.name}: the built-in model of transformer-explainer",
        "",
        *{"llama": _LLAMA_INTRO, "mixtral": _MIXTRAL_INTRO}.get(c.family, _GPT2_INTRO),
        "",
        "| | |",
        "|---|---|",
        f"| shape | {c.n_layer} layers, {c.n_head} heads"
        + (f" sharing {c.n_kv_heads} key/value heads" if c.n_kv_heads != c.n_head else "")
        + f", d_model {c.n_embd}, "
        + (f"{c.n_experts} experts of width {c.d_expert} (gated), {c.top_k} per token, "
           if c.arch.mlp == "moe" else f"MLP {c.d_mlp}{' (gated)' if c.family == 'llama' else ''}, ")
        + f"context {c.block_size} |",
        f"| vocabulary | {c.vocab_size} byte-level BPE tokens |",
        f"| parameters | {model.num_params() / 1e6:.2f} M"
        + (f", {model.num_active_params() / 1e6:.2f} M of them used per token" if c.arch.mlp == "moe" else "")
        + f" (weights stored as {args.export_dtype}, {size_mb:.1f} MB) |",
        f"| corpus | see `data/corpus/SOURCES.md` from `scripts/build_corpus.py`; "
        f"{train_tokens / 1e6:.1f} M train tokens |",
        f"| training | {state.step} steps x {args.batch_size} x {c.block_size} tokens = "
        f"{state.tokens / 1e6:.1f} M tokens, "
        f"AdamW, lr {args.lr} warmup {args.warmup} cosine to {args.min_lr} |",
        f"| time and machine | {state.elapsed_s / 60:.0f} min on {torch.get_num_threads()} CPU threads "
        f"({platform.processor() or platform.machine()}) |",
        f"| held-out loss (corpus valid slice) | {ev.get('val_loss', float('nan')):.3f} nats/token, "
        f"{ev.get('val_bpb', float('nan')):.3f} bits per byte |",
    ]
    if "general_bpb" in ev:
        lines.append(f"| general English prose (source not in training) | {ev['general_loss']:.3f} nats/token, "
                     f"{ev['general_bpb']:.3f} bits per byte |")
    lines += ["", "## Samples", "", "Greedy, then temperature 0.8 / top-k 40 / seed 0, 24 tokens each.", ""]
    for prompt, greedy, sampled in samples:
        lines += [f"- **{prompt}**{greedy}", f"- **{prompt}**{sampled}"]
    (folder / "MODEL_CARD.md").write_text("\n".join(lines) + "\n")
