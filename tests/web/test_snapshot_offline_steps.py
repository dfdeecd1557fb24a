"""What an offline snapshot cannot show, said on the page: a lesson step whose values the file does not carry says so
and offers to skip it (no endless "Fetching", no error in the page); a view of a long text whose tensors the size
budget left out names the budget that would keep them, while the attention view still has its first blocks; and the
candidates' probabilities stay inside the page at a notebook's width (1070 px) and on a phone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from transformer_explainer.notebook import save_snapshot

from .conftest import ARTIFACTS
from .test_snapshot import offline, settle, snaps  # noqa: F401 (snaps: the fixture)

pytestmark = pytest.mark.browser

BLOCKED = {"en": "This offline page cannot show this step", "zh": "这个离线页面无法显示这一步"}
SKIP = {"en": "Skip this step", "zh": "略过这一步"}
# (model, the view the lesson button is pressed on, the lesson it opens, its steps the file cannot show)
CASES = {"why": ("explainer-small", "attribution", "why", ["patch", "pair", "grid", "heads"]),
         "experiments": ("explainer-small", "experiments", "experiments", ["pruning"]),
         "moe": ("explainer-moe", None, "moe", ["ablate"])}


def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="te-snapshot">(.*?)</script>', page, re.S)
    assert m
    return json.loads(m.group(1))


def step_id(page) -> str:
    return page.get_attribute("[data-testid=tour]", "data-step")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_lesson_step_the_file_cannot_show_says_so_and_offers_to_skip(browser, snaps, case, lang):  # noqa: F811
    """Why this token's patching steps, the Experiments' pruning step, the MoE lesson's expert removal: each needs
    the model run again, which the file cannot do. The card says so in the learner's language, with the reason,
    instead of "Fetching this view's values" forever; its skip button opens the next step. `offline` fails on any
    error in the page (the pruning step's used to be uncaught)."""
    name, view, lesson, blocked = CASES[case]
    s = snaps(name)
    with offline(browser, s.file, lang=lang) as page:
        if view:
            page.click(f"[data-testid=nav-{view}]")
        page.click("[data-testid=tour-open]")
        page.wait_for_selector("[data-testid=tour]")
        assert page.get_attribute("[data-testid=tour]", "data-lesson") == lesson
        for sid in blocked:
            for _ in range(30):
                if step_id(page) == sid:
                    break
                page.click("[data-testid=tour-next]")
            assert step_id(page) == sid
            note = page.wait_for_selector("[data-testid=lesson-blocked]", timeout=30_000).inner_text()
            assert BLOCKED[lang] in note and "live app" in note, note
            assert page.locator("[data-testid=lesson-body]").count() == 0
            skip = page.locator("[data-testid=lesson-skip]")
            assert skip.inner_text() == SKIP[lang]
            page.screenshot(path=str(ARTIFACTS / f"snapshot-blocked-{case}-{lang}-{sid}.png"), full_page=False)
            at, n = page.eval_on_selector_all("[data-testid=tour] [role=tab]",
                                              "els => [els.findIndex(e => e.getAttribute('aria-selected') === 'true'),"
                                              " els.length]")
            skip.click()
            if at < n - 1:
                page.wait_for_function(f"() => document.querySelector('[data-testid=tour]')?.dataset.step !== '{sid}'")
            else:
                page.wait_for_selector("[data-testid=tour]", state="detached")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_step_the_file_can_show_is_not_blocked(browser, snaps, lang):  # noqa: F811
    """The first steps of Why this token (the attributions the file carries) show their text, with no skip."""
    s = snaps("explainer-small")
    with offline(browser, s.file, lang=lang) as page:
        page.click("[data-testid=nav-attribution]")
        page.click("[data-testid=tour-open]")
        page.wait_for_function("() => { const b = document.querySelector('[data-testid=lesson-body]');"
                               " return b && b.getAttribute('aria-busy') === 'false' }", timeout=30_000)
        page.wait_for_timeout(500)
        assert page.locator("[data-testid=lesson-blocked]").count() == 0
        assert page.locator("[data-testid=lesson-skip]").count() == 0


@pytest.fixture(scope="module")
def long_page(tmp_path_factory) -> tuple[object, Path]:
    """A 256-token text of the built-in small model (6 blocks, 8 heads) at the default size budget."""
    from transformer_explainer import load_model

    model = load_model("explainer-small", allow_download=False)
    trace = model.trace(" ".join(["word"] * 256))
    assert trace.n_tokens == 256
    return model, save_snapshot(model, trace, tmp_path_factory.mktemp("long") / "long.html", ablations=False)


def test_a_long_text_shows_attention_and_names_the_budget_that_keeps_the_rest(browser, long_page):
    """The attention view of block 0 draws from the file; at the last block the page says what was left out and
    which --max-mb keeps it."""
    model, file = long_page
    keep = embedded(file.read_text())["keep_mb"]
    assert keep and keep > 4.5
    with offline(browser, file) as page:
        page.click("[data-testid=nav-attention]")
        page.click("[aria-label='Layer 0'][role=radio]")
        page.wait_for_selector("[data-testid=attn-pattern] .pic", timeout=30_000)
        settle(page)
        assert page.locator("[data-testid=error]").count() == 0
        page.screenshot(path=str(ARTIFACTS / "snapshot-long-attention-0.png"), full_page=False)
        last = model.config.n_layer - 1
        page.click(f"[aria-label='Layer {last}'][role=radio]")
        err = page.wait_for_selector("[data-testid=error]", timeout=30_000).inner_text()
        assert f"left out blocks.{last}." in err and f"--max-mb {keep:g}" in err, err
        page.screenshot(path=str(ARTIFACTS / "snapshot-long-attention-last.png"), full_page=False)


@pytest.mark.parametrize(("screen", "lang"), [("notebook", "en"), ("notebook", "zh"), ("desktop", "en"),
                                              ("phone", "en"), ("phone", "zh")])
def test_the_probability_column_stays_inside_the_page(browser, snaps, screen, lang):  # noqa: F811
    """At a notebook cell's width (1070 px) the candidates table used to run past the view, its probability column
    cut with no scrollbar. Every probability's right edge is inside the viewport and the view."""
    s = snaps("explainer-small")
    with offline(browser, s.file, screen=screen, lang=lang) as page:
        page.click("[data-testid=nav-output]")
        page.wait_for_selector("[data-testid=cand-prob-0]")
        settle(page)
        box = page.evaluate("""() => {
          const view = document.querySelector('section.view').getBoundingClientRect();
          const cells = [...document.querySelectorAll('[data-testid=candidates] tr > :last-child')]
            .map((c) => c.getBoundingClientRect().right);
          return { vw: document.documentElement.clientWidth, view: view.right, right: Math.max(...cells),
                   n: cells.length, scroll: document.documentElement.scrollWidth };
        }""")
        assert box["n"] > 1
        assert box["right"] <= box["vw"] + 0.5 and box["right"] <= box["view"] + 0.5, box
        assert box["scroll"] <= box["vw"], box  # nothing runs off the page sideways either
        page.locator("[data-testid=candidates]").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"snapshot-output-{screen}-{lang}.png"), full_page=False)


def test_router_probabilities_read_as_the_live_trace_has_them(browser, snaps):  # noqa: F811
    """The experts view of a mixture's snapshot: every router probability in the routing table is the trace's own
    float32 value (the file stored float16, which moved the 4th decimal the readouts show: 0.5032 -> 0.5029)."""
    import numpy as np

    s = snaps("explainer-moe")
    cfg, trace = s.model.config, s.trace
    layer = cfg.moe_layers[0]
    want = trace[f"blocks.{layer}.mlp.router_probs"].float().numpy()
    with offline(browser, s.file, screen="notebook") as page:
        page.click("[data-testid=nav-experts]")
        page.click(f"[aria-label='Layer {layer}'][role=radio]")
        page.wait_for_selector("[data-testid=route-row] td[data-chosen]", timeout=30_000)
        rows = page.eval_on_selector_all("[data-testid=route-row]", """rows => rows.map(r =>
            [...r.querySelectorAll('td')].map(c => +c.dataset.prob))""")
        assert len(rows) == trace.n_tokens
        np.testing.assert_array_equal(np.float32(rows), want)
        page.screenshot(path=str(ARTIFACTS / "snapshot-experts-router-notebook.png"), full_page=False)


def test_values_show_no_more_digits_than_the_file_holds(browser, snaps):  # noqa: F811
    """The file stores its large tensors in float16 (about 3.3 significant digits): its page shows every value with 3
    significant digits, where the live app shows 4 decimals, so that no digit it shows misstates the live trace's
    (before: a float16 value read 0.5029 where the live app reads 0.5032)."""
    s = snaps("explainer-small")
    logits = s.trace.next_token_logits().float()
    top = logits.topk(3)
    with offline(browser, s.file, screen="desktop") as page:
        page.click("[data-testid=nav-output]")
        page.wait_for_selector("[data-testid=cand-logit-0]", timeout=30_000)
        for i, want in enumerate(top.values.tolist()):
            shown = page.inner_text(f"[data-testid=cand-logit-{i}]").replace("−", "-")
            digits = len(shown.lstrip("-").replace(".", "").lstrip("0"))
            assert digits <= 3 and float(shown) == float(f"{want:.3g}"), (i, shown, want)
