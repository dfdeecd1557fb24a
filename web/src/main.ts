import { mount } from "svelte";
import App from "./App.svelte";
import "./app.css";

import { loadCjkFont } from "./lib/cjkFont";
import { app } from "./lib/state.svelte";
import { snapshot } from "./snapshot/static";

if (snapshot) app.setText(snapshot.trace.text); // an offline snapshot page shows its own text
if (snapshot?.cjk_font) loadCjkFont(); // inlined, so no fetch: its banner, and maybe its text, hold Chinese
mount(App, { target: document.getElementById("app")! });
if (snapshot) document.getElementById("text")?.setAttribute("readonly", ""); // and only that text
