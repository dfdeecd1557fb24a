import { mount } from "svelte";
import App from "./App.svelte";
import "./app.css";

import { app } from "./lib/state.svelte";
import { snapshot } from "./snapshot/static";

if (snapshot) app.setText(snapshot.trace.text); // an offline snapshot page shows its own text
mount(App, { target: document.getElementById("app")! });
if (snapshot) document.getElementById("text")?.setAttribute("readonly", ""); // and only that text
