"""What the Qwen3 / Gemma chapter (web/src/lessons/stable.ts, step "qk-bound") says QK-norm bounds, checked on the
tensors of tiny random Qwen3 and Gemma 3 checkpoints: these blocks are pre-norm, so multiplying the whole residual
stream by 100 (the embedding, here) changes no attention score; multiplying a block's query weights by 10 multiplies
its projected queries (and the bound before the norm) by 10 but leaves the normed queries and the scores as they
were; and every score stays within attn_scale × max|g_q| √d_head × max|g_k| √d_head, the bound from the QK-norm
scales (|q · k| <= ||g_q ⊙ q̂|| ||g_k ⊙ k̂|| with ||q̂|| <= √d_head), whatever the weights."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file, save_file

from tests.conftest import make_hf_llama_family
from transformer_explainer import load_model

TEXT = "The quick brown fox jumps over the lazy dog"


def scaled_copy(folder: Path, out: Path, factors: dict[str, float]) -> Path:
    """The checkpoint with the named tensors multiplied (names as the HF file spells them)."""
    shutil.copytree(folder, out)
    left = dict(factors)
    for st in sorted(out.glob("*.safetensors")):  # one file or several shards
        tensors = load_file(str(st))
        here = {n: f for n, f in left.items() if n in tensors}
        for name, f in here.items():
            tensors[name] = (tensors[name].float() * f).to(tensors[name].dtype)
            del left[name]
        if here:
            save_file(tensors, str(st), metadata={"format": "pt"})
    assert not left, f"no such tensors: {sorted(left)}"
    return out


def arrays(folder: Path, *names: str) -> list[np.ndarray]:
    tr = load_model(str(folder), allow_download=False).trace(TEXT)
    return [np.asarray(tr[n], dtype=np.float64) for n in names]


@pytest.fixture(scope="module", params=["qwen3", "gemma3_text"])
def folder(request, tmp_path_factory) -> Path:
    return make_hf_llama_family(tmp_path_factory.mktemp(request.param), request.param)


NAMES = ("blocks.0.attn.scaled_scores", "blocks.0.attn.q", "blocks.0.attn.q_norm.out", "blocks.0.attn.k_norm.out")


def test_the_stream_s_size_changes_no_score(folder, tmp_path):
    base = arrays(folder, *NAMES, "blocks.0.resid_pre")
    x100 = scaled_copy(folder, tmp_path / "x100", {"model.embed_tokens.weight": 100.0})
    big = arrays(x100, *NAMES, "blocks.0.resid_pre")
    finite = np.isfinite(base[0])
    np.testing.assert_allclose(big[4], 100 * base[4], rtol=1e-3)  # the stream 100 times as long ...
    np.testing.assert_allclose(big[1], base[1], rtol=1e-3, atol=1e-4)  # ... the same projected queries (ln1 first)
    np.testing.assert_allclose(big[0][finite], base[0][finite], rtol=1e-3, atol=1e-4)  # ... and the same scores


def test_query_weights_scale_the_raw_bound_not_the_scores(folder, tmp_path):
    base = arrays(folder, *NAMES)
    grown = arrays(scaled_copy(folder, tmp_path / "wq10", {"model.layers.0.self_attn.q_proj.weight": 10.0}), *NAMES)
    finite = np.isfinite(base[0])
    np.testing.assert_allclose(grown[1], 10 * base[1], rtol=1e-3, atol=1e-4)  # the projected query: 10 times
    np.testing.assert_allclose(grown[2], base[2], rtol=1e-3, atol=1e-4)  # the normed query: as it was
    np.testing.assert_allclose(grown[0][finite], base[0][finite], rtol=1e-3, atol=1e-4)


def test_every_score_is_within_the_bound_from_the_norm_scales(folder, tmp_path):
    model = load_model(str(folder), allow_download=False)
    tr, cfg = model.trace(TEXT), model.config
    for factor in (1.0, 30.0):  # with the query and key weights as they are, and grown 30 times
        if factor != 1.0:
            f = scaled_copy(folder, tmp_path / f"qk{factor}", {"model.layers.0.self_attn.q_proj.weight": factor,
                                                               "model.layers.0.self_attn.k_proj.weight": factor})
            model = load_model(str(f), allow_download=False)
            tr = model.trace(TEXT)
        gq, gk = (float(model.weight(f"blocks.0.attn.{n}_norm.w").abs().max()) for n in "qk")
        dh = cfg.head_dim
        qn, kn = (np.asarray(tr[n], dtype=np.float64) for n in NAMES[2:])
        assert np.linalg.norm(qn, axis=-1).max() <= gq * np.sqrt(dh) * (1 + 1e-5)
        assert np.linalg.norm(kn, axis=-1).max() <= gk * np.sqrt(dh) * (1 + 1e-5)
        scores = np.asarray(tr[NAMES[0]], dtype=np.float64)
        cap = cfg.attn_scale * gq * np.sqrt(dh) * gk * np.sqrt(dh)
        assert np.abs(scores[np.isfinite(scores)]).max() <= cap * (1 + 1e-5)
