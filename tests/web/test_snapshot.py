"""The self-contained HTML snapshot, opened from file:// with every network request blocked and
recorded: it needs none, and the values it shows are the trace's."""

from __future__ import annotations

import base64
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest
from playwright.sync_api import expect

from transformer_explainer.analysis.answers import ablate_json, lens_json
from transformer_explainer.notebook import save_snapshot

from .conftest import ARTIFACTS
from .test_app import hover_cell, number, visible

pytestmark = pytest.mark.browser

TEXT = "The quick brown fox jumps over the lazy dog"
WEB = Path(__file__).resolve().parents[2] / "web"


# A snapshot page shows values with 3 significant digits (what float16 holds): half a unit in the 3rd digit is at most
# 5e-3 of the value, and the float16 rounding under it adds at most 5e-4.
SHOWN_REL = 6e-3

def inlined(font: Path) -> str:
    """The base64 of a font file as a snapshot inlines it."""
    return base64.b64encode(font.read_bytes()).decode()


# the UI's CJK subset (only in snapshots that can show Chinese), and the few glyphs every page's stylesheet holds
UI_FONT = WEB / "public" / "fonts" / "noto-sans-sc-subset.woff2"
PAGE_FONT = WEB / "src" / "fonts" / "cjk-page.woff2"


@pytest.fixture(scope="module")
def snapshot_file(tiny_model, tmp_path_factory) -> Path:
    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        pytest.skip("the web UI is not built (cd web && npm ci && npm run build)")
    return save_snapshot(tiny_model, TEXT, tmp_path_factory.mktemp("snap") / "page.html")


@pytest.fixture
def offline_page(browser, snapshot_file):
    """The snapshot in a page where every request except the file itself is blocked and recorded."""
    ARTIFACTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    requests: list[str] = []
    blocked: list[str] = []
    errors: list[str] = []
    own = snapshot_file.as_uri()

    def guard(route) -> None:
        if route.request.url == own:
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", guard)
    pg = context.new_page()
    pg.on("request", lambda r: requests.append(r.url))
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(own)
    pg.wait_for_selector("body[data-ready='1']", timeout=30_000)
    yield pg
    context.close()
    assert not blocked, f"the snapshot tried to load: {blocked}"
    others = [u for u in requests if u != own and urlparse(u).scheme not in ("data", "blob")]
    assert not others, f"the snapshot made requests: {others}"
    assert not errors, f"errors in the page: {errors}"


def test_snapshot_opens_offline_with_the_traces_values(offline_page, tiny_model):
    page = offline_page
    trace = tiny_model.trace(TEXT)
    chips = page.locator("[data-testid=token-chip]")
    assert chips.count() == trace.n_tokens
    for i, (tok, tid) in enumerate(zip(trace.tokens, trace.token_ids, strict=True)):
        assert chips.nth(i).locator(".txt").inner_text() == visible(tok)
        assert chips.nth(i).locator(".id").inner_text() == str(tid)
    page.screenshot(path=str(ARTIFACTS / "snapshot-01-tokens.png"), full_page=True)

    # an attention weight, read off the picture: layer 1, head 2, query 3 -> key 1
    T = trace.n_tokens
    page.click("[data-testid=nav-attention]")
    page.click("[aria-label='Layer 1'][role=radio]")
    page.click("[data-testid=head-picker] button:text-is('2')")
    page.wait_for_selector("[data-testid=attn-pattern] .pic")
    text = hover_cell(page, "attn-pattern", 3, 1, T, T)
    want = float(trace["blocks.1.attn.pattern"][2, 3, 1])
    assert number(text.split(":")[-1]) == pytest.approx(want, rel=SHOWN_REL, abs=6e-4)
    page.screenshot(path=str(ARTIFACTS / "snapshot-02-attention.png"), full_page=True)

    # the next-token probabilities
    page.click("[data-testid=nav-output]")
    page.wait_for_selector("[data-testid=cand-prob-0]")
    import torch

    top = torch.topk(trace.next_token_logits(), 10)  # the app's default keeps the 10 likeliest (top-k)
    probs = torch.softmax(top.values, -1)
    for i, tid in enumerate(top.indices[:5].tolist()):
        tok = visible(tiny_model.tokenizer.token_text(tid))
        assert page.locator(f"[data-testid=cand-token-{i}]").inner_text() == tok
        assert number(page.locator(f"[data-testid=cand-prob-{i}]").inner_text()) == pytest.approx(float(probs[i]),
                                                                                                   rel=2e-3)
    # every view renders from the file alone
    for v in ["embedding", "blocks", "layernorm-ln1", "qkv", "heads", "residual", "mlp", "layernorm-final"]:
        page.click(f"[data-testid=nav-{v}]")
        page.wait_for_selector("section.view")
        page.wait_for_function("() => !document.querySelector('.view .placeholder')", timeout=30_000)
    page.click("[aria-label='Layer 0'][role=radio]")  # block 0's output is stored as block 1's input
    page.click("[data-testid=nav-residual]")
    page.wait_for_function("() => !document.querySelector('.view .placeholder')", timeout=30_000)
    assert page.locator("[data-testid=error]").count() == 0
    page.screenshot(path=str(ARTIFACTS / "snapshot-03-residual.png"), full_page=True)


def test_snapshot_experiments(offline_page, tiny_model):
    page = offline_page
    trace = tiny_model.trace(TEXT)
    page.click("[data-testid=nav-experiments]")
    page.wait_for_selector("[data-testid=lens-table]")
    lens = lens_json(tiny_model, trace, [trace.n_tokens - 1], 5)
    rows = page.locator("[data-testid=lens-row]")
    assert rows.count() == tiny_model.config.n_layer + 1
    for i, layer in enumerate(lens["layers"]):
        col = layer["positions"][0]
        assert rows.nth(i).locator("[data-testid=lens-rank]").inner_text() == str(col["target_rank"])
        assert number(rows.nth(i).locator("[data-testid=lens-prob]").inner_text()) == pytest.approx(
            col["target_prob"], rel=2e-3)
    page.screenshot(path=str(ARTIFACTS / "snapshot-04-lens.png"), full_page=True)

    page.click("[data-testid=exp-tab-heads]")
    page.wait_for_selector("[data-testid=head-cell-1-2]")
    page.click("[data-testid=head-cell-1-2]")
    page.wait_for_selector("[data-testid=ablation-table]")
    ref = ablate_json(tiny_model, trace.token_ids, [(1, 2)], "zero", 10)
    after = [number(x) for x in page.locator("[data-testid=abl-after]").all_inner_texts()]
    assert after == pytest.approx([c["after"] for c in ref["changes"]], rel=2e-3)
    page.screenshot(path=str(ARTIFACTS / "snapshot-05-heads.png"), full_page=True)

    page.click("[data-testid=exp-tab-embed]")
    page.wait_for_selector("[data-testid=neighbours] li")
    page.wait_for_selector("[data-testid=pca] circle")
    page.screenshot(path=str(ARTIFACTS / "snapshot-06-embeddings.png"), full_page=True)


def test_notebook_widget_front_end_renders_the_snapshot_offline(browser, snapshot_file, tiny_model):
    """The anywidget module, driven as anywidget drives it (a model with get/on/off), shows the page in
    a sandboxed iframe; the only requests are for the host page and the module, served here."""
    from transformer_explainer.notebook.widget import widget_esm

    host = "http://notebook.test/"
    page_html = ('<!doctype html><meta charset="utf-8"><div id="out"></div><script type="module">'
                 'import w from "./widget.js";'
                 'const html = await (await fetch("./snapshot.html")).text();'
                 'const handlers = {};'
                 'const model = { get: (k) => ({ html, height: 700 })[k], on: (e, f) => { handlers[e] = f; },'
                 ' off: (e) => { delete handlers[e]; } };'
                 'window.cleanup = w.render({ model, el: document.getElementById("out") });'
                 '</script>')
    files = {host: ("text/html", page_html), host + "widget.js": ("text/javascript", widget_esm().read_text()),
             host + "snapshot.html": ("text/html", snapshot_file.read_text())}
    context = browser.new_context(viewport={"width": 1300, "height": 800})
    outside: list[str] = []

    def serve(route) -> None:
        url = route.request.url
        if url in files:
            ctype, body = files[url]
            route.fulfill(status=200, content_type=ctype, body=body)
        else:
            outside.append(url)
            route.abort()

    context.route("**/*", serve)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(host)
    page.wait_for_selector("iframe[sandbox='allow-scripts']")
    frame = page.frame_locator("iframe")
    frame.locator("body[data-ready='1']").wait_for(timeout=30_000)
    chips = frame.locator("[data-testid=token-chip] .txt")
    assert chips.all_inner_texts() == [visible(t) for t in tiny_model.trace(TEXT).tokens]
    page.screenshot(path=str(ARTIFACTS / "snapshot-07-widget.png"))
    context.close()
    assert not outside, f"the widget loaded: {outside}"
    assert not errors, errors


# -- every family: every view, from file://, on a desktop and a phone, in English and 中文 -------------------

FAMILY_TEXT = "The quick brown fox jumps over the lazy dog"
NAV = ["overview", "tokens", "embedding", "blocks", "layernorm-ln1", "qkv", "rope", "gqa", "attention", "heads",
       "layernorm-ln2", "mlp", "residual", "layernorm-final", "output", "experiments", "attribution"]
LLAMA_ONLY = {"rope", "gqa"}
SCREENS = {"desktop": {"viewport": {"width": 1280, "height": 900}},
           "notebook": {"viewport": {"width": 1070, "height": 900}},  # a notebook's output cell, the widget's iframe
           "phone": {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 3, "is_mobile": True,
                     "has_touch": True}}
# explainer-small: GPT-2; explainer-llama: 8 query heads on 2 key/value heads; tiny-qwen2: a random Qwen2
# checkpoint saved by transformers (4 query heads on 2 key/value heads, q/k/v biases)
FAMILY_MODELS = ["explainer-small", "explainer-llama", "tiny-qwen2"]


@dataclass
class Snap:
    model: object
    trace: object
    file: Path


@pytest.fixture(scope="module")
def snaps(tmp_path_factory):
    """name -> its model, the trace of FAMILY_TEXT and its snapshot file (English and 中文), made on first use."""
    from tests.conftest import make_hf_llama_family
    from transformer_explainer import load_model

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        pytest.skip("the web UI is not built (cd web && npm ci && npm run build)")
    made: dict[str, Snap] = {}

    def get(name: str) -> Snap:
        if name not in made:
            spec = name
            if name == "tiny-qwen2":
                spec = str(make_hf_llama_family(tmp_path_factory.mktemp("tiny-qwen2"), "qwen2"))
            model = load_model(spec, allow_download=False)
            path = save_snapshot(model, FAMILY_TEXT, tmp_path_factory.mktemp("snap") / f"{name}.html")
            made[name] = Snap(model, model.trace(FAMILY_TEXT), path)
        return made[name]

    return get


@contextmanager
def offline(browser, file: Path, *, screen: str = "desktop", lang: str = "en"):
    """`file` opened from file:// (in 中文 by ?lang=zh) with every other request blocked; fails on a request
    or an error in the page."""
    ARTIFACTS.mkdir(exist_ok=True)
    own = file.as_uri()
    url = own + ("?lang=zh" if lang == "zh" else "")
    context = browser.new_context(locale="zh-CN" if lang == "zh" else "en-US", **SCREENS[screen])
    blocked: list[str] = []
    errors: list[str] = []

    def guard(route) -> None:
        if route.request.url.split("?")[0] == own or urlparse(route.request.url).scheme in ("data", "blob"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", guard)
    pg = context.new_page()
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(url)
    pg.wait_for_selector("body[data-ready='1']", timeout=60_000)
    try:
        yield pg
    finally:
        context.close()
    assert not blocked, f"the snapshot tried to load: {blocked}"
    assert not errors, f"errors in the page: {errors}"


def settle(page) -> None:
    page.wait_for_selector(".view:not(.busy)")
    page.wait_for_function("() => !document.querySelector('.view .placeholder')", timeout=30_000)
    page.wait_for_timeout(300)  # a fetch that failed has set the page's error by now


def no_error(page, where: str) -> None:
    for testid in ("error", "attr-error"):  # the page's banner; the attribution panel's own
        banner = page.locator(f"[data-testid={testid}]")
        assert banner.count() == 0, f"{where}: {banner.inner_text()}"


def api_values(trace, **spec) -> tuple[np.ndarray, int | None]:
    """What the server answers for `spec` (float16, as the snapshot stores it), and its kv_head."""
    from transformer_explainer.encoding import decode_array
    from transformer_explainer.schemas import TensorSpec
    from transformer_explainer.slicing import activation_tensor

    t = activation_tensor(trace, TensorSpec(dtype="float16", **spec))
    return decode_array(t.data, t.shape, t.dtype), t.kv_head


def shown(page, strip: str) -> np.ndarray:
    sel = f"[data-strip='{strip}'][data-values]"
    page.wait_for_selector(sel, timeout=30_000)
    return np.array([float(x) for x in page.get_attribute(sel, "data-values").split(",")], dtype=np.float32)


def matrix(page, name: str, rows: int) -> np.ndarray:
    sel = f"[data-matrix='{name}'][data-values]"
    page.wait_for_selector(sel, state="attached", timeout=30_000)
    return np.array([float(x) for x in page.get_attribute(sel, "data-values").split(",")],
                    dtype=np.float32).reshape(rows, -1)


def walk(page, model, tag: str) -> None:
    """Open every view of the model's family; none shows an error."""
    llama = model.config.family == "llama"
    for i, v in enumerate(NAV):
        nav = page.locator(f"[data-testid=nav-{v}]")
        if v in LLAMA_ONLY and not llama:
            assert nav.count() == 0
            continue
        nav.click()
        page.wait_for_selector("section.view")
        settle(page)
        no_error(page, f"{tag} {v}")
        assert page.locator("section.view").inner_text().strip()
        page.screenshot(path=str(ARTIFACTS / f"snapshot-family-{tag}-{i:02d}-{v}.png"), full_page=False)


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_every_view_of_every_family_offline(browser, snaps, name):
    """Every view at the last layer and head (whose keys and values are the last key/value head's), on a
    desktop in English: no error, and the numbers drawn are the server's for the same names."""
    s = snaps(name)
    cfg, trace = s.model.config, s.trace
    L, H, T = cfg.n_layer, cfg.n_head, trace.n_tokens
    last, h, p = L - 1, H - 1, T - 1
    with offline(browser, s.file) as page:
        page.click(f"[aria-label='Layer {last}'][role=radio]")
        page.click("[data-testid=nav-qkv]")
        page.click(f"[data-testid=head-picker] button:text-is('{h}')")
        settle(page)
        b = f"blocks.{last}"
        q, _ = api_values(trace, name=f"{b}.attn.q", head=h)
        k, kv_k = api_values(trace, name=f"{b}.attn.k", head=h)
        v, kv_v = api_values(trace, name=f"{b}.attn.v", head=h)
        if cfg.family == "llama":  # grouped-query attention: query head h reads key/value head h // (H / G)
            assert cfg.n_kv_heads < H and kv_k == kv_v == h // (H // cfg.n_kv_heads)
        np.testing.assert_array_equal(matrix(page, "qkv-q", T), q)
        np.testing.assert_array_equal(matrix(page, "qkv-k", T), k)
        np.testing.assert_array_equal(matrix(page, "qkv-v", T), v)

        page.click("[data-testid=nav-heads]")
        settle(page)
        np.testing.assert_array_equal(shown(page, "heads-concat"), api_values(trace, name=f"{b}.attn.concat",
                                                                              position=p)[0])  # derived from z
        np.testing.assert_array_equal(shown(page, "heads-out"), api_values(trace, name=f"{b}.attn_out", position=p)[0])

        page.click("[data-testid=nav-attention]")
        settle(page)
        scaled, _ = api_values(trace, name=f"{b}.attn.scaled_scores", head=h, position=p)  # derived from the scores
        for c in (0, p // 2, p):
            assert number(hover_cell(page, "stage-scaled", 0, c, 1, T).split(":")[-1]) == pytest.approx(
                float(scaled[c]), rel=SHOWN_REL, abs=2e-4)

        walk(page, s.model, f"{name}-desktop-en")

        # block 0's output is stored as block 1's input (an alias in the file)
        page.click("[aria-label='Layer 0'][role=radio]")
        page.click("[data-testid=nav-residual]")
        settle(page)
        np.testing.assert_array_equal(shown(page, "resid-post"), api_values(trace, name="blocks.0.resid_post",
                                                                            position=p)[0])
        no_error(page, f"{name} residual of block 0")


@pytest.mark.parametrize(("name", "screen", "lang"), [
    *((n, "phone", "zh") for n in FAMILY_MODELS),
    ("explainer-llama", "desktop", "zh"), ("explainer-llama", "phone", "en"),
])
def test_every_view_on_a_phone_and_in_chinese(browser, snaps, name, screen, lang):
    s = snaps(name)
    with offline(browser, s.file, screen=screen, lang=lang) as page:
        if lang == "zh":
            page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
            assert page.evaluate("document.documentElement.dataset.cjkFont") == "loaded"
        walk(page, s.model, f"{name}-{screen}-{lang}")


def page_without(snap: Snap, stages: list[str], path: Path) -> Path:
    """The snapshot of `snap` with the stored activations of `stages` (every block's) left out."""
    from transformer_explainer.notebook.snapshot import page_html, snapshot_data

    data, _ = snapshot_data(snap.model, snap.trace, ablations=False)
    for stage in stages:
        assert [data["tensors"].pop(n) for n in list(data["tensors"]) if n.endswith("." + stage)], stage
        data["omitted"].append(f"blocks.*.{stage}")
    data["keep_mb"] = 9.9  # as if the budget had left them out: the page names the budget that keeps them
    path.write_text(page_html(data), encoding="utf-8")
    return path


def test_error_banner_clears_when_a_later_view_loads(browser, snaps, tmp_path):
    """One view that cannot load (its tensors left out of the file) shows its error; the next view that
    loads shows none; back on the failing view the error is there again (it is still true)."""
    s = snaps("explainer-small")
    with offline(browser, page_without(s, ["mlp.post"], tmp_path / "no-mlp.html")) as page:
        for _ in range(2):
            page.click("[data-testid=nav-mlp]")
            page.wait_for_selector("[data-testid=error]", timeout=30_000)
            err = page.inner_text("[data-testid=error]")
            assert "mlp.post to keep the file small" in err and "--max-mb 9.9" in err, err
            page.screenshot(path=str(ARTIFACTS / "snapshot-error-mlp.png"), full_page=False)
            for v in ["residual", "attention", "layernorm-ln2"]:
                page.click(f"[data-testid=nav-{v}]")
                settle(page)
                no_error(page, f"{v} after the MLP view failed")
        page.screenshot(path=str(ARTIFACTS / "snapshot-error-cleared.png"), full_page=False)


def test_scores_left_out_are_derived_from_queries_and_keys(browser, snaps, tmp_path):
    """A file without the attention scores (a long text: they grow with its square) derives them from the
    rotated queries and keys by the trace's rule, each query head against its key/value head."""
    s = snaps("tiny-qwen2")
    trace, cfg = s.trace, s.model.config
    H, T = cfg.n_head, trace.n_tokens
    h, p = H - 1, 5
    with offline(browser, page_without(s, ["attn.scores"], tmp_path / "no-scores.html")) as page:
        page.click("[aria-label='Layer 1'][role=radio]")
        page.click("[data-testid=nav-attention]")
        page.click(f"[data-testid=head-picker] button:text-is('{h}')")
        page.locator("[data-testid=token-chip]").nth(p).click()
        settle(page)
        no_error(page, "attention")
        for stage, name in [("scores", "attn.scores"), ("scaled", "attn.scaled_scores"),
                            ("masked", "attn.masked_scores")]:
            want, _ = api_values(trace, name=f"blocks.1.{name}", head=h, position=p)
            for c in range(T):
                got = hover_cell(page, f"stage-{stage}", 0, c, 1, T).split(":")[-1]
                if c > p and stage == "masked":
                    assert "−∞" in got
                else:
                    assert number(got) == pytest.approx(float(want[c]), rel=SHOWN_REL, abs=3e-4), (stage, c)
        for v in ["rope", "gqa", "heads"]:
            page.click(f"[data-testid=nav-{v}]")
            settle(page)
            no_error(page, v)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_llama_lesson_walks_in_the_snapshot(browser, snaps, lang):
    """The lesson for the Llama family, every step, from the file alone: no step shows an error."""
    from .test_lesson import wait_body

    s = snaps("explainer-llama")
    with offline(browser, s.file, lang=lang) as page:
        page.click("[data-testid=tour-open]")
        page.wait_for_selector("[data-testid=tour]")
        assert page.get_attribute("[data-testid=tour]", "data-lesson") == "modern"
        steps = []
        while True:
            wait_body(page)
            page.wait_for_function("() => !document.querySelector('.view.busy')", timeout=30_000)
            page.wait_for_timeout(300)
            sid = page.get_attribute("[data-testid=tour]", "data-step")
            steps.append(sid)
            no_error(page, f"lesson step {sid}")
            page.screenshot(path=str(ARTIFACTS / f"snapshot-lesson-{lang}-{len(steps):02d}-{sid}.png"), full_page=False)
            if page.locator("[data-testid=tour-next]").count() == 0:
                break
            page.click("[data-testid=tour-next]")
        assert len(steps) >= 10 and len(set(steps)) == len(steps), steps


# Draw `text` with the h1's font into a canvas and return its alpha channel (as tests/web/test_cjk_font.py).
DRAW = """(text) => {
  const font = getComputedStyle(document.querySelector('h1')).fontFamily;
  const c = document.createElement('canvas');
  c.width = 160; c.height = 60;
  const ctx = c.getContext('2d');
  ctx.font = `40px ${font}`;
  ctx.fillText(text, 4, 46);
  const d = ctx.getImageData(0, 0, c.width, c.height).data;
  const a = [];
  for (let i = 3; i < d.length; i += 4) a.push(d[i]);
  return a;
}"""


def test_chinese_draws_with_the_inlined_font(browser, snaps):
    """In 中文, from file:// with nothing fetched, CJK characters are the inlined font's glyphs, not boxes."""
    s = snaps("explainer-small")
    html = s.file.read_text(encoding="utf-8")
    assert html.count(inlined(UI_FONT)) == 1 and html.count(inlined(PAGE_FONT)) == 1
    with offline(browser, s.file, lang="zh") as page:
        page.wait_for_function("() => document.querySelector('h1').textContent === 'Transformer 图解'")
        assert page.evaluate("document.documentElement.dataset.cjkFont") == "loaded"
        assert page.evaluate("document.fonts.check('16px \"TE Noto Sans SC\"', '图解')")
        box = page.evaluate(DRAW, "\u0378\u0379")  # two unassigned code points: the missing-glyph boxes
        chinese = page.evaluate(DRAW, "图解")
        assert sum(chinese) > 0 and chinese != box and chinese != page.evaluate(DRAW, "注意")
        assert page.get_attribute("[data-testid=text]", "readonly") is not None
        assert "离线快照" in page.inner_text("#text-help") and "只读" in page.inner_text("#text-help")
        page.click("[data-testid=nav-attention]")
        settle(page)
        page.screenshot(path=str(ARTIFACTS / "snapshot-zh-attention.png"), full_page=False)


def test_an_english_only_snapshot(browser, tiny_model, tmp_path):
    """languages=("en",): no CJK font in the file, no language switch, English even for a Chinese browser
    asking for 中文; the read-only text box says what it is."""
    path = save_snapshot(tiny_model, TEXT, tmp_path / "en.html", languages=("en",), ablations=False)
    html = path.read_text(encoding="utf-8")
    assert inlined(UI_FONT) not in html and inlined(PAGE_FONT) in html  # only the stylesheet's few glyphs
    with offline(browser, path, lang="zh") as page:
        assert page.evaluate("document.documentElement.lang") == "en"
        assert page.inner_text("h1") == "Transformer Explainer"
        assert page.locator("[data-testid=lang]").count() == 0
        assert page.evaluate("document.documentElement.dataset.cjkFont") is None
        assert page.get_attribute("[data-testid=text]", "readonly") is not None
        help_text = page.inner_text("#text-help")
        assert "read-only" in help_text and "as you type" not in help_text
        page.screenshot(path=str(ARTIFACTS / "snapshot-english-only.png"), full_page=False)


def test_widget_shows_every_view_of_a_llama_family_model(browser, snaps, tmp_path):
    """The anywidget front end with the page `show` makes for a Qwen2 checkpoint (grouped-query attention),
    in a sandboxed iframe inside a notebook-like host, in 中文: every view opens without an error, with the
    inlined font."""
    from transformer_explainer.notebook import show, widget_class
    from transformer_explainer.notebook.widget import widget_esm

    if widget_class() is None:
        pytest.skip("anywidget is not installed")
    s = snaps("tiny-qwen2")
    w = show(s.trace, s.model)
    assert isinstance(w, widget_class())
    host = "http://notebook.test/"
    page_html = ('<!doctype html><meta charset="utf-8"><div id="out"></div><script type="module">'
                 'import w from "./widget.js";'
                 'const html = await (await fetch("./snapshot.html")).text();'
                 'const model = { get: (k) => ({ html, height: 900 })[k], on: () => {}, off: () => {} };'
                 'w.render({ model, el: document.getElementById("out") });'
                 '</script>')
    files = {host: ("text/html", page_html), host + "widget.js": ("text/javascript", widget_esm().read_text()),
             host + "snapshot.html": ("text/html", w.html)}
    context = browser.new_context(viewport={"width": 1300, "height": 1000}, locale="zh-CN")
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

    context.route("**/*", serve)
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(host)
    frame = page.frame_locator("iframe[sandbox='allow-scripts']")
    frame.locator("body[data-ready='1']").wait_for(timeout=60_000)
    frame.locator("html[data-cjk-font='loaded']").wait_for(timeout=30_000)
    assert frame.locator("h1").inner_text() == "Transformer 图解"
    for i, v in enumerate(NAV):
        frame.locator(f"[data-testid=nav-{v}]").click()
        frame.locator("div.view:not(.busy) section.view").wait_for()
        if v == "attribution":  # the top prediction's attribution, as model.attribute answers it
            ref = s.model.attribute(s.trace)
            frame.locator("[data-testid=attr-result][data-stale='0']").wait_for(timeout=30_000)
            frame.locator("[data-testid=attr-top]").select_option("0")  # every component
            shows_attribution(frame, ref)
            pic = frame.locator("[data-testid=attr-map] .pic")  # a head's cell, read off the map
            pic.scroll_into_view_if_needed()
            box, (L, H) = pic.bounding_box(), (s.model.config.n_layer, s.model.config.n_head)
            page.mouse.move(box["x"] + 2.5 * box["width"] / H, box["y"] + 1.5 * box["height"] / L)
            expect(frame.locator("[data-testid=attr-map-readout]")).to_contain_text(map_readout(ref, 1, 2))
            note = frame.locator("[data-testid=attr-offline]").inner_text()  # the tokens the file carries, quoted
            assert all(f"“{visible(s.model.tokenizer.token_text(i))}”（{i}）" in note
                       for i in s.trace.next_token_logits().topk(10).indices.tolist()), note
        page.wait_for_timeout(400)
        for testid in ("error", "attr-error"):
            banner = frame.locator(f"[data-testid={testid}]")
            assert banner.count() == 0, (v, banner.inner_text())
        page.screenshot(path=str(ARTIFACTS / f"snapshot-widget-qwen2-zh-{i:02d}-{v}.png"))
    context.close()
    assert not outside, f"the widget loaded: {outside}"
    assert not errors, errors


# -- Why this token, from the file alone ---------------------------------------------------------------------------


def attr_fresh(page, metric: float) -> None:
    """The attribution panel shows the answer asked for now, whose metric is `metric`."""
    page.wait_for_function("v => { const m = document.querySelector('[data-testid=attr-metric]');"
                           " return m && Math.abs(Number(m.dataset.value) - v) < 1e-9"
                           " && document.querySelector('[data-testid=attr-result]')?.dataset.stale === '0'; }",
                           arg=metric, timeout=30_000)


def shows_attribution(root, a, *, exact: bool = True) -> None:
    """The sum line and every ranked row (the panel set to show all) of the page or frame `root` are `a`'s
    (model.attribute's) numbers: to the bit where the file stores them, to float64 rounding where the page
    subtracts two of them."""
    def same(got: str, want: float) -> None:
        if exact:
            assert float(got) == want
        else:
            assert float(got) == pytest.approx(want, rel=1e-9, abs=1e-12)

    same(root.locator("[data-testid=attr-metric]").get_attribute("data-value"), a.metric)
    same(root.locator("[data-testid=attr-rest]").get_attribute("data-value"), a.rest)
    rows = root.locator("[data-testid=attr-row]")
    assert rows.count() == len(a.components)
    want = sorted(a.components, key=lambda c: -abs(c.value))
    got = [(r.get_attribute("data-kind"), r.get_attribute("data-layer"), r.get_attribute("data-head"),
            r.get_attribute("data-value")) for r in rows.all()]
    by_part = {(k, layer, head): v for k, layer, head, v in got}
    for c in want:
        same(by_part[(c.kind, "" if c.layer is None else str(c.layer), "" if c.head is None else str(c.head))], c.value)
    assert [g[0] for g in got[:3]] == [c.kind for c in want[:3]]  # ranked by size
    label = f"logit({visible(a.target_text)})" + (f" − logit({visible(a.versus_text)})" if a.versus_text else "")
    assert label in root.locator("[data-testid=attr-sum]").inner_text()


def map_readout(a, layer: int, head: int) -> str:
    """How the snapshot's layer x head map readout writes head (layer, head) of `a`: 3 significant digits (a snapshot
    page shows no more digits than its float16 tensors hold), a sign, a real minus."""
    v = float(a.heads[layer, head])
    return ("+" if v >= 0 else "") + f"{float(f'{v:.3g}'):g}".replace("-", "−")


WHY_RUNS = [(n, screen, lang) for n in ("explainer-small", "explainer-llama")
            for screen, lang in (("desktop", "en"), ("phone", "zh"), ("desktop", "zh"), ("phone", "en"))]
WHY_WORDS = {"en": {"many": "likeliest tokens", "one": "the token that came next", "missing": "does not carry",
                    "patch": "patching needs the live app"},
             "zh": {"many": "概率最高的", "one": "实际的下一个词元", "missing": "没有保存这项归因",
                    "patch": "修补需要在线应用"}}

ID = {"en": " ({})", "zh": "（{}）"}  # a carried token's id, after its quoted text


@pytest.mark.parametrize(("name", "screen", "lang"), WHY_RUNS)
def test_why_this_token_offline(browser, snaps, name, screen, lang):
    """The "Why this token" tab of a snapshot, from file:// with nothing fetched: the top prediction's attribution,
    another of the likeliest tokens typed in the box, one against another, and an earlier position's next token,
    each equal to model.attribute's; a token the file does not carry and the patching tab say, in the learner's
    language, what needs the live app, with no error banner."""
    import torch

    s = snaps(name)
    m, trace = s.model, s.trace
    words = WHY_WORDS[lang]
    tag = f"{name}-{screen}-{lang}"
    with offline(browser, s.file, screen=screen, lang=lang) as page:
        page.click("[data-testid=nav-attribution]")
        top = m.attribute(trace)
        attr_fresh(page, top.metric)
        page.select_option("[data-testid=attr-top]", "0")  # every component
        shows_attribution(page, top)
        no_error(page, f"{tag} the top prediction")
        note = page.inner_text("[data-testid=attr-offline]")
        likeliest = torch.topk(trace.next_token_logits(), 10).indices.tolist()
        listed = [f"“{visible(m.tokenizer.token_text(i))}”{ID[lang].format(i)}" for i in likeliest]
        assert words["many"] in note and all(x in note for x in listed), note
        if screen == "desktop":  # the map's cells are the heads' contributions (float32, as the server's map)
            page.locator("[data-testid=attr-map]").scroll_into_view_if_needed()
            readout = hover_cell(page, "attr-map", 1, 2, m.config.n_layer, m.config.n_head)
            assert map_readout(top, 1, 2) in readout
        page.locator("[data-testid=attr-sum]").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"snapshot-why-{tag}-1-top.png"), full_page=False)

        # the third likeliest token by its text, then rather than the top prediction
        third, first = m.tokenizer.token_text(likeliest[2]), m.tokenizer.token_text(likeliest[0])
        page.fill("[data-testid=attr-target]", third)
        a = m.attribute(trace, likeliest[2])
        attr_fresh(page, a.metric)
        shows_attribution(page, a)
        page.fill("[data-testid=attr-versus]", first)
        diff = m.attribute(trace, likeliest[2], likeliest[0])
        attr_fresh(page, diff.metric)
        shows_attribution(page, diff, exact=False)
        no_error(page, f"{tag} {third!r} rather than {first!r}")
        page.locator("[data-testid=attr-sum]").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"snapshot-why-{tag}-2-versus.png"), full_page=False)

        # an earlier position: the token that came next
        page.fill("[data-testid=attr-target]", "")
        page.fill("[data-testid=attr-versus]", "")
        page.locator("[data-testid=token-chip]").nth(3).click()
        page.click("[data-testid=nav-attribution]")  # on a phone the chip may open another view
        earlier = m.attribute(trace, position=3)
        assert earlier.target == trace.token_ids[4]
        attr_fresh(page, earlier.metric)
        shows_attribution(page, earlier)
        note = page.inner_text("[data-testid=attr-offline]")
        assert words["one"] in note and f"“{visible(earlier.target_text)}”{ID[lang].format(earlier.target)}" in note
        no_error(page, f"{tag} position 3")

        # a token the file does not carry there: said in the learner's language, in the panel only
        other = next(i for i in likeliest if i != trace.token_ids[4])
        page.fill("[data-testid=attr-target]", str(other))
        page.wait_for_selector("[data-testid=attr-error]", timeout=30_000)
        assert words["missing"] in page.inner_text("[data-testid=attr-error]")
        assert page.locator("[data-testid=error]").count() == 0
        page.locator("[data-testid=attr-error]").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"snapshot-why-{tag}-3-missing.png"), full_page=False)
        page.fill("[data-testid=attr-target]", "")
        attr_fresh(page, earlier.metric)

        # patching runs the model: the tab says so, with no error anywhere
        page.click("[data-testid=attr-tab-patch]")
        page.wait_for_selector("[data-testid=patch-offline]")
        assert words["patch"] in page.inner_text("[data-testid=patch-offline]")
        assert page.locator("[data-testid=patch-run]").count() == 0
        page.wait_for_timeout(300)
        no_error(page, f"{tag} patching")
        page.screenshot(path=str(ARTIFACTS / f"snapshot-why-{tag}-4-patch.png"), full_page=False)



# -- Qwen3 and Gemma 3: their own views, and the stages the page derives by their rules ----------------------


@pytest.mark.parametrize("arch", ["qwen3", "gemma3_text"])
def test_new_families_offline(browser, tmp_path, arch):
    """A Qwen3 or Gemma 3 snapshot (random weights, 4 layers; Gemma's local layers with a window of 5): every view
    it has opens from file:// without an error; the scaled and masked scores the page derives (1/sqrt of
    query_pre_attn_scalar, and the local layers' window) are the server's; the sandwich norms' stages are drawn."""
    from tests.conftest import make_hf_llama_family
    from transformer_explainer import load_model

    model = load_model(str(make_hf_llama_family(tmp_path / arch, arch)), allow_download=False)
    path = save_snapshot(model, FAMILY_TEXT, tmp_path / f"{arch}.html")
    trace = model.trace(FAMILY_TEXT)
    cfg, T = model.config, trace.n_tokens
    p, h = T - 1, 1
    with offline(browser, path) as page:
        page.click("[aria-label='Layer 0'][role=radio]")  # a local layer in the Gemma fixture
        page.click("[data-testid=nav-attention]")
        page.click(f"[data-testid=head-picker] button:text-is('{h}')")
        settle(page)
        scaled, _ = api_values(trace, name="blocks.0.attn.scaled_scores", head=h, position=p)
        masked, _ = api_values(trace, name="blocks.0.attn.masked_scores", head=h, position=p)
        for c in (0, p // 2, p):
            text = hover_cell(page, "stage-scaled", 0, c, 1, T).split(":")[-1]
            assert number(text) == pytest.approx(float(scaled[c]), rel=SHOWN_REL, abs=2e-4)
            shown_masked = hover_cell(page, "stage-masked", 0, c, 1, T).split(":")[-1].strip()
            if np.isinf(masked[c]):  # the window hides it in a local layer
                assert "∞" in shown_masked, (c, shown_masked)
            else:
                assert number(shown_masked) == pytest.approx(float(masked[c]), rel=SHOWN_REL, abs=2e-4)
        if cfg.window(0) is not None:
            assert np.isinf(masked[0]) and T > cfg.sliding_window
        views = ["qknorm", "rope", "gqa", "heads", "residual", "mlp", "embedding", "layernorm-ln1"]
        if cfg.arch.sandwich_norm:
            views += ["window", "layernorm-ln1_post", "layernorm-ln2_post"]
        for v in views:
            page.click(f"[data-testid=nav-{v}]")
            settle(page)
            no_error(page, f"{arch} {v}")
            page.screenshot(path=str(ARTIFACTS / f"snapshot-{arch}-{v}.png"), full_page=False)
        if cfg.arch.sandwich_norm:
            page.click("[data-testid=nav-residual]")
            settle(page)
            np.testing.assert_array_equal(shown(page, "resid-attnRaw"), api_values(trace, name="blocks.0.attn.out",
                                                                                   position=p)[0])
            np.testing.assert_array_equal(shown(page, "resid-attn"), api_values(trace, name="blocks.0.attn_out",
                                                                                position=p)[0])
