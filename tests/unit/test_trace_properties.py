"""Properties every trace must have, whatever the weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from transformer_explainer.names import activation_names, weight_names

TEXT = "Data visualization empowers users to see patterns in data."


@pytest.fixture(scope="module")
def trace(tiny_model):
    return tiny_model.trace(TEXT)


def test_names_and_shapes(tiny_model, trace):
    cfg = tiny_model.config
    T, H, D, Dh = trace.n_tokens, cfg.n_head, cfg.n_embd, cfg.head_dim
    assert trace.names() == activation_names(cfg.n_layer)
    shapes = trace.shapes()
    assert shapes["embed.token"] == (T, D)
    assert shapes["blocks.1.attn.pattern"] == (H, T, T)
    assert shapes["blocks.1.attn.q"] == (H, T, Dh)
    assert shapes["blocks.0.mlp.pre"] == (T, cfg.d_mlp)
    assert shapes["blocks.0.ln1.mean"] == (T,)
    assert shapes["logits"] == (T, cfg.vocab_size)
    with pytest.raises(KeyError):
        trace["blocks.9.attn.pattern"]
    with pytest.raises(KeyError):
        trace["blocks.0.attn.nonsense"]


def test_pattern_is_a_causal_distribution(trace, tiny_model):
    for i in range(tiny_model.config.n_layer):
        p = trace[f"blocks.{i}.attn.pattern"]
        torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]), atol=1e-6, rtol=0)
        upper = torch.triu(torch.ones(p.shape[-2:], dtype=torch.bool), diagonal=1)
        assert (p[:, upper] == 0).all()
        assert (p >= 0).all()


def test_score_stages(trace, tiny_model):
    scores = trace["blocks.0.attn.scores"]
    q, k = trace["blocks.0.attn.q"], trace["blocks.0.attn.k"]
    torch.testing.assert_close(scores, q @ k.transpose(-1, -2), atol=1e-5, rtol=0)
    scaled = trace["blocks.0.attn.scaled_scores"]
    torch.testing.assert_close(scaled, scores / math.sqrt(tiny_model.config.head_dim))
    masked = trace["blocks.0.attn.masked_scores"]
    upper = torch.triu(torch.ones(masked.shape[-2:], dtype=torch.bool), diagonal=1)
    assert torch.isinf(masked[:, upper]).all() and (masked[:, upper] < 0).all()
    torch.testing.assert_close(torch.softmax(masked, -1), trace["blocks.0.attn.pattern"], atol=1e-6, rtol=0)


def test_residual_stream_links(trace, tiny_model):
    L = tiny_model.config.n_layer
    torch.testing.assert_close(trace["embed.sum"], trace["embed.token"] + trace["embed.position"])
    for i in range(L - 1):
        assert torch.equal(trace[f"blocks.{i}.resid_post"], trace[f"blocks.{i + 1}.resid_pre"])
    for i in range(L):
        torch.testing.assert_close(trace[f"blocks.{i}.resid_mid"],
                                   trace[f"blocks.{i}.resid_pre"] + trace[f"blocks.{i}.attn_out"])
        torch.testing.assert_close(trace[f"blocks.{i}.resid_post"],
                                   trace[f"blocks.{i}.resid_mid"] + trace[f"blocks.{i}.mlp_out"])


def test_heads_recombine_into_attn_out(trace, tiny_model):
    for i in range(tiny_model.config.n_layer):
        z = trace[f"blocks.{i}.attn.z"]  # (H, T, Dh)
        W_O, b_O = tiny_model.weight(f"blocks.{i}.attn.W_O"), tiny_model.weight(f"blocks.{i}.attn.b_O")
        per_head = torch.einsum("htd,hdm->htm", z, W_O)  # each head's contribution
        torch.testing.assert_close(per_head.sum(0) + b_O, trace[f"blocks.{i}.attn_out"], atol=1e-5, rtol=0)
        torch.testing.assert_close(trace[f"blocks.{i}.attn.concat"] @ W_O.reshape(-1, W_O.shape[-1]) + b_O,
                                   trace[f"blocks.{i}.attn_out"], atol=1e-5, rtol=0)


def test_qkv_from_weights(trace, tiny_model):
    x = trace["blocks.1.ln1.out"]
    for which in "QKV":
        W, b = tiny_model.weight(f"blocks.1.attn.W_{which}"), tiny_model.weight(f"blocks.1.attn.b_{which}")
        expected = torch.einsum("td,hde->hte", x, W) + b[:, None, :]
        torch.testing.assert_close(trace[f"blocks.1.attn.{which.lower()}"], expected, atol=1e-5, rtol=0)


def test_layernorm_recomputed_from_recorded_stats(trace, tiny_model):
    eps = tiny_model.config.layer_norm_epsilon
    for i in range(tiny_model.config.n_layer):
        for ln, src in (("ln1", "resid_pre"), ("ln2", "resid_mid")):
            x = trace[f"blocks.{i}.{src}"]
            mean, var = trace[f"blocks.{i}.{ln}.mean"], trace[f"blocks.{i}.{ln}.var"]
            torch.testing.assert_close(mean, x.mean(-1))
            torch.testing.assert_close(var, x.var(-1, unbiased=False), atol=1e-6, rtol=1e-5)
            norm = (x - mean[:, None]) / torch.sqrt(var[:, None] + eps)
            torch.testing.assert_close(trace[f"blocks.{i}.{ln}.normalized"], norm, atol=1e-5, rtol=0)
            w, b = tiny_model.weight(f"blocks.{i}.{ln}.w"), tiny_model.weight(f"blocks.{i}.{ln}.b")
            torch.testing.assert_close(trace[f"blocks.{i}.{ln}.out"], norm * w + b, atol=1e-5, rtol=0)


def test_mlp_and_logits_from_weights(trace, tiny_model):
    x = trace["blocks.0.ln2.out"]
    pre = x @ tiny_model.weight("blocks.0.mlp.W_in") + tiny_model.weight("blocks.0.mlp.b_in")
    torch.testing.assert_close(trace["blocks.0.mlp.pre"], pre, atol=1e-5, rtol=0)
    post = 0.5 * pre * (1 + torch.tanh(math.sqrt(2 / math.pi) * (pre + 0.044715 * pre**3)))
    torch.testing.assert_close(trace["blocks.0.mlp.post"], post, atol=1e-5, rtol=0)
    torch.testing.assert_close(trace["logits"], trace["ln_final.out"] @ tiny_model.weight("unembed.W_U"),
                               atol=1e-4, rtol=0)
    torch.testing.assert_close(trace["embed.token"], tiny_model.weight("embed.W_E")[trace.token_ids])


def test_weight_names_all_resolve(tiny_model):
    for name in weight_names(tiny_model.config.n_layer):
        assert tiny_model.weight(name).numel() > 0
    with pytest.raises(KeyError):
        tiny_model.weight("blocks.0.attn.pattern")


def test_fast_path_equals_trace(tiny_model, trace):
    fast = tiny_model.logits(TEXT)
    torch.testing.assert_close(fast, trace["logits"][-1], atol=1e-5, rtol=0)


def test_to_numpy_and_tokens(trace):
    arrays = trace.to_numpy(["blocks.0.attn.pattern", "logits"])
    assert arrays["logits"].dtype == np.float32
    assert "".join(trace.tokens) == TEXT
    assert trace.tokens[1].startswith(" ")  # GPT-2 tokens carry their leading space


def test_patch_changes_downstream(tiny_model):
    ids = tiny_model.encode(TEXT)
    base = tiny_model.trace_ids(ids)

    def zero_head0(z):
        z = z.clone()
        z[:, 0] = 0
        return z

    patched = tiny_model.trace_ids(ids, patches={"blocks.1.attn.z": zero_head0})
    assert (patched["blocks.1.attn.z"][0] == 0).all()
    assert torch.equal(patched["blocks.0.resid_post"], base["blocks.0.resid_post"])
    assert not torch.allclose(patched["logits"], base["logits"])


def test_logits_derived_on_access_equal_the_recorded_ones(tiny_model, trace):
    """A trace computes the last position's logits in the pass and derives every position's on
    access; a patch on `logits` makes the pass record them all. The three agree."""
    assert "logits" not in trace.memory.kept and trace.memory.last_logits is not None
    recorded = tiny_model.trace_ids(trace.token_ids, patches={"logits": lambda x: x})
    assert "logits" in recorded.memory.kept
    torch.testing.assert_close(trace["logits"], recorded["logits"], atol=1e-5, rtol=0)
    torch.testing.assert_close(trace.next_token_logits(), recorded.next_token_logits(), atol=1e-5, rtol=0)
    assert trace["logits"].shape == (trace.n_tokens, tiny_model.config.vocab_size)


@pytest.mark.parametrize("threads", [1, 2])
def test_one_row_products_split_over_threads_equal_f_linear(threads, monkeypatch):
    """`linear` splits a one-row product over the input dimension when the weight is input-major,
    torch has several threads and its BLAS does not split it itself: the same values as `F.linear`
    to float rounding."""
    from transformer_explainer.models import kernels
    from transformer_explainer.models.kernels import _row_chunks, linear

    x1 = torch.randn(1, 1, 768)
    w1 = torch.randn(3072, 768).t().contiguous().t()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:  # with MKL (which spreads one row over the threads itself) nothing is split
        assert _row_chunks(x1, w1) == (1 if threads == 1 or torch.backends.mkl.is_available() else 8)
    finally:
        torch.set_num_threads(before)
    monkeypatch.setattr(kernels, "_BLAS_SPLITS_ONE_ROW", False)  # the split itself, as other BLAS builds take it

    g = torch.Generator().manual_seed(0)
    w = torch.randn(3072, 768, generator=g).t().contiguous().t()  # (out, in), input-major in memory
    b = torch.randn(3072, generator=g)
    x = torch.randn(1, 1, 768, generator=g)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert _row_chunks(x, w) == (1 if threads == 1 else 8)
        assert _row_chunks(torch.randn(2, 768), w) == 1  # several rows: BLAS parallelises those itself
        assert _row_chunks(x, w.contiguous()) == 1  # output-major: nothing to split along
        y = linear(x, w, b)
    finally:
        torch.set_num_threads(before)
    assert y.shape == (1, 1, 3072)
    torch.testing.assert_close(y, torch.nn.functional.linear(x, w, b), atol=1e-4, rtol=1e-5)


def test_a_truncated_trace_equals_the_trace_of_its_tokens(tiny_model):
    """Cutting a trace to its first n tokens gives what tracing those n tokens gives (a causal model's
    first positions do not see the later ones), and continuing it gives the whole text's trace."""
    from transformer_explainer.trace import truncate_trace

    ids = tiny_model.encode("Data visualization empowers users to see what a model computes")
    full = tiny_model.trace_ids(ids)
    for n in (1, 5, len(ids)):
        cut, alone = truncate_trace(full, n), tiny_model.trace_ids(ids[:n])
        assert cut.token_ids == ids[:n] and set(cut.memory.kept) == set(alone.memory.kept)
        for name in alone.memory.kept:
            torch.testing.assert_close(cut[name], alone[name], atol=1e-5, rtol=0, msg=name)
        torch.testing.assert_close(cut.next_token_logits(), alone.next_token_logits(), atol=1e-4, rtol=0)
    continued = tiny_model.extend_trace(truncate_trace(full, 5), ids[5:])
    for name in full.memory.kept:
        torch.testing.assert_close(continued[name], full[name], atol=1e-5, rtol=0, msg=name)
    with pytest.raises(ValueError):
        truncate_trace(full, 0)


@pytest.mark.parametrize("g", [1, 2, 4, 5])
def test_row_summaries_keep_each_rows_columns_up_to_its_own_group(g):
    """A RowSummary's rows are packed in a trace (each row's columns up to its own group): read back, cut to the
    first rows and joined to a continuation's, they are the rows themselves, bit for bit, in about half the bytes."""
    from transformer_explainer.encoding import key_group_sums
    from transformer_explainer.overview import key_sums_at

    T, H = 41, 3
    scores = torch.randn(H, T, T, generator=torch.Generator().manual_seed(g))
    pattern = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    fn = key_sums_at(g)
    rows = fn(pattern)
    assert torch.equal(rows, key_group_sums(pattern, g)) and rows.shape == (H, T, -(-T // g))
    packed = fn.pack(rows, 0)
    assert packed.shape[0] == H and packed.numel() < 0.6 * rows.numel() + H * T
    assert torch.equal(fn.unpack(packed, 0, T), rows)
    for n in (1, g, 17, T):
        assert torch.equal(fn.unpack(fn.first_rows(packed, n), 0, n), rows[:, :n, : -(-n // g)])
    for p in (1, 20, 40):  # a beginning's packed rows, then a continuation's (positions p.., keys 0..T-1)
        joined = torch.cat([fn.pack(fn(pattern[:, :p, :p]), 0), fn.pack(rows[:, p:], p)], dim=-1)
        assert torch.equal(joined, packed)
