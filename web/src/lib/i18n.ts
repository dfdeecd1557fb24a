// Every word the app shows comes from one catalogue per language: src/locales/<code>.json, a flat map of
// namespaced keys to strings ("ui.title", "llama.e_rmsnorm", "lesson.gpt2.bpe.split", "error.text_too_long")
// with named placeholders `{name}` filled in at run time. English (en.json) is the reference: it defines the
// keys, and a catalogue that lacks a key falls back to it. A translator adds a language by adding one file;
// its "meta.name" is what the language menu shows, "meta.htmlLang" the page's lang attribute, and
// "meta.sentenceGap" what separates two sentences of lesson text (a space in English, nothing in Chinese).
import en from "../locales/en.json";

/** A key of the catalogue (English defines them). */
export type MessageKey = keyof typeof en;
/** A language: the file name of its catalogue ("en", "zh"). */
export type Lang = string;

type Catalogue = Partial<Record<MessageKey, string>>;

const files = import.meta.glob<Catalogue>("../locales/*.json", { eager: true, import: "default" });

/** Every catalogue, by language code. */
export const CATALOGUES: Readonly<Record<Lang, Catalogue>> = Object.fromEntries(
  Object.entries(files).map(([path, cat]) => [path.replace(/^.*\/([^/]+)\.json$/, "$1"), cat]),
);

/** The languages there are catalogues for, English first. */
export const LANGS: readonly Lang[] = Object.keys(CATALOGUES).sort((a, b) =>
  a === "en" ? -1 : b === "en" ? 1 : a.localeCompare(b));

/** Whether `key` is a key of the catalogue (for keys built at run time, such as a task's name). */
export function isKey(key: string): key is MessageKey {
  return Object.prototype.hasOwnProperty.call(en, key);
}

/** The catalogue's string for `key` in `lang`, English when that catalogue lacks it. */
export function template(lang: Lang, key: MessageKey): string {
  return CATALOGUES[lang]?.[key] ?? en[key];
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
