"""The offline snapshot of a decoder that runs through transformers' own modules (issue 34): an LFM2 (short
convolutions in layers 0 and 2, attention in 1 and 3), opened from file:// with every other request blocked. The
header says which way it runs; a convolution layer is drawn as what it is, with the trace's values; the attention
layers, the next token and the logit lens show the trace's numbers. Screenshots: test-artifacts/snapshot-generic-*."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
import torch

from transformer_explainer.analysis.ablation import head_importance
from transformer_explainer.analysis.answers import ablate_json, lens_json
from transformer_explainer.analysis.roles import reference_head_roles
from transformer_explainer.notebook import save_snapshot

from .conftest import ARTIFACTS
from .test_app import hover_cell, number, visible

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat"
SHOWN_REL = 6e-3  # 3 significant digits of a float16 value (tests/web/test_snapshot.py)


@pytest.fixture(scope="module")
def lfm2_snapshot(tmp_path_factory):
    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer import load_model

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        pytest.skip("the web UI is not built (cd web && npm ci && npm run build)")
    folder = write_checkpoint("lfm2", tmp_path_factory.mktemp("lfm2") / "lfm2", tokenizer=True)
    model = load_model(str(folder), allow_download=False)
    path = save_snapshot(model, TEXT, tmp_path_factory.mktemp("snap") / "lfm2.html", languages=("en",))
    return model, path


def test_the_snapshot_of_a_hybrid_decoder_opens_offline(browser, lfm2_snapshot):
    model, path = lfm2_snapshot
    trace = model.trace(TEXT)
    ARTIFACTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    own, blocked, requests, errors = path.as_uri(), [], [], []

    def guard(route) -> None:
        if route.request.url == own:
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", guard)
    page = context.new_page()
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(own)
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        chips = page.locator("[data-testid=token-chip]")
        assert chips.count() == trace.n_tokens
        assert [chips.nth(i).locator(".txt").inner_text() for i in range(trace.n_tokens)] == \
            [visible(t) for t in trace.tokens]
        runs = page.get_by_test_id("model-runs")
        assert runs.get_attribute("data-runs") == "transformers"
        assert "runs through transformers" in runs.inner_text() and "Lfm2ForCausalLM" in runs.inner_text()
        page.screenshot(path=str(ARTIFACTS / "snapshot-generic-1-overview.png"), full_page=True)

        # layer 0, a short convolution: drawn as what it is, its input's and output's length at the focus token
        page.get_by_test_id("nav-attention").click()
        page.wait_for_selector("[data-testid=mixer-layer]")
        assert page.get_by_test_id("mixer-layer").get_attribute("data-kind") == "short_conv"
        assert page.locator("[data-testid=attention-layers-offered] button").all_inner_texts() == ["Layer 1",
                                                                                                   "Layer 3"]
        page.wait_for_function("() => document.querySelectorAll('[data-testid=mixer-norms] tbody tr').length > 0"
                               " && !document.querySelector('[data-testid=mixer-norms]').textContent.includes('…')")
        cells = page.locator("[data-testid=mixer-norms] tr.focus td").all_inner_texts()
        pos = int(cells[0].rsplit("(", 1)[1].rstrip(")"))
        want = [float(trace[f"blocks.0.conv.{s}"][pos].norm()) for s in ("in", "out")]
        assert [float(c) for c in cells[1:]] == pytest.approx(want, rel=SHOWN_REL)
        page.screenshot(path=str(ARTIFACTS / "snapshot-generic-2-convolution.png"), full_page=True)

        # layer 3's attention: a weight read off the picture (head 1, query 4 -> key 2)
        page.get_by_test_id("attention-layer-3").click()
        page.click("[data-testid=head-picker] button:text-is('1')")
        page.wait_for_selector("[data-testid=attn-pattern] .pic")
        T = trace.n_tokens
        text = hover_cell(page, "attn-pattern", 4, 2, T, T)
        assert number(text.split(":")[-1]) == pytest.approx(float(trace["blocks.3.attn.pattern"][1, 4, 2]),
                                                            rel=SHOWN_REL, abs=6e-4)
        page.screenshot(path=str(ARTIFACTS / "snapshot-generic-3-attention.png"), full_page=True)

        # the next token, as the app's default sampling (the 10 likeliest) gives it
        page.get_by_test_id("nav-output").click()
        page.wait_for_selector("[data-testid=cand-prob-0]")
        top = torch.topk(trace.next_token_logits(), 10)
        probs = torch.softmax(top.values, -1)
        for i, tid in enumerate(top.indices[:5].tolist()):
            shown = page.locator(f"[data-testid=cand-token-{i}]").inner_text()
            assert shown == visible(model.tokenizer.token_text(tid))
            assert number(page.locator(f"[data-testid=cand-prob-{i}]").inner_text()) == pytest.approx(
                float(probs[i]), rel=2e-3)

        # the logit lens, from the file
        page.get_by_test_id("nav-experiments").click()
        page.wait_for_selector("[data-testid=lens-table]")
        lens = lens_json(model, trace, [T - 1], 5)
        rows = page.locator("[data-testid=lens-row]")
        assert rows.count() == model.config.n_layer + 1
        for i, layer in enumerate(lens["layers"]):
            col = layer["positions"][0]
            assert rows.nth(i).locator("[data-testid=lens-rank]").inner_text() == str(col["target_rank"])
        page.screenshot(path=str(ARTIFACTS / "snapshot-generic-4-lens.png"), full_page=True)

        # each head of the attention layers switched off, from the file; a convolution layer has no heads to switch off
        page.click("[data-testid=exp-tab-heads]")
        page.wait_for_selector("[data-testid=head-cell-3-1]")
        imp = head_importance(model, trace.token_ids, mode="zero")
        for layer, h in ((1, 0), (3, 1)):
            shown = page.get_by_test_id(f"head-cell-{layer}-{h}").inner_text()
            assert number(shown) == pytest.approx(float(imp.loss_change[layer, h]), abs=6e-3)
        # a convolution layer's row is one label, no cells
        assert page.get_by_test_id("head-row-none-0").inner_text().startswith("short-convolution layer:")
        assert page.locator("[data-testid^=head-cell-0-]").count() == 0
        page.click("[data-testid=head-cell-3-1]")
        page.wait_for_selector("[data-testid=ablation-table]")
        ref = ablate_json(model, trace.token_ids, [(3, 1)], "zero", 10)
        after = [number(x) for x in page.locator("[data-testid=abl-after]").all_inner_texts()]
        assert after == pytest.approx([c["after"] for c in ref["changes"]], rel=2e-3)
        page.screenshot(path=str(ARTIFACTS / "snapshot-generic-5-heads.png"), full_page=True)
        # the heads' roles on the reference set, from the file: the attention layers' scores, the others a label
        page.select_option("[data-testid=head-metric]", "previous_token")
        page.wait_for_selector("[data-testid=head-map][data-metric=previous_token]")
        roles = reference_head_roles(model).scores["previous_token"]
        for layer, h in ((1, 0), (3, 1)):
            shown = float(page.get_attribute(f"[data-testid=head-cell-{layer}-{h}]", "data-value"))
            assert shown == pytest.approx(float(roles[layer, h]), rel=1e-5)
        assert page.get_by_test_id("head-row-none-2").inner_text().startswith("short-convolution layer:")
        assert page.locator("[data-testid=error]").count() == 0
    finally:
        context.close()
    assert not blocked, f"the snapshot tried to load: {blocked}"
    assert not [u for u in requests if u != own and urlparse(u).scheme not in ("data", "blob")]
    assert not errors, f"errors in the page: {errors}"


def test_the_heads_tab_counts_only_the_attention_layers_heads(browser, lfm2_snapshot):
    # LFM2: attention in 2 of its 4 layers; the pruning counts (and the server prunes) only their heads
    from .test_snapshot import offline

    model, path = lfm2_snapshot
    c = model.config
    n = len(c.attention_layers) * c.n_head
    assert n < c.n_layer * c.n_head
    with offline(browser, path) as page:
        page.get_by_test_id("nav-experiments").click()
        page.click("[data-testid=exp-tab-heads]")
        page.wait_for_selector("[data-testid=head-cell-3-1]")
        assert page.get_by_test_id("prune-limit").get_attribute("placeholder") == str(n)
        assert page.get_by_test_id("prune-limit").get_attribute("max") == str(n)
        # without re-scoring: each head alone, then each removal on top of the others (2n passes)
        assert f"({2 * n} forward passes)" in page.get_by_test_id("prune").inner_text()
        page.screenshot(path=str(ARTIFACTS / "snapshot-generic-6-prune.png"), full_page=True)


def test_why_this_token_names_the_generic_parts_offline(browser, lfm2_snapshot):
    # the same formula as the live app's on such a model: its mixers, no position embedding, the norm as x·s·γ + b
    from .test_snapshot import offline

    model, path = lfm2_snapshot
    with offline(browser, path) as page:
        page.get_by_test_id("nav-attribution").click()
        page.wait_for_selector("[data-testid=attr-ranked] [data-testid=attr-row]", timeout=30_000)
        kinds = page.locator("[data-testid=attr-row]").evaluate_all("els => els.map(e => e.dataset.kind)")
        assert kinds and set(kinds) <= {"embed", "head", "mlp", "mixer"}, kinds
        frame = page.locator("[data-view=attribution]").inner_text()
        assert "each layer's token mixer" in frame and "position embedding" not in frame
        # the convolution layers (0, 2) write no heads: their rows have no value, and the page says why
        assert "rows of layers 0, 2:" in page.get_by_test_id("attr-map-whole").inner_text()
        page.screenshot(path=str(ARTIFACTS / "snapshot-generic-7-attribution.png"), full_page=True)


@pytest.fixture(scope="module")
def gemma4_snapshot(tmp_path_factory):
    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer import load_model
    from transformer_explainer.errors import InputError

    folder = write_checkpoint("gemma4_text", tmp_path_factory.mktemp("gemma4") / "gemma4", tokenizer=True)
    model = load_model(str(folder), allow_download=False)
    with pytest.raises(InputError) as refusal:
        model.attribute(TEXT)
    path = save_snapshot(model, TEXT, tmp_path_factory.mktemp("snap") / "gemma4.html", languages=("en", "zh"),
                         ablations=False)
    return str(refusal.value), path


@pytest.mark.parametrize(("lang", "why"), [("en", "no attribution, since the model's logit cannot be split"),
                                           ("zh", "这个模型的 logit 无法拆分")])
def test_a_refused_attribution_says_why_offline(browser, gemma4_snapshot, lang, why):
    # Gemma 4's per-layer inputs: the file carries no attribution because the model refuses one, not for its size
    from .test_snapshot import offline

    sentence, path = gemma4_snapshot
    with offline(browser, path, lang=lang) as page:
        page.get_by_test_id("nav-attribution").click()
        note = page.get_by_test_id("attr-offline")
        note.wait_for()
        page.wait_for_timeout(500)  # the attribution asked for has been refused by now
        text = note.inner_text()
        assert why in text and sentence in text, text
        assert "left out" not in text and "文件大小" not in text
        assert page.get_by_test_id("attr-error").count() == 0  # said once, in the note
        page.screenshot(path=str(ARTIFACTS / f"snapshot-generic-8-refused-{lang}.png"), full_page=True)
