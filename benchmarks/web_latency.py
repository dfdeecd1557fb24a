"""Browser-side speed of the web app on a GPT-2-small-shape model (random weights, real tokenizer).

Measures, with the real `transformer-explainer serve` process and Debian's Chromium:
- page ready: from the server printing its URL to the first trace rendered (body[data-ready]);
- first payload: the bytes of the app's first /api/trace answer for a 32-token text (decoded JSON,
  and as sent with gzip);
- text change to updated view: in the page, from the input event to the view repainted with the new
  values (the app's own request-to-paint time is given too), for several views, median over repeats.
  The app runs the first change after a pause in typing at once, and waits for a 100 ms pause while
  keys come less than 300 ms apart: by default the changes come 0.5 s apart (an edit, then a look at
  the view); `--burst` sends them back to back, which includes that 100 ms wait.

    .venv/bin/python benchmarks/web_latency.py [--model DIR] [--repeats 7]
"""

from __future__ import annotations

import argparse
import gzip
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


def fit_32_tokens(url: str, text: str) -> str:
    """Cut or extend `text` to exactly 32 tokens (by the server's own tokenizer)."""
    ids = httpx.post(url + "api/trace", json={"text": text}, timeout=60).json()["token_ids"]
    while len(ids) < 32:
        text += " and"
        ids = httpx.post(url + "api/trace", json={"text": text}, timeout=60).json()["token_ids"]
    while len(ids) > 32:
        text = text.rsplit(" ", 1)[0]
        ids = httpx.post(url + "api/trace", json={"text": text}, timeout=60).json()["token_ids"]
    return text


NOVEL = ["apple", "river", "storm", "garden", "engine", "silver", "window", "forest", "planet", "signal", "castle",
         "bridge", "candle", "market", "winter", "letter", "mirror", "valley", "rocket", "harbor", "pencil", "meadow",
         "thunder", "lantern", "compass", "violin", "glacier", "orchard", "canyon", "falcon", "saddle", "marble",
         "coffee", "library", "island", "blanket"]

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
  return { total: performance.now() - t0, app: Number(document.body.dataset.lastUpdateMs) };
}"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=Path("/tmp/te-bench-gpt2-small-shape"))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--burst", action="store_true", help="changes back to back, as in fast typing")
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
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            first: dict[str, int] = {}

            def on_response(resp) -> None:
                if resp.url.endswith("/api/trace") and "decoded" not in first:
                    body = resp.body()
                    first["decoded"] = len(body)
                    first["sent"] = resp.request.sizes()["responseBodySize"]

            page.on("response", on_response)
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            results["page_ready_after_url_s"] = round(time.perf_counter() - t_url, 3)
            results["first_payload_default_text"] = first

            texts = [fit_32_tokens(url, t) for t in TEXTS]
            # the first payload for 32 tokens, as the app asks for it (tokens view: overview only) and with
            # the tensors of the heaviest first view (attention: four head slices)
            for name, include in (("overview", []),
                                  ("with_attention_view", [{"name": "blocks.0.attn.scores", "head": 0, "position": -1},
                                                           {"name": "blocks.0.attn.scaled_scores", "head": 0,
                                                            "position": -1},
                                                           {"name": "blocks.0.attn.masked_scores", "head": 0,
                                                            "position": -1},
                                                           {"name": "blocks.0.attn.pattern", "head": 0}])):
                r = httpx.post(url + "api/trace", json={"text": texts[0], "top_n": 15, "include": include,
                                                        "sampling": {"temperature": 1, "seed": 42}}, timeout=60)
                results[f"payload_32_tokens_{name}"] = {"json_bytes": len(r.content),
                                                        "gzip_bytes": len(gzip.compress(r.content))}
            page.evaluate(CHANGE_JS, texts[1])  # warm the path once
            for view in ("tokens", "attention", "mlp", "output"):
                page.click(f"[data-testid=nav-{view}]")
                page.wait_for_timeout(300)
                totals, apps = [], []
                for i in range(args.repeats):
                    # a text the server has not seen (its trace cache would make a repeat look faster)
                    text = texts[i % len(texts)].rsplit(" ", 1)[0] + " " + NOVEL[(i + 7 * len(results)) % len(NOVEL)]
                    if not args.burst:
                        page.wait_for_timeout(500)
                    out = page.evaluate(CHANGE_JS, text)
                    totals.append(out["total"])
                    apps.append(out["app"])
                results[f"text_change_to_view_ms[{view}]"] = {
                    "median_total": round(statistics.median(totals), 1),
                    "median_app_request_to_paint": round(statistics.median(apps), 1),
                    "max_total": round(max(totals), 1)}
        finally:
            proc.terminate()
            proc.wait(timeout=20)
            browser.close()
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
