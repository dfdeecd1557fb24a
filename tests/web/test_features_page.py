"""The Features page, in a real browser against the live server: a tiny random GPT-2 laid out as a built-in model
that ships two sparse autoencoders (SAELens's format, written in the test), one with feature pages built on a random
corpus. The features listed per token and over the text equal POST /api/features's answer; hovering a feature lights
exactly the tokens where the API lists it; a feature's page shows the API's contexts and histogram; its promoted
tokens and the (missing) description come only after the guess is revealed; an autoencoder without pages says so;
a model that ships no autoencoder has no Features button and the page says why in one sentence; a Pixel 7 in 中文
(screenshot in test-artifacts/features/)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from tests.conftest import random_ids
from tests.unit.test_features_encode import write_sae
from transformer_explainer import load_model
from transformer_explainer.features.pages import PageSpec, build_pages, write_pages
from transformer_explainer.features.sae import load_sae

from .conftest import ARTIFACTS, LiveServer, cannot_run, open_app
from .test_app import visible, wait_tokens

pytestmark = pytest.mark.browser

TEXT = "The cat sat on the mat, and then the cat slept on the mat again"
HOOK, BARE = "blocks.1.hook_resid_post", "blocks.0.hook_resid_post"  # with pages; without
SPEC = PageSpec(top=4, quantiles=(0.5, 0.9), per_quantile=1, before=4, after=2, bins=8, logits=5, window=24)
PIXEL7 = {"viewport": {"width": 412, "height": 915}, "device_scale_factor": 2.625, "is_mobile": True, "has_touch": True}
SHOTS = ARTIFACTS / "features"
D, K = 64, 16  # the tiny GPT-2's width; the signed-basis autoencoder's k


def write_signed_basis_sae(folder: Path, hook: str, mean: torch.Tensor) -> Path:
    """An autoencoder in SAELens's format whose 2D features are the residual stream's coordinates, each sign apart
    (W_enc = [I, -I], W_dec = [I; -I]), centred on `mean` (b_dec): TopK keeps the K largest |x_i - mean_i|, so its
    reconstruction explains a real part of the variance (a random autoencoder explains none) and its features fire
    on many tokens."""
    eye = torch.eye(D)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"W_enc": torch.cat([eye, -eye], 1).contiguous(), "b_enc": torch.zeros(2 * D),
               "W_dec": torch.cat([eye, -eye], 0).contiguous(), "b_dec": mean.float().contiguous()},
              str(folder / "sae_weights.safetensors"))
    (folder / "cfg.json").write_text(json.dumps({"d_in": D, "d_sae": 2 * D, "k": K, "architecture": "topk",
                                                 "hook_name": hook, "dtype": "float32", "apply_b_dec_to_input": True,
                                                 "normalize_activations": "none"}))
    return folder


def describe(j: int) -> str:
    """What feature j of the signed-basis autoencoder detects (true by its construction)."""
    return f"coordinate {j % D} of the residual stream {'above' if j < D else 'below'} its mean"


@pytest.fixture(scope="module")
def sae_model(tiny_gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The tiny GPT-2 laid out as a built-in model that ships two autoencoders, the deeper one with its pages."""
    folder = tmp_path_factory.mktemp("features-page") / "tiny-sae"
    shutil.copytree(tiny_gpt2_dir, folder)
    model = load_model(str(folder), allow_download=False)
    mean = model.trace(TEXT)["blocks.1.resid_post"].mean(0)
    sae_dir = write_signed_basis_sae(folder / "saes" / HOOK, HOOK, mean)
    write_sae(folder / "saes" / BARE, BARE, seed=6)
    model.source = "builtin"  # what a model found in the package's builtin/ folder says of itself
    corpus = np.array(random_ids(SPEC.window * 12, model.config.vocab_size, seed=11))
    [(arrays, meta)] = build_pages(model, [load_sae(sae_dir)], corpus, SPEC, corpus_name="random")
    meta["descriptions"] = {str(j): describe(j) for j in range(0, 2 * D, 2)}  # the even features' alone
    write_pages(sae_dir, arrays, meta)
    return model


@pytest.fixture(scope="module")
def sae_server(sae_model) -> Iterator[LiveServer]:
    from transformer_explainer.server import create_app

    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        cannot_run("the web UI is not built (cd web && npm ci && npx vite build)")
    with LiveServer(create_app({"tiny-sae": sae_model})) as srv:
        yield srv


def post(server: LiveServer, path: str, **body) -> dict:
    r = httpx.post(server.url + "api/" + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def get(server: LiveServer, path: str) -> dict:
    r = httpx.get(server.url + "api/" + path, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def open_features(page, server: LiveServer, hook: str = HOOK) -> dict:
    """Type the text, open the Features page at `hook` and return the API's features of the same ids."""
    page.fill("[data-testid=text]", TEXT)
    ids = post(server, "trace", text=TEXT)["token_ids"]
    wait_tokens(page, len(ids))
    page.dispatch_event("[data-testid=nav-features]", "click")
    page.wait_for_selector("[data-testid=feat-tokens]", timeout=30_000)
    hooks = {h["hook"]: h for h in get(server, "features/hooks")["hooks"]}
    if page.locator("[data-testid=feat-hook]").input_value() != hook:
        page.select_option("[data-testid=feat-hook]", hook)
    want = post(server, "features", ids=ids, hook=hook, top=hooks[hook]["k"])
    page.wait_for_function(
        "n => document.querySelectorAll('[data-testid=feat-token]').length === n"
        " && !document.querySelector('.busy') && document.querySelector('[data-testid=feat-pos-line]')",
        arg=len(ids), timeout=30_000)
    return want


def chips(page, testid: str) -> list[tuple[int, str]]:
    loc = page.locator(f"[data-testid={testid}] [data-testid=feat-chip]")
    return [(int(c.get_attribute("data-id")), c.locator(".num").inner_text()) for c in loc.all()]


def lit_positions(page) -> set[int]:
    return {int(x.get_attribute("data-pos")) for x in page.locator("[data-testid=feat-token][data-lit='1']").all()}


def test_features_equal_the_api_and_hover_lights_their_tokens(browser, sae_server) -> None:
    with open_app(browser, sae_server.url) as page:
        want = open_features(page, sae_server)
        positions = want["positions"]
        assert page.locator("[data-testid=feat-token]").count() == len(positions)
        # the features of a token: the API's, in its order (first, a middle one, the last token)
        for p in (0, len(positions) // 2, len(positions) - 1):
            page.click(f"[data-testid=feat-token][data-pos='{p}']")
            page.wait_for_selector(f"[data-testid=feat-pos] h3:has-text('position {p})')")
            got = chips(page, "feat-pos")
            assert [i for i, _ in got] == [f["id"] for f in positions[p]["features"]]
            assert [float(a.replace("−", "-")) for _, a in got] == pytest.approx(
                [f["activation"] for f in positions[p]["features"]], abs=1e-4)
            line = page.locator("[data-testid=feat-pos-line]").inner_text()
            assert f"{positions[p]['active']} features are active here" in line
            assert f"{100 * positions[p]['relative_error']:.4g}"[:4] in line.replace("%", "")
        # the summary: the variance explained and the error over the text, as the API computed them
        summary = page.locator("[data-testid=features-summary]").inner_text()
        ev = want["explained_variance"]
        assert ev is not None
        if ev >= 0:
            assert f"Over these {len(positions)} tokens the reconstruction explains {100 * ev:.4g}"[:-1] in summary
        else:  # a random autoencoder: its error is larger than the vectors' spread, and the page says so
            assert summary.startswith("Over this text the reconstruction explains none of the variance")
            assert f"{100 * ev:.4g}"[:4].replace("-", "−") in summary
        rel_mean = sum(q["relative_error"] for q in positions) / len(positions)
        assert ("That is a large share" in summary) == (rel_mean >= 0.5)
        rel = [q["relative_error"] for q in positions]
        assert f"{100 * sum(rel) / len(rel):.4g}"[:4] in summary
        # the text's features: by largest activation; hovering one lights exactly the tokens where the API lists it
        best: dict[int, float] = {}
        where: dict[int, set[int]] = {}
        for q in positions:
            for f in q["features"]:
                best[f["id"]] = max(best.get(f["id"], 0.0), f["activation"])
                where.setdefault(f["id"], set()).add(q["position"])
        rows = [int(r.get_attribute("data-id")) for r in page.locator("[data-testid=feat-row]").all()]
        assert rows == sorted(best, key=lambda i: (-best[i], i))[:12]
        for fid in (rows[0], rows[-1]):
            page.hover(f"[data-testid=feat-row-chip][data-id='{fid}']")
            assert lit_positions(page) == where[fid]
            line = page.locator("[data-testid=feat-lit]").inner_text()
            n = len(where[fid])
            assert (f"fires on {n} of {len(positions)} tokens" if n > 1 else f"fires on 1 of {len(positions)}") in line
        page.mouse.move(0, 0)
        page.wait_for_function("() => !document.querySelector('[data-testid=feat-token][data-lit=\"1\"]')")


def test_a_feature_page_then_guess_then_reveal(browser, sae_server) -> None:
    with open_app(browser, sae_server.url) as page:
        want = open_features(page, sae_server)
        # the feature that fires most in the text, from its row
        fid = int(page.locator("[data-testid=feat-row]").first.get_attribute("data-id"))
        page.click(f"[data-testid=feat-row-chip][data-id='{fid}']")
        page.wait_for_selector("[data-testid=feat-density]", timeout=30_000)
        ref = get(sae_server, f"features/{HOOK}/{fid}")
        # its top contexts: the API's tokens, with each token's activation
        ctx = page.locator("[data-testid=feat-top] [data-testid=feat-ctx]")
        assert ctx.count() == len(ref["top_contexts"]) > 0
        for i, c in enumerate(ref["top_contexts"]):
            toks = ctx.nth(i).locator("[data-testid=feat-ctx-token]")
            assert toks.all_inner_texts() == [visible(x) for x in c["tokens"]]
            acts = [float(x.get_attribute("data-activation")) for x in toks.all()]
            assert acts == pytest.approx(c["activations"], abs=1e-5)
        quant = sum(len(q["contexts"]) for q in ref["quantiles"])
        assert page.locator("[data-testid=feat-quantile] [data-testid=feat-ctx]").count() == quant
        bars = [int(r.get_attribute("data-count")) for r in page.locator("[data-testid=feat-hist] rect").all()]
        assert bars == ref["counts"]
        density = page.locator("[data-testid=feat-density]").inner_text()
        assert f"({ref['corpus_tokens']} tokens)" in density and "random" in density
        # the text keeps the feature lit while its page is open
        fires = {q["position"] for q in want["positions"] if any(f["id"] == fid for f in q["features"])}
        assert lit_positions(page) == fires
        # guess first: no promoted tokens and no description before the reveal
        assert page.locator("[data-testid=feat-answer]").count() == 0
        assert page.locator("[data-testid=feat-promoted]").count() == 0
        page.fill("[data-testid=feat-guess]", "cats")
        page.click("[data-testid=feat-reveal]")
        page.wait_for_selector("[data-testid=feat-answer]")
        assert page.locator("[data-testid=feat-your-guess]").inner_text() == "Your guess: “cats”."
        shown = page.locator("[data-testid=feat-promoted] .lt").all_inner_texts()
        assert shown == [visible(x["token"]) for x in ref["promoted"]]
        assert page.locator("[data-testid=feat-suppressed] .lt").all_inner_texts() == [
            visible(x["token"]) for x in ref["suppressed"]]
        # the description the pages carry for the feature (the even ones'), or the sentence that none was written
        desc = page.locator("[data-testid=feat-description]")
        if fid % 2 == 0:
            assert ref["description"] == describe(fid)
            assert desc.get_attribute("data-written") == "1"
            assert desc.inner_text() == f"The project's description: {describe(fid)}"
        else:
            assert ref["description"] is None
            assert desc.get_attribute("data-written") == "0"
            assert desc.inner_text().startswith("No description was written for this feature")
        # the guess survives hiding the answer again
        page.click("[data-testid=feat-hide]")
        assert page.locator("[data-testid=feat-answer]").count() == 0
        assert page.locator("[data-testid=feat-guess]").input_value() == "cats"
        # a feature of the other parity: the other wording, and a fresh guess
        other = next(int(r.get_attribute("data-id")) for r in page.locator("[data-testid=feat-row]").all()
                     if int(r.get_attribute("data-id")) % 2 != fid % 2)
        page.click(f"[data-testid=feat-row-chip][data-id='{other}']")
        page.wait_for_selector(f"[data-testid=feat-page][data-id='{other}'] [data-testid=feat-density]")
        assert page.locator("[data-testid=feat-guess]").input_value() == ""
        page.click("[data-testid=feat-reveal]")
        assert page.locator("[data-testid=feat-your-guess]").inner_text() == "You revealed without writing a guess."
        assert page.locator("[data-testid=feat-description]").get_attribute("data-written") == (
            "1" if other % 2 == 0 else "0")


def test_an_autoencoder_without_pages_says_so(browser, sae_server) -> None:
    with open_app(browser, sae_server.url) as page:
        want = open_features(page, sae_server, BARE)
        assert want["hook"] == BARE
        # a random autoencoder explains none of the variance, and the page says so rather than a negative share
        ev = want["explained_variance"]
        summary = page.locator("[data-testid=features-summary]").inner_text()
        assert ev is not None and ev < 0
        assert summary.startswith("Over this text the reconstruction explains none of the variance")
        first = want["positions"][0]["features"][0]["id"]
        page.click("[data-testid=feat-token][data-pos='0']")
        page.click(f"[data-testid=feat-pos] [data-testid=feat-chip][data-id='{first}']")
        note = page.locator("[data-testid=feat-no-pages]")
        note.wait_for()
        assert note.inner_text() == (f"The pages of the autoencoder at {BARE} were not shipped, so feature #{first} "
                                     "has no page here.")


def test_a_model_without_autoencoders_has_no_features_page(browser, live_server) -> None:
    with open_app(browser, live_server.url) as page:
        note = page.locator("[data-testid=features-none-note]")
        note.wait_for(timeout=30_000)
        assert note.inner_text() == "Features: this model ships no sparse autoencoder to read them with."
        assert page.locator("[data-testid=nav-features]").count() == 0
    # a link straight to the page: the sentence why, in place of the page
    with open_app(browser, live_server.url, query="#view=features") as page:
        none = page.locator("[data-testid=features-none]")
        none.wait_for(timeout=30_000)
        assert none.inner_text().startswith("tiny ships no sparse autoencoder, so there are no features to show")


def test_pixel7_chinese(browser, sae_server) -> None:
    with open_app(browser, sae_server.url, query="?lang=zh", **PIXEL7) as page:
        open_features(page, sae_server)
        assert "特征" in page.locator("[data-view=features] h2").inner_text()
        assert "个词元上，重建解释了" in page.locator("[data-testid=features-summary]").inner_text()
        fid = int(page.locator("[data-testid=feat-row]").first.get_attribute("data-id"))
        page.locator(f"[data-testid=feat-row-chip][data-id='{fid}']").tap()
        page.wait_for_selector("[data-testid=feat-density]", timeout=30_000)
        page.fill("[data-testid=feat-guess]", "猫")
        page.locator("[data-testid=feat-reveal]").tap()
        page.wait_for_selector("[data-testid=feat-answer]")
        desc = page.locator("[data-testid=feat-description]").inner_text()
        none = "这个特征没有写下描述：请根据它的上下文和下面的词元自己判断。"
        assert desc == (f"项目写下的描述：{describe(fid)}" if fid % 2 == 0 else none)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= PIXEL7["viewport"]["width"], f"the page is {width} px wide on a 412 px phone"
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("[data-view=features]").evaluate("el => el.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(SHOTS / "features-pixel7-zh.png"), full_page=False)
        page.locator("[data-testid=feat-page]").scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "feature-page-pixel7-zh.png"), full_page=False)


def test_the_offline_snapshot_shows_the_features_of_its_text(browser, sae_model, sae_server, tmp_path: Path) -> None:
    """The snapshot (and the notebook widget, which shows the same file) carries the text's features at the default
    autoencoder (the middle one by depth; of blocks 0 and 1: block 0's); a feature's page says it needs the live app."""
    from transformer_explainer.notebook import save_snapshot

    file = save_snapshot(sae_model, TEXT, tmp_path / "features.html")
    ids = post(sae_server, "trace", text=TEXT)["token_ids"]
    want = post(sae_server, "features", ids=ids, hook=BARE, top=8)  # write_sae's k
    own, blocked, errors = file.as_uri(), [], []
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    ctx.route("**/*", lambda route: route.continue_() if route.request.url == own
              else (blocked.append(route.request.url), route.abort()))
    page = ctx.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(own)
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        page.click("[data-testid=nav-features]")
        page.wait_for_function("n => document.querySelectorAll('[data-testid=feat-token]').length === n",
                               arg=len(ids), timeout=30_000)
        assert page.locator("[data-testid=feat-hook] option").all_inner_texts() == [f"layer 0: {BARE} (256 features)"]
        for p in (0, len(ids) - 1):
            page.click(f"[data-testid=feat-token][data-pos='{p}']")
            page.wait_for_selector(f"[data-testid=feat-pos] h3:has-text('position {p})')")
            got = chips(page, "feat-pos")
            assert [i for i, _ in got] == [f["id"] for f in want["positions"][p]["features"]]
            # a snapshot page prints 3 significant digits (what its float16 tensors hold)
            assert [float(a.replace("−", "-")) for _, a in got] == pytest.approx(
                [f["activation"] for f in want["positions"][p]["features"]], rel=2e-3)
        first = want["positions"][0]["features"][0]["id"]
        page.click(f"[data-testid=feat-pos] [data-testid=feat-chip][data-id='{first}']")
        note = page.locator("[data-testid=feat-page-offline]")
        note.wait_for()
        assert note.inner_text().startswith(f"Feature #{first}'s page (its contexts on the corpus")
    finally:
        ctx.close()
    assert not blocked, f"the snapshot tried to load: {blocked}"
    assert not errors, f"errors in the page: {errors}"
