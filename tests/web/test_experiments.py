"""The Experiments area in a real browser against the live server: what it shows equals what
/api/analysis computes, and ablating a head changes the shown next-token distribution."""

from __future__ import annotations

import pytest

from .test_app import api, number, shot, visible, wait_tokens

pytestmark = pytest.mark.browser

TEXT = "The cat sat on the mat, and then the cat slept on the mat."


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
