"""The app on mixtures of experts: the built-in explainer-moe (Mixtral, 8 experts, top-2, renormalised) and random
Qwen3-MoE (6 experts, top-3, block 2 dense) and OLMoE (16 experts, top-4, not renormalised) checkpoints built with
transformers. Every view opens without an error; the experts view draws the trace's own routing (the marked cells
are expert_indices, the weights expert_weights, the load counts those of expert_indices, the path the real
expert_out and mlp_out vectors), its parameters are /api/models' and its FLOPs the trace's cost; the MLP view of a
block with experts shows the chosen experts and of a dense block the gated MLP; Why this token lists the experts;
the Experiments area takes an expert out as /api/analysis/ablate does; the view is absent for a dense model; the
offline snapshot shows it from file://. Screenshots at 1280x900 and 390x844, English and 中文, under
test-artifacts/experts/."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import httpx
import numpy as np
import pytest

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app

pytestmark = pytest.mark.browser

TEXT = "The quick brown fox jumps over the lazy dog"
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True, "device_scale_factor": 2}
SHOTS = ARTIFACTS / "experts"
MODELS = ["explainer-moe", "tiny-qwen3_moe", "tiny-olmoe"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    from tests.conftest import make_hf_llama_family
    from transformer_explainer.engine import load_model

    out = {"explainer-moe": load_model("explainer-moe", allow_download=False)}
    for fam in ("qwen3_moe", "olmoe"):
        folder = make_hf_llama_family(tmp_path_factory.mktemp(f"tiny-{fam}"), fam)
        out[f"tiny-{fam}"] = load_model(str(folder), allow_download=False)
    return out


@pytest.fixture(scope="module")
def server(models) -> Iterator[LiveServer]:
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    with LiveServer(create_app(models)) as srv:
        yield srv


def post(srv: LiveServer, path: str, **body) -> dict:
    r = httpx.post(srv.url + "api/" + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def tensors(srv: LiveServer, model: str, ids: list[int], *specs: dict) -> list[np.ndarray]:
    from transformer_explainer.encoding import decode_array

    out = post(srv, "tensors", model=model, ids=ids, tensors=[{**s, "dtype": "float32"} for s in specs])["tensors"]
    return [np.asarray(decode_array(t["data"], t["shape"], t["dtype"]), dtype=np.float32) for t in out]


def settle(page) -> None:
    page.wait_for_selector(".view:not(.busy)")
    page.wait_for_function("() => !document.querySelector('.view .placeholder')", timeout=30_000)


def no_error(page, where: str) -> None:
    for testid in ("error", "attr-error", "xexp-error"):
        banner = page.locator(f"[data-testid={testid}]")
        assert banner.count() == 0, f"{where}: {banner.inner_text()}"


@contextmanager
def on_model(browser, srv: LiveServer, model: str, **kw) -> Iterator:
    """The app on `model` with TEXT typed in."""
    with open_app(browser, srv.url, **kw) as page:
        page.select_option("[data-testid=model]", model)
        page.fill("[data-testid=text]", TEXT)
        T = len(post(srv, "trace", model=model, text=TEXT)["token_ids"])
        page.wait_for_function("([n, m]) => document.querySelectorAll('[data-testid=token-chip]').length === n"
                               " && document.querySelector('[data-testid=model]').value === m", arg=[T, model],
                               timeout=60_000)
        settle(page)
        yield page


def set_layer(page, layer: int) -> None:
    page.click(f"[data-testid=experts-layer-{layer}]")
    settle(page)


def nums(page, sel: str, attr: str) -> list[float]:
    return [float(x) for x in page.eval_on_selector_all(sel, f"els => els.map(e => e.getAttribute('{attr}'))")]


def shown(page, strip: str) -> np.ndarray:
    sel = f"[data-strip='{strip}'][data-values]"
    page.wait_for_selector(sel, timeout=30_000)
    return np.array([float(x) for x in page.get_attribute(sel, "data-values").split(",")], dtype=np.float32)


# -- every view ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS[:2])
def test_every_view_works_on_a_mixture(browser, server, models, model):
    """Every stage the architecture offers opens without an error on every block; the MLP view of a block with
    experts names the experts the focus token went to (expert_indices) and links to the experts view, and of a
    dense block (Qwen3-MoE's block 2) is the gated MLP; the experts view of a dense block says so."""
    cfg = models[model].config
    with on_model(browser, server, model) as page:
        navs = page.eval_on_selector_all("nav [data-testid^=nav-]", "els => els.map(e => e.dataset.testid)")
        assert "nav-experts" in navs and navs.index("nav-experts") == navs.index("nav-mlp") + 1, navs
        for testid in navs:
            page.click(f"[data-testid={testid}]")
            page.wait_for_selector("section.view")
            settle(page)
            page.wait_for_timeout(400)
            no_error(page, f"{model} {testid}")
            assert page.locator("section.view").first.inner_text().strip(), testid
        ids = post(server, "trace", model=model, text=TEXT)["token_ids"]
        T = len(ids)
        for layer in range(cfg.n_layer):
            page.click(f"nav [aria-label='Layer {layer}'][role=radio]")
            page.click("[data-testid=nav-mlp]")
            settle(page)
            no_error(page, f"{model} mlp {layer}")
            if cfg.has_experts(layer):
                chosen, = tensors(server, model, ids, {"name": f"blocks.{layer}.mlp.expert_indices", "position": T - 1})
                page.wait_for_selector("[data-testid=mlp-expert]")
                assert nums(page, "[data-testid=mlp-expert]", "data-expert") == chosen.tolist()
                assert page.locator("[data-testid=open-experts]").count() == 1
            else:
                page.wait_for_selector("[data-strip=mlp-gate][data-values]")
                gate, = tensors(server, model, ids, {"name": f"blocks.{layer}.mlp.gate", "position": T - 1})
                np.testing.assert_array_equal(shown(page, "mlp-gate"), gate)
                page.click("[data-testid=nav-experts]")
                settle(page)
                assert page.locator("[data-testid=experts-dense]").count() == 1
                assert page.locator("[data-testid=experts-routing]").count() == 0
        if cfg.dense_layers:
            page.click(f"nav [aria-label='Layer {cfg.dense_layers[0]}'][role=radio]")
            page.click("[data-testid=nav-experts]")
            page.click("[data-testid=open-mlp]")  # the dense block's note opens the MLP view
            settle(page)
            assert page.get_attribute("section.view", "data-view") == "mlp"


def test_the_experts_view_is_absent_for_a_dense_model(page):
    assert page.locator("[data-testid=nav-experts]").count() == 0
    assert page.locator("[data-testid=exp-tab-experts]").count() == 0


def test_the_model_list_offers_explainer_moe(browser, tiny_model):
    """A server that discovers the built-ins (as `serve` does) offers explainer-moe in the app's model list, not
    loaded until chosen; choosing it loads it, and the experts view opens on it."""
    from transformer_explainer.server import create_app
    from transformer_explainer.server.registry import ModelRegistry

    reg = ModelRegistry("tiny")
    reg.add_loaded("tiny", tiny_model)
    reg.discover()
    with LiveServer(create_app(reg)) as srv:
        listed = {m["name"]: m for m in post_get(srv, "models")["models"]}
        assert listed["explainer-moe"]["source"] == "builtin"
        with open_app(browser, srv.url) as page:
            options = page.eval_on_selector_all("[data-testid=model] option", "os => os.map(o => o.value)")
            assert "explainer-moe" in options
            assert page.locator("[data-testid=nav-experts]").count() == 0  # the tiny GPT-2 first
            page.select_option("[data-testid=model]", "explainer-moe")
            page.wait_for_selector("[data-testid=nav-experts]", timeout=120_000)
            page.click("[data-testid=nav-experts]")
            page.wait_for_selector("[data-testid=route-row] td[data-chosen]", timeout=60_000)
            no_error(page, "explainer-moe from the list")


# -- the experts view draws the trace's numbers ---------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_the_routing_load_path_and_params_are_the_traces(browser, server, models, model):
    """At every block with experts and the last token, then at an earlier token picked by clicking its row: the
    marked cells of each row are that token's expert_indices with their weights (2 decimals), every cell's
    probability is router_probs; the loads count expert_indices (summing to T * K) and sum expert_weights; the
    path's bars are the focus token's router_probs, its chosen experts and weights expert_indices and
    expert_weights in order, its strips expert_out and mlp_out; the parameters are /api/models', the FLOPs
    the trace's cost (pass_gflop)."""
    from transformer_explainer.analysis.cost import pass_gflop

    m = models[model]
    cfg = m.config
    E, K = cfg.n_experts, cfg.top_k
    tr = post(server, "trace", model=model, text=TEXT)
    ids, T = tr["token_ids"], len(tr["token_ids"])
    info = next(x for x in post_get(server, "models")["models"] if x["name"] == model)
    with on_model(browser, server, model) as page:
        page.click("[data-testid=nav-experts]")
        settle(page)
        for layer in cfg.moe_layers:
            set_layer(page, layer)
            b = f"blocks.{layer}.mlp"
            probs, idx, w = tensors(server, model, ids, {"name": f"{b}.router_probs"}, {"name": f"{b}.expert_indices"},
                                    {"name": f"{b}.expert_weights"})
            page.wait_for_selector("[data-testid=route-row] td[data-chosen]")
            rows = page.eval_on_selector_all("[data-testid=route-row]", """rows => rows.map(r => ({
                pos: +r.dataset.pos,
                probs: [...r.querySelectorAll('td')].map(c => +c.dataset.prob),
                chosen: [...r.querySelectorAll('td[data-chosen]')].map(c => [+c.dataset.expert, +c.dataset.weight,
                                                                            c.textContent.trim()])}))""")
            assert [r["pos"] for r in rows] == list(range(T))
            for r in rows:
                p = r["pos"]
                np.testing.assert_array_equal(np.float32(r["probs"]), probs[p])
                want = {int(e): float(x) for e, x in zip(idx[p], w[p], strict=True)}
                assert {int(e): x for e, x, _ in r["chosen"]} == pytest.approx(want, abs=0)
                assert all(text == f"{want[int(e)]:.2f}" for e, _, text in r["chosen"])
            counts = np.bincount(idx.astype(int).ravel(), minlength=E)
            sums = np.array([w[idx == e].sum() for e in range(E)])
            assert nums(page, "[data-testid=load-row]", "data-count") == counts.tolist()
            assert sum(nums(page, "[data-testid=load-row]", "data-count")) == T * K
            assert int(page.get_attribute("[data-testid=load-total]", "data-total")) == T * K
            np.testing.assert_allclose(nums(page, "[data-testid=load-row]", "data-weight"), sums, rtol=1e-5)
            for p in (T - 1, 1):
                if p != T - 1:
                    page.click(f"[data-testid=route-row][data-pos='{p}'] td >> nth=0")  # a row's cell sets the focus
                    page.wait_for_function("p => document.querySelector('[data-testid=route-row].focus')"
                                           "?.dataset.pos === String(p)", arg=p)
                    settle(page)
                eo, out = tensors(server, model, ids, {"name": f"{b}.expert_out", "position": p},
                                  {"name": f"blocks.{layer}.mlp_out", "position": p})
                page.wait_for_function("() => document.querySelectorAll('[data-strip^=path-expert-out-][data-values]')"
                                       ".length > 0")
                np.testing.assert_array_equal(np.float32(nums(page, "[data-testid=path-prob]", "data-value")), probs[p])
                assert nums(page, "[data-testid=path-chosen]", "data-expert") == idx[p].tolist()
                np.testing.assert_array_equal(np.float32(nums(page, "[data-testid=path-chosen]", "data-weight")), w[p])
                for k in range(K):
                    np.testing.assert_array_equal(shown(page, f"path-expert-out-{k}"), eo[k])
                np.testing.assert_array_equal(shown(page, "path-sum-strip"), out)
                np.testing.assert_allclose(out, (w[p][:, None] * eo).sum(0), rtol=1e-4, atol=1e-4)  # what it says
                renorm = page.get_attribute("[data-testid=path-renorm]", "data-renorm")
                assert renorm == ("1" if cfg.norm_topk_prob else "0")
                if cfg.norm_topk_prob:
                    np.testing.assert_allclose(w[p], probs[p][idx[p].astype(int)] / probs[p][idx[p].astype(int)].sum(),
                                               rtol=1e-5)
                else:
                    np.testing.assert_allclose(w[p], probs[p][idx[p].astype(int)], rtol=1e-5)
            page.click(f"[data-testid=route-row][data-pos='{T - 1}'] td >> nth=0")
        for testid, key in (("params-total", "n_params"), ("params-active", "n_active_params"),
                            ("params-experts", "n_expert_params")):
            assert int(page.get_attribute(f"[data-testid={testid}]", "data-value")) == info[key] > 0
        assert info["n_params"] == m.net.num_params() and info["n_active_params"] == m.net.num_active_params()
        assert float(page.get_attribute("[data-testid=flops]", "data-gflop")) == pytest.approx(pass_gflop(cfg, T),
                                                                                              rel=1e-12)
        assert float(page.get_attribute("[data-testid=flops-all]", "data-gflop")) == pytest.approx(
            pass_gflop(cfg, T, cfg.n_experts), rel=1e-12)


def post_get(srv: LiveServer, path: str) -> dict:
    r = httpx.get(srv.url + "api/" + path, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


# -- the screens ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("screen", "lang"), [("desktop", "en"), ("desktop", "zh"), ("phone", "en"), ("phone", "zh")])
def test_the_experts_view_on_a_phone_and_a_desktop(browser, server, screen, lang):
    """The experts view in English and 中文 at 1280x900 and 390x844: the page does not scroll sideways, the routing
    map scrolls inside its own box with the tokens column kept in view, every part named by its data-tour is there."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    kw = {**(PHONE if screen == "phone" else {}), "locale": "zh-CN" if lang == "zh" else "en-US"}
    width = 390 if screen == "phone" else 1280
    with on_model(browser, server, "explainer-moe", query="?lang=zh" if lang == "zh" else "", **kw) as page:
        if lang == "zh":
            page.wait_for_function("() => document.documentElement.dataset.cjkFont === 'loaded'", timeout=30_000)
        page.click("[data-testid=nav-experts]")
        settle(page)
        page.wait_for_selector("[data-testid=route-row] td[data-chosen]")
        for tour in ("experts-routing", "experts-load", "experts-path", "experts-params", "experts-layer"):
            assert page.locator(f"[data-tour={tour}]").count() == 1, tour
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        box = page.locator("[data-testid=experts-routing] .scroll").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5
        if lang == "zh":
            assert "路由" in page.inner_text("[data-testid=experts-routing]")
        page.screenshot(path=str(SHOTS / f"{screen}-{lang}.png"), full_page=True)
        # the tokens column stays in view when the map scrolls sideways
        page.eval_on_selector("[data-testid=experts-routing] .scroll", "el => { el.scrollLeft = el.scrollWidth; }")
        tok = page.locator("[data-testid=route-row] th.tok").first.bounding_box()
        assert tok["x"] >= box["x"] - 0.5
        page.locator("[data-tour=experts-routing]").screenshot(path=str(SHOTS / f"{screen}-{lang}-routing.png"))


# -- Why this token, Experiments --------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_why_this_token_lists_the_experts(browser, server, lang):
    """Every component of the attribution is listed; the expert ones carry their layer and expert as the API's
    answer does (the experts chosen at the position), labelled "L3 · expert 5" (中文 "L3 · 5 号专家"); the layer x
    expert map is there."""
    model = "explainer-moe"
    a = post(server, "attribution/attribute", model=model, text=TEXT)
    experts = [x for x in a["components"] if x["kind"] == "expert"]
    assert experts
    with on_model(browser, server, model, query="?lang=zh" if lang == "zh" else "",
                  locale="zh-CN" if lang == "zh" else "en-US") as page:
        page.click("[data-testid=nav-attribution]")
        page.wait_for_selector("[data-testid=attr-result][data-stale='0']", timeout=60_000)
        page.select_option("[data-testid=attr-top]", "0")
        rows = page.eval_on_selector_all("[data-testid=attr-row][data-kind=expert]", """rs => rs.map(r => [
            +r.dataset.layer, +r.dataset.expert, +r.dataset.value, r.querySelector('.name').textContent])""")
        api = sorted((x["layer"], x["expert"], x["value"]) for x in experts)
        assert api == sorted((lay, e, v) for lay, e, v, _ in rows)
        for lay, e, _, name in rows:
            assert name == (f"L{lay} · {e} 号专家" if lang == "zh" else f"L{lay} · expert {e}")
        assert page.locator("[data-testid=attr-experts]").count() == 1
        total = float(page.get_attribute("[data-testid=attr-total]", "data-value"))
        rest = float(page.get_attribute("[data-testid=attr-rest]", "data-value"))
        assert total + rest == pytest.approx(a["metric"], rel=1e-5)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"why-{lang}.png"), full_page=True)
        first = page.locator("[data-testid=attr-row][data-kind=expert]").first
        layer = int(first.get_attribute("data-layer"))
        first.click()  # opens the experts view at that block
        settle(page)
        assert page.get_attribute("section.view", "data-view") == "experts"
        assert page.get_attribute(f"[data-testid=experts-layer-{layer}]", "aria-checked") == "true"


def test_experiments_take_an_expert_out(browser, server):
    """The Experiments area's experts tab: each expert's button counts its choices in the block (expert_indices);
    taking one out shows the loss and next-token probabilities of /api/analysis/ablate with that expert."""
    model = "explainer-moe"
    ids = post(server, "trace", model=model, text=TEXT)["token_ids"]
    layer = 2
    idx, = tensors(server, model, ids, {"name": f"blocks.{layer}.mlp.expert_indices"})
    expert = int(np.bincount(idx.astype(int).ravel()).argmax())  # the block's busiest expert: taking it out tells
    want = post(server, "analysis/ablate", model=model, ids=ids, experts=[[layer, expert]])
    with on_model(browser, server, model) as page:
        page.click("[data-testid=nav-experiments]")
        page.click("[data-testid=exp-tab-experts]")
        page.select_option("[data-testid=xexp-layer]", str(layer))
        page.wait_for_selector(f"[data-testid=xexp-expert-{expert}][data-count='{int((idx == expert).sum())}']")
        page.click(f"[data-testid=xexp-expert-{expert}]")
        page.wait_for_selector("[data-testid=xexp-table]", timeout=60_000)
        assert float(page.get_attribute("[data-testid=xexp-loss]", "data-after")) == want["loss_after"]
        assert float(page.get_attribute("[data-testid=xexp-loss]", "data-before")) == want["loss_before"]
        assert float(page.get_attribute("[data-testid=xexp-kl]", "data-value")) == want["kl"]
        got = page.eval_on_selector_all("[data-testid=xexp-row]", "rs => rs.map(r => [+r.dataset.id, +r.dataset.before,"
                                        " +r.dataset.after])")
        assert got == [[c["id"], c["before"], c["after"]] for c in want["changes"]]
        assert want["loss_after"] != want["loss_before"]
        no_error(page, "experiments experts")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "experiments-en.png"), full_page=True)


# -- the offline snapshot ---------------------------------------------------------------------------------------


def test_the_snapshot_shows_the_experts_view(browser, models, tmp_path):
    """explainer-moe's snapshot, opened from file:// with every other request blocked: the experts view's marked
    cells are the trace's expert_indices at every block, the path's weights its expert_weights; Why this token
    lists the experts chosen at the last position, as model.attribute does."""
    from transformer_explainer.notebook import save_snapshot

    m = models["explainer-moe"]
    file = save_snapshot(m, TEXT, tmp_path / "moe.html")
    trace = m.trace(TEXT)
    T = trace.n_tokens
    own = file.as_uri()
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    blocked: list[str] = []
    errors: list[str] = []

    def guard(route) -> None:
        if route.request.url.split("?")[0] == own or urlparse(route.request.url).scheme in ("data", "blob"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    ctx.route("**/*", guard)
    page = ctx.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(own)
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    page.click("[data-testid=nav-experts]")
    for layer in m.config.moe_layers:
        set_layer(page, layer)
        page.wait_for_selector("[data-testid=route-row] td[data-chosen]")
        no_error(page, f"snapshot experts {layer}")
        idx = trace[f"blocks.{layer}.mlp.expert_indices"].tolist()
        chosen = page.eval_on_selector_all("[data-testid=route-row]", "rows => rows.map(r => [...r.querySelectorAll("
                                           "'td[data-chosen]')].map(c => +c.dataset.expert))")
        assert [sorted(c) for c in chosen] == [sorted(r) for r in idx]
        w = trace[f"blocks.{layer}.mlp.expert_weights"][T - 1].float().numpy()
        np.testing.assert_allclose(nums(page, "[data-testid=path-chosen]", "data-weight"), w, rtol=1e-3)  # float16
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "snapshot-en.png"), full_page=True)
    page.click("[data-testid=nav-attribution]")
    page.wait_for_selector("[data-testid=attr-result][data-stale='0']", timeout=60_000)
    page.select_option("[data-testid=attr-top]", "0")
    rows = page.eval_on_selector_all("[data-testid=attr-row][data-kind=expert]",
                                     "rs => rs.map(r => [+r.dataset.layer, +r.dataset.expert])")
    a = m.attribute(trace)
    assert sorted(map(tuple, rows)) == sorted((c.layer, c.expert) for c in a.components if c.kind == "expert")
    no_error(page, "snapshot attribution")
    ctx.close()
    assert not blocked, blocked
    assert not errors, errors


def test_the_notebook_widget_shows_the_experts_view(browser, models):
    """`show` on a mixture of experts: the anywidget front end, in a sandboxed iframe inside a notebook-like host,
    opens the experts view with the trace's routing at the last block (expert_indices) and no error."""
    from transformer_explainer.notebook import show, widget_class
    from transformer_explainer.notebook.widget import widget_esm

    if widget_class() is None:
        pytest.skip("anywidget is not installed")
    m = models["explainer-moe"]
    trace = m.trace(TEXT)
    w = show(trace, m)
    host = "http://notebook.test/"
    page_html = ('<!doctype html><meta charset="utf-8"><div id="out"></div><script type="module">'
                 'import w from "./widget.js";'
                 'const html = await (await fetch("./snapshot.html")).text();'
                 'const model = { get: (k) => ({ html, height: 900 })[k], on: () => {}, off: () => {} };'
                 'w.render({ model, el: document.getElementById("out") });'
                 '</script>')
    files = {host: ("text/html", page_html), host + "widget.js": ("text/javascript", widget_esm().read_text()),
             host + "snapshot.html": ("text/html", w.html)}
    ctx = browser.new_context(viewport={"width": 1300, "height": 1000})
    outside: list[str] = []
    errors: list[str] = []

    def serve(route) -> None:
        url = route.request.url
        if url in files:
            ctype, body = files[url]
            route.fulfill(status=200, content_type=ctype, body=body)
        elif urlparse(url).scheme in ("data", "blob"):
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    ctx.route("**/*", serve)
    page = ctx.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(host)
    frame = page.frame_locator("iframe[sandbox='allow-scripts']")
    frame.locator("body[data-ready='1']").wait_for(timeout=60_000)
    frame.locator("[data-testid=nav-experts]").click()
    last = m.config.n_layer - 1
    frame.locator(f"[data-testid=experts-layer-{last}]").click()
    frame.locator("[data-testid=route-row] td[data-chosen]").first.wait_for(timeout=30_000)
    chosen = frame.locator("[data-testid=route-row]").evaluate_all(
        "rows => rows.map(r => [...r.querySelectorAll('td[data-chosen]')].map(c => +c.dataset.expert))")
    assert [sorted(c) for c in chosen] == [sorted(r) for r in trace[f"blocks.{last}.mlp.expert_indices"].tolist()]
    assert frame.locator("[data-testid=error]").count() == 0
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "widget-en.png"))
    ctx.close()
    assert not outside, outside
    assert not errors, errors
