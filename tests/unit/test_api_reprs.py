"""The Python API's results print as a person reads them: a few lines with the top entries and their tokens, not
tensors' first entries in vocabulary order or one line of thousands of characters; `top_changes` rows name their
tokens and still unpack as (id, before, after)."""

from __future__ import annotations

import copy
import pickle

from transformer_explainer import SamplingParams
from transformer_explainer.analysis.ablation import ablate

TEXT = "The cat sat on the mat and the dog"


def _short(r: str, lines: int) -> None:
    assert len(r.splitlines()) <= lines and max(map(len, r.splitlines())) <= 200, r


def test_a_distribution_prints_its_most_likely_tokens(tiny_model) -> None:
    trace = tiny_model.trace(TEXT)
    dist = tiny_model.next_token(trace, SamplingParams(temperature=0.7, top_k=5))
    r = repr(dist)
    _short(r, 8)
    assert "temperature 0.7, top-k 5, no top-p cut" in r and "5 kept" in r
    tt = tiny_model.tokenizer.token_text
    for i in dist.top(5):  # each of the five with its text, id and probability as the tensors hold them
        assert f"{tt(i)!r}" in r and f"id {i:>6}" in r and f"{float(dist.probs[i]):.2%}" in r
    assert "tensor(" not in r


def test_an_attribution_prints_its_largest_contributions(tiny_model) -> None:
    trace = tiny_model.trace(TEXT)
    a = tiny_model.attribute(trace)
    r = repr(a)
    _short(r, 8)
    assert f"= {a.metric:.4f}" in r and f"{len(a.components)} components" in r
    for c in a.ranked(5):
        assert f"{c.label:<20} {c.value:>+9.4f}" in r


def test_top_changes_name_their_tokens_and_unpack_as_before(tiny_model) -> None:
    from transformer_explainer.analysis.ablation import TokenChange

    res = ablate(tiny_model, TEXT, [(1, 0), (1, 1)])
    rows = res.top_changes(3)
    tt = tiny_model.tokenizer.token_text
    for row in rows:
        i, before, after = row  # the old shape
        assert isinstance(row, tuple) and len(row) == 3
        assert (row.id, row.before, row.after) == (i, before, after) and row.token == tt(i)
        assert f"{tt(i)!r} id {i}: {before:.2%} -> {after:.2%}" in repr(row)
        assert pickle.loads(pickle.dumps(row)).token == row.token and copy.deepcopy(row) == row
    assert TokenChange(5, 0.5, 0.25) == (5, 0.5, 0.25)
    r = repr(res)
    _short(r, 8)
    assert "L1H0, L1H1" in r and f"KL {res.kl:.4f}" in r and repr(rows[0]) in r and "Trace(" not in r
