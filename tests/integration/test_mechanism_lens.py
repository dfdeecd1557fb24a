"""The mechanism lens (bridge/mechanisms.py): a Qwen3.5 / Qwen3-Next model runs through transformers' own modules, and
each Gated DeltaNet layer also answers its internals in our names, derived on access by our module from the layer's
recorded input. Our derived output equals transformers' recorded one; the implied attention reconstructs the reads;
only the DeltaNet layers answer the names; the forward records nothing more (the trace holds the same bytes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from transformer_explainer import load_model
from transformer_explainer.bridge import find_mechanisms, record
from transformer_explainer.bridge.mechanisms import DELTANET_STAGES
from transformer_explainer.generic import GenericModel
from transformer_explainer.names import block_name

from ..helpers.hf_checkpoints import write_checkpoint

TEXT = "The king said, 'Hello!' and then left the room; the queen stayed, and the king came back."
DELTANET = ("qwen3_5_text", "qwen3_next")


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


@pytest.fixture(scope="module", params=DELTANET)
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> GenericModel:
    folder = write_checkpoint(request.param, tmp_path_factory.mktemp(request.param) / "ckpt", tokenizer=True)
    m = load_model(str(folder), dtype="float32")
    assert isinstance(m, GenericModel)
    return m


def deltanet_layers(m: GenericModel) -> list[int]:
    return [i for i, layer in enumerate(m.config.layers) if "linear_attention" in layer.kinds]


def test_derived_output_equals_transformers_module_output(model: GenericModel) -> None:
    """Our module on the layer's recorded input gives what transformers' module returned (fp32, 1e-5 of its scale)."""
    trace = model.trace(TEXT)
    layers = deltanet_layers(model)
    assert layers == [0, 2]  # the checkpoints' linear_attention layers
    mechanisms = find_mechanisms(model.hf)
    assert sorted(mechanisms) == layers and {m.kind for m in mechanisms.values()} == {"gated_deltanet"}
    for i in layers:
        derived = mechanisms[i].derive(trace[block_name(i, "linear_attn.in")])
        recorded = trace[block_name(i, "linear_attn.out")]  # the hook's: transformers' module output
        assert derived["linear_attn.out"].shape == recorded.shape == (trace.n_tokens, model.config.n_embd)
        assert relative(derived["linear_attn.out"], recorded) < 1e-5, i
        for stage in DELTANET_STAGES:  # the trace answers the same values the mechanism derives
            assert torch.equal(trace[block_name(i, stage)], derived[stage]), stage


def test_the_internals_are_those_of_a_gated_deltanet(model: GenericModel) -> None:
    trace = model.trace(TEXT)
    T = trace.n_tokens
    for i in deltanet_layers(model):
        v = trace[block_name(i, "linear_attn.v")]
        H = v.shape[0]
        w = trace[block_name(i, "linear_attn.implied_pattern")]
        assert w.shape == (H, T, T) and (w.triu(1) == 0).all()  # no token reads a later one
        assert relative(w @ v.float(), trace[block_name(i, "linear_attn.o")].float()) < 1e-5  # o_t = sum_s w[t,s] v_s
        beta, decay = trace[block_name(i, "linear_attn.beta")], trace[block_name(i, "linear_attn.decay")]
        assert beta.shape == decay.shape == (H, T)
        assert ((beta > 0) & (beta < 1)).all() and (decay < 0).all()
        q, k = trace[block_name(i, "linear_attn.q")], trace[block_name(i, "linear_attn.k")]
        assert torch.allclose(k.norm(dim=-1), torch.ones(()), atol=1e-3)  # unit keys
        assert torch.allclose(q.norm(dim=-1), torch.full((), q.shape[-1] ** -0.5), atol=1e-3)
        assert (w < 0).any()  # not a softmax: some weights are negative (random weights)


def test_the_names_are_listed_for_deltanet_layers_only(model: GenericModel) -> None:
    c = model.config
    names = set(c.activation_names())
    for i, layer in enumerate(c.layers):
        has = i in deltanet_layers(model)
        assert layer.mechanism == ("gated_deltanet" if has else None)
        for stage in DELTANET_STAGES:
            assert (block_name(i, stage) in names) == has == c.computes(i, stage), (i, stage)
        assert f"blocks.{i}.linear_attn.state" not in names  # the state per token is never answered
    trace = model.trace(TEXT)
    assert block_name(1, "linear_attn.implied_pattern") not in trace.names()
    with pytest.raises(KeyError):
        trace[block_name(1, "linear_attn.beta")]  # a full-attention layer has no write strength


def test_the_forward_records_nothing_new_and_each_layer_is_derived_once(model: GenericModel) -> None:
    ids = model.tokenizer.encode(TEXT)
    trace = model.trace_ids(ids)
    memory = trace.memory
    plain = record(model.hf, ids, leave_out=model._leave_out)  # the bridge's recording, no lens
    assert set(memory.kept) == set(plain.values)
    assert not any(name.endswith(DELTANET_STAGES) for name in memory.kept)
    before = memory.nbytes()
    assert before == model.trace_bytes(len(ids))
    cache = memory.block_cache
    misses = cache.misses
    i = deltanet_layers(model)[0]
    for stage in DELTANET_STAGES:
        trace[block_name(i, stage)]
    assert cache.misses == misses + 1  # every stage of the layer from one run of our module
    assert memory.nbytes() == before  # derived values live in the block cache, not in the trace


def test_a_cut_trace_derives_the_prefix(model: GenericModel) -> None:
    """A causal layer's first n positions do not depend on what follows: the cut trace's internals are the whole
    trace's first rows."""
    trace = model.trace(TEXT)
    n = trace.n_tokens // 2
    cut = trace.memory.cut(n)
    i = deltanet_layers(model)[-1]
    whole = trace[block_name(i, "linear_attn.implied_pattern")]
    assert torch.allclose(cut[block_name(i, "linear_attn.implied_pattern")], whole[:, :n, :n], atol=1e-6)


def test_no_mechanism_for_a_model_without_deltanet(tmp_path: Path) -> None:
    folder = write_checkpoint("phi3", tmp_path / "phi3", tokenizer=True)
    m = load_model(str(folder), dtype="float32")
    assert isinstance(m, GenericModel) and find_mechanisms(m.hf) == {}
    assert all(layer.mechanism is None for layer in m.config.layers)
    assert not any(".linear_attn." in n for n in m.config.activation_names())


def test_a_head_of_a_deltanet_layer_slices_by_its_own_heads(tmp_path: Path) -> None:
    """8 value heads on 2 key heads beside attention's 4 query heads on 2: value head 5 reads key head 5 // 4 = 1 (the
    attention's heads would have refused head 5, or sliced another head on a larger model)."""
    from transformer_explainer.encoding import decode_array
    from transformer_explainer.schemas import TensorSpec
    from transformer_explainer.slicing import activation_tensor

    folder = write_checkpoint("qwen3_5_text", tmp_path / "wide", tokenizer=True, linear_num_value_heads=8)
    m = load_model(str(folder), dtype="float32")
    trace = m.trace(TEXT)
    k = trace[block_name(0, "linear_attn.k")]
    assert k.shape[0] == 2 and trace[block_name(0, "linear_attn.beta")].shape[0] == 8 and m.config.n_head == 4
    got = activation_tensor(trace, TensorSpec(name=block_name(0, "linear_attn.k"), head=5, dtype="float32"))
    assert got.kv_head == 1
    assert torch.equal(torch.from_numpy(decode_array(got.data, got.shape, "float32")), k[1])
    beta = activation_tensor(trace, TensorSpec(name=block_name(0, "linear_attn.beta"), head=7, dtype="float32"))
    assert torch.equal(torch.from_numpy(decode_array(beta.data, beta.shape, "float32")),
                       trace[block_name(0, "linear_attn.beta")][7])
