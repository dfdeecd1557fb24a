"""`transformer-explainer features TEXT`: the features a sparse autoencoder reads in each token of a text, and what
it misses; registered by `cli.py` (its FEATURE_CLIS). The --json answer is the API's (`features/schemas.py`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..cli_args import int_range
from ..cli_model import load_model_for, text_args
from .schemas import FEATURES_TOP


def cmd_features(args: argparse.Namespace) -> int:
    from .encode import check_top, choose_sae, sae_k, text_features
    from .schemas import features_out

    def check(model: Any) -> None:  # a bad hook, autoencoder or top is refused before the model line
        sae = choose_sae(model, args.hook, args.sae, model.device)[0]
        args.top = check_top(args.top, sae_k(sae), sae.cfg.d_sae, FEATURES_TOP)

    model = load_model_for(args, check)
    trace = model.trace(args.text, truncate=args.truncate)
    fs = text_features(model, trace, args.hook, args.sae)  # the autoencoder checked is kept in memory
    out = features_out(model.name, fs, args.top)
    if args.json:
        print(json.dumps(out.model_dump(mode="json"), ensure_ascii=False))
        return 0
    where = "the built-in autoencoder" if args.sae is None else f"the autoencoder {args.sae}"
    bound = f"at most {fs.k} active per position" if fs.k is not None else "a ReLU autoencoder"
    print(f"{fs.hook} ({where}: {fs.d_sae} features, {bound})")
    ev = out.explained_variance
    print("variance of the activations over the text explained by the reconstruction: "
          + ("- (one position: no variance to explain)" if ev is None else f"{ev:.3f}"))
    print("error: ||x - x_hat|| / ||x|| at the position (what the features miss)\n")
    width = max(len(repr(p.token)) for p in out.positions)
    print(f"{'pos':>4}  {'token':<{width}}  {'error':>6}  {'active':>6}  features: id (activation), the first "
          f"{args.top} by activation")
    for p in out.positions:
        err = "-" if p.relative_error is None else f"{p.relative_error:.3f}"
        feats = "  ".join(f"{f.id} ({f.activation:.2f})" for f in p.features)
        print(f"{p.position:>4}  {p.token!r:<{width}}  {err:>6}  {p.active:>6}  {feats}")
    return 0


def register(sub: argparse._SubParsersAction, train: argparse._SubParsersAction) -> None:
    p = sub.add_parser("features", help="the features a sparse autoencoder finds in each token of TEXT at one depth, "
                                        "and the reconstruction error")
    text_args(p)
    p.add_argument("--hook", default=None, metavar="HOOK",
                   help="the hook point, in TransformerLens's spelling: blocks.L.hook_resid_post (or hook_resid_pre, "
                        "hook_resid_mid, hook_attn_out, hook_mlp_out); default: the model's built-in autoencoder at "
                        "its middle depth, or the one --sae gives")
    p.add_argument("--sae", default=None, metavar="PATH",
                   help="an autoencoder in SAELens's format: a folder with cfg.json and sae_weights.safetensors, or "
                        "hf:owner/repo/folder on the Hugging Face hub (default: the model's own)")
    p.add_argument("--top", type=int_range(1, 100_000), default=None,
                   help=f"features to list per position, by decreasing activation (default {FEATURES_TOP}, or k when "
                        f"the autoencoder's k is less; at most k)")
    p.add_argument("--json", action="store_true",
                   help='print {"hook": ..., "positions": [{"token": ..., "features": [{"id": i, "activation": a}, '
                        '...]}, ...]} (with the error per position and the explained variance) as one JSON object')
    p.set_defaults(func=cmd_features)
