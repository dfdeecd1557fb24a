"""Embedding explorer: neighbours, analogy arithmetic and PCA against direct computations."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer_explainer import InputError
from transformer_explainer.analysis import analogy, nearest_tokens, project_2d, token_id


def test_token_ids(tiny_model):
    king = tiny_model.tokenizer.encode(" king")
    assert len(king) == 1 and token_id(tiny_model, " king") == king[0]
    assert token_id(tiny_model, "Ġking") == king[0]  # the raw vocabulary entry
    assert token_id(tiny_model, "<|endoftext|>") == tiny_model.tokenizer.eos_id()
    assert token_id(tiny_model, 42) == 42
    for bad in ("", " antidisestablishmentarianism", -1, tiny_model.config.vocab_size):
        with pytest.raises(InputError):
            token_id(tiny_model, bad)


def test_analogy_equals_direct_computation(tiny_model):
    W = tiny_model.weight("embed.W_E")
    k, m, w = (tiny_model.tokenizer.encode(t)[0] for t in (" king", " man", " woman"))
    res = analogy(tiny_model, [" king", " woman"], [" man"], n=5)
    v = W[k] - W[m] + W[w]
    torch.testing.assert_close(res.vector, v)
    sims = F.cosine_similarity(v.unsqueeze(0), W, dim=-1)
    sims[[k, m, w]] = -2.0  # the inputs are left out
    top = sims.topk(5)
    assert [nb.id for nb in res.neighbours] == top.indices.tolist()
    torch.testing.assert_close(torch.tensor([nb.similarity for nb in res.neighbours]), top.values)
    kept = analogy(tiny_model, [" king", " woman"], [" man"], n=3, exclude_inputs=False)
    assert kept.neighbours[0].similarity >= res.neighbours[0].similarity
    d = res.to_dict(tiny_model.tokenizer.token_text)
    assert d["positive"][0]["token"] == " king" and d["negative"][0]["id"] == m


def test_nearest_tokens(tiny_model):
    tid = token_id(tiny_model, " cat")
    near = nearest_tokens(tiny_model, " cat", n=4)
    assert tid not in [nb.id for nb in near] and len(near) == 4
    assert [nb.similarity for nb in near] == sorted((nb.similarity for nb in near), reverse=True)
    me = nearest_tokens(tiny_model, " cat", n=1, include_self=True)[0]
    assert me.id == tid and me.similarity == pytest.approx(1.0, abs=1e-5)
    by_vector = nearest_tokens(tiny_model, tiny_model.weight("embed.W_E")[tid], n=1)
    assert by_vector[0].id == tid


def test_pca_of_three_tokens_keeps_their_geometry(tiny_model):
    words = [" cat", " dog", " car"]
    proj = project_2d(tiny_model, words)
    assert proj.coords.shape == (3, 2) and proj.tokens == words
    # three points span a plane: two components hold all their variance and all their distances
    assert float(proj.explained_variance.sum()) == pytest.approx(1.0, abs=1e-5)
    X = tiny_model.weight("embed.W_E")[proj.ids]
    torch.testing.assert_close(torch.cdist(proj.coords, proj.coords), torch.cdist(X, X), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(proj.coords.mean(0), torch.zeros(2), atol=1e-5, rtol=0)
    again = project_2d(tiny_model, words)
    assert torch.equal(again.coords, proj.coords)
    with pytest.raises(InputError):
        project_2d(tiny_model, [" cat"])
