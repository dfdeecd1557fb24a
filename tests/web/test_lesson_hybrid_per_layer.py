"""The chapter "Attention that forgets, compresses and sinks" (web/src/lessons/hybrid.ts) on a random-weight Gemma 4
checkpoint (tests/helpers/hf_checkpoints.py: per-layer inputs in its 4 layers, the last 2 reusing earlier layers' keys
and values). The lesson button, hidden for a model whose layers are all attention before, opens this chapter; its
per-layer step opens the residual view of the layer where the per-layer write weighs most against the MLP's and quotes,
at the focus token, lengths that equal the API's; its KV-sharing step opens the Embedding stage's table and quotes the
capabilities' sharing and cache sizes. On a Pixel 7 in 中文 too. Every claim of every step holds on the 20 texts of
web/tests/lessons/texts.ts (web/tests/lessons/claims.hybrid.ts, run by vitest). Screenshots:
test-artifacts/lesson-hybrid-gemma4-*.png."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app
from .test_app import api, f32
from .test_lesson import CJK, goto, nums, set_text
from .test_lesson_claims import passed, vitest

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat and the cat"


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    pytest.importorskip("transformers")
    from pathlib import Path

    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    folder = write_checkpoint("gemma4_text", tmp_path_factory.mktemp("gemma4"), tokenizer=True)
    model = load_model(str(folder), allow_download=False, dtype="float32")
    with LiveServer(create_app({"random-gemma4": model})) as srv:
        yield srv


def _writes(server: LiveServer, layers: list[int], pos: int) -> dict[int, tuple[float, float]]:
    """Each layer's per-layer write and MLP write at `pos`, by the API: their lengths."""
    names = [f"blocks.{i}.{s}" for i in layers for s in ("per_layer_out", "per_layer.resid", "resid_mid")]
    got = api(server, "tensors", text=TEXT, tensors=[{"name": n, "position": pos, "dtype": "float32"} for n in names])
    t = {n: f32(x) for n, x in zip(names, got["tensors"], strict=True)}
    return {i: (float(np.linalg.norm(t[f"blocks.{i}.per_layer_out"])),
                float(np.linalg.norm(t[f"blocks.{i}.per_layer.resid"] - t[f"blocks.{i}.resid_mid"]))) for i in layers}


def test_the_per_layer_steps_quote_the_apis_numbers(browser, gemma4):
    caps = httpx.get(gemma4.url + "api/models").json()["models"][0]["config"]["capabilities"]
    pl = caps["per_layer"]
    assert pl["kv_sources"] == [0, 1, 0, 1] and all(m == ["attention"] for m in caps["mixers"])
    with open_app(browser, gemma4.url) as page:
        ids = set_text(page, TEXT, gemma4)
        assert page.get_by_test_id("tour-open").is_visible()  # offered for a model whose layers are all attention
        page.click("[data-testid=tour-open]")
        page.wait_for_selector("[data-testid=tour]")
        assert page.get_attribute("[data-testid=tour]", "data-lesson") == "hybrid"
        goto(page, "per-layer")
        pos = len(ids) - 1  # the focus: the last token
        writes = _writes(gemma4, pl["per_layer_layers"], pos)
        top = max(writes, key=lambda i: (writes[i][0] / writes[i][1], -i))
        got = nums(page)
        assert int(got["ple-layers"]) == len(writes) and int(got["ple-width"]) == pl["d_per_layer"]
        assert int(got["ple-params"]) == pl["per_layer_table_params"]
        assert int(got["ple-top-layer"]) == top
        shown = [float(got[k]) for k in ("ple-top-write", "ple-top-mlp", "ple-top-ratio")]
        np.testing.assert_allclose(shown, [writes[top][0], writes[top][1], writes[top][0] / writes[top][1]], rtol=1e-4)
        longer = sum(w > m for w, m in writes.values())
        body = page.inner_text("#lesson-body")
        said = ("in all" if longer == len(writes) else "in any of" if longer == 0 else f"in {longer} of the")
        assert said in body and ("weighs most" if writes[top][0] > writes[top][1] else "comes closest") in body, body
        # the view beside it: that layer's per-layer write, outlined
        assert page.get_attribute("[data-testid=tour]", "data-target") == "per-layer-write"
        page.wait_for_selector(f"[data-testid=per-layer-write][data-layer='{top}']")
        page.screenshot(path=str(ARTIFACTS / "lesson-hybrid-gemma4-per-layer-en.png"))
        goto(page, "kv-share")
        got = nums(page)
        at = pl["tokens"].index(32768)
        assert {int(got[f"kv-layer-{i}"]): int(got[f"kv-source-of-{i}"]) for i in (2, 3)} == {2: 0, 3: 1}
        assert int(got["kv-shared-layers"]) == 2 and int(got["kv-tokens"]) == 32768
        assert [int(got[k]) for k in ("kv-shared", "kv-unshared", "kv-saved")] == [
            pl["kv_shared_bytes"][at], pl["kv_unshared_bytes"][at], pl["kv_saved_bytes"][at]]
        assert page.get_attribute("[data-testid=tour]", "data-target") == "per-layer-inputs"
        page.wait_for_selector("[data-testid=per-layer-inputs]")


def test_the_per_layer_step_on_a_phone_in_chinese(browser, gemma4):
    with open_app(browser, gemma4.url, viewport={"width": 412, "height": 839}, screen={"width": 412, "height": 915},
                  device_scale_factor=2.625, is_mobile=True, has_touch=True, locale="zh-CN") as page:  # a Pixel 7
        set_text(page, TEXT, gemma4)
        if page.evaluate("() => document.documentElement.lang") != "zh-CN":
            page.select_option("[data-testid=lang]", "zh")
            page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
        page.dispatch_event("[data-testid=tour-open]", "click")
        page.wait_for_selector("[data-testid=tour]")
        for _ in range(20):  # the arrow key, as the phone walk does
            if page.get_attribute("[data-testid=tour]", "data-step") == "per-layer":
                break
            page.keyboard.press("ArrowRight")
        goto(page, "per-layer")
        body = page.inner_text("#lesson-body")
        assert CJK.search(body) and "逐层写入" in body and "{" not in body, body
        page.screenshot(path=str(ARTIFACTS / "lesson-hybrid-gemma4-per-layer-phone-zh.png"))


def test_every_claim_holds_on_twenty_texts(gemma4):
    r = vitest("tests/lessons/lessons.test.ts", env={"TE_SERVER": gemma4.url, "TE_LESSONS": "hybrid"})
    assert r.returncode == 0, r.stdout[-12000:] + r.stderr[-4000:]
    assert passed(r) == 1, r.stdout[-4000:]
