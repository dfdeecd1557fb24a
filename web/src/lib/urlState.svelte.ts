// The view in the page's address, so that a link opens what its sender saw: the text, the model, the stage,
// the layer and head, the focus token and the language live in the fragment (`#text=…&model=…&view=attention
// &layer=1&head=2&pos=3&lang=zh`), and `tab=` the encoder-decoder page's tab (that page itself is `?mode=seq2seq`).
// The fragment, not the query: it never goes to the server, so a long text meets no request-line limit and
// stays out of the server's logs, and it works the same in an offline snapshot opened from file://. The query
// keeps what the server reads (the access token `?token=`, which it moves into a cookie) and `?lang=`/`?mode=`.
//
// The page rewrites the fragment with history.replaceState as the state changes (no history entries, no
// reload). A link is read once the model list is in and again when only its fragment changes (a link pasted
// into a tab that is open on the page does not reload it). Whatever a link holds that this page cannot show
// (an unknown model or stage, a layer, head or token out of range, a garbled value) is left at the default.
// The same code serves the live app and a snapshot, whose API calls are answered from the data it carries;
// a snapshot keeps its own text and model.
import { snapshot } from "../snapshot/static";
import { mode, s2s, TABS, type Tab } from "../pages/seq2seq/state.svelte";
import { capsOf } from "./family";
import { MAX_TEXT_CHARS } from "./generated/limits";
import { app } from "./state.svelte";
import { hasStage, normsOf, STAGES, type LnWhich, type StageId } from "./pipeline";

/** What a link asks for; a part that is absent or not even of the right form is undefined. */
export interface Link {
  text?: string;
  model?: string;
  view?: StageId;
  layer?: number;
  head?: number;
  pos?: number;
  ln?: string;
  lang?: string;
  tab?: Tab;
}

/** A whole number written plainly (no sign, exponent or fraction), as the page writes them. */
function index(s: string | null): number | undefined {
  return s !== null && /^\d{1,6}$/.test(s) ? Number(s) : undefined;
}

/** `text` cut to the server's limit, without splitting a surrogate pair. */
export function capText(text: string): string {
  if (text.length <= MAX_TEXT_CHARS) return text;
  const cut = /[\uD800-\uDBFF]/.test(text[MAX_TEXT_CHARS - 1]) ? MAX_TEXT_CHARS - 1 : MAX_TEXT_CHARS;
  return text.slice(0, cut);
}

/** The parts of a link in `href`: its fragment's, and the language also from `?lang=` (the fragment wins).
 *  Never throws: URLSearchParams reads malformed escapes as they are. */
export function readLink(href: string): Link {
  let url: URL;
  try {
    url = new URL(href);
  } catch {
    return {};
  }
  const p = new URLSearchParams(url.hash.slice(1));
  const word = (k: string, max = 200) => { const v = p.get(k); return v && v.length <= max ? v : undefined; };
  const text = p.get("text");
  const view = p.get("view"), tab = p.get("tab");
  return {
    text: text ? capText(text) : undefined,
    model: word("model"),
    view: (STAGES as readonly string[]).includes(view ?? "") ? (view as StageId) : undefined,
    layer: index(p.get("layer")),
    head: index(p.get("head")),
    pos: index(p.get("pos")),
    ln: word("ln", 20),
    lang: word("lang", 35) ?? (url.searchParams.get("lang")?.slice(0, 35) || undefined),
    tab: (TABS as readonly string[]).includes(tab ?? "") ? (tab as Tab) : undefined,
  };
}

/** The fragment that holds the page's state now (reactive: an effect that calls it follows the state). */
export function fragmentOf(): string {
  const p = new URLSearchParams();
  if (!snapshot) { // a snapshot shows its own text with its own model
    p.set("text", capText(app.text));
    if (app.model) p.set("model", app.model);
  }
  p.set("view", app.view);
  p.set("layer", String(app.layer));
  p.set("head", String(app.head));
  p.set("pos", String(app.pos));
  if (app.ln !== "ln1") p.set("ln", app.ln);
  p.set("lang", app.lang);
  if (mode.seq2seq) p.set("tab", s2s.tab);
  return p.toString();
}

/** The link to share: this page's address with the state's fragment, and without the access token (each
 *  learner is given the token apart; the server moves it into a cookie and out of the address anyway). */
export function shareUrl(href: string = location.href): string {
  const url = new URL(href);
  url.searchParams.delete("token");
  url.hash = fragmentOf();
  return url.href;
}

/** Put what `link` asks for that this page can show into the state, trace its text, then set the focus that
 *  depends on the trace (the token). The model list must be in (app.loadModels). */
export async function openLink(link: Link): Promise<void> {
  if (link.text !== undefined && !snapshot && link.text !== app.text) app.setText(link.text);
  if (link.model !== undefined && app.models.some((m) => m.name === link.model)) app.model = link.model;
  if (link.tab !== undefined) s2s.tab = link.tab;
  // the chosen model's shape, where the list gives it: the view, layer and head are set before the trace, so
  // that their tensors come with it; otherwise they wait for the trace's own config
  const before = app.models.find((m) => m.name === app.model)?.config ?? null;
  const focus = (cfg: NonNullable<typeof before>) => {
    const caps = capsOf(cfg);
    if (link.view !== undefined && hasStage(link.view, caps)) app.view = link.view;
    if (link.layer !== undefined && link.layer < cfg.n_layer) app.layer = link.layer;
    if (link.head !== undefined && link.head < cfg.n_head) app.head = link.head;
    if (link.ln !== undefined && (normsOf(caps) as string[]).includes(link.ln)) app.ln = link.ln as LnWhich;
  };
  if (before) focus(before);
  await app.run();
  const tr = app.trace;
  if (!tr) return; // the text could not be traced: the page says why, with the default focus
  focus(tr.config);
  if (link.pos !== undefined && link.pos < tr.token_ids.length) app.pos = link.pos;
}

/** Keep the address's fragment following the state, from now on: at once, then after each change that a
 *  200 ms pause follows (typing does not rewrite the address at every key, and Chromium ignores a page that
 *  rewrites it too often). history.replaceState: no history entries. Returns what stops it. */
export function keepInAddress(): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let first = true;
  const write = (fragment: string) => {
    const url = new URL(location.href);
    url.hash = fragment;
    if (url.href !== location.href) history.replaceState(history.state, "", url);
  };
  const stop = $effect.root(() => {
    $effect(() => {
      const fragment = fragmentOf();
      clearTimeout(timer);
      if (first) write(fragment);
      else timer = setTimeout(() => write(fragment), 200);
      first = false;
    });
  });
  return () => {
    clearTimeout(timer);
    stop();
  };
}
