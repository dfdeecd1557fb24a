"""A view shared by link: the page keeps its text, model, stage, layer, head, focus token and language in the
address's fragment (web/src/lib/urlState.svelte.ts), a link opens the same view in a fresh page (the live app
and an offline snapshot), a garbled link opens the default view, and "Copy link" copies the link without the
access token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, expect

from transformer_explainer.notebook import save_snapshot

from .conftest import ARTIFACTS, LiveServer, open_app

pytestmark = pytest.mark.browser

# characters a careless link would break: & + % # = and a newline, and Chinese
TEXT = "A & B = 50% + 1 #2\n老师的例子"
DEFAULT_TEXT = "Data visualization empowers users to"  # examples.json's first text, what the page opens with
TOKEN = "share-test-token-1"
SNAPSHOT_TEXT = "The quick brown fox jumps over the lazy dog"
HEADER = {"x": 0, "y": 0, "width": 1280, "height": 200}  # the part of a desktop screenshot with the header


def fragment(page: Page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).fragment, keep_blank_values=True).items()}


def settled(page: Page, **want: str) -> None:
    """Wait until the address's fragment holds `want` (it follows the state after a short pause)."""
    page.wait_for_function("""want => { const p = new URLSearchParams(location.hash.slice(1));
        return Object.entries(want).every(([k, v]) => p.get(k) === v); }""", arg=want)


def shown(page: Page) -> dict[str, str | None]:
    """What the page shows: its text, model, stage, layer, head, focus token and language."""
    return page.evaluate("""() => {
        const q = (s) => document.querySelector(s);
        return { text: q('[data-testid=text]').value, model: q('[data-testid=model]').value,
          view: [...document.querySelectorAll('nav button.stage.on')].map((e) => e.dataset.testid).join(),
          layer: q('[data-testid=layer-value]')?.textContent ?? null,
          head: q('[data-testid=head-picker] [aria-checked=true]')?.textContent ?? null,
          pos: q('[data-testid=token-chip][aria-selected=true]')?.dataset.pos ?? null,
          focus: q('[data-testid=focus-token]')?.textContent ?? null, lang: document.documentElement.lang };
    }""")


def traced(page: Page, action) -> None:
    """Do `action`, then wait for the trace it starts to be shown."""
    n = page.evaluate("() => Number(document.body.dataset.updates ?? 0)")
    action()
    page.wait_for_function("n => Number(document.body.dataset.updates ?? 0) > n", arg=n)


def set_up_view(page: Page) -> dict[str, str | None]:
    """Set every part of the view a link carries, away from its default; returns what the page then shows."""
    traced(page, lambda: page.fill("[data-testid=text]", TEXT))
    page.select_option("[data-testid=model]", "tiny")  # the test server's one model
    page.click("[data-testid=nav-attention]")
    page.click("[data-tour=layer-stepper] button:last-of-type")  # layer 1 of 0..1
    page.locator("[data-testid=head-picker] button").nth(2).click()
    page.locator("[data-testid=token-chip]").nth(3).click()
    page.select_option("[data-testid=lang]", "zh")
    page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
    settled(page, view="attention", layer="1", head="2", pos="3", lang="zh", model="tiny", text=TEXT)
    view = shown(page)
    assert view == {"text": TEXT, "model": "tiny", "view": "nav-attention", "layer": "1", "head": "2", "pos": "3",
                    "focus": view["focus"], "lang": "zh-CN"}
    return view


def test_a_link_opens_the_same_view_in_a_fresh_page(browser, live_server):
    with open_app(browser, live_server.url) as page:
        entries = page.evaluate("() => history.length")
        before = set_up_view(page)
        link = page.url
        added = page.evaluate("() => history.length") - entries
    assert added == 0, "the address was rewritten in place (replaceState), not pushed"
    assert "token" not in link
    with open_app(browser, link) as page:  # a fresh context: nothing carried over but the address
        expect(page.locator("[data-testid=head-picker] [aria-checked=true]")).to_have_text("2")
        assert shown(page) == before
        page.locator("[data-testid=copy-link]").scroll_into_view_if_needed()


def test_a_link_pasted_into_an_open_page_is_followed(browser, live_server):
    """A link that differs from the open page in its fragment only does not reload the page (hashchange)."""
    with open_app(browser, live_server.url) as page:
        before = set_up_view(page)
        link = page.url
    with open_app(browser, live_server.url) as page:
        traced(page, lambda: page.goto(link))
        expect(page.locator("[data-testid=token-chip][aria-selected=true]")).to_have_attribute("data-pos", "3")
        page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
        assert shown(page) == before


@pytest.mark.parametrize("view", ["experiments", "attribution"])
def test_a_link_keeps_the_experiments_and_why_this_token_pages(browser, live_server, view):
    with open_app(browser, live_server.url) as page:
        page.click(f"[data-testid=nav-{view}]")
        settled(page, view=view)
        link = page.url
    with open_app(browser, link) as page:
        assert shown(page)["view"] == f"nav-{view}"


def test_a_link_keeps_the_encoder_decoder_page_and_its_tab(browser, live_server):
    with open_app(browser, live_server.url) as page:
        page.click("[data-testid=mode-seq2seq]")
        page.click("[data-testid=s2s-tab-positions]")
        settled(page, tab="positions")
        link = page.url
    assert parse_qs(urlparse(link).query) == {"mode": ["seq2seq"]}
    with open_app(browser, link) as page:
        expect(page.locator("[data-testid=s2s-tab-positions]")).to_have_attribute("aria-selected", "true")
        expect(page.locator("[data-testid=s2s-panel-positions]")).to_be_visible()


# links that hold nothing this page can show: each part falls back to its default, and nothing throws
GARBLED = [
    "#text=&model=no-such-model&view=__proto__&layer=99&head=-1&pos=1e9&lang=xx&tab=nope&ln=ln9",
    "#view=constructor&layer=1.5&head=0x1&pos=%20%203&model=%E0%A4%A&text",
    "#%E0%A4%A=%ZZ&&&==&layer=&head=99999999999999999999&pos=-0&view=rope",  # rope: not a GPT-2 stage
    "#" + "x" * 5000,
    "#layer=1&head=7&pos=2",  # head 7 of 4: the head falls back, the rest is kept
]


@pytest.mark.parametrize("garbled", GARBLED)
def test_a_garbled_link_opens_the_default_view(browser, live_server, garbled):
    with open_app(browser, live_server.url, query=garbled) as page:  # fails on any page error
        expect(page.locator("[data-testid=status]")).to_have_text("Up to date")
        view = shown(page)
        n = page.locator("[data-testid=token-chip]").count()
        kept = garbled.startswith("#layer=1&head=7")
        assert view["text"] == DEFAULT_TEXT and view["model"] == "tiny" and view["lang"] == "en"
        assert view["view"] == "nav-tokens"
        assert view["layer"] == ("1" if kept else "0")
        assert view["pos"] == ("2" if kept else str(n - 1))
        page.click("[data-testid=nav-attention]")
        expect(page.locator("[data-testid=head-picker] [aria-checked=true]")).to_have_text("0")
        settled(page, view="attention", layer=view["layer"], head="0", pos=view["pos"], lang="en", model="tiny")
        assert set(fragment(page)) == {"text", "model", "view", "layer", "head", "pos", "lang"}


def test_a_text_over_the_servers_limit_is_cut_to_it(browser, live_server):
    """A link's text is capped at MAX_TEXT_CHARS (40,000): a longer one opens its first 40,000 characters, which
    the page then handles as any over-long text (it offers to keep the last tokens)."""
    from transformer_explainer.limits import MAX_TEXT_CHARS

    with open_app(browser, live_server.url, query="#text=" + "ab " * 20_000) as page:
        assert len(page.input_value("[data-testid=text]")) == MAX_TEXT_CHARS
        expect(page.locator("[data-testid=keep-last]")).to_be_visible()
        settled(page, view="tokens")
        assert len(fragment(page)["text"]) == MAX_TEXT_CHARS


def copied(page: Page) -> str:
    page.click("[data-testid=copy-link]")
    expect(page.locator("[data-testid=copy-link]")).to_have_attribute("data-state", "copied")
    return page.evaluate("() => navigator.clipboard.readText()")


def test_copy_link_leaves_the_token_out_and_keeps_the_rest(browser, live_server):
    """A page whose address still holds ?token= (here a server without one, which leaves it there) copies a link
    without it, with the rest of the query and the view's fragment; the copied link opens that view."""
    perms = {"permissions": ["clipboard-read", "clipboard-write"]}
    with open_app(browser, live_server.url, query="?json&token=secret-123&mode=gpt", **perms) as page:
        page.click("[data-testid=nav-mlp]")
        page.locator("[data-testid=token-chip]").nth(1).click()
        settled(page, view="mlp", pos="1")
        link = copied(page)
        assert "secret-123" not in link and "token" not in link
        url = urlparse(link)
        assert parse_qs(url.query, keep_blank_values=True) == {"json": [""], "mode": ["gpt"]}
        assert url.fragment == urlparse(page.url).fragment
        assert "token=secret-123" in page.url, "the page's own address keeps what the server gave it"
        page.screenshot(path=str(ARTIFACTS / "share-link-copied-en-desktop.png"), clip=HEADER)
    with open_app(browser, link) as page:
        expect(page.locator("[data-testid=token-chip][aria-selected=true]")).to_have_attribute("data-pos", "1")
        assert shown(page)["view"] == "nav-mlp"


@pytest.fixture(scope="module")
def token_server(tiny_model) -> Iterator[LiveServer]:
    from transformer_explainer.server import create_app
    from transformer_explainer.server.app import ServerSettings
    from transformer_explainer.server.security import AccessSettings

    app = create_app({"tiny": tiny_model}, ServerSettings(access=AccessSettings(token=TOKEN)))
    with LiveServer(app) as srv:
        yield srv


def test_a_link_through_the_access_token_keeps_the_view(browser, token_server):
    """`serve --token`: the address with ?token= (which the server moves into a cookie, taking it out of the
    address) and a view's fragment opens that view, and the link copied there has no token."""
    perms = {"permissions": ["clipboard-read", "clipboard-write"]}
    query = f"?token={TOKEN}#view=attention&layer=1&head=3&pos=2&lang=zh"
    with open_app(browser, token_server.url, query=query, **perms) as page:
        expect(page.locator("[data-testid=head-picker] [aria-checked=true]")).to_have_text("3")
        view = shown(page)
        assert (view["view"], view["layer"], view["pos"], view["lang"]) == ("nav-attention", "1", "2", "zh-CN")
        settled(page, view="attention", layer="1", head="3", pos="2", lang="zh", model="tiny")
        link = copied(page)
        assert TOKEN not in link and TOKEN not in page.url
        assert urlparse(link).fragment == urlparse(page.url).fragment
        page.screenshot(path=str(ARTIFACTS / "share-link-copied-zh-desktop.png"), clip=HEADER)


NO_CLIPBOARD = """Object.defineProperty(navigator, "clipboard", { value: undefined });
document.execCommand = () => false;"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_without_a_clipboard_the_link_is_shown_to_copy(browser, live_server, lang):
    """Over plain http on a classroom network the page is no secure context: no clipboard API. Where the older
    copy command fails too, the link is shown, selected, for the learner to copy (on a phone, too)."""
    for screen, size in (("desktop", {"width": 1280, "height": 900}), ("phone", {"width": 390, "height": 844})):
        phone = {"is_mobile": True, "has_touch": True, "device_scale_factor": 2} if screen == "phone" else {}
        with open_app(browser, live_server.url, query=f"?token=abcdefgh#lang={lang}&view=attention", viewport=size,
                      **phone) as page:
            page.add_init_script(NO_CLIPBOARD)
            page.evaluate(NO_CLIPBOARD)
            if lang == "zh":
                page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
            settled(page, view="attention", lang=lang, model="tiny")
            page.click("[data-testid=copy-link]")
            field = page.locator("[data-testid=copy-link-field]")
            expect(field).to_be_visible()
            link = field.input_value()
            assert "abcdefgh" not in link and urlparse(link).fragment == urlparse(page.url).fragment
            assert page.evaluate("() => document.activeElement?.dataset.testid") == "copy-link-field"
            box = page.locator("[data-testid=copy-link-manual]").bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= size["width"], "the link fits the screen"
            page.screenshot(path=str(ARTIFACTS / f"share-link-manual-{lang}-{screen}.png"),
                            clip={"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 420)})


@pytest.fixture(scope="module")
def snapshot_file(tiny_model, tmp_path_factory) -> Path:
    static = Path(__file__).resolve().parents[2] / "src" / "transformer_explainer" / "web_dist"
    if not (static / "index.html").is_file():
        pytest.skip("the web UI is not built (cd web && npm ci && npm run build)")
    return save_snapshot(tiny_model, SNAPSHOT_TEXT, tmp_path_factory.mktemp("snap") / "page.html")


def test_a_snapshot_opened_with_a_link_restores_its_view(browser, snapshot_file):
    """The offline snapshot from file:// with a view's fragment: the view, layer, head, focus token and language
    come back; the text and model stay the snapshot's own (a link's are ignored); and the fragment follows the
    page's state there too. Nothing is requested but the file itself."""
    own = snapshot_file.as_uri()
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    outside: list[str] = []
    errors: list[str] = []

    def guard(route) -> None:
        if route.request.url == own:
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", guard)
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(own + "#text=something%20else&model=gpt2&view=attention&layer=1&head=2&pos=3&lang=zh")
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        expect(page.locator("[data-testid=head-picker] [aria-checked=true]")).to_have_text("2")
        page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
        view = shown(page)
        assert view["text"] == SNAPSHOT_TEXT
        assert (view["view"], view["layer"], view["pos"]) == ("nav-attention", "1", "3")
        page.locator("[data-testid=head-picker] button").nth(1).click()
        settled(page, head="1", view="attention", layer="1", pos="3", lang="zh")
        assert "text" not in fragment(page) and "model" not in fragment(page)
        page.screenshot(path=str(ARTIFACTS / "share-link-snapshot-zh.png"), clip=HEADER)
    finally:
        context.close()
    assert not outside, f"the snapshot tried to load: {outside}"
    assert not errors, f"errors in the page: {errors}"
