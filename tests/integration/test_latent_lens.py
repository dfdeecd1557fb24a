"""The latent-attention lens (bridge/latent_lens.py): a DeepSeek-V3 model runs through transformers' own modules, and
each attention layer also answers its multi-head latent attention's latents in our names (attn.q_latent,
attn.kv_latent, attn.k_rope), derived on access by our own LatentAttention built on the layer's own weights, from
the layer's recorded input. Our module's pattern and output equal transformers' recorded ones (fp32, 1e-5 relative to
scale); the latent equals kv_a_layernorm(kv_a_proj_with_mqa(x)[..., :rank]) of transformers' own modules; the rotary
key is the last Dr dimensions of every head's key transformers' attention read. With a query latent or without one,
pairs interleaved (DeepSeek's) or split in halves, and a YaRN-stretched rotary embedding (its scale folded into the
softmax's)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformer_explainer import load_model  # noqa: E402
from transformer_explainer.bridge import find_mechanisms  # noqa: E402
from transformer_explainer.bridge.latent_lens import LATENT_STAGES, LatentAttentionLens  # noqa: E402
from transformer_explainer.generic import GenericModel  # noqa: E402
from transformer_explainer.names import block_name  # noqa: E402

from ..helpers.hf_checkpoints import write_checkpoint  # noqa: E402

TEXT = "The king said, 'Hello!' and then left the room; the queen stayed, and the king came back."
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32,
        "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}
SHAPES = {"v3": {}, "no-query-latent, halves": dict(q_lora_rank=None, rope_interleave=False),
          "yarn": dict(rope_parameters=YARN)}


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-12))


@pytest.fixture(scope="module", params=list(SHAPES))
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> GenericModel:
    folder = write_checkpoint("deepseek_v3", tmp_path_factory.mktemp("deepseek_v3") / "ckpt", tokenizer=True,
                              **SHAPES[request.param])
    m = load_model(str(folder), dtype="float32")
    assert isinstance(m, GenericModel)
    return m


def test_our_module_equals_transformers_attention(model: GenericModel) -> None:
    """Our LatentAttention on the layer's input gives transformers' pattern, q, k, v and output."""
    trace = model.trace(TEXT)
    mechanisms = find_mechanisms(model.hf)
    assert sorted(mechanisms) == list(range(model.config.n_layer))  # every layer's attention is MLA
    assert {m.kind for m in mechanisms.values()} == {"latent_attention"}
    assert [layer.mechanism for layer in model.config.layers] == ["latent_attention"] * model.config.n_layer
    for i, lens in mechanisms.items():
        assert isinstance(lens, LatentAttentionLens)
        ours = lens.run(trace[block_name(i, "resid_pre")])
        for stage in ("attn.pattern", "attn.q", "attn.k", "attn.v", "attn.z", "attn_out"):
            assert ours[stage].shape == trace[block_name(i, stage)].shape, stage
            assert relative(ours[stage], trace[block_name(i, stage)]) < 1e-5, (i, stage)
        for stage in lens.stages:  # the trace answers what the lens derives
            assert torch.equal(trace[block_name(i, stage)], ours[stage]), stage


def test_the_latents_are_transformers_modules(model: GenericModel) -> None:
    """The latents against transformers' own modules on the layer's own norm of its input, and the rotary key against
    the keys transformers' attention read."""
    trace = model.trace(TEXT)
    cfg = model.hf.config
    for i, layer in enumerate(model.hf.model.layers):
        attn = layer.self_attn
        with torch.no_grad():
            x = layer.input_layernorm(trace[block_name(i, "resid_pre")][None])[0]  # the attention module's input
            latent = attn.kv_a_layernorm(attn.kv_a_proj_with_mqa(x)[..., :cfg.kv_lora_rank])
        assert relative(trace[block_name(i, "attn.kv_latent")], latent) < 1e-6, i
        k = trace[block_name(i, "attn.k")]  # (H, T, Dn + Dr): every head's key as transformers' attention read it
        k_rope = trace[block_name(i, "attn.k_rope")]
        assert k_rope.shape == (trace.n_tokens, cfg.qk_rope_head_dim)
        for h in range(k.shape[0]):  # one rotary key shared by every head
            assert relative(k_rope, k[h, :, cfg.qk_nope_head_dim:]) < 1e-5, (i, h)
        if cfg.q_lora_rank is None:
            assert block_name(i, "attn.q_latent") not in model.config.activation_names()
            with pytest.raises(KeyError):
                trace[block_name(i, "attn.q_latent")]
        else:
            with torch.no_grad():
                q_latent = attn.q_a_layernorm(attn.q_a_proj(x))
            assert relative(trace[block_name(i, "attn.q_latent")], q_latent) < 1e-6, i


def test_the_forward_records_no_latent(model: GenericModel) -> None:
    """The latents are derived on access: the pass keeps none of them."""
    trace = model.trace(TEXT)
    kept = trace.memory.kept
    assert not any(name.endswith(LATENT_STAGES) for name in kept)
    assert block_name(0, "attn.kv_latent") in trace
