"""The GPU check: the engine on a GPU against itself on the CPU and against transformers on the same GPU.

    python3 benchmarks/gpu_check.py [--device cuda|cuda:N|cpu] [--small] [--models gpt2 smollm2 qwen3]

One short run (under 5 minutes on an H200) that builds its own random-weight fixtures with transformers:
GPT-2 small's shape, SmolLM2-135M's (a Llama: 9 query heads on 3 key/value heads, tied) and Qwen3-0.6B's
(QK-norm, heads of width 128); `--small` builds 2-layer narrow ones (for a CPU run that only shows the
script works end to end). For each it prints:
  parity     every intermediate of one float32 trace on the device against the CPU's, the largest relative
             difference per kind of value (max |device - cpu| / max |cpu| over the finite entries; masked -inf
             entries must agree), which must be within 1e-4; and the fast path's logits
  speed      the trace and the fast forward (tokens/s) and greedy generation (new tokens/s) against
             transformers on the same device (eager attention with every output for the trace, its default
             attention for the forward, `generate` with its cache), and the ratios ours / theirs
  memory     peak GPU memory of our trace, of transformers' traced forward, of each generation
  split      the model placed by accelerate's device map with a GPU budget of half its weights (the first
             blocks on the GPU, the rest on the CPU), where each part went, and its trace's parity and speed
The package is imported from src/ (the GPU machine has torch, transformers and accelerate, not the web
server's packages; nothing here imports them). A device that is not there is refused in one line.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from transformer_explainer.devices import resolve_device  # noqa: E402
from transformer_explainer.engine import load_model  # noqa: E402
from transformer_explainer.errors import ExplainerError  # noqa: E402
from transformer_explainer.sampling import SamplingParams  # noqa: E402

TOLERANCE = 1e-4
# name -> (transformers model_type, config fields): the published models' shapes, or narrow 2-layer ones
SHAPES = {
    "gpt2": ("gpt2", dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257),
             dict(n_layer=2, n_head=4, n_embd=64, n_positions=256, vocab_size=2048)),
    "smollm2": ("llama", dict(num_hidden_layers=30, hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                              intermediate_size=1536, vocab_size=49152, max_position_embeddings=8192,
                              rope_theta=100000.0, tie_word_embeddings=True),
                dict(num_hidden_layers=2, hidden_size=96, num_attention_heads=6, num_key_value_heads=2,
                     intermediate_size=256, vocab_size=2048, max_position_embeddings=256, tie_word_embeddings=True)),
    "qwen3": ("qwen3", dict(num_hidden_layers=28, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8,
                            head_dim=128, intermediate_size=3072, vocab_size=151936, max_position_embeddings=40960,
                            rope_theta=1_000_000.0, tie_word_embeddings=True),
              dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   intermediate_size=256, vocab_size=2048, max_position_embeddings=256, tie_word_embeddings=True)),
}


def build_fixture(name: str, small: bool, folder: Path) -> Path:
    """A random-weight checkpoint of the shape `name` in HF format (float32), with a small BPE tokenizer trained
    here (the checks run on token ids)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    model_type, full, narrow = SHAPES[name]
    torch.manual_seed(0)
    extra = {} if model_type == "gpt2" else dict(rms_norm_eps=1e-6, initializer_range=0.05)
    cfg = AutoConfig.for_model(model_type, bos_token_id=1, eos_token_id=0, **(narrow if small else full), **extra)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # norm scales and biases away from 1 and 0, which would hide a skipped one
        for pname, p in model.named_parameters():
            if pname.endswith("bias"):
                p.normal_(0, 0.02)
            elif "norm" in pname or ".ln_" in pname:
                p.normal_(1.0, 0.1)
    model.save_pretrained(folder)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(["the cat sat on the mat", "a GPU check of every intermediate"] * 8, trainer)
    tok.save(str(folder / "tokenizer.json"))
    return folder


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, reps: int) -> float:
    """Median seconds of `fn` over `reps` runs, after one warm-up."""
    fn()
    sync(device)
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync(device)
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def peak_mb(fn, device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    sync(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2**20


def kind_of(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[2:]) if parts[0] == "blocks" else name


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| over the entries finite in both; inf where the non-finite entries differ."""
    a, b = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(fa, fb) or not torch.equal(a[~fa], b[~fb]):
        return float("inf")
    if not fa.any():
        return 0.0
    scale = b[fb].abs().max().item()
    return (a[fa] - b[fb]).abs().max().item() / max(scale, 1e-30)


def parity(trace, ref) -> dict[str, float]:
    worst: dict[str, float] = {}
    for name in ref.names():
        k = kind_of(name)
        worst[k] = max(worst.get(k, 0.0), rel_diff(trace[name], ref[name]))
    return worst


def print_parity(worst: dict[str, float], indent: str = "    ") -> bool:
    ok = all(v <= TOLERANCE for v in worst.values())
    items = sorted(worst.items(), key=lambda kv: -kv[1])
    print(f"{indent}{len(worst)} kinds, largest relative difference {items[0][1]:.2e} ({items[0][0]}): "
          f"{'within' if ok else 'OUTSIDE'} {TOLERANCE:g}")
    for k, v in items[:8]:
        print(f"{indent}  {k:<28} {v:.2e}{'' if v <= TOLERANCE else '  <-- over'}")
    return ok


def check_model(name: str, args: argparse.Namespace, device: torch.device, work: Path) -> bool:
    from transformers import AutoModelForCausalLM

    t0 = time.perf_counter()
    folder = build_fixture(name, args.small, work / name)
    cpu = load_model(str(folder), allow_download=False, device="cpu")
    ours = load_model(str(folder), allow_download=False, device=device)
    c = ours.config
    params = ours.net.num_params()
    print(f"\n== {name} shape: {c.model_type}, {c.n_layer} layers, d_model {c.n_embd}, {c.n_head} heads "
          f"({c.n_kv_heads} key/value), vocabulary {c.vocab_size}, {params / 1e6:.1f}M parameters; built and loaded "
          f"in {time.perf_counter() - t0:.1f} s; ours on {ours.describe_devices()}")
    rng = random.Random(0)
    T_par, T, prompt, new = (32, 64, 8, 16) if args.small else (128, 512, 32, 64)
    ids = [rng.randrange(2, c.vocab_size) for _ in range(T)]

    # -- parity ------------------------------------------------------------------------------------------
    trace, ref = ours.trace_ids(ids[:T_par]), cpu.trace_ids(ids[:T_par])
    print(f"  parity of a {T_par}-token float32 trace, {device} against cpu:")
    ok = print_parity(parity(trace, ref))
    fast = rel_diff(ours.last_logits(ids[:T_par]), cpu.last_logits(ids[:T_par]))
    print(f"    fast path (fused attention) logits: {fast:.2e}")
    ok = ok and fast <= TOLERANCE
    del trace, ref

    # -- speed and memory against transformers -------------------------------------------------------------
    hf_eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").to(device).eval()
    hf_fast = AutoModelForCausalLM.from_pretrained(folder).to(device).eval()
    x = torch.tensor([ids], device=device)
    reps = 3

    def hf_trace():
        with torch.inference_mode():
            hf_eager(x, output_attentions=True, output_hidden_states=True)

    def hf_forward():
        with torch.inference_mode():
            hf_fast(x, logits_to_keep=1)

    rows = [("trace", lambda: ours.trace_ids(ids), hf_trace, T),
            ("forward", lambda: ours.last_logits(ids), hf_forward, T)]
    print(f"  speed at {T} tokens (tokens/s; median of {reps}):      ours     transformers   ours/theirs")
    for label, mine, theirs, n in rows:
        a, b = timed(mine, device, reps), timed(theirs, device, reps)
        print(f"    {label:<8} {n / a:>14,.0f} {n / b:>16,.0f} {b / a:>12.2f}")
    greedy = SamplingParams(temperature=0)
    p_ids = ids[:prompt]
    px = torch.tensor([p_ids], device=device)

    def our_gen():
        return list(ours.generate_ids(p_ids, new, greedy, stop_at_eos=False))

    def hf_gen():
        with torch.inference_mode():
            return hf_fast.generate(px, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                    pad_token_id=0)[0, prompt:].tolist()

    a, b = timed(our_gen, device, 2), timed(hf_gen, device, 2)
    same = sum(int(t.id == u) for t, u in zip(our_gen(), hf_gen(), strict=False))
    print(f"    generate {new / a:>14,.1f} {new / b:>16,.1f} {b / a:>12.2f}   ({new} new tokens after {prompt}; "
          f"{same}/{new} the same greedy tokens as transformers)")
    mem = {"our trace": peak_mb(lambda: ours.trace_ids(ids), device), "transformers' traced forward": peak_mb(
        hf_trace, device), "our generation": peak_mb(our_gen, device), "transformers' generation": peak_mb(
        hf_gen, device)}
    if device.type == "cuda":
        print("  peak GPU memory above the weights (MiB): " + ", ".join(f"{k} {v:,.0f}" for k, v in mem.items()))

    # -- a real split: the first blocks on the GPU, the rest on the CPU (without a GPU: the map's code path, with
    # every part on the CPU) -----------------------------------------------------------------------------------
    weights = sum(p.numel() * p.element_size() for p in cpu.net.parameters())
    budget = {device.index: f"{weights // 2 / 2**20:.0f}MiB", "cpu": "64GiB"} if device.type == "cuda" else {
        "cpu": "64GiB"}
    t0 = time.perf_counter()
    split = load_model(str(folder), allow_download=False, device_map="auto", max_memory=budget)
    print(f"  split with max_memory {budget}, loaded in {time.perf_counter() - t0:.1f} s: {split.describe_devices()}")
    trace, ref = split.trace_ids(ids[:T_par]), cpu.trace_ids(ids[:T_par])
    ok = print_parity(parity(trace, ref)) and ok
    del trace, ref
    a = timed(lambda: split.trace_ids(ids), device, 2)
    g = timed(lambda: list(split.generate_ids(p_ids, new, greedy, stop_at_eos=False)), device, 1)
    same = [t.id for t in split.generate_ids(p_ids, new, greedy, stop_at_eos=False)] == [t.id for t in our_gen()]
    print(f"    trace {T / a:,.0f} tokens/s, generation {new / g:,.1f} tokens/s; greedy tokens "
          f"{'equal to' if same else 'DIFFER from'} the model all on {device}")
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (to see it run end to end)")
    p.add_argument("--small", action="store_true", help="narrow 2-layer fixtures (a CPU run)")
    p.add_argument("--models", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    args = p.parse_args(argv)
    try:
        device = resolve_device(args.device)
    except ExplainerError as e:
        print(f"gpu_check: error: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    torch.manual_seed(0)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"
    print(f"gpu_check on {device} ({where}); torch {torch.__version__}; float32 matmuls: TF32 "
          f"{'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}; "
          f"web server imported: {any(m in sys.modules for m in ('fastapi', 'uvicorn', 'starlette'))}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        for name in args.models:
            results[name] = check_model(name, args, device, Path(tmp))
    print(f"\nparity within {TOLERANCE:g}: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in results.items())
          + f"; {time.perf_counter() - t0:.0f} s in all")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
