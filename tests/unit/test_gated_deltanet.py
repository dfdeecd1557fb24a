"""Gated DeltaNet in code of our own (models/gated_deltanet.py) against transformers' Qwen3.5 layer: the output of its
forward, each named internal against transformers' own functions (the state after each token against
`torch_recurrent_gated_delta_rule` run on the prefix), the implied attention against the reads it must reconstruct
and a closed form of its own, and the memory figures against hand arithmetic."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.hf_checkpoints import FAMILIES, SMALL
from transformer_explainer.models.gated_deltanet import (
    GatedDeltaNet,
    GatedDeltaNetConfig,
    implied_attention,
    qwen3_next_weights,
    state_memory,
)
from transformer_explainer.models.recorder import Recorder
from transformer_explainer.name_options import GATED_DELTANET_ACTIVATIONS

transformers = pytest.importorskip("transformers")
hf = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")

SHAPES = {  # the checkpoints' (4 value heads sharing 2 key heads), a key wider than a value, one value head per key
    "grouped": {},
    "wide_keys": dict(linear_key_head_dim=16, linear_value_head_dim=8),
    "ungrouped": dict(linear_num_value_heads=2, linear_num_key_heads=2, linear_conv_kernel_dim=3),
}


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).abs().max() / want.abs().max()).item()


def layers(shape: str, seed: int = 0) -> tuple[torch.nn.Module, GatedDeltaNet]:
    """transformers' Qwen3.5 Gated DeltaNet layer with random weights (the checkpoints' scale), and ours with its
    state dict, key for key."""
    cfg = transformers.AutoConfig.for_model("qwen3_5_text", **{**SMALL, **FAMILIES["qwen3_5_text"], **SHAPES[shape]})
    torch.manual_seed(seed)
    ref = hf.Qwen3_5GatedDeltaNet(cfg, 0)
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0.0, 0.2) if p.ndim > 1 else p.uniform_(0.5, 1.5)
    ours = GatedDeltaNet(GatedDeltaNetConfig.from_hf(cfg))
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ref.eval(), ours.eval()


def reference_inputs(ref: torch.nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """What transformers' layer hands its delta rule, computed with its own modules and functions: q, k, v
    (B, T, heads, dim) before the L2 norm, g and beta (B, T, H), and the gate's input z."""
    B, T, _ = x.shape
    mixed = hf.causal_conv1d_fn(ref.in_proj_qkv(x).transpose(1, 2), ref.conv1d.weight.squeeze(1), None,
                                activation="silu").transpose(1, 2)
    q, k, v = torch.split(mixed, [ref.key_dim, ref.key_dim, ref.value_dim], dim=-1)
    return dict(query=q.reshape(B, T, -1, ref.head_k_dim), key=k.reshape(B, T, -1, ref.head_k_dim),
                value=v.reshape(B, T, -1, ref.head_v_dim), beta=ref.in_proj_b(x).sigmoid(),
                g=-ref.A_log.float().exp() * F.softplus(ref.in_proj_a(x).float() + ref.dt_bias),
                z=ref.in_proj_z(x).reshape(B, T, -1, ref.head_v_dim))


def recorded(ours: GatedDeltaNet, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Our forward with every stage kept, the state included (asked for by name)."""
    rec = Recorder(keep=lambda name: True)
    out = ours(x, rec.scope("linear_attn"))
    return out, {name.removeprefix("linear_attn."): value for name, value in rec.values.items()}


@pytest.mark.parametrize("shape", list(SHAPES))
@torch.no_grad()
def test_output_equals_transformers_forward(shape):
    """T = 70 crosses transformers' chunk of 64: its chunked sums against our token-by-token recurrence."""
    ref, ours = layers(shape)
    x = torch.randn(2, 70, SMALL["hidden_size"], generator=torch.Generator().manual_seed(1))
    want = ref(x)
    assert relative(ours(x), want) < 1e-5  # the fast path
    got, _ = recorded(ours, x)
    assert relative(got, want) < 1e-5


@pytest.mark.parametrize("shape", list(SHAPES))
@torch.no_grad()
def test_qwen3_next_weights_give_its_layer_output(shape):
    """Qwen3-Next's layer (q, k, v, z and b, a projected in two matrices, rows grouped by key head) through
    `qwen3_next_weights`: the same output as transformers' forward, and each value head's own rows (a layer that
    read them in another order would give another output)."""
    next_hf = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    cfg = transformers.AutoConfig.for_model("qwen3_next", **{**SMALL, **FAMILIES["qwen3_next"], **SHAPES[shape]})
    torch.manual_seed(7)
    ref = next_hf.Qwen3NextGatedDeltaNet(cfg, 0).eval()
    for p in ref.parameters():
        p.data.normal_(0.0, 0.2) if p.ndim > 1 else p.data.uniform_(0.5, 1.5)
    ours = GatedDeltaNet(GatedDeltaNetConfig.from_hf(cfg))
    ours.load_state_dict(qwen3_next_weights(ref.state_dict(), GatedDeltaNetConfig.from_hf(cfg)), strict=True)
    x = torch.randn(2, 70, SMALL["hidden_size"], generator=torch.Generator().manual_seed(8))
    assert relative(ours(x), ref(x)) < 1e-5


@pytest.mark.parametrize("shape", list(SHAPES))
@torch.no_grad()
def test_every_named_internal_equals_transformers(shape):
    ref, ours = layers(shape, seed=3)
    x = torch.randn(1, 23, SMALL["hidden_size"], generator=torch.Generator().manual_seed(2))
    _, got = recorded(ours, x)
    assert set(f"linear_attn.{n}" for n in got) == set(GATED_DELTANET_ACTIVATIONS)  # the table names what is recorded
    r = reference_inputs(ref, x)
    heads_first = {n: r[n].transpose(1, 2) for n in ("query", "key", "value", "z")}  # (B, heads, T, dim)
    assert relative(got["q"], hf.l2norm(heads_first["query"]) / ref.head_k_dim**0.5) < 1e-6
    assert relative(got["k"], hf.l2norm(heads_first["key"])) < 1e-6
    assert relative(got["v"], heads_first["value"]) < 1e-6
    assert relative(got["beta"], r["beta"].transpose(1, 2)) < 1e-6
    assert relative(got["decay"], r["g"].transpose(1, 2)) < 1e-6
    assert relative(got["gate"], F.silu(heads_first["z"])) < 1e-6
    assert (got["decay"] < 0).all() and ((got["beta"] > 0) & (got["beta"] < 1)).all()
    args = {n: r[n] for n in ("query", "key", "value", "g", "beta")}
    reads, _ = hf.torch_recurrent_gated_delta_rule(**args, use_qk_l2norm_in_kernel=True)
    assert relative(got["o"], reads.transpose(1, 2)) < 1e-5
    T = x.shape[1]
    assert got["state"].shape == (1, ref.num_v_heads, T, ref.head_k_dim, ref.head_v_dim)
    for t in range(1, T + 1):  # the state after token t-1: transformers' recurrence run on the first t tokens
        prefix = {n: a[:, :t] for n, a in args.items()}
        _, final = hf.torch_recurrent_gated_delta_rule(**prefix, output_final_state=True, use_qk_l2norm_in_kernel=True)
        assert relative(got["state"][:, :, t - 1], final) < 1e-5, t


@torch.no_grad()
def test_the_state_is_kept_only_where_a_recorder_asks_for_it():
    """A recorder that keeps everything (keep=None) skips the state (H * T * Dk * Dv values); an observer gets it;
    a patch of the state changes the reads taken from it."""
    _, ours = layers("grouped")
    x = torch.randn(1, 9, SMALL["hidden_size"])
    everything = Recorder()
    out = ours(x, everything.scope("linear_attn"))
    assert "linear_attn.o" in everything.values and "linear_attn.state" not in everything.values
    norms = Recorder(observers={"linear_attn.state": lambda s: s.flatten(-2).norm(dim=-1)})
    assert torch.allclose(ours(x, norms.scope("linear_attn")), out, rtol=1e-5, atol=1e-6)
    assert norms.observed["linear_attn.state"].shape == (1, 4, 9)
    emptied = Recorder(patches={"linear_attn.state": torch.zeros_like})
    ours(x, emptied.scope("linear_attn"))
    assert (emptied.values["linear_attn.o"] == 0).all()


@pytest.mark.parametrize("shape", list(SHAPES))
@torch.no_grad()
def test_implied_attention_reconstructs_the_reads(shape):
    _, ours = layers(shape, seed=5)
    x = torch.randn(2, 31, SMALL["hidden_size"], generator=torch.Generator().manual_seed(4))
    _, got = recorded(ours, x)
    w = implied_attention(got["q"], got["k"], got["beta"], got["decay"])
    T = x.shape[1]
    assert w.shape == (2, got["v"].shape[1], T, T)
    assert (w.triu(1) == 0).all()  # no token reads a later one
    assert relative(w @ got["v"], got["o"]) < 1e-5  # o_t = sum_s w[t, s] v_s
    one = implied_attention(got["q"][0], got["k"][0], got["beta"][0], got["decay"][0])  # no batch dim
    assert torch.equal(one, w[0])


def closed_form(q, k, beta, g):
    """The implied attention by another road, in float64: with the writes u_s = beta_s (v_s - S'^T k_s) the state
    is S_t = sum_s gamma(t, s) k_s u_s^T (gamma the decay between s and t), so the reads are O = M U with
    M = tril(Q K^T * gamma); the writes solve (I + diag(beta) L) U = diag(beta) V with L the strictly lower
    tril(K K^T * gamma). So W = M (I + diag(beta) L)^-1 diag(beta)."""
    q, k, beta, g = q.double(), k.double(), beta.double(), g.double()
    cum = g.cumsum(-1)
    T = q.shape[-2]
    lower = torch.ones(T, T, dtype=torch.bool).tril()
    gamma = (cum[..., :, None] - cum[..., None, :]).masked_fill(~lower, float("-inf")).exp()
    M = (q @ k.transpose(-1, -2)) * gamma
    L = ((k @ k.transpose(-1, -2)) * gamma).tril(-1)
    system = torch.eye(T, dtype=torch.float64) + beta[..., :, None] * L
    return M @ torch.linalg.solve_triangular(system, torch.diag_embed(beta), upper=False, unitriangular=True)


def test_implied_attention_equals_its_closed_form():
    gen = torch.Generator().manual_seed(6)
    G, H, T, Dk = 2, 4, 40, 8
    q = F.normalize(torch.randn(G, T, Dk, generator=gen), dim=-1) / Dk**0.5
    k = F.normalize(torch.randn(G, T, Dk, generator=gen), dim=-1)
    beta = torch.rand(H, T, generator=gen)
    g = -torch.rand(H, T, generator=gen) * 0.5
    want = closed_form(q.repeat_interleave(2, dim=0), k.repeat_interleave(2, dim=0), beta, g)
    got = implied_attention(q, k, beta, g)
    assert (got.double() - want).abs().max() < 1e-6 * want.abs().max()
    # one token: w = beta q.k; with no decay and beta = 1 a repeated key overwrites: the first write is gone
    assert torch.allclose(got[:, 0, 0], beta[:, 0] * (q[:, 0] * k[:, 0]).sum(-1).repeat_interleave(2))
    same = k[:, :1].expand(G, 2, Dk)
    overwritten = implied_attention(q[:, :2], same, torch.ones(H, 2), torch.zeros(H, 2))
    assert torch.allclose(overwritten[:, 1, 0], torch.zeros(H), atol=1e-6)


def test_state_memory_by_hand():
    """Qwen3.5's configuration defaults: 32 value heads and 16 key heads of 128, a kernel of 4; full attention with 4
    key/value heads of 256."""
    cfg = transformers.AutoConfig.for_model("qwen3_5_text")
    m = state_memory(GatedDeltaNetConfig.from_hf(cfg), cfg.num_key_value_heads, cfg.head_dim)
    assert m.state_bytes == 32 * 128 * 128 * 4 == 2 * 2**20  # float32: 2 MiB
    assert m.conv_bytes == 3 * (2 * 16 * 128 + 32 * 128) * 2 == 48 * 2**10  # 3 positions of 8192 channels, bf16
    per_token = 2 * 4 * 256 * 2  # keys and values, 4 heads of 256, bf16: 4 KiB
    assert m.kv_cache_bytes == {1024: 1024 * per_token, 32768: 32768 * per_token, 2**20: 2**20 * per_token}
    assert m.kv_cache_bytes[1024] == 4 * 2**20 and m.kv_cache_bytes[2**20] == 4 * 2**30
    assert m.fixed_bytes == 2 * 2**20 + 48 * 2**10
    half = state_memory(GatedDeltaNetConfig(64, 2, 4, 16, 8, 3), 2, 16, (10,), state_bytes_per_value=2,
                        bytes_per_value=1)
    assert (half.state_bytes, half.conv_bytes, half.kv_cache_bytes) == (4 * 16 * 8 * 2, 2 * (64 + 32), {10: 640})


def test_value_heads_must_share_key_heads_evenly():
    with pytest.raises(ValueError, match="cannot share"):
        GatedDeltaNetConfig(64, 3, 4, 16, 16)
