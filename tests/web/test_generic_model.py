"""The app on a decoder that runs through transformers' own modules (issue 34): a Qwen3.5-shaped hybrid (Gated
DeltaNet layers 0 and 2, full attention in layers 1 and 3). The header says which way it runs; the stages whose
values it does not record are not offered, and the block says why in one sentence; the Attention view offers its
attention layers only, and a Gated DeltaNet layer is drawn as what it is (its input and output per token). On a
phone in 中文 too. Screenshots go to test-artifacts/generic-*.png."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest

from transformer_explainer.encoding import decode_array

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app
from .test_app import api

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def hybrid_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    pytest.importorskip("transformers")
    from pathlib import Path

    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    folder = write_checkpoint("qwen3_5_text", tmp_path_factory.mktemp("hybrid"), tokenizer=True)
    with LiveServer(create_app({"hybrid": load_model(str(folder), allow_download=False)})) as srv:
        yield srv


def _ready(page) -> None:
    page.wait_for_selector("[data-testid=token-chip]", timeout=30_000)
    page.wait_for_function("() => document.querySelector('[data-testid=status]')?.textContent.trim().length > 0")


def test_hybrid_model_on_a_desktop(browser, hybrid_server):
    with open_app(browser, hybrid_server.url, query=f"#text={TEXT}") as page:
        _ready(page)
        runs = page.get_by_test_id("model-runs")
        assert runs.get_attribute("data-runs") == "transformers"
        assert "runs through transformers" in runs.inner_text() and "Qwen3_5ForCausalLM" in runs.inner_text()
        assert "runs through transformers" in page.get_by_test_id("model-family").inner_text()
        # the stages whose values such a model does not record are not offered; the block says why
        for hidden in ("layernorm-ln1", "qkv", "mlp", "heads", "rope"):
            assert page.locator(f"[data-testid=nav-{hidden}]").count() == 0, hidden
        assert "q/k/v projections" in page.get_by_test_id("generic-hidden").inner_text()
        assert page.locator(".layers button[data-kind]").evaluate_all("els => els.map(e => e.dataset.kind)") == [
            "linear_attention", "attention", "linear_attention", "attention"]  # the layer list marks each kind
        page.get_by_test_id("nav-attention").click()
        # layer 0 (Gated DeltaNet): drawn as what it is, its input and output per token; attention layers offered
        page.wait_for_selector("[data-testid=mixer-layer]")
        assert page.get_by_test_id("mixer-layer").get_attribute("data-kind") == "linear_attention"
        # what the layer is, said for its kind: no softmax, but earlier tokens reach this one through its state
        said = page.locator("[data-view=mixer]").inner_text()
        assert "computes no softmax" in said and "state of fixed size" in said
        offered = page.locator("[data-testid=attention-layers-offered] button")
        assert offered.all_inner_texts() == ["Layer 1", "Layer 3"]
        page.wait_for_function("() => document.querySelectorAll('[data-testid=mixer-norms] tbody tr').length > 0"
                               " && !document.querySelector('[data-testid=mixer-norms]').textContent.includes('…')")
        # the focus row's lengths are the API's: |linear_attn.in| and |linear_attn.out| of layer 0 at that token
        cells = page.locator("[data-testid=mixer-norms] tr.focus td").all_inner_texts()
        pos = int(cells[0].rsplit("(", 1)[1].rstrip(")"))
        got = api(hybrid_server, "tensors", text=TEXT, tensors=[
            {"name": f"blocks.0.linear_attn.{s}", "position": pos, "dtype": "float32"} for s in ("in", "out")])
        want = [float(np.linalg.norm(decode_array(t["data"], t["shape"], t["dtype"]))) for t in got["tensors"]]
        assert [float(c) for c in cells[1:]] == pytest.approx(want, rel=1e-3)
        page.screenshot(path=str(ARTIFACTS / "generic-1-deltanet-layer.png"), full_page=True)
        page.get_by_test_id("attention-layer-3").click()
        page.wait_for_selector("[data-testid=attn-pattern]")
        assert page.locator("[data-testid=stage-masked]").count() == 1
        assert page.locator("[data-testid=stage-scores]").count() == 0  # not recorded for this model
        assert page.locator("[data-testid=attention-layers-offered] button").all_inner_texts() == ["Layer 1", "Layer 3"]
        page.get_by_test_id("attn-overview").wait_for()
        layers = page.eval_on_selector_all("[data-testid=attn-overview] .thumb",
                                           "els => els.map(e => +e.dataset.layer)")
        assert sorted(set(layers)) == [1, 3]  # the thumbnails are of the attention layers, labelled as the model's
        page.screenshot(path=str(ARTIFACTS / "generic-2-attention-layer.png"), full_page=True)
        for view, probe in (("residual", "resid-post"), ("output", "final-ln"), ("embedding", "emb-token")):
            page.get_by_test_id(f"nav-{view}").click()
            page.wait_for_selector(f"[data-view={view}]")
            page.screenshot(path=str(ARTIFACTS / f"generic-view-{view}.png"), full_page=True)
            page.wait_for_function("p => document.querySelector(`[data-strip=${p}]`)?.dataset.values?.length > 0",
                                   arg=probe, timeout=15_000)
        assert page.locator("[data-testid=error]").count() == 0
        # generation: the sampled token is appended; the longer text is traced whole, and the page says so
        page.get_by_test_id("nav-output").click()
        assert "traced again from its first token" in page.get_by_test_id("pick-hint").inner_text()
        n = page.locator("[data-testid=token-chip]").count()
        sampled = page.get_by_test_id("sampled-token").inner_text()
        page.get_by_test_id("append-sampled").click()
        page.wait_for_function("n => document.querySelectorAll('[data-testid=token-chip]').length === n", arg=n + 1)
        assert page.locator("[data-testid=token-chip]").nth(n).locator(".txt").inner_text() == sampled
        assert page.locator("[data-testid=computed-note]").count() == 0  # not "only the new position"
        page.get_by_test_id("nav-blocks").click()
        assert "4 layers, 2 of them with attention" in page.locator("[data-view=blocks]").inner_text()
        # Why this token: the analyses' page on such a model, its mixers' writes named as such
        page.get_by_test_id("nav-attribution").click()
        page.wait_for_selector("[data-testid=attr-ranked] [data-testid=attr-row]", timeout=30_000)
        kinds = page.locator("[data-testid=attr-row]").evaluate_all("els => els.map(e => e.dataset.kind)")
        assert kinds and set(kinds) <= {"embed", "head", "mlp", "mixer"}, kinds
        # a layer's mixer whole: a Gated DeltaNet layer, or attention whose write is not split by head (Qwen3.5 gates
        # its output), labelled as such
        for row in page.locator("[data-testid=attr-row][data-kind=mixer]").all():
            assert f"L{row.get_attribute('data-layer')} mixer (whole)" in row.inner_text()
        # the formula names this model's parts (no position embedding, no attention biases), and the map says why the
        # rows of the layers ranked whole have no value
        frame = page.locator("[data-view=attribution]").inner_text()
        assert "each layer's token mixer" in frame and "position embedding" not in frame
        assert "attention bias" not in frame and "token mixer and MLP added" in frame
        whole = sorted({int(r.get_attribute("data-layer")) for r in
                        page.locator("[data-testid=attr-row][data-kind=mixer]").all()})
        assert whole == [0, 1, 2, 3]  # 9 parts, all shown: Gated DeltaNet, and attention gated before o_proj
        assert "rows of layers 0, 1, 2, 3:" in page.get_by_test_id("attr-map-whole").inner_text()
        page.screenshot(path=str(ARTIFACTS / "generic-8-attribution.png"), full_page=True)
        page.get_by_test_id("nav-overview").click()
        page.wait_for_selector("[data-view=overview]")
        page.screenshot(path=str(ARTIFACTS / "generic-3-overview.png"), full_page=True)


def test_hybrid_model_on_a_phone_in_chinese(browser, hybrid_server):
    # Playwright's "Pixel 7" (its devices table; the browser fixture holds the Playwright instance that has it)
    phone = {"viewport": {"width": 412, "height": 839}, "screen": {"width": 412, "height": 915},
             "device_scale_factor": 2.625, "is_mobile": True, "has_touch": True,
             "user_agent": "Mozilla/5.0 (Linux; Android 14; Pixel 7) AppleWebKit/537.36 (KHTML, like Gecko) "
                           "Chrome/159.0.8154.6 Mobile Safari/537.36"}
    with open_app(browser, hybrid_server.url, query=f"#text={TEXT}&lang=zh", **phone) as page:
        _ready(page)
        page.wait_for_function("() => document.documentElement.lang.startsWith('zh')")
        assert "经 transformers 自己的模块运行" in page.get_by_test_id("model-runs").inner_text()
        page.screenshot(path=str(ARTIFACTS / "generic-4-phone-zh-header.png"), full_page=False)
        page.get_by_test_id("nav-attention").click()
        page.wait_for_selector("[data-testid=mixer-layer]")
        assert page.locator("[data-testid=attention-layers-offered] button").all_inner_texts() == ["层 1", "层 3"]
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth + 1")
        page.screenshot(path=str(ARTIFACTS / "generic-5-phone-zh-deltanet.png"), full_page=True)


@pytest.fixture(scope="module")
def sink_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    folder = write_checkpoint("gpt_oss", tmp_path_factory.mktemp("gpt_oss"), tokenizer=True)
    with LiveServer(create_app({"gpt-oss": load_model(str(folder), allow_download=False)})) as srv:
        yield srv


def test_local_layer_and_sink_are_said(browser, sink_server):
    """gpt-oss: every layer attends; a local layer says its window, and each layer its sink's weight at the focus
    token (1 - the focus row's weights over the keys, which the test reads from the API)."""
    with open_app(browser, sink_server.url, query=f"#text={TEXT}&view=attention&layer=0") as page:
        _ready(page)
        page.wait_for_selector("[data-testid=attn-pattern]")
        assert page.locator("[data-testid=attention-layers-offered] button").all_inner_texts() == [
            "Layer 0", "Layer 1", "Layer 2", "Layer 3"]
        assert "the last 4 keys only" in page.get_by_test_id("generic-window").inner_text()
        assert "without attention" not in page.get_by_test_id("attention-layers-offered").inner_text()
        page.wait_for_function("() => /gives the sink/.test(document.querySelector('[data-testid=generic-sink]')"
                               "?.textContent ?? '')")
        page.screenshot(path=str(ARTIFACTS / "generic-6-sink-window.png"), full_page=True)
        page.get_by_test_id("attention-layer-1").click()
        page.wait_for_function("() => !document.querySelector('[data-testid=generic-window]')")


def test_parallel_mixers_both_shown(browser, tmp_path_factory):
    """Falcon-H1: each layer runs attention and a state-space layer side by side. The Residual view shows both
    branches' outputs (the API's values), the Attention view the layer's attention."""
    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    folder = write_checkpoint("falcon_h1", tmp_path_factory.mktemp("falcon_h1"), tokenizer=True)
    with LiveServer(create_app({"falcon": load_model(str(folder), allow_download=False)})) as srv, \
            open_app(browser, srv.url, query=f"#text={TEXT}&view=residual&layer=2") as page:
        _ready(page)
        for strip in ("resid-attn", "resid-mixer", "resid-mid", "resid-mlp", "resid-post"):
            page.wait_for_function("p => document.querySelector(`[data-strip=${p}]`)?.dataset.values?.length > 0",
                                   arg=strip, timeout=15_000)
        assert "state-space output" in page.locator("[data-strip=resid-mixer]").inner_text()
        # every layer attends: none is marked as mixing without attention in the layer list
        assert page.locator(".layers button[data-kind]").evaluate_all("els => els.map(e => e.dataset.kind)") == [
            "attention"] * 4
        n = page.locator("[data-testid=token-chip]").count()
        got = api(srv, "tensors", text=TEXT,
                  tensors=[{"name": "blocks.2.ssm.out", "position": n - 1, "dtype": "float32"}])
        want = decode_array(got["tensors"][0]["data"], [-1], "float32")
        shown = np.array([float(v) for v in page.locator("[data-strip=resid-mixer]").get_attribute("data-values")
                          .split(",")])
        np.testing.assert_allclose(shown, want, rtol=2e-3, atol=2e-3)  # the page asks float16
        page.screenshot(path=str(ARTIFACTS / "generic-7-falcon-residual.png"), full_page=True)
        page.get_by_test_id("nav-attention").click()
        page.wait_for_selector("[data-testid=attn-pattern]")


def shown(text: str) -> float:
    """A number as the page shows it (4 decimals, or 4 significant digits; "−" for minus)."""
    return float(text.replace("−", "-"))


def approx(v: float) -> object:
    """What a number shown by the page equals: 4 decimals, or 4 significant digits when very small."""
    return pytest.approx(float(v), rel=1e-3, abs=6e-5 if abs(v) >= 1e-3 else 0)


def _pattern_cells(page) -> list[list[float]]:
    """Every cell of the drawn pattern, read back through its readout (the value the heatmap draws there): the
    keyboard walks the picture row by row from the top left. A masked cell reads 0."""
    pic = page.locator("[data-testid=attn-pattern] .pic")
    readout = page.get_by_test_id("attn-pattern-readout")
    rows = len(page.locator("[data-testid=attn-pattern] .rl").all())
    cols = len(page.locator("[data-testid=attn-pattern] .cl").all())
    pic.focus()
    pic.press("Home")
    for _ in range(rows):
        pic.press("ArrowUp")
    out = []
    for r in range(rows):
        if r:
            pic.press("ArrowDown")
            pic.press("Home")
        got = []
        for c in range(cols):
            if c:
                pic.press("ArrowRight")
            said = readout.inner_text()
            got.append(0.0 if said.endswith(("masked", "已掩码")) else shown(said.rsplit(":", 1)[-1]))
        out.append(got)
    return out


def test_the_sink_is_a_column_of_its_own(browser, sink_server):
    """gpt-oss: the pattern draws each query's weight on the sink as its own column, left of the keys, labelled; its
    values are the API's attn.sink_weight for the chosen head, and each row (keys and sink) sums to 1. The note says,
    in this head's numbers, what the focus query gives the sink against its largest key, and which query gives the
    sink the most and the least. On a phone in 中文 too."""
    layer, head = 1, 2
    with open_app(browser, sink_server.url, query=f"#text={TEXT}&view=attention&layer={layer}") as page:
        _ready(page)
        page.wait_for_selector("[data-testid=attn-pattern]")
        page.locator("[data-testid=head-picker] button").nth(head).click()
        page.wait_for_selector(f"[data-testid=head-picker] button[aria-checked=true]:text-is('{head}')")
        page.wait_for_selector("[data-testid=sink-column-note]")
        assert page.locator("[data-testid=attn-pattern] .cl").first.inner_text() == "sink"
        got = api(sink_server, "tensors", text=TEXT, tensors=[
            {"name": f"blocks.{layer}.attn.sink_weight", "head": head, "dtype": "float32"},
            {"name": f"blocks.{layer}.attn.pattern", "head": head, "dtype": "float32"}])
        sink, pattern = (decode_array(t["data"], t["shape"], t["dtype"]) for t in got["tensors"])
        cells = np.array(_pattern_cells(page))
        assert cells.shape == (pattern.shape[0], pattern.shape[1] + 1)
        np.testing.assert_allclose(cells[:, 0], sink, atol=1e-4)  # the column is the sink's weight (4 decimals)
        np.testing.assert_allclose(cells[:, 1:], pattern, atol=1e-4)
        np.testing.assert_allclose(cells.sum(1), 1.0, atol=1e-3)  # keys and sink: a whole softmax
        assert (1 - pattern.sum(1)).max() > 1e-2  # without the column a row does not sum to 1: the column matters
        # the note in this head's numbers
        note = page.get_by_test_id("generic-sink").inner_text()
        pos = pattern.shape[0] - 1  # the focus is the last token
        said = re.search(r"head (\d+) gives the sink (\S+) of the focus token's weight\. That is (more|less) than",
                         note)
        assert said and int(said[1]) == head and shown(said[2]) == approx(sink[pos])
        k = int(np.argmax(pattern[pos]))
        assert said[3] == ("more" if sink[pos] > pattern[pos, k] else "less")
        labels = page.locator("[data-testid=attn-pattern] .rl").all_inner_texts()
        said = re.search(r"largest(?: key)?, “(.*?)” \((\d+)\), gets \(?([^\s)]+)\)?\.", note)
        assert said and (said[1], int(said[2])) == (labels[k], k) and shown(said[3]) == approx(pattern[pos, k])
        said = re.search(r"the most from query “.*” \((\d+)\): (\S+), and the least from query “.*” "
                         r"\((\d+)\): (\S+)\.$", note)
        most, least = int(np.argmax(sink)), int(np.argmin(sink))
        assert said and (int(said[1]), int(said[3])) == (most, least)
        assert (shown(said[2]), shown(said[4])) == (approx(sink[most]), approx(sink[least]))
        # the focus row's stages: the sink's logit, then its weight, before the keys' scores and weights
        got = api(sink_server, "tensors", text=TEXT, tensors=[
            {"name": f"blocks.{layer}.attn.sink", "head": head, "dtype": "float32"}])["tensors"][0]
        logit = float(decode_array(got["data"], got["shape"], got["dtype"]).reshape(-1)[0])
        for stage, first in (("masked", logit), ("softmax", sink[pos])):
            pic = page.locator(f"[data-testid=stage-{stage}] .pic")
            readout = page.get_by_test_id(f"stage-{stage}-readout")
            pic.focus()
            pic.press("Home")
            said = readout.inner_text()
            assert "sink" in said and shown(said.rsplit(":", 1)[-1].split(",")[0]) == approx(first), said
            pic.press("ArrowRight")  # then the first key
            assert "(0):" in readout.inner_text()
        page.screenshot(path=str(ARTIFACTS / "generic-9-sink-column.png"), full_page=True)
    phone = {"viewport": {"width": 412, "height": 839}, "screen": {"width": 412, "height": 915},
             "device_scale_factor": 2.625, "is_mobile": True, "has_touch": True}
    with open_app(browser, sink_server.url, query=f"#text={TEXT}&view=attention&layer={layer}&lang=zh",
                  **phone) as page:
        _ready(page)
        page.wait_for_function("() => document.documentElement.lang.startsWith('zh')")
        page.wait_for_selector("[data-testid=sink-column-note]")
        assert page.locator("[data-testid=attn-pattern] .cl").first.inner_text() == "汇点"
        page.wait_for_function("() => /从查询/.test(document.querySelector('[data-testid=generic-sink]')"
                               "?.textContent ?? '')")
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth + 1")
        page.screenshot(path=str(ARTIFACTS / "generic-10-phone-zh-sink-column.png"), full_page=True)
        page.get_by_test_id("generic-sink").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "generic-11-phone-zh-sink-note.png"))
