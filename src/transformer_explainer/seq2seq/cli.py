"""`transformer-explainer seq2seq ...` (decode with a shipped or trained model) and
`transformer-explainer train seq2seq ...` (train one on a task)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from ..cli_args import fraction, int_range, non_negative_float, non_negative_int, positive_float, positive_int
from ..errors import InputError

log = logging.getLogger(__name__)


def register(subcommands: argparse._SubParsersAction, train_subcommands: argparse._SubParsersAction) -> None:
    from .config import MAX_BEAM
    from .tasks import TASKS

    p = subcommands.add_parser("seq2seq", help="translate TEXT with an encoder-decoder toy-task model")
    p.add_argument("text", nargs="?", help="the input to translate")
    p.add_argument("--list", action="store_true", help="list the tasks and their shipped checkpoints")
    p.add_argument("--task", help="a built-in task (see --list)")
    p.add_argument("--checkpoint", type=Path, help="a checkpoint folder from `train seq2seq` instead of --task")
    p.add_argument("--beam", type=int_range(1, MAX_BEAM), default=1,
                   help=f"beam size, 1 (greedy, default) to {MAX_BEAM}")
    p.add_argument("--steps", action="store_true",
                   help="show every decoding step: the token chosen and the two next most likely, with their "
                        "probabilities")
    p.add_argument("--json", action="store_true", help='print {"task", "input", "output", "tokens"}')
    p.set_defaults(func=cmd_seq2seq)

    p = train_subcommands.add_parser("seq2seq", help="train an encoder-decoder Transformer on a toy task")
    p.add_argument("--task", required=True, choices=sorted(TASKS),
                   help="the task to learn (see `seq2seq --list`); tsv: your own pairs, from --tsv")
    p.add_argument("--tsv", type=Path, help="source<TAB>target file, for --task tsv")
    p.add_argument("--level", choices=["char", "word"], default="char", help="tsv tokens: characters or words")
    p.add_argument("--out", type=Path, help="run folder: checkpoints, resumes if present (default runs/seq2seq-TASK)")
    p.add_argument("--export", type=Path, help="also write a float16 shipped-style folder with README here")
    p.add_argument("--preset", choices=["tiny", "small", "base"], help="model shape (default: the task's recipe)")
    p.add_argument("--layers", type=positive_int, help="encoder and decoder layers (overrides the preset)")
    p.add_argument("--d-model", type=positive_int, help="width of the residual stream (a multiple of --heads)")
    p.add_argument("--heads", type=positive_int, help="attention heads")
    p.add_argument("--d-ff", type=positive_int, help="hidden width of the feed-forward layers")
    p.add_argument("--dropout", type=fraction, help="P_drop, 0 or more and below 1")
    p.add_argument("--steps", type=positive_int, help="optimizer steps (default: the task's recipe)")
    p.add_argument("--batch-size", type=positive_int, help="pairs per step (default: the task's recipe)")
    p.add_argument("--lr", type=positive_float, help="peak learning rate")
    p.add_argument("--min-lr", type=non_negative_float, help="floor of the schedule (default 1e-5)")
    p.add_argument("--warmup", type=non_negative_int, help="linear warmup steps")
    p.add_argument("--schedule", choices=["inverse_sqrt", "cosine"],
                   help="after warmup: the paper's inverse square root or cosine decay (default: the task's recipe)")
    p.add_argument("--label-smoothing", type=fraction,
                   help="epsilon of label smoothing, 0 or more and below 1 (default 0.1, the paper's)")
    p.add_argument("--eval-interval", type=positive_int, default=500, help="steps between validations (default 500)")
    p.add_argument("--eval-samples", type=positive_int, default=500, help="held-out pairs for validation exact match")
    p.add_argument("--final-samples", type=positive_int, default=2000, help="held-out pairs measured for --export")
    p.add_argument("--checkpoint-interval", type=positive_int, default=500,
                   help="steps between checkpoints (default 500)")
    p.add_argument("--max-minutes", type=positive_float, help="stop cleanly, with a checkpoint, after this long")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the initial weights and of the pairs drawn (default 0)")
    p.add_argument("--threads", type=positive_int, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (for logs)")
    p.set_defaults(func=cmd_train_seq2seq)


# -- decoding --------------------------------------------------------------------------------------


def _load(args: argparse.Namespace):
    from .checkpoint import load_builtin, load_seq2seq
    from .tasks import TASKS

    if args.checkpoint is not None:
        return load_seq2seq(args.checkpoint)
    if not args.task:
        raise InputError("name a task with --task (see `transformer-explainer seq2seq --list`) or a --checkpoint")
    if args.task not in TASKS:
        raise InputError(f"unknown task {args.task!r}; choose one of {', '.join(TASKS)}")
    if args.task == "tsv":
        raise InputError("a tsv model is your own: pass the folder that `train seq2seq --task tsv` wrote "
                         "with --checkpoint (RUN/model, or its --export folder)")
    return load_builtin(args.task)


def cmd_seq2seq(args: argparse.Namespace) -> int:
    from .decoding import translate

    if args.list:
        return _list(args.json)
    if args.text is None:
        raise InputError("give the TEXT to translate, e.g. transformer-explainer seq2seq --task reverse hello")
    if not args.text.strip():
        raise InputError("the text is empty: type something to translate")
    model = _load(args)
    result = translate(model, args.text, args.beam)
    if args.json:
        print(json.dumps({"task": model.task_name, "input": args.text, "output": result.text,
                          "tokens": result.tokens}, ensure_ascii=False))
        return 0
    if args.steps:
        print(f"{'step':>4}  {'decoder input':<24} {'token':<14} {'prob':>7}  next best")
        for s in result.steps:
            inp = " ".join(s.input_tokens)
            inp = inp if len(inp) <= 24 else "…" + inp[-23:]
            alt = ", ".join(f"{t.token} {_pct(t.prob)}" for t in s.top[1:3])  # as the prob column
            print(f"{s.step:>4}  {inp:<24} {s.token:<14} {s.prob:>7.2%}  {alt}")
    print(result.text)
    if not result.finished:
        print(f"(stopped at the length limit of {len(result.steps)} tokens, before the end token)", file=sys.stderr)
    return 0


def _pct(p: float) -> str:
    """A probability as a percentage that stays readable for the tiny ones beside a confident choice."""
    return f"{p:.2%}" if p >= 1e-4 or p == 0 else f"{p * 100:.1e}%"


def _list(as_json: bool) -> int:
    from .checkpoint import builtin_checkpoints, load_seq2seq
    from .tasks import BUILTIN_TASKS, make_task

    shipped = builtin_checkpoints()
    rows = []
    for name in BUILTIN_TASKS:
        task = make_task(name)
        row = {"task": name, "description": task.description, "examples": list(task.examples), "checkpoint": None}
        if name in shipped:
            m = load_seq2seq(shipped[name])
            row["checkpoint"] = str(shipped[name])
            row["exact_match"] = m.training.get("exact_match")
        rows.append(row)
    rows.append({"task": "tsv", "description": "your own source<TAB>target pairs (train seq2seq --task tsv "
                 "--tsv FILE)", "examples": [], "checkpoint": None})
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return 0
    for r in rows:
        acc = f"shipped, {r['exact_match']:.1%} exact match" if r.get("exact_match") is not None else (
            "shipped" if r["checkpoint"] else "no shipped checkpoint")
        print(f"{r['task']:<16} {acc}")
        print(f"{'':<16} {r['description']}")
        if r["examples"]:
            print(f"{'':<16} e.g. " + ", ".join(repr(e) for e in r["examples"]))
    return 0


# -- training --------------------------------------------------------------------------------------


def cmd_train_seq2seq(args: argparse.Namespace) -> int:
    import torch

    from ..loading.checkpoint import atomic_write_bytes
    from ..training.trainer import TrainConfig, Trainer
    from .checkpoint import load_seq2seq, save_seq2seq
    from .config import PRESETS, Seq2SeqConfig
    from .engine import Seq2SeqModel
    from .model import EncoderDecoder
    from .tasks import make_task
    from .training import RECIPES, Seq2SeqTrainTask, TaskRecipe, exact_match, model_card

    if args.threads:
        torch.set_num_threads(args.threads)
    options = {"path": str(args.tsv.resolve()), "level": args.level} if args.task == "tsv" and args.tsv else {}
    if args.task != "tsv" and args.tsv:
        raise InputError("--tsv is for --task tsv")
    out: Path = args.out or Path("runs") / f"seq2seq-{args.task}"
    run_file = out / "run.json"
    given = {"preset": args.preset, "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
             "warmup": args.warmup, "schedule": args.schedule, "label_smoothing": args.label_smoothing,
             "min_lr": args.min_lr}
    given = {k: v for k, v in given.items() if v is not None}
    if run_file.is_file():  # resuming: the shape and task are the ones the run started with
        run = json.loads(run_file.read_text())
        if run["task"] != args.task:
            raise InputError(f"{out} holds a run of task {run['task']!r}; choose another --out")
        options, config = run["task_options"], Seq2SeqConfig.from_dict(run["model"])
        recipe = {"min_lr": 1e-5, **run["recipe"], **given}  # e.g. more --steps
        task = make_task(args.task, **options)
    else:
        task = make_task(args.task, **options)
        recipe = {**asdict(RECIPES.get(args.task, TaskRecipe())), "label_smoothing": 0.1, "seed": args.seed, **given}
        shape = {k: v for k, v in {"n_encoder_layers": args.layers, "n_decoder_layers": args.layers,
                                   "d_model": args.d_model, "n_head": args.heads, "d_ff": args.d_ff,
                                   "dropout": args.dropout}.items() if v is not None}
        try:
            config = replace(PRESETS[recipe["preset"]], **shape).with_vocab(len(task.src_vocab), len(task.tgt_vocab))
        except ValueError as e:  # a shape the flags make but no model has, e.g. --d-model 128 --heads 3
            raise InputError(f"bad model shape: {e}") from None
    run = {"task": args.task, "task_options": task.options(), "model": config.to_dict(), "recipe": recipe}
    out.mkdir(parents=True, exist_ok=True)  # only now: a refused task or option leaves no folder behind
    # whole or not at all: a kill while writing must not leave a run that cannot resume
    atomic_write_bytes(run_file, json.dumps(run, indent=1, ensure_ascii=False).encode())
    tcfg = TrainConfig(max_steps=recipe["steps"], lr=recipe["lr"], min_lr=recipe["min_lr"],
                       warmup_steps=recipe["warmup"], weight_decay=0.0, betas=(0.9, 0.98),  # the paper's Adam
                       eval_interval=args.eval_interval, checkpoint_interval=args.checkpoint_interval,
                       max_minutes=args.max_minutes, seed=recipe["seed"], schedule=recipe["schedule"])
    torch.manual_seed(recipe["seed"])
    net = EncoderDecoder(config)
    train_task = Seq2SeqTrainTask(task, recipe["batch_size"], recipe["seed"], recipe["label_smoothing"],
                                  args.eval_samples)
    trainer = Trainer(net, train_task, tcfg, out / "checkpoints", progress=not args.no_progress)
    if trainer.resume():
        print(f"resuming {out} at step {trainer.state.step}", file=sys.stderr)
    print(f"task {task.name}: {task.description}\nmodel: {config.n_encoder_layers}+{config.n_decoder_layers} layers, "
          f"d_model {config.d_model}, {config.n_head} heads, d_ff {config.d_ff}, "
          f"{net.num_params() / 1e6:.2f}M parameters", file=sys.stderr)
    state = trainer.fit()
    net.eval()
    model = Seq2SeqModel.for_task(net, task)
    model.training = {"steps": state.step, "minutes": round(state.elapsed_s / 60, 2), **recipe,
                      **{k: round(v, 4) for k, v in state.last_eval.items()}}
    save_seq2seq(model, out / "model")
    atomic_write_bytes(out / "history.json", json.dumps(asdict(state), indent=1).encode())
    print(f"step {state.step}: validation {json.dumps(state.last_eval)}; model in {out / 'model'}", file=sys.stderr)
    if args.export:
        save_seq2seq(model, args.export, torch.float16)
        t0 = time.time()
        loaded = load_seq2seq(args.export)
        pairs = task.samples(args.final_samples, recipe["seed"] + 1000, "test")  # not the validation pairs
        acc = exact_match(loaded.net, task, pairs, loaded.max_decode_len)
        loaded.training = {**model.training, "exact_match": round(acc, 4), "exact_match_samples": len(pairs)}
        loaded.__dict__["task"] = task
        size_mb = (args.export / "model.safetensors").stat().st_size / 1e6
        readme = model_card(args.export.name, loaded, state, recipe, acc, len(pairs), torch.get_num_threads(), size_mb)
        save_seq2seq(loaded, args.export, torch.float16, readme)
        print(f"exported to {args.export}: {acc:.2%} exact match on {len(pairs)} fresh held-out samples "
              f"({time.time() - t0:.0f} s to measure)", file=sys.stderr)
    return 0
