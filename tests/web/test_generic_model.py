"""The app on a decoder that runs through transformers' own modules (issue 34): a Qwen3.5-shaped hybrid (Gated
DeltaNet layers 0 and 2, full attention in layers 1 and 3). The header says which way it runs; the stages whose
values it does not record are not offered, and the block says why in one sentence; the Attention view offers its
attention layers only, and a Gated DeltaNet layer is drawn as what it is (its input and output per token). On a
phone in 中文 too. Screenshots go to test-artifacts/generic-*.png."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app

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
        page.get_by_test_id("nav-attention").click()
        # layer 0 (Gated DeltaNet): drawn as what it is, its input and output per token; attention layers offered
        page.wait_for_selector("[data-testid=mixer-layer]")
        assert page.get_by_test_id("mixer-layer").get_attribute("data-kind") == "linear_attention"
        offered = page.locator("[data-testid=attention-layers-offered] button")
        assert offered.all_inner_texts() == ["Layer 1", "Layer 3"]
        page.wait_for_function("() => document.querySelectorAll('[data-testid=mixer-norms] tbody tr').length > 0")
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
        page.get_by_test_id("nav-overview").click()
        page.wait_for_selector("[data-view=overview]")
        page.screenshot(path=str(ARTIFACTS / "generic-3-overview.png"), full_page=True)


def test_hybrid_model_on_a_phone_in_chinese(browser, hybrid_server):
    from playwright.sync_api import sync_playwright  # noqa: F401  (the devices table is Playwright's)

    phone = {"viewport": {"width": 412, "height": 915}, "device_scale_factor": 2.625, "is_mobile": True,
             "has_touch": True}
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
