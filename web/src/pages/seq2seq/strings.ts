// The encoder-decoder page's names of tasks, from the catalogue (src/locales/), for tasks the page knows.
import { isKey } from "../../lib/i18n";
import { t } from "../../lib/state.svelte";

/** A task's name as shown. */
export function taskName(name: string): string {
  const key = `s2s.t_${name}`;
  return isKey(key) ? t(key) : name;
}

/** A task's description as shown; `fallback` (the API's, in English) for tasks this page does not know. */
export function taskDescription(name: string, fallback: string): string {
  const key = `s2s.d_${name}`;
  return isKey(key) ? t(key) : fallback;
}
