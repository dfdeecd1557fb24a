"""A generic model's trace against transformers' own forward with output_attentions (issue 34's budget: <= 1.3x).

A random-weight checkpoint of Qwen3-0.6B's shape (fewer layers allowed: --layers) opened through the generic path
(`GenericModel.from_resolved`, although qwen3 has code of our own) and, from the same folder, transformers'
`Qwen3ForCausalLM` with attn_implementation="eager". At each --tokens length: `GenericModel.trace_ids(ids)`
against `model(ids, output_attentions=True, use_cache=False)`, interleaved (the order alternating), --repeats
each after one warm-up, same torch threads; the medians of wall-clock and CPU time, and their ratios. Memory: the
bytes each keeps (the trace's `nbytes`; the forward's output tensors: logits and attentions) and the peak growth
of the process's resident memory during one call after a warm-up of 8 tokens (sampled every 2 ms, in a fresh
subprocess per measurement).

    nice .venv/bin/python benchmarks/generic_trace.py [--layers 28] [--tokens 128 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
from fixtures import qwen3_0_6b_shape

PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def _peak_growth(fn: Callable[[], object]) -> tuple[int, object]:
    """The most the resident memory grew above its level before `fn` while it ran (the result kept), and the
    result."""
    base, peak, done = _rss(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.002)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out = fn()
    peak[0] = max(peak[0], _rss())
    done.set()
    t.join()
    return peak[0] - base, out


def _open(folder: Path, which: str):
    if which == "trace":
        from transformer_explainer.generic import GenericModel
        from transformer_explainer.loading.resolve import ResolvedModel

        return GenericModel.from_resolved(ResolvedModel("qwen3-0.6b-shape", folder, "local"))
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


def _ids(n: int, vocab: int) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(n)).tolist()


def _forward_bytes(out) -> int:
    return out.logits.nbytes + sum(a.nbytes for a in out.attentions if a is not None)


def _calls(model, which: str, ids: list[int]) -> Callable[[], object]:
    if which == "trace":
        return lambda: model.trace_ids(ids)
    x = torch.tensor([ids])

    def forward():
        with torch.inference_mode():
            return model(input_ids=x, output_attentions=True, use_cache=False)
    return forward


def child(folder: Path, which: str, tokens: int, threads: int) -> None:
    """One measurement in this fresh process: the peak growth of resident memory during one call, and what the
    call's result keeps."""
    torch.set_num_threads(threads)
    model = _open(folder, which)
    vocab = 151936
    _calls(model, which, _ids(8, vocab))()  # warm-up, short: the weights paged in, no large buffer left to reuse
    call = _calls(model, which, _ids(tokens, vocab))
    grown, out = _peak_growth(call)
    kept = out.memory.nbytes() if which == "trace" else _forward_bytes(out)
    print(json.dumps({"peak": grown, "kept": kept}))


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--tokens", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--folder", default=None, help="the Qwen3-0.6B-shape model (made there if missing)")
    ap.add_argument("--no-memory", action="store_true", help="skip the subprocesses that measure peak memory")
    ap.add_argument("--child", nargs=2, metavar=("WHICH", "TOKENS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    folder = Path(args.folder) if args.folder else (
        Path(tempfile.gettempdir()) / f"te-bench-qwen3-0.6b-shape-{args.layers}")
    if args.child:
        child(folder, args.child[0], int(args.child[1]), args.threads)
        return
    qwen3_0_6b_shape(folder, args.layers)
    torch.set_num_threads(args.threads)
    generic, eager = _open(folder, "trace"), _open(folder, "forward")
    load0 = os.getloadavg()
    print(f"Qwen3-0.6B shape ({args.layers} layers) through the generic path, CPU, {args.threads} torch threads, "
          f"{os.cpu_count()} cores; median of {args.repeats}, interleaved")
    print("tokens | forward+attentions wall / CPU s | trace wall / CPU s | ratio wall / CPU | kept MB forward / trace"
          " | peak growth MB forward / trace")
    for n in args.tokens:
        ids = _ids(n, generic.config.vocab_size)
        calls = {"forward": _calls(eager, "forward", ids), "trace": _calls(generic, "trace", ids)}
        wall: dict[str, list[float]] = {k: [] for k in calls}
        cpu: dict[str, list[float]] = {k: [] for k in calls}
        for fn in calls.values():
            fn()  # warm-up
        for r in range(args.repeats):
            for k in (("forward", "trace") if r % 2 == 0 else ("trace", "forward")):
                w0, c0 = time.perf_counter(), time.process_time()
                out = calls[k]()
                wall[k].append(time.perf_counter() - w0)
                cpu[k].append(time.process_time() - c0)
                del out
        fw, fc, tw, tc = (_median(wall["forward"]), _median(cpu["forward"]), _median(wall["trace"]),
                          _median(cpu["trace"]))
        mem = {}
        if not args.no_memory:
            for k in calls:
                cmd = [sys.executable, __file__, "--folder", str(folder), "--layers", str(args.layers), "--threads",
                       str(args.threads), "--child", k, str(n)]
                mem[k] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                                    .strip().splitlines()[-1])
        kept = " / ".join(f"{mem[k]['kept'] / 2**20:.0f}" for k in calls) if mem else "-"
        peak = " / ".join(f"{mem[k]['peak'] / 2**20:.0f}" for k in calls) if mem else "-"
        print(f"{n} | {fw:.2f} / {fc:.2f} | {tw:.2f} / {tc:.2f} | {tw / fw:.2f}x / {tc / fc:.2f}x | {kept} | {peak}",
              flush=True)
    load1 = os.getloadavg()
    print(f"load average (1 min) {load0[0]:.2f} before, {load1[0]:.2f} after")


if __name__ == "__main__":
    main()
