"""The post-norm lens (bridge/post_norm_lens.py): an OLMo 3 model runs through transformers' own modules, and each layer
answers what its sublayers write, the norm after attention on attn_out and the norm after the MLP on mlp_out (ln1_post.
out, ln2_post.out), derived on access by our RMSNorm on the layer's own weights. Found by what the layers compute: a
pre-norm model (Llama) has no such lens, Gemma 4's layers keep their per-layer lens. Each write equals transformers'
norm module's output in the same forward; the writes added to the stream give the recorded resid_mid and resid_post;
no write is longer than its bound sqrt(D) * max|gamma|; write_sizes equals a direct computation; and scaling a
sublayer's output projection by 10 leaves its writes as they were (the norm undoes it)."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")

from transformer_explainer import load_model  # noqa: E402
from transformer_explainer.bridge.post_norm_lens import POST_NORM_STAGES, PostNormLens, write_sizes  # noqa: E402
from transformer_explainer.generic import GenericModel  # noqa: E402
from transformer_explainer.names import block_name  # noqa: E402

from ..helpers.hf_checkpoints import write_checkpoint  # noqa: E402

TEXT = "The king said, 'Hello!' and then left the room; the queen stayed, and the king came back."


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-12))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> GenericModel:
    folder = write_checkpoint("olmo3", tmp_path_factory.mktemp("olmo3") / "ckpt", tokenizer=True)
    m = load_model(str(folder), dtype="float32")
    assert isinstance(m, GenericModel)
    return m


def test_the_writes_equal_transformers_norms(model: GenericModel) -> None:
    got: dict[str, torch.Tensor] = {}
    handles = []
    for i, layer in enumerate(model.hf.model.layers):
        for module, stage in ((layer.post_attention_layernorm, "ln1_post.out"),
                              (layer.post_feedforward_layernorm, "ln2_post.out")):
            name = block_name(i, stage)
            handles.append(module.register_forward_hook(
                lambda _m, _a, out, name=name: got.__setitem__(name, out[0].detach().clone())))
    try:
        trace = model.trace(TEXT)
        with torch.no_grad():
            model.hf(input_ids=torch.tensor([trace.token_ids]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    assert [layer.mechanism for layer in model.config.layers] == ["post_norm"] * 4
    for i in range(4):
        for stage in POST_NORM_STAGES:
            name = block_name(i, stage)
            assert name in model.config.activation_names() and name not in trace.memory.kept
            assert relative(trace[name], got[name]) < 1e-6, name
        pre, mid, post = (trace[block_name(i, s)] for s in ("resid_pre", "resid_mid", "resid_post"))
        assert relative(pre + trace[block_name(i, "ln1_post.out")], mid) < 1e-6
        assert relative(mid + trace[block_name(i, "ln2_post.out")], post) < 1e-6


def test_no_write_is_longer_than_its_bound_and_the_sizes_are_direct(model: GenericModel) -> None:
    trace = model.trace(TEXT)
    sizes = write_sizes(trace.memory, trace.memory.mechanisms, model.config.n_layer)
    assert sizes is not None and sizes.layers == (0, 1, 2, 3)
    D = model.config.n_embd
    for j, layer in enumerate(model.hf.model.layers):
        bounds = (math.sqrt(D) * float(layer.post_attention_layernorm.weight.abs().max()),
                  math.sqrt(D) * float(layer.post_feedforward_layernorm.weight.abs().max()))
        assert (sizes.attn_bound[j], sizes.mlp_bound[j]) == pytest.approx(bounds, rel=1e-6)
        assert model.config.write_bounds[j] == pytest.approx(bounds, rel=1e-6)
        attn = (trace[block_name(j, "resid_mid")] - trace[block_name(j, "resid_pre")]).norm(dim=-1)
        mlp = (trace[block_name(j, "resid_post")] - trace[block_name(j, "resid_mid")]).norm(dim=-1)
        assert torch.allclose(sizes.attn[j], attn, rtol=1e-4) and torch.allclose(sizes.mlp[j], mlp, rtol=1e-4)
        assert float(sizes.attn[j].max()) <= bounds[0] and float(sizes.mlp[j].max()) <= bounds[1]
    resid = torch.stack([trace[block_name(0, "resid_pre")].norm(dim=-1),
                         *(trace[block_name(i, "resid_post")].norm(dim=-1) for i in range(4))])
    assert torch.allclose(sizes.resid, resid, rtol=1e-6)


def test_a_scaled_sublayer_writes_the_same(model: GenericModel) -> None:
    before = model.trace(TEXT)
    layer = model.hf.model.layers[1]
    with torch.no_grad():
        layer.self_attn.o_proj.weight.mul_(10.0)
    try:
        after = model.trace(TEXT)
        assert relative(after[block_name(1, "attn_out")], 10 * before[block_name(1, "attn_out")]) < 1e-5
        assert relative(after[block_name(1, "ln1_post.out")], before[block_name(1, "ln1_post.out")]) < 1e-5
    finally:
        with torch.no_grad():
            layer.self_attn.o_proj.weight.div_(10.0)


@pytest.mark.parametrize("model_type", ["phi3", "gemma4_text"])
def test_a_model_that_adds_its_sublayers_otherwise_has_no_post_norm_lens(model_type: str, tmp_path) -> None:
    m = load_model(str(write_checkpoint(model_type, tmp_path / "ckpt", tokenizer=True)), dtype="float32")
    assert not any(isinstance(lens, PostNormLens) for lens in m._mechanisms.values())
    assert all(b is None for b in m.config.write_bounds)
    assert not m.config.has(block_name(0, "ln1_post.out"))
