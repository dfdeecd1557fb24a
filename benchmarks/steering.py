"""Steering's side-by-side generation against one plain generation (issue 35: at most 2.2x).

    .venv/bin/python benchmarks/steering.py [--tokens 20] [--rounds 5] [--threads 1] [--clock cpu|wall]
                                            [--models explainer-small,gpt2-shape,smollm2-shape]

For each model, a prompt of 15-16 tokens and a random direction at the middle layer, half a typical residual vector
long. Columns: "plain", one `generate_ids` of --tokens greedy tokens; "both", the plain and the steered continuation
(each its own generation, the steered one with the hook adding the vector after block L at every position): the
side-by-side generation the bound is about; "answer", `steering.steer(..., sweep=False)`: both, scored under the
unsteered model (one pass over the prompt, then each continuation's own positions), the residual stream's size at L
and the direction's logit lens; "with sweep", the whole answer with the breakdown sweep (a generation and a score per
strength). Timed interleaved, round by round; medians. Models: the built-in explainer-small, GPT-2 small's shape and
SmolLM2-135M's shape (random weights: `fixtures.py`).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from fixtures import gpt2_small_shape, smollm2_135m_shape

from transformer_explainer import SamplingParams, load_model
from transformer_explainer.steering import steer, steered_tokens, vector_direction

PROMPT = "The weather in the mountains this morning was cold and the road to the village"


def timed(fn, clock) -> float:
    t = clock()
    fn()
    return clock() - t


def bench(name: str, spec: str, tokens: int, rounds: int, clock) -> None:
    model = load_model(spec, allow_download=False)
    ids = model.encode(PROMPT)
    layer = model.config.n_layer // 2
    g = torch.Generator().manual_seed(0)
    d = vector_direction(model, torch.randn(model.config.n_embd, generator=g), layer)
    with torch.inference_mode():  # half a typical residual vector's length: it changes the text, it does not wreck it
        strength = 0.5 * float(model.trace_ids(ids)[f"blocks.{layer}.resid_post"].norm(dim=-1).median()) / d.norm
    greedy = SamplingParams(temperature=0)

    def plain() -> None:
        assert len(list(model.generate_ids(ids, tokens, greedy, stop_at_eos=False))) == tokens

    def both() -> None:  # the two continuations alone
        plain()
        assert len(steered_tokens(model, ids, d, strength, tokens, greedy)) >= 1

    def answer() -> None:
        steer(model, ids, d, strength, tokens=tokens, params=greedy, sweep=False)

    def with_sweep() -> None:
        steer(model, ids, d, strength, tokens=tokens, params=greedy, sweep=True)

    plain(), answer()  # warm up
    times: list[list[float]] = [[], [], [], []]
    for _ in range(rounds):
        for xs, fn in zip(times, (plain, both, answer, with_sweep), strict=True):
            xs.append(timed(fn, clock))
    mp, mb, ma, mw = (statistics.median(x) * 1e3 for x in times)
    print(f"{name:<16} {mp:>9.1f} {mb:>9.1f} {mb / mp:>6.2f} {ma:>10.1f} {ma / mp:>6.2f} {mw:>11.1f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="explainer-small,gpt2-shape,smollm2-shape")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                    help="cpu: this process's CPU time (what the work costs, whatever else keeps the machine busy); "
                         "wall: elapsed time")
    args = ap.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp())
    makers = {"explainer-small": lambda: "explainer-small", "gpt2-shape": lambda: str(gpt2_small_shape(tmp / "g")),
              "smollm2-shape": lambda: str(smollm2_135m_shape(tmp / "s"))}
    print(f"{args.tokens} tokens, {args.rounds} rounds, {args.threads} thread(s), {args.clock} time; medians, ms")
    print(f"{'model':<16} {'plain':>9} {'both':>9} {'ratio':>6} {'answer':>10} {'ratio':>6} {'with sweep':>11}")
    for name in args.models.split(","):
        bench(name, makers[name](), args.tokens, args.rounds, clock)
    print("plain: one generation; both: the plain and the steered continuation; answer: steer(sweep=False), both with "
          "the scores, the residual norm and the lens; with sweep: the whole answer")


if __name__ == "__main__":
    main()
