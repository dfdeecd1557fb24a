"""The lessons read the live model through one reader (web/src/lessons/reader.ts) that asks /api/tensors for at most
MAX_TENSORS_PER_REQUEST tensors a request, the limit the server enforces. The mixture-of-experts chapter reads one
routing tensor per block with experts: on a model with more such blocks than one request may carry (OLMoE has 16,
Mixtral 32, Qwen3-MoE 48), its kinds-of-token and path-through-the-blocks steps asked for all of them at once and the
server refused (422), so their text never came. Here on a random OLMoE with 17 blocks."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from .conftest import LiveServer, open_app
from .test_lesson import wait_body
from .test_lesson_moe import STEPS

pytestmark = pytest.mark.browser

N_LAYER = 17  # one block more than one request may ask for


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    from tests.conftest import make_hf_llama_family
    from transformer_explainer.engine import load_model
    from transformer_explainer.limits import MAX_TENSORS_PER_REQUEST
    from transformer_explainer.server import create_app

    assert N_LAYER > MAX_TENSORS_PER_REQUEST
    folder = make_hf_llama_family(tmp_path_factory.mktemp("tiny-olmoe-deep"), "olmoe", n_layer=N_LAYER)
    with LiveServer(create_app({"tiny-olmoe-deep": load_model(str(folder), allow_download=False)})) as srv:
        yield srv


def test_the_moe_steps_that_read_every_block_fetch_them_in_requests_the_server_takes(browser, server) -> None:
    from transformer_explainer.limits import MAX_TENSORS_PER_REQUEST

    with open_app(browser, server.url) as page:
        asked: list[int] = []
        refused: list[str] = []
        page.on("request", lambda r: asked.append(len(json.loads(r.post_data or "{}").get("tensors", [])))
                if r.url.endswith("/api/tensors") else None)
        page.on("response", lambda r: refused.append(f"{r.status} {r.url}") if "/api/" in r.url and r.status >= 400
                else None)
        page.fill("[data-testid=text]", "1, 2, 3, 4, 5, 6, 7, 8, the cat sat on the mat.")
        page.wait_for_function("() => document.querySelectorAll('[data-testid=token-chip]').length > 10")
        page.click("[data-testid=tour-open]")
        page.wait_for_selector("[data-testid=tour][data-lesson=moe]")
        for sid in ("special", "layers"):
            page.click(f"[data-testid=tour] .dots button >> nth={STEPS.index(sid)}")
            page.wait_for_function("s => document.querySelector('[data-testid=tour]')?.dataset.step === s", arg=sid)
            wait_body(page)
            assert page.locator("[data-testid=error]").count() == 0, page.inner_text("[data-testid=error]")
        body = page.inner_text("#lesson-body")
        assert body.strip()
        assert not refused, refused
        assert asked and max(asked) <= MAX_TENSORS_PER_REQUEST, asked
