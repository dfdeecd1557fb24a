"""The `transformer-explainer` command line: serve | explain | generate | models | train | seq2seq |
lens | ablate | importance | prune | heads | export | snapshot | neighbours | analogy | attribute | patch."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence

from .cli_args import PROG, Parser, fail, int_range, non_negative_int
from .cli_model import encode_text, load_model_for, sampling_args, text_args
from .errors import ExplainerError

log = logging.getLogger("transformer_explainer")


def cmd_explain(args: argparse.Namespace) -> int:
    from .sampling import SamplingParams

    model = load_model_for(args)
    trace = model.trace(args.text, truncate=args.truncate)
    params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    dist = model.next_token(trace, params)
    top = [{"token": model.tokenizer.token_text(i), "id": i, "logit": float(dist.logits[i]),
            "prob": float(dist.probs[i])} for i in dist.top(args.top)]
    groups = model.tokenizer.char_groups(trace.token_ids)
    if args.json:
        print(json.dumps({"model": model.name, "tokens": trace.tokens, "token_ids": trace.token_ids,
                          "char_groups": [{"start": g.start, "end": g.end, "text": g.text} for g in groups],
                          "top": top}, ensure_ascii=False))
        return 0
    print(f"{trace.n_tokens} tokens:")
    marks = _group_marks(groups)
    for pos, (tok, tid) in enumerate(zip(trace.tokens, trace.token_ids, strict=True)):
        print(f"  {pos:>4}  {tid:>6}  {tok!r:<24} {marks.get(pos, '')}".rstrip())
    if groups:
        print("  (<0xF0>: one byte of a character that is split over several tokens; ┐│┘ brackets the tokens "
              "that make it)")
    print(f"\nnext token ({params.describe()}):")
    print(f"  {'token':<20} {'id':>6} {'logit':>9} {'prob':>8}")
    for row in top:
        print(f"  {row['token']!r:<20} {row['id']:>6} {row['logit']:>9.3f} {row['prob']:>8.2%}")
    return 0


def _group_marks(groups) -> dict[int, str]:
    """Position -> the bracket drawn beside it for tokens that together make whole characters."""
    marks = {}
    for g in groups:
        for pos in range(g.start, g.end):
            marks[pos] = "│"
        marks[g.start] = f"┐ {g.text!r} together"
        marks[g.end - 1] = "┘"
    return marks


def cmd_generate(args: argparse.Namespace) -> int:
    from .sampling import SamplingParams

    params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    model = load_model_for(args)
    ids = encode_text(model, args.text, truncate=args.truncate)
    ctx = model.context_length
    eos = set(model.tokenizer.eos_ids())
    steps = model.generate_ids(ids, args.n, params)  # a generator: it checks its inputs on the first step
    sys.stdout.write(args.text)
    sys.stdout.flush()
    out: list[int] = []
    shown = ""
    ended = False
    for tok in steps:
        if tok.id in eos:  # the last step: it ends the text, it is not part of it
            ended = True
            break
        out.append(tok.id)
        text = model.tokenizer.decode(out)  # decode the run so multi-token characters come out whole
        if not text.endswith("\ufffd"):
            sys.stdout.write(text[len(shown):])
            sys.stdout.flush()
            shown = text
    sys.stdout.write(model.tokenizer.decode(out)[len(shown):] + "\n")
    if ended or len(out) < args.n:
        why = ("the model wrote its end-of-text token" if ended
               else f"the context of {ctx} tokens is full ({len(ids)} of the prompt + {len(out)} new)")
        print(f"stopped after {len(out)} of {args.n} tokens: {why}", file=sys.stderr)
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from .loading.resolve import KNOWN_HUB_MODELS, builtin_models, cached_gpt2_models, default_spec

    rows = []
    for name, folder in builtin_models().items():
        rows.append({"name": name, "kind": "built-in", "location": str(folder), **_architecture(folder)})
    cached = cached_gpt2_models()
    for name, folder in cached.items():
        rows.append({"name": name, "kind": "cached", "location": str(folder), **_architecture(folder)})
    for name, (repo, params, size) in KNOWN_HUB_MODELS.items():
        if name not in cached:  # the known downloads are the GPT-2 checkpoints
            rows.append({"name": name, "kind": "downloadable", "location": f"hf.co/{repo}",
                         "architecture": "gpt2", "family": "gpt2", "parameters": params,
                         "download_mb": round(size / 1e6)})
    default = default_spec()
    if args.json:
        print(json.dumps({"default": default, "models": rows}, indent=1))
        return 0
    archs = [r.get("shape") or r["architecture"] for r in rows]
    w = max([len("architecture"), *map(len, archs)])
    print(f"{'name':<18} {'kind':<13} {'architecture':<{w}} location")
    for r, arch in zip(rows, archs, strict=True):
        extra = f"{r['parameters']} parameters, {r['download_mb']} MB download" if "parameters" in r else ""
        print(f"{r['name']:<18} {r['kind']:<13} {arch:<{w}} {extra or r['location']}")
    print(f"\ndefault (no --model): {default}")
    return 0


def _architecture(folder) -> dict[str, str]:
    """What a model folder's config.json says it is (no weights read): the HF model_type, our family
    ("gpt2"; "llama" for Llama, Qwen2 and Mistral; "qwen3"; "gemma3"; "mixtral"; "qwen3_moe"; "olmoe"; "generic" for
    a decoder that runs through transformers' own modules, `generic.which_way`) and its shape in words."""
    from .config import DecoderConfig
    from .generic import TRANSFORMERS, which_way
    from .loading.checkpoint import read_json

    try:
        config = read_json(folder / "config.json")
    except ExplainerError as e:
        return {"architecture": "unknown", "family": "unknown", "shape": f"unreadable config.json: {e}"}
    try:
        way = which_way(folder)
    except ExplainerError as e:  # a model type this explainer does not open: the sentence says why
        return {"architecture": str(config.get("model_type", "unknown")), "family": "unknown", "shape": str(e)}
    try:
        if way == TRANSFORMERS:
            return _transformers_architecture(config)
        c = DecoderConfig.from_hf(config)
    except (ExplainerError, KeyError, ValueError, TypeError) as e:
        return {"architecture": "unknown", "family": "unknown", "shape": f"unreadable config.json: {e}"}
    kv = f" ({c.n_kv_heads} key/value)" if c.n_kv_heads != c.n_head else ""
    experts = f", {c.n_experts} experts ({c.top_k} per token)" if c.n_experts is not None else ""
    return {"architecture": c.model_type, "family": c.family,
            "shape": f"{c.model_type}: {c.n_layer} layers, {c.n_head} heads{kv}, d_model {c.n_embd}{experts}"}


def _transformers_architecture(config: dict) -> dict[str, str]:
    """The words of `_architecture` for a decoder that runs through transformers' own modules, from its config alone
    (its layers' kinds as the config's layer_types names them, where it has them)."""
    model_type = str(config["model_type"])
    archs = config.get("architectures") or []
    words = [f"{model_type} through transformers" + (f" ({archs[0]})" if archs else "")]
    layers = config.get("num_hidden_layers", config.get("n_layer"))
    if isinstance(layers, int):
        kinds: dict[str, int] = {}
        for kind in config.get("layer_types") or []:
            kinds[str(kind)] = kinds.get(str(kind), 0) + 1
        words.append(f"{layers} layers" + (f" ({', '.join(f'{n} {k}' for k, n in kinds.items())})" if kinds else ""))
    heads, kv, width = (config.get(k) for k in ("num_attention_heads", "num_key_value_heads", "hidden_size"))
    if isinstance(heads, int):
        words.append(f"{heads} heads" + (f" ({kv} key/value)" if isinstance(kv, int) and kv != heads else ""))
    if isinstance(width, int):
        words.append(f"d_model {width}")
    return {"architecture": model_type, "family": "generic", "shape": f"{words[0]}: {', '.join(words[1:])}"}


def cmd_train_lm(args: argparse.Namespace) -> int:
    from .training.lm_run import run_lm_training

    run_lm_training(args)
    return 0


# Optional feature packages add their subcommands: each module has `register(subcommands, train_subcommands)`.
FEATURE_CLIS = ("transformer_explainer.server.cli", "transformer_explainer.seq2seq.cli",
                "transformer_explainer.analysis.cli", "transformer_explainer.analysis.attribution_cli",
                "transformer_explainer.features.cli", "transformer_explainer.steering_cli",
                "transformer_explainer.training.sae_cli", "transformer_explainer.training.induction_cli")


def _feature_registrars() -> list[Callable[[argparse._SubParsersAction, argparse._SubParsersAction], None]]:
    from importlib import import_module

    out = []
    for mod in FEATURE_CLIS:
        try:
            m = import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and mod.startswith(e.name):
                continue
            raise
        out.append(m.register)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log what is loaded and why; show the traceback of an internal error")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("explain", help="tokens of TEXT and the model's top next tokens")
    text_args(p)
    p.add_argument("--top", "--top-n", dest="top", type=int_range(1, 1000), default=10,
                   help="how many candidates to list, by the model's logits (1-1000, default 10); their "
                        "probabilities are those left after temperature, top-k and top-p")
    sampling_args(p, seed=False)
    p.add_argument("--json", action="store_true", help="print the tokens and candidates as one JSON object")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("generate", help="continue TEXT, streaming tokens as they come")
    text_args(p, "prompt")
    p.add_argument("-n", type=non_negative_int, default=30,
                   help="new tokens (default 30); generation stops earlier at the model's end-of-text token "
                        "or where the context is full")
    sampling_args(p, seed=True)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("models", help="built-in, cached and downloadable models")
    p.add_argument("--json", action="store_true", help="print the default and the list as JSON")
    p.set_defaults(func=cmd_models)

    train = sub.add_parser("train", help="train a model").add_subparsers(dest="what", required=True)
    p = train.add_parser("lm", help="train a GPT-2- or Llama-family language model (--family) on a text corpus")
    from .training.lm_args import add_lm_args

    add_lm_args(p)
    p.set_defaults(func=cmd_train_lm)

    for register in _feature_registrars():
        register(sub, train)
    return parser


def _configure_logging(args: argparse.Namespace) -> None:
    """Warnings always; with -v, or for `serve` (a long-running program whose log is its record),
    also what was loaded and why."""
    verbose = args.verbose or args.command == "serve"
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s" if args.verbose
                        else "%(message)s")
    log.setLevel(logging.INFO if verbose else logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # a refused argument (its one line is printed) or --help
        return e.code if isinstance(e.code, int) else 2
    _configure_logging(args)
    try:
        return int(args.func(args) or 0)
    except ExplainerError as e:
        fail(str(e))
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:  # a file that cannot be read or written: the system's reason is the message
        if args.verbose:
            raise
        where = f": {e.filename}" if e.filename else ""
        fail(f"{e.strerror or e}{where}")
        return 2
    except Exception as e:
        if args.verbose:
            raise
        fail(f"internal error ({type(e).__name__}: {e}); rerun with -v for the traceback, and please report it")
        return 1


if __name__ == "__main__":
    sys.exit(main())
