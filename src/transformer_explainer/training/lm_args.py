"""The arguments of `transformer-explainer train lm`, apart from the training code (and torch), so
that building the CLI's parser imports neither."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_lm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", type=Path, required=True,
                   help="folder with train.txt and valid.txt (and optionally general_eval.txt)")
    p.add_argument("--tokenizer", type=Path, required=True,
                   help="folder with tokenizer.json; trained there from train.txt if missing")
    p.add_argument("--vocab-size", type=int, default=8192, help="when training a tokenizer")
    p.add_argument("--out", type=Path, required=True, help="run folder: checkpoints and run.json; resumes if present")
    p.add_argument("--family", choices=["gpt2", "llama"], default="gpt2",
                   help="gpt2: LayerNorm, learned positions, GELU MLP; llama: RMSNorm, RoPE, gated MLP, "
                        "grouped-query attention, no biases (saved as HF LlamaForCausalLM)")
    p.add_argument("--n-kv-head", type=int, default=None,
                   help="llama: key/value heads (grouped-query attention); default one per query head")
    p.add_argument("--n-inner", type=int, default=None,
                   help="MLP hidden width; default 4 x n_embd (gpt2), 8/3 x n_embd rounded to 64 (llama)")
    p.add_argument("--rope-theta", type=float, default=10000.0, help="llama: base of the rotary frequencies")
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-head", type=int, default=8)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--max-steps", type=int, default=4000)
    p.add_argument("--max-minutes", type=float, default=None, help="stop cleanly after this long")
    p.add_argument("--eval-interval", type=int, default=250)
    p.add_argument("--checkpoint-interval", type=int, default=250)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the forward pass (CPU)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--export", type=Path, default=None, help="write the trained model here in HF GPT-2 format")
    p.add_argument("--export-dtype", choices=["float32", "float16"], default="float16")
    p.add_argument("--no-progress", action="store_true")
