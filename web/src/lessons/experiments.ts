// The Experiments area's guided lesson: interventions on the loaded decoder (GPT-2 or Llama family) told with
// the numbers the panels show: head importance and roles, switching a head off, pruning, the logit lens and word
// arithmetic. Each step fetches what it quotes through the panels' own loaders (pages/experiments/store.svelte.ts),
// so the panel and the card show one answer, and chooses its example from the data: the head experiments run on
// the learner's text when the model predicts it (a loss under half of ln V, the loss of a uniform guess), else on
// a text small models predict well, which the panel then shows; the head, the layer, the habit and the analogy
// quoted are the ones the numbers single out. Every sentence that depends on the numbers is a claim (checked by
// web/tests/lessons/claims.experiments.ts); the words are in the catalogue under lesson.experiments.*.
import { tick } from "svelte";
import { SvelteSet } from "svelte/reactivity";
import { api } from "../lib/client";
import { attentionLayers } from "../lib/family";
import type { AblateOut, AnalogyOut, HeadsOut, ImportanceOut, LensOut, PruneOut } from "../lib/generated/api";
import { claim, either, say, type Lesson, type LessonStep, type Sentence, type Text, type Value } from "../lib/lesson";
import { dec, int, pct, token, word } from "../lib/lessonFormat";
import { app } from "../lib/state.svelte";
import {
  ablateHead, ablationFor, headsInput, headsOf, importanceOf, inputKey, lensOf, loadAnalogy, loadHeads,
  loadImportance, loadLens, loadPrune, xp, type Arithmetic, type Metric, type TextChoice, type XInput, type XTab,
} from "../pages/experiments/store.svelte";
import { argBest, entry, lookUpAll } from "./reader";

/** A text small models predict well (counting), for the head experiments when the learner's text is not one. */
export const EXAMPLE_TEXT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,";
/** How the card shows it. */
const EXAMPLE_SHORT = "1, 2, 3, …, 20,";
/** A text is one the model predicts when its loss is under this share of ln V (a uniform guess's loss). */
export const PREDICTED = 0.5;
/** The rise of the loss (a share of the loss with all heads on) that the pruning step counts as the end of "safe". */
export const PRUNE_RISE = 0.1;
/** The role score at which the map names a head's habit (a letter in the cell; analysis/roles.py's threshold). */
export const ROLE_THRESHOLD = 0.5;
/** The pruning curve "falls" when its lowest point is this share of the clean loss below it (visible at 3 digits). */
export const PRUNE_DIP = 0.005;
/** The nearest answer of an analogy stands out when it leads the next by at least this much cosine similarity. */
export const STANDS_OUT = 0.05;
/** Heads whose single ablation changes the loss by less than this count as doing little for the text. */
export const SMALL_CHANGE = 0.01;

export const ROLES = ["previous_token", "first_token", "duplicate_token", "induction", "rare_token"] as const;
type Role = (typeof ROLES)[number];

/** Analogies the arithmetic step tries for its task, a − b + c = d, in order: single tokens in GPT-2-style
 *  vocabularies (a leading space marks a word inside a sentence). The first one the model gets right is offered. */
export const ANALOGIES: readonly [string, string, string, string][] = [
  ["he", "him", "her", "she"], ["his", "he", "she", "her"], ["better", "good", "bad", "worse"],
  ["went", "go", "come", "came"], ["brother", "boy", "girl", "sister"], ["father", "man", "woman", "mother"],
];

const learner = (): XInput | null => (app.trace ? { model: app.trace.model, ids: app.trace.token_ids } : null);
const lnV = () => Math.log(app.trace?.config.vocab_size ?? 2);
const headName = (l: number, h: number) => `L${l}H${h}`;
const head = (id: string, l: number, h: number, at?: string): Value => ({ ...word(id, headName(l, h), at), raw: `${l},${h}` });
const cell = (l: number, h: number) => `exp-cell-${l}-${h}`;

async function open(tab: XTab): Promise<void> {
  app.view = "experiments";
  xp.tab = tab;
  await tick();
}

/** Scroll the box that holds the element named `name` (a wide head map) sideways so that the element shows; the
 *  card scrolls the page itself. */
async function reveal(name: string | null): Promise<void> {
  await tick();
  const el = name ? document.querySelector<HTMLElement>(`[data-tour="${name}"]`) : null;
  for (let box = el?.parentElement; el && box; box = box.parentElement) {
    if (box.scrollWidth > box.clientWidth && getComputedStyle(box).overflowX !== "visible") {
      const e = el.getBoundingClientRect(), b = box.getBoundingClientRect();
      if (e.left < b.left || e.right > b.right) box.scrollLeft += e.left - b.left - (b.width - e.width) / 2;
      return;
    }
  }
}

// -- the text the head experiments run on ------------------------------------------------------------

let exampleIds: { model: string; ids: number[] } | null = null;

/** Decide the text of the head experiments for the learner's current text (once per text): the learner's when
 *  the model predicts it, else the example when the model predicts that; put it in the panels. */
async function chooseText(): Promise<void> {
  const own = learner();
  if (!own) return;
  const key = inputKey(own.model, own.ids);
  if (xp.textChoice?.key !== key) {
    // a single token has nothing to predict: no loss, no map (the example stands in for it)
    const mine = own.ids.length >= 2 ? (await loadImportance(own, "zero")).clean_loss : NaN;
    let example: XInput | null = null, exampleLoss: number | null = null;
    if (!(mine <= PREDICTED * lnV())) {
      try {
        if (exampleIds?.model !== own.model) {
          const tr = await api.trace({ model: own.model, text: EXAMPLE_TEXT, truncate: true, top_n: 1 });
          exampleIds = { model: own.model, ids: tr.token_ids };
        }
        example = exampleIds;
        exampleLoss = (await loadImportance(example, "zero")).clean_loss;
      } catch {
        example = null; // an offline snapshot answers only for the texts it was made with
      }
    }
    const used = example && exampleLoss !== null && (exampleLoss <= PREDICTED * lnV() || Number.isNaN(mine)) ? "example" : "own";
    if (inputKey(learner()?.model ?? "", learner()?.ids ?? []) !== key) return; // the text changed meanwhile
    xp.textChoice = { key, own: mine, example, exampleLoss, used };
  }
  const c = xp.textChoice!;
  xp.example = c.used === "example" && c.example
    ? { ...c.example, text: EXAMPLE_TEXT, for: key, loss: c.exampleLoss ?? NaN, learnerLoss: c.own } : null;
}

/** The choice for the learner's current text, once made. */
function current(): TextChoice | null {
  const own = learner(), c = xp.textChoice;
  return own && c?.key === inputKey(own.model, own.ids) ? c : null;
}

/** The input of the head experiments (the learner's or the example), once chosen. */
const used = (): XInput | null => (current() ? headsInput(learner()) : null);
const usesExample = () => current()?.used === "example";
/** "your text" or "the numbers from 1 to 20", as a phrase of the catalogue. */
const whichText = (): Sentence => say(usesExample() ? "lesson.experiments.text.example" : "lesson.experiments.text.own",
  { example: word("exp-example-text", EXAMPLE_SHORT) });

function imp(): ImportanceOut | null {
  const inp = used();
  return (inp && importanceOf(inp, "zero")) ?? null;
}

/** The head whose ablation raises the loss most (the map's first), as [layer, head]. */
function topHead(m: ImportanceOut): [number, number] {
  const n = m.loss_change[0]?.length || 1, i = argBest(m.loss_change.flat().map((v) => v ?? -Infinity));
  return [Math.floor(i / n), i % n];
}
/** Every head's loss change (a layer without attention has no heads: no cells). */
const headChanges = (m: ImportanceOut): number[] => m.loss_change.flat().filter((v): v is number => v != null);
/** The blocks with heads to switch off. */
const blocksWithHeads = (m: ImportanceOut): number => m.loss_change.filter((row) => row.some((v) => v != null)).length;

// -- the steps -----------------------------------------------------------------------------------------

function importanceText(): Text {
  const c = current(), m = imp();
  if (!c || !m) return [];
  const V = app.trace!.config.vocab_size, half = PREDICTED * lnV();
  const cf = app.trace!.config;
  const out: Text = [say("lesson.experiments.importance.model", { name: word("exp-model", app.trace!.model),
    layers: int("exp-n-layer", blocksWithHeads(m)), heads: int("exp-n-head", cf.n_head),
    total: int("exp-n-heads", headChanges(m).length) })];
  out.push(say("lesson.experiments.importance.intro", { vocab: int("exp-vocab", V), lnV: dec("exp-lnv", lnV()) }));
  const own = dec("exp-own-loss", c.own, c.used === "own" ? "exp-clean-loss" : "exp-example");
  const example = word("exp-example-text", EXAMPLE_SHORT);
  if (Number.isNaN(c.own)) {
    out.push(claim("lesson.experiments.importance.single", { example,
      exampleLoss: dec("exp-example-loss", c.exampleLoss!, "exp-example") }));
    if (c.exampleLoss! > half) out.push(claim("lesson.experiments.importance.exampleNoise"));
  } else if (c.used === "own" && c.own <= half) out.push(claim("lesson.experiments.importance.own", { loss: own }));
  else if (c.used === "example") {
    out.push(claim("lesson.experiments.importance.example", { loss: own,
      exampleLoss: dec("exp-example-loss", c.exampleLoss!, "exp-example"), example: word("exp-example-text", EXAMPLE_SHORT) }));
  } else if (c.exampleLoss === null) {
    out.push(claim("lesson.experiments.importance.poor", { loss: own }));
  } else {
    out.push(claim("lesson.experiments.importance.neither", { loss: own,
      exampleLoss: dec("exp-example-loss", c.exampleLoss ?? NaN), example: word("exp-example-text", EXAMPLE_SHORT) }));
  }
  const [l, h] = topHead(m), d = m.loss_change[l][h] ?? NaN;
  const flat = headChanges(m);
  const N = int("exp-n-heads", flat.length);
  out.push(either(d > 0, "lesson.experiments.importance.top", "lesson.experiments.importance.noneHurts",
    { head: head("exp-top-head", l, h, cell(l, h)), change: dec("exp-top-change", Math.abs(d), cell(l, h)) }));
  const neg = flat.filter((v) => v < 0).length;
  out.push(either(neg > 0, "lesson.experiments.importance.negative", "lesson.experiments.importance.noNegative",
    { count: int("exp-negative-heads", neg), total: N }));
  const small = flat.filter((v) => Math.abs(v) < SMALL_CHANGE).length;
  out.push(claim("lesson.experiments.importance.small", { count: int("exp-small-heads", small), total: N,
    threshold: dec("exp-small-threshold", SMALL_CHANGE) }));
  out.push(say("lesson.experiments.importance.other"));
  return out;
}

const ROLE_PHRASE: Record<Role, Sentence> = {
  previous_token: say("lesson.experiments.role.previous_token"),
  first_token: say("lesson.experiments.role.first_token"),
  duplicate_token: say("lesson.experiments.role.duplicate_token"),
  induction: say("lesson.experiments.role.induction"),
  rare_token: say("lesson.experiments.role.rare_token"),
};

/** The role and head with the highest reference score (the strongest habit), and the score. */
function strongest(H: HeadsOut): { role: Role; l: number; h: number; score: number } | null {
  const src = H.reference ?? H.text;
  let best: { role: Role; l: number; h: number; score: number } | null = null;
  for (const role of ROLES) {
    src.scores[role]?.forEach((row, l) => row.forEach((v, h) => {
      if (v != null && Number.isFinite(v) && (!best || v > best.score)) best = { role, l, h, score: v };
    }));
  }
  return best;
}

function rolesText(): Text {
  const inp = used(), H = inp ? headsOf(inp) : undefined;
  if (!H) return [];
  const s = strongest(H);
  const fromRef = !!H.reference;
  const out: Text = [either(fromRef, "lesson.experiments.roles.reference", "lesson.experiments.roles.textOnly")];
  out.push(say("lesson.experiments.roles.habits"));
  if (s) {
    out.push(claim("lesson.experiments.roles.strongest", { head: head("exp-role-head", s.l, s.h, cell(s.l, s.h)),
      score: dec("exp-role-score", s.score, cell(s.l, s.h)), habit: ROLE_PHRASE[s.role], role: word("exp-role", s.role) }));
  }
  const roleOf = H.reference_role_of ?? H.text_role_of;
  const named = roleOf.flat().filter(Boolean).length;
  const heads = attentionLayers(app.caps, H.n_layer).length * H.n_head; // a layer without attention has none
  out.push(either(named > 0, "lesson.experiments.roles.named", "lesson.experiments.roles.noneNamed",
    { count: int("exp-roles-named", named), total: int("exp-roles-heads", heads),
      threshold: dec("exp-role-threshold", ROLE_THRESHOLD) }));
  out.push(say("lesson.experiments.roles.caveat"));
  return out;
}

/** The head the ablation step switches off: the one the map ranks first on the text of the experiments. */
function ablationTarget(): [number, number] | null {
  const m = imp();
  return m ? topHead(m) : null;
}

function ablationText(): Text {
  const target = ablationTarget(), inp = used();
  if (!target || !inp) return [];
  const out: Text = [say("lesson.experiments.ablation.modes", { head: head("exp-abl-target", target[0], target[1],
    cell(target[0], target[1])) })];
  // the head the panel shows switched off: the lesson's, or the one the learner clicked since
  const a: AblateOut | null = ablationFor(inp), h = xp.ablated;
  if (!a || !h || a.loss_before == null || a.loss_after == null) return xp.ablationBusy ? [] : out;
  const vars = { head: head("exp-abl-head", h[0], h[1], cell(h[0], h[1])),
    mode: say(a.mode === "zero" ? "lesson.experiments.mode.zero" : "lesson.experiments.mode.mean"), modeName: word("exp-abl-mode", a.mode),
    before: dec("exp-abl-before", a.loss_before, "exp-ablation-loss"),
    after: dec("exp-abl-after", a.loss_after, "exp-ablation-loss"),
    change: dec("exp-abl-change", Math.abs(a.loss_after - a.loss_before), "exp-ablation-loss") };
  out.push(either(a.loss_after > a.loss_before, "lesson.experiments.ablation.rises", "lesson.experiments.ablation.falls", vars));
  const top = a.changes[0]; // the rows come in the order of the probability before: the top guess first
  if (top) {
    out.push(claim("lesson.experiments.ablation.topGuess", { head: vars.head, modeName: vars.modeName,
      token: token("exp-abl-token", top.token, top.id, "exp-ablation-top"),
      before: pct("exp-abl-token-before", top.before, "exp-ablation-top"),
      after: pct("exp-abl-token-after", top.after, "exp-ablation-top") }));
  }
  out.push(either(usesExample(), "lesson.experiments.ablation.onExample", "lesson.experiments.ablation.onOwn",
    { example: word("exp-example-text", EXAMPLE_SHORT) }));
  return out;
}

function pruneCurve(): PruneOut | null {
  const inp = used();
  return inp && xp.prune && xp.pruneKey === inputKey(inp.model, inp.ids) && xp.prune.mode === "zero"
    && !xp.prune.recompute && xp.prune.steps.length === (app.trace?.config.n_layer ?? 0) * (app.trace?.config.n_head ?? 0)
    ? xp.prune : null;
}

function pruningText(): Text {
  const P = pruneCurve();
  if (!P || !P.steps.length) return [];
  const losses = P.steps.map((s) => s.loss ?? NaN);
  const N = int("exp-prune-heads", P.steps.length), clean = dec("exp-prune-clean", P.clean_loss, "exp-prune");
  const out: Text = [say("lesson.experiments.pruning.how", { which: whichText() })];
  const knee = losses.findIndex((x) => x > P.clean_loss * (1 + PRUNE_RISE));
  const end = dec("exp-prune-all-off", losses[losses.length - 1], "exp-prune");
  const rise = int("exp-prune-rise", PRUNE_RISE * 100);
  if (knee >= 0) {
    out.push(claim("lesson.experiments.pruning.knee", { safe: int("exp-prune-safe", knee), total: N, clean, rise,
      next: dec("exp-prune-knee-loss", losses[knee], "exp-prune") }));
  } else out.push(claim("lesson.experiments.pruning.noKnee", { total: N, clean, rise, end }));
  const low = argBest(losses, losses.length - 1, -1);
  out.push(either(losses[low] < P.clean_loss * (1 - PRUNE_DIP), "lesson.experiments.pruning.dips",
    "lesson.experiments.pruning.noDip", { off: int("exp-prune-low-at", low + 1), low: dec("exp-prune-low", losses[low], "exp-prune"),
      clean, dip: dec("exp-prune-dip", PRUNE_DIP * 100) }));
  const all = losses[losses.length - 1];
  out.push(claim(all <= PREDICTED * lnV() ? "lesson.experiments.pruning.allOffPredicts" : all < lnV()
    ? "lesson.experiments.pruning.allOffLittle" : "lesson.experiments.pruning.allOffChance", { end, lnV: dec("exp-lnv", lnV()) }));
  out.push(say("lesson.experiments.pruning.studies"));
  return out;
}

function lensText(): Text {
  const inp = learner(), L: LensOut | undefined = lensOf(inp, app.pos);
  const t = L?.targets[0];
  if (!inp || !L || !t || !L.layers.length) return [];
  const rows = L.layers.map((l) => l.positions[0]);
  const last = rows.length - 1;
  const out: Text = [say("lesson.experiments.lens.what")];
  const at = token("exp-lens-token", L.position_tokens[0], inp.ids[app.pos]);
  const pred = token("exp-lens-pred", t.token, t.id, `exp-lens-top-${last}`);
  out.push(claim("lesson.experiments.lens.final", { token: at, pred,
    prob: pct("exp-lens-final-prob", rows[last].target_prob, `exp-lens-prob-${last}`) }));
  const top0 = rows[0].top[0];
  const tied = app.trace!.config.tie_word_embeddings ?? true;
  if (top0) {
    const v = { top: token("exp-lens-top0", top0.token, top0.id, "exp-lens-top-0"),
      prob: pct("exp-lens-top0-prob", top0.prob, "exp-lens-top-0") };
    out.push(tied && top0.id === inp.ids[app.pos] ? claim("lesson.experiments.lens.selfTied", v)
      : claim("lesson.experiments.lens.row0", v));
  }
  out.push(claim("lesson.experiments.lens.rank0", { pred, rank: int("exp-lens-rank0", rows[0].target_rank, "exp-lens-rank-0") }));
  // the first row from which the final prediction stays the top guess
  let from = last;
  while (from > 0 && rows[from - 1].target_rank === 1) from--;
  if (from === 0) out.push(claim("lesson.experiments.lens.firstFromStart", { pred }));
  else if (from === last) out.push(claim("lesson.experiments.lens.firstAtEnd", { pred }));
  else {
    out.push(claim("lesson.experiments.lens.firstFrom", { pred,
      block: int("exp-lens-first-block", from - 1, `exp-lens-rank-${from}`) }));
  }
  const peak = argBest(rows.map((r) => r.target_prob));
  if (peak !== last) {
    out.push(peak === 0
      ? claim("lesson.experiments.lens.peakEmbeddings", { pred, peak: pct("exp-lens-peak-prob", rows[peak].target_prob, "exp-lens-prob-0"),
        prob: pct("exp-lens-final-prob", rows[last].target_prob, `exp-lens-prob-${last}`) })
      : claim("lesson.experiments.lens.peak", { pred, block: int("exp-lens-peak-block", peak - 1, `exp-lens-prob-${peak}`),
        peak: pct("exp-lens-peak-prob", rows[peak].target_prob, `exp-lens-prob-${peak}`),
        prob: pct("exp-lens-final-prob", rows[last].target_prob, `exp-lens-prob-${last}`) }));
  }
  out.push(say("lesson.experiments.lens.caveat"));
  return out;
}

// -- word arithmetic ------------------------------------------------------------------------------------

/** Which of `words` (each with its leading space) are one token of the model's vocabulary, as the explorer takes
 *  them (it would refuse a word of several tokens with a 422): reader.ts's `lookUpAll`. Null when the server could
 *  not say of one of them (an offline snapshot, a failure). */
async function oneTokens(model: string, words: string[]): Promise<Map<string, boolean> | null> {
  await lookUpAll(words, model, true);
  const out = new Map<string, boolean>();
  for (const w of words) {
    const e = entry(w, model);
    if (e === undefined || e === "unknown") return null;
    out.set(w, e !== null);
  }
  return out;
}

/** The models whose vocabulary the server could not be asked about: the arithmetic step says so. */
const vocabUnknown = new SvelteSet<string>();

async function loadArithmetic(): Promise<void> {
  const model = app.trace?.model;
  if (!model || xp.arithmetic?.model === model) return;
  const sp = (w: string) => ` ${w}`;
  const one = await oneTokens(model, [...new Set(["king", "man", "woman", "queen", ...ANALOGIES.flatMap(([a, b, c]) => [a, b, c])])].map(sp));
  if (!one) {
    vocabUnknown.add(model);
    return;
  }
  vocabUnknown.delete(model);
  let famous: AnalogyOut | null = null;
  const split = ["king", "man", "woman"].filter((w) => !one.get(sp(w)));
  if (!split.length) {
    try {
      famous = await loadAnalogy(model, [" king", " woman"], [" man"]);
    } catch {
      famous = null; // the panel shows the error
    }
  }
  const queenIsToken = one.get(" queen") === true;
  let task: Arithmetic["task"] = null, tried = 0;
  for (const [a, b, c, d] of ANALOGIES) {
    tried++;
    if (![a, b, c].every((w) => one.get(sp(w)))) continue; // a word of several tokens here: the explorer takes one
    let r: AnalogyOut;
    try { r = await loadAnalogy(model, [sp(a), sp(c)], [sp(b)]); } catch { continue; }
    if (r.neighbours[0]?.token.trim() === d) { task = { a, b, c, d }; break; }
  }
  if (app.trace?.model === model) xp.arithmetic = { model, famous, split, queenIsToken, task, tried };
}

const currentArithmetic = () => (xp.arithmetic && xp.arithmetic.model === app.trace?.model ? xp.arithmetic : null);

function arithmeticText(): Text {
  if (app.trace && vocabUnknown.has(app.trace.model))
    return [say("lesson.experiments.arithmetic.what"), say("lesson.experiments.arithmetic.unavailable")];
  const A = currentArithmetic();
  if (!A) return [];
  const out: Text = [say("lesson.experiments.arithmetic.what")];
  const nb = A.famous?.neighbours;
  if (!nb?.length && !A.split.length) {
    out.push(say("lesson.experiments.arithmetic.unavailable"));
    out.push(say("lesson.experiments.arithmetic.mikolov"));
    return out;
  }
  if (!nb?.length) {
    out.push(claim("lesson.experiments.arithmetic.famousSplit", { words: word("exp-analogy-split", A.split.join(", ")) }));
    out.push(say("lesson.experiments.arithmetic.mikolov"));
    return out;
  }
  const best = token("exp-analogy-top", nb[0].token, nb[0].id, "exp-analogy-list");
  const sim = dec("exp-analogy-sim", nb[0].similarity, "exp-analogy-list");
  out.push(claim("lesson.experiments.arithmetic.famous", { best, sim }));
  if (nb.length >= 3) {
    out.push(either(nb[0].similarity - nb[1].similarity >= STANDS_OUT, "lesson.experiments.arithmetic.standsOut",
      "lesson.experiments.arithmetic.crowded", { margin: dec("exp-analogy-margin", STANDS_OUT),
      second: token("exp-analogy-second", nb[1].token, nb[1].id, "exp-analogy-list"),
      secondSim: dec("exp-analogy-second-sim", nb[1].similarity, "exp-analogy-list"),
      rank: int("exp-analogy-last-rank", nb.length),
      last: token("exp-analogy-last", nb[nb.length - 1].token, nb[nb.length - 1].id, "exp-analogy-list"),
      lastSim: dec("exp-analogy-last-sim", nb[nb.length - 1].similarity, "exp-analogy-list") }));
  }
  if (!A.queenIsToken) out.push(claim("lesson.experiments.arithmetic.queenSplit"));
  else out.push(either(nb[0].token.trim() === "queen", "lesson.experiments.arithmetic.queenFound",
    "lesson.experiments.arithmetic.queenNotNearest"));
  out.push(say("lesson.experiments.arithmetic.mikolov"));
  return out;
}

function arithmeticTask(): Text {
  if (app.trace && vocabUnknown.has(app.trace.model)) return [];
  const A = currentArithmetic();
  if (!A) return [];
  if (!A.task) return [claim("lesson.experiments.arithmetic.taskNone", { tried: int("exp-analogy-tried", A.tried) })];
  const { a, b, c, d } = A.task;
  return [claim("lesson.experiments.arithmetic.task", { a: word("exp-task-a", a), b: word("exp-task-b", b),
    c: word("exp-task-c", c), d: word("exp-task-d", d) })];
}

// -- the lesson ------------------------------------------------------------------------------------------

const steps: LessonStep[] = [
  {
    id: "importance",
    target: "exp-head-map",
    enter: async () => {
      await open("heads");
      xp.metric = "loss";
      xp.mode = "zero";
      await chooseText();
      const m = imp();
      if (m) await reveal(cell(...topHead(m)));
    },
    title: "lesson.experiments.importance.title",
    body: importanceText,
  },
  {
    id: "roles",
    target: "exp-head-map",
    enter: async () => {
      await open("heads");
      await chooseText();
      const inp = used();
      if (!inp) return;
      const H = await loadHeads(inp);
      const s = strongest(H);
      xp.source = H.reference ? "reference" : "text";
      xp.metric = (s?.role ?? "previous_token") as Metric;
      if (s) await reveal(cell(s.l, s.h));
    },
    title: "lesson.experiments.roles.title",
    body: rolesText,
  },
  {
    id: "ablation",
    target: "exp-ablation",
    controls: ["exp-mode"],
    enter: async () => {
      await open("heads");
      xp.metric = "loss";
      xp.mode = "zero";
      await chooseText();
      const inp = used(), h = ablationTarget();
      if (inp && h) {
        app.layer = h[0];
        app.head = h[1];
        if (!(ablationFor(inp) && xp.ablated?.[0] === h[0] && xp.ablated?.[1] === h[1] && xp.ablation?.mode === "zero")) {
          await ablateHead(inp, h[0], h[1]);
        }
        await reveal(cell(h[0], h[1]));
      }
    },
    title: "lesson.experiments.ablation.title",
    body: ablationText,
    task: () => (ablationTarget() ? [say("lesson.experiments.ablation.task")] : []),
    done: () => {
      const inp = used(), h = ablationTarget(), a = ablationFor(inp);
      return !!a && !!h && a.mode === "mean" && xp.ablated?.[0] === h[0] && xp.ablated?.[1] === h[1];
    },
  },
  {
    id: "pruning",
    target: "exp-prune",
    enter: async () => {
      await open("heads");
      xp.mode = "zero";
      await chooseText();
      const inp = used();
      if (inp) await loadPrune(inp, "zero");
    },
    title: "lesson.experiments.pruning.title",
    body: pruningText,
  },
  {
    id: "lens",
    target: "exp-lens-table",
    enter: async () => {
      await open("lens");
      xp.lessonPos = app.pos;
      const inp = learner();
      if (inp) await loadLens(inp, app.pos);
    },
    title: "lesson.experiments.lens.title",
    controls: ["exp-lens-move"],
    body: lensText,
    task: () => [say("lesson.experiments.lens.task")],
    done: () => xp.lessonPos >= 0 && app.pos !== xp.lessonPos,
  },
  {
    id: "arithmetic",
    target: "exp-analogy",
    controls: ["exp-analogy-form"],
    enter: async () => {
      await open("embed");
      await loadArithmetic();
    },
    title: "lesson.experiments.arithmetic.title",
    body: arithmeticText,
    task: arithmeticTask,
    done: () => {
      const a = xp.analogy, task = currentArithmetic()?.task;
      return !!a && !!task && a.positive.map((x) => x.token.trim()).join() === `${task.a},${task.c}`
        && a.negative.map((x) => x.token.trim()).join() === task.b;
    },
  },
];

export const experimentsLesson: Lesson = {
  id: "experiments",
  title: "lesson.experiments.title",
  steps,
};
