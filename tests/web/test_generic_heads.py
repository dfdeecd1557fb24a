"""The Experiments area's head map on a hybrid decoder that runs through transformers' own modules (issue 34): a
Qwen3.5-shaped model, Gated DeltaNet in layers 0 and 2, full attention in layers 1 and 3. Its heads are ablated,
scored into roles and measured (entropy, distance) in the attention layers; each layer without attention is one
labelled empty row that says what it is, never cells of "–" or NaN. On a desktop and on a phone in 中文.
Screenshots go to test-artifacts/generic-heads-*.png."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app
from .test_app import api

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat and the cat sat"
PIXEL_7 = {"viewport": {"width": 412, "height": 839}, "screen": {"width": 412, "height": 915},
           "device_scale_factor": 2.625, "is_mobile": True, "has_touch": True,
           "user_agent": "Mozilla/5.0 (Linux; Android 14; Pixel 7) AppleWebKit/537.36 (KHTML, like Gecko) "
                         "Chrome/159.0.8154.6 Mobile Safari/537.36"}


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


def _open_heads(page) -> None:
    page.wait_for_selector("[data-testid=token-chip]", timeout=30_000)
    page.click("[data-testid=nav-experiments]")
    page.click("[data-testid=exp-tab-heads]")
    page.wait_for_selector("[data-testid=head-map][data-metric=loss] [data-testid=head-cell-3-1]", timeout=60_000)


def _shown(page, layer: int, h: int) -> float:
    return float(page.get_attribute(f"[data-testid=head-cell-{layer}-{h}]", "data-value"))


def _no_nan(page) -> None:
    text = page.get_by_test_id("head-map").inner_text()
    assert "NaN" not in text and "null" not in text and "undefined" not in text, text


def test_the_head_map_of_a_hybrid_on_a_desktop(browser, hybrid_server):
    with open_app(browser, hybrid_server.url, query=f"#text={TEXT}") as page:
        _open_heads(page)
        H = 4
        for metric in ("loss", "previous_token", "entropy"):
            if metric != "loss":
                page.select_option("[data-testid=head-metric]", metric)
                page.wait_for_selector(f"[data-testid=head-map][data-metric={metric}]")
            # the Gated DeltaNet layers: one labelled row each, no cells
            for layer in (0, 2):
                row = page.get_by_test_id(f"head-row-none-{layer}")
                assert row.get_attribute("data-kind") == "linear_attention"
                assert row.inner_text() == "linear-attention layer: no softmax attention, no heads in this map"
                assert "not with softmax attention" in row.get_attribute("title")
                assert page.locator(f"[data-testid^=head-cell-{layer}-]").count() == 0
            assert page.locator("[data-testid^=head-cell-]").count() == 2 * H
            _no_nan(page)
            if metric == "loss":
                page.screenshot(path=str(ARTIFACTS / "generic-heads-1-importance.png"), full_page=True)
        # the attention layers' values are the API's: role scores on the reference set, entropy on the text
        heads = api(hybrid_server, "analysis/heads", text=TEXT, reference=True)
        for layer in (1, 3):
            for h in range(H):
                assert _shown(page, layer, h) == pytest.approx(heads["stats"]["normalized_entropy"][layer][h],
                                                               rel=1e-6)
        page.select_option("[data-testid=head-metric]", "previous_token")
        page.wait_for_selector("[data-testid=head-map][data-metric=previous_token]")
        for layer in (1, 3):
            for h in range(H):
                assert _shown(page, layer, h) == pytest.approx(
                    heads["reference"]["scores"]["previous_token"][layer][h], rel=1e-6)
        assert heads["reference"]["scores"]["previous_token"][0] == [None] * H
        page.screenshot(path=str(ARTIFACTS / "generic-heads-2-roles.png"), full_page=True)
        # a head of an attention layer still switches off
        page.click("[data-testid=head-cell-3-1]")
        page.wait_for_selector("[data-testid=ablation-table]")
        assert "Layer 3, head 1" in page.get_by_test_id("ablation-title").inner_text()
        assert page.locator("[data-testid=heads-error]").count() == 0


def test_the_head_map_of_a_hybrid_on_a_phone_in_chinese(browser, hybrid_server):
    with open_app(browser, hybrid_server.url, query=f"#text={TEXT}&lang=zh", **PIXEL_7) as page:
        page.wait_for_function("() => document.documentElement.lang.startsWith('zh')")
        _open_heads(page)
        page.select_option("[data-testid=head-metric]", "induction")
        page.wait_for_selector("[data-testid=head-map][data-metric=induction]")
        for layer in (0, 2):
            assert page.get_by_test_id(f"head-row-none-{layer}").inner_text() == (
                "线性注意力层：没有 softmax 注意力，本图不含它的头")
        _no_nan(page)
        assert page.locator("[data-testid=heads-error]").count() == 0
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth + 1")  # nothing wider than the phone
        page.get_by_test_id("head-map").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "generic-heads-3-phone-zh.png"), full_page=True)
        page.get_by_test_id("head-map").screenshot(path=str(ARTIFACTS / "generic-heads-4-phone-zh-map.png"))
