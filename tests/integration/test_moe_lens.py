"""The mixture-of-experts lens (bridge/moe_lens.py): DeepSeek-V3 and gpt-oss run through transformers' own modules, and
each layer with experts also answers its router's choice and its experts' outputs in our names (mlp.router_logits,
mlp.expert_indices, mlp.expert_weights, mlp.expert_out, mlp.out; DeepSeek-V3's sigmoid scores, groups and shared
expert), derived on access by our own module built on the layer's own weights, from the layer's resid_mid through
its post_attention_layernorm. Our mlp.out equals transformers' recorded mlp_out (fp32, 1e-5 relative to scale); the
experts chosen equal those transformers' own router chose (hooked here); the forward records none of it; DeepSeek-V3's
dense first layer has no lens, and its attention layers keep their latent-attention lens beside the experts'."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformer_explainer import load_model  # noqa: E402
from transformer_explainer.bridge.latent_lens import LatentAttentionLens  # noqa: E402
from transformer_explainer.bridge.mechanisms import find_mlp_mechanisms  # noqa: E402
from transformer_explainer.bridge.moe_lens import LayerLenses, MoELens  # noqa: E402
from transformer_explainer.generic import GenericModel  # noqa: E402
from transformer_explainer.names import block_name  # noqa: E402

from ..helpers.hf_checkpoints import write_checkpoint  # noqa: E402

TEXT = "The king said, 'Hello!' and then left the room; the queen stayed, and the king came back."


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-12))


@pytest.fixture(scope="module", params=["deepseek_v3", "gpt_oss"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> GenericModel:
    overrides = {"num_hidden_layers": 3} if request.param == "deepseek_v3" else {}
    folder = write_checkpoint(request.param, tmp_path_factory.mktemp(request.param) / "ckpt", tokenizer=True,
                              **overrides)
    m = load_model(str(folder), dtype="float32")
    assert isinstance(m, GenericModel)
    return m


def _router_choices(model: GenericModel) -> tuple[dict[int, torch.Tensor], list[torch.utils.hooks.RemovableHandle]]:
    """Hooks on transformers' router modules keeping the experts each chose, by layer (T, K)."""
    chosen: dict[int, torch.Tensor] = {}
    handles = []
    for i, layer in enumerate(model.hf.model.layers):
        router = getattr(layer.mlp, "gate", None) or getattr(layer.mlp, "router", None)
        if router is None:
            continue

        def keep(_module: torch.nn.Module, _args: object, out: tuple[torch.Tensor, ...], i: int = i) -> None:
            chosen[i] = out[-1].reshape(-1, out[-1].shape[-1])  # (T, K): the indices are the router's last output

        handles.append(router.register_forward_hook(keep))
    return chosen, handles


def test_our_mixture_equals_transformers(model: GenericModel) -> None:
    """Our module's output equals the recorded mlp_out, and it picks the experts transformers' router picked."""
    chosen, handles = _router_choices(model)
    try:
        trace = model.trace(TEXT)
    finally:
        for h in handles:
            h.remove()
    lenses = find_mlp_mechanisms(model.hf)
    cfg = model.hf.config
    dense = getattr(cfg, "first_k_dense_replace", 0)
    assert sorted(lenses) == list(range(dense, model.config.n_layer)) and sorted(chosen) == sorted(lenses)
    T = trace.n_tokens
    for i, lens in lenses.items():
        assert isinstance(lens, MoELens)
        out = trace[block_name(i, "mlp.out")]
        assert out.shape == trace[block_name(i, "mlp_out")].shape
        assert relative(out, trace[block_name(i, "mlp_out")]) < 1e-5, i
        indices = trace[block_name(i, "mlp.expert_indices")]
        assert indices.shape == (T, cfg.num_experts_per_tok)
        assert torch.equal(indices.sort(dim=-1).values, chosen[i].sort(dim=-1).values), i
        weights = trace[block_name(i, "mlp.expert_weights")]
        expert_out = trace[block_name(i, "mlp.expert_out")]
        routed = (weights[..., None] * expert_out).sum(dim=1)
        if lens.kind == "deepseek_moe":  # the shared expert beside the routed sum, the scores sigmoids
            shared = trace[block_name(i, "mlp.shared_out")]
            assert relative(routed + shared, out) < 1e-5, i
            scores = trace[block_name(i, "mlp.router_scores")]
            assert torch.allclose(scores, trace[block_name(i, "mlp.router_logits")].sigmoid())
            groups = trace[block_name(i, "mlp.chosen_groups")]
            per_group = cfg.n_routed_experts // cfg.n_group
            assert all(int(e) // per_group in groups[t].tolist() for t in range(T) for e in indices[t]), i
        else:  # a softmax over the chosen logits alone
            assert relative(routed, out) < 1e-5, i
            assert torch.allclose(weights.sum(dim=-1), torch.ones(T))


def test_the_layers_name_the_stages(model: GenericModel) -> None:
    """Each layer with experts lists the stages; DeepSeek-V3's keeps its latent-attention lens beside them."""
    names = model.config.activation_names()
    lenses = find_mlp_mechanisms(model.hf)
    for i in range(model.config.n_layer):
        assert (block_name(i, "mlp.expert_indices") in names) == (i in lenses), i
        if model.config.model_type == "deepseek_v3":
            assert model.config.layers[i].mechanism == "latent_attention"
            assert (block_name(i, "mlp.shared_out") in names) == (i in lenses)
            if i in lenses:
                both = model._mechanisms[i]
                assert isinstance(both, LayerLenses) and isinstance(both.parts[0], LatentAttentionLens)
        else:  # the layers' mechanism is their mixer's: gpt-oss's attention is not one of ours
            assert model.config.layers[i].mechanism is None
    if model.config.model_type == "deepseek_v3":
        assert model.config.latent_memory is not None and model.config.latent_memory.layers == (0, 1, 2)


def test_the_forward_records_no_expert(model: GenericModel) -> None:
    """The router's choice and the experts' outputs are derived on access: the pass keeps none of them."""
    trace = model.trace(TEXT)
    assert not any(".mlp." in name for name in trace.memory.kept)
    assert block_name(model.config.n_layer - 1, "mlp.expert_out") in trace


def test_gpt_oss_clamped_swiglu_on_transformers_tensors(model: GenericModel) -> None:
    """gpt-oss's stages per (token, choice) against transformers' own expert tensors: the gate and up columns of
    x @ gate_up_proj + bias (x the layer's norm of resid_mid), the clamps, the activation, and post @ down_proj + bias
    equal to the expert's output."""
    if model.config.model_type != "gpt_oss":
        pytest.skip("the clamped SwiGLU is gpt-oss's")
    trace = model.trace(TEXT)
    cfg = model.hf.config
    for i, layer in enumerate(model.hf.model.layers):
        experts = layer.mlp.experts
        indices = trace[block_name(i, "mlp.expert_indices")]
        with torch.no_grad():
            x = layer.post_attention_layernorm(trace[block_name(i, "resid_mid")][None])[0]
            for t in range(trace.n_tokens):
                for k in range(cfg.num_experts_per_tok):
                    e = int(indices[t, k])
                    gate_up = x[t] @ experts.gate_up_proj[e] + experts.gate_up_proj_bias[e]
                    gate, up = gate_up[0::2], gate_up[1::2]
                    assert torch.allclose(trace[block_name(i, "mlp.gate")][t, k], gate, atol=1e-6)
                    assert torch.allclose(trace[block_name(i, "mlp.up")][t, k], up, atol=1e-6)
                    g = gate.clamp(max=cfg.swiglu_limit)
                    assert torch.equal(trace[block_name(i, "mlp.gate_clamped")][t, k],
                                       trace[block_name(i, "mlp.gate")][t, k].clamp(max=cfg.swiglu_limit))
                    act = g * torch.sigmoid(g * cfg.swiglu_alpha)
                    assert torch.allclose(trace[block_name(i, "mlp.act")][t, k], act, atol=1e-6)
                    post = trace[block_name(i, "mlp.post")][t, k]
                    want = post @ experts.down_proj[e] + experts.down_proj_bias[e]
                    assert relative(trace[block_name(i, "mlp.expert_out")][t, k], want) < 1e-5, (i, t, k)
