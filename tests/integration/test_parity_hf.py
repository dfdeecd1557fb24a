"""Our GPT-2 against transformers' GPT2LMHeadModel on the same weights: every number must agree."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import make_hf_gpt2
from transformer_explainer import SamplingParams, load_model

TEXTS = [
    "Data visualization empowers users to",
    "The king said, 'Hello!' — and then 数据可视化 🙂 left.",
    "  leading   spaces\tand\nnewlines",
]


def _compare(model, hf, text: str, atol: float) -> None:
    trace = model.trace(text)
    ids = torch.tensor([trace.token_ids])
    with torch.no_grad():
        out = hf(ids, output_hidden_states=True, output_attentions=True)
    L = model.config.n_layer
    torch.testing.assert_close(trace["logits"], out.logits[0], atol=atol, rtol=0)
    for i in range(L):
        torch.testing.assert_close(trace[f"blocks.{i}.resid_pre"], out.hidden_states[i][0], atol=atol, rtol=0)
        torch.testing.assert_close(trace[f"blocks.{i}.attn.pattern"], out.attentions[i][0], atol=atol, rtol=0)
    # HF applies ln_f to its last hidden state
    torch.testing.assert_close(trace["ln_final.out"], out.hidden_states[L][0], atol=atol, rtol=0)


def test_tiny_parity(tiny_model, hf_tiny):
    for text in TEXTS:
        _compare(tiny_model, hf_tiny, text, atol=1e-5)


def test_pytorch_model_bin_loads_the_same(tmp_path: Path, tiny_model):
    folder = make_hf_gpt2(tmp_path / "bin", safetensors=False)
    assert (folder / "pytorch_model.bin").exists() and not (folder / "model.safetensors").exists()
    other = load_model(str(folder), allow_download=False)
    t1, t2 = tiny_model.trace(TEXTS[0]), other.trace(TEXTS[0])
    torch.testing.assert_close(t1["logits"], t2["logits"], atol=0, rtol=0)


def test_greedy_generation_matches_transformers(tiny_model, hf_tiny):
    prompt = "Data visualization empowers users to"
    ids = tiny_model.encode(prompt)
    ours = [t.id for t in tiny_model.generate(prompt, 20, SamplingParams(temperature=0))]
    with torch.no_grad():
        ref = hf_tiny.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False, pad_token_id=50256)
    theirs = ref[0, len(ids):].tolist()
    assert ours == theirs[: len(ours)]
    assert len(ours) == 20 or ours[-1] == 50256


def test_kv_cache_step_trace_equals_full_trace(tiny_model):
    from transformer_explainer.models.kv_cache import KVCache

    ids = tiny_model.encode(TEXTS[0])
    full = tiny_model.trace_ids(ids)
    cache = KVCache()
    tiny_model.trace_ids(ids[:-1], cache=cache)
    step = tiny_model.trace_ids(ids[-1:], cache=cache)
    assert step.start == len(ids) - 1
    for name in ("blocks.1.attn.pattern", "blocks.1.resid_post", "logits", "blocks.0.attn.masked_scores"):
        torch.testing.assert_close(step[name][..., -1:, :] if "attn" in name else step[name],
                                   full[name][..., -1:, :], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_gpt2_small_shape_parity(tmp_path: Path):
    """GPT-2 small's exact shape (12 layers, 12 heads, d_model 768), random weights."""
    from transformers import GPT2LMHeadModel

    folder = make_hf_gpt2(tmp_path / "small", n_layer=12, n_head=12, n_embd=768, n_positions=1024)
    model = load_model(str(folder), allow_download=False)
    hf = GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval()
    _compare(model, hf, TEXTS[1], atol=1e-4 if False else 1e-5)


def test_long_input_parity(tiny_model, hf_tiny):
    """128 tokens: the recorded attention runs in blocks of queries (each only against the keys it
    may see); every pattern and the logits still equal transformers'."""
    ids = torch.randint(0, tiny_model.config.vocab_size, (128,), generator=torch.Generator().manual_seed(3)).tolist()
    trace = tiny_model.trace_ids(ids)
    with torch.no_grad():
        out = hf_tiny(torch.tensor([ids]), output_hidden_states=True, output_attentions=True)
    torch.testing.assert_close(trace["logits"], out.logits[0], atol=1e-5, rtol=0)
    for i in range(tiny_model.config.n_layer):
        torch.testing.assert_close(trace[f"blocks.{i}.attn.pattern"], out.attentions[i][0], atol=1e-5, rtol=0)
        torch.testing.assert_close(trace[f"blocks.{i}.resid_pre"], out.hidden_states[i][0], atol=1e-5, rtol=0)
