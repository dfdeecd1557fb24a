"""Greedy and beam search, step traces, teacher forcing vs free running (tiny random models)."""

from __future__ import annotations

import pytest
import torch

from transformer_explainer.errors import InputError
from transformer_explainer.seq2seq.config import PRESETS
from transformer_explainer.seq2seq.decoding import (
    beam_search,
    follow,
    greedy_decode,
    greedy_decode_batch,
    teacher_forced_vs_free_running,
)
from transformer_explainer.seq2seq.engine import Seq2SeqModel
from transformer_explainer.seq2seq.model import EncoderDecoder
from transformer_explainer.seq2seq.tasks import ReverseTask
from transformer_explainer.seq2seq.training import _pad
from transformer_explainer.seq2seq.vocab import BOS, EOS


def tiny_model(seed: int = 0) -> Seq2SeqModel:
    task = ReverseTask(max_len=6, alphabet="abcdef")
    torch.manual_seed(seed)
    net = EncoderDecoder(PRESETS["tiny"].with_vocab(len(task.src_vocab), len(task.tgt_vocab)))
    with torch.no_grad():  # make the end token likely enough that some outputs finish early
        net.generator.proj.bias[EOS] += 1.5
    return Seq2SeqModel.for_task(net, task)


TEXTS = ["abc", "fedcba", "a", "cafe", "bead"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_of_one_is_greedy(seed):
    m = tiny_model(seed)
    for text in TEXTS:
        src = m.encode_source(text)
        g, b = greedy_decode(m, src), beam_search(m, src, 1)
        assert b.output_ids == g.output_ids and b.finished == g.finished
        assert b.score == pytest.approx(g.score, abs=1e-5)


def test_beam_search_never_scores_below_greedy_when_both_finish():
    m = tiny_model(3)
    for text in TEXTS:
        src = m.encode_source(text)
        g, b = greedy_decode(m, src), beam_search(m, src, 4)
        if g.finished and b.finished:
            assert b.score >= g.score - 1e-5
        assert b.beam_steps and all(len(s.alive) <= 4 for s in b.beam_steps)
        for s in b.beam_steps:  # hypotheses kept best first
            scores = [h.score for h in s.alive]
            assert scores == sorted(scores, reverse=True)


def test_decoding_stops_at_end_token_or_length_limit():
    m = tiny_model(0)
    for text in TEXTS:
        r = greedy_decode(m, m.encode_source(text), max_len=4)
        ids = [s.token_id for s in r.steps]
        assert len(ids) <= 4
        assert (ids[-1] == EOS) == r.finished
        assert EOS not in ids[:-1] and EOS not in r.output_ids
        assert r.text == m.tgt_vocab.decode(r.output_ids)
        for s in r.steps:  # the growing decoder input: start token + the tokens chosen so far
            assert s.input_ids == [BOS, *ids[: s.step]]
            assert s.prob == pytest.approx(max(t.prob for t in s.top))  # greedy takes the top token


def test_step_traces_grow_and_agree_with_one_parallel_pass():
    """Step t's trace covers t + 1 decoder positions; by the causal mask, its last row equals row t
    of a single teacher-forced pass over the final output."""
    m = tiny_model(4)
    src = m.encode_source("cafe")
    r = greedy_decode(m, src, record=True)
    full = m.trace(src, r.steps[-1].input_ids + [r.steps[-1].token_id])
    L = m.config.n_decoder_layers
    for s in r.steps:
        tr = s.trace
        assert tr is not None and tr.tgt_ids == s.input_ids
        t = s.step
        for i in range(L):
            sa = tr[f"decoder.blocks.{i}.self_attn.pattern"]
            assert sa.shape[-2:] == (t + 1, t + 1)
            assert (sa.triu(1) == 0).all()
            torch.testing.assert_close(sa[:, -1], full[f"decoder.blocks.{i}.self_attn.pattern"][:, t, : t + 1],
                                       atol=1e-5, rtol=0)
            torch.testing.assert_close(tr[f"decoder.blocks.{i}.cross_attn.pattern"][:, -1],
                                       full[f"decoder.blocks.{i}.cross_attn.pattern"][:, t], atol=1e-5, rtol=0)
        assert float(tr["log_probs"][-1].exp()[s.token_id]) == pytest.approx(s.prob, abs=1e-5)
        assert torch.equal(tr["encoder.out"], r.steps[0].trace["encoder.out"])  # encoded once


def test_follow_scores_a_given_output():
    m = tiny_model(5)
    src = m.encode_source("abc")
    g = greedy_decode(m, src)
    steps = follow(m, src, g.output_ids)
    assert [s.token_id for s in steps] == [*g.output_ids, EOS]
    assert [s.prob for s in steps[: len(g.steps)]] == pytest.approx([s.prob for s in g.steps][: len(steps)])


def test_batched_greedy_equals_one_at_a_time():
    m = tiny_model(6)
    srcs = [m.encode_source(t) for t in TEXTS]
    batched = greedy_decode_batch(m.net, _pad(srcs), m.max_decode_len)
    assert batched == [greedy_decode(m, s).output_ids for s in srcs]


def test_teacher_forced_vs_free_running():
    m = tiny_model(7)
    src = m.encode_source("abcd")
    gold = m.tgt_vocab.encode("dcba")
    c = teacher_forced_vs_free_running(m, src, gold)
    free = greedy_decode(m, src)
    assert c.free_tokens == free.tokens
    assert c.gold_tokens == list("dcba")
    assert len(c.teacher_tokens) == len(gold) + 1  # one prediction per position, end token included
    for s in c.steps[: len(gold) + 1]:
        assert s.teacher_input == ["<s>", *list("dcba")][: s.step + 1]  # always the reference prefix
    for s in c.steps:
        if s.free_input is not None and not s.inputs_differ:
            # same input as teacher forcing: the same prediction
            assert s.free_token == s.teacher_token
            assert s.free_prob == pytest.approx(s.teacher_prob, abs=1e-5)
    div = c.first_divergence
    if div is not None:
        assert all(not s.inputs_differ for s in c.steps[: div + 1])
        if div + 1 < len(c.steps) and c.steps[div + 1].free_input is not None:
            assert c.steps[div + 1].inputs_differ  # one wrong token changes every later input
    assert c.free_correct == (free.output_ids == gold and free.finished)


def test_bad_inputs():
    m = tiny_model()
    with pytest.raises(InputError, match="empty"):
        m.encode_source("   ")
    with pytest.raises(InputError, match="outside"):
        m.encode_source("abz")
    with pytest.raises(InputError, match="at most 6"):
        m.encode_source("abcdefa")
    with pytest.raises(InputError, match="beam size"):
        beam_search(m, m.encode_source("abc"), 0)
