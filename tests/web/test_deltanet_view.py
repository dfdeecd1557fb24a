"""The inside of a Gated DeltaNet layer in the app (the mechanism lens, issue 34): a Qwen3.5-shaped hybrid that runs
through transformers (Gated DeltaNet in layers 0 and 2, full attention in 1 and 3). Layer 0's view shows, for the
chosen head, the focus token's write strength and decay, the strip of both over the tokens, the attention matrix the
recurrence implies (its focus row, and the sentence about its signs and sum, from those numbers) and the memory table:
every number equal to the Python API's. On a desktop and on a phone in 中文; screenshots in
test-artifacts/deltanet-*.png."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import pytest

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat and the dog sat on the log"
PHONE = {"viewport": {"width": 412, "height": 839}, "screen": {"width": 412, "height": 915},
         "device_scale_factor": 2.625, "is_mobile": True, "has_touch": True,
         "user_agent": "Mozilla/5.0 (Linux; Android 14; Pixel 7) AppleWebKit/537.36 (KHTML, like Gecko) "
                       "Chrome/159.0.8154.6 Mobile Safari/537.36"}  # Playwright's "Pixel 7"


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, object]]:
    pytest.importorskip("transformers")
    from pathlib import Path

    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    folder = write_checkpoint("qwen3_5_text", tmp_path_factory.mktemp("hybrid"), tokenizer=True)
    model = load_model(str(folder), allow_download=False, dtype="float32")
    with LiveServer(create_app({"hybrid": model})) as srv:
        yield srv, model


def _open_layer_0(page) -> None:
    page.wait_for_selector("[data-testid=token-chip]", timeout=30_000)
    page.get_by_test_id("nav-attention").click()
    page.wait_for_selector("[data-testid=deltanet-view]")
    page.wait_for_selector("[data-testid=deltanet-focus][data-beta]", timeout=30_000)
    page.wait_for_selector("[data-testid=deltanet-row][data-row]", timeout=30_000)


def _check_head(page, model, head: int) -> None:
    """The focus token's beta and exp(g), the focus row of the implied matrix and its sentence, equal to the trace's."""
    page.wait_for_selector(f"[data-testid=deltanet-row][data-head='{head}']", timeout=30_000)
    trace = model.trace(TEXT)
    focus = page.get_by_test_id("deltanet-focus")
    pos = int(focus.get_attribute("data-pos"))
    assert int(focus.get_attribute("data-head")) == head
    beta = float(trace["blocks.0.linear_attn.beta"][head, pos])
    keep = math.exp(float(trace["blocks.0.linear_attn.decay"][head, pos]))
    assert float(focus.get_attribute("data-beta")) == pytest.approx(beta, rel=1e-6)
    assert float(focus.get_attribute("data-keep")) == pytest.approx(keep, rel=1e-6)
    said = focus.inner_text()
    assert ("at least half" if beta >= 0.5 else "less than half") in said
    assert f"keeps {100 * keep:.1f}%" in said or f"keeping only {100 * keep:.1f}%" in said
    row_el = page.get_by_test_id("deltanet-row")
    assert int(row_el.get_attribute("data-pos")) == pos
    row = [float(x) for x in row_el.get_attribute("data-row").split(",")]
    want = trace["blocks.0.linear_attn.implied_pattern"][head, pos, : pos + 1].tolist()
    assert row == pytest.approx(want, rel=1e-5, abs=1e-7)
    negative = sum(w < 0 for w in want)
    text = row_el.inner_text()
    if negative:
        assert (f"{negative} of its {pos + 1} weights are negative" if negative > 1 else
                f"one of its {pos + 1} weights is negative") in text
    else:
        assert "none of its" in text
    said_sum = re.search(r"sum to ([^ ;.]*(?:\.\d+)?(?:e[−+-]?\d+)?)", text).group(1).replace("−", "-")
    assert float(said_sum) == pytest.approx(sum(want), rel=1e-3, abs=1e-4)
    # the earlier tokens listed are the row's largest by |w|, in that order
    listed = [int(p) for p in page.locator("[data-testid=deltanet-top] tr").evaluate_all(
        "els => els.map(e => e.dataset.pos)")]
    by_size = sorted(range(pos + 1), key=lambda s: -abs(want[s]))[: len(listed)]
    assert listed == by_size and len(listed) == min(5, pos + 1)


def _check_memory(page, model) -> None:
    mem = model.config.memory
    rows = page.locator("[data-testid=deltanet-memory] tr").evaluate_all("els => els.map(e => +e.dataset.bytes)")
    assert rows == [mem.state_bytes, mem.conv_bytes, *mem.kv_cache_bytes]
    said = page.get_by_test_id("deltanet-memory-said").inner_text()
    fixed = mem.state_bytes + mem.conv_bytes
    return said, mem.kv_cache_bytes[0] >= fixed


def test_deltanet_layer_on_a_desktop(browser, hybrid):
    srv, model = hybrid
    with open_app(browser, srv.url, query=f"#text={TEXT}") as page:
        _open_layer_0(page)
        assert page.get_by_test_id("mixer-layer").get_attribute("data-mechanism") == "gated_deltanet"
        assert "computes no softmax" in page.locator("[data-view=mixer]").inner_text()
        assert "need not sum to 1" in page.locator("[data-testid=deltanet-view]").inner_text()
        heads = page.locator("[data-testid=deltanet-heads] button")
        assert heads.count() == model.trace(TEXT)["blocks.0.linear_attn.beta"].shape[0] == 4
        page.locator("[data-testid=deltanet-pattern] canvas").wait_for()
        page.locator("[data-testid=deltanet-gates] canvas").wait_for()
        _check_head(page, model, 0)
        said, more = _check_memory(page, model)
        assert ("already holds" in said) if more else ("passes them at about" in said)
        page.screenshot(path=str(ARTIFACTS / "deltanet-1-desktop.png"), full_page=True)
        heads.nth(3).click()
        _check_head(page, model, 3)
        page.get_by_test_id("token-chip").nth(4).click()  # another focus token
        page.wait_for_selector("[data-testid=deltanet-row][data-pos='4']")
        _check_head(page, model, 3)
        page.screenshot(path=str(ARTIFACTS / "deltanet-2-head3-token4.png"), full_page=True)
        assert page.locator("[data-testid=error]").count() == 0


def test_deltanet_layer_on_a_phone_in_chinese(browser, hybrid):
    srv, model = hybrid
    with open_app(browser, srv.url, query=f"#text={TEXT}&lang=zh", **PHONE) as page:
        page.wait_for_function("() => document.documentElement.lang.startsWith('zh')")
        _open_layer_0(page)
        view = page.get_by_test_id("deltanet-view")
        text = view.inner_text()
        assert "递推隐含的注意力" in text and "权重可以为负" in text and "KV 缓存" in text
        _check_memory(page, model)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 412 + 1, width  # nothing wider than the phone
        page.screenshot(path=str(ARTIFACTS / "deltanet-3-phone-zh.png"), full_page=True)
        for i, part in enumerate(("deltanet-heads", "deltanet-row", "deltanet-memory")):  # the screen a reader sees
            page.get_by_test_id(part).evaluate("e => e.scrollIntoView({block: 'start'})")
            page.screenshot(path=str(ARTIFACTS / f"deltanet-{4 + i}-phone-zh-{part.split('-')[1]}.png"))
        assert page.locator("[data-testid=error]").count() == 0


def test_the_chosen_value_head_is_the_focus_head(browser, hybrid):
    """The view's head is the page's focus head (what the lessons' sentences name), so a head set elsewhere (a link, a
    lesson step) is the one drawn, and a head picked here becomes the focus head."""
    srv, model = hybrid
    with open_app(browser, srv.url, query=f"#text={TEXT}&head=2") as page:
        _open_layer_0(page)
        page.locator("[data-testid=deltanet-pattern] canvas").wait_for()
        _check_head(page, model, 2)
        page.locator("[data-testid=deltanet-heads] button").nth(1).click()
        _check_head(page, model, 1)
        for _ in range(100):  # the link says the focus head (the page rewrites it a moment after a change)
            if "head=1" in page.evaluate("location.hash"):
                break
            page.wait_for_timeout(100)
        assert "head=1" in page.evaluate("location.hash")
