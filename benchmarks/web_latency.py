"""Browser-side speed of the web app on a GPT-2-small-shape model (random weights, real tokenizer).

Measures, with the real `transformer-explainer serve` process and Debian's Chromium:
- page usable: from the server printing its URL to the app's shell drawn and usable (body[data-shell]: header,
  language switch, text box; the server serves the page while its model still loads);
- page interactive: from the server printing its URL to the first trace rendered (body[data-ready]);
- text change to updated view, per main view (tokens, attention, MLP, output) at 32, 128 and 1,000 tokens,
  broken down from the page's own timestamps (window.__teRun, window.__teCalls) and the server's
  Server-Timing header:
    forward    the server's lookup, tokenization and forward pass ("model": only the positions a cached
               prefix does not cover: a changed last word recomputes only its own tokens)
    encode     the overview and tensors sliced and encoded          serialise  the answer's bytes built
    http       request sent, queued and answered, less the three above (the server framework, the socket)
    transfer   first to last byte of the answer                     parse      JSON (and binary) parsing
    decode     tensors decoded, state set                           fetch2     /api/tensors calls in the run
    draw       the DOM updated (Svelte's effects, canvases), layout and the next frame painted
    total      input event to painted frame (see CHANGE_JS);  beyond = total - forward (the goal: < 30 ms)
  Each text change is an edit of the last word, 0.5 s after the previous one (a pause in typing, so the
  app runs it at once). Two pages take turns, one asking for binary answers and one for JSON (?json), so
  both see the same load; medians with the 10th-90th percentile spread. The edits go round `--texts` texts
  (3 by default: three learners' texts on one server; 1: one learner typing), each fitted to the length asked
  (by the server's tokens endpoint), less where an edit of its last word would go over the model's context
  (`--tokens 1024` on GPT-2: every edit is read whole); each row says the length its texts had.

With --profile, every repeat also makes a second change (another last word) with a Chromium trace recorded
(CDP Tracing: devtools.timeline, v8.execute), and a second table says where that change's time went:
    page       the page's own part of beyond: input event to request sent, and the answer's first byte to
               the painted frame (= beyond - encode - serialise - http), split into the main thread's self
               time (the innermost event wins):
    script     JavaScript: event handlers, timers, animation frames, microtasks, compiling
    gc         garbage collection                          style   style recalculation (UpdateLayoutTree)
    layout     layout                                      paint   pre-paint, paint, layerize
    commit     the main thread handing the frame to the compositor thread (it waits for that thread)
    other      the rest of the main thread's tasks         idle    main thread not busy
    raster     RasterTask time on the raster threads (off the main thread, partly in parallel)
    flight     the main thread's busy time while the request was out (the server's time: spinner, fades),
               split the same way in a third table
  A traced change runs slower than an untraced one (tracing costs); its own forward and beyond are printed
  beside the parts, and the untraced changes, interleaved with the traced ones, still fill the first table.

    .venv/bin/python benchmarks/web_latency.py [--model DIR] [--repeats 9] [--tokens 32 128 1000] [--texts 3]
                                               [--views mlp ...] [--profile] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
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


# where the first page's time went, from its own Navigation / Resource Timing and the app's call timings
STARTUP_JS = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const js = performance.getEntriesByType('resource').filter((r) => /assets\\/.*\\.js$/.test(r.name));
  const calls = window.__teCalls, run = window.__teRun, shell = window.__teShell;
  const models = calls.find((c) => c.path === 'models'), trace = calls.find((c) => c.path === 'trace');
  return { origin: performance.timeOrigin, htmlSent: nav.requestStart, htmlFirst: nav.responseStart,
           htmlEnd: nav.responseEnd, jsEnd: Math.max(...js.map((r) => r.responseEnd)), jsBytes: js.reduce(
           (a, r) => a + r.transferSize, 0), domInteractive: nav.domInteractive, shell, models, trace, run };
}"""


def startup_breakdown(o: dict, t_url_epoch: float) -> str:
    """The first page's way from the URL printed to its first trace drawn (s since the URL), in the order
    it went (page times in ms from its navigation start)."""
    m, tr, run = o["models"], o["trace"], o["run"]
    steps = [("navigation started", 0), ("HTML asked", o["htmlSent"]),
             ("HTML's first byte", o["htmlFirst"]), ("HTML done", o["htmlEnd"]),
             (f"JS fetched ({o['jsBytes'] / 1000:.0f} kB)", o["jsEnd"]),
             ("app started: /api/models asked (JS parsed, run, mounted)", m["start"]),
             ("shell drawn and usable (body[data-shell]: header, language, text box)", o["shell"]),
             ("/api/models answered (waits for the model)", m["parsed"]), ("first trace asked", tr["start"]),
             (f"first trace answered (forward {tr['server'].get('model', 0):.0f} ms)", tr["parsed"]),
             ("first trace drawn", run["updated"])]
    steps = sorted(((name, at_url(o, ms, t_url_epoch)) for name, ms in steps), key=lambda s: s[1])
    return "\n".join(f"  {t:6.3f} s  {name}" for name, t in steps)


def at_url(o: dict, ms: float, t_url_epoch: float) -> float:
    """The page's performance.now() `ms` as seconds since the server printed its URL."""
    return (o["origin"] + ms) / 1000 - t_url_epoch


NOVEL = ["apple", "river", "storm", "garden", "engine", "silver", "window", "forest", "planet", "signal", "castle",
         "bridge", "candle", "market", "winter", "letter", "mirror", "valley", "rocket", "harbor", "pencil", "meadow",
         "thunder", "lantern", "compass", "violin", "glacier", "orchard", "canyon", "falcon", "saddle", "marble",
         "coffee", "library", "island", "blanket"]


def token_count(client: httpx.Client, text: str) -> tuple[int, int | None]:
    """How many tokens the server's model reads for `text`, and its limit where the text goes over it (None
    within it), by the tokens endpoint: no forward pass, and nothing kept in the server's trace cache."""
    r = client.post("/api/attribution/tokens", json={"texts": [text]}, timeout=120)
    out = r.json()
    if r.is_success:
        return len(out["texts"][0]["ids"]), None
    if out.get("code") == "prompt_too_long":
        return int(out["params"]["tokens"]), int(out["params"]["limit"])
    raise RuntimeError(f"the server did not tokenize a text of {len(text)} characters: {out.get('detail', r.text)}")


def fit_tokens(client: httpx.Client, text: str, n: int, words: list[str] = NOVEL) -> str:
    """Cut or extend `text` to `n` tokens by the server's own tokenizer, fewer where its last word replaced by one
    of `words` (the edits this benchmark times) would go over the model's context: every edit must be read whole."""
    def count(t: str) -> int:
        return token_count(client, t)[0]

    def fit(text: str, n: int) -> str:
        while count(text) < n:
            text += " " + TEXTS[len(text) % 3]
        while count(text) > n:
            text = text.rsplit(" ", 1)[0]
        while count(text) < n:
            text += " and"
        return text

    while True:
        text = fit(text, n)
        beginning = text.rsplit(" ", 1)[0]
        over = [token_count(client, beginning + " " + w) for w in words]
        limits = [limit for _, limit in over if limit is not None]
        if not limits:
            return text
        n -= max(tokens for tokens, _ in over) - limits[0]


# set the text, wait for the app's run to finish, then for the frame it drew to be painted: the run sets
# body[data-updates] in a requestAnimationFrame callback, just before the frame with its DOM changes is
# rendered; a MutationObserver sees it there and a task posted from it runs once that frame's style, layout
# and paint are done ("painted"). Earlier versions of this script polled for data-updates with
# requestAnimationFrame and then waited one more frame: that added one to two frame intervals (up to 33 ms)
# to every figure, and asking for a frame on every vsync made Chromium run a main frame and a commit each
# time while the server worked (up to ~190 ms of the main thread blocked in Commit per change, on a busy
# 2-core machine), time taken from the server's forward pass. Figures from before this change are not
# comparable.
CHANGE_JS = """async (text) => {
  const ta = document.querySelector('[data-testid=text]');
  const before = Number(document.body.dataset.updates || 0);
  const painted = new Promise((resolve) => {
    const mo = new MutationObserver(() => {
      if (Number(document.body.dataset.updates || 0) <= before) return;
      mo.disconnect();
      setTimeout(() => resolve(performance.now()), 0);
    });
    mo.observe(document.body, { attributes: true, attributeFilter: ['data-updates'] });
  });
  const t0 = performance.now();
  performance.mark('te-change-start');
  ta.value = text;
  ta.dispatchEvent(new Event('input', { bubbles: true }));
  const end = await painted;
  const fetch2 = window.__teCalls.filter((c) => c.path === 'tensors' && c.start >= t0)
    .reduce((a, c) => a + c.parsed - c.start, 0);
  return { t0, painted: end, fetch2, run: window.__teRun };
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


TRACE_CATEGORIES = ["devtools.timeline", "disabled-by-default-devtools.timeline", "blink.user_timing",
                    "v8.execute", "disabled-by-default-v8.gc", "toplevel"]
BUCKETS = ("script", "gc", "style", "layout", "paint", "commit", "other", "idle", "raster")
PROFILE = ("forward", "beyond", "page", *BUCKETS, "flight")
FLIGHT = tuple(f"flight_{k}" for k in BUCKETS if k not in ("idle", "raster"))
BUCKET_OF = {
    **dict.fromkeys(["EvaluateScript", "FunctionCall", "v8.compile", "v8.compileModule", "v8.evaluateModule",
                     "TimerFire", "EventDispatch", "FireAnimationFrame", "RunMicrotasks", "V8.Execute",
                     "XHRReadyStateChange", "XHRLoad", "v8.callFunction", "v8.run", "HandlePostMessage",
                     "FireIdleCallback", "V8.ParseFunction", "V8.CompileLazy"], "script"),
    **dict.fromkeys(["MinorGC", "MajorGC", "V8.GC_SCAVENGER", "V8.GC_MARK_COMPACTOR", "V8.GCScavenger",
                     "V8.GCFinalizeMC", "V8.GCIncrementalMarking", "BlinkGC.AtomicPhase", "CppGC.AtomicPhase",
                     "ThreadState::performIdleLazySweep", "BlinkGCMarking", "GCEvent", "V8.GC_MC_INCREMENTAL"],
                    "gc"),
    **dict.fromkeys(["UpdateLayoutTree", "RecalculateStyles", "ParseAuthorStyleSheet", "ScheduleStyleRecalculation"],
                    "style"),
    **dict.fromkeys(["Layout", "LayoutShift"], "layout"),
    **dict.fromkeys(["PrePaint", "Paint", "PaintImage", "Layerize", "UpdateLayer", "UpdateLayerTree",
                     "CompositeLayers", "PaintSetup", "Decode Image", "ImageDecodeTask"], "paint"),
    "Commit": "commit",
}
TASK_NAMES = {"RunTask", "ThreadControllerImpl::RunTask"}


def _attribute(spans: list[tuple[float, float, str]], w0: float, w1: float) -> dict[str, float]:
    """Main-thread self time per bucket in [w0, w1] (us): each span less its children; the innermost
    classified span takes its time, a task's unclassified remainder is "other", the rest is "idle"."""
    clipped = sorted(((max(t0, w0), min(t1, w1), n) for t0, t1, n in spans if min(t1, w1) > max(t0, w0)),
                     key=lambda s: (s[0], -s[1]))
    out = dict.fromkeys(BUCKETS, 0.0)
    stack: list[list] = []  # [end, bucket, child time, start]
    busy = 0.0

    def close(item: list) -> None:
        out[item[1]] += item[0] - item[3] - item[2]

    for t0, t1, name in clipped:
        while stack and stack[-1][0] <= t0:
            close(stack.pop())
        t1 = min(t1, stack[-1][0]) if stack else t1
        if stack:
            stack[-1][2] += t1 - t0
        else:
            busy += t1 - t0
        stack.append([t1, BUCKET_OF.get(name) or (stack[-1][1] if stack else "other"), 0.0, t0])
    while stack:
        close(stack.pop())
    out["idle"] = (w1 - w0) - busy
    return out


def trace_parts(trace: bytes, out: dict) -> dict[str, float]:
    """Where one traced change's time went (ms): BUCKETS over the page's own part of it (input event to the
    request sent, answer's headers to painted frame), and `flight`, the main thread's busy time while the
    request was out (the server's time: spinner, fades)."""
    events = json.loads(trace)
    events = events["traceEvents"] if isinstance(events, dict) else events
    mark = next(e for e in events if e.get("name") == "te-change-start")
    pid, main = mark["pid"], mark["tid"]
    call = out["run"]["call"]

    def ts(x: float) -> float:  # the page's performance.now() to the trace's clock (both microsecond-exact)
        return mark["ts"] + (x - out["t0"]) * 1000

    spans: list[tuple[float, float, str]] = []  # complete events (X, and B/E pairs) on the main thread
    rasters: list[tuple[float, float]] = []
    open_: list[dict] = []
    for e in sorted((e for e in events if e.get("pid") == pid and e.get("ph") in "XBE" and "ts" in e),
                    key=lambda e: e["ts"]):
        if e["tid"] != main:
            if e.get("name") == "RasterTask" and e["ph"] == "X":
                rasters.append((e["ts"], e["ts"] + e.get("dur", 0)))
            continue
        if e["ph"] == "B":
            open_.append(e)
            continue
        if e["ph"] == "E":
            if not open_:
                continue
            b = open_.pop()
            t0, t1, name = b["ts"], e["ts"], b["name"]
        else:
            t0, t1, name = e["ts"], e["ts"] + e.get("dur", 0), e["name"]
        if name in BUCKET_OF or name in TASK_NAMES:
            spans.append((t0, t1, name))
    windows = [(ts(out["t0"]), ts(call["start"])), (ts(call["headers"]), ts(out["painted"]))]
    parts = dict.fromkeys(BUCKETS, 0.0)
    for w0, w1 in windows:
        for k, v in _attribute(spans, w0, w1).items():
            parts[k] += v
        parts["raster"] = parts["raster"] + sum(max(0.0, min(w1, b) - max(w0, a)) for a, b in rasters)
    f0, f1 = ts(call["start"]), ts(call["headers"])
    flight = _attribute(spans, f0, f1)
    parts["flight"] = (f1 - f0) - flight["idle"]
    parts |= {f"flight_{k}": v for k, v in flight.items() if k not in ("idle", "raster")}
    return {k: v / 1000 for k, v in parts.items()}


def summary(xs: list[float]) -> str:
    s = sorted(xs)
    lo, hi = s[int(0.1 * (len(s) - 1))], s[round(0.9 * (len(s) - 1))]
    return f"{statistics.median(s):7.1f} [{lo:.1f}-{hi:.1f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=Path("/tmp/te-bench-gpt2-small-shape"))
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--tokens", type=int, nargs="+", default=[32, 128, 1000])
    ap.add_argument("--texts", type=int, default=3, choices=[1, 2, 3],
                    help="how many texts the edits go round (3: three learners' texts; 1: one learner typing)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    ap.add_argument("--views", nargs="+", default=list(VIEWS), choices=VIEWS)
    ap.add_argument("--server-arg", action="append", default=[],
                    help="passed to `serve` (repeat), e.g. --server-arg=--cache-mb=768")
    ap.add_argument("--profile", action="store_true",
                    help="also record a Chromium trace of a second change per repeat and say where its time went")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    folder = gpt2_small_shape(args.model)
    results: dict[str, object] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        proc = subprocess.Popen([sys.executable, "-m", "transformer_explainer.cli", "serve", "--model", str(folder),
                                 "--port", "0", "--only", *args.server_arg],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=ROOT)
        try:
            t_start = time.perf_counter()
            line = proc.stdout.readline()
            t_url, t_url_epoch = time.perf_counter(), time.time()
            url = line.split("serving on ", 1)[1].split()[0]
            results["server_start_s"] = round(t_url - t_start, 2)
            pages = {}
            for wire, query in (("binary", ""), ("json", "?json")):
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                t0 = time.perf_counter()
                page.goto(url + query)
                page.wait_for_selector("body[data-ready='1']", timeout=60_000)
                since = t_url if wire == "binary" else t0  # the first page: from the URL; the second: from goto
                t_ready = time.perf_counter()
                if wire == "binary":
                    o = page.evaluate(STARTUP_JS)
                    results[f"page_usable_s[{wire}]"] = round(at_url(o, o["shell"], t_url_epoch), 3)
                results[f"page_interactive_s[{wire}]"] = round(t_ready - since, 3)
                if wire == "binary":
                    results["page interactive, from the URL"] = "\n" + startup_breakdown(o, t_url_epoch)
                pages[wire] = page
            for n in args.tokens:
                with httpx.Client(base_url=url) as client:
                    base = [fit_tokens(client, t, n) for t in TEXTS[:args.texts]]
                    size = max(token_count(client, t)[0] for t in base)
                k = len(base)
                for page in pages.values():
                    page.evaluate(CHANGE_JS, base[-1])  # warm the path once
                changes = 0  # every change this size gets its own (base text, last word): 36 per text
                for view in args.views:
                    rows: dict[str, list[dict[str, float]]] = {w: [] for w in pages}
                    prof: dict[str, list[dict[str, float]]] = {w: [] for w in pages}
                    for page in pages.values():
                        page.click(f"[data-testid=nav-{view}]")
                        page.wait_for_timeout(300)
                    for _ in range(args.repeats):
                        for wire, page in pages.items():
                            # a last word the server has not seen with this prefix (its trace cache would
                            # make a repeat look faster); the prefix is cached, as it is while typing
                            word = NOVEL[(changes // k) % len(NOVEL)]
                            text = base[changes % k].rsplit(" ", 1)[0] + " " + word
                            changes += 1
                            page.wait_for_timeout(500)
                            rows[wire].append(breakdown(page.evaluate(CHANGE_JS, text)))
                            if args.profile:  # the same again, another novel word, with a trace recorded
                                word = NOVEL[(changes // k + 17) % len(NOVEL)]
                                text = base[changes % k].rsplit(" ", 1)[0] + " " + word
                                changes += 1
                                browser.start_tracing(categories=TRACE_CATEGORIES)
                                page.wait_for_timeout(500)
                                o = page.evaluate(CHANGE_JS, text)
                                b = breakdown(o)
                                prof[wire].append(b | {"page": b["beyond"] - b["encode"] - b["serialise"] - b["http"]}
                                                  | trace_parts(browser.stop_tracing(), o))
                    for wire, rs in rows.items():
                        results[f"{size} tokens, {view}, {wire}"] = {p: summary([r[p] for r in rs]) for p in PARTS} | {
                            "bytes": int(statistics.median(r["bytes"] for r in rs))}
                    for wire, rs in prof.items():
                        if rs:
                            results[f"{size} tokens, {view}, {wire}, traced"] = {
                                p: summary([r[p] for r in rs]) for p in PROFILE + FLIGHT}
        finally:
            proc.terminate()
            proc.wait(timeout=20)
            browser.close()
    results["load average at the end (1, 5, 15 min)"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for k, v in results.items():
        if not isinstance(v, dict):
            print(f"{k}: {v}")
    print("\nms per text change: median [10th-90th percentile]; beyond = total - forward (goal < 30 ms)")
    print(f"{'case':34}" + "".join(f"{p:>20}" for p in PARTS) + f"{'bytes':>10}")
    for k, v in results.items():
        if isinstance(v, dict) and "bytes" in v:
            print(f"{k:34}" + "".join(f"{v[p]:>20}" for p in PARTS) + f"{v['bytes']:>10}")
    if args.profile:
        print("\ntraced changes, ms: page = the page's own part of beyond (input to request sent, answer's headers"
              " to painted frame), split into main-thread self time (script ... other, idle) and raster threads;"
              " flight = main thread busy while the server worked")
        print(f"{'case':42}" + "".join(f"{p:>20}" for p in PROFILE))
        for k, v in results.items():
            if isinstance(v, dict) and "bytes" not in v:
                print(f"{k:42}" + "".join(f"{v[p]:>20}" for p in PROFILE))
        print("\nthe main thread's busy time while the server worked (flight), split the same way")
        print(f"{'case':42}" + "".join(f"{p:>20}" for p in FLIGHT))
        for k, v in results.items():
            if isinstance(v, dict) and "bytes" not in v:
                print(f"{k:42}" + "".join(f"{v[p]:>20}" for p in FLIGHT))
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
