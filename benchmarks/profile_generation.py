"""Where one generation step's time goes, against the weight-streaming bound (issue 15).

    .venv/bin/python benchmarks/profile_generation.py [--threads 1] [--clock wall|cpu] [--steps 24] [--rounds 3]
                                                      [--prompt 32] [--no-profiler]

GPT-2 small's shape, random weights (the model bench_forward.py uses). A 32-token prompt fills a KV
cache, then each decode step runs the one new position through `models.decode.DecodeStep`, as
`ExplainerModel.generate_ids` does.
Prints, all measured in this run:
  1. memory read bandwidth (x.sum() over 512 MB, as bench_forward.py) and the per-token bound it gives
     (the weight bytes a step reads / that bandwidth);
  2. every weight-reading product of a step (per layer attn.qkv_proj, attn.o_proj, mlp.up_proj,
     mlp.down_proj, and the unembedding): median time inside the call, its weight bytes, the GB/s it reaches,
     and that as a fraction of the measured bandwidth (timed with hooks around each call, in real
     decode steps, so each weight comes from wherever the previous step left it, not from a hot loop);
  3. the stretches between the products, by what lies between them (attention over the cache lies
     between attn.qkv_proj and attn.o_proj), timed in the same steps: the non-product work as it runs
     after each weight has streamed through the caches;
  4. the step's totals: the whole generate_ids step (median, no hooks), the sum of the products, and
     what is left: Python, layer norms, attention over the cache, the cache writes, the engine's
     per-token work (sampling, token text), each of the engine parts timed on its own;
  5. (unless --no-profiler) torch.profiler's table of one decode step's aten ops by input shape.
The four measurements run interleaved, round by round. On a machine other programs keep busy, wall
times include the waits for a core; `--clock cpu --threads 1` times the process's CPU time instead
(what a step costs when it runs), and the generate_ids line always shows both: CPU time near the
bound with wall time far above it says the machine's load, not the code, sets the wall-clock rate.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from bench_forward import bandwidth_gbs
from fixtures import gpt2_small_shape
from torch import nn

from transformer_explainer import SamplingParams, load_model
from transformer_explainer.models.decode import DecodeStep
from transformer_explainer.models.kv_cache import KVCache
from transformer_explainer.sampling import most_likely, next_token_distribution


def med_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3


def p10_ms(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 10] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=24, help="decode steps per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--no-profiler", action="store_true")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: time this process's CPU time instead of wall time (with --threads 1: the "
                         "time a step takes when the process is not waiting for a core, on a shared machine)")
    args = ap.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    step_cpu: list[float] = []
    first: list[float] = []  # the prompt's forward pass and the first token
    torch.set_num_threads(args.threads)
    folder = gpt2_small_shape(Path(tempfile.gettempdir()) / "te-profile-gpt2-small-shape")
    model = load_model(str(folder), allow_download=False)
    gpt = model.net
    cfg = gpt.config
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, cfg.vocab_size, (args.prompt,), generator=g).tolist()
    greedy = SamplingParams(temperature=0)

    # which modules read weights in a decode step, in call order
    linears = [(name, m) for name, m in gpt.named_modules() if isinstance(m, nn.Linear)]
    wbytes = {name: m.weight.numel() * m.weight.element_size()
              + (0 if m.bias is None else m.bias.numel() * m.bias.element_size()) for name, m in linears}
    # a step reads every parameter except the embedding tables' unused rows (the position table; the
    # token table is the unembedding, read whole by unembed)
    step_bytes = sum(p.numel() * p.element_size() for p in gpt.parameters()) - \
        gpt.pos_embed.weight.numel() * gpt.pos_embed.weight.element_size()
    all_bytes = sum(p.numel() * p.element_size() for p in gpt.parameters())

    def generate_round() -> list[float]:
        """Per-token wall times of generate_ids, decode steps only (the prompt's and the first step's
        times dropped)."""
        times, cpu, t, c = [], [], time.perf_counter(), time.process_time()
        for _tok in model.generate_ids(prompt, args.steps + 2, greedy, stop_at_eos=False):
            now, cnow = time.perf_counter(), time.process_time()
            times.append(now - t)
            cpu.append(cnow - c)
            t, c = now, cnow
        step_cpu.extend(cpu[2:])
        first.append(times[0] if args.clock == "wall" else cpu[0])
        return times[2:] if args.clock == "wall" else cpu[2:]

    def kind(name: str) -> str:  # per-layer products grouped by kind
        return name.split(".", 2)[-1] if name.startswith("blocks.") else name

    # (b) per-product times: hooks around each Linear, in real decode steps
    all_op: dict[str, list[float]] = defaultdict(list)
    t0: dict[str, float] = {}
    timing = [False]  # decode steps only, not the prompt

    # the stretches between products, by what lies between them (e.g. attention over the cache lies
    # between attn.qkv_proj and attn.o_proj): [label, time] of the last product's end
    gaps: dict[str, list[float]] = defaultdict(list)
    last_end: list = [None, 0.0]

    def pre(name: str) -> None:
        now = clock()
        if timing[0]:
            label = "start of the call" if last_end[0] is None else last_end[0]
            gaps[f"{label} -> {kind(name)}"].append(now - last_end[1])
        t0[name] = now

    def post(name: str) -> None:
        now = clock()
        if timing[0]:
            all_op[name].append(now - t0[name])
        last_end[0], last_end[1] = kind(name), now

    def hooked_round() -> list[float]:
        handles = []
        for name, m in linears:
            handles.append(m.register_forward_pre_hook(lambda mod, inp, name=name: pre(name)))
            handles.append(m.register_forward_hook(lambda mod, inp, out, name=name: post(name)))
        times = []
        cache = KVCache(capacity=args.prompt + args.steps + 1)
        logits = gpt(torch.tensor([prompt]), cache=cache, logits_for="last")[0, -1]
        tid = int(torch.argmax(logits))
        step = DecodeStep(gpt, cache)  # generate_ids's step
        timing[0] = True
        for _ in range(args.steps):
            t = clock()
            last_end[0], last_end[1] = None, t
            logits = step(tid)
            times.append(clock() - t)
            gaps["unembed -> end of the call"].append(times[-1] + t - last_end[1])
            tid = int(torch.argmax(logits))
        timing[0] = False
        for h in handles:
            h.remove()
        return times

    # (c) the model call alone and the engine's per-token parts, each timed on its own
    parts: dict[str, list[float]] = defaultdict(list)

    def split_round() -> None:
        cache = KVCache(capacity=args.prompt + args.steps + 1)
        logits = gpt(torch.tensor([prompt]), cache=cache, logits_for="last")[0, -1]
        step = DecodeStep(gpt, cache)
        for _ in range(args.steps):
            t1 = clock()
            tid = most_likely(logits)  # generate_ids builds no distribution when greedy
            t2 = clock()
            model.tokenizer.token_text(tid)
            t3 = clock()
            logits = step(tid)  # the step makes its input tensor itself
            t4 = clock()
            for k, v in (("greedy pick", t2 - t1), ("token text", t3 - t2), ("model call", t4 - t3)):
                parts[k].append(v)

    # (d) the same decode steps with every product replaced by a ready zero output of its shape: what
    # a step costs besides reading the weights (Python, norms, attention over the cache, cache writes),
    # measured directly rather than as the difference of two noisy times. A new zero tensor per call: the
    # step adds into a branch's output in place, so a shared one would accumulate

    def null_round() -> list[float]:
        times = []
        cache = KVCache(capacity=args.prompt + args.steps + 1)
        gpt(torch.tensor([prompt]), cache=cache, logits_for="last")  # the real prompt fills the cache
        step = DecodeStep(gpt, cache)
        for _name, m in linears:
            m.forward = lambda x, n=m.out_features: torch.zeros(1, 1, n)  # type: ignore[method-assign]
        for _ in range(args.steps):
            t = clock()
            step(0)
            times.append(clock() - t)
        for _name, m in linears:
            del m.forward  # back to the class's forward
        return times

    # the four measurements interleaved round by round, so drift in the machine's load hits all alike
    generate_round()  # warm-up
    bws, step_times, hooked_steps, null_steps = [], [], [], []
    with torch.inference_mode():
        for _ in range(args.rounds):
            bws.append(bandwidth_gbs())
            step_times += generate_round()
            hooked_steps += hooked_round()
            split_round()
            null_steps += null_round()
    bws.append(bandwidth_gbs())
    bw = max(bws)

    # --- report --------------------------------------------------------------------------------
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); GPT-2-small shape, prompt {args.prompt}, "
          f"{args.rounds} x {args.steps} decode steps")
    print(f"memory read {bw:.1f} GB/s (x.sum() over 512 MB, the best of {len(bws)} reads, one per round: "
          + " ".join(f"{b:.1f}" for b in bws) + ")")
    print(f"weights {all_bytes / 1e6:.1f} MB ({step_bytes / 1e6:.1f} MB read per step: all but the position table)")
    bound_ms = all_bytes / bw / 1e6
    print(f"bound (bench_forward's: all weight bytes / bandwidth): {bound_ms:.2f} ms per token = "
          f"{1e3 / bound_ms:.1f} tok/s")

    print(f"\n{'product':<14} {'calls':>5} {'MB':>7} {'ms/call':>8} {'GB/s':>7} {'of bw':>6} {'ms/step':>8}")
    kinds: dict[str, list[str]] = defaultdict(list)
    for name, _m in linears:
        kinds[kind(name)].append(name)
    gemv_ms = 0.0
    gemv_bytes = 0
    for k, names in kinds.items():
        per_call = [med_ms(all_op[n]) for n in names]
        mb = wbytes[names[0]] / 1e6
        ms = statistics.mean(per_call)
        step_ms = sum(per_call)
        gemv_ms += step_ms
        gemv_bytes += sum(wbytes[n] for n in names)
        gbs = mb / ms
        print(f"{k:<14} {len(names):>5} {mb:>7.2f} {ms:>8.3f} {gbs:>7.1f} {gbs / bw:>6.2f} {step_ms:>8.2f}")
    print(f"{'all products':<14} {len(linears):>5} {gemv_bytes / 1e6:>7.1f} {'':>8} "
          f"{gemv_bytes / 1e6 / gemv_ms:>7.1f} {gemv_bytes / 1e6 / gemv_ms / bw:>6.2f} {gemv_ms:>8.2f}")
    per_layer = {k: [med_ms(all_op[n]) for n in names] for k, names in kinds.items() if len(names) > 1}
    if per_layer:
        print("per layer ms: " + "; ".join(f"{k} " + " ".join(f"{v:.2f}" for v in vs) for k, vs in per_layer.items()))

    steps_timed = len(hooked_steps)
    print("\nbetween the products (in the same hooked steps; ms per step = total / steps):")
    for label, v in gaps.items():
        print(f"  {label:<36} {sum(v) / steps_timed * 1e3:6.2f} ms per step ({len(v) // steps_timed} per step, "
              f"median {med_ms(v) * 1e3:.0f} us)")
    print(f"  {'all':<36} {sum(sum(v) for v in gaps.values()) / steps_timed * 1e3:6.2f} ms per step")

    cpu_step = med_ms(step_cpu)
    step = med_ms(step_times)
    fw = med_ms(parts["model call"])
    null = med_ms(null_steps)
    eng = sum(med_ms(v) for k, v in parts.items() if k != "model call")
    lm = med_ms(all_op["unembed"])

    def row(label: str, ms: float, note: str = "") -> None:
        print(f"  {label:<32} {ms:7.2f}  {ms / step:5.2f}  {note}")

    print(f"\nper token (medians, ms, {args.clock} clock)     ms  of step")
    row("generate_ids step", step, f"{1e3 / step:.1f} tok/s, {bound_ms / step:.2f} of the bound; fastest tenth "
        f"{p10_ms(step_times):.1f} ms, range {min(step_times) * 1e3:.1f}-{max(step_times) * 1e3:.1f}")
    row("generate_ids step, CPU time", cpu_step, f"{1e3 / cpu_step:.1f} tok/s, {bound_ms / cpu_step:.2f} of the bound "
        "(process CPU time, all threads)")
    pf = med_ms(first)
    row("prompt pass + first token", pf, f"= {pf / step:.1f} steps; bench_forward's tok/s (48 tokens after 32, the "
        f"prompt's pass included) would be {48e3 / (pf + 47 * step):.1f} = {bound_ms * 48 / (pf + 47 * step):.2f} "
        "of the bound")
    row("model call alone", fw)
    row("model call with hooks", med_ms(hooked_steps), "(the products were timed in these)")
    row("products (sum of medians)", gemv_ms, f"their own bound {gemv_bytes / bw / 1e6:.2f} ms: "
        f"{gemv_bytes / bw / 1e6 / gemv_ms:.2f} of it")
    row("rest of the model call", fw - gemv_ms, "Python, norms, attention over the cache, cache writes, embedding")
    row("model call, products skipped", null, "the same measured directly: each product returns a new zero tensor")
    row("engine per token", eng, ", ".join(f"{k} {med_ms(v):.3f}" for k, v in parts.items() if k != "model call"))
    row("generator's own", step - fw - eng, "step - model call - engine")
    print(f"\nsummary: products {gemv_ms:.1f} ms at {gemv_bytes / 1e6 / gemv_ms / bw:.2f} of the read bandwidth "
          f"(unembed {lm:.1f} ms at {wbytes['unembed'] / 1e6 / lm / bw:.2f}); besides them a step costs "
          f"{null:.1f} ms in the model and {eng:.2f} ms in the engine; the bound is {bound_ms:.1f} ms")

    if not args.no_profiler:
        from torch.profiler import ProfilerActivity, profile

        with torch.inference_mode():
            cache = KVCache(capacity=args.prompt + 8)
            logits = gpt(torch.tensor([prompt]), cache=cache, logits_for="last")[0, -1]
            tid = int(torch.argmax(logits))
            step = DecodeStep(gpt, cache)
            for _ in range(2):
                logits = step(tid)
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                for _ in range(3):
                    dist = next_token_distribution(logits, greedy)
                    tid = dist.sample(None)
                    logits = step(tid)
        print("\ntorch.profiler, 3 decode steps + sampling (self CPU time by op and input shape; the profiler "
              "adds its own per-op cost)")
        print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=25,
                                                                 max_name_column_width=28,
                                                                 max_shapes_column_width=60))


if __name__ == "__main__":
    main()
