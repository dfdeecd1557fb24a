// Every word the app shows comes from one catalogue per language: src/locales/<code>.json, a flat map of
// namespaced keys to strings ("ui.title", "norm.e_rms", "lesson.gpt2.bpe.split", "error.text_too_long")
// with named placeholders `{name}` filled in at run time. English (en.json) is the reference: it defines the
// keys, and a catalogue that lacks a key falls back to it. A translator adds a language by adding one file:
// the language menu lists every catalogue by its "meta.name"; "meta.htmlLang" is the page's lang attribute
// (and what ?lang= and the browser's languages are matched against), "meta.sentenceGap" what separates two
// sentences (a space in English, nothing in Chinese), and "meta.font" the bundled font its script needs
// ("cjk": the CJK subset, src/lib/cjkFont.ts; empty: the system's fonts).
//
// English comes with the page; every other catalogue is a chunk of its own, loaded when the learner picks
// the language (loadLanguage), so the first page does not carry (and parse) the strings of every language.
// Their "meta.*" strings come with the page (build/localeMeta.ts), so the menu and the choice of language
// need no catalogue loaded.
import en from "../locales/en.json";
import localeMeta from "virtual:te-locale-meta";

/** A key of the catalogue (English defines them). */
export type MessageKey = keyof typeof en;
/** A language: the file name of its catalogue ("en", "zh"). */
export type Lang = string;

type Catalogue = Partial<Record<MessageKey, string>>;
type Loader = () => Promise<Catalogue>;

const langOf = (path: string): Lang => path.replace(/^(.*\/)?([^/]+)\.json$/, "$2");

/** The languages of a set of catalogue files: `files` (path -> its strings) are there at once, `lazy` (path ->
 *  what loads its strings) once loaded; `meta` holds the "meta.*" strings of those not loaded yet. Each file's
 *  name is its language. */
export class Languages {
  /** The catalogues loaded so far, by language. */
  readonly catalogues: Readonly<Record<Lang, Catalogue>>;
  /** The languages, English first, then by code. */
  readonly langs: readonly Lang[];
  readonly #loaded: Record<Lang, Catalogue>;
  readonly #loaders: Record<Lang, Loader>;
  readonly #loading = new Map<Lang, Promise<void>>();
  readonly #meta: Record<Lang, Catalogue>;

  constructor(files: Record<string, Catalogue>, lazy: Record<string, Loader> = {},
              meta: Record<Lang, Catalogue> = {}) {
    this.#loaded = Object.fromEntries(Object.entries(files).map(([path, cat]) => [langOf(path), cat]));
    this.#loaders = Object.fromEntries(Object.entries(lazy).map(([path, load]) => [langOf(path), load]));
    this.#meta = meta;
    this.catalogues = this.#loaded;
    this.langs = [...new Set([...Object.keys(this.#loaded), ...Object.keys(this.#loaders)])].sort((a, b) =>
      a === "en" ? -1 : b === "en" ? 1 : a.localeCompare(b));
  }

  /** Load `lang`'s catalogue, if it is not loaded yet (a language with no catalogue: nothing to load). */
  load(lang: Lang): Promise<void> {
    if (this.#loaded[lang] || !this.#loaders[lang]) return Promise.resolve();
    let p = this.#loading.get(lang);
    if (!p) {
      p = this.#loaders[lang]().then((cat) => { this.#loaded[lang] = cat; }, (e) => {
        this.#loading.delete(lang); // a later choice of the language tries again
        throw e;
      });
      this.#loading.set(lang, p);
    }
    return p;
  }

  /** The catalogue's string for `key` in `lang`, English when that catalogue lacks it or is not loaded yet
   *  (its "meta.*" strings are there before it loads). */
  template(lang: Lang, key: MessageKey): string {
    return this.#loaded[lang]?.[key] ?? this.#meta[lang]?.[key] ?? en[key];
  }

  /** The language of `among` (default: all) that best matches `wanted`, language tags in order of preference
   *  (?lang=, then the browser's languages): a catalogue's code or its meta.htmlLang, exactly, else by the
   *  first subtag ("zh-TW" finds zh, "fr-CA" fr); English when none matches (the first of `among` when it
   *  has no English). */
  best(wanted: readonly string[], among: readonly Lang[] = this.langs): Lang {
    const tag = (s: string) => s.trim().toLowerCase().replace(/_/g, "-");
    const primary = (s: string) => tag(s).split("-")[0];
    for (const w of wanted.map(tag).filter(Boolean)) {
      const exact = among.find((l) => l === w || tag(this.template(l, "meta.htmlLang")) === w);
      if (exact) return exact;
      const near = among.find((l) => primary(l) === primary(w)
        || primary(this.template(l, "meta.htmlLang")) === primary(w));
      if (near) return near;
    }
    return among.includes("en") || !among.length ? "en" : among[0];
  }
}

const LANGUAGES = new Languages({ "../locales/en.json": en },
  import.meta.glob<Catalogue>(["../locales/*.json", "!../locales/en.json"], { import: "default" }),
  localeMeta as Record<Lang, Catalogue>);

/** The catalogues loaded so far, by language code (English always; others once loadLanguage has loaded them). */
export const CATALOGUES = LANGUAGES.catalogues;

/** The languages there are catalogues for, English first. */
export const LANGS = LANGUAGES.langs;

/** Load `lang`'s catalogue (once): until it is in, its strings are English's. */
export function loadLanguage(lang: Lang): Promise<void> {
  return LANGUAGES.load(lang);
}

/** Whether `key` is a key of the catalogue (for keys built at run time, such as a task's name). */
export function isKey(key: string): key is MessageKey {
  return Object.prototype.hasOwnProperty.call(en, key);
}

/** The catalogue's string for `key` in `lang`, English when that catalogue lacks it (or is not loaded). */
export function template(lang: Lang, key: MessageKey): string {
  return LANGUAGES.template(lang, key);
}

/** The language of `among` (default: every catalogue's) that best matches `wanted` (language tags, most
 *  wanted first). */
export function bestLang(wanted: readonly string[], among?: readonly Lang[]): Lang {
  return LANGUAGES.best(wanted, among);
}

/** The names of the placeholders in a string, in order of first use. */
export function placeholders(s: string): string[] {
  return [...new Set([...s.matchAll(/\{(\w+)\}/g)].map((m) => m[1]))];
}

/** Split a catalogue string at its placeholders: the text between them and each placeholder's value. A
 *  placeholder without a value stays as written, `{name}`, so a missing value shows instead of hiding. */
export function fill<V>(s: string, vars: Record<string, V>): (string | V)[] {
  const out: (string | V)[] = [];
  let last = 0;
  for (const m of s.matchAll(/\{(\w+)\}/g)) {
    if (m.index! > last) out.push(s.slice(last, m.index));
    out.push(m[1] in vars ? vars[m[1]] : m[0]);
    last = m.index! + m[0].length;
  }
  if (last < s.length) out.push(s.slice(last));
  return out;
}

/** A UI string in `lang` with its placeholders filled in. */
export function translate(lang: Lang, key: MessageKey, vars: Record<string, string | number> = {}): string {
  return fill(template(lang, key), vars).map(String).join("");
}
