"""The lesson "What the model represents" (web/src/lessons/features.ts) on the tiny random GPT-2 laid out as a built-in
model that ships a sparse autoencoder in SAELens's format: here the one whose features are the residual stream's
coordinates each sign apart, with feature pages built on a random corpus (tests/web/test_features_page.py's), and for
the claims also test_features_page.py's model, whose default autoencoder is a random one without pages (its variance
explained below zero), and the built-in explainer-small with the autoencoders and pages it ships.
The Features page's lesson button opens this lesson; its steps quote the numbers of /api/features, the feature's page,
/api/steer and the MLP's hidden layer (each compared here with the API's answer); every claim of every step holds on
several texts (web/tests/lessons/claims.features.ts, run by vitest); a Pixel 7 in 中文 (screenshot
test-artifacts/lesson-features-phone-zh.png)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import random_ids
from transformer_explainer import load_model
from transformer_explainer.features.pages import build_pages, write_pages
from transformer_explainer.features.sae import load_sae

from . import test_features_page as fp
from .conftest import ARTIFACTS, LiveServer, open_app
from .test_app import api, f32
from .test_lesson import CJK, goto, nums, set_text, step_id
from .test_lesson_claims import passed, vitest

pytestmark = pytest.mark.browser

sae_model = fp.sae_model
sae_server = fp.sae_server  # default autoencoder: random weights, no pages
TEXT = fp.TEXT
STEER_TIMES = 4  # web/src/lessons/features.ts
TEXTS = [TEXT, "Data visualization empowers users to", "The quick brown fox jumps over the lazy dog",
         "def fibonacci(n):\n    if n < 2:\n        return n", "a"]


@pytest.fixture(scope="module")
def paged_server(tiny_gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The tiny GPT-2 shipping the signed-basis autoencoder alone (so it is the default), with its pages."""
    from transformer_explainer.server import create_app

    folder = tmp_path_factory.mktemp("lesson-features") / "tiny-sae"
    shutil.copytree(tiny_gpt2_dir, folder)
    model = load_model(str(folder), allow_download=False)
    mean = model.trace(TEXT)["blocks.1.resid_post"].mean(0)
    sae_dir = fp.write_signed_basis_sae(folder / "saes" / fp.HOOK, fp.HOOK, mean)
    model.source = "builtin"
    corpus = np.array(random_ids(fp.SPEC.window * 12, model.config.vocab_size, seed=11))
    [(arrays, meta)] = build_pages(model, [load_sae(sae_dir)], corpus, fp.SPEC, corpus_name="random")
    meta["descriptions"] = {str(j): fp.describe(j) for j in range(0, 2 * fp.D, 2)}
    write_pages(sae_dir, arrays, meta)
    with LiveServer(create_app({"tiny-sae": model})) as srv:
        yield srv


def _open_lesson(page, server) -> list[int]:
    ids = set_text(page, TEXT, server)
    page.dispatch_event("[data-testid=nav-features]", "click")
    page.wait_for_selector("[data-testid=feat-tokens]", timeout=30_000)
    page.dispatch_event("[data-testid=tour-open]", "click")
    page.wait_for_selector("[data-testid=tour]")
    assert page.get_attribute("[data-testid=tour]", "data-lesson") == "features"
    return ids


def test_the_steps_quote_the_apis_numbers(browser, paged_server):
    srv = paged_server
    hooks = httpx.get(srv.url + "api/features/hooks", params={"model": "tiny-sae"}).json()["hooks"]
    h = next(x for x in hooks if x["default"])
    with open_app(browser, srv.url) as page:
        ids = _open_lesson(page, srv)
        T = len(ids)
        goto(page, "neuron")
        post = f32(api(srv, "tensors", ids=ids, tensors=[{"name": f"blocks.{h['layer']}.mlp.post", "dtype": "float32"}])
                   ["tensors"][0])
        j = int(np.argmax(post.max(0)))
        got = nums(page)
        assert int(got["neuron"]) == j and float(got["neuron-max"]) == pytest.approx(float(post[:, j].max()), rel=1e-5)
        assert int(got["neuron-over"]) == int((post[:, j] > post[:, j].max() / 2).sum())
        assert page.get_attribute("[data-testid=tour]", "data-target") == "mlp-pre"
        page.screenshot(path=str(ARTIFACTS / "lesson-features-neuron-en.png"))

        feats = api(srv, "features", ids=ids, hook=h["hook"], top=h["k"])
        goto(page, "sae")
        got = nums(page)
        assert int(got["d-sae"]) == feats["d_sae"] == h["d_sae"] and int(got["k"]) == feats["k"]
        assert int(got["active-hi"]) == max(p["active"] for p in feats["positions"])
        # the feature read: the most active of those not active at every token, else the most active
        fires = {}
        for p in feats["positions"]:
            for f in p["features"]:
                fires.setdefault(f["id"], []).append((f["activation"], -p["position"]))
        some = [i for i in fires if len(fires[i]) < T] or list(fires)
        fid = min(some, key=lambda i: (-max(fires[i])[0], i))
        best = (max(fires[fid])[0], -fid, -max(fires[fid])[1])
        at = best[2]
        goto(page, "feature")
        got = nums(page)
        assert int(got["feature"]) == fid and int(got["feature-pos"]) == at
        assert float(got["feature-max"]) == pytest.approx(best[0], rel=1e-5)
        assert int(got["fires"]) == len(fires[fid])
        page.wait_for_selector(f"[data-testid=feat-page][data-id='{fid}']")
        fpage = httpx.get(srv.url + f"api/features/{h['hook']}/{fid}", params={"model": "tiny-sae"}).json()
        assert h["pages"]
        if h["pages"]:
            assert float(got["corpus-max"]) == pytest.approx(fpage["max_activation"], rel=1e-5)

        goto(page, "guess")
        if h["pages"]:
            assert "promoted" not in nums(page)  # hidden until the guess is revealed
            page.fill("[data-testid=feat-guess]", "a coordinate")
            page.click("[data-testid=feat-reveal]")
            page.wait_for_function("() => !!document.querySelector('[data-testid=tour] [data-num=promoted]')")
            shown = page.eval_on_selector_all("[data-testid=feat-promoted] .lt", "els => els.map(e => e.textContent)")
            assert len(fpage["promoted"]) == len(shown) and nums(page)["promoted"] == ", ".join(shown[:3])

        goto(page, "steer")
        steer = api(srv, "steer", text=TEXT, strength=STEER_TIMES * best[0], feature={"layer": h["layer"], "id": fid})
        got = nums(page)
        assert float(got["strength"]) == pytest.approx(steer["strength"], rel=1e-5)
        body = page.inner_text("#lesson-body")
        start = " ".join(t["text"].replace(" ", "␣") for t in steer["plain"][:6])  # the first 6 tokens, quoted
        assert start in body, body
        if steer["changed_at"] is not None:
            assert " ".join(t["text"].replace(" ", "␣") for t in steer["steered"][:6]) in body, body
        page.wait_for_selector("[data-testid=steer-result]")
        shown = float(page.get_attribute("[data-testid=steer-result]", "data-strength"))
        assert shown == pytest.approx(steer["strength"])
        page.screenshot(path=str(ARTIFACTS / "lesson-features-steer-en.png"))

        goto(page, "miss")
        got = nums(page)
        assert float(got["ev"]) == pytest.approx(feats["explained_variance"], rel=1e-5)
        rel = [p["relative_error"] for p in feats["positions"]]
        assert float(got["error-mean"]) == pytest.approx(sum(rel) / T, rel=1e-4)
        assert page.get_attribute("[data-testid=tour]", "data-target") == "feat-tokens"
        page.screenshot(path=str(ARTIFACTS / "lesson-features-miss-en.png"))


def test_the_lesson_on_a_phone_in_chinese(browser, paged_server):
    srv = paged_server
    with open_app(browser, srv.url, viewport={"width": 412, "height": 839}, screen={"width": 412, "height": 915},
                  device_scale_factor=2.625, is_mobile=True, has_touch=True, locale="zh-CN") as page:  # a Pixel 7
        if page.evaluate("() => document.documentElement.lang") != "zh-CN":
            page.select_option("[data-testid=lang]", "zh")
            page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
        _open_lesson(page, srv)
        goto(page, "feature")
        body = page.inner_text("#lesson-body")
        assert CJK.search(body) and "最活跃的特征" in body and "{" not in body, body
        page.screenshot(path=str(ARTIFACTS / "lesson-features-phone-zh.png"))
        assert step_id(page) == "feature"


@pytest.fixture(scope="module")
def small_server() -> Iterator[LiveServer]:
    """The built-in explainer-small with the autoencoders and feature pages it ships."""
    from transformer_explainer.server import create_app

    with LiveServer(create_app({"explainer-small": load_model("explainer-small", allow_download=False)})) as srv:
        yield srv


@pytest.mark.parametrize("which", ["paged_server", "sae_server", "small_server"])
def test_every_claim_holds_on_several_texts(which, request):
    srv = request.getfixturevalue(which)
    texts = TEXTS if which != "sae_server" else TEXTS[1:3] + TEXTS[-1:]
    r = vitest("tests/lessons/lessons.test.ts", env={"TE_SERVER": srv.url, "TE_LESSONS": "features",
                                                     "TE_TEXTS": json.dumps(texts)})
    assert r.returncode == 0, r.stdout[-12000:] + r.stderr[-4000:]
    assert passed(r) == 1, r.stdout[-4000:]
