"""The mixture-of-experts chapter (web/src/lessons/moe.ts) in a real browser on the built-in explainer-moe, its
wording read against the routing the API gives (/api/tensors, mlp.expert_indices): the load step opens on the
block whose choices are least even (not block 0, the one block the model spreads evenly), a tie for the most
chosen expert is told as a tie (never as one winner), the kinds-of-token step calls an expert a kind's own only
when the measure it states shows it, and the summary says what the load-balancing loss left on this text (idle
experts, the busiest expert's share) instead of claiming that no expert is left idle."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest

from .conftest import ARTIFACTS, LiveServer, open_app
from .test_lesson import focus, nums, set_text, tensors, wait_body

pytestmark = pytest.mark.browser

STEPS = ["intro", "cost", "router", "topk", "sum", "load", "balance", "special", "layers", "params", "ablate",
         "summary"]
# block 1 of explainer-moe on this text: experts 0, 1 and 5 tie at 8 of the 32 choices
NUMBERS = "1, 2, 3, 4, 5, 6, 7, 8,"
PROSE = "The quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    from transformer_explainer import load_model
    from transformer_explainer.server import create_app

    with LiveServer(create_app({"explainer-moe": load_model("explainer-moe", allow_download=False)})) as srv:
        yield srv


@pytest.fixture
def page(browser, server):
    with open_app(browser, server.url) as pg:
        yield pg


def go(page, sid: str) -> None:
    if page.locator("[data-testid=tour]").count() == 0:
        page.click("[data-testid=tour-open]")
        page.wait_for_selector("[data-testid=tour][data-lesson=moe]")
    page.click(f"[data-testid=tour] .dots button >> nth={STEPS.index(sid)}")
    page.wait_for_function("s => document.querySelector('[data-testid=tour]')?.dataset.step === s", arg=sid)
    wait_body(page)
    page.wait_for_function("() => !document.querySelector('.view.busy')", timeout=30_000)
    page.wait_for_timeout(300)


def counts(server, ids: list[int]) -> dict[int, np.ndarray]:
    """Each block's choices per expert on the text, from the API."""
    specs = [{"name": f"blocks.{l}.mlp.expert_indices"} for l in range(6)]
    return {l: np.bincount(t.astype(int).ravel(), minlength=8) for l, t in enumerate(tensors(server, ids, *specs))}


def body(page) -> str:
    return page.inner_text("#lesson-body")


def test_the_load_step_opens_on_the_least_even_block(page, server):
    ids = set_text(page, PROSE, server)
    n = counts(server, ids)
    share = {l: c.max() / c.sum() for l, c in n.items()}
    least = max(share, key=lambda l: (share[l], -l))
    assert least != 0 and share[least] > share[0]  # the text's choices are least even away from block 0
    go(page, "load")
    assert focus(page)[1] == least
    v = nums(page)
    assert int(v["blocks-hi-layer"]) == least and float(v["blocks-hi"]) == pytest.approx(share[least], rel=5e-3)
    assert int(v["blocks-lo-layer"]) == min(share, key=lambda l: (share[l], l))
    go(page, "balance")
    assert focus(page)[1] == least  # the loss is shown on the same block


def test_a_tie_for_the_most_chosen_expert_is_told_as_a_tie(page, server):
    ids = set_text(page, NUMBERS, server)
    n = counts(server, ids)
    tied = [l for l, c in n.items() if (c == c.max()).sum() > 1]
    assert tied, n
    go(page, "load")
    l = tied[0]
    page.click(f"[data-testid=experts-layer-{l}]")
    page.wait_for_function("l => document.querySelector('[data-testid=layer-value]').textContent.trim() === String(l)",
                           arg=l)
    wait_body(page)
    page.wait_for_timeout(500)
    v, text = nums(page), body(page)
    top = sorted(int(e) for e in np.flatnonzero(n[l] == n[l].max()))
    assert [int(v[f"tied-{i}"]) for i in range(len(top))] == top, (v, text)
    assert "busiest" not in v and "tied" in text, text  # no single winner named
    assert int(v["busiest-count"]) == n[l].max()
    page.screenshot(path=str(ARTIFACTS / "lesson-moe-load-tie.png"))


@pytest.mark.parametrize("text", [PROSE, NUMBERS])
def test_specialisation_only_when_the_measure_shows_it(page, server, text):
    set_text(page, text, server)
    go(page, "special")
    said = body(page)
    v = nums(page)
    if "kind-m" not in v:
        return
    mine, others = int(v["kind-m"]) / int(v["kind-n"]), int(v["others-m"]) / int(v["others-n"])
    assert "clearest case" not in said
    if mine >= 0.75 and others <= 0.25:
        assert "nearly that kind's own" in said
    else:
        assert "No kind has one here" in said and "nearly that kind's own" not in said
        if others >= 0.5:
            assert "not a speciality" in said  # a busy expert is a load, not a specialist


def test_the_summary_says_what_the_balancing_loss_left(page, server):
    ids = set_text(page, PROSE, server)
    n = counts(server, ids)
    go(page, "summary")
    said = body(page)
    assert not re.search(r"keeps the router from leaving experts idle", said), said
    idle = {l: int((c == 0).sum()) for l, c in n.items()}
    v = nums(page)
    if max(idle.values()):
        l = int(v["end-layer"])
        assert idle[l] == max(idle.values()) and int(v["end-idle"]) == idle[l], (idle, v)
        assert "got none of the choices" in said
    else:
        assert "every expert of every block got some" in said
