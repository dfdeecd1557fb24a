"""CLI subcommand `steer`: a direction added to the residual stream after one block, the plain and the steered
continuation side by side from the same seed, where the text breaks down, and the direction's logit lens.
Registered by `cli.py` (FEATURE_CLIS); its --json answer is the API's (`steering_schemas.py`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .cli_args import finite_float, int_range
from .cli_model import load_model_for, progress_bar, sampling_args, text_args
from .errors import InputError
from .limits import DEFAULT_SEED, MAX_CONTRAST_PROMPTS, MAX_STEER_TOKENS, STEER_TOKENS


def _feature(text: str) -> tuple[int, int]:
    """LAYER:ID, e.g. 3:120."""
    layer, sep, fid = text.partition(":")
    if not sep or not layer.strip().isdigit() or not fid.strip().isdigit():
        raise argparse.ArgumentTypeError(f"must be LAYER:ID, two whole numbers such as 3:120, got {text!r}")
    return int(layer), int(fid)


def read_prompts(path: Path) -> list[str]:
    """The prompts of a contrast file: one per line, blank lines skipped."""
    prompts = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not prompts:
        raise InputError(f"{path} has no prompts: write one per line")
    if len(prompts) > MAX_CONTRAST_PROMPTS:
        raise InputError(f"{path} has {len(prompts)} prompts; a contrast set reads at most {MAX_CONTRAST_PROMPTS}")
    return prompts


def _text(tokens: list) -> str:
    return repr("".join(t.text for t in tokens))


def cmd_steer(args: argparse.Namespace) -> int:
    from .sampling import SamplingParams
    from .steering import BREAKDOWN_BOUND, REPETITION_BOUND, SWEEP_FACTORS, steer
    from .steering_features import choose_direction
    from .steering_schemas import steer_out

    if args.feature is None and args.contrast is None:
        raise InputError("give a direction: --feature LAYER:ID, or --contrast FILE_A FILE_B with --layer L")
    contrast = None
    if args.contrast is not None:
        if args.layer is None:
            raise InputError("--contrast needs --layer L: the block after which the means are read and the "
                             "direction added")
        contrast = (read_prompts(Path(args.contrast[0])), read_prompts(Path(args.contrast[1])))
    params = SamplingParams(args.temperature, args.top_k, args.top_p, args.seed)
    feature = args.feature

    def direction(model):
        try:
            return choose_direction(model, feature=feature, contrast=contrast, layer=args.layer, sae=args.sae)
        except InputError as e:  # the engine gives no face's advice; the CLI's way to another autoencoder is --sae
            if e.code in ("steer_no_saes", "steer_no_sae_at"):
                raise InputError(f"{e}; load one with --sae", code=e.code, **e.params) from None
            raise

    chosen = {}

    def check(model) -> None:  # a bad layer, feature or contrast set is refused before the model line
        chosen["direction"] = direction(model)

    model = load_model_for(args, check)
    runs = 2 + (0 if args.no_sweep else len(SWEEP_FACTORS))  # plain, steered, then each strength of the sweep
    with progress_bar(args, runs, "continuations", unit="run") as bar:
        started = []

        def between_runs() -> None:  # called before each generation: the one before it has finished
            if started:
                bar.update(1)
            started.append(True)

        s = steer(model, args.text if not args.truncate else model.encode(args.text, truncate=True),
                  chosen["direction"], args.strength, tokens=args.tokens, params=params, sweep=not args.no_sweep,
                  between_runs=between_runs)
    if args.json:
        print(json.dumps(steer_out(model.name, s).model_dump(mode="json"), ensure_ascii=False))
        return 0
    d = s.direction
    print(f"steering: {d.describe}, strength {s.strength:g} (the direction's norm {d.norm:.4g}; the residual stream "
          f"after block {d.layer}: median norm {s.residual_norm:.4g} over the prompt's positions)")
    print(f"sampling: {s.params.describe()}" + ("" if s.params.greedy else f", seed {s.params.seed}")
          + " (both continuations)")
    print(f"prompt:  {repr(''.join(s.prompt_tokens))}")
    where = ("the same tokens" if s.changed_at is None else f"differs from generated token {s.changed_at} on")
    print(f"plain:   {_text(s.plain)}   mean log-prob {s.plain_log_prob:.3f} per token, "
          f"{s.plain_distinct:.0%} distinct tokens")
    print(f"steered: {_text(s.steered)}   mean log-prob {s.steered_log_prob:.3f} per token, "
          f"{s.steered_distinct:.0%} distinct tokens ({where}{'; broken' if s.steered_broken else ''})")
    print("(mean log-prob: of each generated token under the unsteered model, given the tokens before it)")
    print("the direction promotes:   " + ", ".join(f"{t.text!r} {t.logit:+.3g}" for t in s.lens_promoted))
    print("            suppresses:   " + ", ".join(f"{t.text!r} {t.logit:+.3g}" for t in s.lens_suppressed))
    print("(the logit change through the final norm and the unembedding: lens(direction) - lens(0))")
    if s.sweep:
        print(f"\nbreakdown sweep: broken where the mean log-prob falls below {s.bound:.3f}, "
              f"{BREAKDOWN_BOUND:.0%} of the way from the plain text's {s.plain_log_prob:.3f} to a uniform guess's "
              f"{s.uniform_log_prob:.3f}, or the share of distinct tokens below {s.distinct_bound:.0%} "
              f"({REPETITION_BOUND:.0%} of the plain text's)")
        print(f"  {'strength':>10}  {'log-prob':>8}  {'distinct':>8}  continuation")
        for p in s.sweep:
            broken = "  (broken)" if p.broken else ""
            print(f"  {p.strength:>10.4g}  {p.mean_log_prob:>8.3f}  {p.distinct:>8.0%}  {_text(p.tokens)}{broken}")
        b = s.breakdown
        print(f"the text breaks down at strength {b:g}, the first of the sweep that breaks it" if b is not None else
              f"no strength of the sweep (up to {s.sweep[-1].strength:g}) breaks the text down")
    return 0


def register(sub: argparse._SubParsersAction, train: argparse._SubParsersAction) -> None:
    p = sub.add_parser("steer", help="add a direction to the residual stream after one block: the plain and the "
                                     "steered continuation of TEXT side by side")
    text_args(p, "prompt")
    p.add_argument("--feature", type=_feature, default=None, metavar="L:ID",
                   help="steer with feature ID of the sparse autoencoder at blocks.L.hook_resid_post (its decoder "
                        "row): the one the model ships, or --sae")
    p.add_argument("--sae", default=None, metavar="PATH",
                   help="with --feature: an autoencoder folder in SAELens's format (cfg.json and "
                        "sae_weights.safetensors), or hf:owner/repo/folder")
    p.add_argument("--contrast", nargs=2, default=None, metavar=("FILE_A", "FILE_B"),
                   help="steer with the mean residual stream of the prompts in FILE_A minus that of FILE_B (one "
                        f"prompt a line, at most {MAX_CONTRAST_PROMPTS} each), read after block --layer")
    p.add_argument("--layer", type=int_range(0), default=None, metavar="L",
                   help="the block after which the direction is added (with --contrast; --feature names its own)")
    p.add_argument("--strength", type=finite_float, required=True, metavar="S",
                   help="the direction is multiplied by S before it is added (negative: the other way)")
    p.add_argument("--tokens", type=int_range(1, MAX_STEER_TOKENS), default=STEER_TOKENS, metavar="N",
                   help=f"tokens to generate in each continuation (1-{MAX_STEER_TOKENS}, default {STEER_TOKENS})")
    sampling_args(p, seed=False)
    p.add_argument("--seed", type=int_range(0, 2**63 - 1), default=DEFAULT_SEED,
                   help=f"seed of the sampling, the same for both continuations (default {DEFAULT_SEED})")
    p.add_argument("--no-sweep", action="store_true",
                   help="skip the breakdown sweep (a continuation at each of several strengths)")
    p.add_argument("--json", action="store_true", help="print the answer as one JSON object (the API's)")
    p.set_defaults(func=cmd_steer)

