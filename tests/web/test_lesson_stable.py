"""The chapter "Qwen3 and Gemma: small changes that keep training stable" (web/src/lessons/stable.ts) in a real
browser, on tiny random Qwen3 and Gemma 3 checkpoints (4 layers; Gemma with sandwich norms and local layers whose
window of 5 is shorter than the text): the lesson button opens it for both families; English and 中文 have the same
steps; at every step the page shows no error, the card does not cover its target, and every value in the card
equals what the API answers for the text on screen (/api/tensors, /api/weights, /api/models), with the maths the
text states checked too (a normed query's length, the score bounds, the hidden pairs, the cache sizes). Qwen3, which
has neither sandwich norms nor local layers, is told so at those steps. The window step's task is done by clicking a
global layer, and the card then points at what it quotes of that layer."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app
from .test_lesson import CJK, close, focus, head, intersects, nums, rects, set_text, wait_body

pytestmark = pytest.mark.browser

TEXT = "The quick brown fox jumps over the lazy dog"
# the steps on a model with local layers; on one without (Qwen3) the real pattern of a local layer is left out
STEPS = ["intro", "qk-norm", "qk-bound", "qk-why", "sandwich", "sandwich-mlp", "window", "window-pattern", "memory",
         "summary"]


def steps_of(model: dict) -> list[str]:
    caps = model["config"]["capabilities"]
    local = "sliding_attention" in caps["layer_types"]
    return [s for s in STEPS if (local or s != "window-pattern") and (caps["sandwich_norm"] or s != "sandwich-mlp")]


@pytest.fixture(scope="module", params=["qwen3", "gemma3_text"])
def server(request, tmp_path_factory) -> Iterator[LiveServer]:
    from tests.conftest import make_hf_llama_family
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    name = f"tiny-{request.param}"
    folder = make_hf_llama_family(tmp_path_factory.mktemp(name), request.param)
    with LiveServer(create_app({name: load_model(str(folder), allow_download=False)})) as srv:
        yield srv


@pytest.fixture
def page(browser, server):
    with open_app(browser, server.url) as pg:
        yield pg


def info(server: LiveServer) -> dict:
    name = httpx.get(server.url + "api/models", timeout=30).json()["default"]
    r = httpx.get(server.url + f"api/models/{name}", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def arrays(server: LiveServer, ids: list[int], *specs: dict, weights: bool = False) -> list[np.ndarray]:
    from transformer_explainer.encoding import decode_array

    body = {"tensors": [{**s, "dtype": "float32"} for s in specs]}
    r = httpx.post(server.url + ("api/weights" if weights else "api/tensors"),
                   json=body if weights else {**body, "ids": ids}, timeout=60)
    assert r.status_code == 200, r.text
    return [np.asarray(decode_array(t["data"], t["shape"], t["dtype"]), dtype=np.float64) for t in r.json()["tensors"]]


def open_lesson(page) -> None:
    page.click("[data-testid=tour-open]")
    page.wait_for_selector("[data-testid=tour]")
    assert page.get_attribute("[data-testid=tour]", "data-lesson") == "stable"


def go(page, sid: str, steps: list[str]) -> None:
    page.click(f"[data-testid=tour] .dots button >> nth={steps.index(sid)}")
    page.wait_for_function("s => document.querySelector('[data-testid=tour]')?.dataset.step === s", arg=sid)
    wait_body(page)
    page.wait_for_function("() => !document.querySelector('.view.busy')", timeout=30_000)
    page.wait_for_timeout(300)


def walk_text(page) -> list[dict]:
    open_lesson(page)
    out = []
    while True:
        wait_body(page)
        out.append({"id": page.get_attribute("[data-testid=tour]", "data-step"),
                    "body": page.inner_text("#lesson-body")})
        if page.locator("[data-testid=tour-next]").count() == 0:
            break
        page.click("[data-testid=tour-next]")
    page.keyboard.press("Escape")
    return out


def test_both_families_get_this_chapter_in_both_languages(page, server):
    set_text(page, TEXT, server)
    en = walk_text(page)
    page.select_option("[data-testid=lang]", "zh")
    page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
    zh = walk_text(page)
    assert [s["id"] for s in en] == [s["id"] for s in zh] == steps_of(info(server))
    for a, b in zip(en, zh, strict=True):
        assert a["body"].strip() and not CJK.search(a["body"]), a
        assert CJK.search(b["body"]), b


def length(x: np.ndarray) -> float:
    return float(np.sqrt((x ** 2).sum()))


def check_values(sid: str, page, server: LiveServer, ids: list[int], model: dict) -> None:
    cfg, v = model["config"], nums(page)
    caps = cfg["capabilities"]
    pos, layer = focus(page)
    types = caps["layer_types"]
    n_local = types.count("sliding_attention")
    w = caps["local_window"]
    b = f"blocks.{layer}."
    if sid == "intro":
        assert v["model-name"] == model["name"] and v["model-type"] == cfg["model_type"]
        assert int(v["n-layer"]) == cfg["n_layer"] and int(v["n-head"]) == cfg["n_head"]
        assert int(v["n-kv-heads"]) == cfg["n_kv_heads"] and int(v["n-params"]) == model["n_params"]
        if n_local:
            assert int(v["n-local"]) == n_local and int(v["n-global"]) == cfg["n_layer"] - n_local
            assert int(v["window"]) == w
            # the count's noun agrees with it: "1 global layer", never "1 global ones" / "1 global layers"
            body = page.inner_text("#lesson-body")
            assert not re.search(r"\b1 (local|global) (ones|layers)\b", body), body
            for n, kind in ((n_local, "local"), (cfg["n_layer"] - n_local, "global")):
                assert f"{n} {kind} layer{'' if n == 1 else 's'}" in body, (n, kind, body)
        else:
            assert "n-local" not in v
    elif sid == "qk-norm":
        h = head(page)
        q, qn, rms = arrays(server, ids, {"name": b + "attn.q", "head": h}, {"name": b + "attn.q_norm.out", "head": h},
                            {"name": b + "attn.q_norm.rms", "head": h})
        assert int(v["layer"]) == layer and int(v["head"]) == h and int(v["d-head"]) == cfg["head_dim"]
        assert close(v["q-len"], length(q[pos])) and close(v["q-normed-len"], length(qn[pos]))
        assert close(v["q-rms"], rms[pos])
        assert close(v["q-rms"], float(np.sqrt(np.mean(q[pos] ** 2) + cfg["layer_norm_epsilon"])))  # the rms it is
        lens = [length(r) for r in q]
        lens_n = [length(r) for r in qn]
        assert int(v["n-tokens"]) == len(ids)
        assert close(v["spread-before"], max(lens) / min(lens)) and close(v["spread-after"], max(lens_n) / min(lens_n))
    elif sid == "qk-bound":
        h = head(page)
        sc, qn, kn = arrays(server, ids, {"name": b + "attn.scaled_scores", "head": h, "position": pos},
                            {"name": b + "attn.q_norm.out", "head": h, "position": pos},
                            {"name": b + "attn.k_norm.out", "head": h})
        wq, wk = arrays(server, ids, {"name": b + "attn.q_norm.w"}, {"name": b + "attn.k_norm.w"}, weights=True)
        largest = float(np.abs(sc[: pos + 1]).max())
        bound = caps["attn_scale"] * length(qn) * max(length(r) for r in kn[: pos + 1])
        cap = caps["attn_scale"] * np.abs(wq).max() * np.abs(wk).max() * cfg["head_dim"]
        assert close(v["largest-score"], largest) and close(v["score-bound"], bound) and close(v["score-cap"], cap)
        assert largest <= bound * (1 + 1e-5) and bound <= cap * (1 + 1e-5)
        # the bound's factors, each as the sentence quotes it: a normed query is at most max|g_q| √d_head long, a
        # normed key max|g_k| √d_head, and the attention scale is the model's (Gemma: query_pre_attn_scalar^-1/2)
        dh, a = cfg["head_dim"], caps["attn_scale"]
        gq, gk = float(np.abs(wq).max()), float(np.abs(wk).max())
        assert close(v["root-d-head"], np.sqrt(dh)) and close(v["attn-scale"], a)
        assert close(v["q-scale-max"], gq) and close(v["k-scale-max"], gk)
        assert close(v["q-len-max"], gq * np.sqrt(dh)) and close(v["k-len-max"], gk * np.sqrt(dh))
        assert close(v["score-cap"], a * gq * np.sqrt(dh) * gk * np.sqrt(dh))
        qn_all, kn_all = arrays(server, ids, {"name": b + "attn.q_norm.out"}, {"name": b + "attn.k_norm.out"})
        assert np.linalg.norm(qn_all, axis=-1).max() <= gq * np.sqrt(dh) * (1 + 1e-5)
        assert np.linalg.norm(kn_all, axis=-1).max() <= gk * np.sqrt(dh) * (1 + 1e-5)
        if abs(1 / a ** 2 - dh) > 1e-6 * dh:
            assert close(v["query-pre-attn-scalar"], 1 / a ** 2)
        else:
            assert "query-pre-attn-scalar" not in v
        # these blocks are pre-norm: the stream's size is in no bound, and the text does not say it is
        body = page.inner_text("#lesson-body")
        assert "stream grows" not in body and "grow with the stream" not in body, body
        table = page.locator("[data-testid=qk-bound]")  # the view's table shows the same three
        assert close(v["largest-score"], float(table.get_attribute("data-largest")))
        assert close(v["score-bound"], float(table.get_attribute("data-bound-normed")))
        assert close(v["score-cap"], float(table.get_attribute("data-bound-weights")))
        assert close(v["score-bound-raw"], float(table.get_attribute("data-bound-raw")))
    elif sid == "sandwich":
        if not caps["sandwich_norm"]:
            assert v["model-type"] == cfg["model_type"] and "attn-raw-len" not in v
            return
        raw, normed, pre = arrays(server, ids, *({"name": b + s, "position": pos} for s in (
            "attn.out", "attn_out", "resid_pre")))
        assert int(v["layer"]) == layer
        assert close(v["attn-raw-len"], length(raw)) and close(v["attn-normed-len"], length(normed))
        assert close(v["resid-pre-len"], length(pre))
    elif sid == "sandwich-mlp":
        raw, normed = arrays(server, ids, *({"name": b + s, "position": pos} for s in ("mlp.out", "mlp_out")))
        assert int(v["layer"]) == layer
        assert close(v["mlp-raw-len"], length(raw)) and close(v["mlp-normed-len"], length(normed))
    elif sid == "window":
        if not n_local:
            assert int(v["n-layer"]) == cfg["n_layer"] and "window" not in v
            return
        T = len(ids)
        assert int(v["n-local"]) == n_local and int(v["window"]) == w and int(v["n-tokens"]) == T
        assert T > w and int(v["hidden-pairs"]) == (T - w) * (T - w + 1) // 2
        (masked,) = arrays(server, ids, {"name": f"blocks.{types.index('sliding_attention')}.attn.masked_scores",
                                         "head": 0})
        assert int(v["hidden-pairs"]) == sum(int(np.isneginf(masked[t, s])) for t in range(T) for s in range(t + 1))
    elif sid == "window-pattern":
        h = head(page)
        lo = types.index("sliding_attention")
        gl = next((i for i in range(lo + 1, len(types)) if types[i] == "full_attention"), types.index("full_attention"))
        assert int(v["local-layer"]) == lo and int(v["global-layer"]) == gl and int(v["head"]) == h
        local_row, global_row = arrays(server, ids, {"name": f"blocks.{lo}.attn.pattern", "head": h, "position": pos},
                                       {"name": f"blocks.{gl}.attn.pattern", "head": h, "position": pos})
        assert float(v["outside-weight"]) == 0 and local_row[: pos - w + 1].sum() == 0
        assert close(v["global-outside-weight"], float(global_row[: pos - w + 1].sum()))
        # the view's line under the pattern shows the same weight for the layer on screen
        here = float(page.get_attribute("[data-testid=window-outside]", "data-value"))
        assert close(v["global-outside-weight" if layer == gl else "outside-weight"], here)
    elif sid in ("qk-why", "summary"):
        assert not v, v  # what papers found, and a summary: no number of this text
    elif sid == "memory":
        nbytes = {"float32": 4, "bfloat16": 2, "float16": 2}[cfg["dtype"]]
        per = 2 * cfg["n_kv_heads"] * cfg["head_dim"] * nbytes
        L, n = cfg["n_layer"], cfg["block_size"]
        if not n_local:
            assert int(v["per-token"]) == L * per and int(v["ctx"]) == n and int(v["ctx-bytes"]) == L * per * n
            return
        row = page.locator("[data-testid=window-memory] tr[data-row=context]")
        windowed = ((L - n_local) * n + n_local * min(n, w)) * per
        assert int(v["ctx"]) == n and int(v["ctx-all"]) == L * n * per == int(row.get_attribute("data-all"))
        assert int(v["ctx-windowed"]) == windowed == int(row.get_attribute("data-windowed"))
        assert close(v["ctx-ratio"], L * n * per / windowed)


@pytest.mark.parametrize("sid", STEPS)
def test_each_step_shows_no_error_leaves_its_target_visible_and_tells_the_apis_values(sid, page, server):
    ids = set_text(page, TEXT, server)
    model = info(server)
    if sid not in steps_of(model):
        pytest.skip(f"{model['name']} has no local layers: no step {sid}")
    open_lesson(page)
    go(page, sid, steps_of(model))
    page.screenshot(path=str(ARTIFACTS / f"lesson-stable-{model['config']['family']}-{STEPS.index(sid):02d}-{sid}.png"))
    assert page.locator("[data-testid=error]").count() == 0, page.inner_text("[data-testid=error]")
    target = page.get_attribute("[data-testid=tour]", "data-target")
    if target:
        card, tgt, _ = rects(page, target)
        assert tgt is not None, f"step {sid}: target [data-tour={target}] not on the page"
        assert not intersects(card, tgt), (sid, card, tgt)
    check_values(sid, page, server, ids, model)
    if sid in ("qk-norm", "qk-bound") and model["config"]["capabilities"]["qk_norm"]:
        # the numbers follow the focus: a click on another position's bar re-reads them
        page.locator("[data-testid=qk-lengths] .bar").nth(len(ids) - 3).dispatch_event("click")
        page.wait_for_function("p => document.querySelector('[data-testid=token-chip][aria-selected=true]')"
                               "?.dataset.pos === String(p)", arg=len(ids) - 3)
        wait_body(page)
        page.wait_for_timeout(500)
        check_values(sid, page, server, ids, model)


def test_the_window_task_is_done_on_a_global_layer(page, server):
    ids = set_text(page, TEXT, server)
    model = info(server)
    types = model["config"]["capabilities"]["layer_types"]
    open_lesson(page)
    if "sliding_attention" not in types:
        assert "window-pattern" not in steps_of(model)
        go(page, "window", steps_of(model))
        assert page.locator("[data-testid=lesson-task]").count() == 0  # nothing to do on a model with no window
        return
    go(page, "window-pattern", steps_of(model))
    task = page.locator("[data-testid=lesson-task]")
    assert "done" not in (task.get_attribute("class") or "")
    flip = page.locator("[data-testid=window-flip]")
    gl = int(flip.get_attribute("data-layer"))
    assert types[gl] == "full_attention" and int(nums(page)["flip-layer"]) == gl  # the task names the button's layer
    flip.click()
    page.wait_for_function("() => document.querySelector('[data-testid=lesson-task]').classList.contains('done')")
    page.wait_for_function("() => document.querySelector('[data-testid=window-pattern-title]')?.dataset.local"
                           f" === 'false' && document.querySelector('[data-testid=layer-value]').textContent.trim()"
                           f" === '{gl}'")
    wait_body(page)
    page.wait_for_timeout(500)
    # the card still quotes both layers, and the global one's weight is the one the view now shows under its pattern
    check_values("window-pattern", page, server, ids, model)
    page.screenshot(path=str(ARTIFACTS / "lesson-stable-window-task-done.png"))
    # a token fewer than `window` positions from the start: the window hides nothing from it, and the card says so
    page.locator("[data-testid=token-chip]").nth(1).dispatch_event("click")
    page.wait_for_function("() => document.querySelector('[data-testid=token-chip][aria-selected=true]')"
                           "?.dataset.pos === '1'")
    wait_body(page)
    v = nums(page)
    w = model["config"]["capabilities"]["local_window"]
    assert int(v["pos"]) == 1 < w == int(v["window"]) and int(v["focus-token"]) == ids[1] and "outside-weight" not in v
