// The web app's unit tests (vitest, in happy-dom): the catalogues, and the lessons' claims checked against the
// numbers of a real server (web/tests/lessons/; tests/web/test_lesson_claims.py starts the servers and runs them).
import { svelte } from "@sveltejs/vite-plugin-svelte";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";
import { localeMeta } from "./build/localeMeta.ts";

export default defineConfig({
  plugins: [svelte(), localeMeta(fileURLToPath(new URL("./src/locales", import.meta.url)))],
  resolve: { conditions: ["browser"] },
  test: {
    environment: "happy-dom",
    // the lessons' API calls go to this page's origin, as in the app: the server under test
    environmentOptions: { happyDOM: { url: process.env.TE_SERVER ?? "http://127.0.0.1/" } },
    include: ["tests/**/*.test.ts"],
    setupFiles: ["tests/setup.ts"],
    testTimeout: 1_200_000,
    hookTimeout: 120_000,
  },
});
