// The GPT-2 lesson's attention steps (lessons/gpt2.ts assembles the lesson): the layer norm before attention,
// queries and keys, their dot products, the scale, the causal mask, the softmax, the heads and their concatenation.
// Where a step needs an example the data must supply (a head whose top key clearly wins, a query whose best match
// is positive), its `enter` looks for one among the heads of the learner's text, moves the focus there, and says so.
import type { TensorSpec } from "../lib/generated/api";
import { claim, either, say, type LessonStep, type Text } from "../lib/lesson";
import { dec, int } from "../lib/lessonFormat";
import { app } from "../lib/state.svelte";
import { row } from "../lib/tensor";
import {
  argBest, cfg, fetched, focusTok, headVal, layerVal, moveTo, movedHere, nTok, opened, request, show, tokAt, stageTensors,
} from "./reader";

// -- attention: one head's row for the focus token ------------------------------------------------------------------

const scoreSpec = (l: number, h: number, p: number): TensorSpec => ({ name: `blocks.${l}.attn.scores`, head: h, position: p });
const patternSpec = (l: number, h: number, p: number): TensorSpec => ({ name: `blocks.${l}.attn.pattern`, head: h, position: p });

/** Every head's scores and weights for position `p` (rows: a few numbers each). */
function headSpecs(p: number, layers?: number[]): TensorSpec[] {
  const c = cfg();
  if (!c) return [];
  const out: TensorSpec[] = [];
  for (const l of layers ?? [...Array(c.n_layer).keys()])
    for (let h = 0; h < c.n_head; h++) out.push(scoreSpec(l, h, p), patternSpec(l, h, p));
  return out;
}

/** What one head does for the query at `p`: its best and worst match among the `n` keys it sees, and its weights. */
interface HeadRow {
  n: number;
  best: number;
  bestScore: number;
  low: number;
  lowScore: number;
  top: number;
  w1: number;
  w2: number;
  /** The largest scaled score: negative when every visible score is. */
  maxScaled: number;
}
function headRow(l: number, h: number, p: number): HeadRow | null {
  const s = app.tensor(scoreSpec(l, h, p))?.data, w = app.tensor(patternSpec(l, h, p))?.data;
  const c = cfg();
  if (!s || !w || !c) return null;
  const best = argBest(s, p), low = argBest(s, p, -1), top = argBest(w, p);
  let w2 = 0;
  for (let j = 0; j <= p; j++) if (j !== top) w2 = Math.max(w2, w[j]);
  return { n: p + 1, best, bestScore: s[best], low, lowScore: s[low], top, w1: w[top], w2,
    maxScaled: s[best] / Math.sqrt(c.head_dim) };
}

/** A key clearly wins: at least half the weight, and at least twice the next key's. */
const CLEAR_SHARE = 0.5;
const positive = (r: HeadRow) => r.n >= 2 && r.bestScore > 0;
const clearWin = (r: HeadRow) => r.n >= 2 && r.w1 >= CLEAR_SHARE && r.w1 >= 2 * r.w2;
/** The best match is another token's key, not the query's own (a clearer example of a search). */
const notSelf = (r: HeadRow) => r.best !== r.n - 1;
/** The key the row weights most is not the first token: a search, not weight parked on position 0. */
const offFirst = (r: HeadRow) => r.top !== 0 && r.best !== 0;

// -- attention sinks: heads whose rows put most of their weight on the first token --------------------------------

/** A head whose rows give position 0 at least this share of their weight, on average, is a sink for the text. */
const SINK_SHARE = 0.5;
/** The focus head's whole pattern (T × T): every query's row. */
const headPatternSpec = (l: number, h: number): TensorSpec => ({ name: `blocks.${l}.attn.pattern`, head: h });
/** The mean weight the head's rows after the first give position 0, or null before its pattern is here (or with
 *  one token: the first row has only position 0 to weight). */
function firstShare(l: number, h: number): number | null {
  const pat = app.tensor(headPatternSpec(l, h)), T = nTok();
  if (!pat || T < 2 || pat.shape[0] !== T) return null;
  let s = 0;
  for (let i = 1; i < T; i++) s += pat.data[i * T];
  return s / (T - 1);
}
/** The sentence naming the focus head a sink, when the key the text quotes is position 0 and the head's rows put
 *  most of their weight there; none otherwise. */
function sinkNote(quoted: number): Text {
  const share = firstShare(app.layer, app.head);
  if (quoted !== 0 || share === null || share < SINK_SHARE) return [];
  return [claim("lesson.gpt2.attn.sink", { layer: layerVal(), head: headVal(), first: tokAt("first-token", 0),
    share: dec("sink-share", share), rows: int("sink-rows", nTok() - 1) })];
}

/** Put the focus on the first head (the current one first, then block by block) that `prefs[0]` accepts, else
 *  `prefs[1]`, …; the focus stays where it is when none does. */
async function pickHead(step: string, prefs: ((r: HeadRow) => boolean)[]): Promise<void> {
  const c = cfg();
  if (!c || !(await fetched(headSpecs(app.pos)))) return;
  const order: [number, number][] = [[app.layer, app.head]];
  for (let l = 0; l < c.n_layer; l++) for (let h = 0; h < c.n_head; h++) order.push([l, h]);
  for (const want of prefs) {
    for (const [l, h] of order) {
      const r = headRow(l, h, app.pos);
      if (r && want(r)) return moveTo(step, l, h);
    }
  }
}

/** The focus head's row, or null before its tensors are here. */
const focusRow = () => headRow(app.layer, app.head, app.pos);
const focusSpecs = () => [scoreSpec(app.layer, app.head, app.pos), patternSpec(app.layer, app.head, app.pos),
  headPatternSpec(app.layer, app.head)];

export const attentionSteps: LessonStep[] = [
  {
    id: "layernorm",
    target: "ln-stats",
    enter: () => show("layernorm", "ln1"),
    title: "lesson.gpt2.layernorm.title",
    body: () => {
      const { mean, variance } = stageTensors("layernorm", "ln1");
      if (!mean || !variance || !app.trace?.tokens[app.pos]) return [];
      return [
        say("lesson.gpt2.layernorm.body", { layer: layerVal(), focus: focusTok(),
          mean: dec("ln-mean", mean.data[app.pos], "ln-stats"), var: dec("ln-var", variance.data[app.pos], "ln-stats") }),
        say("lesson.gpt2.layernorm.why"),
      ];
    },
  },
  {
    id: "qkv",
    target: "qkv-mats",
    enter: async () => {
      show("qkv");
      await pickHead("qkv", [(r) => positive(r) && clearWin(r) && notSelf(r) && offFirst(r), (r) => positive(r) && notSelf(r) && offFirst(r),
        (r) => positive(r) && clearWin(r) && notSelf(r), (r) => positive(r) && notSelf(r), positive]);
    },
    needs: () => focusSpecs(),
    title: "lesson.gpt2.qkv.title",
    body: () => {
      const c = cfg(), r = focusRow();
      if (!c || !r) return [];
      const out: Text = [say("lesson.gpt2.qkv.body", { dHead: int("d-head", c.head_dim) })];
      if (movedHere("qkv")) out.push(claim("lesson.gpt2.attn.movedPositive", { layer: layerVal(), head: headVal(), focus: focusTok() }));
      const vars = { layer: layerVal(), head: headVal(), focus: focusTok(),
        key: tokAt("best-key", r.best, "k-best"), score: dec("best-score", r.bestScore) };
      if (r.n < 2) out.push(claim("lesson.gpt2.qkv.only", { focus: focusTok(), score: dec("best-score", r.bestScore) }));
      else if (r.bestScore <= 0) out.push(claim("lesson.gpt2.qkv.bestNeg", vars));
      else out.push(either(r.best === app.pos, "lesson.gpt2.qkv.bestSelf", "lesson.gpt2.qkv.best", vars));
      if (r.n >= 2 && r.bestScore > 0) out.push(...sinkNote(r.best));
      return out;
    },
  },
  {
    id: "dot",
    target: "stage-scores",
    enter: async () => {
      show("attention");
      await pickHead("dot", [(r) => positive(r) && notSelf(r) && offFirst(r), (r) => positive(r) && notSelf(r), positive]);
    },
    needs: () => focusSpecs(),
    title: "lesson.gpt2.dot.title",
    body: () => {
      const r = focusRow();
      if (!r) return [];
      const out: Text = [say("lesson.gpt2.dot.body")];
      if (movedHere("dot")) out.push(claim("lesson.gpt2.attn.movedPositive", { layer: layerVal(), head: headVal(), focus: focusTok() }));
      if (r.n < 2) out.push(claim("lesson.gpt2.dot.only", { focus: focusTok(), score: dec("high-score", r.bestScore, "score-best") }));
      else {
        const vars = { layer: layerVal(), head: headVal(), focus: focusTok(),
          high: tokAt("high-key", r.best), highScore: dec("high-score", r.bestScore, "score-best"),
          low: tokAt("low-key", r.low), lowScore: dec("low-score", r.lowScore, "score-low") };
        out.push(either(r.low === app.pos, "lesson.gpt2.dot.lowSelf", "lesson.gpt2.dot.range", vars));
        out.push(...sinkNote(r.best));
      }
      return out;
    },
  },
  {
    id: "scale",
    target: "stage-scaled",
    enter: async () => {
      show("attention");
      await pickHead("scale", [(r) => positive(r) && notSelf(r) && offFirst(r), (r) => positive(r) && notSelf(r), positive]);
    },
    needs: () => focusSpecs(),
    title: "lesson.gpt2.scale.title",
    body: () => {
      const c = cfg(), r = focusRow(), { scores, scaled } = stageTensors("attention");
      if (!c || !r || !scores || !scaled) return [];
      const dk = int("d-k", c.head_dim);
      const out: Text = [];
      if (movedHere("scale")) out.push(claim("lesson.gpt2.attn.movedPositive", { layer: layerVal(), head: headVal(), focus: focusTok() }));
      out.push(say("lesson.gpt2.scale.body", { dk, sqrt: dec("sqrt-dk", Math.sqrt(c.head_dim)),
        score: dec("best-score", scores.data[r.best], "score-best"), scaled: dec("scaled-score", scaled.data[r.best], "scaled-best") }));
      out.push(say("lesson.gpt2.scale.why", { dk }));
      if (r.n >= 2) {
        const sd = (a: ArrayLike<number>) => {
          let m = 0, v = 0;
          for (let j = 0; j < r.n; j++) m += a[j] / r.n;
          for (let j = 0; j < r.n; j++) v += (a[j] - m) ** 2 / r.n;
          return Math.sqrt(v);
        };
        out.push(say("lesson.gpt2.scale.spread", { focus: focusTok(), sd: dec("sd-scores", sd(scores.data)), sd2: dec("sd-scaled", sd(scaled.data)) }));
      }
      return out;
    },
  },
  {
    id: "mask",
    target: "attn-pattern",
    controls: ["stages"],
    enter: () => show("attention"),
    title: "lesson.gpt2.mask.title",
    body: () => {
      const T = nTok();
      if (!T || !app.trace?.tokens[app.pos]) return [];
      const out: Text = [say("lesson.gpt2.mask.body")];
      const vars = { focus: focusTok(), pos: int("pos", app.pos), seen: int("n-visible", app.pos + 1), masked: int("n-masked", T - 1 - app.pos) };
      if (T === 1) out.push(claim("lesson.gpt2.mask.single", vars));
      else if (app.pos === 0) out.push(claim("lesson.gpt2.mask.first", vars));
      else out.push(claim(app.pos === T - 1 ? "lesson.gpt2.mask.last" : "lesson.gpt2.mask.count", vars));
      return out;
    },
    task: () => [say(nTok() > 1 ? "lesson.gpt2.mask.task" : "lesson.gpt2.mask.taskOne")],
    done: () => app.pos !== opened.pos,
  },
  {
    id: "softmax",
    target: "stage-softmax",
    enter: async () => {
      show("attention");
      await pickHead("softmax", [(r) => clearWin(r) && r.top !== app.pos && offFirst(r), (r) => clearWin(r) && offFirst(r),
        (r) => clearWin(r) && r.top !== app.pos, clearWin]);
    },
    needs: () => focusSpecs(),
    title: "lesson.gpt2.softmax.title",
    body: () => {
      const c = cfg(), r = focusRow(), { pattern } = stageTensors("attention");
      if (!c || !r || !pattern) return [];
      const out: Text = [say("lesson.gpt2.softmax.body")];
      if (movedHere("softmax")) out.push(claim("lesson.gpt2.attn.movedClear", { layer: layerVal(), head: headVal(), focus: focusTok() }));
      const vars = { layer: layerVal(), head: headVal(), focus: focusTok(), key: tokAt("top-key", r.top, "weight-best"),
        weight: dec("top-weight", r.w1, "weight-best"), n: int("n-visible", r.n), even: dec("even-weight", 1 / r.n) };
      if (r.n < 2) out.push(claim("lesson.gpt2.softmax.only", vars));
      else {
        out.push(either(clearWin(r), "lesson.gpt2.softmax.clear", "lesson.gpt2.softmax.lead", vars));
        if (r.maxScaled < 0) out.push(claim("lesson.gpt2.softmax.negative", { focus: focusTok() }));
        if (!clearWin(r)) {
          // does any head give one key a clear win here?
          let any = false, all = true;
          for (let l = 0; l < c.n_layer; l++) for (let h = 0; h < c.n_head; h++) {
            const x = headRow(l, h, app.pos);
            if (!x) all = false;
            else if (clearWin(x)) any = true;
          }
          if (all && !any) out.push(claim("lesson.gpt2.softmax.noHead", { focus: focusTok() }));
        }
        out.push(...sinkNote(r.top));
        if (r.top === 0 && clearWin(r)) {
          // the fallback: no head gives the row a clear winner beyond the first token
          let other = false, all = true;
          for (let l = 0; l < c.n_layer; l++) for (let h = 0; h < c.n_head; h++) {
            const x = headRow(l, h, app.pos);
            if (!x) all = false;
            else if (clearWin(x) && x.top !== 0) other = true;
          }
          if (all && !other) out.push(claim("lesson.gpt2.softmax.noSearch", { focus: focusTok(), first: tokAt("first-token", 0) }));
        }
      }
      const w = row(pattern, app.pos);
      let sum = 0;
      for (let j = 0; j < w.length; j++) sum += w[j];
      out.push(say("lesson.gpt2.softmax.sum", { sum: dec("row-sum", sum) }));
      return out;
    },
  },
  {
    id: "heads",
    target: "head-picker",
    controls: ["head-picker"],
    enter: async () => {
      show("attention");
      await fetched(headSpecs(app.pos, [app.layer]));
    },
    needs: () => focusSpecs(),
    title: "lesson.gpt2.heads.title",
    body: () => {
      const c = cfg();
      if (!c || !app.trace?.tokens[app.pos]) return [];
      const rows = Array.from({ length: c.n_head }, (_, h) => headRow(app.layer, h, app.pos));
      if (rows.some((r) => !r)) {
        request(headSpecs(app.pos, [app.layer]));
        return [];
      }
      const fav = rows.map((r) => r!.top);
      const out: Text = [say("lesson.gpt2.heads.body", { nHead: int("n-head", c.n_head) })];
      const a = app.head, b = fav.findIndex((f, h) => h !== a && f !== fav[a]);
      if (app.pos === 0) out.push(claim("lesson.gpt2.heads.only", { focus: focusTok() }));
      else if (b < 0) out.push(claim("lesson.gpt2.heads.same", { layer: layerVal(), focus: focusTok(), key: tokAt("head-key", fav[a]),
        kpos: int("head-key-pos", fav[a]) }));
      else out.push(claim("lesson.gpt2.heads.differ", { layer: layerVal(), focus: focusTok(),
        head: headVal(), key: tokAt("head-key", fav[a]), kpos: int("head-key-pos", fav[a]), weight: dec("head-weight", rows[a]!.w1),
        head2: int("head2", b), key2: tokAt("head2-key", fav[b]), kpos2: int("head2-key-pos", fav[b]), weight2: dec("head2-weight", rows[b]!.w1) }));
      if (app.pos > 0) out.push(...sinkNote(fav[a]));
      return out;
    },
    task: () => [say("lesson.gpt2.heads.task")],
    done: () => app.head !== opened.head,
  },
  {
    id: "concat",
    target: "heads-concat",
    enter: () => show("heads"),
    title: "lesson.gpt2.concat.title",
    body: () => {
      const c = cfg();
      if (!c) return [];
      const width = c.n_head * c.head_dim;
      // the widths the text quotes are those of the two strips: the concatenation (its head outlined) and attn_out
      const vars = { nHead: int("n-head", c.n_head), dHead: int("d-head", c.head_dim), width: int("concat-width", width, "heads-concat"),
        d: int("d-model", c.n_embd, "heads-out"), head: headVal() };
      return [
        say("lesson.gpt2.concat.body", vars),
        either(width === c.n_embd, "lesson.gpt2.concat.fits", "lesson.gpt2.concat.other", vars),
        say("lesson.gpt2.concat.wo", vars),
      ];
    },
  },
];
