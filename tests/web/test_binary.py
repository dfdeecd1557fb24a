"""The app's binary answers in a real browser: the values it decodes from them and shows are the
JSON API's float32 values, digit for digit (the readouts print 4 decimals, more than float16 holds)."""

from __future__ import annotations

import httpx
import pytest

from .test_app import TEXT, f32, hover_cell, wait_tokens

pytestmark = pytest.mark.browser


def tensor(server, ids: list[int], **spec) -> object:
    r = httpx.post(server.url + "api/tensors", json={"ids": ids, "tensors": [{**spec, "dtype": "float32"}]},
                   timeout=30)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    return f32(r.json()["tensors"][0])


def shown(v: float) -> str:
    """A value as the app's num() prints it (4 decimals, the minus sign U+2212), for |v| in [1e-3, 1e5)."""
    return f"{v:.4f}".replace("-", "−")


def test_binary_values_equal_json_values(page, live_server):
    ids = httpx.post(live_server.url + "api/trace", json={"text": TEXT}, timeout=30).json()["token_ids"]
    T = len(ids)
    page.fill("[data-testid=text]", TEXT)
    wait_tokens(page, T)
    page.click("[data-testid=nav-attention]")
    page.wait_for_selector("[data-testid=attn-pattern] .pic")
    calls = page.evaluate("window.__teCalls.filter((c) => c.path === 'trace' || c.path === 'tensors')"
                          ".map((c) => c.binary)")
    assert calls and all(calls), "the app should ask for (and get) binary answers"

    pat = tensor(live_server, ids, name="blocks.0.attn.pattern", head=0)
    tokens = page.locator("[data-testid=token-chip] .txt").all_inner_texts()
    checked = 0
    for r, c in [(T - 1, 0), (T - 1, T - 1), (4, 2), (6, 5), (3, 3)]:
        v = float(pat[r, c])
        if not 1e-3 <= abs(v) < 1e5:
            continue
        text = hover_cell(page, "attn-pattern", r, c, T, T)
        assert text.endswith(f": {shown(v)}") and f"“{tokens[c]}” ({c})" in text, (text, v)
        checked += 1
    assert checked >= 3

    # the MLP strip of the focus token (the last): several units, exact to the printed digit
    page.click("[data-testid=nav-mlp]")
    page.wait_for_selector("[data-testid=mlp-post] .pic")
    post = tensor(live_server, ids, name="blocks.0.mlp.post", position=T - 1)
    M = post.shape[0]
    checked = 0
    for j in range(0, M, max(1, M // 12)):
        v = float(post[j])
        if not 1e-3 <= abs(v) < 1e5:
            continue
        text = hover_cell(page, "mlp-post", 0, j, 1, M)
        assert text == f"[{j}] {shown(v)}", (text, v)
        checked += 1
    assert checked >= 6
