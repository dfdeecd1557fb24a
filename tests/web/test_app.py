"""The app in a real browser: what the page shows equals what the API computes."""

from __future__ import annotations

import re

import httpx
import pytest
import torch

from .conftest import ARTIFACTS

pytestmark = pytest.mark.browser

TEXT = "The quick brown fox jumps over the lazy dog"
APP_SAMPLING = {"temperature": 1, "top_k": 10, "seed": 42}  # what the page starts with (state.svelte.ts)


def visible(text: str) -> str:
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")


def number(s: str) -> float:
    """A value as the page prints it: '−0.1234', '3.721e-5', '0.003721%'."""
    m = re.search(r"[−-]?[\d.]+(?:e[−-]?\d+)?%?", s.replace("−", "-"))
    assert m, f"no number in {s!r}"
    v = m.group(0)
    return float(v[:-1]) / 100 if v.endswith("%") else float(v)


def api(server, path: str, **body) -> dict:
    r = httpx.post(server.url + "api/" + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def f32(t: dict):
    from transformer_explainer.encoding import decode_array

    return decode_array(t["data"], t["shape"], t["dtype"])


def wait_tokens(page, n: int) -> None:
    page.wait_for_function("n => document.querySelectorAll('[data-testid=token-chip]').length === n", arg=n,
                           timeout=30_000)


def hover_cell(page, testid: str, r: int, c: int, rows: int, cols: int) -> str:
    box = page.locator(f"[data-testid={testid}] .pic").bounding_box()
    page.mouse.move(box["x"] + (c + 0.5) * box["width"] / cols, box["y"] + (r + 0.5) * box["height"] / rows)
    ro = page.locator(f"[data-testid={testid}-readout]")
    page.wait_for_function("el => el.textContent.trim().length > 0", arg=ro.element_handle())
    return ro.inner_text()


def shot(page, name: str, full_page: bool = True) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)


def test_page_values_equal_api_values(page, live_server):
    ref = api(live_server, "trace", text=TEXT, top_n=15, sampling=APP_SAMPLING)
    T = len(ref["token_ids"])
    page.fill("[data-testid=text]", TEXT)
    wait_tokens(page, T)
    page.wait_for_selector(".view:not(.busy)")
    # tokens, with their leading spaces visible, and ids
    chips = page.locator("[data-testid=token-chip]")
    for i, tok in enumerate(ref["tokens"]):
        assert chips.nth(i).locator(".txt").inner_text() == visible(tok["text"])
        assert chips.nth(i).locator(".id").inner_text() == str(tok["id"])
    shot(page, "01-tokens")

    # an attention cell: layer 1, head 2, query 3 looking at key 1
    page.click("[data-testid=nav-attention]")
    page.click("[aria-label='Layer 1'][role=radio]")
    page.click("[data-testid=head-picker] button:text-is('2')")
    page.wait_for_selector("[data-testid=attn-pattern] .pic")
    pat = api(live_server, "tensors", ids=ref["token_ids"],
              tensors=[{"name": "blocks.1.attn.pattern", "head": 2, "dtype": "float32"}])["tensors"][0]
    text = hover_cell(page, "attn-pattern", 3, 1, T, T)
    q, k = visible(ref["tokens"][3]["text"]), visible(ref["tokens"][1]["text"])
    assert f"query token “{q}” (3) attends to key token “{k}” (1)" in text, text
    assert number(text.split(":")[-1]) == pytest.approx(float(f32(pat)[3, 1]), abs=6e-4)
    masked = hover_cell(page, "attn-pattern", 1, 3, T, T)
    assert "cannot see" in masked
    shot(page, "06-attention")

    # an MLP value: unit 5 after GELU at the focus token (the last one), layer 1
    page.click("[data-testid=nav-mlp]")
    page.wait_for_selector("[data-testid=mlp-post] .pic")
    mlp = api(live_server, "tensors", ids=ref["token_ids"],
              tensors=[{"name": "blocks.1.mlp.post", "position": T - 1, "dtype": "float32"}])["tensors"][0]
    M = mlp["shape"][0]
    text = hover_cell(page, "mlp-post", 0, 5, 1, M)
    assert text.startswith("[5] ")
    assert number(text[4:]) == pytest.approx(float(f32(mlp)[5]), abs=2e-3, rel=2e-3)
    shot(page, "09-mlp")

    # the top probabilities
    page.click("[data-testid=nav-output]")
    page.wait_for_selector("[data-testid=cand-prob-0]")
    for i, c in enumerate(ref["next"]["candidates"][:10]):
        assert page.locator(f"[data-testid=cand-token-{i}]").inner_text() == visible(c["text"])
        assert number(page.locator(f"[data-testid=cand-prob-{i}]").inner_text()) == pytest.approx(c["prob"], rel=2e-3)
    shot(page, "10-output")


def test_temperature_follows_softmax(page, live_server, tiny_model):
    page.fill("[data-testid=text]", TEXT)
    ids = tiny_model.encode(TEXT)
    wait_tokens(page, len(ids))
    page.click("[data-testid=nav-output]")
    page.wait_for_selector("[data-testid=cand-prob-0]")
    logits = tiny_model.trace(TEXT).next_token_logits()
    for temperature in (0.5, 1.5):
        before = page.locator("[data-testid=cand-prob-0]").inner_text()
        page.fill("[data-testid=temperature-number]", str(temperature))
        page.press("[data-testid=temperature-number]", "Enter")
        page.wait_for_function("b => document.querySelector('[data-testid=cand-prob-0]').textContent !== b",
                               arg=before, timeout=30_000)
        top = torch.topk(logits, 10).values  # the page's default top-k = 10 keeps these and renormalises
        probs = torch.softmax(top / temperature, -1)
        for i in range(10):
            shown = number(page.locator(f"[data-testid=cand-prob-{i}]").inner_text())
            assert shown == pytest.approx(float(probs[i]), rel=2e-3), (temperature, i)
    # greedy: one token keeps all the mass
    page.fill("[data-testid=temperature-number]", "0")
    page.press("[data-testid=temperature-number]", "Enter")
    page.wait_for_function("() => document.querySelector('[data-testid=cand-prob-0]').textContent === '100%'",
                           timeout=30_000)
    assert "1 tokens survive" in page.locator("[data-testid=n-kept]").inner_text()


def test_generate_appends_a_token(page, live_server):
    page.fill("[data-testid=text]", TEXT)
    n = len(api(live_server, "trace", text=TEXT)["token_ids"])
    wait_tokens(page, n)
    page.click("[data-testid=nav-output]")
    sampled = page.locator("[data-testid=sampled-token]").inner_text()
    page.click("[data-testid=append-sampled]")
    wait_tokens(page, n + 1)
    last = page.locator("[data-testid=token-chip]").nth(n).locator(".txt").inner_text()
    assert last == sampled
    assert page.locator("[data-testid=text]").input_value().endswith(sampled.replace("␣", " "))
    assert str(n) in page.locator("[data-testid=computed-note]").inner_text()  # only position n was computed
    # pick another candidate instead of the sampled one
    pick = page.locator("[data-testid=cand-token-3]").inner_text()
    page.click("[data-testid=cand-token-3]")
    wait_tokens(page, n + 2)
    assert page.locator("[data-testid=token-chip]").nth(n + 1).locator(".txt").inner_text() == pick
    shot(page, "11-generation")


def test_language_switch(page):
    assert page.locator("h1").inner_text() == "Transformer Explainer"
    page.select_option("[data-testid=lang]", "zh")
    page.wait_for_function("() => document.querySelector('h1').textContent === 'Transformer 图解'")
    assert page.locator("[data-testid=nav-attention]").inner_text().strip() == "带掩码的自注意力"
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    page.click("[data-testid=nav-output]")
    shot(page, "12-chinese")
    page.select_option("[data-testid=lang]", "en")
    page.wait_for_function("() => document.querySelector('h1').textContent === 'Transformer Explainer'")


def test_every_view_renders_and_tour(page, tiny_model):
    views = ["tokens", "embedding", "blocks", "layernorm-ln1", "qkv", "attention", "heads", "residual",
             "layernorm-ln2", "mlp", "layernorm-final", "output"]
    for i, v in enumerate(views):
        page.click(f"[data-testid=nav-{v}]")
        page.wait_for_selector("section.view")
        page.wait_for_function("() => !document.querySelector('.view .placeholder')", timeout=30_000)
        assert page.locator("section.view .formula").inner_text().strip()
        shot(page, f"view-{i:02d}-{v}")
    # the output projection W_O of a head (which the original Transformer Explainer leaves out), real values
    page.click("[data-testid=nav-heads]")
    page.click("[data-testid=show-wo]")
    page.wait_for_selector("[data-testid=heads-wo] .pic")
    wo = tiny_model.weight("blocks.0.attn.W_O")[0]
    text = hover_cell(page, "heads-wo", 2, 7, wo.shape[0], wo.shape[1])
    assert text.startswith("W_O[0][2, 7] = ")
    assert number(text.split("=")[1]) == pytest.approx(float(wo[2, 7]), abs=1e-3, rel=1e-3)
    shot(page, "view-heads-wo")
    page.click("[data-testid=tour-open]")
    i = 0
    while True:  # every step of the lesson, to its last
        page.wait_for_selector("[data-testid=tour]")
        i += 1
        if i == 1:
            page.wait_for_timeout(400)  # the outline glides to its target
            shot(page, f"tour-{i}", full_page=False)  # the outline is fixed to the viewport
        if page.locator("[data-testid=tour-next]").count() == 0:
            break
        page.click("[data-testid=tour-next]")
    assert i >= 3
    page.keyboard.press("Escape")
    assert page.locator("[data-testid=tour]").count() == 0


def test_keyboard_and_long_input(page, tiny_model):
    text = " ".join(["word"] * 100)
    page.fill("[data-testid=text]", text)
    n = len(tiny_model.encode(text))
    wait_tokens(page, n)
    page.locator("[data-testid=token-chip][aria-selected=true]").focus()
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    assert "position 97" in page.locator(".wrap .head").inner_text() or f"position {n - 3}" in page.locator(
        ".wrap .head").inner_text()
    page.click("[data-testid=nav-attention]")
    page.wait_for_selector("[data-testid=attn-pattern] .pic")
    shot(page, "long-attention")
    too_long = " ".join(["word"] * 200)
    page.fill("[data-testid=text]", too_long)
    page.wait_for_selector("[data-testid=error]", timeout=30_000)
    assert "more than the 128 that fit" in page.locator("[data-testid=error]").inner_text()


def test_split_character_is_bracketed(page, live_server):
    """An emoji that GPT-2 splits into byte tokens: the chips show <0xF0>-style bytes, bracketed, with
    the character they make, in the token bar and in the tokens table."""
    text = "I 🎉 it"
    ref = api(live_server, "trace", text=text)
    page.fill("[data-testid=text]", text)
    wait_tokens(page, len(ref["tokens"]))
    group = page.locator("[data-testid=char-group]")
    assert group.count() == 1
    assert group.locator("[data-testid=token-chip]").count() == 3
    assert group.locator(".joined").inner_text() == "␣🎉"
    assert group.locator("[data-testid=token-chip] .txt").nth(1).inner_text() == "<0x8E>"
    cell = page.locator("[data-testid=char-group-cell]")
    assert cell.count() == 1 and cell.get_attribute("rowspan") == "3"
    page.locator("[data-testid=token-bar]").screenshot(path=str(ARTIFACTS / "split-character-bar.png"))
    page.locator("[data-testid=token-table]").screenshot(path=str(ARTIFACTS / "split-character-table.png"))
