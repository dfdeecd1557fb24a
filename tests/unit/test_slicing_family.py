"""Tensor slicing answers each family's own names: the Llama family's rope.angles, attn.rot_q and
attn.W_K (with its key/value-head dims), and refuses GPT-2-only names for it; head slicing and derived
stages follow names.py's tables (HEAD_DIMS, DERIVATIONS), which the offline snapshot page follows too."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from tests.conftest import make_hf_llama_family
from transformer_explainer.engine import load_model
from transformer_explainer.errors import InputError
from transformer_explainer.names import DERIVATION_OPS, HEAD_DIMS, describe, kv_head_of, names_for, parse_name
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


@pytest.fixture(scope="module")
def traces(tiny_model, llama):
    """One trace per family: GPT-2 (H heads everywhere) and Llama (4 query heads on 2 key/value heads)."""
    return {"gpt2": (tiny_model, tiny_model.trace("hello there world")), "llama": (llama, llama.trace("hello there"))}


def test_head_slicing_follows_the_head_dims_table_for_every_family(traces):
    """Every activation and weight with a head dim, sliced at every query head, is the tensor taken at the
    index its dim's rule (names.HEAD_DIMS) gives: h itself for H, h // (H / G) for G."""
    rules = {"query_head": lambda h, H, G: h, "kv_head_of_query": kv_head_of}
    assert set(HEAD_DIMS.values()) == set(rules)
    seen = set()
    for family, (model, tr) in traces.items():
        cfg = model.config
        t = names_for(family)
        names = [f"blocks.1.{s}" for s in t.block_activations] + [f"blocks.1.{s}" for s in t.block_weights]
        for name in names:
            dims, _ = describe(name, family)
            dim = next((d for d in HEAD_DIMS if d in dims), None)
            if dim is None:
                continue
            weight = name.split(".", 2)[2] in t.block_weights
            if weight and name not in model.weight_names():
                continue  # a bias this model has not
            full = (model.weight(name) if weight else tr[name]).float()
            for h in range(cfg.n_head):
                spec = TensorSpec(name=name, head=h, dtype="float32")
                got = weight_tensor(model, spec) if weight else activation_tensor(tr, spec)
                i = rules[HEAD_DIMS[dim]](h, cfg.n_head, cfg.n_kv_heads)
                assert got.kv_head == (None if HEAD_DIMS[dim] == "query_head" else i)
                np.testing.assert_array_equal(arr(got), full.select(dims.index(dim), i).numpy())
                seen.add((family, dim))
    assert seen == {("gpt2", "H"), ("llama", "H"), ("llama", "G")}


def test_derived_stages_follow_the_derivations_table(traces):
    """Every family's derived stages name a known rule and sources among the family's names (stages of the
    same block, full names for a global stage); the trace answers each, unstored, with its table's dims."""
    for family, (_, tr) in traces.items():
        t = names_for(family)
        for stage, d in t.derivations.items():
            assert d.op in DERIVATION_OPS, (family, stage)
            is_global = stage in t.global_activations
            name = stage if is_global else f"blocks.1.{stage}"
            for src in d.sources:
                parse_name(src if is_global else f"blocks.1.{src}", family)  # KeyError outside the family's names
            assert name not in tr.memory.kept
            dims, _ = describe(name, family)
            assert tr[name].dim() == len(dims), name
