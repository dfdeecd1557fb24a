"""gpt-oss's attention with sinks and its clamped-SwiGLU mixture in code of our own (models/sink_attention.py) against
transformers' GptOssAttention and GptOssMLP: outputs on random weights in float32 and bfloat16, each named internal
against an independent computation (the softmax with the sink written out, the clamps by hand), the routing by hand,
and what they refuse."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers.hf_checkpoints import FAMILIES, SMALL
from transformer_explainer.models.recorder import Recorder
from transformer_explainer.models.sink_attention import (
    ClampedMoE,
    ClampedMoEConfig,
    SinkAttention,
    SinkAttentionConfig,
)
from transformer_explainer.name_options import CLAMPED_MOE_ACTIVATIONS, SINK_ATTENTION_ACTIVATIONS

transformers = pytest.importorskip("transformers")
hf = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
masks = pytest.importorskip("transformers.masking_utils")

T = 24  # several times the window (4): the sliding layers hide keys
LAYERS = {"sliding": 0, "full": 1}  # FAMILIES["gpt_oss"]: sliding, full, sliding, full


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def config(**overrides) -> transformers.PretrainedConfig:
    cfg = transformers.AutoConfig.for_model("gpt_oss", **{**SMALL, **FAMILIES["gpt_oss"], **overrides})
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


def randomize_(module: torch.nn.Module, seed: int) -> None:
    """Matrices N(0, 0.2), vectors (biases, sinks) N(0, 1): a sink logit of either sign."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.2) if p.ndim > 1 else p.normal_(0.0, 1.0)


def attention_layers(layer: str, seed: int = 0) -> tuple[transformers.PretrainedConfig, torch.nn.Module,
                                                          SinkAttention]:
    cfg = config()
    ref = hf.GptOssAttention(cfg, LAYERS[layer]).eval()
    randomize_(ref, seed)
    ours = SinkAttention(SinkAttentionConfig.from_hf(cfg, LAYERS[layer])).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    return cfg, ref, ours


def inputs(cfg, seed: int = 1, batch: int = 2, scale: float = 1.0):
    x = scale * torch.randn(batch, T, cfg.hidden_size, generator=torch.Generator().manual_seed(seed))
    positions = torch.arange(T)[None].expand(batch, T)
    return x, hf.GptOssRotaryEmbedding(cfg)(x, positions)


def hf_mask(cfg, layer: str, x: torch.Tensor) -> torch.Tensor:
    """transformers' own additive mask for the layer (causal, or causal and sliding)."""
    make = masks.create_sliding_window_causal_mask if layer == "sliding" else masks.create_causal_mask
    positions = torch.arange(T)
    return make(config=cfg, inputs_embeds=x, attention_mask=None, cache=None,
                position_ids=positions[None].expand(x.shape[0], T), allow_is_causal_skip=False)


def recorded(module, *args, scope: str):
    rec = Recorder()
    out = module(*args, rec=rec.scope(scope))
    return out, dict(rec.values)


@pytest.mark.parametrize("layer", list(LAYERS))
@torch.no_grad()
def test_attention_output_and_pattern_equal_transformers(layer):
    cfg, ref, ours = attention_layers(layer)
    assert ours.config.window == (4 if layer == "sliding" else None)
    x, rope = inputs(cfg)
    want, want_pattern = ref(x, rope, hf_mask(cfg, layer, x))
    assert relative(ours(x, rope), want) < 1e-5  # the fast path
    got, values = recorded(ours, x, rope, scope="attn")
    assert relative(got, want) < 1e-5
    assert relative(values["attn.pattern"], want_pattern) < 1e-5
    assert set(values) == set(SINK_ATTENTION_ACTIVATIONS)  # the table names what is recorded


@pytest.mark.parametrize("layer", list(LAYERS))
@torch.no_grad()
def test_the_sink_takes_what_the_keys_do_not(layer):
    """The pattern written out: exp(l) / (exp(sink) + sum exp(l)) over the visible keys; each row's sum plus the
    sink's weight is 1; hidden keys get 0; and with the sink at -inf it is the plain causal softmax."""
    cfg, ref, ours = attention_layers(layer, seed=2)
    x, rope = inputs(cfg, seed=3)
    _, got = recorded(ours, x, rope, scope="attn")
    H, G, Dh, W = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, ours.config.window
    q, k = got["attn.rot_q"], got["attn.rot_k"].repeat_interleave(H // G, dim=1)
    logits = q @ k.transpose(-1, -2) / math.sqrt(Dh)
    t, s = torch.arange(T)[:, None], torch.arange(T)[None]
    visible = (s <= t) & ((t - s < W) if W is not None else True)
    e = logits.exp() * visible
    e_sink = ref.sinks.exp().view(1, H, 1)
    denominator = e.sum(-1) + e_sink
    assert relative(got["attn.pattern"], e / denominator[..., None]) < 1e-5
    assert relative(got["attn.sink_weight"], e_sink / denominator) < 1e-5
    assert torch.allclose(got["attn.pattern"].sum(-1) + got["attn.sink_weight"], torch.ones(2, H, T), atol=1e-6)
    assert (got["attn.pattern"][..., ~visible] == 0).all()
    assert (got["attn.sink_weight"] > 0).all()
    assert torch.equal(got["attn.sink"], ref.sinks)
    # the rotation as complex numbers: pair (i, i + Dh/2) times cos + i sin of its angle (YaRN's, from transformers)
    cos, sin = rope
    q0 = got["attn.q"]
    turned = torch.complex(q0[..., :Dh // 2], q0[..., Dh // 2:]) * torch.complex(cos, sin).unsqueeze(1)
    assert relative(got["attn.rot_q"], torch.cat((turned.real, turned.imag), dim=-1)) < 1e-5
    # no sink: a patch that sets its logits to -inf gives rows that sum to 1
    rec = Recorder(patches={"attn.sink": lambda s: torch.full_like(s, -math.inf)})
    ours(x, rope, rec.scope("attn"))
    assert torch.allclose(rec.values["attn.pattern"].sum(-1), torch.ones(2, H, T), atol=1e-6)
    assert (rec.values["attn.sink_weight"] == 0).all()


@torch.no_grad()
def test_a_large_sink_lets_a_head_read_almost_nothing():
    cfg, _, ours = attention_layers("full")
    x, rope = inputs(cfg)
    ours.sinks.fill_(30.0)
    _, got = recorded(ours, x, rope, scope="attn")
    assert (got["attn.sink_weight"] > 0.99).all() and got["attn.z"].abs().max() < 0.05


# -- the mixture -------------------------------------------------------------------------------------------------


def moe_layers(seed: int = 0, **overrides) -> tuple[transformers.PretrainedConfig, torch.nn.Module, ClampedMoE]:
    cfg = config(**overrides)
    ref = hf.GptOssMLP(cfg).eval()
    randomize_(ref, seed)
    ours = ClampedMoE(ClampedMoEConfig.from_hf(cfg)).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    return cfg, ref, ours


MOE_SHAPES = {"checkpoint": {}, "eight_experts": dict(num_local_experts=8, num_experts_per_tok=3)}


@pytest.mark.parametrize("shape", list(MOE_SHAPES))
@torch.no_grad()
def test_moe_output_and_routing_equal_transformers(shape):
    cfg, ref, ours = moe_layers(**MOE_SHAPES[shape])
    x = 3 * torch.randn(2, T, cfg.hidden_size, generator=torch.Generator().manual_seed(5))  # clamps reached
    want, _ = ref(x)
    assert relative(ours(x), want) < 1e-5  # the fast path
    got, values = recorded(ours, x, scope="mlp")
    assert relative(got, want) < 1e-5
    assert set(values) == set(CLAMPED_MOE_ACTIVATIONS)
    logits, weights, indices = ref.router(x.view(-1, cfg.hidden_size))
    assert torch.equal(values["mlp.expert_indices"].view_as(indices), indices)  # both highest first
    assert relative(values["mlp.expert_weights"].view_as(weights), weights) < 1e-6
    assert relative(values["mlp.router_logits"].view_as(logits), logits) < 1e-6


@torch.no_grad()
def test_clamped_swiglu_by_hand():
    """Each (token, choice)'s stages from the expert's own columns: gate the even ones, up the odd; gate clamped at
    7 above only, up at +-7; act = gate_c * sigmoid(1.702 gate_c); post = (up_c + 1) act; and the weights a softmax
    over the chosen logits alone."""
    cfg, ref, ours = moe_layers(seed=1)
    assert (ours.config.alpha, ours.config.limit) == (1.702, 7.0)
    x = 3 * torch.randn(1, T, cfg.hidden_size, generator=torch.Generator().manual_seed(6))
    _, v = recorded(ours, x, scope="mlp")
    assert (v["mlp.gate"] > 7).any() and (v["mlp.up"].abs() > 7).any() and (v["mlp.gate"] < -7).any()
    E, K = cfg.num_local_experts, cfg.num_experts_per_tok
    for t in range(T):
        logits = x[0, t] @ ref.router.weight.T + ref.router.bias
        chosen = sorted(range(E), key=lambda e: -logits[e].item())[:K]
        assert v["mlp.expert_indices"][0, t].tolist() == chosen
        top = logits[chosen]
        assert relative(v["mlp.expert_weights"][0, t], top.exp() / top.exp().sum()) < 1e-6
        for k, e in enumerate(chosen):
            h = x[0, t] @ ref.experts.gate_up_proj[e] + ref.experts.gate_up_proj_bias[e]
            gate, up = h[0::2], h[1::2]
            gate_c = torch.where(gate > 7, torch.tensor(7.0), gate)
            up_c = torch.where(up > 7, torch.tensor(7.0), torch.where(up < -7, torch.tensor(-7.0), up))
            act = gate_c / (1 + torch.exp(-1.702 * gate_c))
            post = (up_c + 1) * act
            for name, want in (("gate", gate), ("gate_clamped", gate_c), ("up_clamped", up_c), ("act", act),
                               ("post", post)):
                assert relative(v[f"mlp.{name}"][0, t, k], want) < 1e-5, (name, t, k)
            out = post @ ref.experts.down_proj[e] + ref.experts.down_proj_bias[e]
            assert relative(v["mlp.expert_out"][0, t, k], out) < 1e-5


@torch.no_grad()
def test_bfloat16_rounds_as_transformers_does():
    """Well under one bfloat16 step (2^-8 relative): the softmax over keys and sink in bfloat16 after the max is
    subtracted, the router in bfloat16, each weighted output rounded and added in the experts' order."""
    for layer in LAYERS:
        cfg, ref, ours = attention_layers(layer)
        ref.bfloat16(), ours.bfloat16()
        x, _ = inputs(cfg)
        x = x.bfloat16()
        rope = hf.GptOssRotaryEmbedding(cfg)(x, torch.arange(T)[None].expand(2, T))
        want = ref(x, rope, hf_mask(cfg, layer, x))[0]
        assert relative(ours(x, rope), want) < 1e-3, layer
    cfg, ref, ours = moe_layers()
    ref.bfloat16(), ours.bfloat16()
    x = 3 * torch.randn(2, T, cfg.hidden_size, generator=torch.Generator().manual_seed(5)).bfloat16()
    assert relative(ours(x), ref(x)[0]) < 1e-3


@pytest.mark.parametrize("make, message", [
    (lambda: SinkAttentionConfig(64, 4, 3, 16), "evenly"),
    (lambda: SinkAttentionConfig(64, 4, 2, 15), "cannot be rotated"),
    (lambda: SinkAttentionConfig(64, 4, 2, 16, window=0), "not even itself"),
    (lambda: ClampedMoEConfig(64, 4, 5, 32), "5 experts cannot be chosen from 4"),
    (lambda: ClampedMoEConfig(64, 4, 2, 32, limit=0.0), "no room"),
])
def test_shapes_they_cannot_handle_are_refused_in_one_sentence(make, message):
    with pytest.raises(ValueError, match=message) as refusal:
        make()
    text = str(refusal.value)
    assert "\n" not in text and text.count(". ") == 0 and len(text) < 160
