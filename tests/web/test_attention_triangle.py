"""The attention view asks for its head's pattern as the lower triangle (issue 40: half the bytes at the full
context), and shows every value of it as before: the cells below and on the diagonal are the API's float32
values, digit for digit, over the binary and the JSON answer alike; the cells above say the key is hidden."""

from __future__ import annotations

import pytest

from .test_app import TEXT, api, f32, hover_cell, wait_tokens
from .test_binary import shown

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("query", ["", "?json"])
def test_the_pattern_comes_as_a_triangle_and_shows_every_value(page, live_server, query):
    ref = api(live_server, "trace", text=TEXT)
    ids, T = ref["token_ids"], len(ref["token_ids"])
    page.goto(live_server.url + query)
    page.wait_for_selector("body[data-ready='1']")
    page.click("[data-testid=nav-attention]")
    page.wait_for_selector("[data-testid=attn-pattern] .pic")
    with page.expect_request(lambda r: r.url.endswith("api/trace")) as req:
        page.fill("[data-testid=text]", TEXT)
    wait_tokens(page, T)
    page.wait_for_selector(".view:not(.busy)")
    asked = [s for s in req.value.post_data_json["include"] if s["name"].endswith("attn.pattern")]
    assert asked and all(s.get("triangle") for s in asked), asked
    layer, head = int(asked[0]["name"].split(".")[1]), asked[0]["head"]
    pat = f32(api(live_server, "tensors", ids=ids, tensors=[{"name": f"blocks.{layer}.attn.pattern", "head": head,
                                                              "dtype": "float32"}])["tensors"][0])
    page.wait_for_selector("[data-testid=attn-pattern] .pic")
    checked = 0
    for r, c in [(T - 1, 0), (T - 1, T - 1), (T - 1, T // 2), (T // 2, T // 2), (2, 1), (1, 0)]:
        v = float(pat[r, c])
        text = hover_cell(page, "attn-pattern", r, c, T, T)
        if 1e-3 <= abs(v) < 1e5:
            assert text.endswith(f": {shown(v)}"), (text, v)
            checked += 1
    assert checked >= 4
    assert "cannot see" in hover_cell(page, "attn-pattern", 0, T - 1, T, T)
    assert "cannot see" in hover_cell(page, "attn-pattern", T - 2, T - 1, T, T)
