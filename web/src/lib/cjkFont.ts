// The bundled CJK font: a subset of Noto Sans CJK SC (SIL OFL 1.1) holding exactly the Chinese characters
// of the UI strings, built by scripts/build_cjk_font.py into web/public/fonts/. Systems without a CJK font
// would otherwise draw the 中文 UI as boxes. It is registered (and fetched, about 190 kB) only once the
// language's catalogue asks for it (meta.font "cjk"); app.css then lists the family in --sans and --mono, so
// it is used for CJK characters only (unicode-range) and system fonts keep drawing everything else; it joins
// those lists once it has loaded. An offline snapshot carries the file as a data: URL (a file:// page or a
// notebook's sandboxed iframe could not fetch it relative to itself), and loads it at once: its banner may
// hold Chinese too. (The few CJK characters every page shows, such as the menu's 中文, come with the page
// itself: app.css, "TE CJK Page".)
import { snapshot } from "../snapshot/static";
import { template, type Lang } from "./i18n";

export const CJK_FAMILY = "TE Noto Sans SC";
const PAGE_FAMILY = "TE CJK Page";
const PAGE_SAMPLE = "中文"; // any character of the face: loading it loads the whole (one-file) face
export const CJK_FONT_FILE = "fonts/noto-sans-sc-subset.woff2";
// The same ranges as CJK_RANGES in scripts/build_cjk_font.py (a unit test checks they agree).
export const CJK_UNICODE_RANGE =
  "U+2E80-2FDF, U+3000-303F, U+3040-30FF, U+3400-4DBF, U+4E00-9FFF, U+F900-FAFF, U+FE30-FE4F, U+FF00-FFEF";

let loading: Promise<boolean> | null = null;

/** Whether `lang`'s catalogue asks for the bundled CJK font (its meta.font). */
export function needsCjkFont(lang: Lang): boolean {
  return template(lang, "meta.font") === "cjk";
}

/** Register and load the CJK font (once); resolves to whether it loaded (a snapshot without it: false). */
export function loadCjkFont(): Promise<boolean> {
  if (loading) return loading;
  if (typeof FontFace === "undefined" || !document.fonts) return (loading = Promise.resolve(false));
  if (snapshot && !snapshot.cjk_font) return (loading = Promise.resolve(false)); // an English-only snapshot
  const url = snapshot?.cjk_font ?? new URL(CJK_FONT_FILE, document.baseURI).href;
  const face = new FontFace(CJK_FAMILY, `url("${url}") format("woff2")`,
    { unicodeRange: CJK_UNICODE_RANGE, display: "swap" });
  document.fonts.add(face);
  loading = face.load().then(
    () => { document.documentElement.dataset.cjkFont = "loaded"; return true; },
    () => { document.fonts.delete(face); document.documentElement.dataset.cjkFont = "unavailable"; return false; },
  );
  return loading;
}

/** The page's own CJK face ("TE CJK Page", app.css), loaded: it holds the few CJK characters every page shows
 *  (the menu's language names, the Chinese example). Resolves also when it cannot load (the page then draws
 *  what the system has). */
export async function loadPageGlyphs(): Promise<void> {
  if (typeof document === "undefined" || !document.fonts) return;
  try {
    await document.fonts.load(`16px "${PAGE_FAMILY}"`, PAGE_SAMPLE);
  } catch {
    /* a page whose policy refuses data: fonts: system fonts draw them */
  }
}
