"""The self-contained HTML snapshot, opened from file:// with every network request blocked and
recorded: it needs none, and the values it shows are the trace's."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest

from transformer_explainer.analysis.answers import ablate_json, lens_json
from transformer_explainer.notebook import save_snapshot

from .conftest import ARTIFACTS
from .test_app import hover_cell, number, visible

pytestmark = pytest.mark.browser

TEXT = "The quick brown fox jumps over the lazy dog"


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
    assert number(text.split(":")[-1]) == pytest.approx(float(trace["blocks.1.attn.pattern"][2, 3, 1]), abs=6e-4)
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
