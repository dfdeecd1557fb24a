"""Multi-head latent attention and DeepSeekMoE in code of our own (models/latent_attention.py, models/deepseek_moe.py)
against transformers' DeepSeek-V3 layers: the outputs of their forwards on random weights, each named internal against
an independent computation (the latent from kv_a_proj's weights by hand, the rotation as DeepSeek's reference writes
it, with complex numbers), the chosen experts against transformers' router, the cache's bytes against hand
arithmetic, and the shapes they refuse."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers.hf_checkpoints import FAMILIES, SMALL
from transformer_explainer.models.deepseek_moe import DeepSeekMoE, DeepSeekMoEConfig
from transformer_explainer.models.latent_attention import (
    LatentAttention,
    LatentAttentionConfig,
    absorbed_scores,
    kv_cache_bytes,
    softmax_scale,
)
from transformer_explainer.models.recorder import Recorder
from transformer_explainer.name_options import DEEPSEEK_MOE_ACTIVATIONS, MLA_ACTIVATIONS

transformers = pytest.importorskip("transformers")
hf = pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3")

YARN = dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32, mscale=1.0, mscale_all_dim=1.0,
            rope_theta=10000.0)
ATTENTION_SHAPES = {  # the checkpoints' (query latent, DeepSeek's interleaved rotary pairs); V2-Lite's full query
    "checkpoint": {},  # projection with Llama's pairs and values narrower than keys; YaRN's scale and the biases
    "no_query_latent": dict(q_lora_rank=None, rope_interleave=False, v_head_dim=8),
    "yarn_biases": dict(rope_parameters=YARN, attention_bias=True, kv_lora_rank=24, qk_rope_head_dim=12, head_dim=12),
}
MOE_SHAPES = {  # the checkpoints' (4 experts in 2 groups, 1 chosen, 2 experts); 8 in 4 groups, 2 chosen, 3 experts,
    "checkpoint": {},  # a shared expert 2 wide, no renormalisation
    "eight_experts": dict(n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3, n_shared_experts=2,
                          norm_topk_prob=False, routed_scaling_factor=1.5),
}
T = 40  # longer than a few tokens: the causal mask and the rotation's angles matter


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).abs().max() / want.abs().max()).item()


def config(shape: dict) -> transformers.PretrainedConfig:
    cfg = transformers.AutoConfig.for_model("deepseek_v3", **{**SMALL, **FAMILIES["deepseek_v3"], **shape})
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


def randomize_(module: torch.nn.Module, seed: int) -> None:
    """The checkpoints' scale: matrices N(0, 0.2), vectors (norms' weights, biases) in [0.5, 1.5]."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.2) if p.ndim > 1 else p.uniform_(0.5, 1.5)


def attention_layers(shape: str, seed: int = 0) -> tuple[transformers.PretrainedConfig, torch.nn.Module,
                                                          LatentAttention]:
    """transformers' DeepseekV3Attention with random weights, and ours with its state dict, key for key."""
    cfg = config(ATTENTION_SHAPES[shape])
    ref = hf.DeepseekV3Attention(cfg, 0).eval()
    randomize_(ref, seed)
    ours = LatentAttention(LatentAttentionConfig.from_hf(cfg)).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    return cfg, ref, ours


def inputs(cfg, seed: int = 1, batch: int = 2) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """x (B, T, D) and cos, sin of positions 0..T-1 from transformers' own rotary embedding module."""
    x = torch.randn(batch, T, cfg.hidden_size, generator=torch.Generator().manual_seed(seed))
    positions = torch.arange(T)[None].expand(batch, T)
    return x, hf.DeepseekV3RotaryEmbedding(cfg)(x, positions)


def causal_mask() -> torch.Tensor:
    return torch.full((T, T), torch.finfo(torch.float32).min).triu(1)[None, None]


def recorded(module: torch.nn.Module, *args, scope: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    rec = Recorder()
    out = module(*args, rec=rec.scope(scope))
    return out, dict(rec.values)


@pytest.mark.parametrize("shape", list(ATTENTION_SHAPES))
@torch.no_grad()
def test_attention_output_equals_transformers_forward(shape):
    cfg, ref, ours = attention_layers(shape)
    x, rope = inputs(cfg)
    want, want_pattern = ref(x, rope, causal_mask())
    assert relative(ours(x, rope), want) < 1e-5  # the fast path
    got, values = recorded(ours, x, rope, scope="attn")
    assert relative(got, want) < 1e-5
    assert relative(values["attn.pattern"], want_pattern) < 1e-5


def rotate_as_deepseek(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleave: bool) -> torch.Tensor:
    """DeepSeek's reference rotation, by complex numbers: each pair (x_2i, x_2i+1) (interleaved) or (x_i, x_i+Dr/2)
    is a complex number times e^(i * angle); returned in transformers' layout, the pairs' first members then their
    second. cos and sin (B, T, Dr) hold each angle's twice."""
    half = x.shape[-1] // 2
    pairs = torch.complex(x[..., 0::2], x[..., 1::2]) if interleave else torch.complex(x[..., :half], x[..., half:])
    turned = pairs * torch.complex(cos[..., :half], sin[..., :half]).unsqueeze(1)
    return torch.cat((turned.real, turned.imag), dim=-1)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps) * weight


@pytest.mark.parametrize("shape", list(ATTENTION_SHAPES))
@torch.no_grad()
def test_every_named_internal_equals_an_independent_computation(shape):
    cfg, ref, ours = attention_layers(shape, seed=2)
    x, (cos, sin) = inputs(cfg, seed=3)
    _, got = recorded(ours, x, (cos, sin), scope="attn")
    table = set(MLA_ACTIVATIONS) - ({"attn.q_latent"} if cfg.q_lora_rank is None else set())
    assert set(got) == table  # the table names what is recorded (the query latent where the model has one)
    B, H, R, Dn, Dr, Dv = 2, cfg.num_attention_heads, cfg.kv_lora_rank, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, \
        cfg.v_head_dim
    # the latent and the rotary key from kv_a_proj_with_mqa's rows: the first R the latent's, the last Dr the key's
    w, b = ref.kv_a_proj_with_mqa.weight, ref.kv_a_proj_with_mqa.bias
    compressed = x @ w.T + (0 if b is None else b)
    assert relative(got["attn.kv_latent"], rms_norm(compressed[..., :R], ref.kv_a_layernorm.weight)) < 1e-6
    k_rope = rotate_as_deepseek(compressed[..., None, :, R:], cos, sin, cfg.rope_interleave).squeeze(1)
    assert relative(got["attn.k_rope"], k_rope) < 1e-6
    # queries: through the query latent where there is one
    if cfg.q_lora_rank is None:
        q = x @ ref.q_proj.weight.T
    else:
        q_latent = rms_norm(x @ ref.q_a_proj.weight.T + (0 if ref.q_a_proj.bias is None else ref.q_a_proj.bias),
                            ref.q_a_layernorm.weight)
        assert relative(got["attn.q_latent"], q_latent) < 1e-6
        q = q_latent @ ref.q_b_proj.weight.T
    q = q.view(B, T, H, Dn + Dr).transpose(1, 2)
    q = torch.cat((q[..., :Dn], rotate_as_deepseek(q[..., Dn:], cos, sin, cfg.rope_interleave)), dim=-1)
    assert relative(got["attn.q"], q) < 1e-6
    # each head's key and value: its rows of kv_b_proj, Dn key rows then Dv value rows
    w_ukv = ref.kv_b_proj.weight.view(H, Dn + Dv, R)
    latent = rms_norm(compressed[..., :R], ref.kv_a_layernorm.weight)
    k_nope = torch.einsum("btr,hnr->bhtn", latent, w_ukv[:, :Dn])
    v = torch.einsum("btr,hvr->bhtv", latent, w_ukv[:, Dn:])
    k = torch.cat((k_nope, k_rope[:, None].expand(B, H, T, Dr)), dim=-1)
    assert relative(got["attn.k"], k) < 1e-6 and relative(got["attn.v"], v) < 1e-6
    # every head's key shares one rotary part
    assert torch.equal(got["attn.k"][..., Dn:], got["attn.k"][:, :1, :, Dn:].expand(B, H, T, Dr))
    scores = q @ k.transpose(-1, -2)
    assert relative(got["attn.scores"], scores) < 1e-5
    pattern = torch.softmax((scores * ref.scaling).masked_fill(torch.ones(T, T).triu(1).bool(), -math.inf), -1)
    assert relative(got["attn.pattern"], pattern) < 1e-5
    assert torch.allclose(got["attn.pattern"].sum(-1), torch.ones(B, H, T)) and (got["attn.pattern"].triu(1) == 0).all()
    assert relative(got["attn.z"], pattern @ v) < 1e-5
    # the scores read from the cache itself: the up-projection folded into the query
    absorbed = absorbed_scores(ours, got["attn.q"], got["attn.kv_latent"], got["attn.k_rope"])
    assert relative(absorbed, got["attn.scores"]) < 1e-5


def test_softmax_scale_is_transformers():
    """1 / sqrt(Dn + Dr), times YaRN's mscale squared where mscale_all_dim is set (DeepSeek-V3's checkpoints: factor 40,
    mscale_all_dim 1)."""
    for shape in ATTENTION_SHAPES:
        cfg, ref, ours = attention_layers(shape)
        assert ours.config.softmax_scale == pytest.approx(ref.scaling, rel=1e-12)
    assert softmax_scale(24) == 24**-0.5
    yarn = (0.1 * math.log(4.0) + 1) ** 2 / 24**0.5
    assert LatentAttentionConfig.from_hf(config(ATTENTION_SHAPES["yarn_biases"])).softmax_scale == pytest.approx(
        (0.1 * math.log(4.0) + 1) ** 2 / (16 + 12) ** 0.5)
    assert softmax_scale(24, YARN) == pytest.approx(yarn)
    v3 = dict(rope_type="yarn", factor=40, mscale=1.0, mscale_all_dim=1.0)
    assert softmax_scale(192, v3) == pytest.approx(192**-0.5 * (0.1 * math.log(40) + 1) ** 2)
    assert softmax_scale(24, {**YARN, "mscale_all_dim": 0}) == 24**-0.5  # YaRN without it: unscaled


@torch.no_grad()
def test_the_keys_and_values_come_from_the_latent_alone():
    """Patch the cached latent to zeros: every head's key loses all but its rotary part, every value is 0, so each
    head's output z is 0 (and the scores are the rotary parts' alone)."""
    cfg, _, ours = attention_layers("checkpoint")
    x, rope = inputs(cfg)
    rec = Recorder(patches={"attn.kv_latent": torch.zeros_like})
    ours(x, rope, rec.scope("attn"))
    Dn = cfg.qk_nope_head_dim
    assert (rec.values["attn.v"] == 0).all() and (rec.values["attn.k"][..., :Dn] == 0).all()
    assert (rec.values["attn.z"] == 0).all()
    q, k_rope = rec.values["attn.q"][..., Dn:], rec.values["attn.k_rope"]
    assert relative(rec.values["attn.scores"], q @ k_rope[:, None].transpose(-1, -2)) < 1e-6


# -- DeepSeekMoE ---------------------------------------------------------------------------------------------------


def moe_layers(shape: str, seed: int = 0) -> tuple[transformers.PretrainedConfig, torch.nn.Module, DeepSeekMoE]:
    """transformers' DeepseekV3MoE with random weights and a random choice bias, and ours with its state dict."""
    cfg = config(MOE_SHAPES[shape])
    ref = hf.DeepseekV3MoE(cfg).eval()
    randomize_(ref, seed)
    with torch.no_grad():  # a bias that changes choices: the router's sigmoid scores differ by about this much
        ref.gate.e_score_correction_bias.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(seed))
    ours = DeepSeekMoE(DeepSeekMoEConfig.from_hf(cfg)).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    return cfg, ref, ours


@pytest.mark.parametrize("shape", list(MOE_SHAPES))
@torch.no_grad()
def test_moe_output_and_choices_equal_transformers(shape):
    cfg, ref, ours = moe_layers(shape)
    x = torch.randn(2, T, cfg.hidden_size, generator=torch.Generator().manual_seed(5))
    want = ref(x)
    assert relative(ours(x), want) < 1e-5  # the fast path
    got, values = recorded(ours, x, scope="mlp")
    assert relative(got, want) < 1e-5
    assert set(values) == set(DEEPSEEK_MOE_ACTIVATIONS)  # the table names what is recorded
    logits, weights, indices = ref.gate(x)  # transformers' topk is unsorted: compare each token's set
    ours_sorted, order = values["mlp.expert_indices"].reshape(-1, cfg.num_experts_per_tok).sort(dim=-1)
    want_sorted, want_order = indices.sort(dim=-1)
    assert torch.equal(ours_sorted, want_sorted)
    assert relative(values["mlp.expert_weights"].reshape(-1, cfg.num_experts_per_tok).gather(-1, order),
                    weights.gather(-1, want_order)) < 1e-6
    assert relative(values["mlp.router_logits"].reshape(-1, cfg.n_routed_experts), logits) < 1e-6
    assert relative(values["mlp.shared_out"], ref.shared_experts(x)) < 1e-6
    assert relative(values["mlp.routed_out"], ref.experts(x.view(-1, cfg.hidden_size), indices, weights)
                    .view_as(x)) < 1e-5


@torch.no_grad()
def test_bfloat16_rounds_as_transformers_does():
    """In bfloat16 the layers agree to well under one rounding step (2^-8 relative; 0 on this machine's CPU): norms and
    softmax in float32, the router and the weights in float32, each weighted expert output rounded and added as
    transformers adds them. (Summing the weighted outputs in float32 first gave 4e-3 and 6e-3 here.)"""
    for shape in ATTENTION_SHAPES:
        cfg, ref, ours = attention_layers(shape)
        ref.bfloat16(), ours.bfloat16()
        x, rope = inputs(cfg)
        x, rope = x.bfloat16(), tuple(r.bfloat16() for r in rope)
        assert relative(ours(x, rope).float(), ref(x, rope, causal_mask().bfloat16())[0].float()) < 1e-3, shape
    for shape in MOE_SHAPES:
        cfg, ref, ours = moe_layers(shape)
        ref.bfloat16(), ours.bfloat16()
        x = torch.randn(2, T, cfg.hidden_size, generator=torch.Generator().manual_seed(5)).bfloat16()
        assert relative(ours(x).float(), ref(x).float()) < 1e-3, shape


@pytest.mark.parametrize("shape", list(MOE_SHAPES))
@torch.no_grad()
def test_group_limited_routing_by_hand(shape):
    """Each token's groups and experts computed one token at a time in plain Python: groups ranked by their two best
    (score + bias), experts by (score + bias) within the chosen groups, weights from the scores without the bias."""
    cfg, ref, ours = moe_layers(shape, seed=1)
    x = torch.randn(1, T, cfg.hidden_size, generator=torch.Generator().manual_seed(6))
    _, values = recorded(ours, x, scope="mlp")
    E, G, Kg, K = cfg.n_routed_experts, cfg.n_group, cfg.topk_group, cfg.num_experts_per_tok
    per = E // G
    bias = ref.gate.e_score_correction_bias.tolist()
    for t in range(T):
        s = torch.sigmoid(x[0, t] @ ref.gate.weight.T).tolist()
        c = [s[e] + bias[e] for e in range(E)]
        group_score = [sum(sorted(c[g * per:(g + 1) * per])[-2:]) for g in range(G)]
        groups = sorted(range(G), key=lambda g: -group_score[g])[:Kg]
        allowed = [e for e in range(E) if e // per in groups]
        experts = sorted(allowed, key=lambda e: -c[e])[:K]
        total = sum(s[e] for e in experts) if cfg.norm_topk_prob else 1.0
        weights = [s[e] / total * cfg.routed_scaling_factor for e in experts]
        assert values["mlp.chosen_groups"][0, t].tolist() == groups, t
        assert values["mlp.expert_indices"][0, t].tolist() == experts, t
        assert values["mlp.expert_weights"][0, t].tolist() == pytest.approx(weights, rel=1e-5), t
        assert values["mlp.group_scores"][0, t].tolist() == pytest.approx(group_score, rel=1e-5), t


@torch.no_grad()
def test_the_bias_steers_the_choice_not_the_weight():
    """A large bias on expert 0 sends every token to it (its group first), and its weight is still its score's share,
    as without the bias."""
    cfg, ref, ours = moe_layers("eight_experts", seed=2)
    x = torch.randn(1, T, cfg.hidden_size, generator=torch.Generator().manual_seed(7))
    ours.gate.e_score_correction_bias.zero_()
    ours.gate.e_score_correction_bias[0] = 10.0
    _, values = recorded(ours, x, scope="mlp")
    assert (values["mlp.expert_indices"][..., 0] == 0).all() and (values["mlp.chosen_groups"][..., 0] == 0).all()
    scores = values["mlp.router_scores"]
    assert relative(values["mlp.expert_weights"][..., 0], scores[..., 0] * cfg.routed_scaling_factor) < 1e-6


# -- the cache's size ----------------------------------------------------------------------------------------------


def test_kv_cache_bytes_by_hand():
    """DeepSeek-V3's shape (transformers' DeepseekV3Config defaults): 128 heads, a latent of 512 and a rotary key of
    64, keys of 128 + 64 and values of 128, 61 layers; bfloat16."""
    cfg = transformers.AutoConfig.for_model("deepseek_v3")
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.q_lora_rank, cfg.kv_lora_rank,
            cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim) == (61, 7168, 128, 1536, 512, 128, 64, 128)
    m = kv_cache_bytes(LatentAttentionConfig.from_hf(cfg))
    assert m.mla == (512 + 64) * 2 == 1152
    assert m.mha == 128 * (128 + 64 + 128) * 2 == 81920  # 71x MLA's
    assert m.gqa == 8 * (128 + 64 + 128) * 2 == 5120 and m.gqa_heads == 8
    assert m.per_model(61, 1000) == {"mla": 1152 * 61_000, "mha": 81920 * 61_000, "gqa": 5120 * 61_000}
    small = kv_cache_bytes(LatentAttentionConfig(64, 4, None, 16, 16, 8, 12), gqa_heads=2, bytes_per_value=4)
    assert (small.mla, small.mha, small.gqa) == ((16 + 8) * 4, 4 * (16 + 8 + 12) * 4, 2 * (16 + 8 + 12) * 4)


# -- what they refuse ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make, message", [
    (lambda: LatentAttentionConfig(64, 4, 32, 16, 16, 7, 16), "cannot be rotated"),
    (lambda: LatentAttentionConfig(64, 4, 0, 16, 16, 8, 16), "holds nothing"),
    (lambda: LatentAttentionConfig(64, 0, 32, 16, 16, 8, 16), "at least one head"),
    (lambda: kv_cache_bytes(LatentAttentionConfig(64, 4, 32, 16, 16, 8, 16), gqa_heads=3), "evenly"),
    (lambda: DeepSeekMoEConfig(64, 6, 2, 32, n_group=4), "groups evenly"),
    (lambda: DeepSeekMoEConfig(64, 4, 2, 32, n_group=4, topk_group=1), "at least 2 experts a group"),
    (lambda: DeepSeekMoEConfig(64, 8, 2, 32, n_group=2, topk_group=3), "3 of 2 groups"),
    (lambda: DeepSeekMoEConfig(64, 8, 5, 32, n_group=2, topk_group=1), "5 experts cannot be chosen"),
    (lambda: DeepSeekMoEConfig.from_hf(config(dict(hidden_act="gelu"))), "use SiLU"),
])
def test_shapes_they_cannot_handle_are_refused_in_one_sentence(make, message):
    with pytest.raises(ValueError, match=message) as refusal:
        make()
    text = str(refusal.value)
    assert "\n" not in text and text.count(". ") == 0 and len(text) < 160
