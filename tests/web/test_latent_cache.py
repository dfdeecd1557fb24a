"""The app on DeepSeek-V3 (through transformers; multi-head latent attention in every layer): the attention stage of
a latent-attention layer shows what its cache keeps for the focus token (the key-value latent and the shared rotary
key, the API's values, derived by our own module) and a table of the cache's bytes against multi-head and
grouped-query attention of the same widths (the capabilities' figures), with sentences that say the comparisons as the
numbers have them. On a phone in 中文 too. Screenshots: test-artifacts/mla-*.png."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from transformer_explainer.encoding import decode_array

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app
from .test_app import api

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat"
PHONE = {"viewport": {"width": 412, "height": 839}, "screen": {"width": 412, "height": 915},
         "device_scale_factor": 2.625, "is_mobile": True, "has_touch": True}


@pytest.fixture(scope="module")
def mla_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    pytest.importorskip("transformers")
    from pathlib import Path

    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    folder = write_checkpoint("deepseek_v3", tmp_path_factory.mktemp("deepseek_v3"), tokenizer=True)
    with LiveServer(create_app({"deepseek": load_model(str(folder), allow_download=False)})) as srv:
        yield srv


def _ready(page) -> None:
    page.wait_for_selector("[data-testid=token-chip]", timeout=30_000)
    page.wait_for_selector("[data-testid=latent-cache]", timeout=30_000)
    for strip in ("mla-kv-latent", "mla-k-rope"):
        page.wait_for_function("p => document.querySelector(`[data-strip=${p}]`)?.dataset.values?.length > 0",
                               arg=strip, timeout=15_000)


def test_the_latent_and_its_cache_on_a_desktop(browser, mla_server):
    layer = 1
    with open_app(browser, mla_server.url, query=f"#text={TEXT}&view=attention&layer={layer}") as page:
        _ready(page)
        pos = page.locator("[data-testid=token-chip]").count() - 1  # the focus: the last token
        got = api(mla_server, "tensors", text=TEXT, tensors=[
            {"name": f"blocks.{layer}.attn.{s}", "position": pos, "dtype": "float32"} for s in ("kv_latent", "k_rope")])
        for t, strip in zip(got["tensors"], ("mla-kv-latent", "mla-k-rope"), strict=True):
            want = decode_array(t["data"], t["shape"], t["dtype"])
            shown = np.array([float(v) for v in page.locator(f"[data-strip={strip}]").get_attribute("data-values")
                              .split(",")])
            np.testing.assert_allclose(shown, want, rtol=1e-6, atol=1e-7)
        assert want.shape == (8,)  # the rotary key: qk_rope_head_dim numbers
        # the table: the checkpoint's widths (4 heads; latent 16, rotary key 8, keys 16 + 8, values 16; float32)
        rows = {r.get_attribute("data-kind"): r
                for r in page.locator("[data-testid=latent-cache-table] tbody tr").all()}
        assert list(rows) == ["mha", "gqa", "mla"]
        per = {k: int(r.get_attribute("data-per-token")) for k, r in rows.items()}
        assert per == {"mla": (16 + 8) * 4, "mha": 4 * 40 * 4, "gqa": 2 * 40 * 4}
        for k, r in rows.items():
            assert [int(b) for b in r.get_attribute("data-bytes").split(",")] == [4 * per[k] * n for n in
                                                                                 (1024, 32768, 1048576)]
        said = page.get_by_test_id("latent-cache-said").inner_text()
        assert "a latent of 16 numbers" in said and "rotary key of 8 numbers that all 4 heads share" in said
        assert "96 B a token and layer, 6.67× less than multi-head attention" in said and "(640 B)" in said
        assert "less than grouped-query attention with 2 key/value heads would cache too (320 B, 3.33×" in said
        assert "model's 4 latent-attention layers holds 12.0 MiB" in said and "would hold 80.0 MiB" in said
        assert page.locator("[data-testid=attn-pattern]").count() == 1  # the attention view is still there
        page.screenshot(path=str(ARTIFACTS / "mla-1-desktop.png"), full_page=True)
        page.get_by_test_id("latent-cache").screenshot(path=str(ARTIFACTS / "mla-2-desktop-cache.png"))


def test_the_latent_and_its_cache_on_a_phone_in_chinese(browser, mla_server):
    with open_app(browser, mla_server.url, query=f"#text={TEXT}&view=attention&layer=2&lang=zh", **PHONE) as page:
        page.wait_for_function("() => document.documentElement.lang.startsWith('zh')")
        _ready(page)
        said = page.get_by_test_id("latent-cache-said").inner_text()
        assert "是同样头数和宽度的多头注意力（640 B）的 1/6.67" in said
        assert "它也比有 2 个键/值头的分组查询注意力少" in said
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth + 1")
        page.screenshot(path=str(ARTIFACTS / "mla-3-phone-zh.png"), full_page=True)
        page.get_by_test_id("latent-cache").scroll_into_view_if_needed()
        page.get_by_test_id("latent-cache").screenshot(path=str(ARTIFACTS / "mla-4-phone-zh-cache.png"))
