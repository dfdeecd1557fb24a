// What each claim of the induction lesson (src/lessons/induction.ts) means, checked on the run's records as its
// log files hold them (ctx.induction, read by the test), not on the page's state the lesson read: a milestone is
// found again here by scanning back from the last record, a score is the records' own, a weight on the example is
// summed again from its attention map.
import type { InductionRecord } from "../../src/lib/generated/api";
import type { MessageKey } from "../../src/lib/i18n";
import type { Value } from "../../src/lib/lesson";
import { score } from "../../src/pages/learn/state.svelte";
import type { Check, ClaimContext, InductionClaimContext } from "./claims";

type V = Record<string, Value>;
type Facts = [boolean, string][];

function runOf(ctx: ClaimContext): InductionClaimContext {
  if (!ctx.induction) throw new Error("an induction claim checked without the run's records");
  return ctx.induction;
}

const num = (v: Value | undefined) => Number(v?.raw);
/** The same number up to float noise (the values are the records' own). */
const same = (a: number, b: number) => Math.abs(a - b) <= 1e-9 + 1e-9 * Math.abs(b);
/** Head scores written as the page writes them beside each head (HeadScores), and, where the sentence says a score is
 *  under the 0.5 bar, reading so: the learner compares the two. */
const asPage = (v: V, ...names: string[]): Facts => names.map((n) =>
  [v[n]?.v === score(num(v[n])), `{${n}} is written "${v[n]?.v}" where the page writes ${score(num(v[n]))}`]);
const readsUnder = (v: V, ...names: string[]): Facts => names.map((n) => {
  const shown = String(v[n]?.v ?? "");
  const under = shown.startsWith("<") ? Number(shown.slice(1)) <= 0.5 : Number(shown) < 0.5;
  return [under, `{${n}} reads "${shown}", not under 0.5, where the sentence says it is`];
});
const all = (...facts: Facts): true | string => {
  const bad = facts.filter(([ok]) => !ok).map(([, why]) => why);
  return bad.length ? bad.join("; ") : true;
};

/** The largest entry of a (layer, head) table and where. */
function top(m: number[][]): { l: number; h: number; v: number } {
  const flat = m.flatMap((row, l) => row.map((v, h) => ({ l, h, v })));
  return flat.reduce((a, b) => (b.v > a.v ? b : a));
}
/** The first record of the run of records at the end for which `test` holds (scanning back), or null. */
function tail(recs: InductionRecord[], test: (r: InductionRecord) => boolean): InductionRecord | null {
  let i = recs.length;
  while (i > 0 && test(recs[i - 1])) i--;
  return i < recs.length ? recs[i] : null;
}
const BAR = 0.5;
const ptFor = (recs: InductionRecord[]) => tail(recs, (r) => top(r.previous_token).v >= BAR);
const indFor = (recs: InductionRecord[]) => tail(recs, (r) => top(r.induction).v >= BAR);
const fallFor = (recs: InductionRecord[]) => tail(recs, (r) => r.repeat_loss * 2 < r.first_loss);
const byStep = (recs: InductionRecord[], step: number) => recs.find((r) => r.step === step);
const lastOf = (recs: InductionRecord[]) => recs[recs.length - 1];

/** The facts of a head the sentence names by `p`l and `p`h. */
const named = (v: V, p: string, b: { l: number; h: number }, what: string): [boolean, string] =>
  [num(v[`${p}l`]) === b.l && num(v[`${p}h`]) === b.h, `the ${what} is layer ${b.l}, head ${b.h}`];

/** Both losses of a record within `tol` of ln V. */
const even = (r: InductionRecord, vocab: number, tol: number) =>
  Math.abs(r.first_loss - Math.log(vocab)) <= tol && Math.abs(r.repeat_loss - Math.log(vocab)) <= tol;

function plateauFacts(v: V, c: InductionClaimContext, atEnd: boolean): Facts {
  const tol = num(v.tol), a = num(v.a), b = num(v.b);
  const inside = c.main.filter((r) => r.step >= a && r.step <= b);
  const before = c.main.filter((r) => r.step < a);
  const after = c.main.find((r) => r.step > b);
  // the first such stretch: no two records in a row before it are both near the even guess
  const earlier = before.some((r, i) => i + 1 < before.length && even(r, c.config.vocab, tol) && even(before[i + 1], c.config.vocab, tol));
  return [
    [same(tol, 0.05), `the tolerance quoted is ${tol}`],
    [inside.length >= 2 && inside.every((r) => even(r, c.config.vocab, tol)),
      `not every record from step ${a} to ${b} has both losses within ${tol} of ln ${c.config.vocab}`],
    [!earlier && !(before.length && even(before[before.length - 1], c.config.vocab, tol)),
      "an earlier stretch was near the even guess, or the record before it was"],
    [atEnd ? !after : !!after && !even(after, c.config.vocab, tol),
      atEnd ? `records after step ${b} exist` : `the record after step ${b} is still near the even guess, or there is none`],
  ];
}

function fallFacts(v: V, c: InductionClaimContext): Facts {
  const last = lastOf(c.main);
  return [
    [num(v.last) === last.step, `the last record is at step ${last.step}`],
    [same(num(v.r2), last.repeat_loss) && same(num(v.f2), last.first_loss),
      `at the last record the losses are ${last.repeat_loss} (repeat) and ${last.first_loss} (first)`],
  ];
}

/** The facts of the induction crossing a heads sentence quotes (its step, its head, the best previous-token head). */
function indFacts(v: V, c: InductionClaimContext): { facts: Facts; at: InductionRecord | null } {
  const at = indFor(c.main);
  if (!at) return { facts: [[false, "no induction score passed 0.5 for good"]], at };
  return {
    at,
    facts: [
      [num(v.ind) === at.step, `an induction score passed 0.5 for good at step ${at.step}`],
      named(v, "i", top(at.induction), "best induction head there"),
    ],
  };
}

const CLAIMS: Partial<Record<MessageKey, Check>> = {
  "lesson.induction.plateau.sat": (v, ctx) => all(...plateauFacts(v, runOf(ctx), false)),
  "lesson.induction.plateau.still": (v, ctx) => all(...plateauFacts(v, runOf(ctx), true)),
  "lesson.induction.plateau.never": (v, ctx) => {
    const c = runOf(ctx), tol = num(v.tol);
    const pair = c.main.some((r, i) => i + 1 < c.main.length && even(r, c.config.vocab, tol) && even(c.main[i + 1], c.config.vocab, tol));
    return all([!pair, "two records in a row are near the even guess"], [num(v.V) === c.config.vocab, "another vocabulary"]);
  },
  "lesson.induction.plateau.fell": (v, ctx) => {
    const c = runOf(ctx), f = fallFor(c.main);
    return all(
      [!!f && num(v.s) === f.step, `the repeat loss stays below half from step ${f?.step ?? "none"}`],
      [!!f && same(num(v.r), f.repeat_loss) && same(num(v.f), f.first_loss), "the losses quoted are not that step's"],
      ...fallFacts(v, c));
  },
  "lesson.induction.plateau.notYet": (v, ctx) => {
    const c = runOf(ctx), last = lastOf(c.main);
    return all([last.repeat_loss >= 0.5 * last.first_loss, "the last record's repeat loss is below half"], ...fallFacts(v, c));
  },
  "lesson.induction.heads.start": (v, ctx) => {
    const first = runOf(ctx).main[0];
    return all([num(v.s0) === first.step, `the first record is step ${first.step}`],
      [same(num(v.pt0), top(first.previous_token).v) && same(num(v.ind0), top(first.induction).v), "not the first record's best scores"],
      ...asPage(v, "pt0", "ind0"));
  },
  "lesson.induction.heads.ptFirst": (v, ctx) => {
    const c = runOf(ctx), pt = ptFor(c.main), { facts, at } = indFacts(v, c);
    return all(...facts, [!!pt && !!at && pt.step < at.step && num(v.pt) === pt.step,
      `a previous-token score passed 0.5 for good at step ${pt?.step ?? "none"}, not before the induction score`],
    ...(pt ? [named(v, "p", top(pt.previous_token), "best previous-token head there")] : []));
  },
  "lesson.induction.heads.indFirst": (v, ctx) => {
    const c = runOf(ctx), pt = ptFor(c.main), { facts, at } = indFacts(v, c);
    return all(...facts, [!!pt && !!at && pt.step > at.step && num(v.pt) === pt.step,
      `a previous-token score passed 0.5 for good at step ${pt?.step ?? "none"}, not after the induction score`],
    ...(at ? [named(v, "p", top(at.previous_token), "best previous-token head at that step"),
      [same(num(v.ptAt), top(at.previous_token).v) && top(at.previous_token).v < BAR, "the previous-token score quoted is not under 0.5 there"] as [boolean, string]] : []),
    ...asPage(v, "ptAt"), ...readsUnder(v, "ptAt"));
  },
  "lesson.induction.heads.indOnly": (v, ctx) => {
    const c = runOf(ctx), last = lastOf(c.main), { facts, at } = indFacts(v, c);
    return all(...facts, [!ptFor(c.main), "a previous-token score passed 0.5 for good"],
      [num(v.last) === last.step && same(num(v.ptMax), top(last.previous_token).v), "not the last record's best previous-token score"],
      ...(at ? [named(v, "p", top(at.previous_token), "best previous-token head at that step"),
        [same(num(v.ptAt), top(at.previous_token).v) && top(at.previous_token).v < BAR, "the previous-token score quoted is not under 0.5 there"] as [boolean, string]] : []),
      ...asPage(v, "ptAt", "ptMax"), ...readsUnder(v, "ptAt", "ptMax"));
  },
  "lesson.induction.heads.both": (v, ctx) => {
    const c = runOf(ctx), { facts, at } = indFacts(v, c);
    return all(...facts, ...(at ? [named(v, "p", top(at.previous_token), "best previous-token head at that step"),
      [same(num(v.ptAt), top(at.previous_token).v) && top(at.previous_token).v >= BAR, "the previous-token score there is under 0.5"] as [boolean, string]] : []),
      ...asPage(v, "ptAt"));
  },
  "lesson.induction.heads.partial": (v, ctx) => {
    const c = runOf(ctx), at = indFor(c.main);
    if (!at) return "no induction head formed";
    const part = at.previous_token[0].filter((x) => x >= 0.2);
    return all([c.config.layers === 2 && top(at.induction).l === 1, "not an induction head of layer 1 of two"],
      [part.length >= 2 && num(v.n) === part.length, `${part.length} heads of layer 0 give the previous symbol at least 0.2`],
      [same(num(v.lo), Math.min(...part)) && same(num(v.hi), Math.max(...part)), "not their least and largest scores"],
      [top(at.previous_token).v < BAR, "a previous-token head had formed: the pattern was not partial"],
      ...asPage(v, "lo", "hi"), ...readsUnder(v, "hi"));
  },
  "lesson.induction.heads.partialOne": (v, ctx) => {
    const c = runOf(ctx), at = indFor(c.main);
    if (!at) return "no induction head formed";
    const part = at.previous_token[0].map((x, h) => ({ x, h })).filter((p) => p.x >= 0.2);
    return all([c.config.layers === 2 && top(at.induction).l === 1, "not an induction head of layer 1 of two"],
      [part.length === 1 && num(v.h) === part[0].h && same(num(v.w), part[0].x), "not the one head of layer 0 at 0.2 or more"],
      [top(at.previous_token).v < BAR, "a previous-token head had formed: the pattern was not partial"],
      ...asPage(v, "w"), ...readsUnder(v, "w"));
  },
  "lesson.induction.heads.sameStep": (v, ctx) => {
    const c = runOf(ctx), pt = ptFor(c.main), ind = indFor(c.main);
    const i = ind ? c.main.indexOf(ind) : -1;
    return all([!!pt && !!ind && pt.step === ind.step && num(v.s) === ind.step, "the two scores did not pass 0.5 at one record"],
      [num(v.every) === c.config.record_every, `records every ${c.config.record_every} steps`],
      [i > 0 && c.main[i].step - c.main[i - 1].step > 1, "the records around it are one step apart: the order is known"]);
  },
  "lesson.induction.heads.ptOnly": (v, ctx) => {
    const c = runOf(ctx), pt = ptFor(c.main), last = lastOf(c.main);
    return all([!!pt && num(v.pt) === pt.step, `a previous-token score passed 0.5 for good at ${pt?.step ?? "no step"}`],
      ...(pt ? [named(v, "p", top(pt.previous_token), "best previous-token head there")] : []),
      [!indFor(c.main), "an induction score passed 0.5 for good"],
      [num(v.last) === last.step && same(num(v.indMax), top(last.induction).v), "not the last record's best induction score"],
      ...asPage(v, "indMax"), ...readsUnder(v, "indMax"));
  },
  "lesson.induction.heads.none": (v, ctx) => {
    const c = runOf(ctx), last = lastOf(c.main);
    return all([!ptFor(c.main) && !indFor(c.main), "a score passed 0.5 for good"],
      [num(v.last) === last.step && same(num(v.ptMax), top(last.previous_token).v) && same(num(v.indMax), top(last.induction).v),
        "not the last record's best scores"], ...asPage(v, "ptMax", "indMax"), ...readsUnder(v, "ptMax", "indMax"));
  },
};

/** The example's repeat: queries r + j read the key after the first occurrence, s + j + 1. */
function stripe(c: InductionClaimContext, m: number[][]): number {
  const s = c.example.prefix, L = c.example.segment, r = s + L;
  const ws = Array.from({ length: L - 1 }, (_, j) => m[r + j][s + j + 1]);
  return ws.reduce((a, b) => a + b, 0) / ws.length;
}
function mapFacts(v: V, c: InductionClaimContext, strong: boolean): true | string {
  const shown = c.main[c.at], last = lastOf(c.main), head = top(last.induction);
  const w = stripe(c, shown.example_attention[head.l][head.h]);
  const s = c.example.prefix, L = c.example.segment;
  return all([num(v.s) === shown.step, `the page showed step ${shown.step}`], [num(v.last) === last.step, "not the last step"],
    named(v, "i", head, "best induction head at the last record"),
    [same(num(v.w), w) && (strong ? w >= BAR : w < BAR), `the stripe's mean weight is ${w}`],
    // the key after the first occurrence of query r + j is s + j + 1: (r + j) - (s + j + 1) places left
    [num(v.off) === s + L - (s + 1), `the stripe is ${L - 1} places left of the diagonal`]);
}
function rowFacts(v: V, c: InductionClaimContext, strong: boolean): true | string {
  const shown = c.main[c.at], head = top(lastOf(c.main).induction);
  const s = c.example.prefix, r = s + c.example.segment, tok = c.example.tokens;
  const row = shown.example_attention[head.l][head.h][r];
  const w = row[s + 1];
  return all(
    [tok[r] === tok[s] && v.a.raw === tok[r], `${String(v.a.raw)} is not the repeat's first symbol`],
    [v.b.raw === tok[s + 1] && tok[r + 1] === tok[s + 1], `${String(v.b.raw)} is not what followed it, or not the next to predict`],
    [same(num(v.w), w), `the weight on it is ${w}`],
    // "less than half" / at least half (and so the row's largest)
    [strong ? w >= BAR && row.every((x, j) => j === s + 1 || x < w) : w < BAR, `the weight on it is ${w}`]);
}
function prevFacts(v: V, c: InductionClaimContext, strong: boolean): true | string {
  const shown = c.main[c.at], last = lastOf(c.main), head = top(last.previous_token);
  const m = shown.example_attention[head.l][head.h];
  const w = m.slice(1).reduce((a, row, i) => a + row[i], 0) / (m.length - 1);
  return all(named(v, "p", head, "best previous-token head at the last record"), [num(v.last) === last.step, "not the last step"],
    [same(num(v.w), w) && (strong ? w >= BAR : w < BAR), `the weight on the previous symbol is ${w}`]);
}

function controlFacts(v: V, c: InductionClaimContext, never: boolean): true | string {
  const ctl = c.control, last = lastOf(ctl);
  const best = ctl.map((r) => ({ r, v: top(r.induction).v })).reduce((a, b) => (b.v > a.v ? b : a));
  const formed = ctl.some((r) => top(r.induction).v >= BAR) || !!fallFor(ctl);
  return all([never ? !formed : formed || best.v >= BAR, never ? "the control formed one" : "the control never formed one"],
    [num(v.last) === last.step && num(v.s) === best.r.step && same(num(v.ind), best.v), "not the control's best induction score"],
    [same(num(v.r), last.repeat_loss) && same(num(v.f), last.first_loss), "not the control's last losses"],
    [ctl.every((r) => r.induction.length === 1), "the control has more than one layer"],
    ...asPage(v, "ind"), ...(never ? readsUnder(v, "ind") : []));
}

function iclFacts(v: V, c: InductionClaimContext, fell: boolean): true | string {
  const first = c.main[0], last = lastOf(c.main);
  const b = last.repeat_loss - last.first_loss;
  return all([num(v.s0) === first.step && same(num(v.a), first.icl_score), "not the first record's score"],
    [num(v.last) === last.step && same(num(v.b), last.icl_score), "not the last record's score"],
    [Math.abs(b - last.icl_score) < 1e-4, "the score is not the repeat loss minus the first-occurrence loss"],
    [fell ? b <= -0.1 && same(num(v.d), -last.icl_score) : b > -num(v.min), `the last score is ${b}`]);
}

Object.assign(CLAIMS, {
  "lesson.induction.maps.stripe": (v, ctx) => mapFacts(v, runOf(ctx), true),
  "lesson.induction.maps.noStripe": (v, ctx) => mapFacts(v, runOf(ctx), false),
  "lesson.induction.maps.row": (v, ctx) => rowFacts(v, runOf(ctx), true),
  "lesson.induction.maps.rowNot": (v, ctx) => rowFacts(v, runOf(ctx), false),
  "lesson.induction.maps.prev": (v, ctx) => prevFacts(v, runOf(ctx), true),
  "lesson.induction.maps.prevPart": (v, ctx) => prevFacts(v, runOf(ctx), false),
  "lesson.induction.two.controlNever": (v, ctx) => controlFacts(v, runOf(ctx), true),
  "lesson.induction.two.controlSome": (v, ctx) => controlFacts(v, runOf(ctx), false),
  "lesson.induction.two.controlLater": (_v, ctx) => {
    const c = runOf(ctx);
    return all([c.config.control && !c.control.length, "the control has records, or the run trains none"]);
  },
  "lesson.induction.two.noControl": (_v, ctx) => all([!runOf(ctx).config.control, "the run trains a control"]),
  "lesson.induction.icl.fell": (v, ctx) => iclFacts(v, runOf(ctx), true),
  "lesson.induction.icl.not": (v, ctx) => iclFacts(v, runOf(ctx), false),
} satisfies Partial<Record<MessageKey, Check>>);

export { CLAIMS };
