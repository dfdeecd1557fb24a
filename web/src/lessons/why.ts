// The "Why this token" lesson: which parts made the model say what it says. The logit of a prediction as a sum of
// what every part wrote, the largest contributions, one head's job, then activation patching as a controlled
// experiment, what a clean/corrupted pair must share, and what its grids show. Told with the numbers the panels show
// (pages/attribution/store.svelte.ts), for the learner's text and focus; the patching runs on an example pair chosen
// for the loaded model (pages/attribution/pairs.ts): one whose answer moves when it can, and the text says when the
// model cannot follow any. Its words are in the catalogues ("lesson.why.*"); web/tests/lessons/claims.why.ts checks
// every claim on many texts and models.
import { tick } from "svelte";
import type { AttributeOut, PatchIn, PatchOut, TensorSpec } from "../lib/generated/api";
import { claim, either, say, type Lesson, type LessonStep, type Text } from "../lib/lesson";
import { dec, int, term, token, word } from "../lib/lessonFormat";
import { app } from "../lib/state.svelte";
import { why } from "../pages/attribution/api";
import { SvelteMap } from "svelte/reactivity";
import { choosePair, type CheckedPair } from "../pages/attribution/pairs";
import { PATCH_KINDS, whyStore } from "../pages/attribution/store.svelte";
import { ensure, tokAt } from "./reader";

const modelName = () => app.trace?.model ?? "";
const model = () => word("model", modelName());

// -- the attribution of the focus position -------------------------------------------------------------------

/** Open the attribution tab and load the attribution of the focus position with the default token. */
async function openDla(): Promise<void> {
  app.view = "attribution";
  whyStore.tab = "dla";
  whyStore.target = "";
  whyStore.versus = "";
  await tick();
  await whyStore.attribute();
}

const attr = (): AttributeOut | null => whyStore.current();
const label = (l: number, h: number) => `L${l} H${h}`;

/** The head that adds the most to the logit (null when none adds anything). */
function bestHead(a: AttributeOut): { layer: number; head: number; value: number } | null {
  let best: { layer: number; head: number; value: number } | null = null;
  for (const c of a.components) {
    if (c.kind === "head" && c.value > 0 && (!best || c.value > best.value)) best = { layer: c.layer!, head: c.head!, value: c.value };
  }
  return best;
}
const patternSpec = (l: number, h: number): TensorSpec => ({ name: `blocks.${l}.attn.pattern`, head: h, position: app.pos });

// -- the patching of the example pair ----------------------------------------------------------------------

// by model: the example pair chosen for it (null: none can be patched there), its grids, and the clean prompt's own
// attribution of answer − wrong; the requests are made once per model, the answers kept where the text reads them
const choosing = new Map<string, Promise<CheckedPair | null>>();
const running = new Map<string, Promise<PatchOut>>();
const attributing = new Map<string, Promise<AttributeOut>>();
const chosen = new SvelteMap<string, CheckedPair | null>();
const results = new SvelteMap<string, PatchOut>();
const directs = new SvelteMap<string, AttributeOut>();

function once<T>(cache: Map<string, Promise<T>>, key: string, make: () => Promise<T>): Promise<T> {
  if (!cache.has(key)) cache.set(key, make().catch((e) => { cache.delete(key); throw e; }));
  return cache.get(key)!;
}

/** Open the patching tab on the example pair for the loaded model, with its four grids computed (they stay the
 *  lesson's even when the learner then edits the boxes: the next step puts the pair back). */
async function openPatch(): Promise<void> {
  app.view = "attribution";
  whyStore.tab = "patch";
  await tick();
  const m = modelName();
  if (!m) return;
  let ex: CheckedPair | null, out: PatchOut;
  try {
    ex = await once(choosing, m, () => choosePair(m));
    chosen.set(m, ex);
    if (!ex) return;
    whyStore.usePair(ex.pair);
    whyStore.what = [...PATCH_KINDS];
    out = await once(running, m, async () => {
      await whyStore.runPatch();
      const p = whyStore.currentPatch();
      if (!p) throw whyStore.patchError ?? new Error("the patching did not finish");
      return p;
    });
  } catch {
    return; // the panel shows the error; the card waits for a text it can tell
  }
  const mine: PatchIn = { model: m, clean: ex.pair.clean, corrupted: ex.pair.corrupted, answer: ex.pair.answer,
    wrong: ex.pair.wrong, what: [...PATCH_KINDS] };
  results.set(m, out);
  if (!whyStore.currentPatch()) { // the boxes were edited since: show the example's grids again
    whyStore.usePair(ex.pair);
    whyStore.patch = out;
    whyStore.patchOf = mine;
  }
  await whyStore.checkLengths();
}

/** The example pair and its grids for the loaded model, once computed. */
function shown(): { ex: CheckedPair; p: PatchOut } | null {
  const m = modelName(), ex = chosen.get(m), p = results.get(m);
  return ex && p ? { ex, p } : null;
}
/** No example pair can be patched with the loaded model (known once the choice is made). */
const noPair = () => chosen.has(modelName()) && chosen.get(modelName()) === null;
const changedAt = (p: PatchOut) => p.clean_ids.findIndex((id, i) => id !== p.corrupted_ids[i]);
/** The pair a patching sentence speaks of (its checks read them; the metrics sentence also shows the prompts). */
const pairVars = (ex: CheckedPair) => ({ cleanText: word("clean-text", ex.pair.clean),
  corruptedText: word("corrupted-text", ex.pair.corrupted), answerId: int("answer-id", ex.answer),
  wrongId: int("wrong-id", ex.wrong) });

// -- the steps ---------------------------------------------------------------------------------------------

const steps: LessonStep[] = [
  {
    id: "sum",
    target: "attr-sum",
    enter: async () => {
      await openDla();
    },
    title: "lesson.why.sum.title",
    body: () => {
      const a = attr(), c = app.trace?.config;
      if (!a || !c || !app.trace) return [];
      const T = app.trace.token_ids.length;
      const total = a.components.reduce((s, x) => s + x.value, 0);
      const target = token("target", a.target.text, a.target.id, "attr-sum");
      const logit = dec("logit", a.metric, "attr-sum");
      const out: Text = [
        claim(a.position === T - 1 ? "lesson.why.sum.top" : "lesson.why.sum.next",
          { model: model(), pos: int("pos", a.position), token: tokAt("token", a.position), target, logit }),
        claim("lesson.why.sum.exact", { n: int("n-parts", a.components.length), sum: dec("sum", total, "attr-sum"),
          rest: term("rest", a.rest, "attr-sum"), logit }),
        say(app.caps.norm === "rms" ? "lesson.why.sum.whyRms" : "lesson.why.sum.whyLn"),
        ...(app.caps.sandwich_norm ? [say("lesson.why.sum.whySandwich")] : []),
        either(a.rest === 0, "lesson.why.sum.noRest", "lesson.why.sum.someRest", { rest: dec("rest", a.rest) }),
      ];
      return out;
    },
    task: () => [say("lesson.why.sum.task")],
  },
  {
    id: "top",
    target: "attr-ranked",
    controls: ["attr-first"],
    enter: async () => {
      await openDla();
    },
    title: "lesson.why.top.title",
    body: () => {
      const a = attr();
      if (!a) return [];
      const first = [...a.components].sort((x, y) => Math.abs(y.value) - Math.abs(x.value))[0];
      const name = first.kind === "head" ? label(first.layer!, first.head!)
        : first.kind === "mlp" ? `MLP ${first.layer}` : first.kind === "attn_bias" ? `b_O ${first.layer}`
        : first.kind === "embed" ? "W_E" : "W_pos";
      const sum = (k: string[]) => a.components.filter((x) => k.includes(x.kind)).reduce((s, x) => s + x.value, 0);
      const hasBias = a.components.some((x) => x.kind === "attn_bias");
      const kinds = { heads: dec("heads-sum", sum(["head"]), "attr-sum"), mlps: dec("mlps-sum", sum(["mlp"]), "attr-sum"),
        emb: dec("emb-sum", sum(["embed", "pos_embed"]), "attr-sum"), bias: dec("bias-sum", sum(["attn_bias"]), "attr-sum") };
      return [
        either(first.value > 0, "lesson.why.top.firstUp", "lesson.why.top.firstDown",
          { first: word("first", name, "attr-first"), v: dec("first-v", first.value, "attr-first") }),
        hasBias ? claim("lesson.why.top.kinds", kinds)
          : claim("lesson.why.top.kindsNoBias", { heads: kinds.heads, mlps: kinds.mlps, emb: kinds.emb }),
        say("lesson.why.top.direct"),
      ];
    },
    task: () => [say("lesson.why.top.task")],
  },
  {
    id: "head",
    target: "attr-map",
    controls: ["attr-map"],
    enter: async () => {
      await openDla();
      const a = attr(), b = a && bestHead(a);
      if (b) await ensure([patternSpec(b.layer, b.head)]);
    },
    needs: () => {
      const a = attr(), b = a && bestHead(a);
      return b ? [patternSpec(b.layer, b.head)] : [];
    },
    title: "lesson.why.head.title",
    body: () => {
      const a = attr(), c = app.trace?.config;
      if (!a || !c) return [];
      const n = int("n-heads", c.n_layer * c.n_head);
      const b = bestHead(a);
      if (!b) return [claim("lesson.why.head.none", { n })];
      const pat = app.tensor(patternSpec(b.layer, b.head));
      if (!pat) return [];
      let j = 0;
      for (let k = 1; k <= a.position && k < pat.data.length; k++) if (pat.data[k] > pat.data[j]) j = k;
      const head = word("best-head", label(b.layer, b.head), "attr-map");
      const key = tokAt("key", j);
      const copies = app.trace!.token_ids[j] === a.target.id;
      return [
        claim("lesson.why.head.best", { n, head, v: dec("best-v", b.value, "attr-map") }),
        claim("lesson.why.head.looks", { token: tokAt("token", a.position), w: dec("w", pat.data[j]), key,
          j: int("key-pos", j) }),
        either(copies, "lesson.why.head.copies", "lesson.why.head.other",
          { key, target: token("target", a.target.text, a.target.id) }),
      ];
    },
    task: () => {
      const a = attr(), b = a && bestHead(a);
      return b ? [say("lesson.why.head.task", { head: word("best-head", label(b.layer, b.head), "attr-map") })] : [];
    },
    done: () => {
      const a = attr(), b = a && bestHead(a);
      return !!b && app.view === "attention" && app.layer === b.layer && app.head === b.head;
    },
  },
  {
    id: "patch",
    target: "patch-metrics",
    enter: openPatch,
    title: "lesson.why.patch.title",
    body: () => {
      if (!modelName()) return [];
      if (noPair()) return [say("lesson.why.patch.idea"), claim("lesson.why.patch.noPair", { model: model() })];
      const s = shown();
      if (!s) return [];
      const { ex, p } = s;
      const answer = token("answer", p.answer.text, p.answer.id, "patch-metrics");
      const wrong = token("wrong", p.wrong.text, p.wrong.id, "patch-metrics");
      return [
        say("lesson.why.patch.idea"),
        claim("lesson.why.patch.metrics", { ...pairVars(ex), model: model(), answer, wrong,
          clean: dec("m-clean", p.clean, "patch-metrics"), corrupted: dec("m-corrupted", p.corrupted, "patch-metrics") }),
        either(ex.moves, "lesson.why.patch.moves", "lesson.why.patch.stays", { ...pairVars(ex), model: model(), answer, wrong,
          diff: dec("m-diff", p.clean - p.corrupted),
          topClean: token("top-clean", ex.topClean.text, ex.topClean.id), topCorrupted: token("top-corrupted", ex.topCorrupted.text,
            ex.topCorrupted.id) }),
      ];
    },
  },
  {
    id: "pair",
    target: "patch-inputs",
    controls: ["patch-helper"],
    enter: openPatch,
    title: "lesson.why.pair.title",
    body: () => {
      const s = shown();
      if (!s) return noPair() ? [say("lesson.why.pair.why")] : [];
      const { ex, p } = s, c = changedAt(p);
      return [
        claim("lesson.why.pair.lines", { ...pairVars(ex), n: int("n-tokens", p.clean_ids.length, "patch-lengths"), pos: int("changed-pos", c, "patch-lengths"),
          a: token("a", p.clean_tokens[c], p.clean_ids[c], "patch-lengths"),
          b: token("b", p.corrupted_tokens[c], p.corrupted_ids[c], "patch-lengths") }),
        say("lesson.why.pair.why"),
      ];
    },
    task: () => [say("lesson.why.pair.task")],
  },
  {
    id: "grid",
    target: "patch-resid_pre",
    enter: openPatch,
    title: "lesson.why.grid.title",
    body: () => {
      const s = shown();
      if (!s) return noPair() ? [say("lesson.why.grid.read")] : [];
      const { ex, p } = s, g = p.grids.resid_pre, c = changedAt(p), last = p.clean_ids.length - 1, L = g.length;
      const v = (l: number, t: number) => g[l][t] ?? 0;
      const at = "patch-resid_pre";
      const out: Text = [claim("lesson.why.grid.start", { ...pairVars(ex), pos: int("changed-pos", c),
        v: dec("v-start", v(0, c), at) })];
      if (c !== last) {
        // the first layer from which on the last position carries more than the changed one, in every layer after
        let from = -1;
        for (let l = L - 1; l >= 1 && v(l, last) > v(l, c); l--) from = l;
        const l = from >= 0 ? from : L - 1;
        out.push(either(from >= 0, "lesson.why.grid.moves", "lesson.why.grid.stays", { ...pairVars(ex), layer: int("move-layer", l),
          pos: int("changed-pos", c), vLast: dec("v-last", v(l, last), at), vPos: dec("v-pos", v(l, c), at) }));
      }
      out.push(say("lesson.why.grid.read"));
      return out;
    },
  },
  {
    id: "heads",
    target: "patch-heads",
    controls: ["patch-heads"],
    enter: async () => {
      await openPatch();
      const s = shown();
      if (!s) return;
      const { p } = s;
      directs.set(p.model, await once(attributing, p.model,
        () => why.attribute({ model: p.model, ids: p.clean_ids, target: p.answer.id, versus: p.wrong.id })));
    },
    title: "lesson.why.heads.title",
    body: () => {
      const s = shown();
      if (!s) return noPair() ? [say("lesson.why.heads.end")] : [];
      const { ex, p } = s, g = p.grids.heads, H = g[0]?.length ?? 0;
      const d = directs.get(p.model);
      if (!d) return [];
      let bl = 0, bh = 0;
      g.forEach((row, l) => row.forEach((x, h) => { if ((x ?? -Infinity) > (g[bl][bh] ?? -Infinity)) { bl = l; bh = h; } }));
      const best = g[bl][bh] ?? 0;
      const head = word("patch-head", label(bl, bh), "patch-heads");
      const top3 = d.components.filter((x) => x.kind === "head").sort((x, y) => y.value - x.value).slice(0, 3);
      const agree = top3.some((x) => x.layer === bl && x.head === bh);
      return [
        claim("lesson.why.heads.top", { ...pairVars(ex), n: int("n-heads", g.length * H), head,
          v: dec("patch-head-v", best, "patch-heads") }),
        either(best >= 0.5, "lesson.why.heads.one", "lesson.why.heads.spread", { ...pairVars(ex), head }),
        either(agree, "lesson.why.heads.agree", "lesson.why.heads.disagree", { ...pairVars(ex), head,
          answer: token("answer", p.answer.text, p.answer.id), wrong: token("wrong", p.wrong.text, p.wrong.id) }),
        say("lesson.why.heads.end"),
      ];
    },
    task: () => [say("lesson.why.heads.task")],
  },
];

export const whyLesson: Lesson = { id: "why", title: "lesson.why.title", steps };
