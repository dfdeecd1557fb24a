"""CLI subcommands for the analyses: lens | ablate | importance | prune | heads | export | snapshot |
neighbours | analogy (registered by `cli.py`)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from ..cli_args import int_range, output_file, positive_float, positive_int
from ..cli_model import KIND_WORDS, load_model_for, model_args, progress_bar, text_args
from ..errors import InputError

JSON_HELP = "print the result as one JSON object instead of the table (numbers that are not finite as null)"


def _json(out: object) -> str:
    """An answer as strict JSON: a number that is not finite as null (JSON_HELP), e.g. the importance of the heads
    of a layer that has none (a short convolution of a model that runs through transformers)."""
    from .answers import finite

    return json.dumps(finite(out), ensure_ascii=False, allow_nan=False)


def _fmt_tok(t: str, width: int = 0) -> str:
    s = repr(t)
    return f"{s:<{width}}" if width else s


def _pct(p: float) -> str:
    """A probability as a percentage that stays readable for the tiny ones of an untrained model."""
    return f"{p:.2%}" if p >= 1e-4 or p == 0 else f"{p * 100:.1e}%"


def _score(v: float) -> str:
    return "    -" if v != v else f"{v:5.2f}"


def cmd_lens(args: argparse.Namespace) -> int:
    from .lens import logit_lens

    model = load_model_for(args)
    trace = model.trace(args.text, truncate=args.truncate)
    lens = logit_lens(model, trace, top=args.top, positions=[-1])
    if args.json:
        out = {"model": model.name, "tokens": trace.tokens, "token_ids": trace.token_ids, **lens.to_dict()}
        print(_json(out))
        return 0
    target = lens.token_text[lens.target_ids[0]]
    print(f"logit lens at the last position ({lens.tokens[0]!r}, position {lens.positions[0]}): "
          f"what each layer would predict next")
    print(f"final prediction: {target!r}\n")
    head = f"{'layer':<16} {'rank':>6} {'prob':>7}   top {args.top}"
    print(head)
    print("-" * len(head))
    for li, label in enumerate(lens.labels):
        tops = "  ".join(f"{t!r} {_pct(p)}" for t, p in lens.top_tokens(li, 0))
        print(f"{label:<16} {int(lens.target_rank[li, 0]):>6} {_pct(float(lens.target_prob[li, 0])):>7}   {tops}")
    print(f"\nrank and prob: of the final prediction {target!r} at that layer")
    return 0


def cmd_ablate(args: argparse.Namespace) -> int:
    from .ablation import ablate, check_experts, check_heads, layer_heads

    experts = [(args.layer, e) for e in args.expert]

    def check(m) -> None:
        check_heads(m.config, [(args.layer, h) for h in args.head or [0]])
        check_experts(m.config, experts)

    model = load_model_for(args, check)
    ids = model.encode(args.text, truncate=args.truncate)
    if args.head or experts:
        heads = [(args.layer, h) for h in args.head]
    else:
        heads = layer_heads(model.config, args.layer)
    res = ablate(model, ids, heads, experts=experts, mode=args.mode)
    parts = []
    if args.head:
        parts.append(f"layer {args.layer}, head{'s' if len(heads) > 1 else ''} {', '.join(str(h) for _, h in heads)}")
    elif not experts:
        parts.append(f"all {len(heads)} heads of layer {args.layer}")
    if experts:
        parts.append(f"expert{'s' if len(experts) > 1 else ''} {', '.join(str(e) for _, e in experts)} of layer "
                     f"{args.layer} taken out of the routing")
    what = "; ".join(parts)
    if args.json:
        out = {"model": model.name, "tokens": res.clean.tokens, "token_ids": ids,
               **res.to_dict(model.tokenizer.token_text, args.top)}
        print(_json(out))
        return 0
    print(f"{args.mode + ' ' if heads else ''}ablation of {what}\n")
    if res.clean_loss is not None:
        print(f"loss on the text: {res.clean_loss:.4f} -> {res.ablated_loss:.4f} ({res.loss_change:+.4f} nats/token)")
    print(f"KL(before || after), next token: {res.kl:.4f} nats\n")
    print(f"  {'next token':<22} {'before':>8} {'after':>8} {'change':>9}")
    for i, b, a in _most_likely_either_side(res, args.top):
        print(f"  {_fmt_tok(model.tokenizer.token_text(i), 22)} {_pct(b):>8} {_pct(a):>8} {(a - b) * 100:>+8.2f}pp")
    return 0


def _most_likely_either_side(res, n: int) -> list[tuple[int, float, float]]:
    """The n tokens most likely before or after the ablation (by the larger of the two), most likely
    before first. `top_changes(n)` is the union of both top n, up to 2n rows: the app shows it whole."""
    rows = sorted(res.top_changes(n), key=lambda r: -max(r[1], r[2]))[:n]
    return sorted(rows, key=lambda r: -r[1])


def _loss_input(args: argparse.Namespace, what: str):
    """The model and the text's ids, for an analysis judged by the loss on the text (>= 2 tokens)."""

    def check(model) -> None:
        if len(model.encode(args.text, truncate=args.truncate)) < 2:
            raise InputError(f"{what} follows the loss on the text: give at least two tokens")

    model = load_model_for(args, check)
    return model, model.encode(args.text, truncate=args.truncate)


def cmd_importance(args: argparse.Namespace) -> int:
    from .ablation import head_importance
    from .cost import importance_passes

    model, ids = _loss_input(args, "head importance")
    with progress_bar(args, importance_passes(model.config), "each head ablated") as bar:
        imp = head_importance(model, ids, mode=args.mode, between_passes=bar.update)
    if args.json:
        out = {"model": model.name, "tokens": model.tokenizer.token_texts(ids), "token_ids": ids, **imp.to_dict(),
               "ranked": [list(h) for h, _ in imp.ranked(args.by)]}
        print(_json(out))
        return 0
    m = imp.loss_change if args.by == "loss" else imp.kl
    what = "loss increase (nats/token)" if args.by == "loss" else "KL of the next token (nats)"
    print(f"head importance, {args.mode} ablation of each head alone: {what}")
    print(f"loss on the text without ablation: {imp.clean_loss:.4f} nats/token\n")
    H = model.config.n_head
    heads = _layers_with_heads(model)
    print("layer " + " ".join(f"{'h' + str(h):>8}" for h in range(H)))
    for layer in range(model.config.n_layer):
        if layer not in heads:
            print(f"{layer:>5}  (no attention heads: {_mixer_words(model, layer)})")
            continue
        print(f"{layer:>5} " + " ".join(f"{float(m[layer, h]):>+8.4f}" for h in range(H)))
    top = ", ".join(f"L{layer}H{h} ({v:+.4f})" for (layer, h), v in imp.ranked(args.by)[:5])
    print(f"\nmost important: {top}")
    return 0


def _layers_with_heads(model) -> set[int]:
    """The layers whose heads an ablation switches off: every layer of our families; the attention layers of a model
    that runs through transformers."""
    c = model.config
    return set(c.attention_layers) if model.runs == "transformers" else set(range(c.n_layer))


def _mixer_words(model, layer: int) -> str:
    """What a layer of a model that runs through transformers mixes tokens with ("short convolution")."""
    return " + ".join(KIND_WORDS.get(k, k) for k in model.config.layers[layer].kinds) or "no token mixer"


def cmd_prune(args: argparse.Namespace) -> int:
    from .ablation import prune_heads
    from .cost import prune_passes

    model, ids = _loss_input(args, "pruning")
    with progress_bar(args, prune_passes(model.config, args.max_heads, args.rescore), "pruning") as bar:
        curve = prune_heads(model, ids, mode=args.mode, max_heads=args.max_heads, recompute=args.rescore,
                            between_passes=bar.update)
    if args.json:
        print(_json({"model": model.name, "tokens": model.tokenizer.token_texts(ids), "token_ids": ids,
                      "recompute": args.rescore, **curve.to_dict()}))
        return 0
    how = "re-scoring the remaining heads at each step" if args.rescore else "in the order of head importance"
    print(f"pruning heads one by one ({args.mode} ablation), least important first, {how}\n")
    print(f"{'heads off':>9} {'last removed':>12} {'loss':>9} {'change':>9}")
    print(f"{0:>9} {'-':>12} {curve.clean_loss:>9.4f} {0:>+9.4f}")
    for i, ((layer, h), loss) in enumerate(zip(curve.heads, curve.losses, strict=True), 1):
        print(f"{i:>9} {f'L{layer} H{h}':>12} {loss:>9.4f} {loss - curve.clean_loss:>+9.4f}")
    return 0


def cmd_heads(args: argparse.Namespace) -> int:
    from .attention_statistics import attention_stats
    from .reference import REFERENCE_TEXTS
    from .roles import ROLES, head_roles, head_roles_of, reference_traces

    model = load_model_for(args)
    trace = model.trace(args.text, truncate=args.truncate)
    roles = head_roles(trace)
    stats = attention_stats(trace)
    ref = None
    if not args.no_reference:  # reference_head_roles, one trace at a time: each traced and scored, then the bar moves
        with progress_bar(args, len(REFERENCE_TEXTS) + 1, "reference set", unit="text") as bar:

            def traced():
                for text in REFERENCE_TEXTS:
                    yield from reference_traces(model, [text], probe_length=0)
                    bar.update()
                yield from reference_traces(model, [])  # the repeated-random-tokens probe
                bar.update()

            ref = head_roles_of(traced(), source="reference")
    if args.json:
        out = {"model": model.name, "tokens": trace.tokens, "token_ids": trace.token_ids, "roles": list(ROLES),
               "text": roles.to_dict(), "stats": stats.to_dict()}
        if ref is not None:
            out["reference"] = ref.to_dict()
        print(_json(out))
        return 0
    short = {"previous_token": "prev", "first_token": "first", "duplicate_token": "dup",
             "induction": "induct", "rare_token": "rare"}
    cols = " ".join(f"{short[r]:>6}" for r in ROLES)
    groups = f"{'':<11}{'on your text':-^35}"
    header = f"{'layer':>5} {'head':>4} {cols}"
    if ref is not None:
        groups += f" {'on the reference set':-^35}"
        header += f" {cols}"
    groups += f" {'attention':-^15}"
    header += f" {'entropy':>7} {'dist':>7}" + ("  role (reference set)" if ref is not None else "")
    print("attention-head roles: share of attention where each kind of head looks (1 = all of it)")
    print(groups)
    print(header)
    attends = _layers_with_heads(model)
    for layer in range(model.config.n_layer):
        if layer not in attends:  # a layer that mixes its tokens another way: one line saying so
            print(f"{layer:>5}      (no attention heads: {_mixer_words(model, layer)})")
            continue
        for h in range(model.config.n_head):
            line = f"{layer:>5} {h:>4} " + " ".join(f" {_score(roles.scores[r][layer, h].item())}" for r in ROLES)
            if ref is not None:
                line += " " + " ".join(f" {_score(ref.scores[r][layer, h].item())}" for r in ROLES)
            e, d = stats.normalized_entropy[layer, h].item(), stats.mean_distance[layer, h].item()
            line += f" {e:>7.2f} {d:>7.2f}" if not math.isnan(e) else f" {'-':>7} {'-':>7}"
            if ref is not None:
                line += f"  {ref.role_of(layer, h) or ''}"
            print(line)
    print("\nentropy: normalised (1 = spread evenly over the visible tokens); dist: tokens back, on average;"
          " '-': the text has no position to judge by")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .export import DEFAULT_JSON_NAMES, save_json, save_npz, select_names

    out: Path = args.out
    suffix = out.suffix.lower()
    names = [n.strip() for n in args.names.split(",") if n.strip()] if args.names else None
    traced = []

    def check(model) -> None:  # an unknown name is refused before anything is written
        traced.append(model.trace(args.text, truncate=args.truncate))
        select_names(traced[0], names)

    load_model_for(args, check)
    trace = traced[0]
    if suffix == ".npz":
        save_npz(trace, out, names)
    else:
        save_json(trace, out, names or list(DEFAULT_JSON_NAMES))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)", file=sys.stderr)
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    from ..notebook.snapshot import save_snapshot, snapshot_passes

    out: Path = args.out
    model = load_model_for(args)
    trace = model.trace(args.text, truncate=args.truncate)
    ablations = not args.no_ablations
    # the Python API's own function (the CJK font, the size budget; what it leaves out is logged as a warning)
    with progress_bar(args, snapshot_passes(model, trace.n_tokens, ablations=ablations), "snapshot") as bar:
        save_snapshot(model, trace, out, max_mb=args.max_mb, ablations=ablations, between_passes=bar.update)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB, {trace.n_tokens} tokens); open it in any browser, "
          f"no server needed", file=sys.stderr)
    return 0


def _word_token(model, word: str, no_space: bool) -> int:
    """The one token a word on the command line stands for: by default its mid-sentence form, with
    the leading space (" king"), as GPT-2's tokenizer writes a word after another word."""
    from .embeddings import token_id

    if not word.strip():
        raise InputError("a word is needed, got only spaces")
    if no_space or word.startswith(" "):
        return token_id(model, word)
    try:
        return token_id(model, " " + word)
    except InputError as e:
        if len(model.tokenizer.encode(word, add_bos=False)) == 1:
            raise InputError(f"{e}; {word!r} without the space is one token: add --no-space") from None
        raise


def _token_label(model, tid: int) -> str:
    return f"{model.tokenizer.token_text(tid)!r} (id {tid})"


def cmd_neighbours(args: argparse.Namespace) -> int:
    from .answers import neighbours_json
    from .embeddings import nearest_tokens

    model = load_model_for(args, lambda m: _word_token(m, args.word, args.no_space))
    tid = _word_token(model, args.word, args.no_space)
    if args.json:
        print(_json(neighbours_json(model, tid, args.k)))
        return 0
    print(f"tokens whose embeddings are nearest to {_token_label(model, tid)}, by cosine similarity\n")
    print(f"  {'rank':>4}  {'token':<22} {'id':>6} {'cosine':>7}")
    for rank, nb in enumerate(nearest_tokens(model, tid, args.k), 1):
        print(f"  {rank:>4}  {_fmt_tok(nb.token, 22)} {nb.id:>6} {nb.similarity:>7.3f}")
    return 0


def cmd_analogy(args: argparse.Namespace) -> int:
    from .embeddings import analogy

    words = (args.a, args.b, args.c)
    model = load_model_for(args, lambda m: [_word_token(m, w, args.no_space) for w in words])
    a, b, c = (_word_token(model, w, args.no_space) for w in words)
    res = analogy(model, [a, c], [b], args.k)
    if args.json:
        print(_json({"model": model.name, **res.to_dict(model.tokenizer.token_text)}))
        return 0
    tt = model.tokenizer.token_text
    print(f"{tt(a)!r} - {tt(b)!r} + {tt(c)!r}: the tokens whose embeddings are nearest to that vector "
          f"(the three inputs left out)\n")
    print(f"  {'rank':>4}  {'token':<22} {'id':>6} {'cosine':>7}")
    for rank, nb in enumerate(res.neighbours, 1):
        print(f"  {rank:>4}  {_fmt_tok(nb.token, 22)} {nb.id:>6} {nb.similarity:>7.3f}")
    return 0


def register(sub: argparse._SubParsersAction, train: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lens", help="logit lens: what each layer would predict next for TEXT")
    text_args(p)
    p.add_argument("--top", type=int_range(1, 50), default=5, help="tokens to list per layer (1-50, default 5)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=cmd_lens)

    p = sub.add_parser("ablate", help="switch attention heads off and compare the next-token distribution")
    text_args(p)
    p.add_argument("--layer", type=int_range(0), required=True, help="the layer of the heads to switch off (0 = first)")
    p.add_argument("--head", type=int_range(0), action="append", default=[],
                   help="head to ablate; repeat for several; omit (and --expert) to ablate the whole layer")
    p.add_argument("--expert", type=int_range(0), action="append", default=[],
                   help="a mixture of experts: an expert of the layer to take out of the routing (its tokens go to "
                        "their next choice); repeat for several")
    _mode_arg(p, "the heads'")
    p.add_argument("--top", type=int_range(1, 1000), default=10,
                   help="next tokens to list, the most likely before or after the ablation (1-1000, default 10)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=cmd_ablate)

    p = sub.add_parser("importance", help="ablate each head alone: a layer x head map of the loss change")
    text_args(p)
    _mode_arg(p, "each head's")
    p.add_argument("--by", choices=["loss", "kl"], default="loss", help="what to show and rank by (default loss)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=cmd_importance)

    p = sub.add_parser("prune", help="switch heads off one by one, least important first, with the loss after each")
    text_args(p)
    _mode_arg(p, "each head's")
    p.add_argument("--max-heads", type=positive_int, default=None, help="stop after this many heads (default: all)")
    p.add_argument("--rescore", action="store_true",
                   help="re-score every remaining head at each step (greedy; about N^2/2 forward passes)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=cmd_prune)

    p = sub.add_parser("heads", help="attention-head roles and statistics for TEXT and a reference set")
    text_args(p)
    p.add_argument("--no-reference", action="store_true", help="score TEXT only")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=cmd_heads)

    p = sub.add_parser("export", help="save the trace of TEXT to .npz (all tensors) or .json")
    text_args(p)
    p.add_argument("--out", required=True, type=output_file(".npz", ".json"),
                   help="FILE.npz or FILE.json, in a folder that exists")
    p.add_argument("--names", default=None,
                   help="comma-separated names or globs, e.g. 'blocks.*.attn.pattern,logits' "
                        "(default: all for .npz, attention patterns for .json)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("snapshot", help="write one self-contained HTML page explaining TEXT (opens offline)")
    text_args(p)
    p.add_argument("--out", required=True, type=output_file(".html", ".htm"),
                   help="FILE.html, in a folder that exists")
    p.add_argument("--max-mb", type=positive_float, default=4.5,
                   help="size budget: the largest tensors are left out first beyond it (default 4.5)")
    p.add_argument("--no-ablations", action="store_true",
                   help="skip the head-importance map and per-head ablations (layers x heads forward passes)")
    p.set_defaults(func=cmd_snapshot)

    p = sub.add_parser("neighbours", help="the tokens whose embeddings are nearest to WORD's")
    p.add_argument("word", help="one token's worth of text, e.g. king (looked up as ' king', see --no-space)")
    model_args(p)
    _word_args(p)
    p.set_defaults(func=cmd_neighbours)

    p = sub.add_parser("analogy", help="embedding arithmetic: A - B + C (king man woman) and its nearest tokens")
    p.add_argument("a", metavar="A", help="the word to start from, e.g. king")
    p.add_argument("b", metavar="B", help="the word whose embedding is taken away, e.g. man")
    p.add_argument("c", metavar="C", help="the word whose embedding is added, e.g. woman")
    model_args(p)
    _word_args(p)
    p.set_defaults(func=cmd_analogy)


def _mode_arg(p: argparse.ArgumentParser, whose: str) -> None:
    p.add_argument("--mode", choices=["zero", "mean"], default="zero",
                   help=f"how a head is switched off: zero sets {whose} output to 0 (default), mean replaces it "
                        f"by its average over a reference set of texts")


def _word_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=int_range(1, 1000), default=10, help="tokens to list (1-1000, default 10)")
    p.add_argument("--no-space", action="store_true",
                   help="look words up exactly as typed ('king', a word at the start of a text) instead of "
                        "their mid-sentence form with the leading space (' king')")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
