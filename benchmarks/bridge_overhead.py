"""What recording through the bridge costs against transformers' own forward with output_attentions (eager).

A random-weight model of Qwen3-0.6B's shape (fewer layers allowed: --layers), one sequence of --tokens tokens;
the median of --repeats timed runs of each, after one warm-up, printed with their ratio (the budget: <= 1.3x).

    .venv/bin/python benchmarks/bridge_overhead.py --layers 8 --tokens 256
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from transformer_explainer.bridge import ATTENTION_NAME, record, register

QWEN3_0_6B = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                  tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6)


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = AutoConfig.for_model("qwen3", **{**QWEN3_0_6B, "num_hidden_layers": args.layers})
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").to(args.device).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, args.tokens), device=args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)

    def forward() -> None:
        with torch.no_grad():
            model(input_ids=ids, output_attentions=True, use_cache=False)
        sync()

    def bridge() -> None:
        record(model, ids[0])
        sync()

    eager_s = _median_s(forward, args.repeats)
    register()
    model.set_attn_implementation(ATTENTION_NAME)  # as the bridge loads a model (load_decoder)
    bridge_s = _median_s(bridge, args.repeats)
    print(f"Qwen3-0.6B shape, {args.layers} layers, {args.tokens} tokens, {args.device}: transformers eager forward "
          f"with output_attentions {eager_s * 1000:.1f} ms, bridge record {bridge_s * 1000:.1f} ms, "
          f"ratio {bridge_s / eager_s:.2f}x")


if __name__ == "__main__":
    main()
