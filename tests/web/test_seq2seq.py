"""The encoder-decoder page in a real browser against the live server and the shipped checkpoints: the
maps show /api/seq2seq's values, stepping grows the output, the language switches, a live training
run streams to the page and stops, and nothing is fetched from anywhere but 127.0.0.1."""

from __future__ import annotations

import pytest

from .test_app import api, number, shot

pytestmark = pytest.mark.browser


def open_page(page, task: str = "reverse", text: str = "hello") -> None:
    page.click("[data-testid=mode-seq2seq]")
    page.wait_for_selector("[data-testid=s2s-output]", timeout=30_000)
    if page.locator("[data-testid=s2s-task]").input_value() != task:
        page.select_option("[data-testid=s2s-task]", task)
    if page.locator("[data-testid=s2s-text]").input_value() != text:
        page.fill("[data-testid=s2s-text]", text)
    page.wait_for_function("t => document.querySelector('[data-testid=s2s-text]').value === t "
                           "&& !document.querySelector('[data-testid=s2s-page] .spinner')", arg=text, timeout=30_000)


def hover_cell(page, testid: str, r: int, c: int, rows: int, cols: int) -> str:
    """The readout of heat map `testid` with the mouse over cell (r, c), scrolled into view first."""
    pic = page.locator(f"[data-testid={testid}] .pic")
    pic.scroll_into_view_if_needed()
    box = pic.bounding_box()
    page.mouse.move(box["x"] + (c + 0.5) * box["width"] / cols, box["y"] + (r + 0.5) * box["height"] / rows)
    ro = page.locator(f"[data-testid={testid}-readout]")
    page.wait_for_function("el => el.textContent.trim().length > 0", arg=ro.element_handle())
    return ro.inner_text()


def step_count(page) -> tuple[int, int]:
    words = page.locator("[data-testid=s2s-step-count]").inner_text().split()
    return int(words[1]), int(words[3])


def test_cross_attention_map_shows_the_apis_values(page, live_server):
    open_page(page)
    ref = api(live_server, "seq2seq/decode", task="reverse", text="hello", beam=1, top_k=5)
    assert page.locator("[data-testid=s2s-output]").inner_text() == ref["output"] == "olleh"
    page.click("[data-testid=s2s-tab-decoder]")
    page.wait_for_selector("[data-testid=s2s-cross] .pic")
    n = len(ref["steps"])
    assert step_count(page) == (1, n)
    assert page.locator("[data-testid=s2s-out-chip]").count() == 1
    assert page.locator("[data-testid=s2s-in-chip]").count() == 1  # the start token alone
    shot(page, "s2s-01-decoder-first-step")

    # stepping adds one output token and one decoder input position
    page.click("[data-testid=s2s-step]")
    page.wait_for_function("() => document.querySelectorAll('[data-testid=s2s-out-chip]').length === 2")
    assert page.locator("[data-testid=s2s-in-chip]").count() == 2
    assert page.locator("[data-testid=s2s-out-chip] .txt").all_inner_texts() == ref["tokens"][:2]
    assert page.locator("[data-testid=s2s-next] .txt").inner_text() == ref["steps"][1]["token"]
    page.click("[data-testid=s2s-step]")
    page.click("[data-testid=s2s-step]")
    assert step_count(page) == (4, n)

    # layer 1, head 2 from the small multiples; a cell read out on hover equals the API's weight
    page.click("[data-testid=s2s-cross-grid] [data-lh='1-2']")
    page.wait_for_selector("[data-testid=s2s-cross-grid] [data-lh='1-2'][aria-checked=true]")
    assert "layer 1, head 2" in page.locator("[data-testid=s2s-panel-decoder] figcaption").nth(0).inner_text()
    S = len(ref["src_tokens"])
    rows = 4
    for r, c in ((2, 2), (3, 1), (0, 4)):
        text = hover_cell(page, "s2s-cross", r, c, rows, S)
        out_tok, src_tok = ref["tokens"][r], ref["src_tokens"][c]
        assert f"output token “{out_tok}” (step {r + 1}) attends to source token “{src_tok}” ({c})" in text, text
        assert number(text.split(":")[-1]) == pytest.approx(ref["steps"][r]["cross_attn"][1][2][c], abs=6e-5)
    # the masked self-attention: row 3 sees positions 0..3, never a later one
    text = hover_cell(page, "s2s-self", 3, 1, rows, rows)
    assert number(text.split(":")[-1]) == pytest.approx(ref["steps"][3]["self_attn"][1][2][1], abs=6e-5)
    assert "cannot see" in hover_cell(page, "s2s-self", 1, 3, rows, rows)
    shot(page, "s2s-02-decoder-layer1-head2")

    # play runs to the end token, then stops
    page.click("[data-testid=s2s-play]")
    page.wait_for_function("n => document.querySelectorAll('[data-testid=s2s-out-chip]').length === n", arg=n,
                           timeout=30_000)
    page.wait_for_selector("[data-testid=s2s-play]")  # paused by itself at the end
    assert page.locator("[data-testid=s2s-out-chip] .txt").all_inner_texts() == [*ref["tokens"], "</s>"]
    # the reversal shows as an anti-diagonal: in the last layer's average over heads, output token i
    # looks most at source position S - 1 - i
    for i in range(S):
        avg = [sum(ref["steps"][i]["cross_attn"][-1][h][c] for h in range(ref["n_heads"])) for c in range(S)]
        assert avg.index(max(avg)) == S - 1 - i
    shot(page, "s2s-03-decoder-done")


def test_encoder_and_positional_encoding_show_the_apis_values(page, live_server):
    open_page(page, "dates", "March 5, 2021")
    ref = api(live_server, "seq2seq/decode", task="dates", text="March 5, 2021", beam=1, top_k=5)
    page.click("[data-testid=s2s-tab-encoder]")
    page.wait_for_selector("[data-testid=s2s-embed] .pic")
    S, D = len(ref["src_tokens"]), ref["d_model"]
    assert page.locator("[data-testid=s2s-src-chip] .txt").all_inner_texts() == [
        t.replace(" ", "␣") for t in ref["src_tokens"]]
    for which, key in (("embed", "embed"), ("pe", "pos_encoding"), ("sum", "embed_sum")):
        text = hover_cell(page, f"s2s-{which}", 3, 10, S, D)
        assert "dimension 10" in text
        assert number(text.split(":")[-1]) == pytest.approx(ref["source"][key][3][10], abs=6e-5)
    page.click("[data-testid=s2s-enc-grid] [data-lh='0-3']")
    text = hover_cell(page, "s2s-enc-attn", 1, 2, S, S)
    assert number(text.split(":")[-1]) == pytest.approx(ref["encoder_attn"][0][3][1][2], abs=6e-5)
    shot(page, "s2s-04-encoder")

    page.click("[data-testid=s2s-tab-positions]")
    page.wait_for_selector("[data-testid=s2s-sim] .pic")
    pe = api(live_server, "seq2seq/positional-encoding", task="dates", n_positions=64)
    assert pe["trained_length"] == 20
    text = hover_cell(page, "s2s-sim", 30, 33, 64, 64)  # beyond the trained length
    assert text.startswith("position 30 · position 33 = ")
    assert number(text.split("=")[-1]) == pytest.approx(pe["similarity"][30][33], abs=6e-4)
    text = hover_cell(page, "s2s-pe", 5, 7, 64, pe["d_model"])
    assert number(text.split(":")[-1]) == pytest.approx(pe["encoding"][5][7], abs=6e-5)
    shot(page, "s2s-05-positions")


def test_beam_search_and_exposure_bias(page, live_server):
    open_page(page, "number_words", "90017")
    page.click("[data-testid=s2s-tab-decoder]")  # the beam size is set where decoding is shown
    page.select_option("[data-testid=s2s-beam-size]", "3")
    page.wait_for_selector("[data-testid=s2s-beam]")
    ref = api(live_server, "seq2seq/decode", task="number_words", text="90017", beam=3, top_k=5)
    assert page.locator("[data-testid=s2s-output]").inner_text() == ref["output"] == "ninety thousand seventeen"
    # greedy and beams 2-4 side by side: here they agree
    assert "Greedy and beams 2–4 all write “ninety thousand seventeen”" in page.locator(
        "[data-testid=s2s-beams]").inner_text()
    shot(page, "s2s-06-beam")
    # a source unlike any it was trained on (a leading zero): the wider beams write something else, and say so
    page.fill("[data-testid=s2s-text]", "010")
    alts = api(live_server, "seq2seq/decode", task="number_words", text="010", beam=3, top_k=5,
               compare_beams=[1, 2, 3, 4])["alternatives"]
    assert alts[0]["output"] != alts[1]["output"]
    page.wait_for_function("() => document.querySelector('[data-testid=s2s-beams]').textContent.includes('differ')",
                           timeout=30_000)
    line = page.locator("[data-testid=s2s-beams]").inner_text()
    for a in alts:
        assert f"{a['output'] or '∅'} ({a['score']:.4f})".replace("-", "−") in line, line
    page.fill("[data-testid=s2s-text]", "90017")
    page.wait_for_function("() => document.querySelector('[data-testid=s2s-output]').textContent === "
                           "'ninety thousand seventeen'", timeout=30_000)

    page.click("[data-testid=s2s-tab-compare]")
    page.wait_for_selector("[data-testid=s2s-compare-table]")
    assert "Free running: “ninety thousand seventeen”, the reference itself" in page.locator(
        "[data-testid=s2s-compare-summary]").inner_text()
    # a reference the model would not write: teacher forcing feeds it anyway
    page.fill("[data-testid=s2s-target]", "ninety thousand seven")
    page.click("[data-testid=s2s-compare-run]")
    page.wait_for_function("() => document.querySelector('[data-testid=s2s-compare-summary]').textContent"
                           ".includes('leaves the reference at step 3')", timeout=30_000)
    cmp = api(live_server, "seq2seq/compare", task="number_words", text="90017", target="ninety thousand seven")
    assert cmp["first_divergence"] == 2  # step 3, counted from 1 as the table and the decoder view do
    rows = page.locator("[data-testid=s2s-compare-table] tbody tr")
    assert rows.count() == len(cmp["steps"])
    shot(page, "s2s-07-compare")


def test_input_outside_the_vocabulary_gets_the_apis_message(page):
    open_page(page)
    page.fill("[data-testid=s2s-text]", "Hello!")
    page.wait_for_selector("[data-testid=s2s-error]", timeout=30_000)
    msg = page.locator("[data-testid=s2s-error]").inner_text()
    assert "outside this task's vocabulary" in msg and "'H'" in msg and "'!'" in msg
    shot(page, "s2s-08-error")
    page.fill("[data-testid=s2s-text]", "abc")
    page.wait_for_selector("[data-testid=s2s-error]", state="detached", timeout=30_000)
    assert page.locator("[data-testid=s2s-output]").inner_text() == "cba"


def test_language_switch(page):
    open_page(page)
    assert page.locator("[data-testid=s2s-tab-decoder]").inner_text() == "Decoding step by step"
    page.select_option("[data-testid=lang]", "zh")
    page.wait_for_function("() => document.querySelector('[data-testid=s2s-tab-decoder]').textContent === '逐步解码'")
    assert page.locator("[data-testid=mode-seq2seq]").inner_text() == "编码器-解码器（2017）"
    assert page.locator("[data-testid=s2s-tab-positions]").inner_text() == "位置编码"
    page.click("[data-testid=s2s-tab-decoder]")
    page.wait_for_selector("[data-testid=s2s-cross] .pic")
    assert "第 1 步，共 6 步" == page.locator("[data-testid=s2s-step-count]").inner_text()
    text = hover_cell(page, "s2s-cross", 0, 4, 1, 5)
    assert text.startswith("输出词元 “o”（第 1 步）关注源词元 “o”（4）：")
    shot(page, "s2s-09-chinese")
    for tab in ("encoder", "compare", "positions", "training"):
        page.click(f"[data-testid=s2s-tab-{tab}]")
        page.wait_for_selector(f"[data-testid=s2s-panel-{tab}] section.view")
        page.wait_for_timeout(300)  # its values arrive
        shot(page, f"s2s-09-chinese-{tab}")
    page.select_option("[data-testid=lang]", "en")
    page.wait_for_function("() => document.querySelector('[data-testid=s2s-tab-decoder]').textContent === "
                           "'Decoding step by step'")
    # and back to the GPT-2 page
    page.click("[data-testid=mode-gpt2]")
    page.wait_for_selector("[data-testid=s2s-page]", state="detached")
    assert page.locator("[data-testid=text]").is_visible()


def test_live_training_streams_and_stops(page, live_server):
    open_page(page, "reverse", "abcdef")
    page.click("[data-testid=s2s-tab-training]")
    page.fill("[data-testid=s2s-train-steps]", "60")
    page.click("[data-testid=s2s-train-start]")
    page.wait_for_selector("[data-testid=s2s-train-status][data-status=finished]", timeout=120_000)
    first = page.locator("[data-testid=s2s-train-status]").get_attribute("data-run")
    assert page.locator("[data-testid=s2s-train-status]").get_attribute("data-step") == "60"
    page.wait_for_selector("[data-testid=s2s-train-cross] .pic")
    assert "step 60" in page.locator("[data-testid=s2s-train-done]").inner_text()
    assert page.locator("[data-testid=s2s-loss] path").count() == 2  # raw and smoothed loss
    shot(page, "s2s-10-training-finished")

    # the model it ended with, in the other tabs
    page.click("[data-testid=s2s-train-use]")
    page.wait_for_selector("[data-testid=s2s-using-run]")
    page.wait_for_selector("[data-testid=s2s-compare-table]", timeout=30_000)
    shot(page, "s2s-11-compare-live-model")

    # a long run, stopped from the page
    page.click("[data-testid=s2s-tab-training]")
    page.fill("[data-testid=s2s-train-steps]", "1500")
    page.click("[data-testid=s2s-train-start]")
    page.wait_for_function("r => { const s = document.querySelector('[data-testid=s2s-train-status]');"
                           " return s.dataset.run !== r && s.dataset.status === 'running' && +s.dataset.step > 150; }",
                           arg=first, timeout=120_000)
    busy = api_status(live_server)
    assert busy == 409  # a second run is refused while this one goes
    shot(page, "s2s-12-training-running")
    page.click("[data-testid=s2s-train-stop]")
    page.wait_for_selector("[data-testid=s2s-train-status][data-status=stopped]", timeout=60_000)
    assert 150 < int(page.locator("[data-testid=s2s-train-status]").get_attribute("data-step")) < 1500
    assert "Ended at step" in page.locator("[data-testid=s2s-train-done]").inner_text()
    shot(page, "s2s-13-training-stopped")


def api_status(server) -> int:
    import httpx

    return httpx.post(server.url + "api/seq2seq/train", json={"task": "dates", "steps": 20}, timeout=30).status_code
