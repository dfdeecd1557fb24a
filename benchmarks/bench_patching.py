"""Activation patching against TransformerLens, measured in one run (issue 24's goal: the full `resid_pre` grid of a
16-token pair on the GPT-2-small shape in at most the time TransformerLens takes for `get_act_patch_resid_pre`).

    /path/to/venv-with-bench-extra/bin/python benchmarks/bench_patching.py [--tokens 16] [--reps 3] [--threads 2]

GPT-2 small's shape with random weights (saved in HF format by transformers, loaded by both). TransformerLens's
HookedTransformer gets the same weights through its own GPT-2 conversion, unprocessed (no LayerNorm folding or
centring), so both compute the same function; the grids are compared too (max difference printed). The two run
interleaved, round by round, and the medians are printed with their ratio. Also printed: the other grids
(attn_out, mlp_out, heads) against TransformerLens's equivalents.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from fixtures import gpt2_small_shape

from transformer_explainer import load_model


def hooked_transformer(folder: Path):
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(folder).eval()
    c = hf.config
    cfg = HookedTransformerConfig(
        n_layers=c.n_layer, d_model=c.n_embd, n_ctx=c.n_positions, d_head=c.n_embd // c.n_head, n_heads=c.n_head,
        d_mlp=4 * c.n_embd, d_vocab=c.vocab_size, act_fn="gelu_new", normalization_type="LN",
        eps=c.layer_norm_epsilon, device="cpu")
    tl = HookedTransformer(cfg)
    tl.load_and_process_state_dict(convert_gpt2_weights(hf, cfg), fold_ln=False, center_writing_weights=False,
                                   center_unembed=False, fold_value_biases=False)
    return tl.eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "te-bench-gpt2-small")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformer_lens import patching

    folder = gpt2_small_shape(args.folder)
    ours = load_model(str(folder), allow_download=False)
    if ours.config.activation != "gelu_new":
        raise SystemExit(f"expected GPT-2's gelu_new, the checkpoint has {ours.config.activation}")
    tl = hooked_transformer(folder)
    g = torch.Generator().manual_seed(0)
    clean = torch.randint(0, ours.config.vocab_size, (args.tokens,), generator=g).tolist()
    corrupted = list(clean)
    corrupted[args.tokens // 3] = (clean[args.tokens // 3] + 1) % ours.config.vocab_size
    d = ours.last_logits(clean) - ours.last_logits(corrupted)
    a, w = int(torch.argmax(d)), int(torch.argmin(d))

    clean_t, corr_t = torch.tensor([clean]), torch.tensor([corrupted])
    with torch.no_grad():
        _, clean_cache = tl.run_with_cache(clean_t)
        base = tl(corr_t)[0, -1]
        top = tl(clean_t)[0, -1]
    m_corr, m_clean = float(base[a] - base[w]), float(top[a] - top[w])

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return ((logits[0, -1, a] - logits[0, -1, w]) - m_corr) / (m_clean - m_corr)

    tl_fns = {"resid_pre": patching.get_act_patch_resid_pre, "attn_out": patching.get_act_patch_attn_out,
              "mlp_out": patching.get_act_patch_mlp_out, "heads": patching.get_act_patch_attn_head_out_all_pos}
    print(f"GPT-2-small shape, random weights, {args.tokens}-token pair, threads {torch.get_num_threads()}, "
          f"{args.reps} rounds, interleaved")
    print(f"{'grid':10} {'ours ms':>10} {'TL ms':>10} {'ours/TL':>8} {'max |diff|':>11}")
    for kind, fn in tl_fns.items():
        t_ours, t_tl, diff = [], [], 0.0
        for _ in range(args.reps):
            t0 = time.perf_counter()
            res = ours.patch(clean, corrupted, a, w, what=(kind,))
            t_ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with torch.no_grad():
                ref = fn(tl, corr_t, clean_cache, metric)
            t_tl.append(time.perf_counter() - t0)
            diff = float((res.grids[kind] - ref.float()).abs().max())
        mo, mt = statistics.median(t_ours) * 1e3, statistics.median(t_tl) * 1e3
        print(f"{kind:10} {mo:10.0f} {mt:10.0f} {mo / mt:8.2f} {diff:11.2e}")


if __name__ == "__main__":
    main()
