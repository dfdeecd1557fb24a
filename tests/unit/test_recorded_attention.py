"""The trace's explicit attention (`Attention.attend`, and `kernels.blocked_attention` for long inputs, as
`kernels.attention_variant` chooses) against the textbook formula, on the paths it takes: one product, or
blocks of queries each against only the keys it may see (long inputs), with and without cached positions,
shared key/value heads, bfloat16, and experiments that patch the scores or the pattern."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_explainer.config import DecoderConfig
from transformer_explainer.models.kernels import _query_blocks, attention_variant, blocked_attention
from transformer_explainer.models.layers import Attention
from transformer_explainer.models.recorder import Recorder


def recorded_attention(q, k, v, rec, softmax_in_float32=False):
    """Attention as a recorded forward pass computes it: the variant `attention_variant` picks, with the
    options of a model whose heads have q's shapes (scores scaled by 1 / sqrt(Dh), no window)."""
    H, Dh, G = q.shape[1], q.shape[3], k.shape[1]
    config = DecoderConfig(model_type="llama", activation="silu", n_head=H, n_kv_heads=G, n_embd=H * Dh,
                           vocab_size=8, block_size=8, n_layer=1)
    attn = Attention(config, 0).eval()
    attn.softmax_in_float32 = softmax_in_float32
    if attention_variant(rec, q.shape[2], k.shape[2], training=False) == "blocked":
        return blocked_attention(q, k, v, rec, scale=attn.attn_scale, softmax_in_float32=softmax_in_float32)
    return attn.attend(q, k, v, rec)


def reference(q, k, v, softmax_in_float32=False):
    """softmax(q k^T / sqrt(Dh) + causal mask) v, one head at a time, in float64."""
    B, H, T, Dh = q.shape
    G, S = k.shape[1], k.shape[2]
    R = H // G
    pattern = torch.zeros(B, H, T, S, dtype=torch.float64)
    z = torch.zeros(B, H, T, Dh, dtype=torch.float64)
    for h in range(H):
        qh, kh, vh = q[:, h].double(), k[:, h // R].double(), v[:, h // R].double()
        scores = qh @ kh.transpose(-1, -2) / math.sqrt(Dh)
        visible = torch.arange(S)[None, :] <= torch.arange(S - T, S)[:, None]
        p = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        pattern[:, h], z[:, h] = p, p @ vh
    return pattern, z


def inputs(H, G, T, S, Dh=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, T, Dh, generator=g) * 2
    k = torch.randn(1, G, S, Dh, generator=g) * 2
    v = torch.randn(1, G, S, Dh, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


@pytest.mark.parametrize(("H", "G", "T", "S"), [
    (4, 4, 7, 7),        # short: one product (GPT-2's heads: one key/value head each)
    (4, 4, 200, 200),    # three uneven blocks
    (6, 2, 517, 517),    # eight blocks, three query heads per key/value head
    (6, 3, 130, 300),    # 130 new positions after 170 cached ones
    (6, 3, 1, 40),       # one generation step
])
def test_matches_the_formula(H, G, T, S):
    assert (_query_blocks(T, S) > 1) == (T >= 128)
    q, k, v = inputs(H, G, T, S)
    rec = Recorder()
    z = recorded_attention(q, k, v, rec)
    want_p, want_z = reference(q, k, v)
    torch.testing.assert_close(rec.values["pattern"].double(), want_p, atol=1e-6, rtol=0)
    torch.testing.assert_close(z.double(), want_z, atol=1e-5, rtol=0)
    assert torch.equal(rec.values["z"], z)
    # above the diagonal, exactly zero (not a tiny number): what softmax gives there
    visible = torch.arange(S)[None, :] <= torch.arange(S - T, S)[:, None]
    assert (rec.values["pattern"][..., ~visible] == 0).all()


def test_blocks_equal_one_product():
    """A patch on the pattern forces the one-product path: an identity patch must change nothing."""
    q, k, v = inputs(6, 2, 300, 300, seed=1)
    blocked, whole = Recorder(), Recorder(patches={"pattern": lambda p: p})
    zb = recorded_attention(q, k, v, blocked)
    zw = recorded_attention(q, k, v, whole)
    torch.testing.assert_close(blocked.values["pattern"], whole.values["pattern"], atol=1e-6, rtol=0)
    torch.testing.assert_close(zb, zw, atol=1e-5, rtol=0)


def test_patches_reach_the_output():
    q, k, v = inputs(4, 2, 256, 256, seed=2)
    # zeroing every score of head 1 makes its pattern uniform over the visible keys
    rec = Recorder(patches={"scores": lambda s: s.index_fill(1, torch.tensor([1]), 0.0)})
    z = recorded_attention(q, k, v, rec)
    p = rec.values["pattern"][0, 1]
    torch.testing.assert_close(p[9, :10], torch.full((10,), 0.1), atol=1e-6, rtol=0)
    torch.testing.assert_close(z[0, 1, 9], v[0, 0, :10].mean(0), atol=1e-5, rtol=0)
    # a patched pattern is what z is computed from
    rec = Recorder(patches={"pattern": lambda p: torch.zeros_like(p)})
    assert recorded_attention(q, k, v, rec).abs().max() == 0


def test_bfloat16_softmax_in_float32():
    """In bfloat16 the scores themselves are rounded (as in transformers), so the pattern is compared
    with the one-product path in the same dtype, and only loosely with the exact formula."""
    q, k, v = inputs(6, 2, 200, 200, dtype=torch.bfloat16, seed=3)
    blocked, whole = Recorder(), Recorder(patches={"pattern": lambda p: p})
    z = recorded_attention(q, k, v, blocked, softmax_in_float32=True)
    zw = recorded_attention(q, k, v, whole, softmax_in_float32=True)
    assert z.dtype == blocked.values["pattern"].dtype == torch.bfloat16
    torch.testing.assert_close(blocked.values["pattern"], whole.values["pattern"], atol=2**-8, rtol=0)
    torch.testing.assert_close(z, zw, atol=2**-6, rtol=0)
    want_p, _ = reference(q, k, v)
    assert (blocked.values["pattern"].double() - want_p).abs().max() < 0.05
