// The guided lessons' contract: a lesson is a list of steps, each with one idea, a target on the page
// that the card points at, a way to put the app in the state the step talks about, and text written
// in the learner's own numbers. The card engine is components/Lesson.svelte; the lessons themselves
// live in src/lessons/, their words in the catalogues (src/locales/<lang>.json, keys "lesson.<lesson>.<step>.*").
//
// Text is a list of sentences, each a catalogue key with its values. A sentence whose truth depends on the
// numbers is a *claim* (`claim(key, vars)`): the step's code chooses it only when the data shows it (with
// another sentence beside it for when it does not), and web/tests/lessons/ checks each claim key against
// the numbers of many texts on several models. A sentence true whatever the numbers is `say(key, vars)`.
//
// Conventions for numbers in prose (lib/lessonFormat.ts): 2-3 significant digits; next-token
// probabilities as percentages, attention weights as decimals (as the views show them); a negative number
// after an operator in parentheses: "−0.032 + (−0.022)"; counts, ids and positions exact.
import type { TensorSpec } from "./generated/api";
import { fill, template, type Lang, type MessageKey } from "./i18n";

/** A value read from the learner's trace: `v` as shown, `id` a stable name that tests look up
 *  (rendered as `data-num={id}`), `raw` the unformatted number or text the API gave, and `at` the
 *  `data-tour` name of the element of the view that shows this value (the card highlights it and
 *  never covers it). */
export interface Value {
  v: string;
  id: string;
  raw: number | string;
  at?: string;
}

/** One sentence (or a short run of them) of lesson text: a catalogue key and the values of its
 *  placeholders. A value may itself be a sentence (a word or phrase of the catalogue, such as a unit). */
export interface Sentence {
  key: MessageKey;
  vars?: Record<string, Var>;
  /** A sentence whose truth depends on the data: chosen by a condition on the numbers it quotes. */
  claim?: true;
}
export type Var = Value | Sentence | string | number;

/** What a step says: sentences in order. An empty array means "not loaded yet". */
export type Text = Sentence[];

/** The parts a sentence renders to: words, and values (shown bold, marked for tests). */
export type Part = string | Value;

export interface LessonStep {
  /** Stable id (tests look steps up by it). */
  id: string;
  /** `data-tour` value of the element the card points at; "" for a card with no target. */
  target: string;
  /** `data-tour` names of the controls the task asks the learner to use (Play, a slider, a table row):
   *  scrolled into view with the target, never covered by the card. Values' `at` are added to these. */
  controls?: string[];
  /** Put the app in the state this step talks about (open a view, pick a layer, head or token) and
   *  fetch what the text needs. Runs when the step opens. */
  enter?: () => void | Promise<void>;
  /** Tensors the text reads beyond what the step's view fetches itself. Read inside a reactive
   *  context: fetched again whenever the trace, the focus or the layer change. */
  needs?: () => TensorSpec[];
  title: MessageKey;
  /** The explanation, with its "why", in the learner's numbers. Read inside a reactive context, so it
   *  follows the text, the focus and the settings as they change. The same sentences in every language. */
  body: () => Text;
  /** Something to do, where it fits ("hover the row of ␣to", "drag T to 2"). */
  task?: () => Text;
  /** True once the task is done (the card shows it). */
  done?: () => boolean;
}

export interface Lesson {
  id: string;
  title: MessageKey;
  steps: LessonStep[];
}

/** A value for lesson text. */
export function val(id: string, v: string, raw: number | string = v, at?: string): Value {
  return at ? { id, v, raw, at } : { id, v, raw };
}

/** A sentence true whatever the numbers. */
export function say(key: MessageKey, vars?: Record<string, Var>): Sentence {
  return vars ? { key, vars } : { key };
}

/** A sentence whose truth depends on the numbers: the caller chose it because the data shows it. */
export function claim(key: MessageKey, vars?: Record<string, Var>): Sentence {
  return vars ? { key, vars, claim: true } : { key, claim: true };
}

/** `cond ? claim(yes) : claim(no)`, for the common case of one condition and two wordings. */
export function either(cond: boolean, yes: MessageKey, no: MessageKey, vars?: Record<string, Var>): Sentence {
  return claim(cond ? yes : no, vars);
}

const isSentence = (v: Var): v is Sentence => typeof v === "object" && "key" in v;

/** One sentence in `lang`: its catalogue string with the placeholders filled in. */
export function renderSentence(lang: Lang, s: Sentence): Part[] {
  const out: Part[] = [];
  for (const p of fill<Var>(template(lang, s.key), s.vars ?? {})) {
    if (typeof p === "string" || typeof p === "number") out.push(String(p));
    else if (isSentence(p)) out.push(...renderSentence(lang, p));
    else out.push(p);
  }
  return out;
}

/** A step's text in `lang`: its sentences joined by the language's gap between sentences. */
export function render(lang: Lang, text: Text): Part[] {
  const gap = template(lang, "meta.sentenceGap");
  const out: Part[] = [];
  text.forEach((s, i) => {
    if (i && gap) out.push(gap);
    out.push(...renderSentence(lang, s));
  });
  return out;
}

/** Plain text of rendered parts (for aria labels and tests). */
export function plain(parts: Part[]): string {
  return parts.map((p) => (typeof p === "string" ? p : p.v)).join("");
}

/** Every value a text quotes (nested sentences included). */
export function values(text: Text): Value[] {
  const out: Value[] = [];
  const walk = (s: Sentence) => {
    for (const v of Object.values(s.vars ?? {})) {
      if (typeof v !== "object") continue;
      if (isSentence(v)) walk(v);
      else out.push(v);
    }
  };
  text.forEach(walk);
  return out;
}
