"""The attention view's heat map in Chromium, painted one 32-bit pixel per cell (issue 40): each cell's pixel is its
value's colour on the view's scale (white to dark purple, square root, up to the largest weight shown), channels in
order and opaque: every hidden cell above the diagonal is the scale's 0 (d3's Purples at 0, #fcfbfd), the largest
weight its darkest (#3f007d), and a larger weight is never lighter than a smaller one."""

from __future__ import annotations

import pytest

from .test_app import TEXT, api, f32, wait_tokens

pytestmark = pytest.mark.browser

PIXELS_JS = """() => {
  const c = document.querySelector('[data-testid=attn-pattern] canvas');
  return { w: c.width, h: c.height, px: Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data) };
}"""


def test_the_pattern_pixels_are_their_values_colours(page, live_server):
    ref = api(live_server, "trace", text=TEXT)
    ids, T = ref["token_ids"], len(ref["token_ids"])
    page.goto(live_server.url)
    page.wait_for_selector("body[data-ready='1']")
    page.click("[data-testid=nav-attention]")
    with page.expect_request(lambda r: r.url.endswith("api/trace")) as req:
        page.fill("[data-testid=text]", TEXT)
    wait_tokens(page, T)
    page.wait_for_selector(".view:not(.busy)")
    page.wait_for_selector("[data-testid=attn-pattern] canvas")
    spec = next(s for s in req.value.post_data_json["include"] if s["name"].endswith("attn.pattern"))
    pat = f32(api(live_server, "tensors", ids=ids, tensors=[{"name": spec["name"], "head": spec["head"],
                                                              "dtype": "float32"}])["tensors"][0])
    got = page.evaluate(PIXELS_JS)
    assert (got["w"], got["h"]) == (T, T)
    px = got["px"]

    def pixel(r: int, c: int) -> tuple[int, ...]:
        return tuple(px[4 * (r * T + c): 4 * (r * T + c) + 4])

    for r in range(T):
        for c in range(r + 1, T):
            assert pixel(r, c) == (0xFC, 0xFB, 0xFD, 255), (r, c)
    cells = sorted(((float(pat[r, c]), pixel(r, c)) for r in range(T) for c in range(r + 1)), key=lambda x: x[0])
    assert cells[-1][1] == (0x3F, 0x00, 0x7D, 255)
    assert all(p[3] == 255 for _, p in cells)
    for (v0, p0), (v1, p1) in zip(cells, cells[1:], strict=False):
        if v1 > v0:
            assert sum(p1[:3]) <= sum(p0[:3]), ((v0, p0), (v1, p1))
