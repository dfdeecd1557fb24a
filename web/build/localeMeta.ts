// A virtual module, "virtual:te-locale-meta": the "meta.*" strings of every catalogue in src/locales/ (its name in
// the language menu, its lang attribute, its font, its sentence gap), by language. The page bundles English and
// loads any other catalogue only when the learner picks it (src/lib/i18n.ts), yet the menu names every language
// and the browser's languages are matched against each one's meta.htmlLang before any is loaded: these few
// strings come with the page, read from the same files at build time.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Plugin } from "vite";

const ID = "virtual:te-locale-meta";
const RESOLVED = "\0" + ID;

export function localeMeta(dir: string): Plugin {
  return {
    name: "te-locale-meta",
    resolveId: (id) => (id === ID ? RESOLVED : null),
    load(id) {
      if (id !== RESOLVED) return null;
      const meta: Record<string, Record<string, string>> = {};
      for (const file of readdirSync(dir).filter((f) => f.endsWith(".json")).sort()) {
        const path = join(dir, file);
        this.addWatchFile(path);
        const cat = JSON.parse(readFileSync(path, "utf8")) as Record<string, string>;
        meta[file.slice(0, -".json".length)] = Object.fromEntries(
          Object.entries(cat).filter(([k]) => k.startsWith("meta.")));
      }
      return `export default ${JSON.stringify(meta)};`;
    },
  };
}
