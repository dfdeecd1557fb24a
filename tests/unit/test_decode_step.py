"""The lean generation step (`models/decode.py`) computes what the decoder's forward computes for one new
position after a KV cache, bit for bit: the same logits and the same cached keys and values, on every family
(GPT-2, Llama, Qwen2, Mistral, Qwen3, Gemma 3 with local layers whose window the text outgrows, and the
mixtures of experts Mixtral, Qwen3-MoE and OLMoE, whose QK-norm spans all heads), in float32
and bfloat16."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from transformer_explainer import load_model
from transformer_explainer.models.decode import DecodeStep
from transformer_explainer.models.kv_cache import KVCache

PROMPT, STEPS = 9, 12


def _ids(n: int, vocab: int) -> list[int]:
    return torch.randint(2, vocab, (n,), generator=torch.Generator().manual_seed(3)).tolist()


def _same_steps(folder: Path, dtype: str) -> None:
    model = load_model(str(folder), allow_download=False, dtype=dtype)
    net = model.net
    ids = _ids(PROMPT + STEPS, net.config.vocab_size)
    with torch.inference_mode():
        lean_cache, ref_cache = KVCache(capacity=PROMPT + STEPS), KVCache(capacity=PROMPT + STEPS)
        prompt = torch.tensor([ids[:PROMPT]])
        net(prompt, cache=lean_cache, logits_for="last")
        net(prompt, cache=ref_cache, logits_for="last")
        step = DecodeStep(net, lean_cache)
        for t in ids[PROMPT:]:
            lean = step(t)
            ref = net(torch.tensor([[t]]), cache=ref_cache, logits_for="last")[0, -1]
            assert lean.shape == (net.config.vocab_size,) and lean.dtype == ref.dtype
            assert torch.equal(lean, ref)
    assert lean_cache.length == ref_cache.length == PROMPT + STEPS
    for (k, v), (rk, rv) in zip(lean_cache.layers, ref_cache.layers, strict=True):
        assert torch.equal(k, rk) and torch.equal(v, rv)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpt2_step_equals_forward(tiny_gpt2_dir: Path, dtype: str) -> None:
    _same_steps(tiny_gpt2_dir, dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rotary_family_step_equals_forward(decoder_family_dir: Path, dtype: str) -> None:
    _same_steps(decoder_family_dir, dtype)


def test_gemma_window_is_outgrown(decoder_family_dir: Path) -> None:
    """The steps above reach past the local layers' window, so the windowed mask path is compared too."""
    cfg = load_model(str(decoder_family_dir), allow_download=False).config
    if cfg.sliding_window is not None and cfg.layer_types is not None:
        assert cfg.sliding_window < PROMPT + STEPS


def test_refuses_training_mode_and_a_full_context(tiny_gpt2_dir: Path) -> None:
    model = load_model(str(tiny_gpt2_dir), allow_download=False)
    net = model.net
    with pytest.raises(ValueError, match="eval mode"):
        DecodeStep(net.train(), KVCache())
    net.eval()
    n = net.config.block_size
    with torch.inference_mode():
        cache = KVCache(capacity=n)
        net(torch.tensor([[5] * n]), cache=cache, logits_for="last")
        with pytest.raises(ValueError, match="exceed the model's context"):
            DecodeStep(net, cache)(5)
