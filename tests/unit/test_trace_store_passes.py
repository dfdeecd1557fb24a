"""A text edited at its end again and again (issue 40): each edit continues the cached trace, and each continuation
adds a pass to its recipe, which every view of the text runs again. A chain of MAX_PASSES passes was not continued:
one edit in MAX_PASSES traced the text whole (at 1,000 tokens on GPT-2 small's shape, 1.8 s of forward: the 90th
percentile of web_latency's edits). Now the store makes such a chain one pass, and every edit continues."""

from __future__ import annotations

import torch

from tests.conftest import random_ids
from transformer_explainer.memo.costs import MAX_PASSES, values_of
from transformer_explainer.memo.recipes import RecordedPass, flattened
from transformer_explainer.memo.store import TraceStore


def test_every_edit_of_a_long_chain_continues_its_beginning(tiny_model):
    store = TraceStore(2**30)
    vocab, n = tiny_model.config.vocab_size, 60
    ids = random_ids(n, vocab, 1)
    store.get("m", tiny_model, ids)
    for k in range(3 * MAX_PASSES):
        ids = ids[:-2] + random_ids(2, vocab, 100 + k)
        trace, computed = store.get("m", tiny_model, ids, wanting=["blocks.1.attn.pattern"])
        assert computed == [n - 2, n], k  # never traced whole
        assert values_of(trace).blocks.passes < MAX_PASSES
    fresh = tiny_model.trace_ids(ids)
    for name in ("blocks.0.attn.pattern", "blocks.1.mlp.post", "blocks.1.resid_post", "logits"):
        torch.testing.assert_close(trace[name], fresh[name], rtol=1e-4, atol=1e-5)


def test_a_flattened_recipe_is_one_pass_equal_to_the_chain(tiny_model):
    store = TraceStore(2**30)
    vocab, n = tiny_model.config.vocab_size, 40
    ids = random_ids(n, vocab, 2)
    store.get("m", tiny_model, ids)
    for k in range(MAX_PASSES - 2):  # a chain one pass short of the limit
        ids = ids[:-1] + random_ids(1, vocab, 200 + k)
        trace, _ = store.get("m", tiny_model, ids)
    chain = values_of(trace).blocks
    assert chain.passes == MAX_PASSES - 1
    flat = flattened(chain)
    assert isinstance(flat, RecordedPass) and flat.passes == 1 and flat.n_tokens == n
    assert len({t.untyped_storage().data_ptr() for t in flat.inputs}) == 1  # one storage: freed in one piece
    for layer in range(tiny_model.config.n_layer):
        torch.testing.assert_close(flat.entering(layer), chain.entering(layer), rtol=0, atol=0)
        a, b = flat.block(layer), chain.block(layer)
        assert a.keys() == b.keys()
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)


def test_a_patched_recipe_is_not_flattened(tiny_model):
    ids = random_ids(12, tiny_model.config.vocab_size, 3)
    patched = tiny_model.trace_ids(ids, patches={"blocks.0.attn_out": lambda v: 2 * v})
    assert flattened(values_of(patched).blocks) is None


def test_the_store_flattens_at_the_limit(tiny_model):
    """The continuation that makes the chain MAX_PASSES long is made one pass (and continued by the next edit); the
    block a view read of its beginning is ready for the one pass (its next view runs nothing), the others not."""
    store = TraceStore(2**30)
    vocab = tiny_model.config.vocab_size
    ids = random_ids(30, vocab, 4)
    trace, _ = store.get("m", tiny_model, ids)
    trace["blocks.1.attn.pattern"]  # a view of block 1
    passes = []
    for k in range(MAX_PASSES):
        ids = ids[:-1] + random_ids(1, vocab, 300 + k)
        trace, _ = store.get("m", tiny_model, ids)
        blocks = values_of(trace).blocks
        passes.append(blocks.passes)
        if blocks.passes == 1:
            assert blocks.kept(1, store.blocks) and not blocks.kept(0, store.blocks)
            fresh = tiny_model.trace_ids(ids)
            for name in ("blocks.1.attn.pattern", "blocks.1.mlp.post", "blocks.0.attn.pattern"):
                torch.testing.assert_close(trace[name], fresh[name], rtol=1e-4, atol=1e-5)
        trace["blocks.1.attn.pattern"]
    assert passes == [*range(2, MAX_PASSES), 1, 2]
