"""How long `transformer-explainer serve` takes to start, from launching the process; with --page, how
long the page then takes to be drawn and usable in Chromium.

    .venv/bin/python benchmarks/startup.py [--model builtin|gpt2-small-shape|FOLDER] [--repeats 5] [--workers 1]
                                           [--page] [--compare OTHER_CHECKOUT]

Each round launches `python -m transformer_explainer.cli serve --port 0 --only --model ...` (this
checkout's src/ first on PYTHONPATH) and records, from the launch:
  url      the "serving on URL" line is printed (the socket is bound and listening)
  answer   /api/health first answers over HTTP (any status: 503 "loading" counts; the server is up),
           polled every 50 ms
  ready    GET /api/models has answered and /api/health then says 200 (the model is loaded); one
           waiting request, as a browser opening the page makes (no polling while the model loads)
and, for comparison, `--help` (parsing the command line only). Medians with min-max over the rounds.

With --page, each round instead opens the URL the moment it is printed, in a Chromium tab that was already
open (a blank page in a fresh browser context, so nothing is cached: a first visit, in a browser that is
running, as a learner's is), and records, in seconds since the URL was printed:
  nav      the tab starts navigating (performance.timeOrigin)
  html     the HTML's request sent, and its last byte            assets   the last JS / CSS byte
  script   the app's module starts running (main.ts)              mounted  the app's shell is in the DOM
  usable   the first frame that shows the shell is painted, with the text box editable (not read-only, not
           disabled: typing into it works, which each round checks by typing); the model still loads
  gap      usable - nav: the page's own part, the browser's navigation start left out
the page's own records (window.__teBoot, window.__teShell, Navigation / Resource Timing) and the
frame's end seen from the page (a MutationObserver on body[data-shell], then requestAnimationFrame and a
task: the frame with the shell has been painted).

--compare OTHER_CHECKOUT alternates the rounds with another checkout (its src/ first on PYTHONPATH, so its
server and its built web_dist/), so that both see the same load: a before/after comparison on a shared
machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from fixtures import gpt2_small_shape

ROOT = Path(__file__).resolve().parents[1]


def _env(root: Path = ROOT) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _serve_cmd(model: str, workers: int) -> list[str]:
    return [sys.executable, "-m", "transformer_explainer.cli", "serve", "--port", "0", "--only", "--offline",
            "--model", model, "--workers", str(workers)]


def time_help() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "transformer_explainer.cli", "--help"], env=_env(), check=True,
                   capture_output=True)
    return time.perf_counter() - t0


def time_serve(model: str, workers: int, timeout: float = 180.0) -> dict[str, float]:
    cmd = _serve_cmd(model, workers)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out: dict[str, float] = {}
    try:
        line = proc.stdout.readline()
        out["url"] = time.perf_counter() - t0
        if "serving on " not in line:
            raise RuntimeError(f"serve did not print its URL: {line!r}")
        url = line.split("serving on ", 1)[1].split()[0]
        status = 0
        with httpx.Client(timeout=timeout) as c:
            while time.perf_counter() - t0 < timeout:
                try:
                    status = c.get(url + "api/health").status_code
                except httpx.TransportError:
                    time.sleep(0.05)
                    continue
                out["answer"] = time.perf_counter() - t0
                break
            if status != 200:  # as a browser would: one request, answered once the model is in
                c.get(url + "api/models").raise_for_status()
                status = c.get(url + "api/health").status_code
            out["ready"] = time.perf_counter() - t0
        if status != 200:
            raise RuntimeError(f"the server did not become ready (health {status})")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out


# Installed in the tab before it navigates: the moment the first frame that shows the shell is painted. The
# app sets body[data-shell] once its shell is mounted (App.svelte); the observer sees it in that task, the
# animation frame callback runs just before that frame is drawn, and a task posted from it runs once the frame
# has been painted. The text box's state is read in the same frame.
PAINTED_JS = """(() => {
  new MutationObserver((_, mo) => {
    if (!document.body?.dataset.shell) return;
    mo.disconnect();
    requestAnimationFrame(() => setTimeout(() => {
      const box = document.querySelector('[data-testid=text]');
      window.__tePainted = { at: performance.now(), editable: !!box && !box.readOnly && !box.disabled };
    }, 0));
  }).observe(document, { subtree: true, attributes: true, attributeFilter: ['data-shell'] });
})()"""

PAGE_JS = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const assets = performance.getEntriesByType('resource').filter((r) => /assets\\/.*\\.(js|css)$/.test(r.name));
  return { origin: performance.timeOrigin, htmlSent: nav.requestStart, htmlEnd: nav.responseEnd,
           assetsEnd: Math.max(0, ...assets.map((r) => r.responseEnd)),
           assetBytes: assets.reduce((a, r) => a + r.transferSize, 0), assetCount: assets.length,
           script: window.__teBoot ?? null, mounted: window.__teShell, painted: window.__tePainted };
}"""
PAGE_PARTS = ("url", "nav", "html_sent", "html_end", "assets", "script", "mounted", "usable", "gap")


def time_page(browser, model: str, root: Path, timeout: float = 60.0) -> dict[str, float]:
    """One round of --page (see the module's docstring): seconds since the URL was printed, and "url", the
    URL's seconds since the launch."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.goto("about:blank")
        page.add_init_script(PAINTED_JS)
        t0 = time.perf_counter()
        proc = subprocess.Popen(_serve_cmd(model, 1), env=_env(root), stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        try:
            line = proc.stdout.readline()
            t_url, t_url_epoch = time.perf_counter(), time.time()
            if "serving on " not in line:
                raise RuntimeError(f"serve did not print its URL: {line!r}")
            page.goto(line.split("serving on ", 1)[1].split()[0], wait_until="commit", timeout=timeout * 1000)
            page.wait_for_function("() => window.__tePainted", timeout=timeout * 1000)
            o = page.evaluate(PAGE_JS)
            if not o["painted"]["editable"]:
                raise RuntimeError("the text box was not editable when the shell was drawn")
            box = page.locator("[data-testid=text]")
            box.press("End")
            box.press_sequentially("!")
            if not box.input_value().endswith("!"):
                raise RuntimeError("typing into the text box did not change it")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    finally:
        context.close()

    def at(ms: float | None) -> float:  # the page's performance.now() as seconds since the URL was printed
        return float("nan") if ms is None else (o["origin"] + ms) / 1000 - t_url_epoch

    out = {"url": t_url - t0, "nav": at(0), "html_sent": at(o["htmlSent"]), "html_end": at(o["htmlEnd"]),
           "assets": at(o["assetsEnd"]), "script": at(o["script"]), "mounted": at(o["mounted"]),
           "usable": at(o["painted"]["at"])}
    out["gap"] = out["usable"] - out["nav"]
    out["asset_kb"] = o["assetBytes"] / 1000
    return out


def page_rounds(model: str, repeats: int, roots: list[Path]) -> dict[Path, list[dict[str, float]]]:
    from playwright.sync_api import sync_playwright

    rounds: dict[Path, list[dict[str, float]]] = {r: [] for r in roots}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                           "--disable-component-update", "--no-first-run"])
        try:
            time_page(browser, model, roots[0])  # warm the disk cache and the browser once, not counted
            for _ in range(repeats):  # interleaved, so drift in the machine's load hits every checkout alike
                for r in roots:
                    rounds[r].append(time_page(browser, model, r))
        finally:
            browser.close()
    return rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt2-small-shape",
                    help="builtin (explainer-small), gpt2-small-shape (random weights, GPT-2 small's size), "
                         "or a folder")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--page", action="store_true", help="time the page in Chromium (drawn and usable) instead")
    ap.add_argument("--compare", type=Path, action="append", default=[],
                    help="with --page: another checkout (with its web_dist built) to alternate rounds with")
    args = ap.parse_args()
    if args.model == "builtin":
        model = "explainer-small"
    elif args.model == "gpt2-small-shape":
        model = str(gpt2_small_shape(Path(tempfile.gettempdir()) / "te-bench-gpt2-small-shape"))
    else:
        model = args.model
    if args.page:
        load0 = os.getloadavg()[0]
        by_root = page_rounds(model, args.repeats, [ROOT, *(c.resolve() for c in args.compare)])
        print(f"page of serve --model {args.model}: seconds since the URL was printed (url: since the launch), "
              f"median (min-max) of {args.repeats}; load average {load0:.1f} before, {os.getloadavg()[0]:.1f} "
              f"after, on {os.cpu_count()} cores")
        for root, rs in by_root.items():
            print(f"{root} ({statistics.median(r['asset_kb'] for r in rs):.0f} kB of JS and CSS sent):")
            for k in PAGE_PARTS:
                v = [r[k] for r in rs if r[k] == r[k]]  # a checkout whose page has no __teBoot: no "script"
                if v:
                    print(f"  {k:<9} {statistics.median(v):6.3f}  ({min(v):.3f}-{max(v):.3f})")
        return
    rounds: dict[str, list[float]] = {"help": [], "url": [], "answer": [], "ready": []}
    for _ in range(args.repeats):  # interleaved, so drift in the machine's load hits both alike
        rounds["help"].append(time_help())
        for k, v in time_serve(model, args.workers).items():
            rounds[k].append(v)
    print(f"serve --model {args.model} --workers {args.workers}: seconds from launch, median (min-max) of "
          f"{args.repeats}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for k, v in rounds.items():
        print(f"  {k:<7} {statistics.median(v):6.2f}  ({min(v):.2f}-{max(v):.2f})")


if __name__ == "__main__":
    main()
