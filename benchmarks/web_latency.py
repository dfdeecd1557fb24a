"""Browser-side speed of the web app on a GPT-2-small-shape model (random weights, real tokenizer).

Measures, with the real `transformer-explainer serve` process and Debian's Chromium:
- page interactive: from the server printing its URL to the first trace rendered (body[data-ready]);
- text change to updated view, per main view (tokens, attention, MLP, output) at 32 and 128 tokens,
  broken down from the page's own timestamps (window.__teRun, window.__teCalls) and the server's
  Server-Timing header:
    forward    the server's lookup, tokenization and forward pass ("model": only the positions a cached
               prefix does not cover: a changed last word recomputes only its own tokens)
    encode     the overview and tensors sliced and encoded          serialise  the answer's bytes built
    http       request sent, queued and answered, less the three above (the server framework, the socket)
    transfer   first to last byte of the answer                     parse      JSON (and binary) parsing
    decode     tensors decoded, state set                           fetch2     /api/tensors calls in the run
    draw       the DOM updated (Svelte's effects, canvases), layout and the next frame painted
    total      input event to painted frame;  beyond = total - forward (the goal: < 30 ms)
  Each text change is an edit of the last word, 0.5 s after the previous one (a pause in typing, so the
  app runs it at once). Two pages take turns, one asking for binary answers and one for JSON (?json), so
  both see the same load; medians with the 10th-90th percentile spread.

    .venv/bin/python benchmarks/web_latency.py [--model DIR] [--repeats 9] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from fixtures import gpt2_small_shape

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run"]
TEXTS = [
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
    "movable metal type with an oil-based ink and a",
    "In the middle of the ocean there is a small island where the fishermen tell stories about a whale that "
    "once swallowed a boat and then",
    "Researchers at the university announced on Tuesday that a new kind of battery could store twice as much "
    "energy as the ones used in",
]
VIEWS = ("tokens", "attention", "mlp", "output")
PARTS = ("forward", "encode", "serialise", "http", "transfer", "parse", "decode", "fetch2", "draw", "total", "beyond")


def fit_tokens(url: str, text: str, n: int) -> str:
    """Cut or extend `text` to exactly `n` tokens (by the server's own tokenizer)."""
    def count(t: str) -> int:
        return len(httpx.post(url + "api/trace", json={"text": t}, timeout=120).json()["token_ids"])

    while count(text) < n:
        text += " " + TEXTS[len(text) % 3]
    while count(text) > n:
        text = text.rsplit(" ", 1)[0]
    while count(text) < n:
        text += " and"
    return text


NOVEL = ["apple", "river", "storm", "garden", "engine", "silver", "window", "forest", "planet", "signal", "castle",
         "bridge", "candle", "market", "winter", "letter", "mirror", "valley", "rocket", "harbor", "pencil", "meadow",
         "thunder", "lantern", "compass", "violin", "glacier", "orchard", "canyon", "falcon", "saddle", "marble",
         "coffee", "library", "island", "blanket"]

# set the text, wait for the app's run to finish, then for the frame it drew to be painted
CHANGE_JS = """async (text) => {
  const ta = document.querySelector('[data-testid=text]');
  const before = Number(document.body.dataset.updates || 0);
  const t0 = performance.now();
  ta.value = text;
  ta.dispatchEvent(new Event('input', { bubbles: true }));
  await new Promise((resolve) => {
    const done = () => Number(document.body.dataset.updates || 0) > before;
    const check = () => (done() ? resolve(null) : requestAnimationFrame(check));
    check();
  });
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const painted = performance.now();
  const fetch2 = window.__teCalls.filter((c) => c.path === 'tensors' && c.start >= t0)
    .reduce((a, c) => a + c.parsed - c.start, 0);
  return { t0, painted, fetch2, run: window.__teRun };
}"""


def breakdown(out: dict) -> dict[str, float]:
    run, call = out["run"], out["run"]["call"]
    srv = call["server"]
    fwd, enc, ser = srv.get("model", 0.0), srv.get("encode", 0.0), srv.get("serialise", 0.0)
    total = out["painted"] - out["t0"]
    return {"forward": fwd, "encode": enc, "serialise": ser,
            "http": call["headers"] - call["start"] - fwd - enc - ser, "transfer": call["body"] - call["headers"],
            "parse": call["parsed"] - call["body"], "decode": run["decoded"] - run["traced"],
            "fetch2": out["fetch2"], "draw": out["painted"] - run["decoded"] - out["fetch2"], "total": total,
            "beyond": total - fwd, "bytes": call["bytes"]}


def summary(xs: list[float]) -> str:
    s = sorted(xs)
    lo, hi = s[int(0.1 * (len(s) - 1))], s[round(0.9 * (len(s) - 1))]
    return f"{statistics.median(s):7.1f} [{lo:.1f}-{hi:.1f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=Path("/tmp/te-bench-gpt2-small-shape"))
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--tokens", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    folder = gpt2_small_shape(args.model)
    results: dict[str, object] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        proc = subprocess.Popen([sys.executable, "-m", "transformer_explainer.cli", "serve", "--model", str(folder),
                                 "--port", "0", "--only"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=ROOT)
        try:
            t_start = time.perf_counter()
            line = proc.stdout.readline()
            t_url = time.perf_counter()
            url = line.split("serving on ", 1)[1].split()[0]
            results["server_start_s"] = round(t_url - t_start, 2)
            pages = {}
            for wire, query in (("binary", ""), ("json", "?json")):
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                t0 = time.perf_counter()
                page.goto(url + query)
                page.wait_for_selector("body[data-ready='1']", timeout=60_000)
                since = t_url if wire == "binary" else t0  # the first page: from the URL; the second: from goto
                results[f"page_interactive_s[{wire}]"] = round(time.perf_counter() - since, 3)
                pages[wire] = page
            for n in args.tokens:
                base = [fit_tokens(url, t, n) for t in TEXTS]
                for page in pages.values():
                    page.evaluate(CHANGE_JS, base[1])  # warm the path once
                changes = 0  # every change this size gets its own (base text, last word): 108 of them
                for view in VIEWS:
                    rows: dict[str, list[dict[str, float]]] = {w: [] for w in pages}
                    for page in pages.values():
                        page.click(f"[data-testid=nav-{view}]")
                        page.wait_for_timeout(300)
                    for _ in range(args.repeats):
                        for wire, page in pages.items():
                            # a last word the server has not seen with this prefix (its trace cache would
                            # make a repeat look faster); the prefix is cached, as it is while typing
                            word = NOVEL[(changes // 3) % len(NOVEL)]
                            text = base[changes % 3].rsplit(" ", 1)[0] + " " + word
                            changes += 1
                            page.wait_for_timeout(500)
                            rows[wire].append(breakdown(page.evaluate(CHANGE_JS, text)))
                    for wire, rs in rows.items():
                        results[f"{n} tokens, {view}, {wire}"] = {p: summary([r[p] for r in rs]) for p in PARTS} | {
                            "bytes": int(statistics.median(r["bytes"] for r in rs))}
        finally:
            proc.terminate()
            proc.wait(timeout=20)
            browser.close()
    for k, v in results.items():
        if not isinstance(v, dict):
            print(f"{k}: {v}")
    print("\nms per text change: median [10th-90th percentile]; beyond = total - forward (goal < 30 ms)")
    print(f"{'case':34}" + "".join(f"{p:>20}" for p in PARTS) + f"{'bytes':>10}")
    for k, v in results.items():
        if isinstance(v, dict):
            print(f"{k:34}" + "".join(f"{v[p]:>20}" for p in PARTS) + f"{v['bytes']:>10}")
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
