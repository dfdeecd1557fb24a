import { mount } from "svelte";
import App from "./App.svelte";
import "./app.css";

import { loadCjkFont, loadPageGlyphs } from "./lib/cjkFont";
import { showFloat16Digits } from "./lib/format";
import { app } from "./lib/state.svelte";
import { snapshot } from "./snapshot/static";

// the bundle is evaluated and the app starts (for benchmarks/startup.py --page)
(globalThis as { __teBoot?: number }).__teBoot = performance.now();

if (snapshot) app.setText(snapshot.trace.text); // an offline snapshot page shows its own text
// and no more digits than its float16 tensors hold
if (snapshot && Object.values(snapshot.tensors).some((t) => t.dtype === "float16")) showFloat16Digits();
if (snapshot?.cjk_font) loadCjkFont(); // inlined, so no fetch: its banner, and maybe its text, hold Chinese
// The few CJK glyphs every page shows come inline with the stylesheet (fonts/cjk-page.css); Chromium keeps the
// missing-glyph boxes of text laid out before a face has loaded, even when it loads a moment later, so the page
// is drawn once they are in (a data: URL: a few milliseconds, and no request). Not a top-level await: with one,
// the bundler keeps the modules that the page and its lazy parts share in a chunk of their own (one more
// request before the page can run) rather than in the page's script (vite.config.ts).
void loadPageGlyphs().then(() => {
  mount(App, { target: document.getElementById("app")! });
  if (snapshot) document.getElementById("text")?.setAttribute("readonly", ""); // and only that text
});
