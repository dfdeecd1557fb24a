// What each claim of the lesson "What the model represents" (src/lessons/features.ts) means, checked on numbers
// fetched here: the MLP's hidden layer of the trace again from the server (ctx.tensor), the autoencoders the model
// ships, the text's features, the feature's page and the steering asked for again through the plain JSON API (not the
// page's cached answers), and what the sentences compute (the loudest neuron, where a feature fires, the error's mean)
// recomputed here from those answers. Each check returns true, or what the numbers show.
import { call } from "../../src/lib/client";
import type { FeatureHookOut, FeatureHooksOut, FeaturePageOut, FeaturesOut, SteerOut } from "../../src/lib/generated/api";
import type { MessageKey } from "../../src/lib/i18n";
import type { Value } from "../../src/lib/lesson";
import { visible } from "../../src/lib/format";
import { CONTEXT, QUOTE, STEER_TIMES } from "../../src/lessons/features";
import type { Check, ClaimContext } from "./claims";

type V = Record<string, Value>;

const num = (v: Value | undefined): number => (v ? Number(v.raw) : NaN);
function same(v: Value | undefined, x: number, what: string, tol = 1e-4): true | string {
  const q = num(v);
  return Math.abs(q - x) <= tol * Math.max(1, Math.abs(x)) ? true : `${what}: the text quotes ${v?.v} (${q}), the numbers say ${x}`;
}
function all(...checks: (true | string)[]): true | string {
  return checks.find((c) => c !== true) ?? true;
}
const fail = (cond: boolean, why: string): true | string => (cond ? true : why);

const memo = new Map<string, Promise<unknown>>();
function once<T>(key: string, make: () => Promise<T>): Promise<T> {
  if (!memo.has(key)) memo.set(key, make());
  return memo.get(key) as Promise<T>;
}

const hookOf = async (ctx: ClaimContext, v: V): Promise<FeatureHookOut> => {
  const m = ctx.trace.model;
  const hs = await once(`hooks|${m}`, () => call<FeatureHooksOut>(`features/hooks?model=${encodeURIComponent(m)}`));
  const h = hs.hooks.find((x) => x.hook === String(v.hook?.raw));
  if (!h) throw new Error(`${m} ships no autoencoder at ${v.hook?.raw}`);
  return h;
};
/** The text's features at the sentence's hook, every active one (top = k, or all for an autoencoder without k). */
async function feats(ctx: ClaimContext, v: V): Promise<FeaturesOut> {
  const h = await hookOf(ctx, v);
  const ids = ctx.trace.token_ids;
  return once(`f|${ctx.trace.model}|${h.hook}|${ids.join()}`, () =>
    call<FeaturesOut>("features", { model: ctx.trace.model, ids, hook: h.hook, top: h.k ?? h.d_sae }));
}
const pageOf = (ctx: ClaimContext, hook: string, id: number) => once(`p|${ctx.trace.model}|${hook}|${id}`, () =>
  call<FeaturePageOut>(`features/${encodeURIComponent(hook)}/${id}?model=${encodeURIComponent(ctx.trace.model)}`));

/** Each feature of the text: on how many tokens it is active, its largest activation and where (first place). */
function perFeature(o: FeaturesOut): Map<number, { tokens: number; max: number; at: number }> {
  const by = new Map<number, { tokens: number; max: number; at: number }>();
  for (const p of o.positions) for (const f of p.features) {
    const c = by.get(f.id);
    if (!c) by.set(f.id, { tokens: 1, max: f.activation, at: p.position });
    else { c.tokens++; if (f.activation > c.max) { c.max = f.activation; c.at = p.position; } }
  }
  return by;
}
/** The text's most active feature (among those for which `keep` holds). */
function mostActive(o: FeaturesOut, keep: (tokens: number) => boolean = () => true): { id: number; tokens: number; max: number; at: number } | null {
  let best: { id: number; tokens: number; max: number; at: number } | null = null;
  for (const [id, c] of perFeature(o)) {
    if (keep(c.tokens) && (!best || c.max > best.max || (c.max === best.max && id < best.id))) best = { id, ...c };
  }
  return best;
}
/** The feature the lesson reads: the most active of those not active at every token, else the most active. */
const bestFeature = (o: FeaturesOut) => mostActive(o, (n) => n < o.positions.length) ?? mostActive(o);

/** Block L's MLP hidden layer, fetched again: the loudest neuron and the tokens above half its largest value. */
async function neuron(ctx: ClaimContext, layer: number): Promise<{ j: number; max: number; at: number; over: number[]; M: number; T: number }> {
  const x = await ctx.tensor({ name: `blocks.${layer}.mlp.post` });
  const [T, M] = x.shape;
  let j = -1, at = -1, max = -Infinity;
  for (let i = 0; i < M; i++) for (let t = 0; t < T; t++) {
    const a = x.data[t * M + i];
    if (a > max) { max = a; j = i; at = t; }
  }
  const over = [...Array(T).keys()].filter((t) => x.data[t * M + j] > max / 2);
  return { j, max, at, over, M, T };
}

async function neuronFacts(v: V, ctx: ClaimContext): Promise<true | string> {
  const n = await neuron(ctx, num(v.layer));
  return all(same(v.neuron, n.j, "the loudest neuron"), same(v.max, n.max, "its largest value"),
    same(v.pos, n.at, "where"), same(v.m, n.M, "the neurons"), same(v.n, n.T, "the tokens"),
    same(v.over, n.over.length, "the tokens above half"), fail(num(v.tok) === ctx.trace.token_ids[n.at], `the token at ${n.at} is not ${v.tok.v}`));
}

async function steered(ctx: ClaimContext, v: V): Promise<{ s: SteerOut; max: number; id: number; layer: number }> {
  const o = await feats(ctx, v), b = bestFeature(o)!;
  const layer = Number(/^blocks\.(\d+)\.hook_resid_post$/.exec(String(v.hook.raw))![1]);
  const body = { model: ctx.trace.model, text: ctx.trace.text, strength: STEER_TIMES * b.max, feature: { layer, id: b.id } };
  const s = await once(`s|${JSON.stringify(body)}`, () => call<SteerOut>("steer", body));
  return { s, max: b.max, id: b.id, layer };
}
// the quoted start of a continuation: its first QUOTE tokens, spaces visible, "…" where more follow
const text = (ts: SteerOut["plain"]) => ts.slice(0, QUOTE).map((x) => visible(x.text)).join(" ") + (ts.length > QUOTE ? " …" : "");

async function missFacts(v: V, ctx: ClaimContext): Promise<{ ok: true | string; ev: number }> {
  const o = await feats(ctx, v);
  const rel = o.positions.filter((p) => p.relative_error !== null);
  let worst = rel[0];
  for (const p of rel) if (p.relative_error! > worst.relative_error!) worst = p;
  // the relative error recomputed from the norms the answer gives
  const mean = rel.reduce((s, p) => s + p.error_norm / p.norm, 0) / rel.length;
  const ev = o.explained_variance!;
  return { ev, ok: all(same(v.ev, ev, "the variance explained"), same(v.mean, mean, "the mean error", 1e-3),
    same(v.pos, worst.position, "the worst token"), same(v.max, worst.error_norm / worst.norm, "its error", 1e-3),
    same(v.n, o.positions.length, "the tokens")) };
}

export const CLAIMS: Partial<Record<MessageKey, Check>> = {
  "lesson.features.neuron.loudest": neuronFacts,
  "lesson.features.neuron.one": async (v, ctx) => {
    const n = await neuron(ctx, num(v.layer));
    return all(await neuronFacts(v, ctx), fail(n.over.length === 1, `${n.over.length} tokens are above half`));
  },
  "lesson.features.neuron.many": async (v, ctx) => {
    const n = await neuron(ctx, num(v.layer));
    return all(await neuronFacts(v, ctx), fail(n.over.length > 1 && n.over.length <= 4,
      `${n.over.length} tokens are above half; the text lists them all only from 2 to 4`));
  },
  "lesson.features.neuron.manyListed": async (v, ctx) => {
    const n = await neuron(ctx, num(v.layer));
    return all(await neuronFacts(v, ctx), fail(n.over.length > 4, `${n.over.length} tokens are above half, not more than 4`));
  },
  "lesson.features.neuron.different": async (v, ctx) => {
    const n = await neuron(ctx, num(v.layer));
    const d = new Set(n.over.map((p) => ctx.trace.token_ids[p])).size;
    return all(same(v.distinct, d, "the different tokens"), fail(d > 1, "the tokens above half are all one token"));
  },
  "lesson.features.neuron.same": async (v, ctx) => {
    const n = await neuron(ctx, num(v.layer));
    const d = new Set(n.over.map((p) => ctx.trace.token_ids[p]));
    return fail(n.over.length > 1 && d.size === 1 && d.has(num(v.tok)), `the tokens above half are ${[...d]} (${n.over.length})`);
  },
  "lesson.features.sae.widths": async (v, ctx) => {
    const h = await hookOf(ctx, v), o = await feats(ctx, v);
    const din = ctx.trace.config.n_embd;
    return all(same(v.layer, h.layer, "the layer"), fail(h.hook === `blocks.${h.layer}.hook_resid_post`, `${h.hook} does not read the residual stream after block ${h.layer}`),
      same(v.din, din, "d_in"), same(v.dsae, o.d_sae, "d_sae"), same(v.dsae, h.d_sae, "d_sae of the hooks"), same(v.ratio, o.d_sae / din, "the ratio"));
  },
  "lesson.features.sae.topk": async (v, ctx) => {
    const o = await feats(ctx, v);
    return all(fail(o.k !== null, "the autoencoder has no k"), same(v.k, o.k ?? NaN, "k"), same(v.dsae, o.d_sae, "d_sae"),
      fail(o.positions.every((p) => p.active <= o.k!), "a token has more than k features active"));
  },
  ...Object.fromEntries((["active", "activeSame", "activeListed"] as const).map((kind) => [`lesson.features.sae.${kind}`, (async (v, ctx) => {
    const o = await feats(ctx, v);
    const act = o.positions.map((p) => p.active), lo = Math.min(...act), hi = Math.max(...act);
    const allListed = o.positions.every((p) => p.features.length === p.active);
    return all(same(v.n, o.positions.length, "the tokens"), same(v.hi, hi, "the most active"),
      kind === "activeSame" ? fail(lo === hi, `${lo} to ${hi} are active`) : same(v.lo, lo, "the fewest active"),
      kind === "active" ? fail(lo !== hi, "every token has as many") : true,
      kind === "activeListed" ? fail(!allListed, "every active feature is listed") : same(v.distinct, perFeature(o).size, "the different features"));
  }) as Check])),
  "lesson.features.feature.none": async (v, ctx) => fail(perFeature(await feats(ctx, v)).size === 0, "some feature is active"),
  "lesson.features.feature.best": async (v, ctx) => {
    const o = await feats(ctx, v), b = bestFeature(o), top = mostActive(o);
    if (!b || !top) return "no feature is active";
    return all(same(v.id, b.id, "the feature read"), same(v.id, top.id, "the most active feature"), same(v.max, b.max, "its activation"),
      same(v.pos, b.at, "where"), fail(num(v.tok) === ctx.trace.token_ids[b.at], `the token at ${b.at} is not ${v.tok.v}`));
  },
  "lesson.features.feature.bestSparse": async (v, ctx) => {
    const o = await feats(ctx, v), b = mostActive(o, (n) => n < o.positions.length), top = mostActive(o);
    if (!b || !top) return "no feature fires at fewer than every token";
    return all(same(v.top, top.id, "the most active feature"), fail(top.tokens === o.positions.length, `#${top.id} fires at ${top.tokens} tokens, not every one`),
      same(v.id, b.id, "the most active of the others"), same(v.max, b.max, "its activation"), same(v.pos, b.at, "where"),
      fail(num(v.tok) === ctx.trace.token_ids[b.at], `the token at ${b.at} is not ${v.tok.v}`));
  },
  ...Object.fromEntries((["fires", "firesOne"] as const).map((kind) => [`lesson.features.feature.${kind}`, (async (v, ctx) => {
    const o = await feats(ctx, v), c = perFeature(o).get(num(v.id));
    if (!c) return `feature ${v.id.v} is not active in the text`;
    return all(same(v.n, o.positions.length, "the tokens"), kind === "fires" ? all(same(v.fires, c.tokens, "where it fires"),
      fail(c.tokens > 1, "it fires at one token")) : fail(c.tokens === 1 && num(v.tok) === ctx.trace.token_ids[c.at], `it fires at ${c.tokens} tokens`));
  }) as Check])),
  "lesson.features.feature.everywhere": async (v, ctx) => {
    const o = await feats(ctx, v), c = perFeature(o).get(num(v.id));
    return fail(!!c && c.tokens === o.positions.length && o.positions.length > 1, `feature ${v.id.v} fires at ${c?.tokens} of ${o.positions.length} tokens`);
  },
  "lesson.features.feature.corpus": async (v, ctx) => {
    const p = await pageOf(ctx, String(v.hook.raw), num(v.id));
    return all(same(v.density, p.density, "the density"), same(v.corpus, p.corpus_tokens, "the corpus"));
  },
  "lesson.features.feature.top": async (v, ctx) => {
    const p = await pageOf(ctx, String(v.hook.raw), num(v.id)), c = p.top_contexts[0];
    // the centre token bracketed, CONTEXT tokens before it and 2 after, as the page shows tokens
    const around = c.tokens.map((s, i) => (i === c.center ? `[${visible(s)}]` : visible(s)));
    const line = around.slice(Math.max(0, c.center - CONTEXT), c.center + 3).join(" ");
    return all(fail(line === String(v.ctx.raw), `the top context is ${JSON.stringify(line)}`),
      same(v.cmax, p.max_activation, "the corpus maximum"), same(v.cmax, c.activation, "the top context's activation", 1e-3),
      // the strongest: first of the contexts by decreasing activation, at the corpus maximum (stored in float16)
      fail(p.top_contexts.every((x) => x.activation <= c.activation) && Math.abs(c.activation - p.max_activation) <= 1e-3 * p.max_activation,
        `the top context's ${c.activation} is not the corpus maximum ${p.max_activation}`));
  },
  ...Object.fromEntries((["strong", "weak"] as const).map((kind) => [`lesson.features.feature.${kind}`, (async (v, ctx) => {
    const p = await pageOf(ctx, String(v.hook.raw), num(v.id)), b = bestFeature(await feats(ctx, v))!;
    const strong = b.max >= p.max_activation / 2;
    return all(same(v.max, b.max, "the text's maximum"), same(v.cmax, p.max_activation, "the corpus maximum"),
      fail(strong === (kind === "strong"), `${b.max} against half of ${p.max_activation}`));
  }) as Check])),
  "lesson.features.guess.promoted": async (v, ctx) => {
    const p = await pageOf(ctx, String(v.hook.raw), num(v.id));
    const shown = String(v.promoted.raw).split(", ");
    return fail(shown.length === Math.min(3, p.promoted.length) && p.promoted.length > 0,
      `the page promotes ${p.promoted.length} tokens, the text names ${shown.length}`);
  },
  "lesson.features.guess.written": async (v, ctx) => {
    const p = await pageOf(ctx, String(v.hook.raw), num(v.id));
    return fail(!!p.description && p.description === String(v.desc.raw), `the page's description is ${JSON.stringify(p.description)}`);
  },
  "lesson.features.guess.unwritten": async (v, ctx) => {
    const p = await pageOf(ctx, String(v.hook.raw), num(v.id));
    return fail(!p.description, `the page has a description: ${p.description}`);
  },
  "lesson.features.steer.notPost": async (v) => fail(!/^blocks\.\d+\.hook_resid_post$/.test(String(v.hook.raw)), `${v.hook.raw} is a block's output`),
  "lesson.features.steer.how": async (v, ctx) => {
    const { s, max, id, layer } = await steered(ctx, v);
    return all(same(v.id, id, "the feature"), same(v.layer, layer, "the layer"), same(v.layer, s.direction.layer, "the direction's layer"),
      same(v.max, max, "its largest activation"), same(v.s, STEER_TIMES * max, "the strength"), same(v.s, s.strength, "the answer's strength"),
      same(v.times, STEER_TIMES, "the multiple"), fail(s.direction.kind === "feature" && s.direction.feature === id, "the direction is not the feature's"));
  },
  "lesson.features.steer.same": async (v, ctx) => {
    const { s } = await steered(ctx, v);
    return all(fail(s.plain.every((t, i) => t.id === s.steered[i]?.id) && s.plain.length === s.steered.length, "the continuations differ"),
      fail(text(s.plain) === String(v.plain.raw), "the text quotes another continuation"));
  },
  ...Object.fromEntries((["differ", "differOne", "differFirst"] as const).map((kind) => [`lesson.features.steer.${kind}`, (async (v, ctx) => {
    const { s } = await steered(ctx, v);
    let k = 0;
    while (k < s.plain.length && k < s.steered.length && s.plain[k].id === s.steered[k].id) k++;
    const differ = k < Math.max(s.plain.length, s.steered.length);
    return all(fail(text(s.plain) === String(v.plain.raw) && text(s.steered) === String(v.steered.raw), "the text quotes other continuations"),
      fail(differ, "the continuations are the same"), kind === "differ" ? all(same(v.at, k, "where they part"), fail(k > 1, `they agree on ${k} tokens`))
        : fail(k === (kind === "differOne" ? 1 : 0), `they agree on ${k} tokens`));
  }) as Check])),
  "lesson.features.steer.breaks": async (v, ctx) => {
    const { s } = await steered(ctx, v);
    const first = s.sweep.find((p) => p.broken);
    return all(fail(!!first, "no point of the sweep is broken"), first ? same(v.b, first.strength, "the first broken strength") : true,
      s.breakdown !== null ? same(v.b, s.breakdown, "the answer's breakdown") : "no breakdown in the answer");
  },
  "lesson.features.steer.brokenHere": async (v, ctx) => {
    const { s } = await steered(ctx, v);
    return all(same(v.s, s.strength, "the strength"), fail(s.steered_broken, "the steered continuation is not broken down"));
  },
  "lesson.features.steer.holds": async (v, ctx) => {
    const { s } = await steered(ctx, v);
    return fail(s.sweep.length > 0 && s.sweep.every((p) => !p.broken), "a point of the sweep is broken (or there is no sweep)");
  },
  "lesson.features.miss.numbers": async (v, ctx) => (await missFacts(v, ctx)).ok,
  "lesson.features.miss.good": async (v, ctx) => {
    const m = await missFacts(v, ctx);
    return all(m.ok, fail(m.ev >= 0.7, `${m.ev} of the variance explained is below 0.7`));
  },
  "lesson.features.miss.low": async (v, ctx) => {
    const m = await missFacts(v, ctx);
    return all(m.ok, fail(m.ev < 0.7 && m.ev >= 0, `${m.ev} of the variance explained`));
  },
  "lesson.features.miss.none": async (v, ctx) => {
    const m = await missFacts(v, ctx);
    return all(m.ok, fail(m.ev < 0, `${m.ev} of the variance explained is not below 0`));
  },
  "lesson.features.miss.one": async (v, ctx) => {
    const o = await feats(ctx, v);
    return fail(o.explained_variance === null, "the text has a variance explained");
  },
};
