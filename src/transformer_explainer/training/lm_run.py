"""`transformer-explainer train lm`: corpus + tokenizer -> trained GPT -> HF-format folder."""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import platform
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..config import DecoderConfig
from ..errors import InputError
from ..loading.checkpoint import save_decoder
from ..loading.tokenizer import TextTokenizer
from ..models.decoder import Decoder
from .lm import CausalLMLogits, MoeLMTask, token_byte_lengths, tokenize_file
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


HF_FAMILIES = ("qwen3_5_text",)  # built, trained and saved by transformers' own modules, not our Decoder


def hf_model_config(args: argparse.Namespace, vocab_size: int, eos_id: int | None) -> Any:
    """The transformers config `train lm --family qwen3_5_text` builds: Qwen3.5's text decoder, whose layers are
    Gated DeltaNet (linear attention) but for every `--full-attention-interval`-th, full softmax attention; an
    InputError for a shape that model cannot have."""
    from transformers import Qwen3_5TextConfig

    if args.dropout:
        raise InputError(f"--dropout is not supported with --family {args.family} (the family has no dropout)")
    kv = args.n_kv_head or args.n_head
    if args.n_embd % args.n_head:
        raise InputError(f"bad model shape: --n-embd {args.n_embd} is not a multiple of --n-head {args.n_head}")
    if args.n_head % kv:
        raise InputError(f"bad model shape: --n-head {args.n_head} is not a multiple of --n-kv-head {kv}")
    if args.linear_value_heads % args.linear_key_heads:
        raise InputError(f"bad model shape: --linear-value-heads {args.linear_value_heads} is not a multiple of "
                         f"--linear-key-heads {args.linear_key_heads}")
    every = args.full_attention_interval
    return Qwen3_5TextConfig(
        vocab_size=vocab_size, hidden_size=args.n_embd, num_hidden_layers=args.n_layer,
        intermediate_size=args.n_inner or 64 * round(8 * args.n_embd / 3 / 64),
        num_attention_heads=args.n_head, num_key_value_heads=kv, head_dim=args.n_embd // args.n_head,
        layer_types=["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(args.n_layer)],
        linear_num_key_heads=args.linear_key_heads, linear_num_value_heads=args.linear_value_heads,
        linear_key_head_dim=args.linear_head_dim, linear_value_head_dim=args.linear_head_dim,
        max_position_embeddings=args.block_size, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta, "partial_rotary_factor": 0.25},
        bos_token_id=eos_id, eos_token_id=eos_id)


def mamba2_decay_init_(model: nn.Module) -> None:
    """The decay's starting values of the Gated DeltaNet paper's code (flash-linear-attention, after Mamba2): per
    value head A uniform in (0, 16) and a step dt log-uniform in (0.001, 0.1) that softplus(dt_bias) gives back, so
    the decay exp(-A * dt) starts between 0.2 and 1 (transformers' dt_bias of 1 makes it exp(-1.3 A), near 0 for
    most heads)."""
    for m in model.modules():
        if isinstance(getattr(m, "A_log", None), nn.Parameter) and isinstance(getattr(m, "dt_bias", None),
                                                                             nn.Parameter):
            n = m.dt_bias.numel()
            dt = torch.exp(torch.rand(n) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clamp(min=1e-4)
            with torch.no_grad():
                m.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus's inverse
                m.A_log.copy_(torch.empty(n).uniform_(0, 16).clamp(min=1e-2).log())


def _hf_from_dict(d: dict[str, Any]) -> Any:
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[d["model_type"]].from_dict(d)


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
        if getattr(args, "family", "gpt2") in HF_FAMILIES:
            hf_model_config(args, args.vocab_size, None)
        else:
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
    run_args = {k: str(v) for k, v in vars(args).items() if k != "func"}
    hf_config = None
    if run_file.is_file():  # resuming: the model's shape is the one the run started with
        run = json.loads(run_file.read_text())
        if "hf_model" in run:
            hf_config = _hf_from_dict(run["hf_model"])
        else:
            config = DecoderConfig.from_dict(run["model"])
    elif getattr(args, "family", "gpt2") in HF_FAMILIES:
        hf_config = hf_model_config(args, tok.vocab_size, tok.eos_id())
        run_file.write_text(json.dumps({"hf_model": hf_config.to_dict(), "args": run_args}, indent=1))
    else:
        config = model_config(args, tok.vocab_size)
        run_file.write_text(json.dumps({"model": asdict(config), "args": run_args}, indent=1))
    tcfg = TrainConfig(max_steps=args.max_steps, lr=args.lr, min_lr=args.min_lr, warmup_steps=args.warmup,
                       eval_interval=args.eval_interval, checkpoint_interval=args.checkpoint_interval,
                       max_minutes=args.max_minutes, seed=args.seed)
    torch.manual_seed(args.seed)
    model: Decoder | CausalLMLogits
    if hf_config is not None:
        from transformers import AutoModelForCausalLM

        # fresh weights from transformers' own initialisation (post_init); float32 whatever the default dtype
        model = CausalLMLogits(AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32))
        if getattr(args, "decay_init", "transformers") == "mamba2":
            mamba2_decay_init_(model)
        block_size, aux = hf_config.max_position_embeddings, 0.0
    else:
        model = Decoder(config)  # with fresh weights (init_weights_)
        # the load-balancing loss applies to mixtures of experts only (a dense model has no router)
        block_size = config.block_size
        aux = getattr(args, "aux_loss_coef", 0.01) if config.arch.mlp == "moe" else 0.0
    task_cls = _Autocast if args.bf16 else MoeLMTask
    task = task_cls(train_ids, valid_ids, token_byte_lengths(tok), block_size, args.batch_size,
                    seed=args.seed, extra_evals=extra, aux_loss_coef=aux)
    trainer = Trainer(model, task, tcfg, out / "checkpoints", progress=not args.no_progress)
    trainer.resume()
    t0 = time.time()
    state = trainer.fit()
    log.warning("trained to step %d (%d tokens, %.0f s this session); eval %s", state.step, state.tokens,
                time.time() - t0, state.last_eval)
    (out / "history.json").write_text(json.dumps(asdict(state), indent=1))
    if args.export and isinstance(model, CausalLMLogits):
        export_transformers(model.eval(), args.tokenizer, args.export, state, args, len(train_ids))
    elif args.export:
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
    dtype = torch.float16 if args.export_dtype == "float16" else torch.float32
    special = None
    if model.config.declaration.special_tokens:
        eos = TextTokenizer.from_folder(tokenizer_dir).eos_id()
        special = {"bos_token_id": eos, "eos_token_id": eos} if eos is not None else None
    save_decoder(model, folder, dtype, special)
    shutil.copy(tokenizer_dir / "tokenizer.json", folder / "tokenizer.json")
    c = model.config
    size_mb = (folder / "model.safetensors").stat().st_size / 1e6
    shape = (
        f"{c.n_layer} layers, {c.n_head} heads"
        + (f" sharing {c.n_kv_heads} key/value heads" if c.n_kv_heads != c.n_head else "")
        + f", d_model {c.n_embd}, "
        + (f"{c.n_experts} experts of width {c.d_expert} (gated), {c.top_k} per token, "
           if c.arch.mlp == "moe" else f"MLP {c.d_mlp}{' (gated)' if c.family == 'llama' else ''}, ")
        + f"context {c.block_size}")
    params = (f"{model.num_params() / 1e6:.2f} M"
              + (f", {model.num_active_params() / 1e6:.2f} M of them used per token" if c.arch.mlp == "moe" else "")
              + f" (weights stored as {args.export_dtype}, {size_mb:.1f} MB)")
    intro = {"llama": _LLAMA_INTRO, "mixtral": _MIXTRAL_INTRO}.get(c.family, _GPT2_INTRO)
    write_model_card(folder, intro, shape, params, c.vocab_size, c.block_size, state, args, train_tokens)


def export_transformers(model: CausalLMLogits, tokenizer_dir: Path, folder: Path, state: Any,
                        args: argparse.Namespace, train_tokens: int) -> None:
    """A model transformers built and trained (`--family qwen3_5_text`), saved by its own `save_pretrained`
    (safetensors, in `--export-dtype`) with the tokenizer and a model card."""
    dtype = torch.float16 if args.export_dtype == "float16" else torch.float32
    lm = copy.deepcopy(model.lm).to(dtype)
    lm.config.use_cache = True  # trained without a cache; run with one
    lm.save_pretrained(folder)
    (folder / "generation_config.json").unlink(missing_ok=True)  # the config's end token is all it holds
    shutil.copy(tokenizer_dir / "tokenizer.json", folder / "tokenizer.json")
    c = lm.config
    size_mb = (folder / "model.safetensors").stat().st_size / 1e6
    kinds = c.layer_types
    n_full = kinds.count("full_attention")
    names = ", ".join("DeltaNet" if k == "linear_attention" else "full attention" for k in kinds)
    shape = (f"{c.num_hidden_layers} layers ({names}), "
             f"d_model {c.hidden_size}; Gated DeltaNet: {c.linear_num_key_heads} query/key heads and "
             f"{c.linear_num_value_heads} value heads of width {c.linear_key_head_dim}, a causal convolution of "
             f"{c.linear_conv_kernel_dim} tokens; full attention: {c.num_attention_heads} heads sharing "
             f"{c.num_key_value_heads} key/value heads of width {c.head_dim}, an output gate, QK-norm, rotary "
             f"positions on {c.rope_parameters.get('partial_rotary_factor', 1.0):.0%} of each head; MLP "
             f"{c.intermediate_size} (gated); context {c.max_position_embeddings}")
    params = f"{model.num_params() / 1e6:.2f} M (weights stored as {args.export_dtype}, {size_mb:.1f} MB)"
    intro = [
        "A small hybrid language model trained by this project in the shape of Qwen3.5's text decoder:",
        f"{len(kinds) - n_full} of its {len(kinds)} layers are Gated DeltaNet layers (linear attention: each head "
        "keeps a fixed-size",
        "state, decayed by a learned gate and written with a learned strength at every token), "
        f"{n_full} {'is' if n_full == 1 else 'are'} full",
        "softmax attention. It has no family code of our own: transformers' `Qwen3_5ForCausalLM` built and",
        "trained it and runs it (`config.json` with model_type `qwen3_5_text`, `model.safetensors`, `tokenizer.json`).",
    ]
    write_model_card(folder, intro, shape, params, c.vocab_size, c.max_position_embeddings, state, args,
                     train_tokens)


def write_model_card(folder: Path, intro: list[str], shape: str, params: str, vocab_size: int, block_size: int,
                     state: Any, args: argparse.Namespace, train_tokens: int) -> None:
    """MODEL_CARD.md of an exported folder; its samples come from the folder reloaded through `load_model`."""
    from ..engine import load_model
    from ..sampling import SamplingParams

    loaded = load_model(str(folder), allow_download=False)
    samples = []
    for prompt in SAMPLE_PROMPTS:
        greedy = "".join(t.text for t in loaded.generate(prompt, 24, SamplingParams(temperature=0)))
        sampled = "".join(t.text for t in loaded.generate(prompt, 24, SamplingParams(temperature=0.8, top_k=40,
                                                                                     seed=0)))
        samples.append((prompt, greedy, sampled))
    ev = state.last_eval
    lines = [
        f"# {folder.name}: the built-in model of transformer-explainer",
        "",
        *intro,
        "",
        "| | |",
        "|---|---|",
        f"| shape | {shape} |",
        f"| vocabulary | {vocab_size} byte-level BPE tokens |",
        f"| parameters | {params} |",
        f"| corpus | see `data/corpus/SOURCES.md` from `scripts/build_corpus.py`; "
        f"{train_tokens / 1e6:.1f} M train tokens |",
        f"| training | {state.step} steps x {args.batch_size} x {block_size} tokens = "
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
