"""The app on Qwen3 and Gemma 3 (tiny random checkpoints built with transformers: 4 layers, 4 query heads on 2
key/value heads, QK-norm; Gemma with sandwich norms, (1 + w) norms, a scaled embedding, GeGLU and local layers
whose window of 5 is shorter than the text): every view the model has renders without errors or empty panels,
the views of what is new (QK-norm, the sliding-window mask beside the causal one, which layers are local, the
sandwich norms in the residual view) draw the API's own numbers, in English and in Chinese, at 1280 and 390 px."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app

pytestmark = pytest.mark.browser

TEXT = "The quick brown fox jumps over the lazy dog"
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True, "device_scale_factor": 2}


@pytest.fixture(scope="module", params=["qwen3", "gemma3_text"])
def server(request, tmp_path_factory) -> Iterator[tuple[LiveServer, str]]:
    from tests.conftest import make_hf_llama_family
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    name = f"tiny-{request.param}"
    folder = make_hf_llama_family(tmp_path_factory.mktemp(name), request.param)
    with LiveServer(create_app({name: load_model(str(folder), allow_download=False)})) as srv:
        yield srv, name


def post(srv: LiveServer, path: str, **body) -> dict:
    r = httpx.post(srv.url + "api/" + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def tensors(srv: LiveServer, model: str, ids: list[int], *specs: dict, weights: bool = False) -> list[np.ndarray]:
    from transformer_explainer.encoding import decode_array

    specs = tuple({**s, "dtype": "float32"} for s in specs)
    body = {"model": model, "tensors": list(specs)}
    out = post(srv, "weights", **body)["tensors"] if weights else post(srv, "tensors", ids=ids, **body)["tensors"]
    return [np.asarray(decode_array(t["data"], t["shape"], t["dtype"]), dtype=np.float32) for t in out]


def shown(page, strip: str) -> np.ndarray:
    sel = f"[data-strip='{strip}'][data-values]"
    page.wait_for_selector(sel, timeout=30_000)
    return np.array([float(x) for x in page.get_attribute(sel, "data-values").split(",")], dtype=np.float32)


def settle(page) -> None:
    page.wait_for_selector(".view:not(.busy)")
    page.wait_for_function("() => !document.querySelector('.view .placeholder')", timeout=30_000)


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"families-{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def ref(server) -> dict:
    srv, model = server
    trace = post(srv, "trace", model=model, text=TEXT, top_n=15)
    return {"ids": trace["token_ids"], "T": len(trace["token_ids"]), "cfg": trace["config"], "model": model}


@contextmanager
def open_on_text(browser, srv, ref, **kw) -> Iterator:
    with open_app(browser, srv.url, **kw) as page:
        page.fill("[data-testid=text]", TEXT)
        page.wait_for_function("n => document.querySelectorAll('[data-testid=token-chip]').length === n",
                               arg=ref["T"], timeout=30_000)
        settle(page)
        yield page


def nav_of(caps: dict) -> list[str]:
    """The stages the architecture offers for these capabilities (web/src/components/Architecture.svelte)."""
    block = ["layernorm-ln1", "qkv", "qknorm", "rope", "gqa", "attention",
             *(["window"] if caps["local_window"] else []),
             "heads", *(["layernorm-ln1_post"] if caps["sandwich_norm"] else []), "layernorm-ln2", "mlp",
             *(["layernorm-ln2_post"] if caps["sandwich_norm"] else []), "residual"]
    return ["overview", "tokens", "embedding", *block, "layernorm-final", "output", "blocks", "experiments"]


def test_every_view_renders(browser, server, ref):
    srv, _ = server
    cfg = ref["cfg"]
    caps = cfg["capabilities"]
    assert caps["qk_norm"] and cfg["n_kv_heads"] < cfg["n_head"]
    with open_on_text(browser, srv, ref) as page:
        label = page.inner_text("[data-testid=model-family]")
        assert ("Gemma 3 family" if cfg["family"] == "gemma3" else "Qwen3 family") in label, label
        title = page.get_attribute("[data-testid=model-family]", "title")
        assert "QK-norm" in title and (("four norms per block" in title) == caps["sandwich_norm"])
        for i, v in enumerate(nav_of(caps)):
            page.click(f"[data-testid=nav-{v}]")
            page.wait_for_selector("section.view")
            settle(page)
            if v == "experiments":
                page.wait_for_timeout(1500)
            assert page.locator("section.view .formula").first.inner_text().strip(), v
            assert page.locator("[data-testid=error]").count() == 0, page.inner_text("[data-testid=error]")
            text = page.inner_text("section.view").lower()
            assert "silu" not in text or cfg["activation"] == "silu", v  # Gemma's gate is GELU
            shot(page, f"{cfg['family']}-{i:02d}-{v}")


def test_qk_norm_view_draws_the_traces_numbers(browser, server, ref):
    srv, model = server
    ids, T, cfg = ref["ids"], ref["T"], ref["cfg"]
    p, h = T - 1, 3
    g = h // (cfg["n_head"] // cfg["n_kv_heads"])
    with open_on_text(browser, srv, ref) as page:
        page.click("[data-testid=nav-qkv]")
        settle(page)
        assert page.locator("[data-testid=qk-norm-note]").count() == 1
        page.click("[data-testid=open-qknorm]")
        page.click("[data-testid=head-picker] button:text-is('3')")
        settle(page)
        q, qn, qr, k, kn, kr, sc = tensors(srv, model, ids, {"name": "blocks.0.attn.q", "head": h},
                                           {"name": "blocks.0.attn.q_norm.out", "head": h},
                                           {"name": "blocks.0.attn.q_norm.rms", "head": h},
                                           {"name": "blocks.0.attn.k", "head": h},
                                           {"name": "blocks.0.attn.k_norm.out", "head": h},
                                           {"name": "blocks.0.attn.k_norm.rms", "head": h},
                                           {"name": "blocks.0.attn.scaled_scores", "head": h, "position": p})
        np.testing.assert_array_equal(shown(page, "qk-q-before"), q[p])
        np.testing.assert_array_equal(shown(page, "qk-q-after"), qn[p])
        np.testing.assert_array_equal(shown(page, "qk-k-before"), k[p])
        np.testing.assert_array_equal(shown(page, "qk-k-after"), kn[p])
        assert float(page.get_attribute("[data-testid=qk-q-rms]", "data-value")) == pytest.approx(float(qr[p]))
        assert float(page.get_attribute("[data-testid=qk-k-rms]", "data-value")) == pytest.approx(float(kr[p]))
        # every position's length before and after, and the bound on the focus row's scores
        lengths = page.locator("[data-testid=qk-lengths]")
        np.testing.assert_allclose(np.array(eval(lengths.get_attribute("data-q"))), np.linalg.norm(q, axis=-1),
                                   rtol=1e-5)
        np.testing.assert_allclose(np.array(eval(lengths.get_attribute("data-q-normed"))),
                                   np.linalg.norm(qn, axis=-1), rtol=1e-5)
        bound = page.locator("[data-testid=qk-bound]")
        attr = lambda a: float(bound.get_attribute(a))  # noqa: E731
        largest = float(np.abs(sc[: p + 1]).max())
        assert attr("data-largest") == pytest.approx(largest, rel=1e-5)
        longest_key = np.linalg.norm(kn[: p + 1], axis=-1).max()
        normed_bound = cfg["capabilities"]["attn_scale"] * np.linalg.norm(qn[p]) * longest_key
        assert attr("data-bound-normed") == pytest.approx(float(normed_bound), rel=1e-5)
        assert largest <= attr("data-bound-normed") * (1 + 1e-5) <= attr("data-bound-weights") * (1 + 1e-5)
        wq, wk = tensors(srv, model, ids, {"name": "blocks.0.attn.q_norm.w"}, {"name": "blocks.0.attn.k_norm.w"},
                         weights=True)
        want = cfg["capabilities"]["attn_scale"] * np.abs(wq).max() * np.abs(wk).max() * cfg["head_dim"]
        assert attr("data-bound-weights") == pytest.approx(float(want), rel=1e-5)
        assert f"key/value head {g}" in page.inner_text("section.view")
        shot(page, f"{cfg['family']}-qknorm")


def test_gemma_window_and_sandwich_norms(browser, server, ref):
    srv, model = server
    ids, T, cfg = ref["ids"], ref["T"], ref["cfg"]
    caps = cfg["capabilities"]
    if not caps["sandwich_norm"]:
        pytest.skip("Qwen3 has neither local layers nor sandwich norms")
    w, p = caps["local_window"], T - 1
    assert T > w
    with open_on_text(browser, srv, ref) as page:
        # which layers are local, and the two masks on this text
        page.click("[data-testid=nav-window]")
        settle(page)
        assert eval(page.get_attribute("[data-testid=layer-types]", "data-types")) == caps["layer_types"]
        page.click("[data-testid=layer-types] button[data-layer='0']")
        settle(page)
        assert page.get_attribute("[data-testid=window-pattern-title]", "data-local") == "true"
        (pattern,) = tensors(srv, model, ids, {"name": "blocks.0.attn.pattern", "head": 0})
        assert float(pattern[p, : p - w + 1].sum()) == 0.0 and (pattern[p, p - w + 1: p + 1] > 0).all()
        assert float(page.get_attribute("[data-testid=window-outside]", "data-value")) == 0.0
        mem = page.locator("[data-testid=window-memory] tr[data-row=context]")
        n, L = int(mem.get_attribute("data-n")), cfg["n_layer"]
        local = sum(t == "sliding_attention" for t in caps["layer_types"])
        per = 2 * cfg["n_kv_heads"] * cfg["head_dim"] * 4
        assert int(float(mem.get_attribute("data-all"))) == L * n * per
        assert int(float(mem.get_attribute("data-windowed"))) == ((L - local) * n + local * min(n, w)) * per
        shot(page, "gemma3-window")
        page.click("[data-testid=layer-types] button[data-layer='1']")  # a global layer sees every earlier key
        settle(page)
        assert page.get_attribute("[data-testid=window-pattern-title]", "data-local") == "false"
        assert float(page.get_attribute("[data-testid=window-outside]", "data-value")) > 0
        # the attention view says which kind the layer is
        page.click("[data-testid=nav-attention]")
        settle(page)
        assert page.get_attribute("[data-testid=layer-kind]", "data-local") == "false"
        # the residual view: each branch's output before its norm, then what the norm makes of it
        page.click("[data-testid=nav-residual]")
        settle(page)
        raw, normed, mraw, mnormed = tensors(srv, model, ids, *({"name": f"blocks.1.{s}", "position": p} for s in
                                                                ("attn.out", "attn_out", "mlp.out", "mlp_out")))
        for strip, want in (("resid-attnRaw", raw), ("resid-attn", normed), ("resid-mlpRaw", mraw),
                            ("resid-mlp", mnormed)):
            np.testing.assert_array_equal(shown(page, strip), want)
        shot(page, "gemma3-residual")
        # the norm after attention, and the scaled embedding
        page.click("[data-testid=nav-layernorm-ln1_post]")
        settle(page)
        x, out = tensors(srv, model, ids, {"name": "blocks.1.attn.out", "position": p},
                         {"name": "blocks.1.ln1_post.out", "position": p})
        np.testing.assert_array_equal(shown(page, "ln-input"), x)
        np.testing.assert_array_equal(shown(page, "ln-out"), out)
        page.click("[data-testid=nav-embedding]")
        settle(page)
        tok, scaled = tensors(srv, model, ids, {"name": "embed.token", "position": p},
                              {"name": "embed.scaled", "position": p})
        np.testing.assert_array_equal(shown(page, "emb-token"), tok)
        np.testing.assert_array_equal(shown(page, "emb-scaled"), scaled)
        np.testing.assert_allclose(scaled, tok * np.float32(cfg["n_embd"] ** 0.5), rtol=1e-6)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_new_views_in_both_languages_and_on_a_phone(browser, server, ref, lang):
    srv, _ = server
    caps = ref["cfg"]["capabilities"]
    views = ["qknorm", *(["window", "residual"] if caps["sandwich_norm"] else [])]
    for size, extra in (("desktop", {}), ("phone", PHONE)):
        kw = {"query": "?lang=zh", "locale": "zh-CN"} if lang == "zh" else {}
        with open_on_text(browser, srv, ref, **kw, **extra) as page:
            for v in views:
                page.click(f"[data-testid=nav-{v}]")
                settle(page)
                text = page.inner_text("section.view .explain")
                if lang == "zh":
                    assert sum("\u4e00" <= ch <= "\u9fff" for ch in text) > 20, text
                width = page.evaluate("() => document.documentElement.scrollWidth")
                assert width <= page.viewport_size["width"] + 1, (v, width)  # nothing wider than the screen
                shot(page, f"{ref['cfg']['family']}-{v}-{lang}-{size}")
