"""A server that discovers the built-ins (as `serve` does) offers explainer-hybrid in the app's model menu; choosing
it loads it, and the app draws it as the hybrid it is: three Gated DeltaNet layers, then full attention, run through
transformers. Screenshots go to test-artifacts/builtin-hybrid-*.png."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app

pytestmark = pytest.mark.browser


def test_the_model_menu_offers_explainer_hybrid(browser, tiny_model):
    from transformer_explainer.server import create_app
    from transformer_explainer.server.registry import ModelRegistry

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    reg = ModelRegistry("tiny")
    reg.add_loaded("tiny", tiny_model)
    reg.discover()
    with LiveServer(create_app(reg)) as srv, open_app(browser, srv.url, query="#text=The king said that the") as page:
        options = page.eval_on_selector_all("[data-testid=model] option", "os => os.map(o => o.value)")
        assert "explainer-hybrid" in options
        page.select_option("[data-testid=model]", "explainer-hybrid")
        page.wait_for_function("() => document.querySelector('[data-testid=model-runs]')?.dataset.runs === "
                               "'transformers'", timeout=120_000)
        page.wait_for_selector("[data-testid=token-chip]", timeout=60_000)
        assert "Qwen3_5ForCausalLM" in page.get_by_test_id("model-runs").inner_text()
        kinds = page.locator(".layers button[data-kind]").evaluate_all("els => els.map(e => e.dataset.kind)")
        assert kinds == ["linear_attention"] * 3 + ["attention"]
        page.screenshot(path=str(ARTIFACTS / "builtin-hybrid-1-chosen.png"), full_page=True)
        page.get_by_test_id("nav-attention").click()
        page.wait_for_selector("[data-testid=mixer-layer]")
        assert page.get_by_test_id("mixer-layer").get_attribute("data-kind") == "linear_attention"
        page.screenshot(path=str(ARTIFACTS / "builtin-hybrid-2-deltanet.png"), full_page=True)
        assert page.locator("[data-testid=error]").count() == 0
