"""Sparse autoencoders (features/sae.py): encoding as the format's architectures define it, files written by an
independent writer of the SAELens format, hub references from the cache offline, and the one-sentence refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from transformer_explainer.errors import CheckpointError, ExplainerError, InputError, ModelNotFoundError
from transformer_explainer.features.sae import (
    SAEConfig,
    SparseAutoencoder,
    builtin_saes,
    check_fits,
    load_sae,
    save_sae,
    trace_name,
)

D_IN, D_SAE, K = 64, 256, 8


def reference_tensors(seed: int = 0, d_in: int = D_IN, d_sae: int = D_SAE) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"W_enc": torch.randn(d_in, d_sae, generator=g) / d_in**0.5,
            "b_enc": torch.randn(d_sae, generator=g) * 0.1,
            "W_dec": torch.randn(d_sae, d_in, generator=g) / d_in**0.5,
            "b_dec": torch.randn(d_in, generator=g) * 0.1}


def write_reference(folder: Path, cfg: dict, tensors: dict[str, torch.Tensor]) -> Path:
    """A folder as SAELens writes one, written here with json and safetensors directly (not with save_sae)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cfg.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "sae_weights.safetensors"))
    return folder


def v6_topk_cfg(hook: str = "blocks.1.hook_resid_post", d_in: int = D_IN) -> dict:
    """cfg.json as SAELens 6 writes it: the hook and model in `metadata`."""
    return {"d_in": d_in, "d_sae": D_SAE, "k": K, "architecture": "topk", "dtype": "float32", "device": "cpu",
            "apply_b_dec_to_input": True, "normalize_activations": "none", "reshape_activations": "none",
            "metadata": {"model_name": "tiny", "hook_name": hook, "hook_head_index": None, "prepend_bos": True,
                         "context_size": 128, "sae_lens_version": "6.5.0"}}


def independent_topk(x: torch.Tensor, t: dict[str, torch.Tensor], k: int) -> torch.Tensor:
    pre = (x - t["b_dec"]) @ t["W_enc"] + t["b_enc"]
    out = torch.zeros_like(pre)
    for row in range(pre.shape[0]):  # one vector at a time, by sorting: not the code under test's topk + scatter
        order = torch.argsort(pre[row], descending=True)[:k]
        out[row, order] = pre[row, order].clamp(min=0)
    return out


def test_reference_folder_loads_and_encodes_as_the_format_says(tmp_path: Path) -> None:
    t = reference_tensors()
    sae = load_sae(write_reference(tmp_path / "ref", v6_topk_cfg(), t))
    assert sae.cfg.hook_name == "blocks.1.hook_resid_post" and sae.cfg.k == K and sae.cfg.architecture == "topk"
    assert sae.cfg.model_name == "tiny" and sae.cfg.context_size == 128
    x = torch.randn(20, D_IN, generator=torch.Generator().manual_seed(1)) * 3
    f = sae.encode(x)
    assert f.shape == (20, D_SAE)
    assert torch.allclose(f, independent_topk(x, t, K), atol=1e-5)
    assert ((f != 0).sum(-1) <= K).all()
    recon = sae.decode(f)
    assert recon.shape == (20, D_IN)
    assert torch.allclose(recon, f @ t["W_dec"] + t["b_dec"], atol=1e-5)
    error = x - recon
    assert torch.allclose(sae.decode(f) + error, x, atol=1e-5)
    r2, f2 = sae(x)
    assert torch.equal(r2, recon) and torch.equal(f2, f)


def test_pre_6_flat_topk_as_an_activation(tmp_path: Path) -> None:
    """SAELens before 6: architecture standard with activation_fn_str topk and its k in activation_fn_kwargs."""
    t = reference_tensors(2)
    cfg = {"d_in": D_IN, "d_sae": D_SAE, "architecture": "standard", "activation_fn_str": "topk",
           "activation_fn_kwargs": {"k": 4}, "hook_point": "blocks.0.hook_resid_pre", "dtype": "torch.float32"}
    sae = load_sae(write_reference(tmp_path / "old", cfg, t))
    assert sae.cfg.architecture == "topk" and sae.cfg.k == 4 and sae.cfg.hook_name == "blocks.0.hook_resid_pre"
    x = torch.randn(5, D_IN)
    assert torch.allclose(sae.encode(x), independent_topk(x, t, 4), atol=1e-5)


def test_relu_and_jumprelu(tmp_path: Path) -> None:
    """GPT-2 small's public residual autoencoders are ReLU ones ("standard"); Gemma Scope's JumpReLU."""
    t = reference_tensors(3)
    base = {"d_in": D_IN, "d_sae": D_SAE, "hook_name": "blocks.1.hook_resid_pre", "apply_b_dec_to_input": False}
    x = torch.randn(7, D_IN)
    pre = x @ t["W_enc"] + t["b_enc"]
    relu = load_sae(write_reference(tmp_path / "relu", {**base, "architecture": "standard"}, t))
    assert torch.allclose(relu.encode(x), pre.clamp(min=0), atol=1e-5)
    threshold = torch.full((D_SAE,), 0.3)
    jump = load_sae(write_reference(tmp_path / "jump", {**base, "architecture": "jumprelu"},
                                    {**t, "threshold": threshold}))
    assert torch.allclose(jump.encode(x), torch.where(pre > 0.3, pre, torch.zeros(())), atol=1e-5)
    with pytest.raises(CheckpointError, match="lacks threshold"):
        load_sae(write_reference(tmp_path / "jump2", {**base, "architecture": "jumprelu"}, t))


def test_save_and_load_round_trip_in_float16(tmp_path: Path) -> None:
    sae = load_sae(write_reference(tmp_path / "ref", v6_topk_cfg(), reference_tensors()))
    folder = save_sae(sae, tmp_path / "out", dtype=torch.float16)
    cfg = json.loads((folder / "cfg.json").read_text())
    assert cfg["hook_name"] == "blocks.1.hook_resid_post" and cfg["architecture"] == "topk" and cfg["k"] == K
    assert cfg["dtype"] == "float16"
    again = load_sae(folder)
    assert again.W_enc.dtype == torch.float32  # computed in float32 unless asked
    assert torch.allclose(again.W_dec, sae.W_dec, atol=2e-3)
    assert load_sae(folder, dtype="float16").W_dec.dtype == torch.float16


def test_hub_reference_from_the_cache_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "models--someone--tiny-saes"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    t = reference_tensors(4)
    write_reference(repo / "snapshots" / commit / "res" / "blocks.1.hook_resid_post", v6_topk_cfg(), t)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    sae = load_sae("hf:someone/tiny-saes/res/blocks.1.hook_resid_post", cache_dir=cache)
    assert torch.equal(sae.W_enc, t["W_enc"])
    with pytest.raises(ModelNotFoundError, match="not in the Hugging Face cache and the hub is offline"):
        load_sae("hf:someone/tiny-saes/res/blocks.2.hook_resid_post", cache_dir=cache)
    with pytest.raises(InputError, match="not a hub reference"):
        load_sae("hf:nobody", cache_dir=cache)


@pytest.mark.parametrize(("change", "message"), [
    (lambda f: (f / "sae_weights.safetensors").unlink(), "sae_weights.safetensors is missing"),
    (lambda f: (f / "cfg.json").unlink(), "cfg.json is missing"),
    (lambda f: (f / "cfg.json").write_text("{not json"), "not readable JSON"),
    (lambda f: (f / "sae_weights.safetensors").write_bytes(b"\x00" * 10), "corrupt or truncated"),
    (lambda f: save_file({**reference_tensors(), "W_dec": torch.zeros(D_SAE, D_IN + 1)},
                         str(f / "sae_weights.safetensors")), r"W_dec has shape \[256, 65\]"),
    (lambda f: save_file({k: v for k, v in reference_tensors().items() if k != "b_enc"},
                         str(f / "sae_weights.safetensors")), "lacks b_enc"),
    (lambda f: save_file({**reference_tensors(), "b_dec": torch.full((D_IN,), float("nan"))},
                         str(f / "sae_weights.safetensors")), "not finite"),
    (lambda f: (f / "cfg.json").write_text(json.dumps({**v6_topk_cfg(), "architecture": "gated"})),
     "architecture 'gated' is not one this project runs"),
    (lambda f: (f / "cfg.json").write_text(json.dumps({**v6_topk_cfg(), "normalize_activations":
                                                       "expected_average_only_in"})), "only 'none' is read"),
    (lambda f: (f / "cfg.json").write_text(json.dumps({**v6_topk_cfg(), "metadata": {}})), "names no hook point"),
    (lambda f: (f / "cfg.json").write_text(json.dumps(v6_topk_cfg("blocks.1.attn.hook_z"))),
     "not a hook point an autoencoder can read"),
    (lambda f: (f / "cfg.json").write_text(json.dumps({**v6_topk_cfg(), "k": 0})), "needs k between 1"),
    (lambda f: (f / "cfg.json").write_text(json.dumps({**v6_topk_cfg(), "hook_point_head_index": 3})),
     "one attention head's values is not read here"),
])
def test_bad_folders_are_one_sentence(tmp_path: Path, change, message: str) -> None:
    folder = write_reference(tmp_path / "sae", v6_topk_cfg(), reference_tensors())
    change(folder)
    with pytest.raises(ExplainerError, match=message) as e:
        load_sae(folder)
    assert "\n" not in str(e.value)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="no autoencoder folder"):
        load_sae(tmp_path / "nothing")


def test_trace_names() -> None:
    assert trace_name("blocks.3.hook_resid_post") == "blocks.3.resid_post"
    assert trace_name("blocks.0.hook_resid_pre") == "blocks.0.resid_pre"
    assert trace_name("blocks.11.hook_resid_mid") == "blocks.11.resid_mid"
    assert trace_name("blocks.2.hook_mlp_out") == "blocks.2.mlp_out"
    assert trace_name("blocks.2.hook_attn_out") == "blocks.2.attn_out"
    for bad in ("blocks.2.attn.hook_z", "hook_embed", "blocks.x.hook_resid_post", "blocks.1.resid_post"):
        with pytest.raises(InputError, match="not a hook point"):
            trace_name(bad)


def test_check_fits(tiny_model) -> None:  # the tiny GPT-2: 2 layers, d_model 64
    def sae(hook: str, d_in: int = 64) -> SparseAutoencoder:
        return SparseAutoencoder(SAEConfig(d_in=d_in, d_sae=128, k=4, hook_name=hook))

    check_fits(sae("blocks.1.hook_resid_post"), tiny_model)
    check_fits(sae("blocks.0.hook_mlp_out"), tiny_model)
    with pytest.raises(InputError, match="has 2 layers"):
        check_fits(sae("blocks.5.hook_resid_post"), tiny_model)
    with pytest.raises(InputError, match="reads vectors of width 96 but .* has width 64"):
        check_fits(sae("blocks.1.hook_resid_post", 96), tiny_model)


def test_builtin_saes_of_a_model_that_is_not_built_in(tiny_model) -> None:
    assert builtin_saes(tiny_model) == {}
    assert builtin_saes("no-such-model") == {}
