"""/api/tensors and /api/weights slice a Llama-family model's tensors by that family's names (RMSNorm,
rotary angles, key/value heads, the gated MLP) and refuse the names only GPT-2 has."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.conftest import make_hf_llama_family
from transformer_explainer import load_model
from transformer_explainer.errors import InputError
from transformer_explainer.schemas import TensorSpec
from transformer_explainer.server.encoding import decode_array
from transformer_explainer.slicing import activation_tensor, weight_tensor


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return load_model(str(make_hf_llama_family(tmp_path_factory.mktemp("tiny-llama"), "llama")),
                      allow_download=False)


def values(t) -> np.ndarray:
    return np.asarray(decode_array(t.data, t.shape, t.dtype), dtype=np.float64)


def test_llama_names_are_sliced_in_their_own_family(llama):
    tr = llama.trace("The quick brown fox")
    T, c = len(tr.token_ids), llama.config
    angles = activation_tensor(tr, TensorSpec(name="rope.angles", dtype="float32"))
    assert angles.dims == ["T", "R"] and angles.shape == [T, c.head_dim // 2]
    a = values(angles)
    assert a[0].tolist() == [0.0] * (c.head_dim // 2) and math.isclose(a[2, 0], 2.0, rel_tol=1e-6)
    row = activation_tensor(tr, TensorSpec(name="rope.angles", position=2, dtype="float32"))
    assert row.shape == [c.head_dim // 2] and np.allclose(values(row), a[2])
    kv = activation_tensor(tr, TensorSpec(name="blocks.1.attn.kv_head"))
    assert values(kv).tolist() == [h // (c.n_head // c.n_kv_heads) for h in range(c.n_head)]
    k = activation_tensor(tr, TensorSpec(name="blocks.0.attn.k", position=1))
    assert k.dims == ["G", "Dh"] and k.shape == [c.n_kv_heads, c.head_dim]
    rms = activation_tensor(tr, TensorSpec(name="blocks.0.ln1.rms"))
    assert rms.shape == [T]
    gate = weight_tensor(llama, TensorSpec(name="blocks.0.mlp.W_gate", row=0))
    assert gate.shape == [c.d_mlp]


def test_names_the_family_lacks_are_refused(llama):
    tr = llama.trace("The quick brown fox")
    for name in ("embed.position", "blocks.0.ln1.mean", "blocks.0.mlp.pre"):
        with pytest.raises(InputError, match="unknown tensor name"):
            activation_tensor(tr, TensorSpec(name=name))
    with pytest.raises(InputError, match="unknown tensor name"):
        weight_tensor(llama, TensorSpec(name="blocks.0.ln1.b"))
    with pytest.raises(InputError, match="is a weight"):
        activation_tensor(tr, TensorSpec(name="blocks.0.mlp.W_gate"))
