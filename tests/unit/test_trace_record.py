"""The trace is a record: a mapping of names to tensors, whatever keeps them (`memo.TraceValues`); a KV cache knows
the ids it holds, so a step traced into it needs no other option; a recorder stops a pass where it is told; the
trace store works out which blocks to keep from the names an answer reads."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch

from transformer_explainer.errors import InputError
from transformer_explainer.memo import EAGER
from transformer_explainer.memo.store import TraceStore, blocks_named
from transformer_explainer.models.kv_cache import KVCache
from transformer_explainer.models.recorder import Recorder

TEXT = "Data visualization empowers users to see patterns in data."


def test_a_trace_is_a_mapping_of_names_to_tensors(tiny_model):
    trace = tiny_model.trace(TEXT)
    assert isinstance(trace, Mapping)
    assert list(trace) == trace.names() and len(trace) == len(trace.names())
    assert "blocks.1.attn.pattern" in trace and "blocks.9.attn.pattern" not in trace
    assert trace.get("blocks.9.attn.pattern") is None and trace.get("nonsense", 3) == 3
    assert torch.equal(trace.get("blocks.1.attn.pattern"), trace["blocks.1.attn.pattern"])
    eager = tiny_model.trace_ids(tiny_model.encode(TEXT), memory=EAGER)
    assert dict(trace.items()).keys() == dict(eager.items()).keys()
    for name in ("blocks.0.attn.scores", "blocks.1.mlp.post", "embed.token", "logits"):
        assert torch.equal(trace[name], eager[name]), name


def test_a_kv_cache_remembers_the_ids_a_trace_put_in_it(tiny_model):
    ids = tiny_model.encode(TEXT)
    cache = KVCache()
    tiny_model.trace_ids(ids[:4], cache=cache)
    assert cache.ids == ids[:4]
    step = tiny_model.trace_ids(ids[4:], cache=cache)
    assert step.start == 4 and step.prefix_ids == ids[:4] and cache.ids == ids
    assert step.text == tiny_model.tokenizer.decode(ids)


def test_a_step_leaves_the_ids_it_was_given_alone(tiny_model):
    ids = tiny_model.encode(TEXT)
    first = tiny_model.trace_ids(ids[:4])
    L = tiny_model.config.n_layer
    cache = KVCache([(first[f"blocks.{i}.attn.k"][None], first[f"blocks.{i}.attn.v"][None]) for i in range(L)],
                    ids=first.token_ids)
    tiny_model.trace_ids(ids[4:], cache=cache)
    assert first.token_ids == ids[:4] and cache.ids == ids


def test_a_cache_filled_without_its_ids_is_refused_in_a_sentence(tiny_model):
    ids = tiny_model.encode(TEXT)
    cache = KVCache()
    tiny_model.net(torch.tensor([ids[:4]]), cache=cache, logits_for="last")  # the fast path: no ids kept
    with pytest.raises(InputError, match="holds 4 positions"):
        tiny_model.trace_ids(ids[4:], cache=cache)


def test_a_recorder_stops_the_pass_after_the_name_it_is_told(tiny_model):
    net = tiny_model.net
    x = tiny_model.trace(TEXT)["blocks.0.resid_pre"][None]
    values: dict[str, torch.Tensor] = {}
    rec = Recorder(values, "blocks.0.", stop_after="blocks.0.attn.pattern")
    with torch.inference_mode():
        rec.run(lambda: net.forward_block(0, x, start=0, rec=rec, past=None))
    assert "blocks.0.attn.pattern" in values and "blocks.0.attn.q" in values
    assert not any(n.startswith(("blocks.0.attn.z", "blocks.0.mlp", "blocks.0.resid_post")) for n in values)


def test_the_store_keeps_the_blocks_of_the_names_an_answer_reads(tiny_model):
    assert blocks_named(["blocks.1.attn.pattern", "blocks.0.mlp.post", "logits", "blocks.x.y"]) == {0, 1}
    store = TraceStore(2**28)
    ids = tiny_model.encode(TEXT)
    trace, computed = store.get("tiny", tiny_model, ids, wanting=["blocks.1.attn.pattern", "logits"])
    assert computed == [0, len(ids)] and len(store.blocks) == 1
    misses = store.blocks.misses
    trace["blocks.1.attn.pattern"]  # handed over by the pass: nothing runs again
    assert store.blocks.misses == misses
    assert store.cached("tiny", ids) is trace and store.cached("tiny", ids[:-1], count_miss=False) is None
