"""Tensor slicing answers each family's own names: the Llama family's rope.angles, attn.rot_q and
attn.W_K (with its key/value-head dims), and refuses GPT-2-only names for it."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from tests.conftest import make_hf_llama_family
from transformer_explainer.engine import load_model
from transformer_explainer.errors import InputError
from transformer_explainer.schemas import TensorSpec
from transformer_explainer.slicing import activation_tensor, weight_tensor


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return load_model(str(make_hf_llama_family(tmp_path_factory.mktemp("tiny-llama"), "llama")), allow_download=False)


def arr(t) -> np.ndarray:
    return np.frombuffer(base64.b64decode(t.data), np.float32).reshape(t.shape)


def test_llama_names_slice(llama):
    tr = llama.trace("hello there world")
    angles = activation_tensor(tr, TensorSpec(name="rope.angles", dtype="float32"))
    assert angles.dims == ["T", "R"] and angles.shape == [tr.n_tokens, llama.config.head_dim // 2]
    np.testing.assert_array_equal(arr(angles), tr["rope.angles"].float().numpy())
    rq = activation_tensor(tr, TensorSpec(name="blocks.1.attn.rot_q", head=3, position=-1, dtype="float32"))
    assert rq.dims == ["Dh"]
    np.testing.assert_array_equal(arr(rq), tr["blocks.1.attn.rot_q"][3, -1].float().numpy())
    k = activation_tensor(tr, TensorSpec(name="blocks.0.attn.k", dtype="float32"))
    assert k.dims == ["G", "T", "Dh"] and k.shape[0] == llama.config.n_kv_heads == 2
    wk = weight_tensor(llama, TensorSpec(name="blocks.0.attn.W_K", row=1, dtype="float32"))
    assert wk.dims == ["D", "Dh"]
    np.testing.assert_array_equal(arr(wk), llama.weight("blocks.0.attn.W_K")[1].float().numpy())
    with pytest.raises(InputError, match="unknown tensor name"):
        activation_tensor(tr, TensorSpec(name="embed.position"))  # GPT-2's, not the Llama family's
    with pytest.raises(InputError, match="is a weight"):
        activation_tensor(tr, TensorSpec(name="blocks.0.attn.W_K"))
