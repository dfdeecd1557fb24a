import { mount } from "svelte";
import App from "./App.svelte";
import "./app.css";

import { loadCjkFont, loadPageGlyphs } from "./lib/cjkFont";
import { app } from "./lib/state.svelte";
import { snapshot } from "./snapshot/static";

if (snapshot) app.setText(snapshot.trace.text); // an offline snapshot page shows its own text
if (snapshot?.cjk_font) loadCjkFont(); // inlined, so no fetch: its banner, and maybe its text, hold Chinese
// The few CJK glyphs every page shows come inline with the stylesheet (fonts/cjk-page.css); Chromium keeps the
// missing-glyph boxes of text laid out before a face has loaded, even when it loads a moment later, so the page
// is drawn once they are in (a data: URL: a few milliseconds, and no request).
await loadPageGlyphs();
mount(App, { target: document.getElementById("app")! });
if (snapshot) document.getElementById("text")?.setAttribute("readonly", ""); // and only that text
