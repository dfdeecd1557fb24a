"""The Llama family's two views (issue 12): RoPE (each pair of q/k dimensions turned by position ×
frequency, the angle of every position and pair, a live check that the score depends on m − n only) and
GQA (query heads grouped on their shared key/value head, the KV-cache memory it saves). The numbers in the
page are checked against /api/tensors and /api/models of the same server; GPT-2 has neither view.
Screenshots (desktop 1280x900 and a 390x844 phone) go to test-artifacts/rope-gqa-*.png."""

from __future__ import annotations

import base64
import json
import urllib.request

import numpy as np
import pytest

from .conftest import ARTIFACTS, open_app

pytestmark = pytest.mark.browser

TEXT = "The quick brown fox jumps over the lazy dog"
TAP_TARGETS = {"rope": ["rope-key", "rope-m", "rope-n", "rope-s", "rope-reset"], "gqa": ["gqa-q-0", "gqa-q-3"]}
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 3, "is_mobile": True, "has_touch": True}


def api(url: str, path: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(url + "api/" + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def tensors(url: str, text: str, specs: list[dict]) -> list[np.ndarray]:
    out = api(url, "tensors", {"model": "tiny-llama", "text": text, "tensors": specs})["tensors"]
    return [np.frombuffer(base64.b64decode(t["data"]), np.float16 if t["dtype"] == "float16" else np.float32)
            .reshape(t["shape"]).astype(np.float64) for t in out]


def attr(page, testid: str, name: str) -> str:
    return page.get_attribute(f"[data-testid={testid}]", name)


def floats(page, testid: str, name: str) -> np.ndarray:
    return np.array(json.loads(attr(page, testid, name)), dtype=np.float64)


def rotate(x: np.ndarray, inv_freq: np.ndarray, pos: float) -> np.ndarray:
    half = len(inv_freq)
    c, s = np.cos(pos * inv_freq), np.sin(pos * inv_freq)
    return np.concatenate([x[:half] * c - x[half:] * s, x[half:] * c + x[:half] * s])


def set_number(page, testid: str, value: int) -> None:
    page.fill(f"[data-testid={testid}]", str(value))
    page.press(f"[data-testid={testid}]", "Enter")
    page.wait_for_function(f"() => document.querySelector('[data-testid=rope-demo]').dataset"
                           f".{testid.split('-')[1]} === '{value}'")


def type_text(page, text: str) -> None:
    before = int(page.evaluate("document.body.dataset.updates || 0"))
    page.fill("[data-testid=text]", text)
    page.wait_for_function(f"() => Number(document.body.dataset.updates || 0) > {before}")


def test_rope_rotation_is_the_models(browser, llama_live_server):
    url = llama_live_server.url
    with open_app(browser, url) as page:
        type_text(page, TEXT)
        page.click("[data-testid=nav-rope]")
        page.wait_for_selector("[data-tour=rope] [data-tour=rope-pairs] [data-testid=rope-pairs]")
        page.wait_for_selector("[data-tour=rope-angles] canvas")
        assert page.locator("[data-tour=rope-distance]").count() == 1
        page.click("[data-testid=head-picker] button:has-text('3')")
        page.wait_for_selector("[data-testid=rope-pairs][data-head='3']")
        pos = int(attr(page, "rope-pairs", "data-pos"))
        angles, q, rot_q, kv_head, k, rot_k = tensors(url, TEXT, [
            {"name": "rope.angles", "dtype": "float32"},
            {"name": "blocks.0.attn.q", "head": 3, "position": pos, "dtype": "float32"},
            {"name": "blocks.0.attn.rot_q", "head": 3, "position": pos, "dtype": "float32"},
            {"name": "blocks.0.attn.kv_head"}, {"name": "blocks.0.attn.k", "dtype": "float32"},
            {"name": "blocks.0.attn.rot_k", "dtype": "float32"}])
        assert pos == angles.shape[0] - 1  # a new text puts the focus on its last token
        # the drawn arrows: the page's own rotation of the real q equals the model's rot_q
        np.testing.assert_allclose(floats(page, "rope-pairs", "data-before"), q, rtol=0, atol=1e-6)
        drawn = floats(page, "rope-pairs", "data-drawn")
        np.testing.assert_allclose(drawn, rot_q, rtol=1e-4, atol=1e-5)
        assert np.abs(drawn - q).max() > 1e-2  # the rotation did something
        assert page.locator("[data-testid=rope-pairs] figure.pair").count() == q.size // 2
        inv_freq = floats(page, "rope-angles", "data-inv-freq")
        np.testing.assert_allclose(inv_freq, angles[1], rtol=1e-7)
        np.testing.assert_allclose(angles, np.arange(len(angles))[:, None] * inv_freq, rtol=1e-5, atol=1e-6)
        # the key side: the chosen key token's real k, turned by its own position, equals rot_k
        g = int(kv_head[3])
        assert g == 1  # 4 query heads on 2 key/value heads: h // 2
        page.select_option("[data-testid=rope-key]", "2")
        page.check("[data-testid=rope-side-k]")
        page.wait_for_selector("[data-testid=rope-pairs][data-side='k'][data-pos='2']")
        np.testing.assert_allclose(floats(page, "rope-pairs", "data-before"), k[g, 2], atol=1e-6)
        np.testing.assert_allclose(floats(page, "rope-pairs", "data-drawn"), rot_k[g, 2], rtol=1e-4, atol=1e-5)
        page.screenshot(path=str(ARTIFACTS / "rope-gqa-desktop-rope.png"), full_page=True)


def test_rope_score_depends_on_distance_only(browser, llama_live_server):
    url = llama_live_server.url
    with open_app(browser, url) as page:
        type_text(page, TEXT)
        page.click("[data-testid=nav-rope]")
        page.wait_for_selector("[data-testid=rope-demo]")
        page.select_option("[data-testid=rope-key]", "4")
        page.wait_for_selector("[data-testid=rope-demo][data-key='4']")
        pos = int(page.get_attribute("[data-testid=rope-demo]", "data-m"))
        demo = "[data-testid=rope-demo]"
        angles, q, k, scores = tensors(url, TEXT, [
            {"name": "rope.angles", "dtype": "float32"},
            {"name": "blocks.0.attn.q", "head": 0, "position": pos, "dtype": "float32"},
            {"name": "blocks.0.attn.k", "dtype": "float32"},
            {"name": "blocks.0.attn.scores", "head": 0, "position": pos, "dtype": "float32"}])
        inv_freq, kk = angles[1], k[0, 4]  # head 0 reads key/value head 0
        # at the real positions the demo gives the model's raw score (rot_q · rot_k, before ÷√d_head)
        real = float(page.get_attribute(demo, "data-real-score"))
        assert real == pytest.approx(scores[4], rel=1e-6)
        assert float(page.get_attribute(demo, "data-demo-real")) == pytest.approx(real, rel=1e-4, abs=1e-5)

        def python_score(m: int, n: int) -> float:
            return float(rotate(q, inv_freq, m) @ rotate(kk, inv_freq, n))

        for m, n, s in [(7, 3, 20), (30, 0, 57), (3, 9, 100)]:
            set_number(page, "rope-m", m)
            set_number(page, "rope-n", n)
            set_number(page, "rope-s", s)
            score = float(page.get_attribute(demo, "data-score"))
            shifted = float(page.get_attribute(demo, "data-score-shifted"))
            assert shifted == pytest.approx(score, rel=1e-9, abs=1e-12)  # the same distance, the same score
            assert score == pytest.approx(python_score(m, n), rel=1e-9, abs=1e-12)
            assert shifted == pytest.approx(python_score(m + s, n + s), rel=1e-9, abs=1e-12)
        # a different distance gives a different score
        set_number(page, "rope-m", 8)
        assert float(page.get_attribute(demo, "data-score")) != pytest.approx(python_score(3, 9), rel=1e-3)
        assert float(page.get_attribute(demo, "data-score")) == pytest.approx(python_score(8, 9), rel=1e-9)
        page.click("[data-testid=rope-reset]")
        page.wait_for_selector(f"{demo}[data-m='{pos}'][data-n='4']")


def test_gqa_groups_and_memory(browser, llama_live_server):
    url = llama_live_server.url
    cfg = api(url, "models/tiny-llama")["config"]
    H, G, L, dh = cfg["n_head"], cfg["n_kv_heads"], cfg["n_layer"], cfg["head_dim"]
    assert (H, G, dh) == (4, 2, 16)
    b = {"float32": 4, "bfloat16": 2, "float16": 2}[cfg["dtype"]]
    with open_app(browser, url) as page:
        type_text(page, TEXT)
        page.click("[data-testid=nav-gqa]")
        page.wait_for_selector("[data-tour=gqa] [data-tour=gqa-groups] [data-testid=gqa-groups] .group")
        kv_head, angles = tensors(url, TEXT, [{"name": "blocks.0.attn.kv_head"}, {"name": "rope.angles"}])
        T = len(angles)
        groups = {int(g.get_attribute("data-kv-head")): [int(h) for h in g.get_attribute("data-heads").split(",")]
                  for g in page.locator("[data-testid=gqa-groups] .group").all()}
        assert groups == {g: [h for h in range(H) if kv_head[h] == g] for g in range(G)} == {0: [0, 1], 1: [2, 3]}
        # the patterns of the heads that share the current head's K/V side by side, the real ones
        assert page.get_attribute("[data-testid=gqa-patterns]", "data-heads") == "0,1"
        page.click("[data-testid=gqa-q-3]")
        page.wait_for_selector("[data-testid=gqa-patterns][data-heads='2,3'] [data-testid=gqa-pattern-3]")
        page.wait_for_selector("[data-testid=gqa-pattern-2]")
        # the memory figures: 2 (K and V) x layers x kv heads x head_dim x bytes, per token, text, context
        table = page.locator("[data-testid=gqa-memory]")
        page.wait_for_selector("[data-testid=gqa-memory][data-ratio='2']")
        rows = {r.get_attribute("data-row"): r for r in table.locator("tbody tr").all()}
        assert set(rows) == {"this", "mha", "mqa"}
        for row, kv in [("this", G), ("mha", H), ("mqa", 1)]:
            per = 2 * L * kv * dh * b
            r = rows[row]
            assert int(r.get_attribute("data-kv-heads")) == kv
            assert int(r.get_attribute("data-per-token")) == per
            assert int(r.get_attribute("data-text")) == per * T
            assert int(r.get_attribute("data-context")) == per * cfg["block_size"]
        # K and V, 2 layers, 2 key/value heads, 16 numbers, 4 bytes (float32)
        assert int(rows["this"].get_attribute("data-per-token")) == 2 * 2 * 2 * 16 * 4 == 512
        assert "2×" in page.inner_text("[data-testid=gqa-saving]")
        page.screenshot(path=str(ARTIFACTS / "rope-gqa-desktop-gqa.png"), full_page=True)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_phone_layout(browser, llama_live_server, lang):
    with open_app(browser, llama_live_server.url, query="?lang=zh" if lang == "zh" else "", **PHONE) as page:
        type_text(page, TEXT)
        for view in ("rope", "gqa"):
            page.click(f"[data-testid=nav-{view}]")
            page.wait_for_selector(f"[data-tour={view}] canvas")
            sw, iw = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
            assert sw <= iw, f"{view}: the page is {sw} px wide in a {iw} px viewport"
            for testid in TAP_TARGETS[view]:  # big enough to tap
                box = page.locator(f"[data-testid={testid}]").bounding_box()
                assert box["height"] >= 39.5 and box["width"] >= 39.5, (testid, box)
            page.locator(f"[data-tour={view}]").screenshot(path=str(ARTIFACTS / f"rope-gqa-phone-{lang}-{view}.png"))


def test_gpt2_has_neither_view(page):
    page.wait_for_selector("[data-testid=nav-qkv]")
    assert page.locator("[data-testid=nav-rope]").count() == 0
    assert page.locator("[data-testid=nav-gqa]").count() == 0
    assert page.locator("[data-testid=nav-attention]").count() == 1


def test_switching_to_gpt2_leaves_the_llama_views(browser, tiny_model, tmp_path):
    """Open RoPE on the Llama model, then pick GPT-2: the page asks nothing of GPT-2 under Llama names and
    falls back to the attention view; the two views leave the architecture."""
    from tests.conftest import make_hf_llama_family
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    from .conftest import LiveServer

    llama = load_model(str(make_hf_llama_family(tmp_path / "tiny-llama", "llama")), allow_download=False)
    with LiveServer(create_app({"tiny-llama": llama, "tiny": tiny_model})) as srv, open_app(browser, srv.url) as page:
        page.select_option("[data-testid=model]", "tiny-llama")
        page.wait_for_selector("[data-testid=nav-rope]")
        page.click("[data-testid=nav-rope]")
        page.wait_for_selector("[data-testid=rope-demo]")
        page.select_option("[data-testid=model]", "tiny")
        page.wait_for_selector("[data-view=attention]")
        assert page.locator("[data-testid=nav-rope], [data-testid=nav-gqa]").count() == 0
        assert page.locator("[data-testid=error]").count() == 0
