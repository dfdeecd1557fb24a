// The guided lessons' contract: a lesson is a list of steps, each with one idea, a target on the page
// that the card points at, a way to put the app in the state the step talks about, and text written
// in the learner's own numbers. The card engine is components/Lesson.svelte; the lessons themselves
// live in src/lessons/.
import type { TensorSpec } from "./generated/api";
import type { Lang } from "./i18n";

/** A value read from the learner's trace: `v` as shown, `id` a stable name that tests look up
 *  (rendered as `data-num={id}`), `raw` the unformatted number or text the API gave. */
export interface Value {
  v: string;
  id: string;
  raw: number | string;
}

/** Lesson text: plain words and values, in order. An empty array means "not loaded yet". */
export type Part = string | Value;
export type Text = Part[];

export interface LessonStep {
  /** Stable id, the same in both languages (tests compare the two lessons step by step). */
  id: string;
  /** `data-tour` value of the element the card points at; "" for a card with no target. */
  target: string;
  /** Put the app in the state this step talks about (open a view, pick a layer, head or token) and
   *  fetch what the text needs. Runs when the step opens. */
  enter?: () => void | Promise<void>;
  /** Tensors the text reads beyond what the step's view fetches itself. Read inside a reactive
   *  context: fetched again whenever the trace, the focus or the layer change. */
  needs?: () => TensorSpec[];
  title: Record<Lang, string>;
  /** The explanation, with its "why", in the learner's numbers. Read inside a reactive context, so it
   *  follows the text, the focus and the settings as they change. */
  body: (lang: Lang) => Text;
  /** Something to do, where it fits ("hover the row of ␣to", "drag T to 2"). */
  task?: (lang: Lang) => Text;
  /** True once the task is done (the card shows it). */
  done?: () => boolean;
}

export interface Lesson {
  id: string;
  title: Record<Lang, string>;
  steps: LessonStep[];
}

/** A value for lesson text. */
export function val(id: string, v: string, raw: number | string = v): Value {
  return { id, v, raw };
}

/** Tagged template for lesson text: `` L`the top guess is ${val("top", "4.8 %", 0.048)}` `` gives parts. */
export function L(strings: TemplateStringsArray, ...values: (Part | number)[]): Text {
  const out: Text = [];
  strings.forEach((s, i) => {
    if (s) out.push(s);
    if (i < values.length) {
      const v = values[i];
      out.push(typeof v === "number" ? String(v) : v);
    }
  });
  return out;
}

/** Plain text of lesson parts (for aria labels and tests). */
export function plain(text: Text): string {
  return text.map((p) => (typeof p === "string" ? p : p.v)).join("");
}
