"""The model notice and the GPT-2 small download in the browser: a real `serve` process on the
built-in model, whose huggingface_hub fetches a random GPT-2 from a local stand-in hub. The page
shows what the built-in model cannot do, the download's progress (size, speed, time left), cancel,
resume, the switch, and a message (not a spinner) when the hub cannot be reached."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from tests.conftest import make_hf_gpt2
from tests.hub_standin import StandInHub, serve_with_hub
from tests.web.conftest import ARTIFACTS, open_app

REPO = "openai-community/gpt2"
STATIC = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"


@pytest.fixture(scope="module")
def hub_files(tmp_path_factory) -> Path:
    if not (STATIC / "index.html").is_file():
        pytest.skip("the web UI is not built (cd web && npm ci && npm run build)")
    return make_hf_gpt2(tmp_path_factory.mktemp("hub-gpt2"), n_embd=128)  # weights of ~26 MB


def open_at(browser, url: str, lang: str = "en"):
    """The app at `url` in `lang`, through the suite's guarded page (nothing may leave 127.0.0.1)."""
    return open_app(browser, url, query=f"?lang={lang}", ready_timeout=60_000)


def zh(page, notice, shot: str, expect: str) -> None:
    """Switch the page to Chinese, check a phrase, take a screenshot, switch back."""
    page.get_by_test_id("lang").select_option("zh")
    notice.filter(has_text=expect).wait_for(timeout=5_000)
    notice.screenshot(path=str(ARTIFACTS / shot))
    page.get_by_test_id("lang").select_option("en")
    notice.filter(has_text="GPT-2 small").wait_for(timeout=5_000)


def test_notice_download_progress_cancel_resume_and_switch(browser, hub_files, tmp_path):
    hub = StandInHub(REPO, hub_files)
    hub.rate = 2_500_000  # bytes/s: the 26 MB take ~10 s, long enough to watch
    with hub.running(), serve_with_hub(hub.url, tmp_path / "hf", "--model", "explainer-small") as url, \
            open_at(browser, url) as page:
        notice = page.get_by_test_id("model-notice")
        assert "explainer-small" in notice.inner_text() and "make little sense" in notice.inner_text()
        start = page.get_by_test_id("download-start")
        assert start.inner_text().strip() == "Get GPT-2 small (about 550 MB)"
        notice.screenshot(path=str(ARTIFACTS / "download-notice-en.png"))
        zh(page, notice, "download-notice-zh.png", "获取 GPT-2 small（约 550 MB）")

        start.click()
        figures = page.get_by_test_id("download-figures")
        figures.filter(has_text=re.compile(r"MB/s .* left")).wait_for(timeout=30_000)
        text = figures.inner_text()
        assert re.search(r"\d+(\.\d)? MB of 2\d\.\d MB", text) and "left" in text, text
        assert int(page.get_by_test_id("download-bar").get_attribute("aria-valuenow")) > 0
        notice.screenshot(path=str(ARTIFACTS / "download-progress-en.png"))
        zh(page, notice, "download-progress-zh.png", "/秒")

        page.get_by_test_id("download-cancel").click()
        stopped = page.get_by_test_id("download-stopped")
        stopped.wait_for(timeout=10_000)
        assert "cancelled at" in stopped.inner_text() and "kept" in stopped.inner_text()
        notice.screenshot(path=str(ARTIFACTS / "download-cancelled-en.png"))

        hub.rate = None
        page.get_by_test_id("download-resume").click()
        switch = page.get_by_test_id("download-switch")
        switch.wait_for(timeout=60_000)
        assert any(r is not None for r in hub.weight_requests()), "the resume asked for the rest with a Range"
        notice.screenshot(path=str(ARTIFACTS / "download-done-en.png"))
        switch.click()
        page.wait_for_function("document.querySelector(\"[data-testid=model]\").value === 'gpt2'", timeout=60_000)
        page.get_by_test_id("model-notice").wait_for(state="detached", timeout=60_000)
        page.get_by_test_id("status").filter(has_text="Up to date").wait_for(timeout=60_000)


def test_offline_shows_a_message_not_a_spinner_en_and_zh(browser, tmp_path):
    with socket.socket() as s:  # nobody listens here: the hub is unreachable
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    if not (STATIC / "index.html").is_file():
        pytest.skip("the web UI is not built (cd web && npm ci && npm run build)")
    with serve_with_hub(dead, tmp_path / "hf", "--model", "explainer-small", "--only") as url:
        for lang, words in (("en", "cannot be reached"), ("zh", "无法连接")):
            with open_at(browser, url, lang) as page:
                notice = page.get_by_test_id("model-notice")
                page.get_by_test_id("download-start").click() if page.get_by_test_id("download-start").count() \
                    else page.get_by_test_id("download-retry").click()
                msg = page.get_by_test_id("download-offline")
                msg.wait_for(timeout=15_000)
                assert words in msg.inner_text()
                assert notice.locator(".spinner").count() == 0 and page.get_by_test_id("download-retry").is_visible()
                if lang == "zh":
                    assert "自带的小模型" in notice.inner_text()
                notice.screenshot(path=str(ARTIFACTS / f"download-offline-{lang}.png"))
                page.screenshot(path=str(ARTIFACTS / f"download-offline-page-{lang}.png"))
