"""Feature pages (features/pages.py) of a tiny autoencoder on a tiny corpus, checked against a brute-force
computation: each feature's top contexts (one per window, at its most active token), its density, histogram and
quantile contexts, and the tokens its decoder direction promotes and suppresses (the final LayerNorm and the tied
unembedding written out from the checkpoint's own tensors); and the page route (GET /api/features/{hook}/{id})
answering them, with one sentence for a feature or hook it does not have."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fastapi.testclient import TestClient
from safetensors.torch import load_file

from tests.conftest import random_ids
from tests.unit.test_features_encode import HOOK, write_sae
from transformer_explainer import load_model
from transformer_explainer.features.pages import PageSpec, build_pages, load_pages, write_pages
from transformer_explainer.features.sae import load_sae
from transformer_explainer.server import create_app

WINDOW, WINDOWS = 16, 6
SPEC = PageSpec(top=3, quantiles=(0.25, 0.5, 0.75), per_quantile=2, before=3, after=2, bins=5, logits=4,
                window=WINDOW)
D_SAE = 256


@pytest.fixture(scope="module")
def built(tiny_gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """A built-in-like copy of the tiny GPT-2 with one autoencoder and its pages, built on a random corpus."""
    folder = tmp_path_factory.mktemp("pages") / "tiny-pages"
    shutil.copytree(tiny_gpt2_dir, folder)
    sae_dir = write_sae(folder / "saes" / HOOK, HOOK, seed=3)
    write_sae(folder / "saes" / "blocks.0.hook_resid_post", "blocks.0.hook_resid_post", seed=4)  # no pages
    model = load_model(str(folder), allow_download=False)
    model.source = "builtin"  # what a model found in the package's builtin/ folder says of itself
    corpus = np.array(random_ids(WINDOW * WINDOWS + 5, model.config.vocab_size, seed=7))  # a partial last window
    other = folder / "saes" / "blocks.0.hook_resid_pre"  # built beside it from the same traces, not shipped here
    (arrays, meta), (arrays0, meta0) = build_pages(model, [load_sae(sae_dir), load_sae(write_sae(
        tmp_path_factory.mktemp("other") / "sae", "blocks.0.hook_resid_pre", seed=5))], corpus, SPEC,
        corpus_name="random")
    write_pages(sae_dir, arrays, {**meta, "descriptions": {"5": "a test's words"}})
    assert meta0["hook"] == "blocks.0.hook_resid_pre" and arrays0["density"].shape == (D_SAE,)
    assert not other.exists()
    return model, sae_dir, corpus


def brute_force(model, sae_dir: Path, corpus: np.ndarray) -> np.ndarray:
    """(windows, positions, features): every window traced alone, its activation encoded from the stored weights
    (sort, keep k, ReLU), in float64."""
    w = {k: v.double() for k, v in load_file(str(sae_dir / "sae_weights.safetensors")).items()}
    out = np.zeros((WINDOWS, WINDOW, D_SAE))
    for s in range(WINDOWS):
        x = model.trace_ids(corpus[s * WINDOW:(s + 1) * WINDOW].tolist())["blocks.1.resid_post"].double()
        pre = (x - w["b_dec"]) @ w["W_enc"] + w["b_enc"]
        for t in range(WINDOW):
            order = torch.argsort(pre[t], descending=True)[:8]
            out[s, t, order.numpy()] = pre[t, order].clamp(min=0).numpy()
    return out


def test_pages_equal_a_brute_force_computation(built) -> None:
    model, sae_dir, corpus = built
    acts = brute_force(model, sae_dir, corpus)
    pages = load_pages(sae_dir)
    assert pages is not None and pages.d_sae == D_SAE
    chosen = acts[:, 1:, :]  # a window's first token is never chosen
    checked, full = 0, 0
    for j in range(D_SAE):
        page = pages.page(j, model.tokenizer.token_text)
        fires = chosen[:, :, j] > 0
        assert page.density == pytest.approx(fires.sum() / (WINDOWS * (WINDOW - 1)), abs=1e-6)
        assert sum(page.counts) == fires.sum()
        if not fires.any():
            assert page.top_contexts == [] and page.quantiles == []
            continue
        checked += 1
        # top contexts: each window's most active token, the windows by that activation
        best = [(s, 1 + int(np.argmax(chosen[s, :, j]))) for s in range(WINDOWS) if fires[s].any()]
        best.sort(key=lambda st: (-acts[st[0], st[1], j], st[0]))
        best = best[:SPEC.top]
        assert len(page.top_contexts) == len(best)
        full += len(best) == SPEC.top
        for ctx, (s, t) in zip(page.top_contexts, best, strict=True):
            lo, hi = max(0, t - SPEC.before), min(WINDOW, t + SPEC.after + 1)
            assert ctx.token_ids == corpus[s * WINDOW + lo:s * WINDOW + hi].tolist()
            assert ctx.center == t - lo and ctx.token_ids[ctx.center] == corpus[s * WINDOW + t]
            assert ctx.activations == pytest.approx(acts[s, lo:hi, j].tolist(), rel=2e-3, abs=2e-3)  # float16
            assert ctx.activation == pytest.approx(acts[s, t, j], rel=2e-3, abs=2e-3)
            assert ctx.tokens == [model.tokenizer.token_text(i) for i in ctx.token_ids]
        # the histogram: equal bins from 0 to the largest activation
        vals = chosen[:, :, j][fires]
        top = vals.max()
        assert page.max_activation == pytest.approx(top, rel=1e-5)
        want = np.bincount(np.minimum(SPEC.bins - 1, np.floor(vals / top * SPEC.bins).astype(int)),
                           minlength=SPEC.bins)
        assert page.counts == want.tolist()
        # quantiles of the nonzero activations, ascending
        ranked = np.sort(vals)
        for q in page.quantiles:
            at = int(np.rint(q.quantile * (len(ranked) - 1)))
            assert q.activation == pytest.approx(ranked[at], rel=1e-5)
            assert q.contexts[0].activation == pytest.approx(ranked[at], rel=2e-3, abs=2e-3)
            assert len(q.contexts) == min(SPEC.per_quantile, len(ranked) - at)
    assert checked >= 10 and full >= 5  # the check covered features that fire, several in more windows than shown


def test_promoted_and_suppressed_tokens_through_the_final_norm_and_unembedding(built, tiny_gpt2_dir: Path) -> None:
    model, sae_dir, _ = built
    hf = load_file(str(tiny_gpt2_dir / "model.safetensors"))
    w, b, W_U = hf["transformer.ln_f.weight"], hf["transformer.ln_f.bias"], hf["transformer.wte.weight"]
    W_dec = load_file(str(sae_dir / "sae_weights.safetensors"))["W_dec"]
    logits = (F.layer_norm(W_dec, (W_dec.shape[1],), w, b, eps=1e-5) - b) @ W_U.T  # the shift b taken off
    pages = load_pages(sae_dir)
    for j in range(0, D_SAE, 17):
        page = pages.page(j, model.tokenizer.token_text)
        up = torch.topk(logits[j], SPEC.logits)
        down = torch.topk(-logits[j], SPEC.logits)
        assert [i for i, _, _ in page.promoted] == up.indices.tolist()
        assert [i for i, _, _ in page.suppressed] == down.indices.tolist()
        assert [v for _, _, v in page.promoted] == pytest.approx(up.values.tolist(), rel=2e-3, abs=2e-3)
        assert [v for _, _, v in page.suppressed] == pytest.approx((-down.values).tolist(), rel=2e-3, abs=2e-3)
        assert page.promoted[0][1] == model.tokenizer.token_text(page.promoted[0][0])


@pytest.fixture(scope="module")
def client(built):
    with TestClient(create_app({"tiny": built[0]})) as c:
        yield c


def test_page_route_answers_the_page(client, built) -> None:
    model, sae_dir, _ = built
    hooks = client.get("/api/features/hooks").json()["hooks"]
    assert [(h["hook"], h["pages"]) for h in hooks] == [("blocks.0.hook_resid_post", False), (HOOK, True)]
    j = next(j for j in range(D_SAE) if j != 5 and load_pages(sae_dir).page(j, str).top_contexts)
    r = client.get(f"/api/features/{HOOK}/{j}")
    assert r.status_code == 200, r.text
    out = r.json()
    page = load_pages(sae_dir).page(j, model.tokenizer.token_text)
    assert out["id"] == j and out["hook"] == HOOK and out["model"] == "tiny" and out["corpus"] == "random"
    assert [c["token_ids"] for c in out["top_contexts"]] == [c.token_ids for c in page.top_contexts]
    assert [c["tokens"] for c in out["top_contexts"]] == [c.tokens for c in page.top_contexts]
    assert out["density"] == pytest.approx(page.density) and out["counts"] == page.counts
    assert [p["id"] for p in out["promoted"]] == [i for i, _, _ in page.promoted]
    assert len(out["bin_edges"]) == len(out["counts"]) + 1
    assert out["description"] is None  # nothing written for it: nothing made up
    assert client.get(f"/api/features/{HOOK}/5").json()["description"] == "a test's words"


@pytest.mark.parametrize(("path", "status", "phrase"), [
    (f"/api/features/{HOOK}/{D_SAE}", 422, f"features 0..{D_SAE - 1}"),  # unknown feature id
    (f"/api/features/{HOOK}/-1", 422, "out of range"),
    (f"/api/features/{HOOK}/x", 422, "feature"),
    ("/api/features/blocks.0.hook_resid_post/1", 404, "without feature pages"),
    ("/api/features/blocks.1.hook_mlp_out/1", 404, "none at blocks.1.hook_mlp_out"),
    ("/api/features/blocks.1.mlp/1", 422, "is not a hook point"),
    (f"/api/features/{HOOK}/1?model=nope", 404, "unknown model"),
])
def test_page_route_bad_input_is_one_sentence(client, path: str, status: int, phrase: str) -> None:
    r = client.get(path)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and phrase in detail, detail


def test_damaged_pages_are_one_sentence(built, tmp_path: Path) -> None:
    """A pages file cut short: the route says so in one sentence (503: the server's files), not a 500."""
    model, sae_dir, _ = built
    folder = tmp_path / "tiny-damaged"
    shutil.copytree(Path(model.folder), folder)
    damaged = load_model(str(folder), allow_download=False)
    damaged.source = "builtin"
    pages = folder / "saes" / HOOK / "feature_pages.npz"
    pages.write_bytes(pages.read_bytes()[:1000])
    with TestClient(create_app({"tiny": damaged})) as c:
        r = c.get(f"/api/features/{HOOK}/1")
        assert r.status_code == 503, r.text  # the server's files, not the request
        detail = r.json()["detail"]
        assert detail.startswith(f"the feature pages of tiny at {HOOK} cannot be read") and "\n" not in detail
        assert "is not readable feature pages" in detail


def test_a_damaged_autoencoder_config_is_one_sentence(built, tmp_path: Path) -> None:
    model, _, _ = built
    folder = tmp_path / "tiny-damaged-cfg"
    shutil.copytree(Path(model.folder), folder)
    damaged = load_model(str(folder), allow_download=False)
    damaged.source = "builtin"
    (folder / "saes" / HOOK / "cfg.json").write_text("{not json")
    with TestClient(create_app({"tiny": damaged})) as c:
        for r in (c.get("/api/features/hooks"), c.post("/api/features", json={"text": "hi", "hook": HOOK})):
            assert r.status_code == 503, r.text
            assert r.json()["detail"].startswith(f"the autoencoder of tiny at {HOOK} cannot be read")
