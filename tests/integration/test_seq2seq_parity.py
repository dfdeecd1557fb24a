"""Our encoder-decoder against torch.nn.Transformer on the same weights: the same numbers.

nn.Transformer always appends a LayerNorm to each stack; the paper's post-LN model has none (its
last sublayer already ends in one), so the reference's `encoder.norm`/`decoder.norm` are removed.
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_explainer.models.recorder import Recorder
from transformer_explainer.seq2seq.config import Seq2SeqConfig
from transformer_explainer.seq2seq.model import EncoderDecoder, pad_mask, subsequent_mask, target_mask

PAD = 0


def reference_transformer(model: EncoderDecoder) -> nn.Transformer:
    """nn.Transformer holding `model`'s weights: one flat key map, Q/K/V stacked into in_proj."""
    c = model.config
    ref = nn.Transformer(d_model=c.d_model, nhead=c.n_head, num_encoder_layers=c.n_encoder_layers,
                         num_decoder_layers=c.n_decoder_layers, dim_feedforward=c.d_ff, dropout=0.0,
                         activation="relu", layer_norm_eps=c.layer_norm_eps, batch_first=True, norm_first=False)
    ref.encoder.norm = None
    ref.decoder.norm = None
    ref.encoder.use_nested_tensor = False  # its fast path would zero padded positions (and warn)

    def attn(ours: str, theirs: str) -> dict[str, torch.Tensor]:
        w = {s: model.get_parameter(f"{ours}.w_{s}.weight") for s in "qkv"}
        b = {s: model.get_parameter(f"{ours}.w_{s}.bias") for s in "qkv"}
        return {
            f"{theirs}.in_proj_weight": torch.cat([w["q"], w["k"], w["v"]]),
            f"{theirs}.in_proj_bias": torch.cat([b["q"], b["k"], b["v"]]),
            f"{theirs}.out_proj.weight": model.get_parameter(f"{ours}.w_o.weight"),
            f"{theirs}.out_proj.bias": model.get_parameter(f"{ours}.w_o.bias"),
        }

    def copy(ours: str, theirs: str) -> dict[str, torch.Tensor]:
        return {f"{theirs}.{p}": model.get_parameter(f"{ours}.{p}") for p in ("weight", "bias")}

    state: dict[str, torch.Tensor] = {}
    for i in range(c.n_encoder_layers):
        o, t = f"encoder.blocks.{i}", f"encoder.layers.{i}"
        state |= attn(f"{o}.attn", f"{t}.self_attn") | copy(f"{o}.ln_1", f"{t}.norm1")
        state |= copy(f"{o}.ff.w_1", f"{t}.linear1") | copy(f"{o}.ff.w_2", f"{t}.linear2")
        state |= copy(f"{o}.ln_2", f"{t}.norm2")
    for i in range(c.n_decoder_layers):
        o, t = f"decoder.blocks.{i}", f"decoder.layers.{i}"
        state |= attn(f"{o}.self_attn", f"{t}.self_attn") | copy(f"{o}.ln_1", f"{t}.norm1")
        state |= attn(f"{o}.cross_attn", f"{t}.multihead_attn") | copy(f"{o}.ln_2", f"{t}.norm2")
        state |= copy(f"{o}.ff.w_1", f"{t}.linear1") | copy(f"{o}.ff.w_2", f"{t}.linear2")
        state |= copy(f"{o}.ln_3", f"{t}.norm3")
    ref.load_state_dict(state, strict=True)
    return ref.eval()


def _random_model(seed: int = 0) -> EncoderDecoder:
    torch.manual_seed(seed)
    cfg = Seq2SeqConfig(src_vocab_size=23, tgt_vocab_size=19, n_encoder_layers=2, n_decoder_layers=3,
                        d_model=32, n_head=4, d_ff=48, dropout=0.0)
    model = EncoderDecoder(cfg).eval()
    with torch.no_grad():  # random biases and LayerNorm gains so a skipped or swapped one shows
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
            elif ".ln_" in name:
                p.normal_(1.0, 0.2)
    return model


def _padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 23, (3, 7), generator=g)
    tgt = torch.randint(3, 19, (3, 5), generator=g)
    src[0, 4:] = PAD  # different amounts of padding per row
    src[2, 6:] = PAD
    tgt[1, 3:] = PAD
    return src, tgt


def test_outputs_equal_nn_transformer_with_padding():
    model = _random_model()
    ref = reference_transformer(model)
    src, tgt = _padded_batch()
    src_mask, tgt_mask = pad_mask(src, PAD), target_mask(tgt, PAD)
    x_src = model.pos_encoding(model.src_embed(src))
    x_tgt = model.pos_encoding(model.tgt_embed(tgt))
    causal = ~subsequent_mask(tgt.size(1))[0]  # nn.Transformer: True = may NOT attend
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        out = model.decode(memory, src_mask, tgt, tgt_mask)
        ref_memory = ref.encoder(x_src, src_key_padding_mask=src == PAD)
        ref_out = ref.decoder(x_tgt, ref_memory, tgt_mask=causal, tgt_key_padding_mask=tgt == PAD,
                              memory_key_padding_mask=src == PAD)
    real_src, real_tgt = src != PAD, tgt != PAD  # padded positions' outputs are never read
    torch.testing.assert_close(memory[real_src], ref_memory[real_src], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[real_tgt], ref_out[real_tgt], atol=1e-5, rtol=1e-5)


def test_recording_path_equals_fast_path_and_reference():
    model = _random_model(seed=3)
    ref = reference_transformer(model)
    src, tgt = _padded_batch()
    src_mask, tgt_mask = pad_mask(src, PAD), target_mask(tgt, PAD)
    with torch.no_grad():
        fast = model(src, tgt, src_mask, tgt_mask)
        rec = Recorder()
        slow = model(src, tgt, src_mask, tgt_mask, rec)
        ref_out = ref(model.pos_encoding(model.src_embed(src)), model.pos_encoding(model.tgt_embed(tgt)),
                      tgt_mask=~subsequent_mask(tgt.size(1))[0], src_key_padding_mask=src == PAD,
                      tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD)
    real = tgt != PAD
    torch.testing.assert_close(slow[real], fast[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(slow[real], ref_out[real], atol=1e-5, rtol=1e-5)
    assert rec.values["decoder.blocks.2.resid_post"].shape == (3, 5, 32)
