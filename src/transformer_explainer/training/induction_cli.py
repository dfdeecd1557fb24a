"""`transformer-explainer train induction`: the induction run and its one-layer control (training/induction.py).

Its limits live in training/induction_limits.py, apart from the training code (and torch), so that building the
CLI's parser imports neither; `InductionConfig.check` holds a run started from Python or a server to the same
limits."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..cli_args import float_range, int_range
from .induction_limits import LIMITS
from .induction_text_limits import TEXT_LIMITS


def _int(name: str) -> Callable[[str], int]:
    lo, hi = LIMITS[name]
    return int_range(int(lo), int(hi))


def _text_int(name: str) -> Callable[[str], int]:
    lo, hi = TEXT_LIMITS[name]
    return int_range(int(lo), int(hi))


def register(subcommands: argparse._SubParsersAction, train_subcommands: argparse._SubParsersAction) -> None:
    p = train_subcommands.add_parser(
        "induction", help="train a small decoder on repeated random tokens and record an induction head forming")
    p.add_argument("--out", type=Path, required=True,
                   help="run folder: settings.json, run.json, and per run (main/, control/) log.jsonl, checkpoints/ "
                        "and model/ (an HF folder the app opens); an interrupted run there resumes")
    p.add_argument("--layers", type=_int("layers"), default=2, help="decoder blocks of the run (default 2)")
    p.add_argument("--steps", type=_int("steps"), default=3000, help="optimizer steps of each run (default 3000)")
    p.add_argument("--width", type=_int("width"), default=64, help="d_model (default 64)")
    p.add_argument("--heads", type=_int("heads"), default=4, help="attention heads per block (default 4)")
    p.add_argument("--lr", type=float_range(*LIMITS["lr"]), default=3e-3, help="AdamW's peak rate (default 3e-3)")
    p.add_argument("--batch", type=_int("batch"), default=32, help="sequences per step (default 32)")
    p.add_argument("--seed", type=int_range(0, 2**31 - 1), default=0, help="random seed (default 0)")
    p.add_argument("--record-every", type=_int("record_every"), default=50,
                   help="a record (losses, head scores, attention maps) every this many steps (default 50)")
    p.add_argument("--checkpoint-every", type=_int("checkpoint_every"), default=500,
                   help="a checkpoint every this many steps (default 500)")
    p.add_argument("--control", action=argparse.BooleanOptionalAction, default=True,
                   help="also train the one-layer control on the same data and budget (default: yes)")
    p.add_argument("--family", choices=["llama"], default="llama",
                   help="the family code the decoder is built with (llama: RMSNorm, rotary positions, gated MLP)")
    p.add_argument("--json", action="store_true", help="print run.json rather than a summary")
    p.set_defaults(func=cmd_train_induction)
    register_text(train_subcommands)


def register_text(train_subcommands: argparse._SubParsersAction) -> None:
    """`train induction-text`: the same small decoder on the corpus, its heads' roles recorded (induction_text.py)."""
    p = train_subcommands.add_parser(
        "induction-text", help="train the induction run's small decoder on the corpus and record its heads' roles")
    p.add_argument("--out", type=Path, required=True,
                   help="run folder: settings.json, log.jsonl, run.json, model/ (an HF folder the app opens) and "
                        "resume/; an interrupted run there resumes")
    p.add_argument("--corpus", type=Path, default=Path("data/corpus"),
                   help="folder with train.txt and valid.txt (default data/corpus, see scripts/build_corpus.py)")
    p.add_argument("--tokenizer", type=Path, default=None,
                   help="folder with the tokenizer.json to use (default: the built-in models' tokenizer)")
    p.add_argument("--layers", type=_text_int("layers"), default=2, help="decoder blocks (default 2)")
    p.add_argument("--width", type=_text_int("width"), default=64, help="d_model (default 64)")
    p.add_argument("--heads", type=_text_int("heads"), default=4, help="attention heads per block (default 4)")
    p.add_argument("--steps", type=_text_int("steps"), default=600, help="optimizer steps (default 600)")
    p.add_argument("--lr", type=float_range(*TEXT_LIMITS["lr"]), default=3e-3, help="AdamW's peak rate (default 3e-3)")
    p.add_argument("--batch", type=_text_int("batch"), default=16, help="windows per step (default 16)")
    p.add_argument("--seq-len", type=_text_int("seq_len"), default=128, help="tokens per window (default 128)")
    p.add_argument("--seed", type=int_range(0, 2**31 - 1), default=0, help="random seed (default 0)")
    p.add_argument("--record-every", type=_text_int("record_every"), default=20,
                   help="a record (held-out loss, every head's role scores) every this many steps (default 20)")
    p.add_argument("--minutes", type=float_range(0.01, 10000), default=None,
                   help="stop cleanly after this much training time (run again to go on)")
    p.add_argument("--json", action="store_true", help="print run.json rather than a summary")
    p.set_defaults(func=cmd_train_induction_text)


def cmd_train_induction_text(args: argparse.Namespace) -> int:
    from .induction_text import TextRunConfig, best, train_text_run

    config = TextRunConfig(layers=args.layers, width=args.width, heads=args.heads, steps=args.steps, lr=args.lr,
                           batch=args.batch, seq_len=args.seq_len, seed=args.seed, record_every=args.record_every)
    config.check()
    bar = sys.stderr.isatty() and not args.json

    def show(r: Any) -> None:
        if bar:
            return
        ind, prev = best(r.to_json(), "induction"), best(r.to_json(), "previous_token")
        print(f"step {r.step}: held-out loss {r.heldout_loss:.3f}; best previous-token head {prev[1]}.{prev[2]} "
              f"{prev[0]:.2f}, best induction head {ind[1]}.{ind[2]} {ind[0]:.2f}", file=sys.stderr, flush=True)

    result = train_text_run(config, args.corpus, args.out, tokenizer_folder=args.tokenizer, on_record=show,
                            progress=bar, minutes=args.minutes)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    s = result["summary"]
    print(f"{s['steps']} steps, {s['tokens']:,} tokens, {s['elapsed_s']:.0f} s; held-out loss "
          f"{s['first_heldout_loss']:.3f} -> {s['final_heldout_loss']:.3f}")
    for role, r in s["roles"].items():
        print(f"{role}: best head {r['layer']}.{r['head']} {r['final_best']:.2f} (peak {r['peak']:.2f}); >= 0.5 "
              + (f"from step {r['step']}" if r["step"] is not None else "never"))
    print(f"model: {Path(args.out) / 'model'}")
    return 0


def cmd_train_induction(args: argparse.Namespace) -> int:
    from .induction import InductionConfig, train_induction

    config = InductionConfig(layers=args.layers, steps=args.steps, width=args.width, heads=args.heads, lr=args.lr,
                             batch=args.batch, seed=args.seed, record_every=args.record_every,
                             checkpoint_every=args.checkpoint_every, control=args.control, family=args.family)
    config.check()

    def show(name: str, r: Any) -> None:
        print(f"{name} step {r.step}: loss first {r.first_loss:.3f}, repeat {r.repeat_loss:.3f}; best induction "
              f"score {r.best_induction:.2f}", file=sys.stderr, flush=True)

    result = train_induction(config, args.out, show)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for name, run in result["runs"].items():
        head = run["induction_head"]
        print(f"{name} ({run['layers']} layer{'s' if run['layers'] > 1 else ''}): induction score >= 0.5 "
              + (f"from step {head}" if head is not None else "never")
              + f"; repeat loss {run['final_repeat_loss']:.3f} vs first occurrence {run['final_first_loss']:.3f}; "
                f"{run['wall_s']:.0f} s, {run['steps_per_s']:.1f} steps/s")
    print(f"model: {Path(args.out) / 'main' / 'model'}")
    return 0
