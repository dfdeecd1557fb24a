// What each claim of the Experiments lesson (src/lessons/experiments.ts) means, checked on numbers fetched here:
// losses from /api/analysis/ablate (a request of its own, not the importance map the lesson read), the pruning
// curve's points re-measured by switching the same heads off at once, the next-token distribution from the
// logits tensor, and the analyses asked again, for what only they answer (ranks in the lens, role scores).
import { api } from "../../src/lib/client";
import type { ImportanceOut } from "../../src/lib/generated/api";
import type { MessageKey } from "../../src/lib/i18n";
import type { Value } from "../../src/lib/lesson";
import {
  ANALOGIES, EXAMPLE_TEXT, PREDICTED, PRUNE_DIP, PRUNE_RISE, ROLE_THRESHOLD, ROLES, SMALL_CHANGE, STANDS_OUT,
} from "../../src/lessons/experiments";
import { analysis } from "../../src/pages/experiments/api";
import { headsInput, type XInput } from "../../src/pages/experiments/store.svelte";
import type { Check, ClaimContext } from "./claims";

const num = (v: Value | undefined) => Number(v?.raw);
const near = (shown: number, x: number, rel = 6e-3, abs = 1e-6) => Math.abs(shown - x) <= Math.max(abs, rel * Math.abs(x));
const lnV = (ctx: ClaimContext) => Math.log(ctx.trace.config.vocab_size);
const learner = (ctx: ClaimContext): XInput => ({ model: ctx.trace.model, ids: ctx.trace.token_ids });
const headOf = (v: Value) => String(v.raw).split(",").map(Number) as [number, number];

/** One answer per request for the whole run (the checks ask several times for the same map or curve); asked here,
 *  apart from the answers the lesson and its panels keep. */
const memo = new Map<string, Promise<unknown>>();
function once<T>(key: string, ask: () => Promise<T>): Promise<T> {
  if (!memo.has(key)) memo.set(key, ask());
  return memo.get(key) as Promise<T>;
}
const inputKey = (inp: XInput) => `${inp.model}|${inp.ids.join()}`;

/** The loss of `inp` with nothing switched off, measured by an ablation request (its `loss_before`). */
async function loss(inp: XInput | { model: string; text: string }): Promise<number> {
  const r = await once(`loss|${JSON.stringify(inp)}`, () => analysis.ablate({ ...inp, heads: [[0, 0]], mode: "zero", top: 1 }));
  if (r.loss_before == null) throw new Error("no loss for a one-token text");
  return r.loss_before;
}

/** The input the head experiments ran on: the example the panel shows, or the learner's text. */
function usedInput(ctx: ClaimContext): XInput {
  const inp = headsInput(learner(ctx)) ?? learner(ctx);
  return { model: inp.model, ids: inp.ids };
}

async function exampleIds(ctx: ClaimContext): Promise<number[]> {
  return (await once(`example|${ctx.trace.model}`,
    () => api.trace({ model: ctx.trace.model, text: EXAMPLE_TEXT, truncate: true, top_n: 1 }))).token_ids;
}

/** Every head's loss change (none for a layer without attention). */
const changes = (m: ImportanceOut): number[] => m.loss_change.flat().filter((v): v is number => v != null);

async function importance(ctx: ClaimContext): Promise<ImportanceOut> {
  const inp = usedInput(ctx);
  return once(`importance|${inputKey(inp)}`, () => analysis.importance({ model: inp.model, ids: inp.ids, mode: "zero" }));
}

/** The change of the loss when head (l, h) alone is switched off, measured directly. */
async function change(inp: XInput, l: number, h: number): Promise<number> {
  const r = await analysis.ablate({ model: inp.model, ids: inp.ids, heads: [[l, h]], mode: "zero", top: 1 });
  return r.loss_after! - r.loss_before!;
}

async function prune(ctx: ClaimContext) {
  const inp = usedInput(ctx);
  const P = await once(`prune|${inputKey(inp)}`,
    () => analysis.prune({ model: inp.model, ids: inp.ids, mode: "zero", max_heads: null, recompute: false }));
  /** The loss with the first `k` heads of the curve switched off together, measured by one ablation. */
  const offTogether = async (k: number) => (await analysis.ablate({ model: inp.model, ids: inp.ids,
    heads: P.steps.slice(0, k).map((s) => s.head as [number, number]), mode: "zero", top: 1 })).loss_after!;
  return { P, losses: P.steps.map((s) => s.loss ?? NaN), offTogether, clean: await loss(inp) };
}

async function lens(ctx: ClaimContext) {
  const L = await once(`lens|${ctx.focus.pos}|${inputKey(learner(ctx))}`,
    () => analysis.lens({ model: ctx.trace.model, ids: ctx.trace.token_ids, positions: [ctx.focus.pos], top: 5 }));
  return { L, rows: L.layers.map((l) => l.positions[0]) };
}

/** The next-token distribution at the focus position, from its logits. */
async function nextAt(ctx: ClaimContext): Promise<{ best: number; p: number }> {
  const z = (await ctx.tensor({ name: "logits", position: ctx.focus.pos })).data;
  let best = 0, m = -Infinity, s = 0;
  for (let i = 0; i < z.length; i++) if (z[i] > m) { m = z[i]; best = i; }
  for (let i = 0; i < z.length; i++) s += Math.exp(z[i] - m);
  return { best, p: 1 / s };
}

async function heads(ctx: ClaimContext) {
  const inp = usedInput(ctx);
  return once(`heads|${inputKey(inp)}`, () => analysis.heads({ model: inp.model, ids: inp.ids, reference: true }));
}

const famous = (ctx: ClaimContext) => once(`famous|${ctx.trace.model}`,
  () => analysis.analogy({ model: ctx.trace.model, positive: [" king", " woman"], negative: [" man"], n: 10 }));

async function isToken(ctx: ClaimContext, w: string): Promise<boolean> {
  try {
    await analysis.neighbours({ model: ctx.trace.model, token: w, n: 1 });
    return true;
  } catch {
    return false;
  }
}

export const CLAIMS: Partial<Record<MessageKey, Check>> = {
  "lesson.experiments.importance.own": async (v, ctx) => {
    const l = await loss(learner(ctx));
    if (usedInput(ctx).ids.join() !== ctx.trace.token_ids.join()) return "the map is not on the learner's text";
    return near(num(v.loss), l) && l <= PREDICTED * lnV(ctx) ? true : `the loss is ${l}, ln V ${lnV(ctx)}`;
  },
  "lesson.experiments.importance.example": async (v, ctx) => {
    const own = await loss(learner(ctx)), ex = await loss({ model: ctx.trace.model, text: EXAMPLE_TEXT });
    if (usedInput(ctx).ids.join() !== (await exampleIds(ctx)).join()) return "the map is not on the example";
    return near(num(v.loss), own) && near(num(v.exampleLoss), ex) && own > PREDICTED * lnV(ctx) && ex <= PREDICTED * lnV(ctx)
      ? true : `losses ${own} (own), ${ex} (example), ln V ${lnV(ctx)}`;
  },
  "lesson.experiments.importance.poor": async (v, ctx) => {
    const l = await loss(learner(ctx));
    return near(num(v.loss), l) && l > PREDICTED * lnV(ctx) ? true : `the loss is ${l}, ln V ${lnV(ctx)}`;
  },
  "lesson.experiments.importance.neither": async (v, ctx) => {
    const own = await loss(learner(ctx)), ex = await loss({ model: ctx.trace.model, text: EXAMPLE_TEXT });
    if (usedInput(ctx).ids.join() !== ctx.trace.token_ids.join()) return "the map is not on the learner's text";
    return near(num(v.loss), own) && near(num(v.exampleLoss), ex) && own > PREDICTED * lnV(ctx) && ex > PREDICTED * lnV(ctx)
      ? true : `losses ${own} (own), ${ex} (example), ln V ${lnV(ctx)}`;
  },
  "lesson.experiments.importance.single": async (v, ctx) => {
    const ex = await loss({ model: ctx.trace.model, text: EXAMPLE_TEXT });
    if (usedInput(ctx).ids.join() !== (await exampleIds(ctx)).join()) return "the map is not on the example";
    return ctx.trace.token_ids.length === 1 && near(num(v.exampleLoss), ex) ? true : `${ctx.trace.token_ids.length} tokens`;
  },
  "lesson.experiments.importance.exampleNoise": async (_v, ctx) => {
    const ex = await loss({ model: ctx.trace.model, text: EXAMPLE_TEXT });
    return ex > PREDICTED * lnV(ctx) ? true : `the example's loss is ${ex}, under half of ln V`;
  },
  "lesson.experiments.importance.top": async (v, ctx) => {
    const [l, h] = headOf(v.head), m = await importance(ctx), d = await change(usedInput(ctx), l, h);
    const max = Math.max(...changes(m));
    return d > 0 && near(num(v.change), d, 1e-2, 1e-4) && near(d, max, 1e-3, 1e-5) ? true
      : `switching L${l}H${h} off changes the loss by ${d}; the largest change is ${max}`;
  },
  "lesson.experiments.importance.noneHurts": async (v, ctx) => {
    const [l, h] = headOf(v.head), m = await importance(ctx), max = Math.max(...changes(m));
    return max <= 0 && near(m.loss_change[l][h] ?? NaN, max) && near(num(v.change), -max) ? true : `the largest change is ${max}`;
  },
  "lesson.experiments.importance.negative": async (v, ctx) => {
    const m = await importance(ctx), flat = changes(m), n = flat.filter((x) => x < 0).length;
    // one negative cell, measured directly
    const i = flat.findIndex((x) => x < 0), H = m.n_head;
    const d = i >= 0 ? await change(usedInput(ctx), Math.floor(i / H), i % H) : 0;
    return n > 0 && n === num(v.count) && num(v.total) === flat.length && d < 0 ? true : `${n} negative changes`;
  },
  "lesson.experiments.importance.noNegative": async (_v, ctx) => {
    const n = changes(await importance(ctx)).filter((x) => x < 0).length;
    return n === 0 ? true : `${n} negative changes`;
  },
  "lesson.experiments.importance.small": async (v, ctx) => {
    const flat = changes(await importance(ctx)), n = flat.filter((x) => Math.abs(x) < SMALL_CHANGE).length;
    return n === num(v.count) && num(v.threshold) === SMALL_CHANGE ? true : `${n} heads change it by less than ${SMALL_CHANGE}`;
  },
  "lesson.experiments.roles.reference": async (_v, ctx) => ((await heads(ctx)).reference ? true : "no reference scores"),
  "lesson.experiments.roles.textOnly": async (_v, ctx) => (!(await heads(ctx)).reference ? true : "there are reference scores"),
  "lesson.experiments.roles.strongest": async (v, ctx) => {
    const H = await heads(ctx), src = H.reference ?? H.text, [l, h] = headOf(v.head);
    let max = -Infinity, at = "";
    for (const r of ROLES) src.scores[r]?.forEach((row, i) => row.forEach((x, j) => { if (x != null && x > max) { max = x; at = `${r} L${i}H${j}`; } }));
    const mine = src.scores[String(v.role.raw)]?.[l]?.[h];
    return mine != null && near(mine, max, 1e-6) && near(num(v.score), mine) ? true : `the highest score is ${max} (${at})`;
  },
  "lesson.experiments.roles.named": async (v, ctx) => {
    const H = await heads(ctx), src = H.reference ?? H.text;
    let n = 0;
    for (let l = 0; l < H.n_layer; l++) for (let h = 0; h < H.n_head; h++) {
      if (ROLES.some((r) => (src.scores[r]?.[l]?.[h] ?? -1) >= ROLE_THRESHOLD)) n++;
    }
    const total = changes(await importance(ctx)).length; // the heads there are (none in a layer without attention)
    return n > 0 && n === num(v.count) && num(v.total) === total ? true : `${n} of ${total} heads reach ${ROLE_THRESHOLD}`;
  },
  "lesson.experiments.roles.noneNamed": async (_v, ctx) => {
    const H = await heads(ctx), src = H.reference ?? H.text;
    const best = Math.max(...ROLES.flatMap((r) => (src.scores[r] ?? []).flat().filter((x): x is number => x != null)));
    return best < ROLE_THRESHOLD ? true : `a head scores ${best}`;
  },
  "lesson.experiments.ablation.rises": async (v, ctx) => {
    const [l, h] = headOf(v.head), inp = usedInput(ctx);
    const r = await analysis.ablate({ model: inp.model, ids: inp.ids, heads: [[l, h]], mode: String(v.modeName.raw) as "zero", top: 10 });
    return r.loss_after! > r.loss_before! && near(num(v.before), r.loss_before!) && near(num(v.after), r.loss_after!)
      ? true : `${r.loss_before} → ${r.loss_after}`;
  },
  "lesson.experiments.ablation.falls": async (v, ctx) => {
    const [l, h] = headOf(v.head), inp = usedInput(ctx);
    const r = await analysis.ablate({ model: inp.model, ids: inp.ids, heads: [[l, h]], mode: String(v.modeName.raw) as "zero", top: 10 });
    return r.loss_after! <= r.loss_before! && near(num(v.before), r.loss_before!) && near(num(v.after), r.loss_after!)
      ? true : `${r.loss_before} → ${r.loss_after}`;
  },
  "lesson.experiments.ablation.topGuess": async (v, ctx) => {
    const [l, h] = headOf(v.head), inp = usedInput(ctx);
    const r = await analysis.ablate({ model: inp.model, ids: inp.ids, heads: [[l, h]], mode: String(v.modeName.raw) as "zero", top: 10 });
    const top = r.before[0], after = r.changes.find((x) => x.id === top.id)?.after;
    return top.id === num(v.token) && after !== undefined && near(num(v.before), top.prob) && near(num(v.after), after)
      ? true : `the top guess is ${top.token} at ${top.prob}, then ${after}`;
  },
  "lesson.experiments.ablation.onExample": async (_v, ctx) => (usedInput(ctx).ids.join() === (await exampleIds(ctx)).join()
    ? true : "the ablation is not on the example"),
  "lesson.experiments.ablation.onOwn": async (_v, ctx) => (usedInput(ctx).ids.join() === ctx.trace.token_ids.join()
    ? true : "the ablation is not on the learner's text"),
  "lesson.experiments.pruning.knee": async (v, ctx) => {
    const { losses, offTogether, clean } = await prune(ctx), k = num(v.safe);
    const first = losses.findIndex((x) => x > clean * (1 + PRUNE_RISE));
    const measured = await offTogether(k + 1);
    return first === k && near(num(v.next), measured, 6e-3, 1e-4) && near(num(v.clean), clean) && num(v.rise) === PRUNE_RISE * 100
      ? true : `the loss first rises ${PRUNE_RISE * 100}% after ${first} heads; ${k + 1} heads off together give ${measured}`;
  },
  "lesson.experiments.pruning.noKnee": async (v, ctx) => {
    const { losses, offTogether, clean } = await prune(ctx), all = await offTogether(losses.length);
    return losses.every((x) => x <= clean * (1 + PRUNE_RISE)) && near(num(v.end), all, 6e-3, 1e-4) ? true
      : `the curve rises above ${clean * (1 + PRUNE_RISE)}`;
  },
  "lesson.experiments.pruning.dips": async (v, ctx) => {
    const { losses, offTogether, clean } = await prune(ctx), k = num(v.off), low = Math.min(...losses);
    const measured = await offTogether(k);
    return low < clean * (1 - PRUNE_DIP) && near(losses[k - 1], low) && near(num(v.low), measured, 6e-3, 1e-4) ? true
      : `the lowest loss is ${low} (clean ${clean}); ${k} heads off together give ${measured}`;
  },
  "lesson.experiments.pruning.noDip": async (_v, ctx) => {
    const { losses, clean } = await prune(ctx);
    return losses.every((x) => x >= clean * (1 - PRUNE_DIP)) ? true : `the curve falls to ${Math.min(...losses)} below ${clean}`;
  },
  "lesson.experiments.pruning.allOffPredicts": async (v, ctx) => {
    const { losses, offTogether } = await prune(ctx), all = await offTogether(losses.length);
    return all <= PREDICTED * lnV(ctx) && near(num(v.end), all, 6e-3, 1e-4) ? true : `all off: ${all}, ln V ${lnV(ctx)}`;
  },
  "lesson.experiments.pruning.allOffLittle": async (v, ctx) => {
    const { losses, offTogether } = await prune(ctx), all = await offTogether(losses.length);
    return all > PREDICTED * lnV(ctx) && all < lnV(ctx) && near(num(v.end), all, 6e-3, 1e-4) ? true : `all off: ${all}, ln V ${lnV(ctx)}`;
  },
  "lesson.experiments.pruning.allOffChance": async (v, ctx) => {
    const { losses, offTogether } = await prune(ctx), all = await offTogether(losses.length);
    return all >= lnV(ctx) && near(num(v.end), all, 6e-3, 1e-4) ? true : `all off: ${all}, ln V ${lnV(ctx)}`;
  },
  "lesson.experiments.lens.final": async (v, ctx) => {
    const { best, p } = await nextAt(ctx);
    return best === num(v.pred) && near(num(v.prob), p, 6e-3, 1e-6) && num(v.token) === ctx.trace.token_ids[ctx.focus.pos]
      ? true : `the model's top next token is ${best} at ${p}`;
  },
  "lesson.experiments.lens.selfTied": async (v, ctx) => {
    const { rows } = await lens(ctx), c = (await api.model(ctx.trace.model)).config;
    return c?.tie_word_embeddings && rows[0].top[0].id === ctx.trace.token_ids[ctx.focus.pos] && rows[0].top[0].id === num(v.top)
      && near(num(v.prob), rows[0].top[0].prob) ? true : `tied ${c?.tie_word_embeddings}, row 0's top is ${rows[0].top[0].id}`;
  },
  "lesson.experiments.lens.row0": async (v, ctx) => {
    const { rows } = await lens(ctx);
    return rows[0].top[0].id === num(v.top) && near(num(v.prob), rows[0].top[0].prob) ? true : `row 0's top is ${rows[0].top[0].token}`;
  },
  "lesson.experiments.lens.rank0": async (v, ctx) => {
    const { rows, L } = await lens(ctx);
    return L.targets[0].id === num(v.pred) && rows[0].target_rank === num(v.rank) ? true : `rank ${rows[0].target_rank}`;
  },
  "lesson.experiments.lens.firstFromStart": async (_v, ctx) => {
    const { rows } = await lens(ctx);
    return rows.every((r) => r.target_rank === 1) ? true : "not first in every row";
  },
  "lesson.experiments.lens.firstAtEnd": async (_v, ctx) => {
    const { rows } = await lens(ctx), last = rows.length - 1;
    return rows[last].target_rank === 1 && rows[last - 1].target_rank !== 1 ? true : "first before the last row";
  },
  "lesson.experiments.lens.firstFrom": async (v, ctx) => {
    const { rows } = await lens(ctx), from = num(v.block) + 1;
    return rows.slice(from).every((r) => r.target_rank === 1) && rows[from - 1].target_rank !== 1 ? true
      : `ranks ${rows.map((r) => r.target_rank)}`;
  },
  "lesson.experiments.lens.peak": async (v, ctx) => {
    const { rows } = await lens(ctx), k = num(v.block) + 1, max = Math.max(...rows.map((r) => r.target_prob));
    return near(rows[k].target_prob, max, 1e-9) && k < rows.length - 1 && near(num(v.peak), max) && max > rows[rows.length - 1].target_prob
      ? true : `the highest probability is ${max}`;
  },
  "lesson.experiments.lens.peakEmbeddings": async (v, ctx) => {
    const { rows } = await lens(ctx), max = Math.max(...rows.map((r) => r.target_prob));
    return near(rows[0].target_prob, max, 1e-9) && near(num(v.peak), max) && max > rows[rows.length - 1].target_prob
      ? true : `the highest probability is ${max}`;
  },
  "lesson.experiments.arithmetic.famous": async (v, ctx) => {
    const r = await famous(ctx);
    const ids = new Set([...r.positive, ...r.negative].map((t) => t.id));
    return r.neighbours[0].id === num(v.best) && near(num(v.sim), r.neighbours[0].similarity) && !ids.has(num(v.best))
      ? true : `the nearest is ${r.neighbours[0].token}`;
  },
  "lesson.experiments.arithmetic.standsOut": async (v, ctx) => {
    const nb = (await famous(ctx)).neighbours, gap = nb[0].similarity - nb[1].similarity;
    return gap >= STANDS_OUT && num(v.margin) === STANDS_OUT && num(v.second) === nb[1].id ? true : `the lead is ${gap}`;
  },
  "lesson.experiments.arithmetic.crowded": async (v, ctx) => {
    const nb = (await famous(ctx)).neighbours, gap = nb[0].similarity - nb[1].similarity;
    return gap < STANDS_OUT && num(v.margin) === STANDS_OUT && num(v.last) === nb[nb.length - 1].id
      && num(v.second) === nb[1].id && near(num(v.lastSim), nb[nb.length - 1].similarity) ? true : `the lead is ${gap}`;
  },
  "lesson.experiments.arithmetic.famousSplit": async (v, ctx) => {
    const split = [];
    for (const w of ["king", "man", "woman"]) if (!(await isToken(ctx, ` ${w}`))) split.push(w);
    return split.length > 0 && split.join(", ") === v.words.raw ? true : `the words not one token: ${split}`;
  },
  "lesson.experiments.arithmetic.queenSplit": async (_v, ctx) => (!(await isToken(ctx, " queen")) ? true : "“ queen” is one token"),
  "lesson.experiments.arithmetic.queenFound": async (_v, ctx) => ((await famous(ctx)).neighbours[0].token.trim() === "queen"
    ? true : "the nearest is not queen"),
  "lesson.experiments.arithmetic.queenNotNearest": async (_v, ctx) => ((await isToken(ctx, " queen"))
    && (await famous(ctx)).neighbours[0].token.trim() !== "queen" ? true : "queen is the nearest, or no token"),
  "lesson.experiments.arithmetic.task": async (v, ctx) => {
    const r = await analysis.analogy({ model: ctx.trace.model, positive: [` ${v.a.raw}`, ` ${v.c.raw}`], negative: [` ${v.b.raw}`], n: 1 });
    return r.neighbours[0].token.trim() === v.d.raw ? true : `it gives ${r.neighbours[0].token}`;
  },
  "lesson.experiments.arithmetic.taskNone": async (v, ctx) => {
    for (const [a, b, c, d] of ANALOGIES) {
      try {
        const r = await analysis.analogy({ model: ctx.trace.model, positive: [` ${a}`, ` ${c}`], negative: [` ${b}`], n: 1 });
        if (r.neighbours[0].token.trim() === d) return `${a} − ${b} + ${c} gives ${d}`;
      } catch { /* a word of several tokens on this model */ }
    }
    return num(v.tried) === ANALOGIES.length ? true : `tried ${v.tried.v} of ${ANALOGIES.length}`;
  },
};
