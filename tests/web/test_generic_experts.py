"""The Experts view on the mixtures that run through transformers and that our own code reads (bridge/moe_lens.py):
DeepSeek-V3 (sigmoid scores, group-limited routing, the choice bias, a shared expert beside the routed ones, weights
times routed_scaling_factor) and gpt-oss (a softmax over the top-k logits alone, clamped SwiGLU experts). Every number
the view shows for the focus block equals the API's tensor; the sentences are the variants the numbers call for (the
weights' sum, whether the bias moved the group scores and changed the choice, the clamp). On a phone in 中文 too, and
in the offline snapshot. Screenshots: test-artifacts/generic-experts-*.png."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from transformer_explainer.encoding import decode_array

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app
from .test_app import api

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat and the dog"
PHONE = {"viewport": {"width": 412, "height": 839}, "screen": {"width": 412, "height": 915},
         "device_scale_factor": 2.625, "is_mobile": True, "has_touch": True}
STEER = 2  # the DeepSeek-V3 layer whose choice bias is set so that it changes the last token's experts


def _steer(model, text: str) -> None:
    """Give expert 0 of the group the last token would not choose by its scores alone (layer STEER) a bias of 5: its
    group then wins, and the bias chooses that group's experts instead (topk_group 1, 2 experts a group, top 2)."""
    tr = model.trace(text)
    s = tr[f"blocks.{STEER}.mlp.router_scores"][-1].float()  # (E,) no bias in it
    plain = int(s.view(2, 2).topk(2, dim=-1).values.sum(-1).argmax())
    gate = model.hf.model.layers[STEER].mlp.gate
    with torch.no_grad():
        gate.e_score_correction_bias.zero_()[2 * (1 - plain)] = 5.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    pytest.importorskip("transformers")
    from pathlib import Path

    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    ds = load_model(str(write_checkpoint("deepseek_v3", tmp_path_factory.mktemp("ds"), tokenizer=True)),
                    allow_download=False)
    _steer(ds, TEXT)
    # a clamp low enough that the random experts' gate and up values cross it (transformers' default, 7, they do not)
    oss = load_model(str(write_checkpoint("gpt_oss", tmp_path_factory.mktemp("oss"), tokenizer=True, swiglu_limit=0.5)),
                     allow_download=False)
    with LiveServer(create_app({"deepseek": ds, "oss": oss})) as srv:
        yield srv


def _tensors(srv: LiveServer, model: str, *specs: dict) -> list[np.ndarray]:
    got = api(srv, "tensors", model=model, text=TEXT, tensors=[{**s, "dtype": "float32"} for s in specs])
    return [decode_array(t["data"], t["shape"], t["dtype"]) for t in got["tensors"]]


def _attr(page, sel: str, name: str) -> list[float]:
    return [float(x) for x in page.eval_on_selector_all(sel, f"els => els.map(e => e.dataset.{name})")]


def _strip(page, testid: str) -> np.ndarray:
    sel = f"[data-strip='{testid}'][data-values]"
    page.wait_for_selector(sel, timeout=15_000)
    return np.array([float(x) for x in page.get_attribute(sel, "data-values").split(",")], dtype=np.float32)


def _open(browser, srv: LiveServer, model: str, layer: int, **kw):
    return open_app(browser, srv.url, query=f"#text={TEXT}&model={model}&view=experts&layer={layer}", **kw)


def _routing_matches(page, values: np.ndarray, idx: np.ndarray, w: np.ndarray) -> None:
    """Every token's row: the router's value for each expert, and its chosen experts with their weights."""
    page.wait_for_selector("[data-testid=route-row] td[data-chosen]", timeout=30_000)
    rows = page.eval_on_selector_all("[data-testid=route-row]", """rows => rows.map(r => ({
        values: [...r.querySelectorAll('td')].map(c => +c.dataset.prob),
        chosen: [...r.querySelectorAll('td[data-chosen]')].map(c => [+c.dataset.expert, +c.dataset.weight])}))""")
    assert len(rows) == len(values)
    for p, r in enumerate(rows):
        np.testing.assert_array_equal(np.float32(r["values"]), values[p])
        assert dict(r["chosen"]) == pytest.approx({int(e): float(x) for e, x in zip(idx[p], w[p], strict=True)},
                                                  abs=0)


def test_deepseek_v3_scores_groups_bias_and_the_shared_expert(browser, served):
    for layer in (1, STEER):
        b = f"blocks.{layer}.mlp"
        with _open(browser, served, "deepseek", layer) as page:
            page.wait_for_selector("[data-testid=experts-routing][data-router=sigmoid_grouped]", timeout=30_000)
            s, idx, w, gs, cg = _tensors(served, "deepseek", *({"name": f"{b}.{n}"} for n in (
                "router_scores", "expert_indices", "expert_weights", "group_scores", "chosen_groups")))
            _routing_matches(page, s, idx, w)
            pos = len(s) - 1
            # the focus token (the last): its scores, its groups' scores with the bias and its chosen groups
            np.testing.assert_array_equal(np.float32(_attr(page, "[data-testid=path-prob]", "value")), s[pos])
            page.wait_for_selector("[data-testid=path-group]")
            np.testing.assert_array_equal(np.float32(_attr(page, "[data-testid=path-group]", "score")), gs[pos])
            plain = np.sort(s[pos].reshape(2, 2), axis=-1)[:, -2:].sum(-1)
            np.testing.assert_allclose(_attr(page, "[data-testid=path-group]", "plain"), plain, rtol=1e-6)
            assert [int(x) for x in _attr(page, "[data-testid=path-group]", "chosen")] == \
                [int(g in cg[pos]) for g in range(2)]
            line = page.get_by_test_id("path-groups-line")
            said = line.inner_text()
            # layer 1: no bias (a random checkpoint's is 0); layer STEER: expert 0 of the other group +5
            steered = layer == STEER
            plain_experts = sorted(range(2 * int(plain.argmax()), 2 * int(plain.argmax()) + 2))
            assert (sorted(idx[pos].astype(int).tolist()) != plain_experts) == steered
            assert line.get_attribute("data-steered") == ("1" if steered else "0")
            assert line.get_attribute("data-biased") == ("1" if steered else "0")
            if steered:
                assert "the bias chose" in said and "The bias moves the groups' scores by" in said
                assert f"experts E{plain_experts[0]}, E{plain_experts[1]} would have been chosen" in said
            else:
                assert "here the bias steers nothing" in said and "the bias changes no group's score" in said
            # the weights: the scores renormalised, times routed_scaling_factor (transformers' default 2.5)
            chosen = s[pos][idx[pos].astype(int)]
            np.testing.assert_allclose(w[pos], 2.5 * chosen / chosen.sum(), rtol=1e-5)
            renorm = page.get_by_test_id("path-renorm")
            assert float(renorm.get_attribute("data-sum")) == pytest.approx(2.5, rel=1e-5)
            assert "times routed_scaling_factor 2.5, so they add up to 2.5000, not 1." in renorm.inner_text()
            # each chosen expert's output, the routed sum, the shared expert's output and what the MLP writes
            eo, routed, shared, out = _tensors(served, "deepseek", {"name": f"{b}.expert_out", "position": pos},
                                               {"name": f"{b}.routed_out", "position": pos},
                                               {"name": f"{b}.shared_out", "position": pos},
                                               {"name": f"blocks.{layer}.mlp_out", "position": pos})
            for k in range(2):
                np.testing.assert_array_equal(_strip(page, f"path-expert-out-{k}"), eo[k])
            np.testing.assert_array_equal(_strip(page, "path-routed-strip"), routed)
            np.testing.assert_array_equal(_strip(page, "path-shared-strip"), shared)
            np.testing.assert_array_equal(_strip(page, "path-sum-strip"), out)
            np.testing.assert_allclose(routed + shared, out, rtol=1e-4, atol=1e-5)
            longer = "shared" if np.linalg.norm(shared) >= np.linalg.norm(routed) else "routed"
            assert page.get_attribute("[data-testid=path-shared-line]", "data-longer") == longer
            assert ("is longer than" if longer == "shared" else "is shorter than") in \
                page.get_by_test_id("path-shared-line").inner_text()
            explain = page.inner_text("section.view[data-view=experts]")
            assert "sigmoid(x · W_router)" in explain and "not how much each counts" in explain
            formula = page.inner_text("section.view[data-view=experts] .formula")
            assert "c = s + b" in formula and "2.5 · s" in formula and "MoE(x) = shared(x) + Σ" in formula
            assert "probabilit" not in page.get_by_test_id("experts-path").inner_text()
            hidden = page.get_by_test_id("generic-hidden").inner_text()  # the note no longer says routing is hidden
            assert "Its experts' routing has a view" in hidden and "experts' routing happen" not in hidden
            if layer == 1:
                page.screenshot(path=str(ARTIFACTS / "generic-experts-1-deepseek.png"), full_page=True)
    with _open(browser, served, "deepseek", 0) as page:  # a dense layer (first_k_dense_replace 1): no MLP view to open
        page.wait_for_selector("[data-testid=experts-dense]", timeout=30_000)
        assert page.locator("[data-testid=open-mlp]").count() == 0


def test_gpt_oss_softmax_over_the_top_k_and_the_clamp(browser, served):
    layer = 1
    b = f"blocks.{layer}.mlp"
    with _open(browser, served, "oss", layer) as page:
        page.wait_for_selector("[data-testid=experts-routing][data-router=softmax_topk]", timeout=30_000)
        logits, idx, w = _tensors(served, "oss", *({"name": f"{b}.{n}"} for n in (
            "router_logits", "expert_indices", "expert_weights")))
        _routing_matches(page, logits, idx, w)
        pos = len(logits) - 1
        top = logits[pos][idx[pos].astype(int)]
        np.testing.assert_allclose(w[pos], np.exp(top - top.max()) / np.exp(top - top.max()).sum(), rtol=1e-5)
        renorm = page.get_by_test_id("path-renorm")
        full = np.exp(logits[pos] - logits[pos].max()) / np.exp(logits[pos] - logits[pos].max()).sum()
        assert float(renorm.get_attribute("data-full-sum")) == pytest.approx(full[idx[pos].astype(int)].sum(),
                                                                             rel=1e-5)
        said = renorm.inner_text()
        assert "a softmax over these 2 logits alone, so they add up to 1.0000" in said
        assert f"(together {full[idx[pos].astype(int)].sum():.4f})" in said
        gate, gate_c, up, up_c = _tensors(served, "oss", *({"name": f"{b}.{n}", "position": pos} for n in (
            "gate", "gate_clamped", "up", "up_clamped")))
        clamp = page.get_by_test_id("path-clamp")
        g, u = int((gate != gate_c).sum()), int((up != up_c).sum())
        assert (int(clamp.get_attribute("data-gate")), int(clamp.get_attribute("data-up"))) == (g, u)
        assert g > 0 and u > 0
        assert f"the clamp cut {g} of the chosen experts' 192 gate values and {u} of their 192 up values" in \
            clamp.inner_text()
        assert "σ(1.702 · gate), its gate clamped to at most 0.5 and its up values to [−0.5, 0.5]" in clamp.inner_text()
        eo, out = _tensors(served, "oss", {"name": f"{b}.expert_out", "position": pos},
                           {"name": f"blocks.{layer}.mlp_out", "position": pos})
        for k in range(2):
            np.testing.assert_array_equal(_strip(page, f"path-expert-out-{k}"), eo[k])
        np.testing.assert_array_equal(_strip(page, "path-sum-strip"), out)
        assert "probabilit" not in page.get_by_test_id("experts-path").inner_text()
        formula = page.inner_text("section.view[data-view=experts] .formula")
        assert "σ(1.702 g)" in formula and "min(xW" in formula and "−0.5, 0.5)" in formula and "softmax" not in formula
        page.screenshot(path=str(ARTIFACTS / "generic-experts-2-gpt-oss.png"), full_page=True)


def test_deepseek_v3_experts_on_a_phone_in_chinese(browser, served):
    with _open(browser, served, "deepseek", STEER, **PHONE) as page:
        page.goto(served.url + f"#text={TEXT}&model=deepseek&view=experts&layer={STEER}&lang=zh")
        page.wait_for_function("() => document.documentElement.lang.startsWith('zh')")
        page.wait_for_selector("[data-testid=path-groups-line]", timeout=30_000)
        page.wait_for_selector("[data-strip='path-shared-strip'][data-values]", timeout=15_000)
        said = page.get_by_test_id("path-groups-line").inner_text()
        assert "加上偏置后选中的是" in said
        assert "所以权重之和是 2.5000，而不是 1。" in page.get_by_test_id("path-renorm").inner_text()
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth + 1")
        page.screenshot(path=str(ARTIFACTS / "generic-experts-3-phone-zh.png"), full_page=True)
        for part in ("experts-routing", "experts-path", "path-groups", "path-groups-line"):
            page.get_by_test_id(part).screenshot(path=str(ARTIFACTS / f"generic-experts-4-phone-zh-{part}.png"))


def test_deepseek_v3_experts_offline(browser, tmp_path_factory):
    """The offline snapshot carries what the view reads: the router's scores and choice (float32 there), the groups."""
    from .test_snapshot import offline
    from .test_snapshot_new_views import _snapshot

    _model, trace, path = _snapshot(tmp_path_factory, "deepseek_v3")
    layer = 1
    with offline(browser, path) as page:
        page.get_by_test_id("nav-experts").click()
        page.get_by_test_id(f"experts-layer-{layer}").click()
        page.wait_for_selector("[data-testid=path-groups-line]", timeout=30_000)
        b = f"blocks.{layer}.mlp"
        s, idx, w = (trace[f"{b}.{n}"].float().numpy() for n in ("router_scores", "expert_indices", "expert_weights"))
        _routing_matches(page, s, idx, w)
        assert "the bias changes no group's score" in page.get_by_test_id("path-groups-line").inner_text()
        assert page.locator("[data-testid=path-group]").count() == 2
        page.screenshot(path=str(ARTIFACTS / "generic-experts-5-offline.png"), full_page=True)
