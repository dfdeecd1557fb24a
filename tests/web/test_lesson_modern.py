"""The chapter "from GPT-2 to today's models" (web/src/lessons/modern.ts) in a real browser, on a tiny
random Llama-family model (4 query heads on 2 key/value heads, Llama 3.1 rope scaling): the lesson
button opens it for that family; English and 中文 have the same steps; at every step the page shows
no error, the card does not cover its target, and every value in the card equals what the API
answers for the text on screen (/api/tensors, /api/models, /api/next_token), with the claims the
text makes about those values checked too (the embedding enters block 0 unchanged, the rms is the
root mean square, a rotation shifted by the same amount keeps the score, h = SiLU(g) × u)."""

from __future__ import annotations

import json
import math

import httpx
import numpy as np
import pytest

from .conftest import ARTIFACTS, open_app
from .test_lesson import APP_SAMPLING, CJK, api, close, focus, head, intersects, nums, rects, set_text, wait_body

pytestmark = pytest.mark.browser

TEXT = "The quick brown fox jumps over the lazy dog"
STEPS = ["big-picture", "no-position-table", "rmsnorm", "qkv-bias", "rope-angles", "rope-relative", "gqa",
         "kv-cache", "attention", "swiglu", "mlp-width", "unembed", "precision"]
ROPE_SHIFT = 100  # ROPE_SHIFT in modern.ts: how far the "relative" step moves a query and a key together


@pytest.fixture
def llama_page(browser, llama_live_server):
    with open_app(browser, llama_live_server.url) as pg:
        yield pg


def model_info(server) -> dict:
    name = httpx.get(server.url + "api/models", timeout=30).json()["default"]
    r = httpx.get(server.url + f"api/models/{name}", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def arrays(server, ids: list[int], *specs: dict) -> list[np.ndarray]:
    """Tensors as the page gets them (float16 on the wire unless a spec asks for float32)."""
    from transformer_explainer.server.encoding import decode_array

    out = api(server, "tensors", ids=ids, tensors=list(specs))["tensors"]
    return [np.asarray(decode_array(t["data"], t["shape"], t["dtype"]), dtype=np.float64) for t in out]


def rotate(x: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """The Llama family's rotation: dimension i pairs with i + Dh/2 (transformers' rotate_half)."""
    r = len(x) // 2
    c, s = np.cos(angle), np.sin(angle)
    return np.concatenate([x[:r] * c - x[r:] * s, x[r:] * c + x[:r] * s])


def open_lesson(page) -> None:
    page.click("[data-testid=tour-open]")
    page.wait_for_selector("[data-testid=tour]")
    assert page.get_attribute("[data-testid=tour]", "data-lesson") == "modern"


def go(page, sid: str) -> None:
    """Open step `sid` by its dot, wait for its text, and for the views to finish loading."""
    page.click(f"[data-testid=tour] .dots button >> nth={STEPS.index(sid)}")
    page.wait_for_function("s => document.querySelector('[data-testid=tour]')?.dataset.step === s", arg=sid)
    wait_body(page)
    page.wait_for_function("() => !document.querySelector('.view.busy')", timeout=30_000)
    page.wait_for_timeout(300)  # a view's fetch that failed has set the page's error by now


def walk_text(page, lang: str) -> list[dict]:
    open_lesson(page)
    out = []
    while True:
        wait_body(page)
        out.append({"id": page.get_attribute("[data-testid=tour]", "data-step"),
                    "title": page.inner_text("#lesson-title"), "body": page.inner_text("#lesson-body")})
        if page.locator("[data-testid=tour-next]").count() == 0:
            break
        page.click("[data-testid=tour-next]")
    page.keyboard.press("Escape")
    return out


def test_the_llama_family_gets_this_chapter_in_both_languages(llama_page, llama_live_server):
    set_text(llama_page, TEXT, llama_live_server)
    en = walk_text(llama_page, "en")
    llama_page.select_option("[data-testid=lang]", "zh")
    llama_page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
    zh = walk_text(llama_page, "zh")
    (ARTIFACTS / "lesson-modern-text.json").write_text(json.dumps({"en": en, "zh": zh}, ensure_ascii=False, indent=1))
    assert [s["id"] for s in en] == [s["id"] for s in zh] == STEPS
    for a, b in zip(en, zh, strict=True):
        assert a["title"].strip() and a["body"].strip() and b["title"].strip() and b["body"].strip()
        assert not CJK.search(a["title"] + a["body"]), a
        assert CJK.search(b["title"] + b["body"]), b


def test_a_gpt2_model_keeps_the_gpt2_lesson(browser, live_server):
    with open_app(browser, live_server.url) as page:
        set_text(page, TEXT, live_server)
        page.click("[data-testid=tour-open]")
        page.wait_for_selector("[data-testid=tour]")
        assert page.get_attribute("[data-testid=tour]", "data-lesson") == "gpt2"


# the values of each step, from the API (cfg: /api/models/{name}'s config; v: the card's data-raw values)
def check_values(sid: str, page, server, ids: list[int], info: dict) -> None:
    cfg, v = info["config"], nums(page)
    (pos, layer) = focus(page)
    # the head in focus, from the picker where the view has one (nothing in these tests changes it from 0)
    h = head(page) if page.locator("[data-testid=head-picker] [aria-checked=true]").count() else 0
    H, G, dh, d, m = cfg["n_head"], cfg["n_kv_heads"], cfg["head_dim"], cfg["n_embd"], cfg["d_mlp"]
    b = f"blocks.{layer}."
    if sid == "big-picture":
        assert v["model-name"] == info["name"] and v["model-type"] == cfg["model_type"]
        assert int(v["n-layer"]) == cfg["n_layer"] and int(v["n-params"]) == info["n_params"]
        assert int(v["n-head"]) == H and int(v["d-model"]) == d and int(v["ctx"]) == cfg["block_size"]
        assert int(v["n-kv-heads"]) == G and int(v["group-size"]) == H // G
    elif sid == "no-position-table":
        we, x0 = arrays(server, ids, {"name": "embed.token", "position": pos},
                        {"name": "blocks.0.resid_pre", "position": pos})
        assert int(v["focus-id"]) == ids[pos]
        assert close(v["we-0"], we[0]) and close(v["resid0-0"], x0[0])
        assert np.array_equal(we, x0)  # nothing is added before block 0
    elif sid == "rmsnorm":
        x, rms = arrays(server, ids, {"name": b + "resid_pre", "position": pos}, {"name": b + "ln1.rms"})
        assert int(v["layer"]) == layer
        assert close(v["rms"], rms[pos]) and close(v["mean"], x.mean())
        assert math.isclose(rms[pos], math.sqrt(np.mean(x ** 2) + cfg["layer_norm_epsilon"]), rel_tol=5e-3)
    elif sid == "qkv-bias":
        assert int(v["d-head"]) == dh and v["qkv-bias"] == str(cfg["qkv_bias"]).lower()
        assert v["model-type"] == cfg["model_type"]
        if cfg["qkv_bias"]:
            assert int(v["n-qkv-bias"]) == H * dh + 2 * G * dh
    elif sid == "rope-angles":
        (angles,) = arrays(server, ids, {"name": "rope.angles", "dtype": "float32"})
        w = (angles[-1] - angles[0]) / (len(ids) - 1)
        R = dh // 2
        assert angles.shape == (len(ids), R) and int(v["n-pairs"]) == R
        if pos > 0:
            assert int(v["pos"]) == pos
            assert close(v["angle-fast"], angles[pos, 0], 1e-5) and close(v["angle-slow"], angles[pos, -1], 1e-5)
        assert close(v["rope-theta"], cfg["rope_theta"]) and close(v["omega-fast"], w[0], 1e-5)
        assert close(v["slow-period"], 2 * math.pi / w[-1], 1e-4)
        formula = cfg["rope_theta"] ** (-2 * (R - 1) / dh)
        assert v["rope-scaling"] == cfg["rope_scaling"]
        assert close(v["slow-ratio"], formula / w[-1], 1e-4) and close(v["slow-ratio"], 8.0, 1e-3)  # llama3, factor 8
    elif sid == "rope-relative":
        j = max(0, pos - 1)
        q, k, kvh, scores, angles = arrays(
            server, ids, {"name": b + "attn.q", "head": h, "position": pos, "dtype": "float32"},
            {"name": b + "attn.k", "position": j, "dtype": "float32"}, {"name": b + "attn.kv_head"},
            {"name": b + "attn.scores", "head": h, "position": pos, "dtype": "float32"},
            {"name": "rope.angles", "dtype": "float32"})
        g = int(kvh[h])
        w = (angles[-1] - angles[0]) / (len(ids) - 1)
        assert int(v["head"]) == h and int(v["distance"]) == pos - j and int(v["key-token"]) == ids[j]
        assert close(v["score-real"], scores[j], 1e-5)
        assert math.isclose(float(rotate(q, angles[pos]) @ rotate(k[g], angles[j])), scores[j], rel_tol=1e-4,
                            abs_tol=1e-4)  # the score is the rotated query · the rotated key
        shift = min(ROPE_SHIFT, cfg["block_size"] - 1 - pos)
        assert int(v["shift"]) == shift
        shifted = float(rotate(q, angles[pos] + shift * w) @ rotate(k[g], angles[j] + shift * w))
        assert close(v["score-shifted"], shifted, 1e-4) and close(v["score-shifted"], scores[j], 1e-3)
        # the view's demonstration shows the same pair and shift, and the same score
        demo = page.locator("[data-testid=rope-demo]")
        assert int(demo.get_attribute("data-s")) == shift and int(demo.get_attribute("data-key")) == j
        assert close(v["score-shifted"], float(demo.get_attribute("data-score-shifted")), 1e-4)
    elif sid == "gqa":
        (kvh,) = arrays(server, ids, {"name": b + "attn.kv_head"})
        g = int(kvh[h])
        assert int(v["n-head"]) == H and int(v["n-kv-heads"]) == G and int(v["group-size"]) == H // G
        assert int(v["head"]) == h and int(v["kv-head"]) == g == h // (H // G)
        # the group, heads first to last, is the heads that read key/value head g
        group = list(range(int(v["group-first"]), int(v["group-last"]) + 1))
        assert group == [i for i in range(H) if kvh[i] == g]
    elif sid == "kv-cache":
        nbytes = {"float32": 4, "float64": 8}.get(cfg["dtype"], 2)
        per_tok = 2 * cfg["n_layer"] * G * dh * nbytes
        assert int(v["bytes-per-number"]) == nbytes and v["dtype"] == cfg["dtype"]
        assert int(v["cache-per-token"]) == per_tok and int(v["cache-full"]) == per_tok * cfg["block_size"]
        assert int(v["cache-full-mha"]) == per_tok * cfg["block_size"] * H // G
    elif sid == "attention":
        (pattern,) = arrays(server, ids, {"name": b + "attn.pattern", "head": h, "position": pos})
        best = int(np.argmax(pattern[: pos + 1]))
        assert int(v["d-head"]) == dh and int(v["head"]) == h
        assert int(v["top-key"]) == ids[best] and close(v["top-weight"], pattern[best])
    elif sid == "swiglu":
        gate, up, act, post = arrays(server, ids, *({"name": b + s, "position": pos}
                                                     for s in ("mlp.gate", "mlp.up", "mlp.act", "mlp.post")))
        u = int(np.argmax(np.abs(post)))
        assert int(v["unit"]) == u and int(v["d-mlp"]) == m and int(v["d-model"]) == d
        assert close(v["gate"], gate[u]) and close(v["act"], act[u]) and close(v["up"], up[u])
        assert close(v["post"], post[u]) and close(v["sigma"], 1 / (1 + math.exp(-gate[u])))
        assert math.isclose(act[u], gate[u] / (1 + math.exp(-gate[u])), rel_tol=5e-3, abs_tol=1e-3)  # SiLU
        assert math.isclose(post[u], act[u] * up[u], rel_tol=5e-3, abs_tol=1e-3)
    elif sid == "mlp-width":
        assert int(v["d-model"]) == d and int(v["d-mlp"]) == m and close(v["mlp-ratio"], m / d)
        assert int(v["mlp-weights"]) == 3 * d * m
        if 3 * m != 8 * d:
            assert int(v["gelu-weights"]) == 8 * d * d
    elif sid == "unembed":
        nx = api(server, "next_token", ids=ids, sampling=APP_SAMPLING, top_n=15)
        top = nx["candidates"][0]
        vd = cfg["vocab_size"] * d
        assert v["tied"] == str(cfg["tie_word_embeddings"]).lower() and int(v["vocab"]) == cfg["vocab_size"]
        assert int(v["vd"]) == vd and close(v["vd-share"], vd / info["n_params"], 1e-9)
        assert int(v["top-token"]) == top["id"] and close(v["top-logit"], top["logit"], 1e-5)
    elif sid == "precision":
        nbytes = {"float32": 4, "float64": 8}.get(cfg["dtype"], 2)
        assert v["dtype"] == cfg["dtype"] and int(v["n-params"]) == info["n_params"]
        # the file's type, read from its header, beside the type the app computes in (the same here: float32)
        assert v["file-dtype"] == cfg["file_dtype"] == "float32"
        assert int(v["file-size"]) == info["n_params"] * {"float32": 4}.get(cfg["file_dtype"], 2)
        if cfg["file_dtype"] != cfg["dtype"]:
            assert int(v["bytes-per-number"]) == nbytes and int(v["weights-size"]) == info["n_params"] * nbytes
    else:
        raise AssertionError(f"no check for step {sid}")


@pytest.mark.parametrize("sid", STEPS)
def test_each_step_shows_no_error_leaves_its_target_visible_and_tells_the_apis_values(sid, llama_page,
                                                                                       llama_live_server):
    page, server = llama_page, llama_live_server
    ids = set_text(page, TEXT, server)
    info = model_info(server)
    assert info["config"]["family"] == "llama"
    open_lesson(page)
    go(page, sid)
    page.screenshot(path=str(ARTIFACTS / f"lesson-modern-{STEPS.index(sid):02d}-{sid}.png"))
    assert page.locator("[data-testid=error]").count() == 0, page.inner_text("[data-testid=error]")
    target = page.get_attribute("[data-testid=tour]", "data-target")
    if target:
        card, tgt, _ = rects(page, target)
        assert tgt is not None, f"step {sid}: target [data-tour={target}] not on the page"
        assert not intersects(card, tgt), (sid, card, tgt)
    check_values(sid, page, server, ids, info)
    # the numbers follow the focus: a click on another token re-reads them (the output steps keep the last)
    if sid not in ("big-picture", "qkv-bias", "kv-cache", "mlp-width", "unembed", "precision"):
        page.locator("[data-testid=token-chip]").nth(len(ids) - 3).dispatch_event("click")
        page.wait_for_function("p => document.querySelector('[data-testid=token-chip][aria-selected=true]')"
                               "?.dataset.pos === String(p)", arg=len(ids) - 3)
        wait_body(page)
        page.wait_for_timeout(500)
        check_values(sid, page, server, ids, info)
