"""The app on Gemma 4 and OLMo 3 (both through transformers): the Embedding stage of a Gemma 4 shows each layer's
per-layer input for the focus token (the API's embed.per_layer_inputs, derived by our own module), the lengths of its
two parts and whose keys and values each layer attends with, with the KV cache that sharing saves; the residual view
of a Gemma 4 layer shows its gated per-layer write. The residual view of an OLMo 3 shows every layer's two writes (the
norms after its sublayers) against their bounds sqrt(D) * max|gamma| and the stream's length. Every number equals
the API's; every sentence is the one its numbers choose. On a phone in 中文 too. Screenshots:
test-artifacts/ple-*.png, postnorm-*.png."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app
from .test_app import api, f32

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat"
PHONE = {"viewport": {"width": 412, "height": 839}, "screen": {"width": 412, "height": 915},
         "device_scale_factor": 2.625, "is_mobile": True, "has_touch": True}


def _server(tmp_path_factory: pytest.TempPathFactory, model_type: str) -> Iterator[LiveServer]:
    pytest.importorskip("transformers")
    from pathlib import Path

    from tests.helpers.hf_checkpoints import write_checkpoint
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    folder = write_checkpoint(model_type, tmp_path_factory.mktemp(model_type), tokenizer=True)
    with LiveServer(create_app({model_type: load_model(str(folder), allow_download=False, dtype="float32")})) as srv:
        yield srv


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from _server(tmp_path_factory, "gemma4_text")


@pytest.fixture(scope="module")
def olmo3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from _server(tmp_path_factory, "olmo3")


def _tensors(server, names: list[str], pos: int) -> dict[str, np.ndarray]:
    got = api(server, "tensors", text=TEXT, tensors=[{"name": n, "position": pos, "dtype": "float32"} for n in names])
    return {n: f32(t) for n, t in zip(names, got["tensors"], strict=True)}


def _values(page, strip: str) -> np.ndarray:
    return np.array([float(v) for v in page.locator(f"[data-strip={strip}]").get_attribute("data-values").split(",")])


def _wait_strips(page, strips: list[str]) -> None:
    for s in strips:
        page.wait_for_function("p => document.querySelector(`[data-strip=${p}]`)?.dataset.values?.length > 0",
                               arg=s, timeout=15_000)


def _open_embedding(page) -> int:
    page.wait_for_selector("[data-testid=token-chip]", timeout=30_000)
    page.wait_for_selector("[data-testid=per-layer-inputs]", timeout=30_000)
    _wait_strips(page, [f"ple-slice-{i}" for i in range(4)])
    page.wait_for_function("() => document.querySelector('[data-testid=per-layer-said]')?.textContent.length > 0")
    return page.locator("[data-testid=token-chip]").count() - 1


def test_gemma4_per_layer_inputs_and_write_on_a_desktop(browser, gemma4):
    with open_app(browser, gemma4.url, query=f"#text={TEXT}&view=embedding") as page:
        pos = _open_embedding(page)
        api_ = _tensors(gemma4, ["embed.per_layer_inputs", "embed.per_layer", "embed.per_layer_projected"], pos)
        rows = page.locator("[data-testid=per-layer-table] tbody tr").all()
        assert len(rows) == 4
        own_longer = 0
        for i, r in enumerate(rows):
            np.testing.assert_allclose(_values(page, f"ple-slice-{i}"), api_["embed.per_layer_inputs"][i], rtol=1e-6,
                                       atol=1e-7)
            own, proj = (np.linalg.norm(api_[n][i]) for n in ("embed.per_layer", "embed.per_layer_projected"))
            assert float(r.get_attribute("data-own")) == pytest.approx(own, rel=1e-5)
            assert float(r.get_attribute("data-proj")) == pytest.approx(proj, rel=1e-5)
            own_longer += own > proj
        assert [int(r.get_attribute("data-src")) for r in rows] == [0, 1, 0, 1]
        said = page.get_by_test_id("per-layer-said").inner_text()
        assert "looks up 8 values for each of the 4 layers" in said
        if own_longer == 4:
            assert "longer than the part from the main embedding in all 4 layers" in said
        elif own_longer == 0:
            assert "at least as long as the token's own part in all 4 layers" in said
        else:
            assert f"in {own_longer} of the 4 layers" in said
        # sharing: layers 2 and 3 reuse 0's and 1's; at 32k tokens (float32, 2 key/value heads of 16, a window of 4)
        assert "2 layers compute no keys and values of their own" in said and "(2 → 0, 3 → 1)" in said
        assert "the KV cache holds 8.00 MiB, where it would hold 16.0 MiB" in said
        assert "8.00 MiB saved (in float32)" in said
        page.screenshot(path=str(ARTIFACTS / "ple-1-desktop-embedding.png"), full_page=True)
        page.get_by_test_id("per-layer-inputs").screenshot(path=str(ARTIFACTS / "ple-2-desktop-table.png"))

    layer = 2
    with open_app(browser, gemma4.url, query=f"#text={TEXT}&view=residual&layer={layer}") as page:
        page.wait_for_selector("[data-testid=per-layer-write]", timeout=30_000)
        _wait_strips(page, ["plw-input", "plw-act", "plw-post"])
        page.wait_for_function("() => document.querySelector('[data-testid=per-layer-write-said]')?.textContent.length")
        names = [f"blocks.{layer}.{s}" for s in ("per_layer.input", "per_layer.act", "per_layer.post", "per_layer_out",
                                                 "per_layer.resid")]
        v = _tensors(gemma4, names, pos)
        for strip, n in zip(("plw-input", "plw-act", "plw-post"), names, strict=False):
            np.testing.assert_allclose(_values(page, strip), v[n], rtol=1e-6, atol=1e-7)
        post = v[names[2]]
        j = int(np.argmax(np.abs(post)))
        a, r = np.linalg.norm(v[names[3]]), np.linalg.norm(v[names[4]])
        said = page.get_by_test_id("per-layer-write-said").inner_text()
        assert f"the largest product is value {j}: input {v[names[0]][j]:.3f} × gate {v[names[1]][j]:.3f} = " \
               f"{post[j]:.3f}" in said
        pct = 100 * a / r
        assert f"the write has length {a:.2f}, {pct:.{2 if pct < 1 else 1}f}% of the stream it is added to ({r:.2f})" \
            in said
        assert ("a small change" in said) == (pct < 10)
        page.get_by_test_id("per-layer-write").screenshot(path=str(ARTIFACTS / "ple-3-desktop-write.png"))


def test_gemma4_on_a_phone_in_chinese(browser, gemma4):
    with open_app(browser, gemma4.url, query=f"#text={TEXT}&view=embedding&lang=zh", **PHONE) as page:
        page.wait_for_function("() => document.documentElement.lang.startsWith('zh')")
        _open_embedding(page)
        said = page.get_by_test_id("per-layer-said").inner_text()
        assert "为 4 层各查出 8 个值" in said and "有 2 层不计算自己的键和值" in said and "共节省 8.00 MiB" in said
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth + 1")
        page.screenshot(path=str(ARTIFACTS / "ple-4-phone-zh.png"), full_page=True)
        page.get_by_test_id("per-layer-inputs").scroll_into_view_if_needed()
        page.get_by_test_id("per-layer-inputs").screenshot(path=str(ARTIFACTS / "ple-5-phone-zh-table.png"))


def _open_post_norm(page) -> None:
    page.wait_for_selector("[data-testid=post-norm-writes]", timeout=30_000)
    page.wait_for_function("() => document.querySelector('[data-testid=post-norm-said]')?.textContent.length > 0",
                           timeout=15_000)


def test_olmo3_writes_against_their_bounds_on_a_desktop(browser, olmo3):
    with open_app(browser, olmo3.url, query=f"#text={TEXT}&view=residual&layer=1") as page:
        _open_post_norm(page)
        pos = page.locator("[data-testid=token-chip]").count() - 1
        caps = httpx.get(olmo3.url + "api/models").json()["models"][0]["config"]["capabilities"]
        names = ["blocks.0.resid_pre", *(f"blocks.{i}.{s}" for i in range(4)
                                         for s in ("ln1_post.out", "ln2_post.out", "resid_post"))]
        v = {n: float(np.linalg.norm(x)) for n, x in _tensors(olmo3, names, pos).items()}
        rows = page.locator("[data-testid=post-norm-table] tbody tr").all()
        assert len(rows) == 4
        best = (-1.0, 0, "")
        for i, r in enumerate(rows):
            attn, mlp = v[f"blocks.{i}.ln1_post.out"], v[f"blocks.{i}.ln2_post.out"]
            ab, mb = caps["write_bounds"][i]
            assert float(r.get_attribute("data-attn")) == pytest.approx(attn, rel=1e-5)
            assert float(r.get_attribute("data-mlp")) == pytest.approx(mlp, rel=1e-5)
            assert float(r.get_attribute("data-after")) == pytest.approx(v[f"blocks.{i}.resid_post"], rel=1e-5)
            assert (float(r.get_attribute("data-attn-bound")), float(r.get_attribute("data-mlp-bound"))) == (ab, mb)
            assert attn <= ab and mlp <= mb  # the bound holds
            for ratio, which in ((attn / ab, "attention"), (mlp / mb, "MLP")):
                if ratio > best[0]:
                    best = (ratio, i, which)
        said = page.get_by_test_id("post-norm-said").inner_text()
        assert "√64 = 8.00" in said
        assert f"the write closest to its bound is layer {best[1]}'s {best[2]}:" in said
        assert f"({100 * best[0]:.1f}%)" in said
        x0, xl = v["blocks.0.resid_pre"], v["blocks.3.resid_post"]
        assert (f"grows from {x0:.2f} entering layer 0 to {xl:.2f} after layer 3" in said) == (xl > x0)
        total = sum(sum(b) for b in caps["write_bounds"])
        assert f"bounds add up to {total:.2f}, so it can be no longer than {x0 + total:.2f}" in said
        assert xl <= x0 + total
        page.screenshot(path=str(ARTIFACTS / "postnorm-1-desktop.png"), full_page=True)
        page.get_by_test_id("post-norm-writes").screenshot(path=str(ARTIFACTS / "postnorm-2-desktop-table.png"))


def test_olmo3_on_a_phone_in_chinese(browser, olmo3):
    with open_app(browser, olmo3.url, query=f"#text={TEXT}&view=residual&layer=0&lang=zh", **PHONE) as page:
        page.wait_for_function("() => document.documentElement.lang.startsWith('zh')")
        _open_post_norm(page)
        said = page.get_by_test_id("post-norm-said").inner_text()
        assert "一次写入的长度都不超过其归一化的 √D × max|γ|（√64 = 8.00）" in said and "最接近上界的写入是第" in said
        assert "所以它的长度不会超过" in said
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth + 1")
        page.screenshot(path=str(ARTIFACTS / "postnorm-3-phone-zh.png"), full_page=True)
        page.get_by_test_id("post-norm-writes").scroll_into_view_if_needed()
        page.get_by_test_id("post-norm-writes").screenshot(path=str(ARTIFACTS / "postnorm-4-phone-zh-table.png"))
