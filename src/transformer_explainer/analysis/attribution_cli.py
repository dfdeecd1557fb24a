"""CLI subcommands for "Why this token": attribute (direct logit attribution) | patch (activation patching),
registered by `cli.py`. Their --json answers are the API's (`analysis/attribution_schemas.py`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..cli_args import int_range, text_value
from ..cli_model import KIND_WORDS, load_model_for, model_args, progress_bar, text_args
from .attribution_schemas import PATCH_KINDS

TOKEN_HELP = ("a token exactly as the vocabulary has it, leading space included (quote it: ' Paris'), or a "
              "token id (digits)")


def _token(s: str) -> int | str:
    """A token argument: digits are an id, anything else the token's text as typed."""
    return int(s) if s.isdigit() else s


def _label(kind: str, layer: int | None, head: int | None, config: Any = None) -> str:
    """A component as the table names it; a "mixer" (a layer's token mixer written whole, in a model that runs through
    transformers) by what that layer's mixer is ("short convolution 0", "attention 2")."""
    if kind == "head":
        return f"L{layer}H{head}"
    if kind == "mixer":
        kinds = config.layers[layer].kinds if config is not None and layer is not None else ()
        return f"{' + '.join(KIND_WORDS.get(k, k) for k in kinds) or 'mixer'} {layer}"
    return {"embed": "token embedding", "pos_embed": "position embedding", "attn_bias": f"attn bias {layer}",
            "mlp": f"MLP {layer}"}[kind]


def cmd_attribute(args: argparse.Namespace) -> int:
    from .attribution_schemas import attribute_out

    target, versus = (None if t is None else _token(t) for t in (args.target, args.versus))

    def check(model) -> None:  # a bad token or position is refused before the model line
        model.attribute(model.trace(args.text, truncate=args.truncate), target, versus, position=args.position)

    model = load_model_for(args, check)
    trace = model.trace(args.text, truncate=args.truncate)
    a = model.attribute(trace, target, versus, position=args.position)
    if args.json:
        print(json.dumps(attribute_out(model.name, a, trace.token_ids).model_dump(mode="json"), ensure_ascii=False))
        return 0
    last = a.position == trace.n_tokens - 1
    if a.versus is None:
        what = f"logit({a.target_text!r})"
        why = ("the model's top prediction" if last and args.target is None
               else "the token that came next" if args.target is None else "the token asked for")
    else:
        what = f"logit({a.target_text!r}) - logit({a.versus_text!r})"
        why = "the difference asked for"
    print(f"{what} at position {a.position} ({a.tokens[a.position]!r}{', the last token' if last else ''}; "
          f"{why}) = {a.metric:.4f}")
    total = sum(c.value for c in a.components)
    print(f"  = the sum of what {len(a.components)} components wrote ({total:.4f}) + a constant, the final "
          f"norm's shift ({a.rest:.4f})\n")
    n = min(args.top, len(a.components))
    print(f"the {n} largest contributions:")
    print(f"  {'rank':>4}  {'component':<20} {'value':>9}")
    for rank, c in enumerate(a.ranked(n), 1):
        print(f"  {rank:>4}  {_label(c.kind, c.layer, c.head, model.config):<20} {c.value:>+9.4f}")
    by_kind: dict[str, float] = {}
    for c in a.components:
        by_kind[c.kind] = by_kind.get(c.kind, 0.0) + c.value
    names = {"embed": "token embedding", "pos_embed": "position embedding", "head": "heads",
             "attn_bias": "attention biases", "mlp": "MLPs", "mixer": "token mixers written whole"}
    print("\nby kind: " + ", ".join(f"{names[k]} {v:+.4f}" for k, v in by_kind.items()))
    return 0


def cmd_patch(args: argparse.Namespace) -> int:
    from ..patching import PatchingCost
    from .attribution_schemas import patch_out

    answer, wrong = _token(args.answer), _token(args.wrong)
    what = list(dict.fromkeys(args.what or PATCH_KINDS))

    model = load_model_for(args, lambda m: m.patch_inputs(args.clean, args.corrupted, answer, wrong, what))
    _, c_ids, x_ids, _, _ = model.patch_inputs(args.clean, args.corrupted, answer, wrong, what)
    runs = PatchingCost(model.config, len(c_ids), tuple(what)).runs
    with progress_bar(args, runs, "patched runs", unit="run") as bar:
        p = model.patch(c_ids, x_ids, answer, wrong, what, progress=lambda done, _n: bar.update(done - bar.n))
    if args.json:
        if p.clean_below_corrupted:  # the numbers say it too; a person reading the JSON is told why the grids read so
            print(f"note: {p.reading}", file=sys.stderr)
        print(json.dumps(patch_out(model.name, p, c_ids, x_ids, runs).model_dump(mode="json"), ensure_ascii=False))
        return 0
    metric = f"logit({p.answer_text!r}) - logit({p.wrong_text!r}) at the last position"
    print(f"{metric}: clean {p.clean:.4f}, corrupted {p.corrupted:.4f}")
    print(f"each cell: the corrupted run with one activation taken from the clean run ({runs} runs); {p.reading}")
    if p.clean_below_corrupted:
        print(f"(to read it the usual way, swap them: --answer {p.wrong_text!r} --wrong {p.answer_text!r})")
    for kind in what:
        grid = p.grids[kind]
        if kind == "heads":
            cols = [f"h{h}" for h in range(grid.shape[1])]
            print(f"\n{kind} (each head's z at every position; layer x head):")
        else:
            cols = [f"{i}" for i in range(grid.shape[1])]
            print(f"\n{kind} (layer x position):")
        print("layer " + " ".join(f"{c:>6}" for c in cols))
        for layer in range(grid.shape[0]):
            print(f"{layer:>5} " + " ".join(f"{'-':>6}" if v != v else f"{float(v):>6.2f}" for v in grid[layer]))
        # a model that runs through transformers: a layer without attention has no heads or attn_out to patch
        absent = [layer for layer in range(grid.shape[0]) if all(float(v) != float(v) for v in grid[layer])]
        if absent:
            what = "heads" if kind == "heads" else kind
            print(f"(-: layer{'s' if len(absent) > 1 else ''} {', '.join(map(str, absent))} "
                  f"{'have' if len(absent) > 1 else 'has'} no {what} to patch)")
    changed = [i for i, (c, x) in enumerate(zip(c_ids, x_ids, strict=True)) if c != x]
    tt = model.tokenizer.token_text
    print("\npositions: " + ", ".join(f"{i} {tt(c)!r}" + (f" (corrupted: {tt(x_ids[i])!r})" if i in changed else "")
                                      for i, c in enumerate(c_ids)))
    return 0


def register(sub: argparse._SubParsersAction, train: argparse._SubParsersAction) -> None:
    p = sub.add_parser("attribute", help="direct logit attribution: the next-token logit of TEXT as the sum of what "
                                         "each embedding, head and MLP wrote")
    text_args(p)
    p.add_argument("--target", default=None, metavar="TOK",
                   help=f"the token whose logit to explain (default: the model's top prediction; at an earlier "
                        f"--position, the token that came next); {TOKEN_HELP}")
    p.add_argument("--versus", default=None, metavar="TOK",
                   help=f"explain logit(target) - logit(TOK) instead: why the target rather than TOK; {TOKEN_HELP}")
    p.add_argument("--position", type=int, default=None, metavar="P",
                   help="the position whose prediction to explain (0 = first token, negative from the end; "
                        "default: the last)")
    p.add_argument("--top", type=int_range(1, 10_000), default=10, help="contributions to list (default 10)")
    p.add_argument("--json", action="store_true",
                   help="print every component as {kind, layer, head, value} with metric and rest (the values "
                        "plus rest equal metric) as one JSON object")
    p.set_defaults(func=cmd_attribute)

    p = sub.add_parser("patch", help="activation patching: which activations carry the difference between a clean "
                                     "and a corrupted prompt")
    p.add_argument("clean", type=text_value, help="the clean prompt (quote it)")
    p.add_argument("corrupted", type=text_value,
                   help="the corrupted prompt: the clean one with a word changed, the same number of tokens")
    model_args(p)
    p.add_argument("--answer", required=True, metavar="TOK",
                   help=f"the clean prompt's answer; the metric is logit(answer) - logit(wrong); {TOKEN_HELP}")
    p.add_argument("--wrong", required=True, metavar="TOK", help=f"the corrupted prompt's answer; {TOKEN_HELP}")
    p.add_argument("--what", action="append", choices=list(PATCH_KINDS), default=None,
                   help="a grid to compute; repeat for several (default: all four, resid_pre, attn_out and mlp_out "
                        "per layer and position, heads per layer and head)")
    p.add_argument("--json", action="store_true",
                   help="print clean, corrupted (the metric of each run) and one grid per kind as one JSON object")
    p.set_defaults(func=cmd_patch)
