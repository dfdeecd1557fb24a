"""The per-layer lens (bridge/per_layer_lens.py): a Gemma 4 model runs through transformers' own modules, and answers
its per-layer embeddings in our names (embed.per_layer, embed.per_layer_projected, embed.per_layer_inputs) and each
layer's gated write (per_layer.resid ... per_layer_out), derived on access by our own modules on the model's own
weights from what the bridge recorded. Each equals what transformers' modules computed in the same forward (caught by
hooks on them), within 1e-5 of its scale (fp32); the write added to the stream the gate read, times the layer's
scalar, is the recorded resid_post; the forward records nothing more."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformer_explainer import load_model  # noqa: E402
from transformer_explainer.bridge import find_mechanisms  # noqa: E402
from transformer_explainer.bridge.per_layer_lens import (  # noqa: E402
    PER_LAYER_GLOBAL_STAGES,
    PER_LAYER_STAGES,
    PerLayerGateLens,
)
from transformer_explainer.generic import GenericModel  # noqa: E402
from transformer_explainer.names import block_name  # noqa: E402

from ..helpers.hf_checkpoints import write_checkpoint  # noqa: E402

TEXT = "The king said, 'Hello!' and then left the room; the queen stayed, and the king came back."


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-12))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> GenericModel:
    folder = write_checkpoint("gemma4_text", tmp_path_factory.mktemp("gemma4") / "ckpt", tokenizer=True)
    m = load_model(str(folder), dtype="float32")
    assert isinstance(m, GenericModel)
    with torch.no_grad():  # a scalar per layer other than 1 (the released models' are), so that it is checked
        for i, layer in enumerate(m.hf.model.layers):
            layer.layer_scalar.fill_(0.5 + 0.25 * i)
    return m


def transformers_values(model: GenericModel, ids: list[int]) -> dict[str, torch.Tensor]:
    """What transformers' own modules compute in one forward, caught by hooks: the per-layer inputs each layer is
    handed, and each layer's gate, projection and norm outputs and the stream its gate reads."""
    got: dict[str, torch.Tensor] = {}
    handles = []
    for i, layer in enumerate(model.hf.model.layers):
        def on_layer(_m, args, kwargs, i=i):
            p = kwargs["per_layer_input"] if "per_layer_input" in kwargs else args[1]
            got[block_name(i, "per_layer.input")] = p[0].detach().clone()

        def on(name, i=i):
            def hook(_m, args, out):
                got[block_name(i, name)] = out[0].detach().clone()
                if name == "per_layer.gate":
                    got[block_name(i, "per_layer.resid")] = args[0][0].detach().clone()
                if name == "per_layer.act":
                    got[block_name(i, "per_layer.post")] = (out[0] * got[block_name(i, "per_layer.input")]).clone()
            return hook

        handles += [layer.register_forward_pre_hook(on_layer, with_kwargs=True),
                    layer.per_layer_input_gate.register_forward_hook(on("per_layer.gate")),
                    layer.act_fn.register_forward_hook(on("per_layer.act")),
                    layer.per_layer_projection.register_forward_hook(on("per_layer.out")),
                    layer.post_per_layer_input_norm.register_forward_hook(on("per_layer_out"))]
    try:
        with torch.no_grad():
            x = torch.tensor([ids])
            model.hf(input_ids=x, use_cache=False)
            inner = model.hf.model
            token = inner.get_per_layer_inputs(x, inner.embed_tokens(x))
            got["embed.per_layer"] = token[0]
            got["embed.per_layer_inputs"] = inner.project_per_layer_inputs(inner.embed_tokens(x), token)[0]
            got["embed.per_layer_projected"] = inner.project_per_layer_inputs(inner.embed_tokens(x), None)[0]
    finally:
        for h in handles:
            h.remove()
    return got


def test_our_modules_equal_transformers(model: GenericModel) -> None:
    trace = model.trace(TEXT)
    want = transformers_values(model, trace.token_ids)
    assert model.config.global_stages == PER_LAYER_GLOBAL_STAGES
    for name in PER_LAYER_GLOBAL_STAGES:
        assert trace[name].shape == (trace.n_tokens, 4, 8), name
        assert relative(trace[name], want[name]) < 1e-5, name
    mechanisms = find_mechanisms(model.hf)
    assert sorted(mechanisms) == [0, 1, 2, 3] and all(isinstance(m, PerLayerGateLens) for m in mechanisms.values())
    assert [layer.mechanism for layer in model.config.layers] == ["per_layer_input"] * 4
    for i in range(4):
        for stage in PER_LAYER_STAGES:
            name = block_name(i, stage)
            assert name in model.config.activation_names()
            assert trace[name].shape == want[name].shape, name
            assert relative(trace[name], want[name]) < 1e-5, name


def test_the_write_gives_the_recorded_layer_output(model: GenericModel) -> None:
    trace = model.trace(TEXT)
    for i, layer in enumerate(model.hf.model.layers):
        post = (trace[block_name(i, "per_layer.resid")] + trace[block_name(i, "per_layer_out")]) * layer.layer_scalar
        assert relative(post, trace[block_name(i, "resid_post")]) < 1e-6, i


def test_the_forward_records_nothing_more(model: GenericModel) -> None:
    trace = model.trace(TEXT)
    derived = {*PER_LAYER_GLOBAL_STAGES, *(block_name(i, s) for i in range(4) for s in PER_LAYER_STAGES)}
    assert not derived & set(trace.memory.kept)
    cut = trace.memory.cut(5)  # a cut trace derives its own, the first positions' of the whole
    assert relative(cut["embed.per_layer_inputs"], trace["embed.per_layer_inputs"][:5]) < 1e-6
    assert relative(cut[block_name(2, "per_layer_out")], trace[block_name(2, "per_layer_out")][:5]) < 1e-6


def test_a_model_without_per_layer_inputs_answers_none(tmp_path) -> None:
    folder = write_checkpoint("gemma4_text", tmp_path / "ckpt", tokenizer=True, hidden_size_per_layer_input=0,
                              num_kv_shared_layers=0)  # (transformers' own forward fails with shared layers and none)
    m = load_model(str(folder), dtype="float32")
    assert m.config.global_stages == () and m.config.per_layer is None
    assert not any(s.startswith("per_layer") for layer in m.config.layers for s in layer.stages)
    with pytest.raises(KeyError):
        m.trace("a b c")["embed.per_layer_inputs"]
