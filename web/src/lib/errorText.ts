// What the page says about an error: the server's errors carry a code and params (errors.ERROR_CODES in
// Python, generated/errors.ts here), and the catalogue words each code as "error.<code>" in the learner's
// language, filled in with the params. A param whose value the catalogue also words ("error.<param>.<value>",
// e.g. "error.level.char") is shown in those words. A code the catalogue has no sentence for, and an error
// that is not the server's (the network, a bug), say what they say: the server's English detail, or the
// error's own message.
import { ApiError } from "./client";
import { isKey, translate, type Lang } from "./i18n";

/** The sentence for `e` in `lang`. */
export function errorText(lang: Lang, e: unknown): string {
  if (!(e instanceof ApiError) || !e.code) return e instanceof Error ? e.message : String(e);
  const key = `error.${e.code}`;
  if (!isKey(key)) return e.message;
  const vars: Record<string, string | number> = { detail: e.message };
  for (const [name, value] of Object.entries(e.params)) {
    const worded = `error.${name}.${value}`;
    vars[name] = isKey(worded) ? translate(lang, worded) : value;
  }
  return translate(lang, key, vars);
}

/** An error that refused an over-long text: how many tokens the page may offer to keep (the server's
 *  limit; null when the answer does not say). */
export function overLong(e: unknown): { fit: number | null } | null {
  if (!(e instanceof ApiError) || e.code !== "text_too_long") return null;
  const fit = Number(e.params.limit);
  return { fit: Number.isInteger(fit) && fit > 0 ? fit : null };
}

/** `e` as an Error (what a page keeps to word it later, in whatever language the page has then). */
export function asError(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}
