"""Today's views of models that run through transformers, in the offline snapshot (issue 34): each opened from
file:// with every other request blocked, at the default size budget, and compared with the trace's numbers (the
Python API's): the built-in explainer-hybrid's Gated DeltaNet view of layer 0 and its memory table, a random
DeepSeek-V3's latent cache, a random gpt-oss's sink column, a random Gemma 4's per-layer inputs and a random OLMo 3's
post-norm writes. The snapshot stores float16 values, so a number shown is the trace's to 3 significant digits.
Screenshots: test-artifacts/snapshot-views-*.png (the DeltaNet view on a Pixel 7 in 中文 too)."""

from __future__ import annotations

import math
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest

from transformer_explainer.notebook import save_snapshot

from .conftest import ARTIFACTS, cannot_run
from .test_app import hover_cell, number
from .test_snapshot import offline

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat"  # the built-in hybrid's 6 tokens
SHORT = "the cat sat"  # the random checkpoints' 7 (a character tokenizer): fewer attributions to compute, a short test
REL = 6e-3  # float16: 3 significant digits
BUILTIN = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "builtin"


def _snapshot(tmp_path_factory: pytest.TempPathFactory, kind: str, text: str = SHORT,
              languages: tuple[str, ...] = ("en",)):
    pytest.importorskip("transformers")
    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer import load_model

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    if kind == "explainer-hybrid":
        if not (BUILTIN / kind / "config.json").is_file():
            cannot_run("the built-in explainer-hybrid is not in this checkout")
        model = load_model(kind, allow_download=False)
    else:
        model = load_model(str(write_checkpoint(kind, tmp_path_factory.mktemp(kind), tokenizer=True)),
                           allow_download=False)
    # the views need no ablations: leaving them out keeps the test short, the budget is the default one
    path = save_snapshot(model, text, tmp_path_factory.mktemp("snap") / f"{kind}.html", languages=languages,
                         ablations=False)
    return model, model.trace(text), path


def _strip(page, strip: str) -> np.ndarray:
    page.wait_for_function("p => document.querySelector(`[data-strip=${p}]`)?.dataset.values?.length > 0",
                           arg=strip, timeout=15_000)
    return np.array([float(v) for v in page.locator(f"[data-strip={strip}]").get_attribute("data-values").split(",")])


def _close(shown: np.ndarray, want: np.ndarray) -> None:
    """Equal to float16 precision (relative to the vector's largest entry, as a float16 strip of them is)."""
    np.testing.assert_allclose(shown, want, rtol=REL, atol=REL * float(np.abs(want).max()) / 10)


def _focus(page) -> int:
    return page.locator("[data-testid=token-chip]").count() - 1  # the focus: the last token


def _layer(page, layer: int) -> None:
    page.locator(".layers button").nth(layer).click()
    page.wait_for_selector(f"[data-testid=layer-value]:text-is('{layer}')")


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return _snapshot(tmp_path_factory, "explainer-hybrid", TEXT, ("en", "zh"))


def _check_deltanet(page, model, trace, head: int, lang: str = "en") -> None:
    page.wait_for_selector(f"[data-testid=deltanet-row][data-head='{head}'][data-row]", timeout=30_000)
    focus = page.get_by_test_id("deltanet-focus")
    pos = int(focus.get_attribute("data-pos"))
    assert pos == trace.n_tokens - 1 and int(focus.get_attribute("data-head")) == head
    beta = float(trace["blocks.0.linear_attn.beta"][head, pos])
    keep = math.exp(float(trace["blocks.0.linear_attn.decay"][head, pos]))
    assert float(focus.get_attribute("data-beta")) == pytest.approx(beta, rel=REL)
    assert float(focus.get_attribute("data-keep")) == pytest.approx(keep, rel=REL)
    said = {"en": ("at least half", "less than half"), "zh": ("至少一半", "不到一半")}[lang]
    assert said[beta < 0.5] in focus.inner_text()
    # the implied weights span many orders of magnitude (products of decays: 1e-9 beside 1e-3): stored in float32,
    # since float16 would flush the small ones to 0 or its subnormals and change the signs counted and the order
    row_el = page.get_by_test_id("deltanet-row")
    row = np.array([float(x) for x in row_el.get_attribute("data-row").split(",")])
    want = trace["blocks.0.linear_attn.implied_pattern"][head, pos, : pos + 1].float().numpy()
    np.testing.assert_allclose(row, want, rtol=1e-6, atol=0)
    negative = int((want < 0).sum())
    if lang == "en":
        assert (f"{negative} of its {pos + 1} weights are negative" if negative > 1 else
                f"one of its {pos + 1} weights is negative" if negative else "none of its") in row_el.inner_text()
    listed = [int(p) for p in page.locator("[data-testid=deltanet-top] tr").evaluate_all(
        "els => els.map(e => e.dataset.pos)")]
    assert listed == sorted(range(pos + 1), key=lambda s: -abs(want[s]))[: len(listed)]
    mem = model.config.memory
    rows = page.locator("[data-testid=deltanet-memory] tr").evaluate_all("els => els.map(e => +e.dataset.bytes)")
    assert rows == [mem.state_bytes, mem.conv_bytes, *mem.kv_cache_bytes]
    assert page.get_by_test_id("deltanet-memory-said").inner_text().strip()
    assert "…" not in page.get_by_test_id("deltanet-view").inner_text()


def test_the_deltanet_view_offline(browser, hybrid):
    model, trace, path = hybrid
    with offline(browser, path) as page:
        page.get_by_test_id("nav-attention").click()
        page.wait_for_selector("[data-testid=deltanet-view]")
        assert page.get_by_test_id("mixer-layer").get_attribute("data-mechanism") == "gated_deltanet"
        _check_deltanet(page, model, trace, 0)
        # a value head past the model's attention heads: its q/k are the layer's own (heads of the layer, not the model)
        heads = page.locator("[data-testid=deltanet-heads] button")
        assert heads.count() == trace["blocks.0.linear_attn.beta"].shape[0]
        heads.nth(heads.count() - 1).click()
        _check_deltanet(page, model, trace, heads.count() - 1)
        page.screenshot(path=str(ARTIFACTS / "snapshot-views-1-deltanet.png"), full_page=True)


def test_the_deltanet_view_offline_on_a_phone_in_chinese(browser, hybrid):
    # a Pixel 7 (Playwright's profile, as tests/web/test_deltanet_view.py), every request but the file's blocked
    from .test_deltanet_view import PHONE

    model, trace, path = hybrid
    own, blocked, errors = path.as_uri(), [], []
    context = browser.new_context(locale="zh-CN", **PHONE)

    def guard(route) -> None:
        if route.request.url.split("?")[0] == own or urlparse(route.request.url).scheme in ("data", "blob"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", guard)
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(own + "?lang=zh")
        page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        page.get_by_test_id("nav-attention").click()
        page.wait_for_selector("[data-testid=deltanet-view]")
        _check_deltanet(page, model, trace, 0, "zh")
        page.get_by_test_id("deltanet-view").scroll_into_view_if_needed()
        page.get_by_test_id("deltanet-view").screenshot(path=str(ARTIFACTS / "snapshot-views-2-deltanet-pixel7-zh.png"))
    finally:
        context.close()
    assert not blocked and not errors, (blocked, errors)


def test_the_latent_cache_offline(browser, tmp_path_factory):
    model, trace, path = _snapshot(tmp_path_factory, "deepseek_v3")
    layer = 1
    with offline(browser, path) as page:
        page.get_by_test_id("nav-attention").click()
        page.get_by_test_id(f"attention-layer-{layer}").click()
        page.wait_for_selector("[data-testid=latent-cache]")
        pos = _focus(page)
        for s, strip in (("kv_latent", "mla-kv-latent"), ("k_rope", "mla-k-rope")):
            _close(_strip(page, strip), trace[f"blocks.{layer}.attn.{s}"][pos].float().numpy())
        per = model.config.latent_memory.mla_per_token
        rows = {r.get_attribute("data-kind"): int(r.get_attribute("data-per-token"))
                for r in page.locator("[data-testid=latent-cache-table] tbody tr").all()}
        assert rows["mla"] == per
        assert f"{per} B a token and layer" in page.get_by_test_id("latent-cache-said").inner_text()
        page.screenshot(path=str(ARTIFACTS / "snapshot-views-3-latent.png"), full_page=True)


def test_the_sink_column_offline(browser, tmp_path_factory):
    model, trace, path = _snapshot(tmp_path_factory, "gpt_oss")
    layer, head = 1, 2
    with offline(browser, path) as page:
        page.get_by_test_id("nav-attention").click()
        page.get_by_test_id(f"attention-layer-{layer}").click()
        page.click(f"[data-testid=head-picker] button:text-is('{head}')")
        page.wait_for_selector("[data-testid=sink-column-note]")
        page.wait_for_selector("[data-testid=attn-pattern] .pic")
        assert page.locator("[data-testid=attn-pattern] .cl").first.inner_text() == "sink"
        page.locator("[data-testid=attn-pattern] .pic").scroll_into_view_if_needed()
        T = trace.n_tokens
        sink = trace[f"blocks.{layer}.attn.sink_weight"][head].float().numpy()
        pattern = trace[f"blocks.{layer}.attn.pattern"][head].float().numpy()
        for q in (T - 1, 3):  # the sink's column, then a key's, read off the picture
            assert number(hover_cell(page, "attn-pattern", q, 0, T, T + 1).split(":")[-1]) == pytest.approx(
                float(sink[q]), rel=REL, abs=6e-4)
            assert number(hover_cell(page, "attn-pattern", q, 2, T, T + 1).split(":")[-1]) == pytest.approx(
                float(pattern[q, 1]), rel=REL, abs=6e-4)
        note = page.get_by_test_id("generic-sink").inner_text()
        assert f"head {head} gives the sink" in note
        page.screenshot(path=str(ARTIFACTS / "snapshot-views-4-sink.png"), full_page=True)


def test_per_layer_inputs_offline(browser, tmp_path_factory):
    model, trace, path = _snapshot(tmp_path_factory, "gemma4_text")
    with offline(browser, path) as page:
        page.get_by_test_id("nav-embedding").click()
        page.wait_for_selector("[data-testid=per-layer-inputs]")
        pos = _focus(page)
        rows = page.locator("[data-testid=per-layer-table] tbody tr").all()
        assert len(rows) == model.config.n_layer
        for i, r in enumerate(rows):
            _close(_strip(page, f"ple-slice-{i}"), trace["embed.per_layer_inputs"][pos, i].float().numpy())
            for attr, n in (("data-own", "embed.per_layer"), ("data-proj", "embed.per_layer_projected")):
                want = float(np.linalg.norm(trace[n][pos, i].float().numpy()))
                assert float(r.get_attribute(attr)) == pytest.approx(want, rel=REL)
        assert "looks up" in page.get_by_test_id("per-layer-said").inner_text()
        page.screenshot(path=str(ARTIFACTS / "snapshot-views-5-per-layer.png"), full_page=True)
        layer = 2
        page.get_by_test_id("nav-residual").first.click()
        _layer(page, layer)
        page.wait_for_selector("[data-testid=per-layer-write]")
        for strip, n in (("plw-input", "per_layer.input"), ("plw-act", "per_layer.act"),
                         ("plw-post", "per_layer.post")):
            _close(_strip(page, strip), trace[f"blocks.{layer}.{n}"][pos].float().numpy())
        page.wait_for_function("() => document.querySelector('[data-testid=per-layer-write-said]')?.textContent.length")
        page.screenshot(path=str(ARTIFACTS / "snapshot-views-6-per-layer-write.png"), full_page=True)


def test_post_norm_writes_offline(browser, tmp_path_factory):
    model, trace, path = _snapshot(tmp_path_factory, "olmo3")
    with offline(browser, path) as page:
        page.get_by_test_id("nav-residual").first.click()
        page.wait_for_selector("[data-testid=post-norm-writes]")
        page.wait_for_function("() => document.querySelector('[data-testid=post-norm-said]')?.textContent.length > 0",
                               timeout=15_000)
        pos = _focus(page)
        bounds = model.config.write_bounds
        rows = page.locator("[data-testid=post-norm-table] tbody tr").all()
        assert len(rows) == model.config.n_layer
        for i, r in enumerate(rows):
            for attr, n in (("data-attn", "ln1_post.out"), ("data-mlp", "ln2_post.out"), ("data-after", "resid_post")):
                want = float(np.linalg.norm(trace[f"blocks.{i}.{n}"][pos].float().numpy()))
                assert float(r.get_attribute(attr)) == pytest.approx(want, rel=REL)
            assert [float(r.get_attribute("data-attn-bound")), float(r.get_attribute("data-mlp-bound"))] == \
                pytest.approx(list(bounds[i]))
        page.screenshot(path=str(ARTIFACTS / "snapshot-views-7-post-norm.png"), full_page=True)
