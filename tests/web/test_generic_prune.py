"""The live app's Heads tab on a decoder that runs through transformers (issue 34): an LFM2 (short convolutions in
layers 0 and 2, attention in 1 and 3) has heads to switch off in its attention layers only. The pruning panel counts
those (2 layers x 4 heads = 8, not 4 x 4 = 16), as the server prunes them: pruning them all takes 8 steps."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def lfm2_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, int]]:
    pytest.importorskip("transformers")
    from pathlib import Path

    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    model = load_model(str(write_checkpoint("lfm2", tmp_path_factory.mktemp("lfm2"), tokenizer=True)),
                       allow_download=False)
    heads = len(model.config.attention_layers) * model.config.n_head
    assert heads < model.config.n_layer * model.config.n_head
    with LiveServer(create_app({"lfm2": model})) as srv:
        yield srv, heads


def test_pruning_counts_the_attention_layers_heads(browser, lfm2_server):
    srv, n = lfm2_server
    with open_app(browser, srv.url, query=f"#text={TEXT}") as page:
        page.wait_for_selector("[data-testid=token-chip]", timeout=30_000)
        page.get_by_test_id("nav-experiments").click()
        page.click("[data-testid=exp-tab-heads]")
        limit = page.get_by_test_id("prune-limit")
        limit.wait_for(timeout=30_000)
        assert limit.get_attribute("placeholder") == str(n) and limit.get_attribute("max") == str(n)
        assert f"({2 * n} forward passes)" in page.get_by_test_id("prune").inner_text()
        # pruning every head: as many steps as the page counted, each a head of an attention layer
        page.click("[data-testid=prune-run]")
        curve = page.wait_for_selector("[data-testid=prune-curve]", timeout=60_000)
        assert curve.get_attribute("data-steps") == str(n)
        page.screenshot(path=str(ARTIFACTS / "generic-prune.png"), full_page=True)
