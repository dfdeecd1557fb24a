"""The encoder-decoder page's lesson and the Experiments area's, in a real browser against the live server:
the same steps in both languages, every step with text, the card never on top of what it points at
(1280x900), the numbers in the card equal to what /api/seq2seq and /api/analysis answer for the same
input, and they follow the input when it changes. Every step is saved as a screenshot."""

from __future__ import annotations

import math

import pytest

from .test_app import api, wait_tokens
from .test_experiments import EXAMPLE as EXP_EXAMPLE
from .test_experiments import TEXT as EXP_TEXT
from .test_seq2seq import open_page

pytestmark = pytest.mark.browser

S2S_STEPS = ["task", "why", "onehot", "cosine", "embedding", "sinusoids", "beyond", "encoder", "heads", "start",
             "masked", "cross", "teacher-forcing", "beam", "training"]
EXP_STEPS = ["importance", "roles", "ablation", "pruning", "lens", "arithmetic"]

# the card's text is ready (not "loading") and its values are drawn
READY = ("() => { const b = document.querySelector('[data-testid=lesson-body]');"
         " return b && b.getAttribute('aria-busy') === 'false'; }")

STEP_STATE = """() => {
  const card = document.querySelector('[data-testid=tour]');
  const hole = document.querySelector('.hole');  // the outline drawn 6 px around the step's target
  const r = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const t = hole ? { getBoundingClientRect: () => { const b = hole.getBoundingClientRect();
    return { left: b.left + 6, top: b.top + 6, right: b.right - 6, bottom: b.bottom - 6 }; } } : null;
  const nums = {};
  for (const b of card.querySelectorAll('[data-num]')) nums[b.dataset.num] = b.dataset.raw;
  return { step: card.dataset.step, title: card.querySelector('h3').textContent,
    body: card.querySelector('[data-testid=lesson-body]').textContent.trim(),
    task: card.querySelector('[data-testid=lesson-task]')?.textContent.trim() ?? null,
    done: !!card.querySelector('[data-testid=lesson-task].done'),
    card: r(card), target: t ? r(t) : null, nums };
}"""


def set_lang(page, lang: str) -> None:
    page.select_option("[data-testid=lang]", lang)
    want = "zh-CN" if lang == "zh" else "en"
    page.wait_for_function("l => document.documentElement.lang === l", arg=want)


def state(page, step: str) -> dict:
    page.wait_for_function("s => document.querySelector('[data-testid=tour]')?.dataset.step === s", arg=step)
    page.wait_for_function(READY, timeout=60_000)
    return page.evaluate(STEP_STATE)


def settle(page, step: str, check) -> dict:
    """The step's state once `check(state)` holds (views load after the step opens), else the last one."""
    last = state(page, step)
    for _ in range(60):
        try:
            check(last)
            return last
        except (AssertionError, KeyError):
            page.wait_for_timeout(250)
            last = page.evaluate(STEP_STATE)
    check(last)
    return last


def assert_not_covered(s: dict) -> None:
    assert s["target"] is not None, f"step {s['step']}: its target is not on the page"
    (cl, ct, cr, cb), (tl, tt, tr, tb) = s["card"], s["target"]
    overlap = min(cr, tr) > max(cl, tl) and min(cb, tb) > max(ct, tt)
    assert not overlap, f"step {s['step']}: the card {s['card']} covers its target {s['target']}"


def close(value: str, ref: float, rel: float = 1e-6) -> bool:
    return math.isclose(float(value), ref, rel_tol=rel, abs_tol=1e-9)


def next_step(page) -> None:
    page.click("[data-testid=tour-next]")


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def cosines(dec: dict) -> list[tuple[float, str, str]]:
    """(cosine, a, b) for every pair of the source's distinct tokens' (scaled) embedding rows."""
    rows: dict[str, list[float]] = {}
    for t, row in zip(dec["src_tokens"], dec["source"]["embed"], strict=True):
        rows.setdefault(t, row)
    toks = list(rows)
    return [(sum(x * y for x, y in zip(rows[a], rows[b], strict=True)) / (norm(rows[a]) * norm(rows[b])), a, b)
            for i, a in enumerate(toks) for b in toks[i + 1:]]


def later_weights(dec: dict) -> list[tuple[float, int, int, int, int]]:
    """(weight, layer, head, query, key) of the largest weight a source token gives a later one, per head."""
    out = []
    for lay, heads in enumerate(dec["encoder_attn"]):
        for h, m in enumerate(heads):
            out.append(max((m[q][k], lay, h, q, k) for q in range(len(m)) for k in range(q + 1, len(m))))
    return out


def positional_heads(dec: dict) -> list[tuple[float, int, int]]:
    """(mean weight, layer, head) on one relative position (itself, before, after, mirrored), per head."""
    S = len(dec["src_tokens"])
    rels = (lambda q: q, lambda q: q - 1, lambda q: q + 1, lambda q: S - 1 - q)
    out = []
    for lay, heads in enumerate(dec["encoder_attn"]):
        for h, m in enumerate(heads):
            for rel in rels:
                ws = [m[q][rel(q)] for q in range(S) if 0 <= rel(q) < S]
                if len(ws) >= 2:
                    out.append((sum(ws) / len(ws), lay, h))
    return out


def run_s2s_lesson(page, live_server, lang: str) -> dict[str, dict]:
    open_page(page)
    set_lang(page, lang)
    dec = api(live_server, "seq2seq/decode", task="reverse", text="hello", beam=1, top_k=5, compare_beams=[1, 2, 3, 4])
    tasks = api_get(live_server, "seq2seq/tasks")
    pos = api(live_server, "seq2seq/positional-encoding", task="reverse", n_positions=64)
    cmp = api(live_server, "seq2seq/compare", task="reverse", text="hello", target=None)
    card = next(t for t in tasks["tasks"] if t["name"] == "reverse")["checkpoint"]
    S, D, n = len(dec["src_tokens"]), dec["d_model"], len(dec["steps"])
    page.click("[data-testid=tour-open]")
    page.wait_for_selector("[data-testid=tour][data-lesson=seq2seq]")
    seen: dict[str, dict] = {}

    def check(step: str, f) -> dict:
        return check_step(page, seen, step, f, f"lesson-s2s-{lang}")

    def task(s):
        n_ = s["nums"]
        assert n_["s2s-input"] == "hello" and n_["s2s-output"] == dec["output"] and int(n_["s2s-n-src"]) == S
        assert int(n_["s2s-params"]) == dec["n_params"]
        shape = [int(n_[f"s2s-{x}"]) for x in ("n-enc", "n-dec", "n-heads", "d-model", "d-ff")]
        assert shape == [dec["n_encoder_layers"], dec["n_decoder_layers"], dec["n_heads"], D, dec["d_ff"]]
        assert int(n_["s2s-d-k"]) == D // dec["n_heads"] and close(n_["s2s-exact-match"], card["exact_match"])
        assert int(n_["s2s-paper-ratio"]) == round(65e6 / dec["n_params"])
        assert ("Reverse a string" if lang == "en" else "字符串倒序") in s["body"]
    check("task", task)
    next_step(page)

    def why(s):
        n_ = s["nums"]
        assert (int(n_["s2s-why-n"]), int(n_["s2s-why-gap"]), int(n_["s2s-why-pairs"]), int(n_["s2s-why-d"])) == (
            S, S - 1, S * S, D)
    check("why", why)
    next_step(page)

    def onehot(s):
        n_ = s["nums"]
        assert n_["s2s-oh-token"] == dec["src_tokens"][0] and int(n_["s2s-oh-id"]) == dec["src_ids"][0]
        assert int(n_["s2s-oh-vocab"]) == dec["src_vocab_size"] == len(
            next(t for t in tasks["tasks"] if t["name"] == "reverse")["src_vocab"]) + 3
    check("onehot", onehot)
    next_step(page)
    best_cos = max(cosines(dec))

    def cosine(s):
        n_ = s["nums"]
        assert {n_["s2s-cos-a"], n_["s2s-cos-b"]} == {best_cos[1], best_cos[2]}
        assert close(n_["s2s-cos"], best_cos[0], 1e-4)
        assert close(n_["s2s-cos-lo"], min(cosines(dec))[0], 1e-4)
    check("cosine", cosine)
    next_step(page)

    def embedding(s):
        n_ = s["nums"]
        assert int(n_["s2s-d-model"]) == D and close(n_["s2s-embed-scale"], dec["embed_scale"])
        assert n_["s2s-first-token"] == dec["src_tokens"][0]
        assert close(n_["s2s-embed-norm"], norm(dec["source"]["embed"][0]), 1e-5)
        assert close(n_["s2s-embed-raw"], norm(dec["source"]["embed"][0]) / math.sqrt(D), 1e-5)
        assert close(n_["s2s-pe-norm"], norm(dec["source"]["pos_encoding"][0]), 1e-5)
        assert int(n_["s2s-src-vocab"]) == dec["src_vocab_size"] and int(n_["s2s-tgt-vocab"]) == dec["tgt_vocab_size"]
    check("embedding", embedding)
    next_step(page)

    def sinusoids(s):
        n_, sim = s["nums"], pos["similarity"]
        assert close(n_["s2s-sim-2-4"], sim[2][4]) and close(n_["s2s-sim-12-14"], sim[12][14])
        assert close(n_["s2s-sim-2-12"], sim[2][12])
        assert sim[2][4] == pytest.approx(sim[12][14], rel=1e-4)  # what the step says: equal, 2 apart each
        assert sim[2][12] < sim[2][4]
    check("sinusoids", sinusoids)
    next_step(page)

    def beyond(s):
        assert int(s["nums"]["s2s-trained-len"]) == pos["trained_length"]
        assert int(s["nums"]["s2s-n-pos"]) == 64 and not s["done"]
    check("beyond", beyond)
    page.fill("[data-testid=s2s-npos]", "160")  # the task: past the trained length, and the text follows
    settle(page, "beyond", lambda s: (int(s["nums"]["s2s-n-pos"]) == 160 or _fail()) and (s["done"] or _fail()))
    next_step(page)
    w, el, eh, q, k = max(later_weights(dec))  # the lesson opens the head with the largest weight to a later token

    def encoder(s):
        n_ = s["nums"]
        assert (int(n_["s2s-enc-layer"]), int(n_["s2s-enc-head"])) == (el, eh) and not s["done"]
        assert (int(n_["s2s-enc-qi"]), int(n_["s2s-enc-ki"])) == (q, k) and close(n_["s2s-enc-w"], w, 1e-5)
        assert n_["s2s-enc-q"] == dec["src_tokens"][q] and n_["s2s-enc-k"] == dec["src_tokens"][k]
    check("encoder", encoder)
    other = (el, (eh + 1) % dec["n_heads"])
    page.click(f"[data-testid=s2s-enc-grid] [data-lh='{other[0]}-{other[1]}']")  # the task; the text follows the head
    ow = next(x for x in later_weights(dec) if x[1:3] == other)
    settle(page, "encoder", lambda s: (s["done"] and int(s["nums"]["s2s-enc-head"]) == other[1]
                                       and close(s["nums"]["s2s-enc-w"], ow[0], 1e-5)) or _fail())
    next_step(page)
    hw, hl, hh = max(positional_heads(dec))

    def heads(s):
        n_ = s["nums"]
        assert (int(n_["s2s-heads-layer"]), int(n_["s2s-heads-head"])) == (hl, hh)
        assert close(n_["s2s-heads-w"], hw, 1e-5)
    check("heads", heads)
    next_step(page)

    def start(s):
        n_, st = s["nums"], dec["steps"]
        assert n_["s2s-step0-token"] == st[0]["token"] and close(n_["s2s-step0-prob"], st[0]["prob"], 1e-5)
        assert int(n_["s2s-n-steps"]) == n and int(n_["s2s-max-out"]) == dec["max_output_len"] and not s["done"]
    check("start", start)
    for _ in range(n - 1):  # the task: Step until the end token
        page.click("[data-testid=s2s-step]")
    settle(page, "start", lambda s: s["done"] or _fail())
    next_step(page)

    def masked(s):  # the decoder stays where the learner left it: the last step
        n_, row = s["nums"], dec["steps"][n - 1]["self_attn"][1][0]
        assert int(n_["s2s-self-step"]) == n and int(n_["s2s-self-seen"]) == len(row) == n
        assert close(n_["s2s-self-start"], row[0], 1e-5)
    check("masked", masked)
    next_step(page)
    sharp = max((sum(max(st["cross_attn"][lay][h]) for st in dec["steps"]) / n, lay, h)
                for lay in range(dec["n_decoder_layers"]) for h in range(dec["n_heads"]))

    def cross(s):
        n_, row = s["nums"], dec["steps"][0]["cross_attn"][sharp[1]][sharp[2]]
        j = row.index(max(row))
        assert (int(n_["s2s-cross-layer"]), int(n_["s2s-cross-head"])) == (sharp[1], sharp[2]) and not s["done"]
        assert n_["s2s-cross-out"] == dec["steps"][0]["token"] and int(n_["s2s-cross-src-pos"]) == j
        assert n_["s2s-cross-src"] == dec["src_tokens"][j] and close(n_["s2s-cross-weight"], row[j], 1e-5)
        assert page.locator("[data-testid=s2s-out-chip]").count() == n  # the whole alignment on the map
    check("cross", cross)
    other_c = (sharp[1], (sharp[2] + 1) % dec["n_heads"])
    page.click(f"[data-testid=s2s-cross-grid] [data-lh='{other_c[0]}-{other_c[1]}']")  # the task
    settle(page, "cross", lambda s: (s["done"] and int(s["nums"]["s2s-cross-head"]) == other_c[1]) or _fail())
    next_step(page)

    def teacher(s):
        n_ = s["nums"]
        assert cmp["first_divergence"] is None and n_["s2s-tf-ref"] == cmp["target"] == "olleh"
        assert int(n_["s2s-tf-positions"]) == len(cmp["gold_tokens"]) + 1 == cmp["teacher_correct_steps"]
        assert n_["s2s-tf-example"] != "olleh" and len(n_["s2s-tf-example"]) == len("olleh") and not s["done"]
    ex = check("teacher-forcing", teacher)["nums"]["s2s-tf-example"]
    page.fill("[data-testid=s2s-target]", ex)  # the task: the example reference, one token changed near its start
    page.click("[data-testid=s2s-compare-run]")
    wrong = api(live_server, "seq2seq/compare", task="reverse", text="hello", target=ex)
    j = wrong["first_divergence"]
    later = [st for st in wrong["steps"] if j < st["step"] < len(wrong["gold_tokens"]) + 1]

    def teacher_done(s):
        n_ = s["nums"]
        assert s["done"] and j is not None and int(n_["s2s-tf-step"]) == j + 1 and n_["s2s-tf-ref"] == ex
        assert n_["s2s-tf-own"] == wrong["steps"][j]["free_token"] and n_["s2s-tf-gold"] == wrong["steps"][j]["gold"]
        assert int(n_["s2s-tf-later"]) == len(later) > 0
        assert int(n_["s2s-tf-later-right"]) == sum(st["teacher_token"] == st["gold"] for st in later)
        assert n_["s2s-free-text"] == wrong["free_text"]
    seen["teacher-forcing"] = settle(page, "teacher-forcing", teacher_done)
    page.screenshot(path=f"test-artifacts/lesson-s2s-{lang}-{len(seen):02d}-wrong-reference.png")
    next_step(page)
    alts = dec["alternatives"]

    def greedy(s):
        n_ = s["nums"]
        assert all(a["output"] == dec["output"] for a in alts)  # the shipped reverse model: no beam changes "hello"
        assert n_["s2s-beam-output"] == dec["output"] and close(n_["s2s-beam-score"], dec["score"], 1e-5)
        assert int(n_["s2s-beam-max"]) == 4 and int(n_["s2s-beam-target"]) == 3 and not s["done"]
        assert close(n_["s2s-beam-pmin"], min(st["prob"] for st in dec["steps"]), 1e-5)
    check("beam", greedy)
    page.select_option("[data-testid=s2s-beam-size]", "3")  # the task; the text follows the new decode
    beam = api(live_server, "seq2seq/decode", task="reverse", text="hello", beam=3, top_k=5)

    def beam3(s):
        n_ = s["nums"]
        assert int(n_["s2s-beam-size"]) == 3 and n_["s2s-beam-output"] == beam["output"] and s["done"]
        b0 = beam["beams"][0]
        assert int(n_["s2s-beam-kept"]) == len(b0["alive"]) + len(b0["finished"])
    seen["beam"] = settle(page, "beam", beam3)
    page.screenshot(path=f"test-artifacts/lesson-s2s-{lang}-{len(seen):02d}-beam3.png")
    next_step(page)

    def training(s):
        n_ = s["nums"]
        assert close(n_["s2s-train-top-prob"], beam["steps"][0]["prob"], 1e-5)
        assert int(n_["s2s-train-vocab"]) == dec["tgt_vocab_size"]
        assert close(n_["s2s-train-ceiling"], 0.9 + 0.1 / dec["tgt_vocab_size"], 1e-6)
    check("training", training)
    assert page.locator("[data-testid=tour-finish]").count() == 1
    return seen


def _fail() -> bool:
    raise AssertionError


def api_get(server, path: str) -> dict:
    import httpx

    r = httpx.get(server.url + "api/" + path, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def lessons_seen() -> dict[str, dict[str, dict[str, dict]]]:
    return {}


def check_step(page, seen: dict[str, dict], step: str, f, shot: str) -> dict:
    """Settle on `step`, check its card has text and leaves its target visible, keep and screenshot it."""
    s = settle(page, step, f)
    assert s["title"] and s["body"]
    page.wait_for_timeout(400)  # the card and the outline glide to their places
    assert_not_covered(page.evaluate(STEP_STATE))
    seen[step] = s
    page.screenshot(path=f"test-artifacts/{shot}-{len(seen):02d}.png")
    return s


@pytest.mark.parametrize("lang", ["en", "zh"])

def test_seq2seq_lesson(page, live_server, lang, lessons_seen):
    seen = run_s2s_lesson(page, live_server, lang)
    assert list(seen) == S2S_STEPS
    lessons_seen.setdefault("s2s", {})[lang] = seen
    if lang == "zh":
        en = lessons_seen["s2s"].get("en")
        if en:  # the same steps, the same values, the text in Chinese
            for step in S2S_STEPS:
                assert set(seen[step]["nums"]) == set(en[step]["nums"]), step
                assert seen[step]["title"] != en[step]["title"]
        for s in seen.values():
            assert any("\u4e00" <= ch <= "\u9fff" for ch in s["body"]), s["step"]


def test_seq2seq_lesson_follows_the_source(page, live_server):
    open_page(page)
    page.click("[data-testid=tour-open]")
    s = state(page, "task")
    assert s["nums"]["s2s-output"] == "olleh" and not s["done"]
    page.fill("[data-testid=s2s-text]", "world")
    ref = api(live_server, "seq2seq/decode", task="reverse", text="world", beam=1, top_k=5)
    s = settle(page, "task", lambda s: (s["nums"]["s2s-input"] == "world" or _fail()))
    assert s["nums"]["s2s-output"] == ref["output"] != "olleh" and s["done"]
    next_step(page)
    next_step(page)
    s = settle(page, "onehot", lambda s: (s["nums"]["s2s-oh-token"] == "w" or _fail()))
    assert int(s["nums"]["s2s-oh-id"]) == ref["src_ids"][0]


def run_exp_lesson(page, live_server, lang: str) -> dict[str, dict]:
    ref = api(live_server, "trace", text=EXP_TEXT)
    page.fill("[data-testid=text]", EXP_TEXT)
    wait_tokens(page, len(ref["token_ids"]))
    set_lang(page, lang)
    page.click("[data-testid=nav-experiments]")
    page.wait_for_selector("[data-testid=lens-table]")
    ids = ref["token_ids"]
    ln_v = math.log(ref["config"]["vocab_size"])
    own = api(live_server, "analysis/importance", ids=ids, mode="zero")
    example = api(live_server, "trace", text=EXP_EXAMPLE)["token_ids"]
    # the lesson's choice of text for the head experiments: the learner's when the model predicts it (a loss
    # under half of ln V), else the example when the model predicts that, else the learner's
    on_example = own["clean_loss"] > 0.5 * ln_v and \
        api(live_server, "analysis/importance", ids=example, mode="zero")["clean_loss"] <= 0.5 * ln_v
    used = example if on_example else ids
    imp = own if not on_example else api(live_server, "analysis/importance", ids=used, mode="zero")
    heads = api(live_server, "analysis/heads", ids=used, reference=True)
    prune = api(live_server, "analysis/prune", ids=used, mode="zero", max_heads=None, recompute=False)
    page.click("[data-testid=tour-open]")
    page.wait_for_selector("[data-testid=tour][data-lesson=experiments]")
    seen: dict[str, dict] = {}

    def check(step: str, f) -> dict:
        return check_step(page, seen, step, f, f"lesson-exp-{lang}")

    flat = [v for row in imp["loss_change"] for v in row]
    H = imp["n_head"]
    top = divmod(max(range(len(flat)), key=lambda i: flat[i]), H)

    def importance(s):
        n = s["nums"]
        assert close(n["exp-own-loss"], own["clean_loss"], 2e-3) and close(n["exp-lnv"], ln_v, 2e-3)
        assert (page.locator("[data-testid=exp-example]").count() == 1) == on_example
        assert n["exp-top-head"] == f"{top[0]},{top[1]}" and close(n["exp-top-change"], abs(flat[top[0] * H + top[1]]))
        assert int(n["exp-negative-heads"]) == sum(v < 0 for v in flat) and int(n["exp-n-heads"]) == len(flat)
        assert int(n["exp-small-heads"]) == sum(abs(v) < 0.01 for v in flat)
        # the map shows the importance of the text the lesson chose
        shown = float(page.get_attribute(f"[data-testid=head-cell-{top[0]}-{top[1]}]", "data-value"))
        assert shown == pytest.approx(flat[top[0] * H + top[1]], rel=1e-6)
    check("importance", importance)
    next_step(page)

    src = heads["reference"] or heads["text"]
    best = max(((v, role, li, h) for role, m in src["scores"].items() for li, row in enumerate(m)
                for h, v in enumerate(row) if v is not None), key=lambda x: x[0])

    def roles(s):
        n = s["nums"]
        assert n["exp-role-head"] == f"{best[2]},{best[3]}" and close(n["exp-role-score"], best[0])
        assert page.get_attribute("[data-testid=head-map]", "data-metric") == best[1]  # the map shows that habit
        named = [r for row in (heads["reference_role_of"] or heads["text_role_of"]) for r in row if r]
        if named:
            assert int(n["exp-roles-named"]) == len(named)
    check("roles", roles)
    next_step(page)
    # the lesson switches the map's first head off itself; its task is mean ablation
    zero = api(live_server, "analysis/ablate", ids=used, heads=[list(top)], mode="zero", top=10)
    mean = api(live_server, "analysis/ablate", ids=used, heads=[list(top)], mode="mean", top=10)

    def ablated(ref):
        def f(s):
            n = s["nums"]
            assert n["exp-abl-target"] == f"{top[0]},{top[1]}" and n["exp-abl-head"] == f"{top[0]},{top[1]}"
            assert close(n["exp-abl-before"], ref["loss_before"]) and close(n["exp-abl-after"], ref["loss_after"])
            assert int(n["exp-abl-token"]) == ref["before"][0]["id"]
            assert close(n["exp-abl-token-before"], ref["before"][0]["prob"], 1e-5)
            assert s["done"] == (ref["mode"] == "mean")
        return f
    check("ablation", ablated(zero))
    page.select_option("[data-testid=ablation-mode]", "mean")  # the task
    seen["ablation"] = settle(page, "ablation", ablated(mean))
    page.screenshot(path=f"test-artifacts/lesson-exp-{lang}-{len(seen):02d}-done.png")
    page.select_option("[data-testid=ablation-mode]", "zero")
    next_step(page)

    def pruning(s):
        n, steps = s["nums"], prune["steps"]
        assert int(n["exp-prune-heads"]) == len(steps) and close(n["exp-prune-clean"], prune["clean_loss"])
        assert close(n["exp-prune-all-off"], steps[-1]["loss"])
        knee = next((i for i, x in enumerate(steps) if x["loss"] > prune["clean_loss"] * 1.1), None)
        if knee is not None:
            assert int(n["exp-prune-safe"]) == knee and close(n["exp-prune-knee-loss"], steps[knee]["loss"])
    check("pruning", pruning)
    next_step(page)
    last = len(ids) - 1
    lens = api(live_server, "analysis/lens", ids=ids, positions=[last], top=5)

    def lens_step(s):
        n, rows = s["nums"], [layer["positions"][0] for layer in lens["layers"]]
        assert int(n["exp-lens-token"]) == ids[last] and int(n["exp-lens-pred"]) == lens["targets"][0]["id"]
        assert int(n["exp-lens-rank0"]) == rows[0]["target_rank"]
        assert close(n["exp-lens-final-prob"], rows[-1]["target_prob"], 1e-5)
        assert not s["done"]
    check("lens", lens_step)
    page.locator("[data-testid=token-chip]").nth(3).click()  # the task: the lens follows the focus token
    lens3 = api(live_server, "analysis/lens", ids=ids, positions=[3], top=5)
    settle(page, "lens", lambda s: (s["done"] and int(s["nums"]["exp-lens-token"]) == ids[3]
                                    and int(s["nums"]["exp-lens-pred"]) == lens3["targets"][0]["id"]) or _fail())
    next_step(page)
    an = api(live_server, "analysis/analogy", positive=[" king", " woman"], negative=[" man"], n=10)

    def arithmetic(s):
        n = s["nums"]
        assert int(n["exp-analogy-top"]) == an["neighbours"][0]["id"]
        assert close(n["exp-analogy-sim"], an["neighbours"][0]["similarity"], 1e-5)
    check("arithmetic", arithmetic)
    return seen


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_experiments_lesson(page, live_server, lang, lessons_seen):
    seen = run_exp_lesson(page, live_server, lang)
    assert list(seen) == EXP_STEPS
    lessons_seen.setdefault("exp", {})[lang] = seen
    if lang == "zh":
        en = lessons_seen["exp"].get("en")
        if en:
            for step in EXP_STEPS:
                assert seen[step]["title"] != en[step]["title"]
        for s in seen.values():
            assert any("\u4e00" <= ch <= "\u9fff" for ch in s["body"]), s["step"]
