"""The app on a Llama-family model ("tiny-llama": RMSNorm, RoPE, 4 query heads on 2 key/value heads, gated
SiLU MLP): every view renders without errors or empty panels, says what this family does (no GPT-2-only
claims), and the numbers it draws equal what the API computes for the same names."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import numpy as np
import pytest

from .conftest import ARTIFACTS, open_app

pytestmark = pytest.mark.browser

MODEL = "tiny-llama"
TEXT = "The quick brown fox jumps over the lazy dog"
# what the GPT-2 views say that is not so for this family
GPT2_ONLY = ["position embedding matrix", "+ position embedding", "w_pos[", "gelu", "byte-level bpe", "layer norm",
             "b_in", "b_o", "gpt-2 has"]
NAV = ["overview", "tokens", "embedding", "blocks", "layernorm-ln1", "qkv", "attention", "heads", "residual",
       "layernorm-ln2", "mlp", "layernorm-final", "output", "experiments"]


def post(server, path: str, **body) -> dict:
    r = httpx.post(server.url + "api/" + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def tensors(server, ids: list[int], *specs: dict, weights: bool = False) -> list[np.ndarray]:
    """The API's answer for `specs`, float32 as the page asks (web/src/lib/state.svelte.ts `wire`)."""
    from transformer_explainer.encoding import decode_array

    specs = tuple({**s, "dtype": "float32"} for s in specs)
    if weights:
        out = post(server, "weights", model=MODEL, tensors=list(specs))["tensors"]
    else:
        out = post(server, "tensors", model=MODEL, ids=ids, tensors=list(specs))["tensors"]
    return [np.asarray(decode_array(t["data"], t["shape"], t["dtype"]), dtype=np.float32) for t in out]


def shown(page, strip: str) -> np.ndarray:
    """The raw numbers a Strip draws (its data-values), once they are there."""
    sel = f"[data-strip='{strip}'][data-values]"
    page.wait_for_selector(sel, timeout=30_000)
    return np.array([float(x) for x in page.get_attribute(sel, "data-values").split(",")], dtype=np.float32)


def matrix(page, name: str, rows: int) -> np.ndarray:
    sel = f"[data-matrix='{name}'][data-values]"
    page.wait_for_selector(sel, state="attached", timeout=30_000)
    return np.array([float(x) for x in page.get_attribute(sel, "data-values").split(",")],
                    dtype=np.float32).reshape(rows, -1)


def settle(page) -> None:
    page.wait_for_selector(".view:not(.busy)")
    page.wait_for_function("() => !document.querySelector('.view .placeholder')", timeout=30_000)


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"llama-{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def ref(llama_live_server) -> dict:
    info = httpx.get(llama_live_server.url + "api/models/" + MODEL, timeout=30).json()
    trace = post(llama_live_server, "trace", model=MODEL, text=TEXT, top_n=15)
    return {"ids": trace["token_ids"], "T": len(trace["token_ids"]), "cfg": trace["config"], "info": info}


@contextmanager
def open_on_text(browser, server, ref, **kw) -> Iterator:
    with open_app(browser, server.url, **kw) as page:
        page.fill("[data-testid=text]", TEXT)
        page.wait_for_function("n => document.querySelectorAll('[data-testid=token-chip]').length === n",
                               arg=ref["T"], timeout=30_000)
        settle(page)
        yield page


def test_every_view_renders_for_llama(browser, llama_live_server, ref):
    cfg = ref["cfg"]
    assert cfg["family"] == "llama" and cfg["n_kv_heads"] < cfg["n_head"]  # the fixture is what this test is about
    with open_on_text(browser, llama_live_server, ref) as page:
        # the header names the family; a float32 model has no dtype badge
        assert page.get_attribute("[data-testid=model-family]", "data-family") == "llama"
        assert "Llama family" in page.inner_text("[data-testid=model-family]")
        assert page.locator("[data-testid=dtype-badge]").count() == 0
        for i, v in enumerate(NAV):
            page.click(f"[data-testid=nav-{v}]")
            page.wait_for_selector("section.view")
            settle(page)
            if v == "experiments":
                page.wait_for_timeout(1500)
            text = page.inner_text("section.view")
            assert page.locator("section.view .formula").inner_text().strip()
            assert page.locator("[data-testid=error]").count() == 0, page.inner_text("[data-testid=error]")
            low = text.lower()
            for claim in GPT2_ONLY:
                assert claim not in low, (v, claim, text[:600])
            shot(page, f"{i:02d}-{v}")
        assert "Gated MLP" in page.inner_text("nav") and "RMSNorm" in page.inner_text("nav")


def test_llama_values_equal_api(browser, llama_live_server, ref):
    ids, T, cfg = ref["ids"], ref["T"], ref["cfg"]
    p = T - 1  # the page's focus: the last token
    with open_on_text(browser, llama_live_server, ref) as page:
        # embedding: the token's row alone, no position vector
        page.click("[data-testid=nav-embedding]")
        settle(page)
        (tok,) = tensors(llama_live_server, ids, {"name": "embed.token", "position": p})
        np.testing.assert_array_equal(shown(page, "emb-token"), tok)
        assert page.locator("[data-strip='emb-pos']").count() == 0
        assert "RoPE" in page.inner_text("section.view")

        # RMSNorm beside LayerNorm, block 0's ln1
        page.click("[data-testid=nav-layernorm-ln1]")
        settle(page)
        x, rms, norm, out = tensors(llama_live_server, ids, {"name": "blocks.0.resid_pre", "position": p},
                                    {"name": "blocks.0.ln1.rms"}, {"name": "blocks.0.ln1.normalized", "position": p},
                                    {"name": "blocks.0.ln1.out", "position": p})
        (w,) = tensors(llama_live_server, ids, {"name": "blocks.0.ln1.w"}, weights=True)
        np.testing.assert_array_equal(shown(page, "ln-input"), x)
        np.testing.assert_array_equal(shown(page, "ln-normalized"), norm)
        np.testing.assert_array_equal(shown(page, "ln-gamma"), w)
        np.testing.assert_array_equal(shown(page, "ln-out"), out)
        assert float(page.get_attribute("[data-testid=rms-value]", "data-value")) == pytest.approx(float(rms[p]))
        assert page.locator("[data-strip='ln-beta']").count() == 0  # RMSNorm has no shift
        # the comparison: LayerNorm of the same input, computed in the page
        xd = x.astype(np.float64)
        mu, var = xd.mean(), xd.var()
        eps = cfg["layer_norm_epsilon"]
        attr = lambda testid: float(page.get_attribute(f"[data-testid={testid}]", "data-value"))  # noqa: E731
        assert attr("cmp-mean") == pytest.approx(mu, rel=1e-5, abs=1e-7)
        assert attr("cmp-var") == pytest.approx(var, rel=1e-5)
        ln = (xd - mu) / math.sqrt(var + eps)
        np.testing.assert_allclose(shown(page, "cmp-normalized"), ln, rtol=1e-5, atol=1e-5)
        # ...and it is not the model's step: the model's normalized vector keeps the mean in
        assert not np.allclose(norm, ln, atol=1e-3)
        assert "not this model's step" in page.inner_text("[data-testid=ln-compare]")
        shot(page, "values-rmsnorm")

        # the final RMSNorm reads the last block's output
        page.select_option("[data-testid=ln-which]", "ln_final")
        settle(page)
        last = cfg["n_layer"] - 1
        xf, outf = tensors(llama_live_server, ids, {"name": f"blocks.{last}.resid_post", "position": p},
                           {"name": "ln_final.out", "position": p})
        np.testing.assert_array_equal(shown(page, "ln-input"), xf)
        np.testing.assert_array_equal(shown(page, "ln-out"), outf)

        # the gated MLP of block 1
        page.click("[aria-label='Layer 1'][role=radio]")
        page.click("[data-testid=nav-mlp]")
        settle(page)
        names = ["ln2.out", "mlp.gate", "mlp.act", "mlp.up", "mlp.post", "mlp_out"]
        got = tensors(llama_live_server, ids, *({"name": f"blocks.1.{n}", "position": p} for n in names))
        for strip, want in zip(["mlp-in", "mlp-gate", "mlp-act", "mlp-up", "mlp-post", "mlp-out"], got, strict=True):
            np.testing.assert_array_equal(shown(page, strip), want)
        assert got[1].shape[0] == cfg["d_mlp"]
        assert page.get_attribute("[data-testid=act-curve]", "data-activation") == "silu"
        view = page.inner_text("section.view")
        ratio = cfg["d_mlp"] / cfg["n_embd"]
        assert f"{ratio:.0f} × the width {cfg['n_embd']}" in view if ratio.is_integer() else f"{ratio:.2f} ×" in view
        # the MLPs' share of the parameters, from the config, agrees with the model's own parameter count
        share = cfg["n_layer"] * 3 * cfg["n_embd"] * cfg["d_mlp"] / ref["info"]["n_params"]
        assert f"{100 * share:.4g}%" in view, view
        shot(page, "values-mlp")

        # queries of head 3, keys and values of its key/value head (grouped-query attention)
        page.click("[data-testid=nav-qkv]")
        page.click("[data-testid=head-picker] button:text-is('3')")
        settle(page)
        H, G = cfg["n_head"], cfg["n_kv_heads"]
        g = 3 // (H // G)
        assert page.get_attribute("[data-testid=kv-group]", "data-kv-head") == str(g)
        q, k, v, kvh = tensors(llama_live_server, ids, {"name": "blocks.1.attn.q", "head": 3},
                               {"name": "blocks.1.attn.k"}, {"name": "blocks.1.attn.v"},
                               {"name": "blocks.1.attn.kv_head"})
        assert int(kvh[3]) == g  # the engine's own grouping
        np.testing.assert_array_equal(matrix(page, "qkv-q", T), q)
        np.testing.assert_array_equal(matrix(page, "qkv-k", T), k[g])
        np.testing.assert_array_equal(matrix(page, "qkv-v", T), v[g])
        page.click("text=Show this head's W_Q, W_K, W_V")
        page.wait_for_selector("[data-testid=qkv-w1] .pic")
        shot(page, "values-qkv")

        # head outputs: the concatenation is H * Dh wide, attn_out has no bias
        page.click("[data-testid=nav-heads]")
        settle(page)
        concat, attn_out = tensors(llama_live_server, ids, {"name": "blocks.1.attn.concat", "position": p},
                                   {"name": "blocks.1.attn_out", "position": p})
        np.testing.assert_array_equal(shown(page, "heads-concat"), concat)
        np.testing.assert_array_equal(shown(page, "heads-out"), attn_out)

        # the output reads the final RMSNorm
        page.click("[data-testid=nav-output]")
        settle(page)
        np.testing.assert_array_equal(shown(page, "final-ln"), outf)
        assert "RMSNorm" in page.inner_text("section.view")


def test_llama_views_in_chinese(browser, llama_live_server, ref):
    with open_app(browser, llama_live_server.url, query="?lang=zh", locale="zh-CN") as page:
        for v in ["embedding", "layernorm-ln1", "mlp", "qkv"]:
            page.click(f"[data-testid=nav-{v}]")
            settle(page)
            text = page.inner_text("section.view .explain")
            assert sum("\u4e00" <= ch <= "\u9fff" for ch in text) > 20, text
            shot(page, f"zh-{v}")
        assert "Llama 系列" in page.inner_text("[data-testid=model-family]")


@pytest.fixture(scope="module")
def bf16_server(tmp_path_factory) -> Iterator:
    """The same kind of tiny Llama, loaded in bfloat16 (as `serve --dtype bfloat16` does)."""
    from tests.conftest import make_hf_llama_family
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    from .conftest import LiveServer

    folder = make_hf_llama_family(tmp_path_factory.mktemp("tiny-llama-bf16"), "llama")
    model = load_model(str(folder), allow_download=False, dtype="bfloat16")
    with LiveServer(create_app({"tiny-llama-bf16": model})) as srv:
        yield srv


def test_bfloat16_badge(browser, bf16_server):
    info = httpx.get(bf16_server.url + "api/models/tiny-llama-bf16", timeout=30).json()
    assert info["config"]["dtype"] == "bfloat16"
    with open_app(browser, bf16_server.url) as page:
        badge = page.locator("[data-testid=dtype-badge]")
        assert badge.inner_text() == "weights in bfloat16"
        assert "8 significant bits" in badge.get_attribute("title")
        page.click("[data-testid=nav-mlp]")
        settle(page)
        shot(page, "bf16-mlp")
        page.select_option("[data-testid=lang]", "zh")
        page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
        assert badge.inner_text() == "权重为 bfloat16"
