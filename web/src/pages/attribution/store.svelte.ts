// The "Why this token" area's state and its latest answers from /api/attribution, kept outside the components so
// that the lesson (src/lessons/why.ts) reads the same numbers the panels show, and can ask for them without the
// panels mounted. The attribution follows the app's text and focus position; the patching has its own prompt pair.
import type { AttributeOut, PatchIn, PatchOut, TokensOut } from "../../lib/generated/api";
import { asError } from "../../lib/errorText";
import { app } from "../../lib/state.svelte";
import { why } from "./api";
import type { CheckedPair } from "./pairs";

export type WhyTab = "dla" | "patch";
export type PatchKind = NonNullable<PatchIn["what"]>[number];
export const PATCH_KINDS: readonly PatchKind[] = ["resid_pre", "attn_out", "mlp_out", "heads"];

/** A token as typed in a box: its text exactly (leading space included), digits an id, empty none. */
export function tokenArg(s: string): string | number | null {
  if (s === "") return null;
  return /^\d+$/.test(s) ? Number(s) : s;
}

class WhyStore {
  tab = $state<WhyTab>("dla");
  /** The attribution split by the model's components, or block L's output by its autoencoder's features. */
  split = $state<"components" | "features">("components");

  // -- direct logit attribution of the app's trace, at the focus position ------------------------------------
  target = $state(""); // as typed; "" = the default (the next token, or the top prediction at the last)
  versus = $state("");
  attr = $state.raw<AttributeOut | null>(null);
  attrKey = $state("");
  attrError = $state.raw<Error | null>(null); // worded in the page's language where it shows (tError)
  attrBusy = $state(false);
  #attrCtl: AbortController | null = null;

  /** The key of the attribution the page asks for now: model, ids, position and the two tokens. */
  wantedKey(): string {
    const tr = app.trace;
    return tr ? `${tr.model}|${tr.token_ids.join()}|${app.pos}|${this.target}|${this.versus}` : "";
  }

  /** The attribution for the app's trace and focus (a cached trace on the server: no forward pass). */
  async attribute(): Promise<void> {
    const tr = app.trace;
    const key = this.wantedKey();
    if (!tr || (key === this.attrKey && (this.attr || this.attrError))) return;
    this.#attrCtl?.abort();
    const ctl = (this.#attrCtl = new AbortController());
    this.attrBusy = true;
    try {
      const out = await why.attribute({ model: tr.model, ids: tr.token_ids, position: app.pos,
        target: tokenArg(this.target), versus: tokenArg(this.versus) }, ctl.signal);
      if (ctl.signal.aborted) return;
      this.attr = out;
      this.attrError = null;
      this.attrKey = key;
    } catch (e) {
      if ((e as Error).name === "AbortError") return;
      this.attr = null;
      this.attrError = asError(e);
      this.attrKey = key;
    } finally {
      if (this.#attrCtl === ctl) this.attrBusy = false;
    }
  }

  /** The attribution when it belongs to what the page shows now. */
  current(): AttributeOut | null {
    return this.attrKey === this.wantedKey() ? this.attr : null;
  }

  // -- activation patching ------------------------------------------------------------------------------
  clean = $state("");
  corrupted = $state("");
  answer = $state("");
  wrong = $state("");
  what = $state<PatchKind[]>([...PATCH_KINDS]);
  patch = $state.raw<PatchOut | null>(null);
  /** The request the shown grids answer. */
  patchOf = $state.raw<PatchIn | null>(null);
  progress = $state<{ done: number; total: number } | null>(null);
  running = $state(false);
  patchError = $state.raw<Error | null>(null);
  /** The last run was cancelled after this many of its patched runs. */
  cancelled = $state<{ done: number; total: number } | null>(null);
  /** The tokens of the clean and the corrupted prompt, for the length check (null while unknown). */
  lengths = $state.raw<TokensOut | null>(null);
  lengthsOf = $state("");
  /** The example pair chosen for the loaded model (pairs.ts), and the model it was chosen for. */
  example = $state.raw<CheckedPair | null>(null);
  #patchCtl: AbortController | null = null;

  request(): PatchIn {
    return { model: app.trace?.model ?? app.model, clean: this.clean, corrupted: this.corrupted,
      answer: tokenArg(this.answer) ?? "", wrong: tokenArg(this.wrong) ?? "", what: [...this.what] };
  }

  /** Run the patching of the current pair; progress as it comes; `cancel()` stops it. */
  async runPatch(): Promise<void> {
    this.#patchCtl?.abort();
    const ctl = (this.#patchCtl = new AbortController());
    const req = this.request();
    this.running = true;
    this.progress = null;
    this.cancelled = null;
    this.patchError = null;
    try {
      const out = await why.patch(req, (done, total) => {
        if (this.#patchCtl === ctl) this.progress = { done, total };
      }, ctl.signal);
      if (this.#patchCtl !== ctl) return;
      this.patch = out;
      this.patchOf = req;
    } catch (e) {
      if (this.#patchCtl !== ctl) return;
      if ((e as Error).name === "AbortError") this.cancelled = this.progress ?? { done: 0, total: 0 };
      else this.patchError = asError(e);
    } finally {
      if (this.#patchCtl === ctl) {
        this.running = false;
        this.#patchCtl = null;
      }
    }
  }

  /** Stop the running patching: the request is aborted, and the server stops at its next batch of runs. */
  cancel(): void {
    this.#patchCtl?.abort();
  }

  /** The grids when they answer the pair and grids in the boxes now. */
  currentPatch(): PatchOut | null {
    const q = this.patchOf, r = this.request();
    return q && this.patch && q.model === r.model && q.clean === r.clean && q.corrupted === r.corrupted
      && q.answer === r.answer && q.wrong === r.wrong ? this.patch : null;
  }

  /** The tokens of both prompts as the model reads them (no forward pass). */
  async checkLengths(): Promise<void> {
    const model = app.trace?.model ?? app.model;
    const key = `${model}|${this.clean}|${this.corrupted}`;
    if (!this.clean || !this.corrupted || key === this.lengthsOf) return;
    try {
      const out = await why.tokens({ model, texts: [this.clean, this.corrupted] });
      if (`${model}|${this.clean}|${this.corrupted}` === key) { this.lengths = out; this.lengthsOf = key; }
    } catch {
      /* the run says what is wrong with the prompts */
    }
  }

  /** The shown tokens when they are the boxes' prompts. */
  currentLengths(): TokensOut | null {
    return this.lengthsOf === `${app.trace?.model ?? app.model}|${this.clean}|${this.corrupted}` ? this.lengths : null;
  }

  usePair(p: { clean: string; corrupted: string; answer: string; wrong: string }): void {
    this.clean = p.clean;
    this.corrupted = p.corrupted;
    this.answer = p.answer;
    this.wrong = p.wrong;
  }
}

export const whyStore = new WhyStore();
