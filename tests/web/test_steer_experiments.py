"""Steering reachable on every model: the Experiments' Steering tab mounts the steering panel on the tiny random GPT-2,
which ships no sparse autoencoder, so the panel offers the contrast of two prompt sets alone (no feature mode), and
its continuations, marks, sweep and lens are /api/steer's. On the same GPT-2 laid out to ship an autoencoder at
blocks.1.hook_resid_post the tab offers a feature too, at that layer; there a 中文 page on a Pixel 7 says an empty
contrast set in 中文 (the server's code, not its English detail), nothing reaching past the phone's width (screenshot
in test-artifacts/steer/)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .conftest import LiveServer, open_app
from .test_generic_heads import PIXEL_7
from .test_steer_panel import SHOTS, TEXT, TOKENS, A, B, check_against, run, steer_model  # noqa: F401 (a fixture)

pytestmark = pytest.mark.browser
ZH = json.loads((Path(__file__).resolve().parents[2] / "web" / "src" / "locales" / "zh.json").read_text("utf-8"))


@pytest.fixture(scope="module")
def server(tiny_model) -> Iterator[LiveServer]:
    from transformer_explainer.server import create_app

    with LiveServer(create_app({"tiny": tiny_model})) as srv:
        yield srv


@pytest.fixture(scope="module")
def sae_server(steer_model) -> Iterator[LiveServer]:  # noqa: F811 (the imported fixture)
    from transformer_explainer.server import create_app

    with LiveServer(create_app({"tiny": steer_model})) as srv:
        yield srv


def open_tab(page) -> None:
    page.click("[data-testid=exp-tab-steer]")
    page.wait_for_selector("[data-testid=exp-panel-steer] [data-testid=steer-panel]")


def test_the_experiments_steer_a_model_without_autoencoders(browser, server) -> None:
    hooks = httpx.get(server.url + "api/features/hooks?model=tiny", timeout=30).json()["hooks"]
    assert hooks == []  # the tiny GPT-2 ships none: the contrast alone steers it
    with open_app(browser, server.url, query=f"#text={TEXT}&view=experiments") as page:
        open_tab(page)
        page.wait_for_selector("[data-testid=steer-a]")
        assert page.locator("[data-testid=steer-mode-feature]").count() == 0
        page.fill("[data-testid=steer-a]", "\n".join(A))
        page.fill("[data-testid=steer-b]", "\n".join(B))
        page.fill("[data-testid=steer-layer]", "0")
        page.fill("[data-testid=steer-prompt]", TEXT)
        run(page, 6.0)
        body = {"model": "tiny", "text": TEXT, "tokens": TOKENS, "contrast": {"a": A, "b": B}, "layer": 0,
                "strength": 6.0}
        want = httpx.post(server.url + "api/steer", json=body, timeout=60).json()
        check_against(page, want)


def test_an_empty_set_is_said_in_chinese_on_a_phone(browser, sae_server) -> None:
    server = sae_server
    with open_app(browser, server.url, query=f"#text={TEXT}&view=experiments&lang=zh", **PIXEL_7) as page:
        open_tab(page)
        page.check("[data-testid=steer-mode-feature]")  # this model's autoencoder at blocks.1's output steers
        assert page.locator("[data-testid=steer-feature-layer]").input_value() == "1"
        page.check("[data-testid=steer-mode-contrast]")
        page.fill("[data-testid=steer-a]", " \n")
        page.fill("[data-testid=steer-layer]", "0")
        page.click("[data-testid=steer-run]")
        err = page.wait_for_selector("[data-testid=steer-error]", timeout=30_000).inner_text()
        r = httpx.post(server.url + "api/steer", json={"model": "tiny", "text": TEXT, "contrast": {"a": [], "b": B},
                                                       "layer": 0, "strength": 4.0}, timeout=30).json()
        assert r["code"] == "steer_set_empty" and r["params"] == {"set": "A"}
        assert err == ZH["error.steer_set_empty"].replace("{set}", "A") and "对比组 A 是空的" in err
        over = page.evaluate("() => [...document.querySelectorAll('[data-testid=exp-panel-steer] *')]"
                             ".filter(e => e.getBoundingClientRect().right > window.innerWidth + 1).length")
        assert over == 0
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("[data-testid=steer-panel]").screenshot(path=str(SHOTS / "phone-zh-experiments.png"))
