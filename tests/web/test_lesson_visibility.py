"""Every step of every lesson, in English and 中文, at 1280x900 and on a 390x844 phone, on the models its page
runs (the built-ins, the mixture of experts explainer-moe among them, a random-weight GPT-2 with a context of 64;
the encoder-decoder's own model): the step's text loads, its target is on the page, what its text quotes and what
its task uses (the card's data-guard names) is on the screen and not under the card, and on a desktop the card does
not cover its target either (unless the target and the card cannot both fit). Each step is saved as a screenshot in
test-artifacts/lessons/."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from .conftest import ARTIFACTS, LiveServer, open_app

pytestmark = pytest.mark.browser

TEXT = "The capital of France is Paris, and the capital of Germany is"
VIEWPORTS = {"desktop": {"viewport": {"width": 1280, "height": 900}},
             "phone": {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True,
                       "has_touch": True}}
# (model, lesson) pairs: each lesson on the models whose page opens it
CASES = [("explainer-small", "gpt2"), ("explainer-small", "experiments"), ("random-gpt2-64", "gpt2"),
         ("explainer-llama", "modern"), ("explainer-llama", "experiments"), ("explainer-small", "seq2seq"),
         ("explainer-small", "why"), ("explainer-llama", "why"), ("random-gpt2-64", "why"),
         ("random-qwen3", "stable"), ("random-gemma3", "stable"), ("explainer-moe", "moe"),
         ("explainer-moe", "why")]

STATE = """() => {
  const card = document.querySelector('[data-testid=tour]');
  const r = (e) => { const b = e.getBoundingClientRect();
    return { left: b.left, top: b.top, right: b.right, bottom: b.bottom, width: b.width, height: b.height }; };
  const first = (name) => { for (const el of document.querySelectorAll(`[data-tour="${name}"]`))
    if (el.offsetParent) return el; return null; };
  const guard = (card.dataset.guard || '').split(' ').filter(Boolean);
  const target = card.dataset.target ? first(card.dataset.target) : null;
  return { step: card.dataset.step, card: r(card), vw: innerWidth, vh: innerHeight,
    busy: card.querySelector('[data-testid=lesson-body]').getAttribute('aria-busy'),
    target: card.dataset.target ? (target ? r(target) : 'missing') : null,
    guard: Object.fromEntries(guard.map((n) => [n, first(n) ? r(first(n)) : 'missing'])) };
}"""


def overlap(a: dict, b: dict) -> bool:
    return min(a["right"], b["right"]) > max(a["left"], b["left"]) + 1 and \
        min(a["bottom"], b["bottom"]) > max(a["top"], b["top"]) + 1


def problems(s: dict, phone: bool) -> list[str]:
    out = []
    if s["target"] == "missing":
        out.append("its target is not on the page")
    for name, g in s["guard"].items():
        if g == "missing":
            out.append(f"[data-tour={name}] (quoted or used by the task) is not on the page")
            continue
        if g["top"] < -1 or g["bottom"] > s["vh"] + 1 or g["right"] < 1 or g["left"] > s["vw"] - 1:
            out.append(f"[data-tour={name}] is off the screen: {g}")
        if overlap(g, s["card"]):
            out.append(f"the card {s['card']} covers [data-tour={name}] {g}")
    t = s["target"]
    if not phone and isinstance(t, dict) and overlap(t, s["card"]) and t["height"] + s["card"]["height"] + 24 < s["vh"]:
        out.append(f"the card {s['card']} covers its target {t}")
    return out


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LiveServer]]:
    from tests.conftest import make_hf_gpt2, make_hf_llama_family
    from transformer_explainer import load_model
    from transformer_explainer.server import create_app

    folder = make_hf_gpt2(tmp_path_factory.mktemp("gpt2-64"), n_layer=3, n_head=4, n_embd=64, n_positions=64)
    models = {"explainer-small": load_model("explainer-small", allow_download=False),
              "explainer-llama": load_model("explainer-llama", allow_download=False),
              "random-gpt2-64": load_model(str(folder), allow_download=False),
              "explainer-moe": load_model("explainer-moe", allow_download=False)}
    for name, arch in (("random-qwen3", "qwen3"), ("random-gemma3", "gemma3_text")):
        models[name] = load_model(str(make_hf_llama_family(tmp_path_factory.mktemp(name), arch)), allow_download=False)
    with ExitStack() as stack:
        yield {name: stack.enter_context(LiveServer(create_app({name: m}))) for name, m in models.items()}


def open_lesson(page, lesson: str) -> None:
    if lesson == "seq2seq":
        page.click("[data-testid=mode-seq2seq]")
        page.wait_for_selector("[data-testid=s2s-output]", timeout=30_000)
    else:
        page.fill("[data-testid=text]", TEXT)
        page.wait_for_function("() => !document.querySelector('.view.busy') && document.querySelector("
                               "'[data-testid=token-chip]')", timeout=30_000)
        if lesson == "experiments":
            page.dispatch_event("[data-testid=nav-experiments]", "click")
        elif lesson == "why":
            page.dispatch_event("[data-testid=nav-attribution]", "click")
    page.dispatch_event("[data-testid=tour-open]", "click")
    page.wait_for_selector(f"[data-testid=tour][data-lesson={lesson}]", timeout=30_000)


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(("model", "lesson"), CASES, ids=[f"{m}-{x}" for m, x in CASES])
def test_every_step_shows_what_it_quotes(browser, servers, model: str, lesson: str, lang: str, viewport: str) -> None:
    phone = viewport == "phone"
    shots = ARTIFACTS / "lessons"
    shots.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    with open_app(browser, servers[model].url, query=f"?lang={lang}", **VIEWPORTS[viewport]) as page:
        open_lesson(page, lesson)
        n = 0
        while True:
            page.wait_for_function("() => document.querySelector('[data-testid=lesson-body]')"
                                   "?.getAttribute('aria-busy') === 'false'", timeout=60_000)
            s = page.evaluate(STATE)
            for _ in range(20):  # views load and move things after the step opens; the card follows them
                if not problems(s, phone):
                    break
                page.wait_for_timeout(150)
                s = page.evaluate(STATE)
            failures += [f"{lesson}/{s['step']}: {p}" for p in problems(s, phone)]
            page.screenshot(path=str(shots / f"{model}-{lesson}-{lang}-{viewport}-{n:02d}-{s['step']}.png"))
            n += 1
            if page.locator("[data-testid=tour-next]").count() == 0:
                break
            page.dispatch_event("[data-testid=tour-next]", "click")
            page.wait_for_function("s => document.querySelector('[data-testid=tour]').dataset.step !== s",
                                   arg=s["step"], timeout=30_000)
    assert not failures, "\n".join(failures)
