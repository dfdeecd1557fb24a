"""The server's forward pass for an edit at the end of a long text (issue 40), at the level of its trace store: a
`TraceStore` of the server's default budget over a GPT-2-small-shape model (random weights), one torch thread, CPU
time of `TraceStore.get` and the positions it computed. Three ways the edits come:

- one text: one learner changing the last word again and again (the newest trace keeps its keys and values, even
  beyond their share of the budget: the edit computes its own positions);
- texts in turn (--texts 2, 3): learners taking turns on texts of that length. A text of 1,000 tokens holds about
  50 MB of block inputs and overview rows and 70 MB of keys and values: on the default 256 MB (192 for traces) the
  others keep their block inputs alone and are continued without their keys and values, and with three the newest's
  go too rather than the oldest text, which would be traced whole (`TraceCache._kv_before_traces`); a budget that
  holds them all (--cache-mb 512 for three) continues each text from its own.

    nice .venv/bin/python benchmarks/long_text_edits.py [--tokens 1000] [--texts 1 2 3] [--edits 3] [--cache-mb 256]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

import torch
from fixtures import gpt2_small_shape


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--texts", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--edits", type=int, default=3, help="edits of each text")
    ap.add_argument("--cache-mb", type=int, default=None, help="the store's budget (default: the server's)")
    ap.add_argument("--folder", default=None, help="the GPT-2-small-shape model (made there if missing)")
    args = ap.parse_args()
    folder = gpt2_small_shape(Path(args.folder) if args.folder else
                              Path(tempfile.gettempdir()) / "te-bench-gpt2-small-shape")
    from transformer_explainer import load_model
    from transformer_explainer.memo.store import TraceStore
    from transformer_explainer.server import defaults

    torch.set_num_threads(1)
    budget = defaults.CACHE_MB if args.cache_mb is None else args.cache_mb
    model = load_model(str(folder), allow_download=False)
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; one torch "
          f"thread; budget {budget} MB; {args.tokens} tokens")
    rng = random.Random(0)
    for k in args.texts:
        store = TraceStore(budget * 2**20)
        texts = [[rng.randrange(model.config.vocab_size) for _ in range(args.tokens)] for _ in range(k)]
        for ids in texts:
            store.get("m", model, ids)
        rows = []
        for _ in range(args.edits):
            for i, ids in enumerate(texts):
                texts[i] = ids = ids[:-1] + [rng.randrange(model.config.vocab_size)]
                c0 = time.process_time()
                _, computed = store.get("m", model, ids)
                rows.append(f"{computed} {1e3 * (time.process_time() - c0):.0f}")
        print(f"{k} text{'s' if k > 1 else ''} edited in turn, last word: computed, ms CPU: " + "; ".join(rows))


if __name__ == "__main__":
    main()
