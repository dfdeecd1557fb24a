// Builds the app into the Python package (src/transformer_explainer/web_dist/), which the server
// serves and the wheel carries: `pip install` needs no Node.js. Everything is bundled; nothing is
// loaded from another origin at run time.
import { svelte } from "@sveltejs/vite-plugin-svelte";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const outDir = fileURLToPath(new URL("../src/transformer_explainer/web_dist", import.meta.url));

export default defineConfig({
  plugins: [svelte()],
  base: "./",
  build: {
    outDir,
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    // every file is its own, except the page's few CJK glyphs: inline in the stylesheet (src/fonts/cjk-page.css)
    assetsInlineLimit: (file: string) => file.endsWith("/fonts/cjk-page.woff2"),
    chunkSizeWarningLimit: 400,
  },
  server: { proxy: { "/api": "http://127.0.0.1:8000" } },
});
