"""What recomputing a block's internals on demand (`memo/recipes.py`) costs and saves, against recording every value
eagerly (`trace_ids(memory=memo.EAGER)`, what a trace did before), measured in one run on GPT-2 small's shape
(random weights, float32):

  memory     resident memory of kept traces of --long tokens (random ids), per trace: the process's resident set
             after keeping --kept traces less before, divided by --kept, and what each trace after the first adds
             (the first also brings the pass's working memory); each mode in a fresh process, with the allocator
             the package sets up (which keeps freed memory for reuse, so the pass's working set stays in it) and
             with the system's (TE_SYSTEM_MALLOC=1), beside the bytes the trace's tensors hold
  trace      `trace_ids` against `logits` (the fast path: nothing recorded) on the same ids, at each --lengths
  view       opening one block's view of a trace of --long tokens (the first read of blocks.{L/2}.attn.pattern:
             that block run again), against one block's recorded forward (`forward_block`, everything stored);
             also of a trace continued from a KV cache (its last 10 positions)
  attribute  direct logit attribution at --lengths[0] tokens (it reads every block's heads)
  server     how many traces of 128 tokens the server's default trace cache budget holds: today's cache with
             eagerly recorded traces, and the `TraceStore` (traces with their keys and values kept, which it drops
             under pressure, and what the traces leave of the budget for blocks run again); and what the
             `TraceStore` spends on a new text of 128 tokens, on that text with its last two tokens edited, and on
             a token generated after it (the last two continue the cached trace)

Contenders are interleaved round by round so that drift hits all alike; times are medians (CPU seconds of this
process, and wall), with the machine's load average before and after. On a shared machine, read CPU time: the
wall time includes what other programs take.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_recompute.py [--lengths 128 1000] [--long 1000] [--reps 5]
                                                                  [--threads 1] [--kept 3] [--skip-memory]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from fixtures import gpt2_small_shape

ROOT = Path(__file__).resolve().parents[1]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def random_ids(n: int, seed: int, vocab: int = 50257) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def memory_child(folder: str, mode: str, n: int, kept: int) -> None:
    """In a fresh process: the resident memory and tensor bytes of `kept` traces of `n` tokens kept at once."""
    from transformer_explainer import load_model
    from transformer_explainer.memo import Memory

    torch.set_num_threads(1)
    model = load_model(folder, allow_download=False)
    model.last_logits(random_ids(8, 99))  # the model's own first-call allocations are not the trace's
    before = rss_mb()
    traces = [model.trace_ids(random_ids(n, 0), memory=Memory(eager=mode == "eager"))]
    first = rss_mb()  # the pass's working memory, which the allocator keeps, and one trace
    traces += [model.trace_ids(random_ids(n, seed), memory=Memory(eager=mode == "eager")) for seed in range(1, kept)]
    after = rss_mb()
    out = {"rss_per_trace_mb": (after - before) / kept, "tensor_mb": traces[0].nbytes() / 2**20,
           "rss_each_more_mb": (after - first) / max(1, kept - 1)}
    if mode == "recompute":
        traces[0][f"blocks.{model.config.n_layer // 2}.attn.pattern"]  # one block's view open
        out["rss_with_view_mb"] = (rss_mb() - before) / kept
        out["block_mb"] = traces[0].memory.block_cache.nbytes / 2**20
    print(json.dumps(out))


def measure_memory(folder: Path, n: int, kept: int) -> dict[tuple[str, str], dict[str, float]]:
    out = {}
    for allocator in ("package", "system"):
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        if allocator == "system":
            env["TE_SYSTEM_MALLOC"] = "1"
        for mode in ("eager", "recompute"):
            r = subprocess.run([sys.executable, __file__, "--memory-child", mode, "--folder", str(folder),
                                "--long", str(n), "--kept", str(kept)], env=env, capture_output=True, text=True,
                               check=True)
            out[allocator, mode] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def timed(fns: dict[str, Callable[[], object]], reps: int,
          setups: dict[str, Callable[[], None]] | None = None) -> dict[str, tuple[float, float]]:
    """Median (CPU s, wall s) of each function, the contenders interleaved round by round; `setups[name]` runs
    before each call of that one, untimed."""
    setups = setups or {}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    wall: dict[str, list[float]] = {k: [] for k in fns}
    for rep in range(reps + 1):  # the first round warms up
        for k, f in fns.items():
            if k in setups:
                setups[k]()
            c, w = time.process_time(), time.perf_counter()
            f()
            if rep:
                cpu[k].append(time.process_time() - c)
                wall[k].append(time.perf_counter() - w)
    return {k: (statistics.median(cpu[k]), statistics.median(wall[k])) for k in fns}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 1000])
    ap.add_argument("--long", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--kept", type=int, default=3)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--folder", default=None, help="the GPT-2-small-shape model (made there if missing)")
    ap.add_argument("--memory-child", choices=["eager", "recompute"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    folder = Path(args.folder) if args.folder else Path(tempfile.gettempdir()) / "te-bench-gpt2-small-shape"
    if args.memory_child:
        memory_child(str(folder), args.memory_child, args.long, args.kept)
        return
    gpt2_small_shape(folder)
    load0 = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} (1, 5, 15 min)"
          f"; torch threads {args.threads}")

    from transformer_explainer import load_model
    from transformer_explainer.memo import EAGER, Memory
    from transformer_explainer.memo.store import TraceCache, TraceStore, trace_nbytes
    from transformer_explainer.models.recorder import Recorder
    from transformer_explainer.server import defaults
    from transformer_explainer.trace import Trace

    rows: list[tuple[str, str, str, str]] = []  # what, before (eager), after (recompute), target

    if not args.skip_memory:
        mem = measure_memory(folder, args.long, args.kept)
        for allocator in ("package", "system"):
            e, r = mem[allocator, "eager"], mem[allocator, "recompute"]
            rows.append((f"resident MB per kept trace of {args.long} tokens ({allocator} allocator)",
                         f"{e['rss_per_trace_mb']:.0f}", f"{r['rss_per_trace_mb']:.0f}", "<= 100"))
            rows.append((f"  each trace kept after the first ({allocator} allocator)", f"{e['rss_each_more_mb']:.0f}",
                         f"{r['rss_each_more_mb']:.0f}", ""))
            rows.append((f"  same, one block's view open ({allocator} allocator)", "",
                         f"{r['rss_with_view_mb']:.0f}", ""))
        e, r = mem["package", "eager"], mem["package", "recompute"]
        rows.append((f"tensor MB a trace of {args.long} tokens holds", f"{e['tensor_mb']:.1f}",
                     f"{r['tensor_mb']:.1f} (+{r['block_mb']:.1f} for one block run again)", ""))

    torch.set_num_threads(args.threads)
    model = load_model(str(folder), allow_download=False)
    L = model.config.n_layer
    for T in args.lengths:
        ids = random_ids(T, T)
        t = timed({"logits": lambda ids=ids: model.last_logits(ids),
                   "eager": lambda ids=ids: model.trace_ids(ids, memory=EAGER),
                   "recompute": lambda ids=ids: model.trace_ids(ids)}, args.reps)
        lg = t["logits"]
        rows.append((f"logits() at {T} tokens, ms CPU (wall)", "", f"{lg[0] * 1e3:.0f} ({lg[1] * 1e3:.0f})", ""))
        for mode, col in (("eager", 1), ("recompute", 2)):
            cells = ["", ""]
            cells[col - 1] = f"{t[mode][0] * 1e3:.0f} ({t[mode][1] * 1e3:.0f})"
            rows.append((f"trace() at {T} tokens, ms CPU (wall) [{mode}]", *cells, ""))
        rows.append((f"trace() / logits() at {T} tokens (CPU)", f"{t['eager'][0] / lg[0]:.2f}",
                     f"{t['recompute'][0] / lg[0]:.2f}", "<= 1.1"))

    # opening one block's view against one block's recorded forward
    ids = random_ids(args.long, 7)
    layer = L // 2
    name = f"blocks.{layer}.attn.pattern"
    fresh: dict[str, Trace] = {}

    def new_trace() -> None:
        fresh["trace"] = model.trace_ids(ids)

    def new_continued() -> None:
        fresh["continued"] = model.extend_trace(model.trace_ids(ids[:-10], memory=Memory(keep_kv=True)), ids[-10:])

    x = model.trace_ids(ids, memory=EAGER)[f"blocks.{layer}.resid_pre"][None]

    def block_forward() -> None:
        with torch.inference_mode():
            model.net.forward_block(layer, x, rec=Recorder(prefix=f"blocks.{layer}."))

    t = timed({"block": block_forward, "view": lambda: fresh["trace"][name],
               "continued view": lambda: fresh["continued"][name]}, args.reps,
              {"view": new_trace, "continued view": new_continued})
    blk = t["block"]
    rows.append((f"one block's recorded forward at {args.long} tokens, ms CPU (wall)", "",
                 f"{blk[0] * 1e3:.0f} ({blk[1] * 1e3:.0f})", ""))
    for k in ("view", "continued view"):
        rows.append((f"opening a block's {k} at {args.long} tokens / one block's forward (CPU)", "",
                     f"{t[k][0] / blk[0]:.2f} ({t[k][0] * 1e3:.0f} ms)", "<= 1.2" if k == "view" else ""))

    # attribution reads every block's heads
    T = args.lengths[0]
    ids = random_ids(T, 3)
    eager_tr = model.trace_ids(ids, memory=EAGER)
    t = timed({"eager": lambda: model.attribute(eager_tr), "recompute": lambda: model.attribute(fresh["trace"])},
              max(3, args.reps // 2), {"recompute": lambda: fresh.update(trace=model.trace_ids(ids))})
    rows.append((f"attribute() at {T} tokens, ms CPU (recompute: every block run again)",
                 f"{t['eager'][0] * 1e3:.0f}", f"{t['recompute'][0] * 1e3:.0f}", ""))

    # the server's default budget, with traces of 128 tokens
    budget = defaults.CACHE_MB * 2**20
    eager_size = trace_nbytes(model.trace_ids(random_ids(128, 0), memory=EAGER))
    lazy_size = trace_nbytes(model.trace_ids(random_ids(128, 0)))
    kv_size = trace_nbytes(model.trace_ids(random_ids(128, 0), memory=Memory(keep_kv=True)))
    before = TraceCache(budget)  # today's: the whole budget for eagerly recorded traces
    for seed in range(budget // eager_size + 3):
        before.put(("m", (seed,)), model.trace_ids(random_ids(128, seed), memory=EAGER))
    explainer = TraceStore(budget)
    for seed in range(budget // lazy_size + 8):  # more than it can hold
        explainer.get("m", model, random_ids(128, 1000 + seed))
    held = [explainer.cache.get(("m", tuple(random_ids(128, 1000 + s))), count_miss=False)
            for s in range(budget // lazy_size + 8)]
    kept = [t for t in held if t is not None]
    rows.append((f"traces of 128 tokens held by the default {defaults.CACHE_MB} MB", f"{len(before)}",
                 f"{len(kept)} ({sum(t.memory.kv is not None for t in kept)} with keys and values)", ">= 20"))
    rows.append(("  MB per trace of 128 tokens (after: without / with keys and values)", f"{eager_size / 2**20:.1f}",
                 f"{lazy_size / 2**20:.1f} / {kv_size / 2**20:.1f}", ""))

    # the server's answers at 128 tokens: a new text (one pass), its last two tokens edited and a token generated
    # (both continue the cached trace from its keys and values, then run each block as far as its pattern for
    # the overview's thumbnails)
    state: dict[str, Any] = {"seed": 5000}

    def new_text() -> None:
        state["seed"] += 1
        state["ids"] = random_ids(128, state["seed"])

    def traced_text() -> None:
        new_text()
        state["trace"] = explainer.get("m", model, state["ids"])[0]

    t = timed({"new": lambda: explainer.get("m", model, state["ids"]),
               "edited": lambda: explainer.get("m", model, state["ids"][:-2] + [11, 12]),
               "generated": lambda: explainer.extend("m", model, state["trace"], 11)},
              max(3, args.reps // 2), {"new": new_text, "edited": traced_text, "generated": traced_text})
    for k, what in (("new", "a new text of 128 tokens (one pass)"),
                    ("edited", "its last 2 tokens edited (continued)"),
                    ("generated", "a token generated after it (continued)")):
        rows.append((f"server: {what}, ms CPU", "", f"{t[k][0] * 1e3:.0f}", ""))

    load1 = os.getloadavg()
    w = max(len(r[0]) for r in rows)
    print(f"\n{'':<{w}}  {'before (eager)':>16}  {'after (recompute)':>26}  target")
    for what, b, a, target in rows:
        print(f"{what:<{w}}  {b:>16}  {a:>26}  {target}")
    print(f"\nload average at the end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")


if __name__ == "__main__":
    main()
