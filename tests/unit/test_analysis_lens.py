"""Logit lens on a tiny random GPT-2: the final lens is the model's output, bit for bit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer_explainer import InputError
from transformer_explainer.analysis import lens_logits, logit_lens, residual_names

TEXT = "The cat sat on the mat, and then the cat slept."


@pytest.fixture(scope="module")
def trace(tiny_model):
    return tiny_model.trace(TEXT)


def test_last_layer_lens_equals_logits_exactly(tiny_model, trace):
    L = tiny_model.config.n_layer
    assert torch.equal(lens_logits(tiny_model, trace, L), trace["logits"])


def test_each_layer_reads_its_residual_through_ln_final_and_unembedding(tiny_model, trace):
    m = tiny_model
    w, b, W_U = m.weight("ln_final.w"), m.weight("ln_final.b"), m.weight("unembed.W_U")
    for layer, name in enumerate(residual_names(m.config.n_layer)):
        expected = F.layer_norm(trace[name], w.shape, w, b, m.config.layer_norm_epsilon) @ W_U
        torch.testing.assert_close(lens_logits(m, trace, layer), expected, atol=1e-4, rtol=1e-4)


def test_subset_of_positions_matches_full_lens(tiny_model, trace):
    full = lens_logits(tiny_model, trace, 1)
    torch.testing.assert_close(lens_logits(tiny_model, trace, 1, [0, -1]), full[[0, -1]], atol=1e-5, rtol=1e-5)


def test_logit_lens_tables(tiny_model, trace):
    L, k = tiny_model.config.n_layer, 4
    lens = logit_lens(tiny_model, trace, top=k)
    P = trace.n_tokens
    assert lens.top_ids.shape == (L + 1, P, k) and lens.target_rank.shape == (L + 1, P)
    assert lens.labels[0] == "embeddings" and len(lens.names) == L + 1
    # the finally predicted token is the top of the last row, with the real output's probabilities
    assert lens.target_ids == trace["logits"].argmax(-1).tolist()
    assert (lens.target_rank[L] == 1).all()
    probs = torch.softmax(trace["logits"], -1)
    top = probs.topk(k, -1)
    assert torch.equal(lens.top_ids[L], top.indices)
    torch.testing.assert_close(lens.top_probs[L], top.values)
    torch.testing.assert_close(lens.target_prob[L], probs.max(-1).values)
    assert (lens.top_probs[..., :-1] >= lens.top_probs[..., 1:]).all()
    assert lens.top_tokens(L, -1)[0][0] == tiny_model.tokenizer.token_text(lens.target_ids[-1])


def test_chosen_targets_rank_like_a_direct_count(tiny_model, trace):
    target = [tiny_model.tokenizer.encode(" cat")[0]]
    lens = logit_lens(tiny_model, trace, positions=[-1], target_ids=target)
    for layer in range(tiny_model.config.n_layer + 1):
        logits = lens_logits(tiny_model, trace, layer, [-1])[0]
        assert int(lens.target_rank[layer, 0]) == int((logits > logits[target[0]]).sum()) + 1
    d = lens.to_dict()
    assert d["targets"][0]["token"] == " cat" and len(d["layers"]) == tiny_model.config.n_layer + 1


def test_bad_requests(tiny_model, trace):
    with pytest.raises(InputError):
        lens_logits(tiny_model, trace, tiny_model.config.n_layer + 1)
    with pytest.raises(InputError):
        logit_lens(tiny_model, trace, positions=[trace.n_tokens])
    with pytest.raises(InputError):
        logit_lens(tiny_model, trace, positions=[0], target_ids=[1, 2])
