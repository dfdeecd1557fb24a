"""`transformer-explainer train sae`: TopK sparse autoencoders on a model's activations over the project's corpus,
each written as a folder in the SAELens format with its card (SAE_CARD.md) and figures (quality.json)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..cli_args import int_range, positive_float, positive_int

CARD = "SAE_CARD.md"
QUALITY = "quality.json"
# the bars the project holds its shipped autoencoders to (issue 35)
BARS = {"explained_variance": 0.7, "ce_loss_recovered": 0.85, "dead_fraction": 0.05}


def register(subcommands: argparse._SubParsersAction, train_subcommands: argparse._SubParsersAction) -> None:
    p = train_subcommands.add_parser("sae", help="train TopK sparse autoencoders on a model's residual stream")
    p.add_argument("--model", required=True, help="built-in model name, local HF-format folder, or hub id")
    p.add_argument("--hook", action="append", required=True,
                   help="a hook point in TransformerLens's spelling, e.g. blocks.3.hook_resid_post; repeat it to "
                        "train several autoencoders from one forward pass")
    p.add_argument("--width", default="16x", help="latents: a multiple of d_model (16x, the default) or a number")
    p.add_argument("--k", type=positive_int, default=32, help="latents active per token (default 32)")
    p.add_argument("--tokens", type=positive_int, default=2_000_000,
                   help="activation vectors each autoencoder trains on (default 2,000,000)")
    p.add_argument("--out", type=Path, required=True,
                   help="folder: one sub-folder per hook (cfg.json, sae_weights.safetensors, SAE_CARD.md, "
                        "quality.json) and checkpoint/ for --resume")
    p.add_argument("--resume", action="store_true", help="continue the run whose checkpoint is in --out")
    p.add_argument("--seed", type=int_range(0, 2**31 - 1), default=0, help="random seed (default 0)")
    p.add_argument("--corpus", type=Path, default=Path("data/corpus"),
                   help="the tokenized corpus (scripts/build_corpus.py): train and valid splits (default data/corpus)")
    p.add_argument("--batch", type=positive_int, default=4096, help="vectors per step (default 4096)")
    p.add_argument("--context", type=positive_int, default=128, help="tokens per corpus window (default 128)")
    p.add_argument("--lr", type=positive_float, default=None, help="Adam's learning rate (default 4e-4)")
    p.add_argument("--eval-tokens", type=int_range(256), default=32768,
                   help="held-out tokens (the corpus's valid split) the card's figures are measured on")
    p.add_argument("--dead-eval-tokens", type=int_range(256), default=262144,
                   help="held-out tokens a latent must fire on none of to count as dead (default 262144, or the "
                        "whole valid split where it is shorter); a pass that reads the activations only")
    p.add_argument("--dtype", choices=["float32", "float16"], default="float32",
                   help="the type the weights are stored in (the figures are measured with the stored weights)")
    p.add_argument("--offline", action="store_true", help="never download the model")
    p.set_defaults(func=cmd_train_sae)


def cmd_train_sae(args: argparse.Namespace) -> int:
    import torch

    from ..engine import ExplainerModel, load_model
    from ..errors import InputError
    from ..features.quality import heldout_windows, measure
    from ..features.sae import load_sae, parse_hook, save_sae
    from .sae import SAETrainConfig, corpus_ids, machine, parse_width, train_saes

    for h in args.hook:
        parse_hook(h)
    model = load_model(args.model, allow_download=not args.offline, dtype="float32")
    if not isinstance(model, ExplainerModel):
        raise InputError(f"{model.name} runs through transformers: train sae needs a model this project runs with "
                         "its own code (GPT-2, the Llama family, ...)")
    d_in = model.config.n_embd
    if args.context > model.context_length:
        raise InputError(f"--context {args.context} is longer than {model.name}'s context of {model.context_length}")
    train_ids = corpus_ids(model.tokenizer, args.corpus, "train")
    valid_ids = corpus_ids(model.tokenizer, args.corpus, "valid")
    extra: dict[str, Any] = {} if args.lr is None else {"lr": args.lr}
    cfg = SAETrainConfig(model=model.name, hooks=tuple(args.hook), d_sae=parse_width(args.width, d_in), k=args.k,
                         tokens=args.tokens, batch=args.batch, context=args.context, seed=args.seed, **extra)
    print(f"model: {model.name}, d_model {d_in}; {len(cfg.hooks)} autoencoder(s) of {cfg.d_sae} latents, k {cfg.k}, "
          f"{cfg.steps} steps of {cfg.batch} tokens", file=sys.stderr)
    result = train_saes(model.net, train_ids, cfg, args.out, model_name=model.name, resume=args.resume,
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
    windows = heldout_windows(valid_ids, cfg.context, args.eval_tokens)
    dtype = getattr(torch, args.dtype)
    t = time.perf_counter()
    folders = {h: save_sae(sae, args.out / h, dtype=dtype) for h, sae in result.saes.items()}
    stored = {h: load_sae(f) for h, f in folders.items()}  # the figures of the weights as stored
    quality = measure(model.net, stored, windows)
    unrounded = measure(model.net, result.saes, windows, losses=False) if args.dtype != "float32" else quality
    firing = measure(model.net, stored, heldout_windows(valid_ids, cfg.context, args.dead_eval_tokens), losses=False)
    eval_seconds = time.perf_counter() - t
    for h, folder in folders.items():
        q = {**quality[h].to_json(),
             **dead_figures(firing[h].dead_fraction, firing[h].tokens, quality[h].dead_fraction)}
        figures = {**q, "d_in": d_in, "explained_variance_float32": unrounded[h].explained_variance,
                   "dead_fraction_training": result.state["log"][-1][h]["dead"] if result.state["log"] else None,
                   "weights_dtype": args.dtype, "train_tokens": cfg.steps * cfg.batch,
                   "train_seconds": round(result.seconds, 1), "eval_seconds": round(eval_seconds, 1),
                   "hooks_trained_together": list(cfg.hooks), "machine": machine(), "config": result.state["config"],
                   "corpus_tokens": {"train": len(train_ids), "valid": len(valid_ids)},
                   "tokens_changes": result.state.get("tokens_changes", []),
                   "command": "transformer-explainer train sae " + " ".join(sys.argv[3:]) if sys.argv[1:3] == [
                       "train", "sae"] else None}
        (folder / QUALITY).write_text(json.dumps(figures, indent=1) + "\n")
        (folder / CARD).write_text(card(figures))
        ok = all(passes(figures, k) for k in BARS)
        print(f"{h}: explained variance {q['explained_variance']:.3f}, CE loss recovered "
              f"{q['ce_loss_recovered']:.3f}, dead {q['dead_fraction']:.1%}, L0 {q['l0']:.1f}"
              f"{'' if ok else ' (below the bars: see the card)'} -> {folder}")
    return 0


def dead_figures(fraction: float, tokens: int, on_eval: float) -> dict[str, Any]:
    """The dead fraction the bar reads (latents that fired on none of `tokens` held-out tokens), beside the one of
    the fewer tokens the other figures are measured on (a rare latent fires on none of those more often)."""
    return {"dead_fraction": fraction, "dead_fraction_tokens": tokens, "dead_fraction_on_eval_tokens": on_eval}


def passes(figures: dict[str, Any], key: str) -> bool:
    v = figures[key]
    return v < BARS[key] if key == "dead_fraction" else v >= BARS[key]


def tokens_change(t: dict[str, Any], c: dict[str, Any]) -> str:
    """A sentence for a run resumed with another --tokens (state's tokens_changes)."""
    steps = c["tokens"] // c["batch"]
    if t["at_step"] >= steps:  # resumed only to be written out: no step after it
        return (f"The run was stopped at step {t['at_step']} for time, its learning rate still at {c['lr']:g} (the "
                f"decay had not begun); it had been started for {t['from']:,} tokens. ")
    return (f"The run was resumed at step {t['at_step']} with --tokens {t['to']:,} (it had been started with "
            f"{t['from']:,}); the learning-rate schedule from there on is the new total's. ")


def card(f: dict[str, Any]) -> str:
    """SAE_CARD.md from the figures of quality.json."""
    c = f["config"]
    together = [h for h in f["hooks_trained_together"] if h != f["hook"]]
    mark = {k: "meets" if passes(f, k) else "**below**" for k in BARS}
    minutes = f["train_seconds"] / 60
    stopped = any(t["at_step"] >= c["tokens"] // c["batch"] for t in f.get("tokens_changes") or [])
    schedule = "1% warm-up, then constant: stopped before its decay" if stopped else \
        "1% warm-up, linear decay over the last 20%"
    shared = (f" for all {len(together) + 1} autoencoders together (one forward pass of the model feeds "
              f"{', '.join([f['hook'], *together])})" if together else "")
    dtype_line = ("" if f["weights_dtype"] == "float32" else
                  f"| stored as | {f['weights_dtype']} (explained variance {f['explained_variance']:.4f}; "
                  f"{f['explained_variance_float32']:.4f} with the float32 weights before rounding) |\n")
    return (
        f"# Sparse autoencoder: {c['model']} {f['hook']}\n\n"
        f"A TopK sparse autoencoder (Gao et al. 2024) on {c['model']}'s `{f['hook']}`, trained by "
        "`transformer-explainer train sae` on the project's corpus. SAELens format: `cfg.json` + "
        "`sae_weights.safetensors`; `quality.json` holds the figures below.\n\n"
        "| | |\n|---|---|\n"
        f"| shape | d_in {f['d_in']}, {c['d_sae']} latents, k {c['k']} |\n"
        f"| training | {f['train_tokens']:,} tokens (windows of {c['context']} from the corpus's train split, "
        f"{f['corpus_tokens']['train']:,} tokens), batches of {c['batch']}, Adam lr {c['lr']:g} ({schedule}), "
        f"AuxK loss x {c['aux_coef']:.4g} for latents dead over "
        f"{c['dead_tokens']:,} tokens, seed {c['seed']} |\n"
        f"| time and machine | {minutes:.1f} min wall time{shared}, on a {f['machine']}, shared with other jobs |\n"
        f"{dtype_line}"
        f"| held-out text | {f['tokens']:,} tokens of the corpus's valid split (consecutive windows of "
        f"{c['context']}) |\n\n"
        "## Quality on held-out text\n\n"
        "| figure | value | the project's bar |\n|---|---|---|\n"
        f"| explained variance | {f['explained_variance']:.3f} | >= 0.7 ({mark['explained_variance']}) |\n"
        f"| cross-entropy loss recovered (against zero-ablation) | {f['ce_loss_recovered']:.3f} | >= 0.85 "
        f"({mark['ce_loss_recovered']}) |\n"
        f"| dead latents (fired on none of {f['dead_fraction_tokens']:,} held-out tokens) | {f['dead_fraction']:.2%} "
        f"| < 5% ({mark['dead_fraction']}) |\n"
        f"| L0 (latents active per token) | {f['l0']:.1f} | |\n\n"
        f"Next-token loss on those tokens: {f['ce_clean']:.3f} nats/token clean, {f['ce_with_sae']:.3f} with the "
        f"activation replaced by its reconstruction, {f['ce_zero_ablation']:.3f} with it set to zero. "
        + (f"On the {f['tokens']:,} tokens of the other figures {f['dead_fraction_on_eval_tokens']:.2%} of the "
           "latents fired on none. ")
        + ("" if f.get("dead_fraction_training") is None else
           f"At the end of training {f['dead_fraction_training']:.2%} of the latents had not fired in the last "
           f"{c['dead_tokens']:,} training tokens. ")
        + "".join(tokens_change(t, c) for t in f.get("tokens_changes") or [])
        + (f"\n\nReproduce: `{f['command']}`\n" if f.get("command") else "\n")
    )
