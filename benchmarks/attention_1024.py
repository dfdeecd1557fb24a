"""The attention view at 1024 tokens in Debian's Chromium: view switch, hover readout, head switch, memory.

A tiny random GPT-2 (4 layers x 4 heads, d_model 64, context 1024; the real GPT-2 tokenizer) is built
like the tests' make_hf_gpt2 and served by `transformer-explainer serve`. The page gets a 1024-token
text; then, each repeated and given as median [min-max]:
- view switch: tokens view -> attention view, from the click to the frame painted with the 1024 x 1024
  pattern and the layer x head overview drawn (their canvases);
- hover: a pointermove over the pattern, from dispatching it to its readout line updated (the handler
  and Svelte's update, performance.now() around them), and the frame intervals while the pointer moves
  one cell a frame (requestAnimationFrame to requestAnimationFrame: 16.7 ms means no frame was missed);
- head switch: a click on another head in the overview, to its 1024 x 1024 pattern painted (one
  /api/tensors round trip, 4 MB of float32);
- memory: the JS heap (CDP Performance.getMetrics) and the resident memory of Chromium's renderer
  processes, after all of the above.

    .venv/bin/python benchmarks/attention_1024.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run"]
N = 1024


def tiny_gpt2_1024(folder: Path) -> Path:
    if (folder / "config.json").is_file():
        return folder
    sys.path.insert(0, str(ROOT))
    from tests.conftest import make_hf_gpt2

    return make_hf_gpt2(folder, n_layer=4, n_head=4, n_embd=64, n_positions=N)


def text_of(url: str, n: int) -> str:
    """A text of exactly `n` tokens (by the server's tokenizer)."""
    words = "the river runs past the old mill and under the stone bridge to the sea".split()
    text = " ".join(words[i % len(words)] for i in range(n))
    ids = httpx.post(url + "api/trace", json={"text": text, "truncate": True}, timeout=300).json()["token_ids"]
    while len(ids) > n:
        text = text.rsplit(" ", 1)[0]
        ids = httpx.post(url + "api/trace", json={"text": text, "truncate": True}, timeout=300).json()["token_ids"]
    assert len(ids) == n, len(ids)
    return text


SET_TEXT_JS = """async (text) => {
  const ta = document.querySelector('[data-testid=text]');
  const before = Number(document.body.dataset.updates || 0);
  ta.value = text;
  ta.dispatchEvent(new Event('input', { bubbles: true }));
  await new Promise((resolve) => {
    const check = () => (Number(document.body.dataset.updates || 0) > before ? resolve(null) : setTimeout(check, 20));
    check();
  });
}"""

# click a nav button (or a thumbnail) and wait until `ready()` holds, then for that frame to be painted
CLICK_JS = """async ([selector, readySrc]) => {
  const ready = new Function('return (' + readySrc + ')()');
  const t0 = performance.now();
  document.querySelector(selector).click();
  await new Promise((resolve) => {
    const check = () => (ready() ? resolve(null) : requestAnimationFrame(check));
    check();
  });
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  return performance.now() - t0;
}"""
PATTERN_READY = """() => {
  const c = document.querySelector('[data-testid=attn-pattern] canvas');
  return !!c && c.width === N_TOKENS && !!document.querySelector('[data-testid=attn-overview] canvas');
}""".replace("N_TOKENS", str(N))

HOVER_JS = """async (moves) => {
  const pic = document.querySelector('[data-testid=attn-pattern] .pic');
  const out = document.querySelector('[data-testid=attn-pattern-readout]');
  const rect = pic.getBoundingClientRect();
  const handler = [], frames = [];
  let last = null;
  const afterTasks = () => new Promise((r) => {
    const ch = new MessageChannel();
    ch.port1.onmessage = r;
    ch.port2.postMessage(0);
  });
  let changed = 0;
  for (let k = 0; k < moves; k++) {
    await new Promise((r) => requestAnimationFrame((t) => {
      if (last !== null) frames.push(t - last);
      last = t;
      r(null);
    }));
    const r = (k * 37) % N_TOKENS, c = (k * 53) % (r + 1);  // a cell on or below the diagonal
    const x = rect.left + (c + 0.5) * rect.width / N_TOKENS, y = rect.top + (r + 0.5) * rect.height / N_TOKENS;
    const before = out.textContent;
    const t0 = performance.now();
    pic.dispatchEvent(new PointerEvent('pointermove', { clientX: x, clientY: y, pointerType: 'mouse', bubbles: true }));
    await afterTasks();  // the handler ran and Svelte applied the change (a microtask)
    handler.push(performance.now() - t0);
    if (out.textContent !== before) changed++;
  }
  return { handler, frames, changed };
}""".replace("N_TOKENS", str(N))


def summary(xs: list[float], unit: str = "ms") -> str:
    s = sorted(xs)
    p95 = s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]
    return f"median {statistics.median(s):.1f} {unit}, p95 {p95:.1f}, max {s[-1]:.1f} (n={len(s)})"


def renderer_rss_mb(browser) -> list[float]:
    """Resident memory of each renderer process of this browser (CDP SystemInfo.getProcessInfo), largest first."""
    info = browser.new_browser_cdp_session().send("SystemInfo.getProcessInfo")["processInfo"]
    out = []
    for p in info:
        if p["type"] != "renderer":
            continue
        try:
            for line in Path(f"/proc/{p['id']}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out.append(int(line.split()[1]) / 1024)
        except OSError:
            continue
    return sorted(out, reverse=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=Path("/tmp/te-bench-gpt2-tiny-1024"))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--moves", type=int, default=120)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    folder = tiny_gpt2_1024(args.model)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        proc = subprocess.Popen([sys.executable, "-m", "transformer_explainer.cli", "serve", "--model", str(folder),
                                 "--port", "0", "--only"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=ROOT)
        try:
            url = proc.stdout.readline().split("serving on ", 1)[1].split()[0]
            text = text_of(url, N)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            t0 = time.perf_counter()
            page.evaluate(SET_TEXT_JS, text)
            first_trace = time.perf_counter() - t0
            switches, heads = [], []
            for _ in range(args.repeats):
                page.click("[data-testid=nav-tokens]")
                page.wait_for_timeout(300)
                switches.append(page.evaluate(CLICK_JS, ["[data-testid=nav-attention]", PATTERN_READY]))
                page.wait_for_timeout(300)
            hover = page.evaluate(HOVER_JS, args.moves)
            for k in range(args.repeats):  # to another head and back: each one fetched (or from the page's map)
                h = 1 + k % 3
                sel = f"[data-testid=attn-overview] button[aria-label$='{h}']"
                on = f"document.querySelector({sel!r}).classList.contains('on')"
                ready = PATTERN_READY.replace("return !!c", f"return {on} && !!c")
                heads.append(page.evaluate(CLICK_JS, [sel, ready]))
                page.wait_for_timeout(300)
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            rss = renderer_rss_mb(browser)
        finally:
            proc.terminate()
            proc.wait(timeout=20)
            browser.close()
    print(f"text of {N} tokens, first trace and view: {first_trace:.2f} s (includes the forward pass)")
    print(f"view switch tokens -> attention (1024 x 1024 pattern + overview painted): {summary(switches)}  goal < 1000")
    print(f"hover readout (pointermove handler + update): {summary(hover['handler'])}  goal < 16; "
          f"the readout changed on {hover['changed']} of {len(hover['handler'])} moves")
    print(f"frame intervals while hovering, one move a frame: {summary(hover['frames'])}  (16.7 = every frame)")
    print(f"head switch from the overview (fetch + draw of a 1024 x 1024 pattern): {summary(heads)}")
    print(f"JS heap used {metrics['JSHeapUsedSize'] / 2**20:.0f} MB of {metrics['JSHeapTotalSize'] / 2**20:.0f} MB; "
          f"the browser's renderer processes resident (MB): {', '.join(f'{r:.0f}' for r in rss)}  goal < 500")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
