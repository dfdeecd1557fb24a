"""Browser tests: the real server (tiny random GPT-2) in a thread on a free 127.0.0.1 port, driven
by Playwright through Debian's Chromium. Requests to anywhere but that server are blocked and
recorded, and each test fails if there were any.

Without Chromium, Playwright or the built app the tests are skipped on a developer's machine, but
fail where the `CI` environment variable is set: in CI they must run, not pass silently."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlparse

import pytest

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def cannot_run(reason: str) -> NoReturn:
    """Skip a browser test that cannot run here, or fail it in CI."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}, and CI must run the browser tests", pytrace=False)
    pytest.skip(f"{reason} (with CI set this fails instead)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    def __init__(self, app) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="session")
def live_server(tiny_model) -> Iterator[LiveServer]:
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    with LiveServer(create_app({"tiny": tiny_model})) as srv:
        yield srv


@pytest.fixture(scope="session")
def llama_live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The app serving a tiny random Llama-family model ("tiny-llama": grouped-query attention with 4
    query heads on 2 key/value heads, Llama 3.1 rope scaling, BOS prepended), built with transformers."""
    from tests.conftest import make_hf_llama_family
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    folder = make_hf_llama_family(tmp_path_factory.mktemp("tiny-llama"), "llama")
    with LiveServer(create_app({"tiny-llama": load_model(str(folder), allow_download=False)})) as srv:
        yield srv


@pytest.fixture(scope="module")  # Playwright's sync API holds an event loop: close it with the module
def browser():
    if not Path(CHROMIUM).is_file():
        cannot_run(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright import sync_api
    except ModuleNotFoundError:
        cannot_run("Playwright is not installed (pip install -e '.[test]')")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


@contextmanager
def open_app(browser, url: str, *, query: str = "", ready_timeout: int = 30_000, **context: Any) -> Iterator:
    """A fresh page on the app at `url` (plus `query`) in a new browser context (`context`: Playwright's
    options, e.g. a phone's viewport and touch); fails if the page asked anything of another host, or
    threw an error."""
    ARTIFACTS.mkdir(exist_ok=True)
    port = urlparse(url).port
    ctx = browser.new_context(**{"viewport": {"width": 1280, "height": 900}, "locale": "en-US", **context})
    outside: list[str] = []
    errors: list[str] = []

    def guard(route) -> None:
        u = urlparse(route.request.url)
        if u.scheme in ("data", "blob") or (u.hostname == "127.0.0.1" and u.port == port):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    ctx.route("**/*", guard)
    pg = ctx.new_page()
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(url + query)
    pg.wait_for_selector("body[data-ready='1']", timeout=ready_timeout)
    try:
        yield pg
    finally:
        ctx.close()
    assert not outside, f"requests left 127.0.0.1: {outside}"
    assert not errors, f"errors in the page: {errors}"


@pytest.fixture
def page(browser, live_server):
    """A fresh page on the app, 1280 px wide; fails the test if anything left 127.0.0.1."""
    with open_app(browser, live_server.url) as pg:
        yield pg
