"""The encoder-decoder's masks, trace and teacher-forcing loss, on tiny random models."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_explainer.models.recorder import Recorder
from transformer_explainer.seq2seq import names
from transformer_explainer.seq2seq.config import PRESETS, Seq2SeqConfig
from transformer_explainer.seq2seq.engine import Seq2SeqModel
from transformer_explainer.seq2seq.model import (
    EncoderDecoder,
    positional_encoding,
    subsequent_mask,
    target_mask,
)
from transformer_explainer.seq2seq.tasks import ReverseTask
from transformer_explainer.seq2seq.training import batch_loss, make_batch
from transformer_explainer.seq2seq.vocab import BOS, EOS, PAD


def tiny_model(seed: int = 0) -> Seq2SeqModel:
    task = ReverseTask(max_len=6, alphabet="abcdef")
    torch.manual_seed(seed)
    net = EncoderDecoder(PRESETS["tiny"].with_vocab(len(task.src_vocab), len(task.tgt_vocab)))
    return Seq2SeqModel.for_task(net, task)


def padded_batch(m: Seq2SeqModel):
    pairs = [("abc", "cba"), ("fedcba", "abcdef"), ("a", "a")]
    return make_batch(m.task, pairs)


def test_subsequent_mask_is_lower_triangular():
    m = subsequent_mask(4)[0]
    assert m.dtype == torch.bool
    assert torch.equal(m, torch.tril(torch.ones(4, 4, dtype=torch.bool)))
    tgt = torch.tensor([[BOS, 5, 6, PAD]])
    assert torch.equal(target_mask(tgt, PAD)[0, :, 3], torch.zeros(4, dtype=torch.bool))  # padding key hidden


def test_no_position_attends_to_a_later_one_and_padding_gets_zero_attention():
    m = tiny_model()
    b = padded_batch(m)
    rec = Recorder()
    with torch.no_grad():
        m.net(b.src, b.tgt, b.src_mask, b.tgt_mask, rec)
    v = rec.values
    src_pad = (b.src == PAD)[:, None, None, :]  # (B, 1, 1, S) over (B, H, Q, S)
    tgt_pad = (b.tgt == PAD)[:, None, None, :]
    future = ~subsequent_mask(b.tgt.size(1))[0]
    for i in range(m.config.n_encoder_layers):
        p = v[f"encoder.blocks.{i}.attn.pattern"]
        assert (p.masked_select(src_pad.expand_as(p)) == 0).all()
        torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]))
    for i in range(m.config.n_decoder_layers):
        p = v[f"decoder.blocks.{i}.self_attn.pattern"]
        assert (p[..., future] == 0).all()
        torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]))
        assert (p.masked_select(tgt_pad.expand_as(p)) == 0).all()
        c = v[f"decoder.blocks.{i}.cross_attn.pattern"]
        assert (c.masked_select(src_pad.expand_as(c)) == 0).all()
        torch.testing.assert_close(c.sum(-1), torch.ones(c.shape[:-1]))


def test_future_and_padding_tokens_do_not_change_earlier_outputs():
    m = tiny_model(1)
    b = padded_batch(m)
    with torch.no_grad():
        out = m.net(b.src, b.tgt, b.src_mask, b.tgt_mask)
        tgt2 = b.tgt.clone()
        tgt2[:, -1] = 7  # change the last decoder input of every row
        src2 = b.src.masked_fill(b.src == PAD, 5)  # and what sits under the source padding
        out2 = m.net(src2, tgt2, b.src_mask, b.tgt_mask)
    torch.testing.assert_close(out[:, :-1], out2[:, :-1], atol=1e-6, rtol=0)
    assert not torch.allclose(out[1, -1], out2[1, -1])  # the changed position itself does change


def test_recording_path_equals_fast_path():
    m = tiny_model(2)
    b = padded_batch(m)
    with torch.no_grad():
        fast = m.net.generator(m.net(b.src, b.tgt, b.src_mask, b.tgt_mask))
        slow = m.net.generator(m.net(b.src, b.tgt, b.src_mask, b.tgt_mask, Recorder()), Recorder())
    real = b.tgt != PAD
    torch.testing.assert_close(fast[real], slow[real], atol=1e-5, rtol=0)


@torch.no_grad()
def test_trace_names_shapes_and_properties():
    m = tiny_model(3)
    src = m.encode_source("abcde")
    tgt = [BOS, *m.tgt_vocab.encode("edc")]
    tr = m.trace(src, tgt)
    c = m.config
    S, T, H, D = len(src), len(tgt), c.n_head, c.d_model
    assert tr.names() == names.activation_names(c.n_encoder_layers, c.n_decoder_layers)
    assert set(tr.values) <= set(tr.names())  # everything recorded has a name in the table
    for n in tr.names():  # every name answers, derived ones included
        dims, _ = names.describe(n)
        assert tr[n].dim() == len(dims), n
    assert tr["encoder.blocks.0.attn.pattern"].shape == (H, S, S)
    assert tr["decoder.blocks.1.self_attn.pattern"].shape == (H, T, T)
    assert tr["decoder.blocks.1.cross_attn.pattern"].shape == (H, T, S)
    assert tr["logits"].shape == (T, c.tgt_vocab_size)
    for i in range(c.n_decoder_layers):
        sa = tr[f"decoder.blocks.{i}.self_attn.pattern"]
        torch.testing.assert_close(sa.sum(-1), torch.ones(H, T))
        assert (sa.triu(1) == 0).all()  # causal zeros
        masked = tr[f"decoder.blocks.{i}.self_attn.masked_scores"]
        assert torch.isinf(masked.triu(1)[..., ~subsequent_mask(T)[0]]).all()
        torch.testing.assert_close(torch.softmax(masked, -1), sa)
        torch.testing.assert_close(tr[f"decoder.blocks.{i}.cross_attn.pattern"].sum(-1), torch.ones(H, T))
    for i in range(c.n_encoder_layers - 1):  # one block's output is the next one's input
        assert torch.equal(tr[f"encoder.blocks.{i}.resid_post"], tr[f"encoder.blocks.{i + 1}.resid_pre"])
    assert torch.equal(tr["encoder.out"], tr[f"encoder.blocks.{c.n_encoder_layers - 1}.resid_post"])
    # post-LN: each sublayer's output is the LayerNorm of the residual sum
    ln = tr["decoder.blocks.0.ln2.in"]
    torch.testing.assert_close(tr["decoder.blocks.0.resid_cross"],
                               F.layer_norm(ln, (D,), m.net.decoder.blocks[0].ln_2.weight,
                                            m.net.decoder.blocks[0].ln_2.bias, c.layer_norm_eps))
    torch.testing.assert_close(tr["encoder.embed_sum"], tr["encoder.embed"] + tr["encoder.pos_encoding"])
    emb = m.net.src_embed.lut.weight[torch.tensor(src)] * math.sqrt(D)
    torch.testing.assert_close(tr["encoder.embed"], emb)
    torch.testing.assert_close(tr["log_probs"].exp().sum(-1), torch.ones(T))
    concat = tr["decoder.blocks.0.cross_attn.concat"]
    torch.testing.assert_close(m.net.decoder.blocks[0].cross_attn.w_o(concat), tr["decoder.blocks.0.cross_attn_out"])


def test_unknown_names_raise():
    tr = tiny_model().trace([3, 4], [BOS, 5])
    for bad in ("blocks.0.attn.pattern", "decoder.blocks.9.self_attn.pattern", "encoder.blocks.0.cross_attn.pattern",
                "decoder.blocks.0.attn.pattern", "nonsense"):
        with pytest.raises(KeyError):
            tr[bad]
    assert names.block_name("decoder", 1, "cross_attn.pattern") == "decoder.blocks.1.cross_attn.pattern"
    with pytest.raises(KeyError):
        names.block_name("encoder", 0, "cross_attn.pattern")


def test_teacher_forcing_loss_equals_per_step_losses():
    """One parallel pass over the shifted target gives the same loss as running the decoder one
    step at a time on each prefix: the causal mask makes them the same computation."""
    m = tiny_model(4)
    pairs = [("abc", "cba"), ("fedcba", "abcdef"), ("a", "a")]
    b = make_batch(m.task, pairs)
    with torch.no_grad():
        parallel_sum = batch_loss(m.net, b, reduction="sum")
        parallel_mean = batch_loss(m.net, b)
        total, count = 0.0, 0
        for src_text, tgt_text in pairs:
            src_ids = m.src_vocab.encode(src_text)
            memory, src_mask = m.encode(src_ids)
            gold = [*m.tgt_vocab.encode(tgt_text), EOS]
            prefix = [BOS]
            for tok in gold:
                lp = m.next_log_probs(memory, src_mask, torch.tensor([prefix]))[0]
                total -= float(lp[tok])
                count += 1
                prefix.append(tok)
    assert count == b.ntokens
    assert float(parallel_sum) == pytest.approx(total, rel=1e-5)
    assert float(parallel_mean) == pytest.approx(total / count, rel=1e-5)


def test_label_smoothing_matches_its_definition():
    m = tiny_model(5)
    b = padded_batch(m)
    eps, V = 0.1, m.config.tgt_vocab_size
    with torch.no_grad():
        lp = m.net.generator(m.net(b.src, b.tgt, b.src_mask, b.tgt_mask))
        real = b.tgt_y != PAD
        target = torch.full_like(lp, eps / V).scatter_(-1, b.tgt_y.unsqueeze(-1), 1 - eps + eps / V)
        expected = -(target * lp).sum(-1)[real].mean()
        assert float(batch_loss(m.net, b, eps)) == pytest.approx(float(expected), rel=1e-5)


def test_positional_encoding_is_the_paper_sinusoid():
    pe = positional_encoding(50, 16)
    pos, i = 7, 3
    assert float(pe[pos, 2 * i]) == pytest.approx(math.sin(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    assert float(pe[pos, 2 * i + 1]) == pytest.approx(math.cos(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    torch.testing.assert_close(pe.norm(dim=1), torch.full((50,), math.sqrt(8)))  # sin^2 + cos^2 per pair
    sim = pe @ pe.T  # depends only on the offset between positions
    torch.testing.assert_close(torch.diagonal(sim, 3)[:-1], torch.diagonal(sim, 3)[1:], atol=1e-4, rtol=0)
    m = tiny_model()
    assert torch.equal(m.net.pos_encoding.table(10), positional_encoding(10, m.config.d_model))
    long = m.net.pos_encoding.table(m.config.max_len + 5)  # beyond the precomputed table
    torch.testing.assert_close(long, positional_encoding(m.config.max_len + 5, m.config.d_model))


def test_base_preset_is_the_paper_model():
    c = PRESETS["base"]
    assert (c.n_encoder_layers, c.n_decoder_layers, c.d_model, c.n_head, c.d_k, c.d_ff) == (6, 6, 512, 8, 64, 2048)
    assert "pe" not in EncoderDecoder(Seq2SeqConfig(n_encoder_layers=1, n_decoder_layers=1, d_model=8, n_head=2,
                                                    d_ff=8)).state_dict()  # fixed, not stored
    with pytest.raises(ValueError):
        Seq2SeqConfig(d_model=10, n_head=3)
