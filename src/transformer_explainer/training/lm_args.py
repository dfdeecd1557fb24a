"""The arguments of `transformer-explainer train lm`, apart from the training code (and torch), so
that building the CLI's parser imports neither."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cli_args import fraction, int_range, non_negative_float, non_negative_int, positive_float, positive_int


def add_lm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", type=Path, required=True,
                   help="folder with train.txt and valid.txt (and optionally general_eval.txt)")
    p.add_argument("--tokenizer", type=Path, required=True,
                   help="folder with tokenizer.json; trained there from train.txt if missing")
    p.add_argument("--vocab-size", type=int_range(257), default=8192,
                   help="when training a tokenizer: 256 byte tokens, the merges and <|endoftext|> (default 8192)")
    p.add_argument("--out", type=Path, required=True, help="run folder: checkpoints and run.json; resumes if present")
    p.add_argument("--family", choices=["gpt2", "llama", "mixtral", "qwen3_5_text"], default="gpt2",
                   help="gpt2: LayerNorm, learned positions, GELU MLP; llama: RMSNorm, RoPE, gated MLP, "
                        "grouped-query attention, no biases (saved as HF LlamaForCausalLM); mixtral: llama's "
                        "attention and a mixture of experts in place of the MLP (saved as HF MixtralForCausalLM); "
                        "qwen3_5_text: Qwen3.5's hybrid, Gated DeltaNet (linear attention) layers with a full "
                        "attention layer every --full-attention-interval, built and saved by transformers "
                        "(Qwen3_5ForCausalLM)")
    p.add_argument("--n-kv-head", type=positive_int, default=None,
                   help="llama, mixtral, qwen3_5_text: key/value heads (grouped-query attention); default one per "
                        "query head")
    p.add_argument("--full-attention-interval", type=positive_int, default=4,
                   help="qwen3_5_text: every this many layers, the last is full attention, the others Gated "
                        "DeltaNet (default 4, Qwen3.5's)")
    p.add_argument("--linear-key-heads", type=positive_int, default=4,
                   help="qwen3_5_text: the Gated DeltaNet's query/key heads (default 4)")
    p.add_argument("--linear-value-heads", type=positive_int, default=8,
                   help="qwen3_5_text: the Gated DeltaNet's value heads, a multiple of --linear-key-heads "
                        "(default 8)")
    p.add_argument("--decay-init", choices=["transformers", "mamba2"], default="transformers",
                   help="qwen3_5_text: the Gated DeltaNet decay's starting values. transformers: its own "
                        "(dt_bias 1, A in (0.01, 16): most heads keep almost nothing from one token to the next); "
                        "mamba2: the Gated DeltaNet paper's code's (A in (0, 16), dt in (0.001, 0.1): each head "
                        "keeps 20-100 %% of its memory per token)")
    p.add_argument("--linear-head-dim", type=positive_int, default=32,
                   help="qwen3_5_text: the width of each Gated DeltaNet key and value head (default 32)")
    p.add_argument("--n-inner", type=positive_int, default=None,
                   help="MLP hidden width (mixtral: each expert's); default 4 x n_embd (gpt2), 8/3 x n_embd rounded "
                        "to 64 (llama), n_embd (mixtral)")
    p.add_argument("--n-experts", type=positive_int, default=8, help="mixtral: experts per block (default 8)")
    p.add_argument("--top-k", type=positive_int, default=2, help="mixtral: experts each token is sent to (default 2)")
    p.add_argument("--aux-loss-coef", type=non_negative_float, default=0.01,
                   help="mixtral: weight of the load-balancing loss added to the training loss, which keeps the "
                        "router from sending every token to the same few experts (default 0.01)")
    p.add_argument("--rope-theta", type=positive_float, default=10000.0, help="llama: base of the rotary frequencies")
    p.add_argument("--n-layer", type=positive_int, default=6, help="blocks (default 6)")
    p.add_argument("--n-head", type=positive_int, default=8, help="attention heads (default 8)")
    p.add_argument("--n-embd", type=positive_int, default=256,
                   help="d_model, the residual stream's width, a multiple of --n-head (default 256)")
    p.add_argument("--block-size", type=positive_int, default=256, help="context length in tokens (default 256)")
    p.add_argument("--batch-size", type=positive_int, default=16, help="sequences per step (default 16)")
    p.add_argument("--lr", type=positive_float, default=2e-3, help="peak learning rate (default 2e-3)")
    p.add_argument("--min-lr", type=non_negative_float, default=1e-4, help="end of the cosine decay (default 1e-4)")
    p.add_argument("--warmup", type=non_negative_int, default=200, help="linear warmup steps (default 200)")
    p.add_argument("--max-steps", type=positive_int, default=4000, help="optimizer steps in all (default 4000)")
    p.add_argument("--max-minutes", type=positive_float, default=None, help="stop cleanly after this long")
    p.add_argument("--eval-interval", type=positive_int, default=250, help="steps between evaluations (default 250)")
    p.add_argument("--checkpoint-interval", type=positive_int, default=250,
                   help="steps between checkpoints (default 250)")
    p.add_argument("--dropout", type=fraction, default=0.0, help="gpt2 only: P_drop, 0 or more and below 1")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the forward pass (CPU)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=non_negative_int, default=1337,
                   help="seed of the initial weights and of the batches drawn (default 1337)")
    p.add_argument("--export", type=Path, default=None,
                   help="write the trained model here as an HF folder with a model card: GPT2LMHeadModel for "
                        "--family gpt2, LlamaForCausalLM for --family llama, MixtralForCausalLM for --family "
                        "mixtral, Qwen3_5ForCausalLM for --family qwen3_5_text")
    p.add_argument("--export-dtype", choices=["float32", "float16"], default="float16",
                   help="the weights' type in the --export folder (default float16: half the size)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (for logs)")
