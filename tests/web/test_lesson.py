"""The GPT-2 page's guided lesson in a real browser: every step in both languages, the card never on
top of what it points at (desktop and phone), the numbers in its text equal to the API's for the text
on screen and the focus the step put the page in (and following a new text), the running model named with
its real size, and tasks that tick when done."""

from __future__ import annotations

import json
import math
import re

import httpx
import numpy as np
import pytest

from .conftest import ARTIFACTS, open_app

pytestmark = pytest.mark.browser

TEXT = "The quick brown fox jumps over the lazy dog"
TEXT2 = "Once upon a time, in a small village by the sea"
APP_SAMPLING = {"temperature": 1, "top_k": 10, "seed": 42}  # the page's default (web/src/lib/state.svelte.ts)
CJK = re.compile(r"[\u4e00-\u9fff]")


def api(server, path: str, **body) -> dict:
    r = httpx.post(server.url + "api/" + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def tensors(server, ids: list[int], *specs: dict) -> list[np.ndarray]:
    """Tensors as the page gets them (float16 on the wire), as float32 arrays."""
    from transformer_explainer.server.encoding import decode_array

    out = api(server, "tensors", ids=ids, tensors=list(specs))["tensors"]
    return [np.asarray(decode_array(t["data"], t["shape"], t["dtype"]), dtype=np.float32) for t in out]


def wait_tokens(page, n: int) -> None:
    page.wait_for_function("n => document.querySelectorAll('[data-testid=token-chip]').length === n", arg=n,
                           timeout=30_000)


def set_text(page, text: str, server) -> list[int]:
    ids = api(server, "trace", text=text)["token_ids"]
    page.fill("[data-testid=text]", text)
    wait_tokens(page, len(ids))
    page.wait_for_function("() => document.querySelector('[data-testid=status]').textContent.trim() !== ''"
                           " && !document.querySelector('.view.busy')", timeout=30_000)
    return ids


def wait_body(page, timeout: int = 30_000) -> None:
    """The step's text is loaded (its values have arrived, within `timeout` ms) and the card has stopped moving."""
    page.wait_for_function("() => { const b = document.querySelector('[data-testid=lesson-body]');"
                           " return b && b.getAttribute('aria-busy') === 'false' && b.textContent.trim().length > 0 }",
                           timeout=timeout)
    # the card glides (0.2 s) to where it fits once the step's views have loaded and the page has scrolled: wait
    # until it stands still
    last = None
    for _ in range(30):
        page.wait_for_timeout(150)
        now = page.evaluate("() => { const b = document.querySelector('[data-testid=tour]').getBoundingClientRect();"
                            " return [b.left, b.top, b.width, b.height, scrollY] }")
        if now == last:
            break
        last = now


def step_id(page) -> str:
    return page.get_attribute("[data-testid=tour]", "data-step")


def goto(page, sid: str) -> None:
    for _ in range(60):
        if step_id(page) == sid:
            wait_body(page)
            return
        page.click("[data-testid=tour-next]")
    raise AssertionError(f"no lesson step {sid}")


def nums(page) -> dict[str, str]:
    """The values in the card's text: data-num -> data-raw."""
    return page.eval_on_selector_all("[data-testid=tour] [data-num]",
                                     "els => Object.fromEntries(els.map(e => [e.dataset.num, e.dataset.raw]))")


def rects(page, sid_target: str) -> tuple[dict, dict | None, int]:
    """The card's rect, the outlined target's rect (the first visible element, as the engine picks it)
    and the viewport height."""
    return page.evaluate("""name => {
        const r = (el) => { const b = el.getBoundingClientRect();
          return { left: b.left, top: b.top, right: b.right, bottom: b.bottom, width: b.width, height: b.height } };
        let t = null;
        for (const el of document.querySelectorAll(`[data-tour="${name}"]`)) if (el.offsetParent) { t = el; break; }
        return [r(document.querySelector('[data-testid=tour]')), t ? r(t) : null, window.innerHeight];
    }""", sid_target)


def intersects(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


def walk(page, lang: str, shots: str | None, phone: bool = False) -> list[dict]:
    """Every step from the first: its id, title, text, and whether the card covers its target."""
    if phone:  # the header's layout on a phone is another task's: reach the button whatever overlaps it
        page.dispatch_event("[data-testid=tour-open]", "click")
    else:
        page.click("[data-testid=tour-open]")
    page.wait_for_selector("[data-testid=tour]")
    out = []
    i = 0
    while True:
        wait_body(page)
        sid = step_id(page)
        target = page.get_attribute("[data-testid=tour]", "data-target")
        card, tgt, vh = rects(page, target) if target else (None, None, 0)
        if target:
            assert tgt is not None, f"{lang} step {sid}: target [data-tour={target}] not on the page"
            if intersects(card, tgt):
                # allowed only on a phone, when the target is taller than the room above the sheet
                assert phone and tgt["height"] > vh - card["height"], (lang, sid, card, tgt)
        out.append({"id": sid, "title": page.inner_text("#lesson-title"), "body": page.inner_text("#lesson-body"),
                    "task": page.inner_text("[data-testid=lesson-task]")
                    if page.locator("[data-testid=lesson-task]").count() else ""})
        if shots:
            page.screenshot(path=str(ARTIFACTS / f"{shots}-{lang}-{i:02d}-{sid}.png"))
        i += 1
        if page.locator("[data-testid=tour-next]").count() == 0:
            break
        if phone:  # the arrow key: the phone layout of the views is still being made, whatever overlaps
            page.keyboard.press("ArrowRight")
        else:
            page.click("[data-testid=tour-next]")
    page.keyboard.press("Escape")
    assert page.locator("[data-testid=tour]").count() == 0
    return out


def check_languages(en: list[dict], zh: list[dict]) -> None:
    assert len(en) >= 20
    assert [s["id"] for s in en] == [s["id"] for s in zh]
    assert len({s["id"] for s in en}) == len(en)
    for a, b in zip(en, zh, strict=True):
        assert a["title"].strip() and a["body"].strip() and b["title"].strip() and b["body"].strip()
        assert not CJK.search(a["title"] + a["body"]), a  # the English text is English (the sample text is too)
        assert CJK.search(b["title"] + b["body"]), b
        assert bool(a["task"]) == bool(b["task"]), a["id"]


def test_every_step_in_both_languages_and_the_card_beside_its_target(page, live_server):
    set_text(page, TEXT, live_server)
    en = walk(page, "en", "lesson")
    page.select_option("[data-testid=lang]", "zh")
    page.wait_for_function("() => document.documentElement.lang === 'zh-CN'")
    zh = walk(page, "zh", "lesson")
    # the text of every step as the page showed it, to read beside the screenshots
    (ARTIFACTS / "lesson-text.json").write_text(json.dumps({"en": en, "zh": zh}, ensure_ascii=False, indent=1))
    check_languages(en, zh)
    ids = [s["id"] for s in en]
    # the checklist of the computation, in its order
    order = ["text", "overview", "tokens", "bpe", "embed-token", "embed-pos", "layernorm", "qkv", "dot", "scale",
             "mask", "softmax", "heads", "concat", "residual", "dropout", "mlp", "gelu", "blocks", "final-ln",
             "unembed", "probs", "temperature", "top-k", "top-p", "sample", "kv-cache"]
    assert [i for i in ids if i in order] == order
    # the glosses, once each, in Chinese
    zh_text = " ".join(s["body"] for s in zh)
    assert zh_text.count("未归一化的分数") == 1 and zh_text.count("随机丢弃") == 1


@pytest.fixture
def phone(browser, live_server):
    """The app on a 390 × 844 touch screen."""
    with open_app(browser, live_server.url, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True,
                  device_scale_factor=2) as pg:
        yield pg


def test_on_a_phone_the_sheet_leaves_the_target_visible(phone, live_server):
    set_text(phone, TEXT, live_server)
    en = walk(phone, "en", "lesson-phone", phone=True)
    assert len(en) >= 20


def test_the_numbers_are_the_apis_and_follow_the_text(page, live_server, hf_tiny):
    ids = set_text(page, TEXT, live_server)
    page.click("[data-testid=tour-open]")
    check_numbers(page, live_server, ids, hf_tiny)
    page.keyboard.press("Escape")
    # a new text while a step is open: its numbers change to the new text's
    page.click("[data-testid=tour-open]")
    goto(page, "layernorm")
    before = nums(page)
    ids2 = set_text(page, TEXT2, live_server)
    assert ids2 != ids
    page.wait_for_function("b => { const e = document.querySelector('[data-num=ln-mean]');"
                           " return e && e.dataset.raw !== b }", arg=before["ln-mean"], timeout=30_000)
    v, (pos, layer) = nums(page), focus(page)
    assert pos == len(ids2) - 1  # a new text puts the focus on its last token
    mean, var = tensors(live_server, ids2, {"name": f"blocks.{layer}.ln1.mean"}, {"name": f"blocks.{layer}.ln1.var"})
    assert close(v["ln-mean"], mean[pos]) and close(v["ln-var"], var[pos])
    page.keyboard.press("Escape")
    page.click("[data-testid=tour-open]")
    check_numbers(page, live_server, ids2, hf_tiny)


def focus(page) -> tuple[int, int]:
    pos = int(page.get_attribute("[data-testid=token-chip][aria-selected=true]", "data-pos"))
    layer = int(page.inner_text("[data-testid=layer-value]"))
    return pos, layer


def head(page) -> int:
    return int(page.inner_text("[data-testid=head-picker] [aria-checked=true]"))


def close(shown: str, ref: float, tol: float = 1e-3) -> bool:
    return math.isclose(float(shown), ref, rel_tol=tol, abs_tol=tol)


def check_numbers(page, server, ids: list[int], hf_tiny) -> None:
    T = len(ids)
    n_params = sum(p.numel() for p in hf_tiny.parameters())  # wte and lm_head are one tied tensor
    goto(page, "text")  # the first step names the running model and its size
    v = nums(page)
    assert v["model"] == "tiny" and int(v["n-params"]) == n_params and int(v["n-layer"]) == hf_tiny.config.n_layer

    goto(page, "tokens")
    v = nums(page)
    pos, layer = focus(page)
    assert int(v["n-tokens"]) == T and int(v["focus-id"]) == ids[pos]

    goto(page, "bpe")  # the vocabulary column's spelling of a leading space, as the tokenizer stores it
    v = nums(page)
    if "raw" in v:
        tok = api(server, "trace", ids=ids)["tokens"]
        marked = next(t for t in tok if t["id"] == int(v["marker-token"]))
        assert v["raw"] == marked["raw"] == "Ġ" + marked["text"][1:]

    goto(page, "embed-pos")
    v, (pos, layer) = nums(page), focus(page)
    we, wp, s = tensors(server, ids, *({"name": n, "position": pos} for n in ("embed.token", "embed.position",
                                                                            "embed.sum")))
    assert int(v["pos"]) == pos
    assert close(v["we-0"], we[0]) and close(v["wpos-0"], wp[0]) and close(v["sum-0"], s[0])

    goto(page, "layernorm")
    v, (pos, layer) = nums(page), focus(page)
    mean, var = tensors(server, ids, {"name": f"blocks.{layer}.ln1.mean"}, {"name": f"blocks.{layer}.ln1.var"})
    assert close(v["ln-mean"], mean[pos]) and close(v["ln-var"], var[pos])

    goto(page, "qkv")  # the best match is the largest q·k among the keys the focus token sees, at the page's focus
    v, (pos, layer), h = nums(page), focus(page), head(page)
    (scores,) = tensors(server, ids, {"name": f"blocks.{layer}.attn.scores", "head": h, "position": pos})
    best = int(np.argmax(scores[: pos + 1]))
    assert close(v["best-score"], scores[best], 1e-2) and int(v["best-key"]) == ids[best]

    goto(page, "scale")
    v, (pos, layer), h = nums(page), focus(page), head(page)
    scores, scaled = tensors(server, ids, {"name": f"blocks.{layer}.attn.scores", "head": h, "position": pos},
                             {"name": f"blocks.{layer}.attn.scaled_scores", "head": h, "position": pos})
    best = int(np.argmax(scores[: pos + 1]))
    assert close(v["best-score"], scores[best]) and close(v["scaled-score"], scaled[best])
    d_head = hf_tiny.config.n_embd // hf_tiny.config.n_head
    assert int(v["d-k"]) == d_head and close(v["sqrt-dk"], math.sqrt(d_head))

    goto(page, "softmax")
    v, (pos, layer), h = nums(page), focus(page), head(page)
    (pattern,) = tensors(server, ids, {"name": f"blocks.{layer}.attn.pattern", "head": h})
    w = pattern[pos]
    assert int(v["top-key"]) == ids[int(np.argmax(w[: pos + 1]))]
    assert close(v["top-weight"], w.max()) and close(v["row-sum"], 1.0, 1e-2)

    goto(page, "residual")
    v, (pos, layer) = nums(page), focus(page)
    pre, attn = tensors(server, ids, {"name": f"blocks.{layer}.resid_pre", "position": pos},
                        {"name": f"blocks.{layer}.attn_out", "position": pos})
    assert close(v["norm-pre"], float(np.linalg.norm(pre))) and close(v["norm-attn"], float(np.linalg.norm(attn)))

    goto(page, "params")  # the counts from the config equal the real model's parameters
    v = nums(page)
    mlp = sum(p.numel() for n, p in hf_tiny.named_parameters() if ".mlp." in n)
    assert int(v["total-params"]) == n_params
    assert close(v["mlp-model-share"], mlp / n_params, 1e-9)

    goto(page, "unembed")
    nx = api(server, "next_token", ids=ids, sampling=APP_SAMPLING, top_n=15)
    v = nums(page)
    top = nx["candidates"][0]
    assert int(v["top-token"]) == top["id"] and close(v["top-logit"], top["logit"], 1e-5)

    goto(page, "temperature")
    v = nums(page)
    assert close(v["temperature"], 1) and close(v["top-prob"], nx["candidates"][0]["prob"], 1e-6)

    goto(page, "top-k")
    v = nums(page)
    assert int(v["n-kept"]) == nx["n_kept"] == 10 and int(v["top-k"]) == 10
    tail = 1 - sum(c["prob_no_cut"] for c in nx["candidates"] if c["kept"])
    assert close(v["tail-mass"], tail, 1e-6)

    goto(page, "sample")
    v = nums(page)
    assert int(v["sampled-token"]) == nx["sampled"]["id"] and close(v["sampled-prob"], nx["sampled"]["prob"], 1e-6)


def test_tasks_tick_when_done(page, live_server):
    ids = set_text(page, TEXT, live_server)
    page.click("[data-testid=tour-open]")
    goto(page, "tokens")
    task = page.locator("[data-testid=lesson-task]")
    assert "done" not in (task.get_attribute("class") or "")
    page.locator("[data-testid=token-chip]").nth(len(ids) - 2).click()
    page.wait_for_function("() => document.querySelector('[data-testid=lesson-task]').classList.contains('done')")
    assert task.locator(".mark").inner_text() == "✓"
    goto(page, "temperature")
    before = nums(page)["top-prob"]
    assert task.locator(".mark").inner_text() == "→"
    page.fill("[data-testid=temperature-number]", "2")
    page.press("[data-testid=temperature-number]", "Enter")
    page.wait_for_function("() => document.querySelector('[data-testid=lesson-task]').classList.contains('done')")
    page.wait_for_function("b => document.querySelector('[data-num=top-prob]').dataset.raw !== b", arg=before)
    assert float(nums(page)["top-prob"]) < float(before)  # a flatter distribution: the top guess falls
    page.screenshot(path=str(ARTIFACTS / "lesson-task-temperature.png"))
