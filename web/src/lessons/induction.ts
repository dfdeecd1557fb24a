// The lesson of the "Watch it learn" page: a two-layer decoder trained on random symbols with a repeated segment,
// and the moment it learns to copy in context (Olsson et al. 2022, "In-context Learning and Induction Heads").
// What the task is, why the loss first sits at an even guess, the previous-token and induction heads, the stripes in
// the example's maps, why it takes two layers (the one-layer control), and what this says about large models. Told
// with the records of the run the page shows (learn.runs: the shipped recorded run, or a live one as far as it has
// got), never the textbook's order where this run's numbers say otherwise: in the shipped run the induction score
// passes 0.5 before any previous-token score does. Its words are in the catalogues ("lesson.induction.*");
// web/tests/lessons/claims.induction.ts checks every claim on the shipped run, its prefixes and other runs.
import { untrack } from "svelte";
import type { InductionConfigOut, InductionExample, InductionRecord } from "../lib/generated/api";
import { claim, either, say, val, type Lesson, type LessonStep, type Text, type Value } from "../lib/lesson";
import { dec, int, word } from "../lib/lessonFormat";
import { learn, score } from "../pages/learn/state.svelte";

// -- where the card points (the page's data-tour names) ---------------------------------------------------------

// The page marks its parts with data-testid; the card finds a step's target by data-tour. The lesson names the
// same elements by their test ids and, as a step opens, gives each its data-tour of that name (`mark`).
const AT = {
  example: "learn-map", curve: "learn-loss", icl: "learn-icl", heads: "learn-heads-main", maps: "learn-map",
  mapsScrub: "learn-maps-scrub", control: "learn-control-why", controlHeads: "learn-heads-control",
} as const;

/** Give the page's elements with these test ids a data-tour of the same name, once they are there (a second at most:
 *  the page draws its records as they arrive). */
async function mark(...names: string[]): Promise<void> {
  if (typeof document === "undefined" || !document.querySelector('[data-testid="learn-page"]')) return;
  for (let k = 0; k < 60; k++) {
    let all = true;
    for (const n of names) {
      const els = document.querySelectorAll(`[data-testid="${n}"]`);
      if (!els.length) all = false;
      // a chart is an <svg>, which the card cannot measure as a target (no offsetParent): its figure, with the caption
      els.forEach((el) => {
        const box = el instanceof HTMLElement ? el : el.parentElement;
        if (box && !box.dataset.tour) box.dataset.tour = n;
      });
    }
    if (all) return;
    await new Promise((r) => setTimeout(r, 16));
  }
}

/** Show head (l, h) of the main run in the example's large map (the page's head grid, as a click on it does). */
function pickHead(l: number, h: number): void {
  if (typeof document === "undefined") return;
  document.querySelector<HTMLElement>(`[data-testid="learn-grid-main"] [data-lh="${l}-${h}"]`)?.click();
}

// -- the bars and tolerances ------------------------------------------------------------------------------------

/** The score at which a head counts as formed (the run's own bar: training/induction.py INDUCTION_BAR). */
export const BAR = 0.5;
/** A loss within this of ln V counts as the even guess (nats). */
export const PLATEAU_TOL = 0.05;
/** A layer-0 head giving the previous symbol at least this share takes part in the previous-token pattern. */
export const PARTIAL = 0.2;
/** An in-context learning score at or below minus this counts as using the context (nats). */
export const ICL_MIN = 0.1;

// -- the run shown ------------------------------------------------------------------------------------------------

/** The records of the main run (the two-layer one) the page shows, as far as they go. */
const mainRecs = (): InductionRecord[] => learn.runs.main;
const controlRecs = (): InductionRecord[] => learn.runs.control;
/** The shown run's configuration: the live run's, else the shipped run's. */
function config(): InductionConfigOut | null {
  return learn.source === "live" ? learn.live?.config ?? null : learn.info?.recorded.config ?? null;
}
const example = (): InductionExample | null => learn.info?.example ?? null;

/** The head with the largest score in `m` (layer, head): the first of equals. */
export function bestHead(m: number[][]): { l: number; h: number; v: number } {
  let best = { l: 0, h: 0, v: -Infinity };
  m.forEach((row, l) => row.forEach((v, h) => { if (v > best.v) best = { l, h, v }; }));
  return best;
}
const bestPt = (r: InductionRecord) => bestHead(r.previous_token);
const bestInd = (r: InductionRecord) => bestHead(r.induction);

/** The index of the first record from which `test` holds to the last record (the run's milestones: induction.py
 *  `crossing`), or -1. */
export function crossing(recs: InductionRecord[], test: (r: InductionRecord) => boolean): number {
  let found = -1;
  recs.forEach((r, i) => { if (!test(r)) found = -1; else if (found < 0) found = i; });
  return found;
}
export const ptCross = (recs: InductionRecord[]): number => crossing(recs, (r) => bestPt(r).v >= BAR);
export const indCross = (recs: InductionRecord[]): number => crossing(recs, (r) => bestInd(r).v >= BAR);
/** The repeat loss below half the first-occurrence loss, for good (induction.py `repeat_loss_falls`). */
export const fallCross = (recs: InductionRecord[]): number => crossing(recs, (r) => r.repeat_loss < 0.5 * r.first_loss);

/** The first run of at least two records in a row with both losses within PLATEAU_TOL of ln V: [from, to] indices. */
export function plateau(recs: InductionRecord[], vocab: number): [number, number] | null {
  const near = (r: InductionRecord) => Math.abs(r.first_loss - Math.log(vocab)) <= PLATEAU_TOL
    && Math.abs(r.repeat_loss - Math.log(vocab)) <= PLATEAU_TOL;
  for (let i = 0; i + 1 < recs.length; i++) {
    if (!near(recs[i]) || !near(recs[i + 1])) continue;
    let j = i + 1;
    while (j + 1 < recs.length && near(recs[j + 1])) j++;
    return [i, j];
  }
  return null;
}

/** On the example: where the segment starts (s), its length (L) and where its repeat starts (r = s + L). */
function segment(ex: InductionExample) {
  return { s: ex.prefix, L: ex.segment, r: ex.prefix + ex.segment };
}
/** A head's mean weight, on the example, from each symbol of the repeat (r + j, j < L - 1) to the symbol after its
 *  first occurrence (s + j + 1): the induction score on one sequence. */
export function exampleInduction(m: number[][], ex: InductionExample): number {
  const { s, L, r } = segment(ex);
  let sum = 0;
  for (let j = 0; j < L - 1; j++) sum += m[r + j][s + j + 1];
  return sum / (L - 1);
}
/** A head's mean weight, on the example, from each symbol to the one before it. */
export function examplePrevious(m: number[][]): number {
  let sum = 0;
  for (let t = 1; t < m.length; t++) sum += m[t][t - 1];
  return sum / (m.length - 1);
}

const step = (id: string, r: InductionRecord, at?: string): Value => int(id, r.step, at);
/** A head's score written as the page writes it beside the head (HeadScores: 3 decimals, "< 0.001"), so that the
 *  sentence and the page show the same number. */
const sc = (id: string, x: number, at?: string): Value => val(id, score(x), x, at);
const layerHead = (p: string, b: { l: number; h: number }) => ({ [`${p}l`]: int(`ind-${p}-layer`, b.l), [`${p}h`]: int(`ind-${p}-head`, b.h) });

/** Show record `i` of the main run (the page's scrubber). */
function showRecord(i: number): void {
  learn.tab = "copy";
  learn.pause();
  if (i >= 0 && i < learn.runs.main.length) learn.setAt(i);
}
/** The index of the record `enter` moved to, to tell when the learner has scrubbed away from it. */
const entered = { at: -1 };

// -- the steps --------------------------------------------------------------------------------------------------

const steps: LessonStep[] = [
  {
    id: "task",
    target: AT.example,
    enter: async () => { learn.tab = "copy"; await mark(AT.example); },
    title: "lesson.induction.task.title",
    body: () => {
      const c = config(), ex = example();
      if (!c || !ex) return [];
      const { s, L } = segment(ex);
      const shape = { layers: int("ind-layers", c.layers), heads: int("ind-heads", c.heads), width: int("ind-width", c.width),
        steps: int("ind-steps", c.steps), T: int("ind-seq-len", c.seq_len), V: int("ind-vocab", c.vocab) };
      return [
        c.layers === 1 ? say("lesson.induction.task.modelOne", shape) : say("lesson.induction.task.model", shape),
        say("lesson.induction.task.data", { min: int("ind-min-seg", c.min_segment), max: int("ind-max-seg", c.max_segment) }),
        say("lesson.induction.task.example", { L: int("ind-ex-seg", L), P: int("ind-ex-prefix", s),
          a: word("ind-ex-a", ex.tokens[s], AT.example), b: word("ind-ex-b", ex.tokens[s + L - 1], AT.example) }),
        say("lesson.induction.task.why"),
        say("lesson.induction.task.losses", { n: int("ind-heldout", c.heldout) }),
      ];
    },
  },
  {
    id: "plateau",
    target: AT.curve,
    enter: async () => { learn.tab = "copy"; await mark(AT.curve); },
    title: "lesson.induction.plateau.title",
    body: () => {
      const c = config(), recs = mainRecs();
      if (!c || !recs.length) return [];
      const last = recs[recs.length - 1];
      const V = int("ind-vocab", c.vocab);
      const text: Text = [say("lesson.induction.plateau.uniform", { V, ln: dec("ind-ln-vocab", Math.log(c.vocab)) })];
      const p = plateau(recs, c.vocab);
      const tol = dec("ind-plateau-tol", PLATEAU_TOL);
      if (!p) text.push(claim("lesson.induction.plateau.never", { tol, V }));
      else {
        const vars = { a: step("ind-plateau-from", recs[p[0]], AT.curve), b: step("ind-plateau-to", recs[p[1]], AT.curve), tol };
        text.push(either(p[1] === recs.length - 1, "lesson.induction.plateau.still", "lesson.induction.plateau.sat", vars));
      }
      text.push(say("lesson.induction.plateau.why"));
      const f = fallCross(recs);
      const now = { last: step("ind-last-step", last), r2: dec("ind-last-repeat", last.repeat_loss, AT.curve),
        f2: dec("ind-last-first", last.first_loss, AT.curve) };
      if (f >= 0) {
        text.push(claim("lesson.induction.plateau.fell", { s: step("ind-fall-step", recs[f], AT.curve),
          r: dec("ind-fall-repeat", recs[f].repeat_loss), f: dec("ind-fall-first", recs[f].first_loss), ...now }));
      } else text.push(claim("lesson.induction.plateau.notYet", now));
      return text;
    },
  },
  {
    id: "heads",
    target: AT.heads,
    enter: async () => {
      const recs = untrack(mainRecs);
      const i = indCross(recs);
      showRecord(i >= 0 ? i : recs.length - 1);
      await mark(AT.heads);
    },
    title: "lesson.induction.heads.title",
    body: () => {
      const recs = mainRecs(), c = config();
      if (!recs.length || !c) return [];
      const first = recs[0], last = recs[recs.length - 1];
      const text: Text = [say("lesson.induction.heads.def"),
        claim("lesson.induction.heads.start", { s0: step("ind-first-step", first), pt0: sc("ind-pt0", bestPt(first).v),
          ind0: sc("ind-ind0", bestInd(first).v) })];
      const pi = ptCross(recs), ii = indCross(recs);
      const lastStep = step("ind-last-step", last);
      if (ii >= 0) {
        const at = recs[ii], ind = bestInd(at), pt = bestPt(at);
        const vars = { ind: step("ind-ind-step", at, AT.heads), ...layerHead("i", ind), ...layerHead("p", pt) };
        if (pi >= 0 && recs[pi].step === at.step) {
          text.push(claim("lesson.induction.heads.sameStep", { s: step("ind-both-step", at, AT.heads), every: int("ind-every", c.record_every) }));
        } else if (pi >= 0 && pi < ii) {
          text.push(claim("lesson.induction.heads.ptFirst", { ...vars, ...layerHead("p", bestPt(recs[pi])),
            pt: step("ind-pt-step", recs[pi], AT.heads) }));
        } else if (pt.v >= BAR) {
          text.push(claim("lesson.induction.heads.both", { ...vars, ptAt: sc("ind-pt-at", pt.v, AT.heads) }));
        } else {
          const ptAt = sc("ind-pt-at", pt.v, AT.heads);
          text.push(pi >= 0
            ? claim("lesson.induction.heads.indFirst", { ...vars, ptAt, pt: step("ind-pt-step", recs[pi]) })
            : claim("lesson.induction.heads.indOnly", { ...vars, ptAt, last: lastStep, ptMax: sc("ind-pt-max", bestPt(last).v) }));
          // which heads of layer 0 carried the previous symbol when the induction head (of layer 1, in two) formed:
          // the only attention its keys can have read it from
          const part = at.previous_token[0].map((v, h) => ({ v, h })).filter((x) => x.v >= PARTIAL);
          if (c.layers === 2 && ind.l === 1 && part.length) {
            const lo = Math.min(...part.map((x) => x.v)), hi = Math.max(...part.map((x) => x.v));
            text.push(part.length === 1
              ? claim("lesson.induction.heads.partialOne", { h: int("ind-part-head", part[0].h), w: sc("ind-part-hi", hi, AT.heads) })
              : claim("lesson.induction.heads.partial", { n: int("ind-part-n", part.length), lo: sc("ind-part-lo", lo, AT.heads),
                hi: sc("ind-part-hi", hi, AT.heads) }));
          }
        }
      } else if (pi >= 0) {
        text.push(claim("lesson.induction.heads.ptOnly", { ...layerHead("p", bestPt(recs[pi])), pt: step("ind-pt-step", recs[pi], AT.heads),
          last: lastStep, indMax: sc("ind-ind-max", bestInd(last).v, AT.heads) }));
      } else {
        text.push(claim("lesson.induction.heads.none", { last: lastStep, ptMax: sc("ind-pt-max", bestPt(last).v, AT.heads),
          indMax: sc("ind-ind-max", bestInd(last).v, AT.heads) }));
      }
      return text;
    },
  },
  {
    id: "maps",
    // the task's slider: the one beside the map (the page's first stands at its top, far above the map)
    target: AT.maps,
    controls: [AT.mapsScrub],
    enter: async () => {
      // the last record, where the stripes are clearest; the task scrubs back to where they were not
      const recs = untrack(mainRecs);
      showRecord(recs.length - 1);
      entered.at = untrack(() => learn.at);
      await mark(AT.maps, AT.mapsScrub);
      if (recs.length) { const b = bestHead(recs[recs.length - 1].induction); pickHead(b.l, b.h); }
    },
    title: "lesson.induction.maps.title",
    body: () => {
      const recs = mainRecs(), ex = example();
      const shown = recs[learn.at];
      if (!recs.length || !ex || !shown) return [];
      const last = recs[recs.length - 1];
      const { s, L, r } = segment(ex);
      const ind = bestInd(last), pt = bestPt(last);
      const text: Text = [];
      const m = shown.example_attention[ind.l]?.[ind.h];
      const pm = shown.example_attention[pt.l]?.[pt.h];
      if (!m || !pm) return [];
      const vars = { s: step("ind-shown-step", shown, AT.maps), last: step("ind-last-step", last), ...layerHead("i", ind) };
      const w = exampleInduction(m, ex);
      text.push(either(w >= BAR, "lesson.induction.maps.stripe", "lesson.induction.maps.noStripe",
        { ...vars, w: dec("ind-map-w", w, AT.maps), off: int("ind-map-offset", L - 1) }));
      // the first symbol of the repeat: the head's weight on the symbol that followed it the first time (at 0.5 or more
      // it is the row's largest, unshared: the example's maps carry 2 decimals, and an even row ties)
      const wb = m[r][s + 1];
      text.push(either(wb >= BAR, "lesson.induction.maps.row", "lesson.induction.maps.rowNot", {
        a: word("ind-map-a", ex.tokens[r], AT.maps), b: word("ind-map-b", ex.tokens[s + 1], AT.maps), w: dec("ind-map-row-w", wb, AT.maps) }));
      const pw = examplePrevious(pm);
      text.push(either(pw >= BAR, "lesson.induction.maps.prev", "lesson.induction.maps.prevPart",
        { ...layerHead("p", pt), last: step("ind-last-step", last), w: dec("ind-map-pw", pw, AT.maps) }));
      return text;
    },
    task: () => [say("lesson.induction.maps.do", { slider: say("learn.record") })],
    done: () => learn.at !== entered.at,
  },
  {
    id: "two",
    target: AT.control,
    // the last record: the page's sentence on the control reads its record of the same step
    enter: async () => { showRecord(untrack(mainRecs).length - 1); await mark(AT.control, AT.controlHeads); },
    title: "lesson.induction.two.title",
    body: () => {
      const c = config();
      if (!c || !mainRecs().length) return [];
      const text: Text = [say("lesson.induction.two.key")];
      const ctl = controlRecs();
      if (!ctl.length) text.push(either(c.control, "lesson.induction.two.controlLater", "lesson.induction.two.noControl"));
      else {
        const last = ctl[ctl.length - 1];
        const top = ctl.reduce((x, y) => (bestInd(y).v > bestInd(x).v ? y : x));
        const formed = indCross(ctl) >= 0 || fallCross(ctl) >= 0;
        const vars = { last: step("ind-ctl-last", last, AT.control), ind: sc("ind-ctl-ind", bestInd(top).v, AT.controlHeads),
          s: step("ind-ctl-ind-step", top), r: dec("ind-ctl-repeat", last.repeat_loss, AT.control),
          f: dec("ind-ctl-first", last.first_loss, AT.control) };
        text.push(either(!formed && bestInd(top).v < BAR, "lesson.induction.two.controlNever", "lesson.induction.two.controlSome", vars));
      }
      text.push(say("lesson.induction.two.smeared"));
      return text;
    },
  },
  {
    id: "icl",
    target: AT.icl,
    enter: async () => { showRecord(untrack(mainRecs).length - 1); await mark(AT.icl); },
    title: "lesson.induction.icl.title",
    body: () => {
      const recs = mainRecs();
      if (!recs.length) return [];
      const first = recs[0], last = recs[recs.length - 1];
      const vars = { s0: step("ind-first-step", first), a: dec("ind-icl-first", first.icl_score), last: step("ind-last-step", last),
        b: dec("ind-icl-last", last.icl_score, AT.icl), d: dec("ind-icl-gain", -last.icl_score), min: dec("ind-icl-min", ICL_MIN) };
      return [
        either(last.icl_score <= -ICL_MIN, "lesson.induction.icl.fell", "lesson.induction.icl.not", vars),
        say("lesson.induction.icl.paper"),
        say("lesson.induction.icl.large"),
      ];
    },
  },
];

export const inductionLesson: Lesson = {
  id: "induction",
  title: "lesson.induction.title",
  steps,
};
