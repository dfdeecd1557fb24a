"""A page opened while `serve` is still loading its model: the server answers the page at once (its
StartingApp, as `serve` builds it), and the app is drawn and usable (typing, the language switch)
with a notice that the model is loading, in both languages; once the model is in, the text typed
meanwhile is traced and drawn, and the notice goes."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import httpx
import pytest

from .conftest import ARTIFACTS, LiveServer

pytestmark = pytest.mark.browser

STATIC = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
TEXT = "Hello world, typed while the model loads"


def seconds(page) -> int:
    m = re.search(r"\((\d+) s\)", page.get_by_test_id("server-loading").inner_text())
    assert m, page.get_by_test_id("server-loading").inner_text()
    return int(m.group(1))


def test_the_page_is_usable_while_the_model_loads_then_traces(browser, tiny_model):
    from transformer_explainer.server import ServerSettings, create_app
    from transformer_explainer.server.run import ServeConfig, access_settings, starting_app

    if not (STATIC / "index.html").is_file():
        pytest.skip("the web UI is not built (cd web && npm ci && npm run build)")
    cfg = ServeConfig()  # 127.0.0.1: the Host is checked, as on a real `serve`
    gate = threading.Event()

    def build():  # the model "loads" until the test lets it
        assert gate.wait(120)
        return create_app({"tiny": tiny_model}, ServerSettings(access=access_settings(cfg)))

    with LiveServer(starting_app(cfg, build)) as srv:
        ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
        errors: list[str] = []
        try:
            pg = ctx.new_page()
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.goto(srv.url, timeout=10_000)  # the page and its bundle come now, not after the model
            pg.wait_for_selector("body[data-shell='1']", timeout=10_000)
            notice = pg.get_by_test_id("server-loading")
            notice.wait_for(timeout=10_000)
            assert "Loading the model…" in notice.inner_text()
            first = seconds(pg)
            pg.wait_for_function("n => /\\((\\d+) s\\)/.exec(document.querySelector("
                                 "'[data-testid=server-loading]').textContent)[1] > n", arg=first, timeout=5_000)
            pg.get_by_test_id("text").fill(TEXT)  # typing is allowed; the trace waits for the model
            pg.get_by_test_id("lang").select_option("zh")  # 中文 (its font comes from the server too)
            pg.wait_for_function("() => document.querySelector('[data-testid=server-loading]')"
                                 ".textContent.includes('正在加载模型')", timeout=10_000)
            pg.screenshot(path=str(ARTIFACTS / "early-page-loading-zh.png"))
            pg.get_by_test_id("lang").select_option("en")
            pg.wait_for_function("() => document.querySelector('[data-testid=server-loading]')"
                                 ".textContent.includes('Loading the model')", timeout=10_000)
            assert pg.get_attribute("body", "data-ready") is None  # /api/models is still waiting
            assert pg.locator("[data-testid=token-chip]").count() == 0
            gate.set()
            pg.wait_for_selector("body[data-ready='1']", timeout=60_000)
            assert notice.count() == 0
            assert pg.get_by_test_id("text").input_value() == TEXT
            ids = httpx.post(srv.url + "api/trace", json={"text": TEXT}, timeout=30).json()["token_ids"]
            pg.wait_for_function("n => document.querySelectorAll('[data-testid=token-chip]').length === n",
                                 arg=len(ids), timeout=30_000)
        finally:
            gate.set()
            ctx.close()
    assert not errors, f"errors in the page: {errors}"
