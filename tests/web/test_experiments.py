"""The Experiments area in a real browser against the live server: what it shows equals what
/api/analysis computes, and ablating a head changes the shown next-token distribution; the lesson puts the
head experiments on a text the model predicts when the learner's is one it hardly predicts, and shows it."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from .conftest import LiveServer, open_app
from .test_app import api, number, shot, visible, wait_tokens

pytestmark = pytest.mark.browser

TEXT = "The cat sat on the mat, and then the cat slept on the mat."
# the text the Experiments lesson runs its head experiments on when the model hardly predicts the learner's
# (EXAMPLE_TEXT in web/src/lessons/experiments.ts)
EXAMPLE = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,"


def open_experiments(page, live_server) -> dict:
    ref = api(live_server, "trace", text=TEXT)
    page.fill("[data-testid=text]", TEXT)
    wait_tokens(page, len(ref["token_ids"]))
    page.click("[data-testid=nav-experiments]")
    page.wait_for_selector("[data-testid=lens-table]")
    return ref


def lens_rows(page) -> list[dict]:
    rows = page.locator("[data-testid=lens-row]")
    out = []
    for i in range(rows.count()):
        r = rows.nth(i)
        out.append({"rank": int(r.locator("[data-testid=lens-rank]").inner_text()),
                    "prob": number(r.locator("[data-testid=lens-prob]").inner_text()),
                    "top": [x.split("\n")[0] for x in r.locator("[data-testid=lens-top]").all_inner_texts()]})
    return out


def check_lens(page, live_server, ids: list[int], pos: int) -> None:
    ref = api(live_server, "analysis/lens", ids=ids, positions=[pos], top=5)
    page.wait_for_function(
        "p => document.querySelector('[data-testid=lens-lead]')?.textContent.includes(`position ${p} `)",
        arg=pos, timeout=30_000)
    shown = lens_rows(page)
    assert len(shown) == len(ref["layers"])
    for row, layer in zip(shown, ref["layers"], strict=True):
        col = layer["positions"][0]
        assert row["rank"] == col["target_rank"]
        assert row["prob"] == pytest.approx(col["target_prob"], rel=2e-3)
        assert row["top"] == [visible(c["token"]) for c in col["top"]]
    assert shown[-1]["rank"] == 1  # the last row is the real output: its own prediction ranks first


def test_lens_table_equals_api(page, live_server):
    ref = open_experiments(page, live_server)
    ids = ref["token_ids"]
    check_lens(page, live_server, ids, len(ids) - 1)
    shot(page, "exp-01-lens")
    page.locator("[data-testid=token-chip]").nth(3).click()  # another focus token moves the lens
    check_lens(page, live_server, ids, 3)


def test_head_map_and_ablation(page, live_server):
    ref = open_experiments(page, live_server)
    ids = ref["token_ids"]
    page.click("[data-testid=exp-tab-heads]")
    page.wait_for_selector("[data-testid=head-map][data-metric=loss]")
    imp = api(live_server, "analysis/importance", ids=ids)
    for layer, row in enumerate(imp["loss_change"]):
        for h, v in enumerate(row):
            shown = page.get_attribute(f"[data-testid=head-cell-{layer}-{h}]", "data-value")
            assert float(shown) == pytest.approx(v, rel=1e-6, abs=1e-12)

    page.click("[data-testid=head-cell-1-2]")
    page.wait_for_selector("[data-testid=ablation-table]")
    abl = api(live_server, "analysis/ablate", ids=ids, heads=[[1, 2]], mode="zero", top=10)
    before = [number(x) for x in page.locator("[data-testid=abl-before]").all_inner_texts()]
    after = [number(x) for x in page.locator("[data-testid=abl-after]").all_inner_texts()]
    assert before == pytest.approx([c["before"] for c in abl["changes"]], rel=2e-3)
    assert after == pytest.approx([c["after"] for c in abl["changes"]], rel=2e-3)
    assert before != after  # switching the head off changed the distribution shown
    assert "Layer 1, head 2" in page.locator("[data-testid=ablation-title]").inner_text()
    assert page.locator("[data-testid=layer-value]").inner_text() == "1"  # the rest of the app follows the head
    shot(page, "exp-02-ablation")

    # mean ablation of the same head: another distribution, the API's
    page.select_option("[data-testid=ablation-mode]", "mean")
    page.wait_for_function("() => document.querySelector('[data-testid=ablation-title]').textContent.includes('mean')",
                           timeout=60_000)
    mean = api(live_server, "analysis/ablate", ids=ids, heads=[[1, 2]], mode="mean", top=10)
    after = [number(x) for x in page.locator("[data-testid=abl-after]").all_inner_texts()]
    assert after == pytest.approx([c["after"] for c in mean["changes"]], rel=2e-3)

    # role scores on the reference set
    heads = api(live_server, "analysis/heads", ids=ids, reference=True)
    page.select_option("[data-testid=head-metric]", "previous_token")
    page.wait_for_selector("[data-testid=head-map][data-metric=previous_token]")
    v = float(page.get_attribute("[data-testid=head-cell-0-1]", "data-value"))
    assert v == pytest.approx(heads["reference"]["scores"]["previous_token"][0][1], rel=1e-6)
    page.select_option("[data-testid=role-source]", "text")
    page.wait_for_function("v => document.querySelector('[data-testid=head-cell-0-1]').dataset.value !== String(v)",
                           arg=v)
    v = float(page.get_attribute("[data-testid=head-cell-0-1]", "data-value"))
    assert v == pytest.approx(heads["text"]["scores"]["previous_token"][0][1], rel=1e-6)
    shot(page, "exp-03-roles")


def test_pruning_curve(page, live_server):
    ref = open_experiments(page, live_server)
    ids = ref["token_ids"]
    page.click("[data-testid=exp-tab-heads]")
    page.wait_for_selector("[data-testid=head-map][data-metric=loss]")
    page.fill("[data-testid=prune-limit]", "5")
    page.click("[data-testid=prune-run]")
    page.wait_for_selector("[data-testid=prune-curve][data-steps='5']", timeout=60_000)
    curve = api(live_server, "analysis/prune", ids=ids, mode="zero", max_heads=5, recompute=False)
    assert float(page.get_attribute("[data-testid=prune-curve]", "data-clean")) == pytest.approx(curve["clean_loss"])
    steps = page.locator("[data-testid=prune-step]")
    assert steps.all_inner_texts() == [f"L{s['head'][0]}H{s['head'][1]}" for s in curve["steps"]]
    shown = [float(steps.nth(i).get_attribute("data-loss")) for i in range(steps.count())]
    assert shown == pytest.approx([s["loss"] for s in curve["steps"]], rel=1e-6)
    # the curve is drawn: one path through the clean loss and the five losses, and hovering reads a step out
    box = page.locator("[data-testid=prune-chart] svg").bounding_box()
    page.mouse.move(box["x"] + box["width"] - 20, box["y"] + box["height"] / 2)
    readout = page.locator("[data-testid=prune-chart] .readout").inner_text()
    last = curve["steps"][-1]["head"]
    assert f"5 heads off, the last L{last[0]} H{last[1]}" in readout
    # a pruned head is one click from its views, like the map's cells
    steps.nth(0).click()
    assert page.locator("[data-testid=layer-value]").inner_text() == str(curve["steps"][0]["head"][0])
    shot(page, "exp-04-pruning")

    # re-scoring at each step (greedy): the first removal is the single head that raises the loss least
    page.check("[data-testid=prune-rescore]")
    page.fill("[data-testid=prune-limit]", "2")
    page.click("[data-testid=prune-run]")
    page.wait_for_selector("[data-testid=prune-curve][data-steps='2']", timeout=60_000)
    imp = api(live_server, "analysis/importance", ids=ids)
    least = min(imp["loss_change"][layer][h] for layer in range(imp["n_layer"]) for h in range(imp["n_head"]))
    first = float(page.locator("[data-testid=prune-step]").nth(0).get_attribute("data-loss"))
    assert first == pytest.approx(imp["clean_loss"] + least, rel=1e-5)


def test_embedding_explorer(page, live_server):
    ref = open_experiments(page, live_server)
    page.click("[data-testid=exp-tab-embed]")
    page.wait_for_selector("[data-testid=neighbours] li")
    focus = ref["token_ids"][-1]
    nb = api(live_server, "analysis/neighbours", token=focus, n=10)
    sims = [float(x) for x in page.locator("[data-testid=neighbours-sim]").all_inner_texts()]
    assert sims == pytest.approx([n["similarity"] for n in nb["neighbours"]], abs=1e-4)

    page.wait_for_selector("[data-testid=analogy] li")
    an = api(live_server, "analysis/analogy", positive=[" king", " woman"], negative=[" man"], n=10)
    sims = [float(x) for x in page.locator("[data-testid=analogy-sim]").all_inner_texts()]
    assert sims == pytest.approx([n["similarity"] for n in an["neighbours"]], abs=1e-4)

    page.fill("[data-testid=nb-input]", "cat")
    page.press("[data-testid=nb-input]", "Enter")
    page.wait_for_function("() => document.querySelector('[data-testid=nb-token]').textContent === '␣cat'")
    nb = api(live_server, "analysis/neighbours", token=" cat", n=10)
    assert page.locator("[data-testid=neighbours] .t").first.inner_text() == visible(nb["neighbours"][0]["token"])

    page.fill("[data-testid=pca-input]", "king, queen, man, woman, cat, dog")
    page.press("[data-testid=pca-input]", "Enter")
    page.wait_for_function("() => document.querySelectorAll('[data-testid=pca] circle').length === 6")
    shot(page, "exp-04-embeddings")

    page.select_option("[data-testid=lang]", "zh")  # every string has its Chinese
    page.wait_for_function("() => document.querySelector('[data-testid=exp-tab-lens]').textContent === 'logit 透镜'")
    assert page.locator("[data-testid=nav-experiments]").inner_text().strip() == "实验"
    shot(page, "exp-05-chinese")
    page.select_option("[data-testid=lang]", "en")


@pytest.fixture(scope="module")
def small_server() -> Iterator[LiveServer]:
    from transformer_explainer import load_model
    from transformer_explainer.server import create_app

    with LiveServer(create_app({"explainer-small": load_model("explainer-small", allow_download=False)})) as srv:
        yield srv


def card_nums(page) -> dict[str, str]:
    return page.evaluate("() => Object.fromEntries([...document.querySelectorAll('[data-testid=tour] [data-num]')]"
                         ".map((b) => [b.dataset.num, b.dataset.raw]))")


def cells(page, n_layer: int, n_head: int) -> list[float]:
    """The head map's values, layer after layer."""
    return [float(page.get_attribute(f"[data-testid=head-cell-{layer}-{h}]", "data-value"))
            for layer in range(n_layer) for h in range(n_head)]


def flat(m: list[list[float]]) -> list[float]:
    return [v for row in m for v in row]


def test_the_lesson_runs_head_experiments_on_a_text_the_model_predicts(browser, small_server):
    """On a text explainer-small hardly predicts (a loss over half of ln V), the lesson's head steps run on the
    numbers from 1 to 20: the map, the ablation and the pruning curve show that text, with a note saying so and
    the way back to the learner's text."""
    text = "Data visualization empowers users to"
    srv = small_server
    own = api(srv, "analysis/importance", text=text, mode="zero")
    example = api(srv, "trace", text=EXAMPLE)["token_ids"]
    imp = api(srv, "analysis/importance", ids=example, mode="zero")
    ln_v = math.log(8192)
    assert own["clean_loss"] > 0.5 * ln_v >= imp["clean_loss"]  # the premise: the model predicts one, not the other
    L, H = imp["n_layer"], imp["n_head"]
    with open_app(browser, srv.url) as page:
        ref = api(srv, "trace", text=text)
        page.fill("[data-testid=text]", text)
        wait_tokens(page, len(ref["token_ids"]))
        page.click("[data-testid=nav-experiments]")
        page.click("[data-testid=tour-open]")
        page.wait_for_selector("[data-testid=tour][data-step=importance]")
        page.wait_for_function("() => document.querySelector('[data-testid=lesson-body]')?.getAttribute('aria-busy')"
                               " === 'false' && document.querySelector('[data-testid=exp-example]')", timeout=60_000)
        n = card_nums(page)
        assert float(n["exp-own-loss"]) == pytest.approx(own["clean_loss"], rel=1e-6)
        assert float(n["exp-example-loss"]) == pytest.approx(imp["clean_loss"], rel=1e-6)
        assert cells(page, L, H) == pytest.approx(flat(imp["loss_change"]), rel=1e-6)  # the map is the example's
        assert EXAMPLE in page.inner_text("[data-testid=exp-example]")
        shot(page, "exp-lesson-example")
        changes = flat(imp["loss_change"])
        top = divmod(max(range(len(changes)), key=lambda i: changes[i]), H)
        assert n["exp-top-head"] == f"{top[0]},{top[1]}"
        # the ablation step switches that head off on the example
        page.click("[data-testid=tour] .dots button >> nth=2")
        page.wait_for_selector("[data-testid=tour][data-step=ablation]")
        abl = api(srv, "analysis/ablate", ids=example, heads=[list(top)], mode="zero", top=10)
        page.wait_for_function("() => document.querySelector('[data-testid=ablation-table]')")
        after = [number(x) for x in page.locator("[data-testid=abl-after]").all_inner_texts()]
        assert after == pytest.approx([c["after"] for c in abl["changes"]], rel=2e-3)
        # the way back: the learner's own text, on the map
        page.keyboard.press("Escape")
        page.click("[data-testid=exp-example-off]")
        page.wait_for_function("() => !document.querySelector('[data-testid=exp-example]')")
        page.select_option("[data-testid=head-metric]", "loss")
        page.wait_for_function("v => document.querySelector('[data-testid=head-cell-0-0]')?.dataset.value"
                               " === String(v)", arg=own["loss_change"][0][0], timeout=60_000)
        assert cells(page, L, H) == pytest.approx(flat(own["loss_change"]), rel=1e-6)
