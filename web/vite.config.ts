// Builds the app into the Python package (src/transformer_explainer/web_dist/), which the server
// serves and the wheel carries: `pip install` needs no Node.js. Everything is bundled; nothing is
// loaded from another origin at run time.
import { svelte } from "@sveltejs/vite-plugin-svelte";
import { fileURLToPath } from "node:url";
import { constants, gzipSync } from "node:zlib";
import { defineConfig, type Plugin } from "vite";
import { localeMeta } from "./build/localeMeta.ts";

const locales = fileURLToPath(new URL("./src/locales", import.meta.url));

const outDir = fileURLToPath(new URL("../src/transformer_explainer/web_dist", import.meta.url));

// Each script and stylesheet also as X.gz, compressed once here at the highest level: the server sends those
// bytes as they are to a browser that takes gzip (server/pages.py) instead of compressing the bundle on every
// visit, which the page waited for (more so while the model loads beside it).
function precompress(): Plugin {
  return {
    name: "te-precompress",
    apply: "build",
    // last, once Vite's own plugins have finished the code (they fill in, e.g., what a dynamic import() preloads)
    generateBundle: {
      order: "post",
      handler(_options, bundle) {
        for (const [name, out] of Object.entries(bundle)) {
          if (!/\.(js|css)$/.test(name)) continue;
          const source = out.type === "chunk" ? out.code : out.source;
          this.emitFile({ type: "asset", fileName: `${name}.gz`,
            source: gzipSync(source, { level: constants.Z_BEST_COMPRESSION }) });
        }
      },
    },
  };
}

export default defineConfig({
  plugins: [svelte(), localeMeta(locales), precompress()],
  base: "./",
  build: {
    outDir,
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    // every file is its own, except the page's few CJK glyphs: inline in the stylesheet (src/fonts/cjk-page.css)
    assetsInlineLimit: (file: string) => file.endsWith("/fonts/cjk-page.woff2"),
    chunkSizeWarningLimit: 400,
    // The rarely used parts (other languages' catalogues, the lessons, the encoder-decoder page, Experiments,
    // Why this token: src/parts.ts) are chunks loaded on first use, which import what they share with the page
    // from the page's one script (src/main.ts has no top-level await, which would keep that shared code in a
    // chunk of its own: one more request before the page runs). Their styles stay in the one stylesheet and
    // nothing is preloaded, so a chunk is one plain import(): the offline snapshot gives each script a data:
    // URL by an import map (notebook/snapshot.py), where preload links, resolved against a data: URL, could
    // not load.
    cssCodeSplit: false,
    modulePreload: false,
  },
  server: { proxy: { "/api": "http://127.0.0.1:8000" } },
});
