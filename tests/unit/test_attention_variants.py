"""Attention's speed variants (`kernels.py`) against its plain maths (`Attention.attend`), with every family's
attention options: one key/value head per query head (GPT-2) or grouped-query heads (Llama, Mistral, Qwen3,
Gemma 3, the mixtures of experts), a local window shorter than the text (Gemma 3's local layers, Mixtral),
scores scaled by 1 / sqrt(query_pre_attn_scalar) (Gemma 3), softmax in float32, in float32 and bfloat16, with
and without cached positions. `attention_variant` is the one place that chooses; each variant it may choose
gives the plain numbers (to float rounding: the blocked and fused ones sum in another order)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig

from tests.conftest import DECODER_FIXTURES
from transformer_explainer.config import DecoderConfig
from transformer_explainer.models.kernels import attention_variant, blocked_attention, fused_attention
from transformer_explainer.models.layers import Attention
from transformer_explainer.models.recorder import Recorder

FAMILIES = ["gpt2", *DECODER_FIXTURES]


def attention(arch: str, layer: int) -> Attention:
    """Block `layer`'s attention of a tiny model of `arch` with its fixture's options (tests/conftest.py)."""
    opts = {k: v for k, v in DECODER_FIXTURES.get(arch, {}).items()
            if k not in ("n_layer", "add_bos", "max_shard_size")}
    if arch == "gpt2":
        hf = AutoConfig.for_model("gpt2", n_layer=4, n_head=4, n_embd=64, n_positions=1024, vocab_size=64)
    else:
        hf = AutoConfig.for_model(arch, num_hidden_layers=4, hidden_size=64, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=64, max_position_embeddings=1024, **opts)
    return Attention(DecoderConfig.from_hf(hf.to_dict()), layer).eval()


def inputs(attn: Attention, T: int, S: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    H, G, Dh = attn.n_head, attn.n_kv_heads, attn.head_dim
    q = torch.randn(2, H, T, Dh, generator=g) * 2
    k = torch.randn(2, G, S, Dh, generator=g) * 2
    v = torch.randn(2, G, S, Dh, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def test_the_fixtures_cover_every_option():
    attns = [attention(arch, layer) for arch in FAMILIES for layer in range(4)]
    assert any(a.n_kv_heads == a.n_head for a in attns) and any(a.n_kv_heads < a.n_head for a in attns)
    assert any(a.window is not None and a.window < 64 for a in attns)
    assert any(a.attn_scale != a.head_dim ** -0.5 for a in attns)  # Gemma 3's query_pre_attn_scalar
    assert any(a.softmax_in_float32 for a in attns) and any(not a.softmax_in_float32 for a in attns)


def test_the_choice():
    """Fused with nothing to record; in blocks for a long recorded text; plain for a short one, or when an
    experiment patches the scores or the pattern, or in training (dropout)."""
    assert attention_variant(None, 300, 300, training=False) == "fused"
    assert attention_variant(Recorder(), 300, 300, training=False) == "blocked"
    assert attention_variant(Recorder(), 127, 127, training=False) == "plain"
    assert attention_variant(Recorder(), 1, 300, training=False) == "plain"  # a generation step
    assert attention_variant(Recorder(), 300, 300, training=True) == "plain"
    for name in ("scores", "pattern"):
        assert attention_variant(Recorder(patches={name: lambda t: t}), 300, 300, training=False) == "plain"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("arch", FAMILIES)
@pytest.mark.parametrize(("T", "S"), [(200, 200), (150, 260)])  # the whole text; 150 positions after 110 cached
def test_the_variants_equal_the_plain_maths(arch, dtype, T, S):
    # bfloat16: each variant rounds its own sums (to the 8 bits of the scores), so only loosely equal; the fused
    # kernel multiplies the values by a pattern it never rounds to bfloat16, the recorded ones by the rounded one
    atol_p, atol_z, atol_fused = (1e-6, 1e-5, 1e-5) if dtype == torch.float32 else (2**-7, 2**-5, 2**-3)
    for layer in (0, 1):  # Gemma 3's local layer, then its global one
        attn = attention(arch, layer)
        q, k, v = inputs(attn, T, S, dtype, seed=layer)
        plain, blocked = Recorder(), Recorder()
        assert attention_variant(blocked, T, S, training=False) == "blocked"
        z = attn.attend(q, k, v, plain)
        zb = blocked_attention(q, k, v, blocked, scale=attn.attn_scale, window=attn.window,
                               softmax_in_float32=attn.softmax_in_float32)
        assert z.dtype == zb.dtype == plain.values["pattern"].dtype == dtype
        torch.testing.assert_close(blocked.values["pattern"], plain.values["pattern"], atol=atol_p, rtol=0)
        torch.testing.assert_close(zb, z, atol=atol_z, rtol=0)
        # the keys a query may not see get exactly 0, in both
        hidden = plain.values["pattern"] == 0
        assert torch.equal(blocked.values["pattern"] == 0, hidden)
        if attn.window is not None:  # the window hides keys here, beyond the causal mask
            assert hidden[..., -1, : S - attn.window].all()
        zf = fused_attention(q, k, v, window=attn.window, scale=attn.scale)
        torch.testing.assert_close(zf, z, atol=atol_fused, rtol=0)


@pytest.mark.parametrize("arch", ["gpt2", "gemma3_text"])
def test_a_generation_step(arch):
    """One new position after a cached prefix: the fused kernel without a mask, the plain maths recorded."""
    attn = attention(arch, 0)
    q, k, v = inputs(attn, 1, 40, torch.float32, seed=3)
    rec = Recorder()
    torch.testing.assert_close(fused_attention(q, k, v, window=attn.window, scale=attn.scale),
                               attn.attend(q, k, v, rec), atol=1e-5, rtol=0)
    torch.testing.assert_close(rec.values["pattern"].sum(-1), torch.ones(2, attn.n_head, 1))
