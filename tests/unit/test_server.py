"""The JSON API against the engine: the values it sends are the model's, and bad input gets a 4xx
with a message (never a 500)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from tests.conftest import random_ids  # noqa: E402
from transformer_explainer.encoding import decode_array  # noqa: E402
from transformer_explainer.server import ServerSettings, create_app  # noqa: E402
from transformer_explainer.trace import merge_traces  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def client(tiny_model, tmp_path_factory):
    static = tmp_path_factory.mktemp("static")
    (static / "index.html").write_text("<!doctype html><title>app</title>")
    (static / "assets").mkdir()
    (static / "assets" / "app.js").write_text("console.log(1)")
    app = create_app({"tiny": tiny_model}, ServerSettings(static_dir=static))
    with TestClient(app) as c:
        yield c


def arr(t: dict) -> np.ndarray:
    return decode_array(t["data"], t["shape"], t["dtype"])


def post(client, path, **body):
    return client.post(path, json=body)


# -- values equal the engine's ---------------------------------------------------------------------


def test_trace_overview_matches_engine(client, tiny_model):
    r = post(client, "/api/trace", text=TEXT, top_n=5,
             include=[{"name": "blocks.1.attn.pattern", "head": 2, "dtype": "float32"},
                      {"name": "blocks.0.mlp.post", "dtype": "float32"},
                      {"name": "embed.sum"}])
    assert r.status_code == 200, r.text
    d = r.json()
    tr = tiny_model.trace(TEXT)
    assert d["token_ids"] == tr.token_ids
    assert [t["text"] for t in d["tokens"]] == tr.tokens
    assert d["tokens"][1]["text"].startswith(" ")  # leading spaces are kept
    assert d["tokens"][1]["raw"].startswith("Ġ")
    pat, mlp, emb = d["tensors"]
    assert pat["dims"] == ["T", "S"]
    np.testing.assert_allclose(arr(pat), tr["blocks.1.attn.pattern"][2].numpy(), atol=1e-6)
    np.testing.assert_allclose(arr(mlp), tr["blocks.0.mlp.post"].numpy(), atol=1e-6)
    np.testing.assert_allclose(arr(emb), tr["embed.sum"].numpy(), atol=2e-3, rtol=1e-3)  # float16
    # next-token candidates: the engine's logits and probabilities
    dist = tiny_model.next_token(tr)
    top = dist.top(5)
    assert [c["id"] for c in d["next"]["candidates"]] == top
    for c in d["next"]["candidates"]:
        assert c["logit"] == pytest.approx(float(dist.logits[c["id"]]), abs=1e-5)
        assert c["prob"] == pytest.approx(float(dist.probs[c["id"]]), abs=1e-6)
    # attention thumbnails: exact up to 8-bit rounding for short texts
    a = d["attention"]
    T = len(tr.token_ids)
    assert a["size"] == T and not a["pooled"]
    import base64

    u8 = np.frombuffer(base64.b64decode(a["data"]), np.uint8).reshape(a["n_layer"], a["n_head"], -1)
    rows, cols = np.tril_indices(T)
    expect = tr["blocks.1.attn.pattern"][3].numpy()[rows, cols]
    np.testing.assert_allclose(u8[1, 3] / 255, expect, atol=1 / 255)
    norms = arr(d["resid_norms"])
    assert norms.shape == (tiny_model.config.n_layer + 1, T)
    np.testing.assert_allclose(norms[0], tr["blocks.0.resid_pre"].norm(dim=-1).numpy(), rtol=1e-3)


def test_tensors_endpoint_slices_by_head_and_position(client, tiny_model):
    tr = tiny_model.trace(TEXT)
    r = post(client, "/api/tensors", text=TEXT, tensors=[
        {"name": "blocks.1.attn.q", "head": 1, "position": 3, "dtype": "float32"},
        {"name": "blocks.0.attn.masked_scores", "head": 0, "dtype": "float32"},
        {"name": "blocks.0.ln1.mean", "dtype": "float32"},
        {"name": "logits", "position": 2, "dtype": "float32"},
        {"name": "blocks.0.mlp.pre", "position": -1, "dtype": "float32"},
    ])
    assert r.status_code == 200, r.text
    q, masked, mean, logits, last = r.json()["tensors"]
    np.testing.assert_allclose(arr(last), tr["blocks.0.mlp.pre"][-1].numpy(), atol=1e-6)  # -1: the last token
    assert q["dims"] == ["Dh"]
    np.testing.assert_allclose(arr(q), tr["blocks.1.attn.q"][1, 3].numpy(), atol=1e-6)
    m = arr(masked)
    assert np.isneginf(m[0, 1]) and np.isfinite(m[1, 0])  # the causal mask: keys after the query are -inf
    np.testing.assert_allclose(arr(mean), tr["blocks.0.ln1.mean"].numpy(), atol=1e-6)
    np.testing.assert_allclose(arr(logits), tr["logits"][2].numpy(), atol=1e-4)


def test_weights_endpoint(client, tiny_model):
    r = post(client, "/api/weights", tensors=[{"name": "blocks.0.attn.W_Q", "head": 1, "dtype": "float32"},
                                              {"name": "embed.W_E", "row": 464, "dtype": "float32"},
                                              {"name": "blocks.1.ln2.w", "dtype": "float32"}])
    assert r.status_code == 200, r.text
    wq, we, ln = r.json()["tensors"]
    np.testing.assert_allclose(arr(wq), tiny_model.weight("blocks.0.attn.W_Q")[1].numpy(), atol=1e-6)
    np.testing.assert_allclose(arr(we), tiny_model.weight("embed.W_E")[464].numpy(), atol=1e-6)
    np.testing.assert_allclose(arr(ln), tiny_model.weight("blocks.1.ln2.w").numpy(), atol=1e-6)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_next_token_follows_softmax_of_scaled_logits(client, tiny_model, temperature):
    r = post(client, "/api/next_token", text=TEXT, top_n=8, sampling={"temperature": temperature, "seed": 3})
    assert r.status_code == 200, r.text
    d = r.json()
    logits = tiny_model.trace(TEXT).next_token_logits()
    probs = torch.softmax(logits / temperature, -1)
    for c in d["candidates"]:
        assert c["scaled_logit"] == pytest.approx(float(logits[c["id"]]) / temperature, rel=1e-5, abs=1e-5)
        assert c["prob"] == pytest.approx(float(probs[c["id"]]), rel=1e-4, abs=1e-7)
    assert d["n_kept"] == tiny_model.config.vocab_size
    assert sum(d["logit_histogram"]["counts"]) == tiny_model.config.vocab_size
    again = post(client, "/api/next_token", text=TEXT, sampling={"temperature": temperature, "seed": 3}).json()
    assert again["sampled"] == d["sampled"]  # a seed makes the draw repeatable


def test_top_k_top_p_and_greedy(client, tiny_model):
    d = post(client, "/api/next_token", text=TEXT, top_n=10, sampling={"top_k": 3}).json()
    kept = [c for c in d["candidates"] if c["kept"]]
    assert d["n_kept"] == 3 and len(kept) == 3
    assert sum(c["prob"] for c in kept) == pytest.approx(1.0, abs=1e-5)
    assert all(c["prob"] == 0 for c in d["candidates"] if not c["kept"])
    g = post(client, "/api/next_token", text=TEXT, sampling={"temperature": 0}).json()
    assert g["greedy"] and g["sampled"]["id"] == g["candidates"][0]["id"] and g["n_kept"] == 1
    p = post(client, "/api/next_token", text=TEXT, sampling={"top_p": 0.5}).json()
    assert 1 <= p["n_kept"] < tiny_model.config.vocab_size


def test_generate_step_computes_only_the_new_position(client, tiny_model):
    first = post(client, "/api/trace", text=TEXT).json()
    r = post(client, "/api/generate", ids=first["token_ids"], sampling={"temperature": 0},
             include=[{"name": "blocks.1.attn.pattern", "head": 0, "dtype": "float32"}])
    assert r.status_code == 200, r.text
    d = r.json()
    ids = first["token_ids"] + [d["token"]["id"]]
    assert d["trace"]["token_ids"] == ids
    assert d["token"]["id"] == first["next"]["candidates"][0]["id"]  # greedy
    assert d["trace"]["computed_positions"] == [len(ids) - 1, len(ids)]
    full = tiny_model.trace_ids(ids)
    np.testing.assert_allclose(arr(d["trace"]["tensors"][0]), full["blocks.1.attn.pattern"][0].numpy(), atol=1e-5)
    chosen = post(client, "/api/generate", ids=first["token_ids"], token_id=11).json()
    assert chosen["chosen"] and chosen["trace"]["token_ids"][-1] == 11
    # a prefix that is no longer cached is computed again, and the answer says so
    explainer = client.app.state.traces
    kept, explainer.cache = explainer.cache, type(explainer.cache)(max_bytes=0)
    try:
        again = post(client, "/api/generate", ids=first["token_ids"], token_id=11).json()
    finally:
        explainer.cache = kept
    assert again["trace"]["computed_positions"] == [0, len(first["token_ids"]) + 1]
    assert again["trace"]["token_ids"] == chosen["trace"]["token_ids"]


def test_merged_trace_equals_full_trace(tiny_model):
    from transformer_explainer.models.kv_cache import KVCache

    ids = tiny_model.encode(TEXT)
    prefix = tiny_model.trace_ids(ids[:-2])
    L = tiny_model.config.n_layer
    cache = KVCache([(prefix[f"blocks.{i}.attn.k"][None], prefix[f"blocks.{i}.attn.v"][None]) for i in range(L)],
                    ids=ids[:-2])
    new = tiny_model.trace_ids(ids[-2:], cache=cache)
    merged = merge_traces(prefix, new)
    full = tiny_model.trace_ids(ids)
    extended = tiny_model.extend_trace(prefix, ids[-2:])  # the engine builds the cache itself
    assert extended.token_ids == ids and extended.start == 0
    for name in full.names():
        torch.testing.assert_close(merged[name], full[name], atol=1e-4, rtol=1e-4, msg=name)
        torch.testing.assert_close(extended[name], full[name], atol=1e-4, rtol=1e-4, msg=name)


def test_models_and_info(client, tiny_model):
    d = client.get("/api/models").json()
    assert d["default"] == "tiny"
    assert d["models"][0]["name"] == "tiny" and d["models"][0]["loaded"]
    info = client.get("/api/models/tiny").json()
    assert info["config"]["n_layer"] == tiny_model.config.n_layer
    assert info["n_params"] == tiny_model.net.num_params()
    names = client.get("/api/names").json()
    assert names["block_activations"]["attn.pattern"]["dims"] == ["H", "T", "S"]


def test_openapi_served(client):
    r = client.get("/api/openapi.json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    for p in ("/api/trace", "/api/tensors", "/api/next_token", "/api/generate", "/api/models"):
        assert p in paths
    assert client.get("/docs").status_code == 404  # no page that would load scripts from a CDN
    assert any(p.startswith("/api/seq2seq/") for p in paths)  # the encoder-decoder API is mounted
    assert any(p.startswith("/api/analysis/") for p in paths)
    # one contract: every JSON answer is a named model (the client's types are generated from them)
    untyped = []
    for path, methods in paths.items():
        for method, op in methods.items():
            ok = next(v for k, v in op["responses"].items() if k.startswith("2"))
            schema = ok.get("content", {}).get("application/json", {}).get("schema", {})
            if path.endswith("/events"):  # server-sent events: their models are in the generated types
                continue
            if "$ref" not in schema:
                untyped.append(f"{method.upper()} {path}")
    assert untyped == []


# -- bad input: 4xx with a message -----------------------------------------------------------------

BAD = [
    ({"text": ""}, 422, "empty"),
    ({}, 422, "exactly one"),
    ({"text": "a", "ids": [1]}, 422, "exactly one"),
    ({"ids": []}, 422, "empty"),
    ({"ids": [10**9]}, 422, "vocabulary"),
    ({"text": "hi", "model": "nope"}, 404, "unknown model"),
    ({"text": "hi", "model": "/etc/passwd"}, 404, "unknown model"),
    ({"text": "a\x00b"}, 422, "control character"),
    ({"text": "a\ud800b"}, 422, "unicode"),
    ({"text": "hi", "sampling": {"temperature": -1}}, 422, "temperature"),
    ({"text": "hi", "sampling": {"temperature": 0.001}}, 422, "temperature"),
    ({"text": "hi", "sampling": {"top_k": 0}}, 422, "top_k"),
    ({"text": "hi", "sampling": {"top_k": 10**7}}, 422, "top_k"),
    ({"text": "hi", "sampling": {"top_p": 0}}, 422, "top_p"),
    ({"text": "hi", "sampling": {"top_p": 1.5}}, 422, "top_p"),
    ({"text": "hi", "sampling": {"seed": -1}}, 422, "seed"),
    ({"text": "hi", "top_n": 0}, 422, "top_n"),
    ({"text": "hi", "bogus": 1}, 422, "bogus"),
    ({"text": "hi", "include": [{"name": "blocks.0.attn.nonsense"}]}, 422, "unknown tensor name"),
    ({"text": "hi", "include": [{"name": "blocks.99.attn.q"}]}, 422, "blocks"),
    ({"text": "hi", "include": [{"name": "blocks.0.attn.q", "head": 99}]}, 422, "head 99"),
    ({"text": "hi", "include": [{"name": "blocks.0.ln1.mean", "head": 0}]}, 422, "no head"),
    ({"text": "hi", "include": [{"name": "blocks.0.attn.W_Q"}]}, 422, "weight"),
    ({"text": "hi", "include": [{"name": "../../etc/passwd"}]}, 422, "unknown tensor name"),
]


@pytest.mark.parametrize(("body", "status", "words"), BAD)
def test_bad_trace_requests(client, body, status, words):
    # json.dumps escapes a lone surrogate as \\ud800, as a browser's JSON.stringify would
    r = client.post("/api/trace", content=json.dumps(body).encode(), headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and words.lower() in detail.lower(), detail


def test_too_long_text_offers_truncation(client, tiny_model):
    n = tiny_model.context_length
    long = " a" * (n + 10)
    r = post(client, "/api/trace", text=long)
    assert r.status_code == 422 and "truncation" in r.json()["detail"]
    ok = post(client, "/api/trace", text=long, truncate=True)
    assert ok.status_code == 200 and ok.json()["truncated"] and len(ok.json()["token_ids"]) == n
    pooled = ok.json()["attention"]
    assert pooled["pooled"] and pooled["size"] == 32


def test_nan_temperature_and_malformed_json(client):
    r = client.post("/api/next_token", content=b'{"text": "hi", "sampling": {"temperature": NaN}}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 422 and "temperature" in r.json()["detail"]
    r = client.post("/api/trace", content=b'{"text": "hi"', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["detail"]
    r = client.post("/api/trace", content=b'\xff\xfe{"text": 1}', headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500


def test_body_size_limit(client):
    r = client.post("/api/trace", content=b'{"text": "' + b"a" * 2_000_000 + b'"}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 413 and "larger" in r.json()["detail"]


def test_generate_bad_token_and_tensor_too_large(client):
    r = post(client, "/api/generate", text="hi", token_id=10**8)
    assert r.status_code == 422 and "vocabulary" in r.json()["detail"]
    r = post(client, "/api/tensors", text=" a" * 500, truncate=True, tensors=[{"name": "logits"}])
    assert r.status_code == 422 and "position" in r.json()["detail"]  # 128 x 50257 values: too many at once
    r = post(client, "/api/weights", tensors=[{"name": "embed.W_E", "position": 1}])
    assert r.status_code == 422


def test_static_files_and_path_traversal(client):
    assert client.get("/").status_code == 200
    r = client.get("/assets/app.js")
    assert r.status_code == 200 and "immutable" in r.headers["cache-control"]
    assert "default-src 'self'" in r.headers["content-security-policy"]
    for bad in ("/../pyproject.toml", "/%2e%2e/%2e%2e/pyproject.toml", "/assets/..%2f..%2fpyproject.toml",
                "/..%5c..%5cpyproject.toml", "/%2fetc%2fpasswd", "/assets/%00x", "/.hidden", "/nope.js",
                "/api/nope"):
        r = client.get(bad)
        assert r.status_code == 404, bad
        assert "root:" not in r.text and "[project]" not in r.text


def test_queue_full_gives_503_with_retry_after(tiny_model):
    import asyncio

    from transformer_explainer.server.pool import Busy, ModelPool

    async def scenario() -> None:
        import threading

        gate = threading.Event()
        pool = ModelPool(workers=1, max_queue=1, timeout_s=5)
        first = asyncio.ensure_future(pool.run(gate.wait))
        second = asyncio.ensure_future(pool.run(gate.wait))
        await asyncio.sleep(0.05)
        with pytest.raises(Busy) as e:
            await pool.run(gate.wait)
        assert e.value.retry_after >= 1
        gate.set()
        await asyncio.gather(first, second)
        pool.shutdown()

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as ex:  # its own thread: another test's event loop may be running in this one
        ex.submit(asyncio.run, scenario()).result()
    # and over HTTP: a pool with no room answers 503 with Retry-After
    app = create_app({"tiny": tiny_model}, ServerSettings(max_queue=0))
    with TestClient(app) as c:
        ids = c.post("/api/trace", json={"text": "hi"}).json()["token_ids"]
        app.state.pool._heavy.pending = 1  # as if a model call were running
        r = c.post("/api/trace", json={"text": "hi there"})
        assert r.status_code == 503 and "Retry-After" in r.headers and "busy" in r.json()["detail"]
        # a slice of a trace already in memory needs no forward pass: the light lane answers it
        r = c.post("/api/tensors", json={"ids": ids, "tensors": [{"name": "blocks.0.attn.pattern", "head": 0}]})
        assert r.status_code == 200, r.text
        assert c.post("/api/weights", json={"tensors": [{"name": "ln_final.w"}]}).status_code == 200
        assert c.post("/api/next_token", json={"ids": [*ids, 11]}).status_code == 503  # not cached: a forward pass
        app.state.pool._heavy.pending = 0


def test_trace_cache_is_bounded(tiny_model):
    from transformer_explainer.memo.store import TraceCache, trace_nbytes

    traces = [tiny_model.trace(TEXT) for _ in range(5)]
    size = trace_nbytes(traces[0])
    cache = TraceCache(max_bytes=int(size * 2.5))
    for i, tr in enumerate(traces):
        cache.put(("m", (i,)), tr)
    assert len(cache) == 2 and cache.nbytes <= cache.max_bytes
    assert cache.get(("m", (4,))) is traces[4] and cache.get(("m", (0,))) is None
    tiny = TraceCache(max_bytes=10)
    tiny.put(("m", (1,)), traces[0])
    assert len(tiny) == 0  # too big to keep at all


def test_trace_cache_counts_what_traces_share_once(tiny_model):
    """A trace continued from a cached one holds that one's residual streams: the two together cost those once, and
    so does one trace kept under two keys. Forgetting one of them frees only what it alone held."""
    from transformer_explainer.memo.block_cache import storage_nbytes
    from transformer_explainer.memo.store import TraceCache, trace_nbytes

    ids = tiny_model.encode(TEXT)
    first = tiny_model.trace_ids(ids[:-2])
    longer = tiny_model.extend_trace(first, ids[-2:])
    shared = storage_nbytes(list(first.memory.blocks.tensors()))
    assert shared > 0
    cache = TraceCache(max_bytes=10 * trace_nbytes(longer))
    cache.put(("m", (0,)), first)
    cache.put(("m", (1,)), longer)
    assert cache.nbytes == trace_nbytes(first) + trace_nbytes(longer) - shared
    cache.put(("m", (2,)), longer)
    assert len(cache) == 3 and cache.nbytes == trace_nbytes(first) + trace_nbytes(longer) - shared
    # a budget for the longer trace and a little: the first goes, and with it only what it held alone
    tight = TraceCache(max_bytes=trace_nbytes(longer) + 1)
    tight.put(("m", (0,)), first)
    tight.put(("m", (1,)), longer)
    assert len(tight) == 1 and tight.get(("m", (1,))) is longer and tight.nbytes == trace_nbytes(longer)


def test_trace_cache_keeps_the_newest_traces_keys_and_values(tiny_model):
    """The newest traces keep their keys and values (what continuing them reads) while those take at most their share
    of the budget (a quarter by default), the newest trace's always, unless over the budget an older trace would go
    for them that costs more to trace again than continuing the newest without them (issue 40); older traces drop
    theirs; over the budget the oldest traces go."""
    from transformer_explainer.memo import Memory
    from transformer_explainer.memo.costs import KV_SHARE, NO_KV_COST
    from transformer_explainer.memo.store import TraceCache, trace_nbytes

    assert TraceCache(KV_SHARE * 1000).max_kv_bytes == 1000

    ids = tiny_model.encode(TEXT)
    traces = [tiny_model.trace_ids(ids, memory=Memory(keep_kv=True)) for _ in range(5)]
    with_kv, without = trace_nbytes(traces[0]), trace_nbytes(tiny_model.trace_ids(ids))
    kv = with_kv - without
    assert kv > 0
    roomy = TraceCache(max_bytes=5 * with_kv, max_kv_bytes=int(2.5 * kv))  # room for all five with theirs
    for i, tr in enumerate(traces):
        roomy.put(("m", (i,)), tr)
    assert len(roomy) == 5 and roomy.nbytes <= roomy.max_bytes
    assert all(tr.memory.kv is not None for tr in traces)  # a share binds only over the budget
    traces = [tiny_model.trace_ids(ids, memory=Memory(keep_kv=True)) for _ in range(5)]
    pressed = TraceCache(max_bytes=3 * with_kv + 2 * without, max_kv_bytes=int(2.5 * kv))  # five, three with theirs
    for i, tr in enumerate(traces):
        pressed.put(("m", (i,)), tr)
    assert len(pressed) == 5 and pressed.nbytes <= pressed.max_bytes
    # beyond the share (the newest two), the oldest went first, and only as far as the budget asked
    assert [tr.memory.kv is not None for tr in traces] == [False, False, True, True, True]

    traces = [tiny_model.trace_ids(ids, memory=Memory(keep_kv=True)) for _ in range(4)]
    tight = TraceCache(max_bytes=with_kv + 3 * without, max_kv_bytes=0)  # no share: the newest keeps its own
    for i, tr in enumerate(traces):
        tight.put(("m", (i,)), tr)
    assert len(tight) == 4 and tight.nbytes <= tight.max_bytes
    assert traces[-1].memory.kv is not None and all(tr.memory.kv is None for tr in traces[:-1])
    # one more of the same length: tracing the oldest again would cost more than continuing the newest without its
    # keys and values (a quarter of its positions), so those go first, and the oldest only where still over
    newest = tiny_model.trace_ids(ids, memory=Memory(keep_kv=True))
    tight.put(("m", (4,)), newest)
    assert newest.memory.kv is None and tight.nbytes <= tight.max_bytes
    assert len(tight) == (5 if 5 * without <= tight.max_bytes else 4)
    # a short trace instead is cheaper to trace again than the newest's keys and values: it goes, they stay
    assert len(ids) > 2 * NO_KV_COST
    short = tiny_model.trace_ids(ids[:2])
    small = TraceCache(max_bytes=with_kv + trace_nbytes(short) - 1, max_kv_bytes=0)
    small.put(("m", (9,)), short)
    longest = tiny_model.trace_ids(ids, memory=Memory(keep_kv=True))
    small.put(("m", (10,)), longest)
    assert longest.memory.kv is not None and len(small) == 1 and small.get(("m", (9,))) is None


def test_an_edits_trace_replaces_the_earlier_versions_it_edits(tiny_model):
    """An edit's trace takes the place of its text's earlier versions whose end it changed: the latest stays without
    its keys and values (a text changed back is a hit; its next edit continues the newest), the older ones go, as they
    would hold the memory its views' blocks need (issue 40: three learners' 1,000-token texts edited in turn filled
    the traces' share with earlier versions, 12 MB apiece, and every view ran its block over every position).
    Another text, and a text's beginning that only grew (another learner may read it), stay, with their keys and
    values while the budget holds them."""
    from transformer_explainer.memo import Memory
    from transformer_explainer.memo.store import TraceCache, trace_nbytes

    ids = tiny_model.encode(TEXT)
    other = tiny_model.encode("A different text, about something else entirely.")
    assert ids[0] != other[0] and len(ids) > 4

    def traced(x):
        return tiny_model.trace_ids(x, memory=Memory(keep_kv=True))

    cache = TraceCache(max_bytes=10 * trace_nbytes(traced(ids)))
    grown, first, third = traced(ids[:-1]), traced(ids), traced(other)
    cache.put(("m", tuple(ids[:-1])), grown)
    cache.put(("m", tuple(ids)), first)
    cache.put(("m", tuple(other)), third)
    assert len(cache) == 3 and all(t.memory.kv is not None for t in (grown, first, third))
    edited = traced(ids[:-1] + [11])
    cache.put(("m", tuple(ids[:-1] + [11])), edited)
    assert cache.get(("m", tuple(ids))) is first and first.memory.kv is None  # the latest version it edited
    again = traced(ids[:-1] + [12])
    cache.put(("m", tuple(ids[:-1] + [12])), again)
    assert cache.get(("m", tuple(ids[:-1] + [11]))) is None  # an earlier version, no longer the latest
    assert cache.get(("m", tuple(ids))) is first  # the text changed back, read since: the latest edited
    assert cache.get(("m", tuple(ids[:-1]))) is grown and cache.get(("m", tuple(other))) is third
    assert all(t.memory.kv is not None for t in (grown, again, third))


def test_generating_from_a_trace_without_its_keys_and_values_continues_it(client, tiny_model):
    """The cache dropped the trace's keys and values: the generated token's pass reads them from the trace's blocks
    run again as far as their values (cheaper than tracing the text whole), and the answer is the same."""
    first = post(client, "/api/trace", text=TEXT + " again").json()
    cached = client.app.state.traces.cache.get(("tiny", tuple(first["token_ids"])))
    cached.memory.drop_kv()  # as the cache does under pressure
    d = post(client, "/api/generate", ids=first["token_ids"], token_id=11,
             include=[{"name": "blocks.1.attn.pattern", "head": 0, "dtype": "float32"}]).json()
    n = len(first["token_ids"])
    assert d["trace"]["computed_positions"] == [n, n + 1] and d["trace"]["token_ids"] == first["token_ids"] + [11]
    full = tiny_model.trace_ids(first["token_ids"] + [11])
    np.testing.assert_allclose(arr(d["trace"]["tensors"][0]), full["blocks.1.attn.pattern"][0].numpy(), atol=1e-6)


def test_generated_typescript_is_up_to_date():
    from transformer_explainer.server import codegen

    for path, text in codegen.outputs().items():
        assert path.is_file(), f"{path} is missing: run python -m transformer_explainer.server.codegen"
        assert path.read_text(encoding="utf-8") == text, (
            f"{path} is stale: run python -m transformer_explainer.server.codegen")


def test_probabilities_are_finite_for_extreme_temperatures(client):
    for t in (0.01, 100):
        d = post(client, "/api/next_token", text=TEXT, sampling={"temperature": t}).json()
        assert all(math.isfinite(c["prob"]) for c in d["candidates"])


def test_trace_brackets_split_characters(client):
    d = post(client, "/api/trace", text="I 🎉 it").json()
    texts = [t["text"] for t in d["tokens"]]
    assert texts[:4] == ["I", " <0xF0><0x9F>", "<0x8E>", "<0x89>"]  # GPT-2 splits the emoji into bytes
    assert d["char_groups"] == [{"start": 1, "end": 4, "text": " 🎉"}]


# -- the binary answer carries the same bytes ------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/trace", "/api/tensors"])
def test_binary_answer_equals_json_answer(client, path):
    """Asked for the binary form, /api/trace and /api/tensors answer the JSON answer's values byte for
    byte: each blob 8-byte aligned after the JSON header, float32 exact, float16 as in the base64."""
    from transformer_explainer.encoding import BINARY_MAGIC, unpack_binary
    from transformer_explainer.media import BINARY_MEDIA_TYPE

    specs = [{"name": "blocks.1.attn.pattern", "head": 2, "dtype": "float32"}, {"name": "embed.sum"},
             {"name": "blocks.0.mlp.post", "position": -1, "dtype": "float32"}]
    body = {"text": TEXT, "tensors": specs} if path.endswith("tensors") else {
        "text": TEXT, "top_n": 5, "include": specs, "sampling": {"seed": 3}}
    plain = client.post(path, json=body)
    binary = client.post(path, json=body, headers={"accept": f"{BINARY_MEDIA_TYPE}, application/json"})
    assert plain.status_code == binary.status_code == 200
    assert binary.headers["content-type"] == BINARY_MEDIA_TYPE
    assert "content-encoding" not in binary.headers  # raw floats are not gzipped
    assert "model;dur=" in binary.headers["server-timing"] and "serialise;dur=" in plain.headers["server-timing"]
    raw = binary.content
    assert raw[:4] == BINARY_MAGIC
    n = int.from_bytes(raw[4:8], "little")
    header = json.loads(raw[8:8 + n])
    start = 8 + n + (-(8 + n) % 8)
    assert start % 8 == 0
    blobs = [header["tensors"][i]["blob"] for i in range(3)]
    assert all(off % 8 == 0 and header["tensors"][i]["data"] == "" for i, (off, _) in enumerate(blobs))
    pat = np.frombuffer(raw, "<f4", count=header["tensors"][0]["shape"][0] * header["tensors"][0]["shape"][1],
                        offset=start + blobs[0][0])
    np.testing.assert_array_equal(pat, arr(plain.json()["tensors"][0]).ravel())
    back, want = unpack_binary(raw), plain.json()
    if path.endswith("trace"):
        for d in (back, want):  # the second answer came from the cached trace
            d.pop("timings_ms"), d.pop("computed_positions")
    assert back == want


def test_an_older_trace_sheds_what_only_continuing_it_reads(tiny_model):
    """A pass keeps the overview's rows for texts a few tokens longer or shorter too where their cells hold another
    number of positions (31 tokens: 1 per cell, 35: 2); an older trace forgets them with its keys and values, and
    keeps its own overview's rows, so its overview still runs no block."""
    from transformer_explainer.memo.costs import shed_continuation
    from transformer_explainer.memo.store import TraceStore
    from transformer_explainer.memo.summaries import key_sums_at, overview_summary
    from transformer_explainer.overview import overview_thumbnails

    ids = random_ids(31, tiny_model.config.vocab_size, seed=5)
    trace, _ = TraceStore(2**30).get("tiny", tiny_model, ids)
    grids = {fn for _, fn in trace.memory.observations}
    assert grids == {key_sums_at(1), key_sums_at(2)} and trace.memory.kv is not None
    before, thumbs = trace.nbytes(), overview_thumbnails(trace)
    shed_continuation(trace)
    assert trace.memory.kv is None
    assert {fn for _, fn in trace.memory.observations} == {overview_summary(31)} == {key_sums_at(1)}
    assert trace.nbytes() < before
    torch.testing.assert_close(overview_thumbnails(trace), thumbs, atol=0, rtol=0)
    assert len(trace.memory.block_cache) == 0  # no block ran for it
