"""OLMo 3's post-norm block in code of our own (models/post_norm_block.py) against transformers' Olmo3DecoderLayer:
outputs on random weights in float32 and bfloat16 (sliding and full layers), each named internal against an
independent computation (QK-norm over the whole projection, the norm after each sublayer), and what the norm's place
changes: each write bounded by its norm's weight, blind to the sublayer's scale, where a pre-norm block of the same
weights is not."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers.hf_checkpoints import FAMILIES, SMALL
from transformer_explainer.models.post_norm_block import (
    PostNormBlock,
    PostNormConfig,
    pre_norm_forward,
    residual_norms,
    write_bound,
)
from transformer_explainer.models.recorder import Recorder
from transformer_explainer.name_options import POST_NORM_BLOCK_ACTIVATIONS

transformers = pytest.importorskip("transformers")
hf = pytest.importorskip("transformers.models.olmo3.modeling_olmo3")
masks = pytest.importorskip("transformers.masking_utils")

T = 24  # several times the window (4): the sliding layers hide keys
LAYERS = {"sliding": 0, "full": 1}  # FAMILIES["olmo3"]: sliding, full, sliding, full


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def config(**overrides) -> transformers.PretrainedConfig:
    cfg = transformers.AutoConfig.for_model("olmo3", **{**SMALL, **FAMILIES["olmo3"], **overrides})
    cfg._attn_implementation = "eager"
    return cfg


def randomize_(module: torch.nn.Module, seed: int) -> None:
    """Matrices N(0, 0.2), norms' weights in [0.5, 1.5]."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.2) if p.ndim > 1 else p.uniform_(0.5, 1.5)


def blocks(layer: str, seed: int = 0) -> tuple[transformers.PretrainedConfig, torch.nn.Module, PostNormBlock]:
    cfg = config()
    ref = hf.Olmo3DecoderLayer(cfg, LAYERS[layer]).eval()
    randomize_(ref, seed)
    ours = PostNormBlock(PostNormConfig.from_hf(cfg, LAYERS[layer])).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    return cfg, ref, ours


def rope(cfg, x: torch.Tensor, layer: str = "full") -> tuple[torch.Tensor, torch.Tensor]:
    positions = torch.arange(T)[None].expand(x.shape[0], T)
    return hf.Olmo3RotaryEmbedding(cfg)(x, positions, cfg.layer_types[LAYERS[layer]])


def inputs(cfg, seed: int = 1, batch: int = 2, layer: str = "full"):
    x = torch.randn(batch, T, cfg.hidden_size, generator=torch.Generator().manual_seed(seed))
    return x, rope(cfg, x, layer)


def hf_mask(cfg, layer: str, x: torch.Tensor) -> torch.Tensor:
    make = masks.create_sliding_window_causal_mask if layer == "sliding" else masks.create_causal_mask
    return make(config=cfg, inputs_embeds=x, attention_mask=None, cache=None,
                position_ids=torch.arange(T)[None].expand(x.shape[0], T), allow_is_causal_skip=False)


def recorded(module, *args):
    rec = Recorder()
    out = module(*args, rec=rec)
    return out, dict(rec.values)


@pytest.mark.parametrize("layer", list(LAYERS))
@torch.no_grad()
def test_block_equals_transformers_decoder_layer(layer):
    cfg, ref, ours = blocks(layer)
    assert ours.config.window == (4 if layer == "sliding" else None)
    x, pe = inputs(cfg, layer=layer)
    want = ref(x, attention_mask=hf_mask(cfg, layer, x), position_embeddings=pe)
    assert relative(ours(x, pe), want) < 1e-5  # the fast path
    got, values = recorded(ours, x, pe)
    assert relative(got, want) < 1e-5
    assert set(values) == set(POST_NORM_BLOCK_ACTIVATIONS)  # the table names what is recorded
    _, want_pattern = ref.self_attn(x, pe, hf_mask(cfg, layer, x))
    assert relative(values["attn.pattern"], want_pattern) < 1e-5


def rms_norm(y: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return y / torch.sqrt(y.square().mean(-1, keepdim=True) + eps) * weight


@pytest.mark.parametrize("layer", list(LAYERS))
@torch.no_grad()
def test_every_named_internal_equals_an_independent_computation(layer):
    cfg, ref, ours = blocks(layer, seed=2)
    x, pe = inputs(cfg, seed=3, layer=layer)
    _, got = recorded(ours, x, pe)
    B, H, G, Dh, D = 2, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
    a = ref.self_attn
    # QK-norm over the whole projection: one rms per position over all H * Dh query values
    q_flat = x @ a.q_proj.weight.T
    assert relative(got["attn.q_norm.rms"], q_flat.square().mean(-1).add(1e-6).sqrt()) < 1e-5
    q = rms_norm(q_flat, a.q_norm.weight)
    assert relative(got["attn.q_norm.out"], q) < 1e-5
    per_head = rms_norm(q_flat.view(B, T, H, Dh), a.q_norm.weight.view(H, Dh)).reshape(B, T, H * Dh)
    assert relative(per_head, q) > 0.01  # each head normed on its own would differ
    k = rms_norm(x @ a.k_proj.weight.T, a.k_norm.weight)
    assert relative(got["attn.k_norm.out"], k) < 1e-5
    # the rotation as complex numbers: pair (i, i + Dh/2) times e^(i * position * theta^(-2i/Dh))
    theta = cfg.rope_parameters[cfg.layer_types[LAYERS[layer]]]["rope_theta"]
    angles = torch.arange(T)[:, None] * theta ** (-torch.arange(0, Dh, 2) / Dh)
    qh = q.view(B, T, H, Dh).transpose(1, 2)
    turned = torch.complex(qh[..., :Dh // 2], qh[..., Dh // 2:]) * torch.polar(torch.ones_like(angles), angles)
    rot_q = torch.cat((turned.real, turned.imag), dim=-1)
    assert relative(got["attn.rot_q"], rot_q) < 1e-5
    # the pattern over the window, and the write after its norm
    W = ours.config.window
    t, s = torch.arange(T)[:, None], torch.arange(T)[None]
    visible = (s <= t) & ((t - s < W) if W is not None else True)
    kh = got["attn.rot_k"].repeat_interleave(H // G, dim=1)
    pattern = torch.softmax((rot_q @ kh.transpose(-1, -2) / math.sqrt(Dh)).masked_fill(~visible, -math.inf), -1)
    assert relative(got["attn.pattern"], pattern) < 1e-5
    attn_out = got["attn.z"].transpose(1, 2).reshape(B, T, H * Dh) @ a.o_proj.weight.T
    assert relative(got["attn.out"], attn_out) < 1e-5
    assert relative(got["attn_out"], rms_norm(attn_out, ref.post_attention_layernorm.weight)) < 1e-5
    assert torch.equal(got["resid_mid"], x + got["attn_out"])  # the residual stream itself never normed
    mlp = ref.mlp(got["resid_mid"])  # the MLP reads the residual stream as it is, no norm before
    assert relative(got["mlp.out"], mlp) < 1e-5
    assert relative(got["mlp_out"], rms_norm(mlp, ref.post_feedforward_layernorm.weight)) < 1e-5
    assert torch.equal(got["resid_post"], got["resid_mid"] + got["mlp_out"])
    assert got["ln1_post.rms"].shape == (B, T) and got["attn_out"].shape == (B, T, D)


@torch.no_grad()
def test_bfloat16_rounds_as_transformers_does():
    """Well under one bfloat16 step (2^-8): norms in float32 with the weight multiplied before the cast, the rotation
    in float32 (transformers' cos and sin stay float32), the softmax in float32."""
    for layer in LAYERS:
        cfg, ref, ours = blocks(layer)
        ref.bfloat16(), ours.bfloat16()
        x = torch.randn(2, T, cfg.hidden_size, generator=torch.Generator().manual_seed(1)).bfloat16()
        pe = rope(cfg, x, layer)
        want = ref(x, attention_mask=hf_mask(cfg, layer, x), position_embeddings=pe)
        assert relative(ours(x, pe), want) < 1e-3, layer
        assert relative(recorded(ours, x, pe)[0], want) < 1e-3, layer


@torch.no_grad()
def test_each_write_is_bounded_by_its_norms_weight():
    """||attn_out|| and ||mlp_out|| <= sqrt(D) * max|gamma| at every position, even for an input 1000 times larger
    and sublayer weights 100 times larger, where the sublayers' own outputs are far beyond it."""
    cfg, _, ours = blocks("full", seed=4)
    x, pe = inputs(cfg, seed=5)
    for p in (ours.self_attn.o_proj.weight, ours.mlp.down_proj.weight):
        p.mul_(100)
    _, got = recorded(ours, 1000 * x, pe)
    for write, sub, norm in (("attn_out", "attn.out", ours.post_attention_layernorm),
                             ("mlp_out", "mlp.out", ours.post_feedforward_layernorm)):
        bound = write_bound(norm)
        assert bound == pytest.approx(math.sqrt(cfg.hidden_size) * norm.weight.abs().max().item())
        assert (got[write].norm(dim=-1) <= bound).all(), write
        assert (got[sub].norm(dim=-1) > 10 * bound).all(), sub


@torch.no_grad()
def test_the_write_is_blind_to_the_sublayers_scale_where_pre_norm_is_not():
    """o_proj and down_proj times 10: the post-norm block's output does not move (norm(c y) = norm(y)); with the same
    weights and the norms moved before the sublayers, what the block adds grows 10 times."""
    cfg, _, ours = blocks("full", seed=6)
    x, pe = inputs(cfg, seed=7)
    post, pre = ours(x, pe), pre_norm_forward(ours, x, pe)
    for p in (ours.self_attn.o_proj.weight, ours.mlp.down_proj.weight):
        p.mul_(10)
    assert relative(ours(x, pe), post) < 1e-5
    pre_delta, pre10_delta = pre - x, pre_norm_forward(ours, x, pe) - x
    ratio = (pre10_delta.norm(dim=-1) / pre_delta.norm(dim=-1)).median().item()
    assert ratio > 5  # about 10: the attention's write exactly 10 times, the MLP's (reading a changed x) about


@torch.no_grad()
def test_residual_growth_across_layers_post_against_pre_norm():
    """Eight random blocks (the same weights both ways): after block l the post-norm stream has grown by at most
    2 * l * sqrt(D) * max|gamma| (triangle inequality); scaling o_proj and down_proj by 4 leaves its lengths as they
    were, and multiplies the pre-norm stream's growth."""
    cfg = config()
    stack = [PostNormBlock(PostNormConfig.from_hf(cfg, 1)).eval() for _ in range(8)]
    for i, block in enumerate(stack):
        randomize_(block, 10 + i)
    x, pe = inputs(cfg, seed=8)
    post, pre = residual_norms(stack, x, pe), residual_norms(stack, x, pe, post=False)
    bound = max(max(write_bound(b.post_attention_layernorm), write_bound(b.post_feedforward_layernorm))
                for b in stack)
    assert all(post[i] <= post[0] + 2 * i * bound for i in range(9))
    for block in stack:
        block.self_attn.o_proj.weight.mul_(4), block.mlp.down_proj.weight.mul_(4)
    post4, pre4 = residual_norms(stack, x, pe), residual_norms(stack, x, pe, post=False)
    assert relative(post4, post) < 1e-4
    assert (pre4[-1] - pre4[0]) > 2 * (pre[-1] - pre[0])


@pytest.mark.parametrize("make, message", [
    (lambda: PostNormConfig(64, 4, 3, 16, 96), "evenly"),
    (lambda: PostNormConfig(64, 4, 2, 15, 96), "cannot be rotated"),
    (lambda: PostNormConfig(64, 4, 2, 16, 96, window=0), "not even itself"),
])
def test_shapes_it_cannot_handle_are_refused_in_one_sentence(make, message):
    with pytest.raises(ValueError, match=message) as refusal:
        make()
    text = str(refusal.value)
    assert "\n" not in text and text.count(". ") == 0 and len(text) < 160
