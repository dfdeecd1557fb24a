#!/usr/bin/env python3
"""Build the feature pages of the sparse autoencoders the built-in models ship (features/pages.py): each feature's
top-activating contexts, contexts at quantiles of its activations, its activation histogram and density, and the
tokens its decoder direction promotes and suppresses, computed once on held-out text of the project's corpus and
written beside the autoencoder (`feature_pages.npz` + `feature_pages.json` in `builtin/<model>/saes/<hook>/`).

The corpus is ``data/corpus/valid.txt`` (built by scripts/build_corpus.py; never trained on: the autoencoders and
the models train on train.txt), all of it (about 240k tokens) or its first ``--tokens`` tokens, cut into windows of
``--window``. The shipped pages were built on all of it: 835 s for explainer-small's three autoencoders and 647 s for
explainer-llama's one, one torch thread each, on this project's 2-core machine shared with other work (one thread per
process is much faster there than torch's default of two); 4.5 MiB in all.

Descriptions written of features (``descriptions`` in ``feature_pages.json``) are kept across a rebuild with the same
weights; reread each described feature's new contexts and promoted tokens after one, as they may change.

Usage::

    .venv/bin/python scripts/build_feature_pages.py                 # every built-in model's autoencoders
    .venv/bin/python scripts/build_feature_pages.py --model explainer-small --hook blocks.3.hook_resid_post
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    import torch
    from tqdm import tqdm

    from transformer_explainer import load_model
    from transformer_explainer.features.pages import META_FILE, PageSpec, build_pages, pages_size, write_pages
    from transformer_explainer.features.sae import WEIGHTS_FILE, builtin_saes, load_sae
    from transformer_explainer.loading.resolve import builtin_models
    from transformer_explainer.training.lm import tokenize_file

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", action="append", default=None,
                   help="a built-in model (repeatable; default: every one that ships autoencoders)")
    p.add_argument("--hook", action="append", default=None, help="only these hooks (default: all shipped)")
    p.add_argument("--corpus", type=Path, default=ROOT / "data" / "corpus" / "valid.txt",
                   help="held-out text, documents separated by blank lines (default: data/corpus/valid.txt)")
    p.add_argument("--tokens", type=int, default=None, help="corpus tokens to read (default: all of them)")
    p.add_argument("--window", type=int, default=PageSpec.window, help="tokens per traced window (default 128)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.corpus.is_file():
        print(f"no corpus at {args.corpus}: build it with scripts/build_corpus.py", file=sys.stderr)
        return 2
    names = args.model or [n for n in builtin_models() if builtin_saes(n)]
    if not names:
        print("no built-in model ships an autoencoder yet", file=sys.stderr)
        return 2
    spec = PageSpec(window=args.window)
    for name in names:
        model = load_model(name, allow_download=False)
        whole = tokenize_file(model.tokenizer, args.corpus)
        corpus = whole[: args.tokens]
        where = f"{args.corpus.relative_to(ROOT) if args.corpus.is_relative_to(ROOT) else args.corpus}"
        folders = {h: f for h, f in builtin_saes(model).items() if not args.hook or h in args.hook}
        saes = [load_sae(f) for f in folders.values()]
        t0 = time.perf_counter()
        with tqdm(total=len(corpus) // spec.window, desc=f"{name} ({len(saes)} autoencoders)", unit="window") as bar:
            part = f"all its {len(corpus)} tokens" if len(corpus) == len(whole) else f"its first {len(corpus)} tokens"
            built = build_pages(model, saes, corpus, spec, corpus_name=f"{where}, {part}",
                                progress=lambda done, _n: bar.update(done - bar.n))
        for (hook, folder), sae, (arrays, meta) in zip(folders.items(), saes, built, strict=True):
            # the weights the pages were built with; descriptions written of these weights' features are kept
            meta["weights_sha256"] = hashlib.sha256((folder / WEIGHTS_FILE).read_bytes()).hexdigest()
            before = folder / META_FILE
            if before.is_file():
                old = json.loads(before.read_text())
                if old.get("weights_sha256") == meta["weights_sha256"] and old.get("descriptions"):
                    meta["descriptions"] = old["descriptions"]
            write_pages(folder, arrays, meta)
            live = int((arrays["density"] > 0).sum())
            print(f"{name} {hook}: {sae.cfg.d_sae} features ({live} fire on the corpus), "
                  f"{meta['corpus_tokens']} tokens, {pages_size(folder) / 2**20:.2f} MiB")
        print(f"{name}: {time.perf_counter() - t0:.0f} s for {len(saes)} autoencoders")
    return 0


if __name__ == "__main__":
    sys.exit(main())
