"""A trace keeps each block's input and runs the block again when its internals are asked for (`memo/recipes.py`).
Every name of such a trace must equal the same trace recorded eagerly (every intermediate kept during the pass),
bit for bit: for every family (GPT-2, Llama, Qwen2, Mistral, Qwen3, Gemma 3 with a window shorter than the texts),
at several lengths (128: the recorded attention in blocks of queries), after a KV-cache prefix, continued from a
trace and from a cut trace, with patches applied (on the input of a block too), in float32 and bfloat16."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import DECODER_FIXTURES, make_hf_gpt2, make_hf_llama_family
from transformer_explainer import load_model
from transformer_explainer.memo import EAGER, BlockCache, Memory
from transformer_explainer.models.kv_cache import KVCache
from transformer_explainer.names import FAMILY_NAMES
from transformer_explainer.overview import pattern_thumbnail
from transformer_explainer.trace import Trace, truncate_trace

FAMILIES = ["gpt2", *DECODER_FIXTURES]


@pytest.fixture(scope="module", params=FAMILIES)
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp(f"recompute-{request.param}")
    if request.param == "gpt2":  # a context of 128 positions, as the others have
        return make_hf_gpt2(where, n_layer=3)
    return make_hf_llama_family(where, request.param)


@pytest.fixture(scope="module")
def model(folder: Path):
    return load_model(str(folder), allow_download=False)


def _ids(n: int, vocab: int, seed: int = 0) -> list[int]:
    return torch.randint(2, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def assert_same_bits(recomputed: Trace, recorded: Trace) -> None:
    """Every name: the same shape, dtype and bytes; the recomputed trace keeps no block's internals."""
    assert recorded.memory.blocks is None and recomputed.memory.blocks is not None
    assert recomputed.names() == recorded.names()
    assert recomputed.token_ids == recorded.token_ids and recomputed.start == recorded.start
    L = recomputed.config.n_layer
    assert all(not n.startswith("blocks.") or n == f"blocks.{L - 1}.resid_post" for n in recomputed.memory.kept)
    for name in recorded.names():
        a, b = recomputed[name], recorded[name]
        assert a.shape == b.shape and a.dtype == b.dtype, name
        assert torch.equal(_bits(a), _bits(b)), f"{name}: largest difference {(a.double() - b.double()).abs().max()}"
    assert torch.equal(_bits(recomputed.next_token_logits()), _bits(recorded.next_token_logits()))


def test_the_fixture_is_what_it_claims(model):
    c = model.config
    assert c.n_layer >= 2 and c.block_size >= 128
    if c.family == "gemma3":
        assert c.sliding_window is not None and c.sliding_window < 7


@pytest.mark.parametrize("T", [1, 7, 128])
def test_a_recomputed_trace_equals_the_recorded_one(model, T):
    ids = _ids(T, model.config.vocab_size, seed=T)
    lazy, eager = model.trace_ids(ids), model.trace_ids(ids, memory=EAGER)
    assert_same_bits(lazy, eager)
    # the stages outside the blocks too are computed again: the trace keeps the last block's output alone
    assert set(model.trace_ids(ids).memory.kept) == {f"blocks.{model.config.n_layer - 1}.resid_post"}
    # a block read again comes from the block cache: the same tensors, not another run
    name = "blocks.1.attn.pattern"
    assert lazy[name] is lazy[name]
    assert lazy.nbytes() < eager.nbytes()
    # what needs no block's values runs none: its input, and the key/value head each query head reads
    fresh = model.trace_ids(ids)
    fresh["blocks.1.resid_pre"]
    if "blocks.1.attn.kv_head" in fresh:
        fresh["blocks.1.attn.kv_head"]
    assert len(fresh.memory.block_cache) == 0
    # a block the pass hands over as it records it: the same values, nothing run again
    handed = model.trace_ids(ids, memory=Memory(keep_blocks=[1]))
    assert len(handed.memory.block_cache) == 1
    handed[name]
    assert handed.memory.block_cache.misses == 0
    assert_same_bits(handed, eager)


def test_after_a_kv_cache_prefix(model):
    """A generation step's trace (only the new positions, their attention over a cached prefix): its blocks read
    the keys and values the cache held when it was traced, whatever the cache holds later."""
    ids = _ids(120, model.config.vocab_size, seed=1)
    traces = []
    for eager in (False, True):
        cache = KVCache(capacity=128)
        model.trace_ids(ids[:100], cache=cache, memory=Memory(eager=eager))
        step = model.trace_ids(ids[100:], cache=cache, memory=Memory(eager=eager))
        model.trace_ids(ids[:5], cache=cache, memory=Memory(eager=eager))  # the cache goes on growing
        traces.append(step)
    assert traces[0].start == 100
    assert_same_bits(*traces)


@pytest.mark.parametrize("keep_kv", [False, True])
def test_continued_and_cut_traces(model, keep_kv):
    """`extend_trace` continues a trace with a KV cache (its kept keys and values, or its blocks run again for them),
    `truncate_trace` cuts one: the recomputed trace merges and cuts its blocks as the recorded values are."""
    ids = _ids(128, model.config.vocab_size, seed=2)

    def made(eager: bool) -> list[Trace]:
        full = model.trace_ids(ids, memory=Memory(eager=eager, keep_kv=keep_kv))
        head = model.trace_ids(ids[:90], memory=Memory(eager=eager, keep_kv=keep_kv))
        continued = model.extend_trace(head, ids[90:120], memory=Memory(keep_kv=keep_kv))
        twice = model.extend_trace(continued, ids[120:], memory=Memory(keep_kv=keep_kv))
        cut = truncate_trace(full, 70)
        edited = model.extend_trace(cut, ids[70:100])
        return [continued, twice, cut, edited, truncate_trace(twice, 100)]

    for lazy, eager in zip(made(False), made(True), strict=True):
        assert_same_bits(lazy, eager)


def test_with_patches(model):
    """Patches on a head's output, on a block's input (recorded after it: not applied twice), on the pattern (the
    one-product attention) and on the raw scores (then recorded): the recomputed block applies them again."""
    R = model.config.n_head // model.config.n_kv_heads

    def half_head(z):
        z = z.clone()
        z[:, 0] *= 0.5
        return z

    patches = {"blocks.0.attn.z": half_head, "blocks.1.resid_pre": lambda x: x * 1.5,
               "blocks.1.attn.pattern": lambda p: p, "blocks.0.attn.scores": lambda s: s,
               "ln_final.out": lambda x: x + 0.25, "embed.token": lambda x: x * 1.25}
    ids = _ids(70, model.config.vocab_size, seed=3)
    lazy, eager = model.trace_ids(ids, patches=patches), model.trace_ids(ids, patches=patches, memory=EAGER)
    assert_same_bits(lazy, eager)
    assert_same_bits(model.trace_ids(ids, patches=patches, memory=Memory(keep_blocks=[0, 1])), eager)
    plain = model.trace_ids(ids)
    assert not torch.equal(lazy["blocks.1.resid_pre"], plain["blocks.1.resid_pre"])
    assert not torch.equal(lazy["blocks.0.resid_post"], lazy["blocks.1.resid_pre"])  # the patch sits between them
    assert R >= 1 and "blocks.0.attn.scores" in lazy.block(0)
    # the parts outside the blocks a patch edited are kept as the pass recorded them, the others computed again
    assert "ln_final.out" in lazy.memory.kept and "embed.token" in lazy.memory.kept
    assert not any(n.startswith("rope.") for n in lazy.memory.kept)
    # a patched trace continued: the continuation has no patches, the prefix's blocks keep theirs (and its
    # continuation keeps the stages outside the blocks the prefix kept, to be joined to them)
    continued = model.extend_trace(lazy, ids[:9])
    assert "embed.token" in continued.memory.kept and "ln_final.out" in continued.memory.kept
    assert_same_bits(continued, model.extend_trace(eager, ids[:9]))


def test_in_bfloat16(folder):
    model = load_model(str(folder), allow_download=False, dtype="bfloat16")
    ids = _ids(128, model.config.vocab_size, seed=4)
    lazy, eager = model.trace_ids(ids), model.trace_ids(ids, memory=EAGER)
    assert lazy["blocks.0.attn.q"].dtype == torch.bfloat16
    assert_same_bits(lazy, eager)
    assert_same_bits(model.extend_trace(truncate_trace(lazy, 64), ids[64:100]),
                     model.extend_trace(truncate_trace(eager, 64), ids[64:100]))


def test_values_observed_during_the_pass(model):
    """What `observe` keeps is the function of the pass's own value: equal to the function of the value read
    again, so a view may take either."""
    L = model.config.n_layer
    ids = _ids(128, model.config.vocab_size, seed=5)  # the pattern computed in blocks of queries
    names = [f"blocks.{i}.attn.pattern" for i in range(L)]
    lazy = model.trace_ids(ids, memory=Memory(observe={n: pattern_thumbnail for n in names}))
    eager = model.trace_ids(ids, memory=EAGER)
    for n in names:
        assert (n, pattern_thumbnail) in lazy.memory.observations
        assert torch.equal(lazy.memory.observation(n, pattern_thumbnail), pattern_thumbnail(eager[n]))
    assert len(lazy.memory.block_cache) == 0  # nothing was run again for them
    # a continued trace observes them afterwards, each block run only as far as its pattern
    merged = model.extend_trace(model.trace_ids(ids[:100]), ids[100:])
    merged_eager = model.extend_trace(model.trace_ids(ids[:100], memory=EAGER), ids[100:])
    for n in names:
        assert torch.equal(merged.memory.observe(n, pattern_thumbnail), pattern_thumbnail(merged_eager[n]))
    assert len(merged.memory.block_cache) == 0
    partial = merged.memory.block_until(0, "attn.pattern")
    assert "blocks.0.attn.pattern" in partial and "blocks.0.mlp_out" not in partial
    assert torch.equal(_bits(partial["blocks.0.attn.pattern"]), _bits(merged_eager["blocks.0.attn.pattern"]))


def test_materialized_holds_every_value(model):
    ids = _ids(20, model.config.vocab_size, seed=6)
    lazy, eager = model.trace_ids(ids), model.trace_ids(ids, memory=EAGER)
    full = lazy.materialized()
    assert full.memory.blocks is None and set(full.memory.kept) == set(eager.memory.kept)
    for n in eager.memory.kept:
        assert torch.equal(_bits(full.memory.kept[n]), _bits(eager.memory.kept[n])), n
    stages = FAMILY_NAMES[model.config.family].block_activations
    assert any(f"blocks.0.{s}" in full.memory.kept for s in stages if s != "resid_pre")


@pytest.mark.parametrize(("kept", "cut", "total"),
                         [(100, None, 110), (100, 90, 97), (30, None, 40), (64, 62, 66), (60, None, 70)])
def test_a_continued_trace_keeps_the_overview_rows_of_its_beginning(model, kept, cut, total):
    """The overview's summary of each pattern is made row by row (each query's mass per group of keys), so a trace
    continued from a kept (or cut) beginning joins the beginning's rows to those its pass observed, and runs no
    block for its overview: the thumbnails equal those of the whole text traced at once. A pass keeps the rows for
    texts a few tokens longer or shorter too, where their cells hold another number of positions (30 tokens: 1 per
    cell, 34: 2; 64: 2, 66: 3). Further off (60 tokens: 2 per cell, 70: 3), no rows are joined, and the overview
    runs the blocks as far as their patterns."""
    from transformer_explainer.memo.summaries import overview_summaries, overview_summary
    from transformer_explainer.overview import overview_thumbnails

    L = model.config.n_layer
    ids = _ids(total, model.config.vocab_size, seed=11)
    beginning = model.trace_ids(ids[:kept], memory=Memory(keep_kv=True, observe=overview_summaries(L, kept)))
    if cut is not None:
        beginning = truncate_trace(beginning, cut)
    start = cut or kept
    merged = model.extend_trace(beginning, ids[start:],
                                memory=Memory(keep_kv=True, observe=overview_summaries(L, total)))
    fn = overview_summary(total)
    joined = all((f"blocks.{i}.attn.pattern", fn) in merged.memory.observations for i in range(L))
    assert joined == ((kept, total) in {(100, 110), (100, 97), (30, 40), (64, 66)})
    whole = model.trace_ids(ids, memory=EAGER)
    reference = torch.stack([pattern_thumbnail(whole[f"blocks.{i}.attn.pattern"]) for i in range(L)])
    got = overview_thumbnails(merged)
    assert got.shape == reference.shape
    torch.testing.assert_close(got, reference, atol=1e-5, rtol=0)  # a continuation equals the whole to rounding
    if joined:
        assert len(merged.memory.block_cache) == 0


def test_a_continued_trace_reads_its_beginnings_blocks_kept_whole(model):
    """A text edited at its end continues the trace of its beginning; a block of it that was viewed before the edit
    (kept whole in the block cache they share) is read, cut and joined to the new positions' block, not run again:
    the same numbers, bit for bit, with only the new positions run."""
    ids = _ids(100, model.config.vocab_size, seed=12)
    edited = ids[:92] + _ids(8, model.config.vocab_size, seed=13)
    # a server's block cache: shared
    first = model.trace_ids(ids, memory=Memory(keep_kv=True, block_cache=BlockCache(max_blocks=None)))
    first["blocks.1.attn.pattern"]  # viewed: block 1 kept whole
    runs: list[int] = []
    recorded = first.memory.blocks.block

    def counted(layer, until=None, cache=None, past=None):
        runs.append(layer)
        return recorded(layer, until, cache, past)

    first.memory.blocks.block = counted
    second = model.extend_trace(truncate_trace(first, 92), edited[92:],
                                memory=Memory(keep_kv=True, block_cache=first.memory.block_cache))
    # a token generated: twice continued
    third = model.extend_trace(second, [5, 6], memory=Memory(block_cache=first.memory.block_cache))
    # the same recipe recorded eagerly (a continuation rounds as the whole text need not)
    second_eager = model.extend_trace(truncate_trace(model.trace_ids(ids, memory=EAGER), 92), edited[92:])
    for layer in (1, 0):
        for stage in ("attn.pattern", "mlp_out"):
            name = f"blocks.{layer}.{stage}"
            assert torch.equal(_bits(second[name]), _bits(second_eager[name])), name
    assert runs == [0]  # block 1's beginning was read from the cache; block 0's had to run
    assert_same_bits(third, model.extend_trace(second_eager, [5, 6]))
    # the twice-continued trace read blocks 0 and 1 of its beginnings as kept for `second` and `first`; the others ran
    assert runs.count(1) == 0 and runs.count(0) == 1 and len(runs) == model.config.n_layer - 1


def test_a_continuation_keeps_its_keys_and_values_in_one_piece(model):
    """A trace continued from one with its keys and values writes the new positions' into a cache made with room for
    them (`KVCache.with_room`): every block's lies in one storage of exactly their size, kept without another copy,
    the same numbers as the eagerly recorded continuation's."""
    from transformer_explainer.memo.block_cache import storage_sizes
    from transformer_explainer.models.kv_cache import KVCache

    ids = _ids(60, model.config.vocab_size, seed=14)
    head = model.trace_ids(ids[:50], memory=Memory(keep_kv=True))
    continued = model.extend_trace(head, ids[50:], memory=Memory(keep_kv=True))
    flat = [t for pair in continued.memory.kv for t in pair]
    sizes = storage_sizes(flat)
    assert len(sizes) == 1 and sum(sizes.values()) == sum(t.numel() * t.element_size() for t in flat)
    eager = model.extend_trace(model.trace_ids(ids[:50], memory=Memory(eager=True, keep_kv=True)), ids[50:],
                               memory=Memory(keep_kv=True))
    for (k, v), (ek, ev) in zip(continued.memory.kv, eager.memory.kv, strict=True):
        assert torch.equal(_bits(k), _bits(ek)) and torch.equal(_bits(v), _bits(ev)) and k.shape[1] == 60
    # the cache itself: the beginning copied in, the room after it, one piece per device and dtype
    cache = KVCache.with_room([(k[None], v[None]) for k, v in head.memory.kv], 10)
    assert cache.length == 50 and len(storage_sizes([t for pair in cache._buffers for t in pair])) == 1
    assert all(torch.equal(k[0], hk) for (k, _), (hk, _) in zip(cache.layers, head.memory.kv, strict=True))
