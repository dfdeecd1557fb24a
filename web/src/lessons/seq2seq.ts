// The encoder-decoder page's guided lesson: the original Transformer of "Attention Is All You Need", in the
// order a source flows through it, each step told with the numbers of the learner's own source, read from
// the same /api/seq2seq answers the page's views show (s2s.decoded; the positional-encoding and compare
// answers in s2sViews, fetched by the step that needs them). Its words are the catalogue's
// (lesson.seq2seq.*); a sentence that depends on the numbers is a claim, chosen by a condition on them with
// another wording beside it, and web/tests/lessons/claims.seq2seq.ts checks each one.
import { tick, untrack } from "svelte";
import { visible } from "../lib/format";
import { isKey } from "../lib/i18n";
import { claim, say, val, type Lesson, type LessonStep, type Text, type Value, type Var } from "../lib/lesson";
import { dec, int, pct, term, word } from "../lib/lessonFormat";
import type { DecodeOut } from "../lib/generated/api";
import { s2s, type Tab } from "../pages/seq2seq/state.svelte";
import { s2sViews } from "../pages/seq2seq/views.svelte";

// -- the numbers the steps read ------------------------------------------------------------------------

/** The paper's base model (Vaswani et al. 2017, Table 3): about 65 million parameters. */
const PAPER_PARAMS = 65e6;
/** Attention weights from this size on count as "clearly looked at" (a later token, a cross-attention's focus). */
const CLEAR = 0.1;
/** Cosines within this of 0 count as "nearly at right angles". */
const NEAR_RIGHT_ANGLE = 0.3;

const norm = (v: number[]) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const dot = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x * b[i], 0);
/** A token as the views show it (spaces visible); `raw` is its text. */
const tok = (id: string, text: string, at?: string): Value => val(id, visible(text), text, at);
/** An output (or source) text; an empty one shows as ∅, as the views show it. */
const shown = (id: string, text: string, at?: string): Value => val(id, text || "∅", text, at);
/** The note that says what ∅ is, where a text quotes an empty output. */
const emptyNote = (...texts: string[]): Text => (texts.some((t) => !t) ? [say("lesson.seq2seq.empty")] : []);

/** A task's name: the catalogue's, in the reader's language, for the tasks the page knows. */
function taskOf(name: string): Var {
  const key = `s2s.t_${name}`;
  return isKey(key) ? say(key) : word("s2s-task", name);
}

/** The decode the page shows, once loaded and without an error. */
function decoded(): DecodeOut | null {
  return s2s.error ? null : s2s.decoded;
}

/** The current step of the step-by-step decoder view (0-based) and its record. */
function current() {
  const d = decoded();
  if (!d || !d.steps.length) return null;
  const k = Math.min(Math.max(1, s2sViews.shown), d.steps.length) - 1;
  return { d, k, st: d.steps[k] };
}

async function show(tab: Tab): Promise<void> {
  s2s.tab = tab;
  await tick();
}

/** Layer and head names as the views write them. */
const lh = (l: number, h: number, p = "s2s") => ({ l: int(`${p}-layer`, l), h: int(`${p}-head`, h) });

/** In every layer and head of the encoder: the largest weight a token gives to a token after it. */
function laterWeights(d: DecodeOut) {
  const out: { l: number; h: number; q: number; k: number; w: number }[] = [];
  d.encoder_attn.forEach((heads, l) => heads.forEach((m, h) => {
    let best = { l, h, q: 0, k: 0, w: -1 };
    m.forEach((row, q) => row.forEach((w, k) => { if (k > q && w > best.w) best = { l, h, q, k, w }; }));
    out.push(best);
  }));
  return out;
}

/** Relative positions a head may keep its weight on, by the key they pick for query q of S. */
const RELATIONS = {
  relSelf: (q: number) => q,
  relPrev: (q: number) => q - 1,
  relNext: (q: number) => q + 1,
  relMirror: (q: number, S: number) => S - 1 - q,
} as const;
type Relation = keyof typeof RELATIONS;

/** The encoder head and relative position that hold the most weight on average (over the queries that have such
 *  a key; at least two of them). */
function positionalHead(d: DecodeOut): { l: number; h: number; rel: Relation; w: number } | null {
  const S = d.src_tokens.length;
  let best: { l: number; h: number; rel: Relation; w: number } | null = null;
  for (const [l, heads] of d.encoder_attn.entries()) {
    for (const [h, m] of heads.entries()) {
      for (const rel of Object.keys(RELATIONS) as Relation[]) {
        const ws: number[] = [];
        for (let q = 0; q < S; q++) {
          const k = RELATIONS[rel](q, S);
          if (k >= 0 && k < S) ws.push(m[q][k]);
        }
        if (ws.length < 2) continue;
        const w = ws.reduce((a, b) => a + b, 0) / ws.length;
        if (!best || w > best.w) best = { l, h, rel, w };
      }
    }
  }
  return best;
}

/** The decoder layer and head whose cross-attention rows are sharpest (highest mean of the row maxima). */
function sharpestCross(d: DecodeOut) {
  let best = { l: s2s.decLayer, h: s2s.decHead, w: -1 };
  for (let l = 0; l < d.n_decoder_layers; l++) {
    for (let h = 0; h < d.n_heads; h++) {
      const w = d.steps.reduce((s, st) => s + Math.max(...st.cross_attn[l][h]), 0) / Math.max(1, d.steps.length);
      if (w > best.w) best = { l, h, w };
    }
  }
  return best;
}

/** The source's distinct tokens with their (scaled) embedding rows, in order of first appearance. */
function distinctRows(d: DecodeOut): { text: string; row: number[] }[] {
  const seen = new Map<string, number[]>();
  d.src_tokens.forEach((t, p) => { if (!seen.has(t)) seen.set(t, d.source!.embed[p]); });
  return [...seen].map(([text, row]) => ({ text, row }));
}

/** A reference with one token near its start replaced by the model's runner-up there (not the end token). */
function wrongReference(d: DecodeOut): string | null {
  const words = s2s.info?.tgt_level === "word";
  const j = d.tokens.length >= 3 ? 1 : 0;
  const alt = d.steps[j]?.top.find((c) => c.token !== d.tokens[j] && !c.token.startsWith("<") && c.token !== "</s>");
  if (!alt || !d.tokens.length) return null;
  const toks = d.tokens.map((t, i) => (i === j ? alt.token : t));
  return words ? toks.join(" ") : toks.join("");
}

/** The compare answer for the page's current source and task, once it has come. */
function comparison() {
  const c = s2sViews.compare;
  const target = s2s.reference.trim();
  return c && !s2sViews.compareFailed && c.input === s2s.text && c.task === s2s.task && c.run === s2s.run
    && (!target || c.target === target) ? c : null;
}

/** Greedy's decode among the page's beam comparisons, and the narrowest wider beam that writes something else
 *  or scores differently (scores are rounded to 6 decimals by the server). */
function beamComparison(d: DecodeOut) {
  const greedy = d.alternatives.find((a) => a.beam === 1);
  const differs = greedy && d.alternatives.find((a) => a.beam > 1
    && (a.tokens.join("\u0000") !== greedy.tokens.join("\u0000") || Math.abs(a.score - greedy.score) > 5e-4));
  return { greedy, differs };
}

/** The beam size the beam step asks for: the narrowest that writes something other than greedy, else 3. */
function beamTarget(): number {
  const d = decoded();
  return (d && beamComparison(d).differs?.beam) || 3;
}

// -- the steps --------------------------------------------------------------------------------------------

const steps: LessonStep[] = [
  {
    id: "task",
    target: "s2s-input",
    // untracked: the card runs `enter` inside an effect, and reading the text there would re-run it on every edit
    enter: () => { s2sViews.entered.text = untrack(() => s2s.text); },
    title: "lesson.seq2seq.task.title",
    body: () => {
      const d = decoded();
      if (!d) return [];
      const shape = {
        task: taskOf(d.task), enc: int("s2s-n-enc", d.n_encoder_layers, "s2s-model"),
        dec: int("s2s-n-dec", d.n_decoder_layers, "s2s-model"), h: int("s2s-n-heads", d.n_heads, "s2s-model"),
        dk: int("s2s-d-k", d.d_model / d.n_heads), d: int("s2s-d-model", d.d_model, "s2s-model"),
        ff: int("s2s-d-ff", d.d_ff, "s2s-model"), params: int("s2s-params", d.n_params, "s2s-model"),
      };
      const smaller = d.n_params < PAPER_PARAMS;
      const times = smaller ? int("s2s-paper-ratio", Math.round(PAPER_PARAMS / d.n_params))
        : dec("s2s-paper-ratio", d.n_params / PAPER_PARAMS);
      const S = d.src_tokens.length;
      const src = { src: word("s2s-input", d.input), n: int("s2s-n-src", S),
        out: shown("s2s-output", d.output, "s2s-output") };
      return [
        say("lesson.seq2seq.task.intro"),
        d.run ? say("lesson.seq2seq.task.run", { ...shape, run: word("s2s-run", d.run) })
          : say("lesson.seq2seq.task.shipped", shape),
        ...(!d.run && s2s.info?.checkpoint?.exact_match != null
          ? [say("lesson.seq2seq.task.em", { em: pct("s2s-exact-match", s2s.info.checkpoint.exact_match, "s2s-model") })] : []),
        say("lesson.seq2seq.task.paper"),
        claim(smaller ? "lesson.seq2seq.task.smaller" : "lesson.seq2seq.task.larger", { times }),
        S === 1 ? say("lesson.seq2seq.task.sourceOne", src) : say("lesson.seq2seq.task.source", src),
        ...emptyNote(d.output),
      ];
    },
    task: () => [say("lesson.seq2seq.task.do")],
    done: () => !!s2s.decoded && s2s.decoded.input !== s2sViews.entered.text,
  },
  {
    id: "why",
    target: "s2s-enc-attn",
    enter: () => show("encoder"),
    title: "lesson.seq2seq.why.title",
    body: () => {
      const d = decoded();
      if (!d) return [];
      const S = d.src_tokens.length;
      const n = int("s2s-why-n", S);
      return [
        S > 1 ? say("lesson.seq2seq.why.rnn", { n, gap: int("s2s-why-gap", S - 1) }) : say("lesson.seq2seq.why.rnnOne"),
        say("lesson.seq2seq.why.attention", { n, pairs: int("s2s-why-pairs", S * S) }),
        claim(S < d.d_model ? "lesson.seq2seq.why.cheaper" : "lesson.seq2seq.why.dearer",
          { n, d: int("s2s-why-d", d.d_model) }),
      ];
    },
  },
  {
    id: "onehot",
    target: "s2s-stages",
    enter: () => show("encoder"),
    title: "lesson.seq2seq.onehot.title",
    body: () => {
      const d = decoded();
      if (!d?.source) return [];
      const D = int("s2s-oh-d", d.d_model);
      return [
        say("lesson.seq2seq.onehot.lookup", { tok: tok("s2s-oh-token", d.src_tokens[0], "s2s-src-chips"),
          id: int("s2s-oh-id", d.src_ids[0], "s2s-src-chips"), v: int("s2s-oh-vocab", d.src_vocab_size), d: D }),
        say("lesson.seq2seq.onehot.dense", { d: D }),
      ];
    },
  },
  {
    id: "cosine",
    target: "s2s-stages",
    enter: () => show("encoder"),
    title: "lesson.seq2seq.cosine.title",
    body: () => {
      const d = decoded();
      if (!d?.source) return [];
      const rows = distinctRows(d);
      const text: Text = [say("lesson.seq2seq.cosine.def")];
      if (rows.length < 2) {
        text.push(claim("lesson.seq2seq.cosine.one", { a: tok("s2s-cos-a", rows[0].text) }));
        return text;
      }
      const pairs = rows.flatMap((a, i) => rows.slice(i + 1).map((b) => {
        const la = norm(a.row), lb = norm(b.row);
        return { a, b, la, lb, dot: dot(a.row, b.row), cos: dot(a.row, b.row) / (la * lb) };
      }));
      const top = pairs.reduce((x, y) => (y.cos > x.cos ? y : x));
      text.push(claim("lesson.seq2seq.cosine.pair", {
        a: tok("s2s-cos-a", top.a.text, "s2s-stages"), b: tok("s2s-cos-b", top.b.text, "s2s-stages"),
        dot: dec("s2s-cos-dot", top.dot), cos: term("s2s-cos", top.cos), la: dec("s2s-cos-la", top.la),
        lb: dec("s2s-cos-lb", top.lb),
      }));
      const lo = Math.min(...pairs.map((p) => p.cos)), hi = top.cos;
      const right = Math.max(-lo, hi) <= NEAR_RIGHT_ANGLE;
      if (pairs.length === 1) {
        text.push(claim(right ? "lesson.seq2seq.cosine.oneOrthogonal" : "lesson.seq2seq.cosine.oneApart"));
      } else {
        const range = { lo: dec("s2s-cos-lo", lo), hi: dec("s2s-cos-hi", hi) };
        text.push(claim(right ? "lesson.seq2seq.cosine.orthogonal" : "lesson.seq2seq.cosine.spread", range));
      }
      text.push(say("lesson.seq2seq.cosine.random", { d: int("s2s-cos-d", d.d_model),
        r: dec("s2s-cos-random", 2 / Math.sqrt(d.d_model)) }));
      return text;
    },
  },
  {
    id: "embedding",
    target: "s2s-stages",
    enter: () => show("encoder"),
    title: "lesson.seq2seq.embedding.title",
    body: () => {
      const d = decoded();
      if (!d?.source) return [];
      const D = int("s2s-d-model", d.d_model);
      const vs = int("s2s-src-vocab", d.src_vocab_size), vt = int("s2s-tgt-vocab", d.tgt_vocab_size);
      const scaled = norm(d.source.embed[0]);
      const raw = scaled / d.embed_scale;
      const pe = norm(d.source.pos_encoding[0]);
      const vars = { tok: tok("s2s-first-token", d.src_tokens[0], "s2s-stages"), raw: dec("s2s-embed-raw", raw, "s2s-stages"),
        scaled: dec("s2s-embed-norm", scaled, "s2s-stages"), d: D, scale: dec("s2s-embed-scale", d.embed_scale),
        pe: dec("s2s-pe-norm", pe, "s2s-stages") };
      // "of the same order": within a factor 2 once scaled, at least a factor 2 apart before
      const lifts = pe / raw >= 2 && scaled / pe >= 0.5 && scaled / pe <= 2;
      return [
        say("lesson.seq2seq.embedding.paper"),
        say("lesson.seq2seq.embedding.untied", { vs, vt, d: D }),
        d.src_vocab_size !== d.tgt_vocab_size ? claim("lesson.seq2seq.embedding.vocabDiffer", { vs, vt })
          : claim("lesson.seq2seq.embedding.vocabSame", { vs }),
        lifts ? claim("lesson.seq2seq.embedding.scale", { ...vars, ratio: dec("s2s-embed-ratio", pe / raw) })
          : claim("lesson.seq2seq.embedding.scaleOther", vars),
        say("lesson.seq2seq.embedding.why"),
      ];
    },
  },
  {
    id: "sinusoids",
    target: "s2s-sim",
    enter: async () => {
      if (untrack(() => s2sViews.nPos) < 64) s2sViews.nPos = 64;
      await show("positions");
      await s2sViews.loadPositions();
    },
    title: "lesson.seq2seq.sinusoids.title",
    body: () => {
      const P = s2sViews.positions;
      if (!P || P.n_positions < 15) return [];
      const at = "s2s-sim";
      const a = P.similarity[2][4], b = P.similarity[12][14], c = P.similarity[2][12];
      const vars = { a: dec("s2s-sim-2-4", a, at), b: dec("s2s-sim-12-14", b, at), c: dec("s2s-sim-2-12", c, at) };
      return [
        say("lesson.seq2seq.sinusoids.why"),
        claim(c < a ? "lesson.seq2seq.sinusoids.dots" : "lesson.seq2seq.sinusoids.dotsNot", vars),
      ];
    },
  },
  {
    id: "beyond",
    target: "s2s-pe-map",
    enter: async () => {
      await show("positions");
      await s2sViews.loadPositions();
    },
    title: "lesson.seq2seq.beyond.title",
    body: () => {
      const P = s2sViews.positions;
      if (!P || P.trained_length == null) return [];
      const vars = { t: int("s2s-trained-len", P.trained_length), n: int("s2s-n-pos", P.n_positions, "s2s-npos") };
      return [
        claim(P.n_positions > P.trained_length ? "lesson.seq2seq.beyond.past" : "lesson.seq2seq.beyond.within", vars),
        say("lesson.seq2seq.beyond.paper"),
      ];
    },
    task: () => [say("lesson.seq2seq.beyond.do", { slider: say("s2s.nPositions") })],
    controls: ["s2s-npos"],
    done: () => (s2sViews.positions?.n_positions ?? 0) >= 128,
  },
  {
    id: "encoder",
    target: "s2s-enc-attn",
    controls: ["s2s-enc-grid"],
    enter: async () => {
      await show("encoder");
      const d = untrack(decoded);
      const best = d ? laterWeights(d).reduce((x, y) => (y.w > x.w ? y : x), { l: 0, h: 0, q: 0, k: 0, w: -1 }) : null;
      if (best && best.w >= 0) { s2s.encLayer = best.l; s2s.encHead = best.h; }
      s2sViews.entered.layer = s2s.encLayer;
      s2sViews.entered.head = s2s.encHead;
    },
    title: "lesson.seq2seq.encoder.title",
    body: () => {
      const d = decoded();
      const S = d?.src_tokens.length ?? 0;
      const m = d?.encoder_attn[s2s.encLayer]?.[s2s.encHead];
      if (!d || !m || S < 1) return [];
      const at = "s2s-enc-attn";
      const out: Text = [say("lesson.seq2seq.encoder.nomask")];
      if (S === 1) out.push(claim("lesson.seq2seq.encoder.single", { w: dec("s2s-enc-w", m[0][0], at) }));
      else {
        const all = laterWeights(d);
        const here = all.find((x) => x.l === s2s.encLayer && x.h === s2s.encHead)!;
        const best = all.reduce((x, y) => (y.w > x.w ? y : x));
        const pick = (x: typeof here, p: string) => ({ q: tok(`${p}-q`, d.src_tokens[x.q], at), qi: int(`${p}-qi`, x.q),
          k: tok(`${p}-k`, d.src_tokens[x.k], at), ki: int(`${p}-ki`, x.k) });
        if (here.w >= CLEAR) {
          out.push(claim("lesson.seq2seq.encoder.later", { ...lh(s2s.encLayer, s2s.encHead, "s2s-enc"),
            ...pick(here, "s2s-enc"), w: dec("s2s-enc-w", here.w, at) }));
        } else if (best.w >= CLEAR) {
          out.push(claim("lesson.seq2seq.encoder.laterSmall", { ...lh(s2s.encLayer, s2s.encHead, "s2s-enc"),
            w: dec("s2s-enc-w", here.w, at), bl: int("s2s-enc-best-layer", best.l), bh: int("s2s-enc-best-head", best.h),
            ...pick(best, "s2s-enc-best"), bw: dec("s2s-enc-best-w", best.w) }));
        } else {
          out.push(claim("lesson.seq2seq.encoder.laterNone", { w: dec("s2s-enc-w", best.w) }));
        }
      }
      out.push(say("lesson.seq2seq.encoder.layer"));
      return out;
    },
    task: () => [say("lesson.seq2seq.encoder.do")],
    done: () => s2s.encLayer !== s2sViews.entered.layer || s2s.encHead !== s2sViews.entered.head,
  },
  {
    id: "heads",
    target: "s2s-enc-attn",
    controls: ["s2s-enc-grid"],
    enter: async () => {
      await show("encoder");
      const d = untrack(decoded);
      const best = d ? positionalHead(d) : null;
      if (best) { s2s.encLayer = best.l; s2s.encHead = best.h; }
    },
    title: "lesson.seq2seq.heads.title",
    body: () => {
      const d = decoded();
      if (!d) return [];
      const best = positionalHead(d);
      const out: Text = [say("lesson.seq2seq.heads.paper")];
      if (!best) out.push(claim("lesson.seq2seq.heads.single"));
      else {
        const vars = { ...lh(best.l, best.h, "s2s-heads"), w: dec("s2s-heads-w", best.w),
          rel: say(`lesson.seq2seq.heads.${best.rel}` as const) };
        out.push(claim(best.w >= 0.5 ? "lesson.seq2seq.heads.position" : "lesson.seq2seq.heads.mixed", vars));
      }
      return out;
    },
  },
  {
    id: "start",
    target: "s2s-now",
    controls: ["s2s-player"],
    enter: async () => {
      await show("decoder");
      s2sViews.shown = 1;
    },
    title: "lesson.seq2seq.start.title",
    body: () => {
      const d = decoded();
      if (!d || !d.steps.length) return [];
      const n = int("s2s-n-steps", d.steps.length), max = int("s2s-max-out", d.max_output_len);
      const first = s2sViews.shown === 1 ? "s2s-next" : undefined; // the chip shows the first step's prediction
      return [
        say("lesson.seq2seq.start.input", { vt: int("s2s-tgt-vocab", d.tgt_vocab_size), d: int("s2s-d-model", d.d_model) }),
        say("lesson.seq2seq.start.first", { tok: tok("s2s-step0-token", d.steps[0].token, first),
          p: pct("s2s-step0-prob", d.steps[0].prob, first) }),
        claim(d.finished ? "lesson.seq2seq.start.stops" : "lesson.seq2seq.start.limit", { n, max }),
      ];
    },
    task: () => [say("lesson.seq2seq.start.do", { step: say("s2s.step") })],
    done: () => { const d = decoded(); return !!d && d.steps.length > 0 && s2sViews.shown >= d.steps.length; },
  },
  {
    id: "masked",
    target: "s2s-self-map",
    enter: async () => {
      await show("decoder");
      // a few steps in, so that there is a past to see and a future to hide
      const total = untrack(() => s2s.decoded?.steps.length ?? 1);
      s2sViews.shown = Math.max(untrack(() => s2sViews.shown), Math.min(3, total));
    },
    title: "lesson.seq2seq.masked.title",
    body: () => {
      const c = current();
      const row = c?.st.self_attn[s2s.decLayer]?.[s2s.decHead];
      if (!c || !row) return [];
      const at = "s2s-self-map";
      return [
        say("lesson.seq2seq.masked.rule", { k: int("s2s-self-step", c.k + 1),
          seen: int("s2s-self-seen", row.length), w: dec("s2s-self-start", row[0], at) }),
        say("lesson.seq2seq.masked.inference"),
        say("lesson.seq2seq.masked.training"),
      ];
    },
  },
  {
    id: "cross",
    target: "s2s-cross-map",
    controls: ["s2s-cross-grid"],
    enter: async () => {
      await show("decoder");
      const d = untrack(decoded);
      if (d) {
        const best = sharpestCross(d);
        s2s.decLayer = best.l;
        s2s.decHead = best.h;
        s2sViews.shown = d.steps.length; // every row: the whole alignment
      }
      s2sViews.entered.layer = s2s.decLayer;
      s2sViews.entered.head = s2s.decHead;
    },
    title: "lesson.seq2seq.cross.title",
    body: () => {
      const d = decoded();
      const row = d?.steps[0]?.cross_attn[s2s.decLayer]?.[s2s.decHead];
      if (!d || !row || !row.length) return [];
      // the first output token's row: on the map whatever the step shown
      const j = row.indexOf(Math.max(...row));
      const at = "s2s-cross-map";
      const vars = { ...lh(s2s.decLayer, s2s.decHead, "s2s-cross"), out: tok("s2s-cross-out", d.steps[0].token, at),
        src: tok("s2s-cross-src", d.src_tokens[j], at), j: int("s2s-cross-src-pos", j),
        w: dec("s2s-cross-weight", row[j], at) };
      return [
        say("lesson.seq2seq.cross.how"),
        claim(row[j] >= 0.5 ? "lesson.seq2seq.cross.sharp" : "lesson.seq2seq.cross.spread", vars),
      ];
    },
    task: () => [say("lesson.seq2seq.cross.do")],
    done: () => s2s.decLayer !== s2sViews.entered.layer || s2s.decHead !== s2sViews.entered.head,
  },
  {
    id: "teacher-forcing",
    target: "s2s-compare-top",
    controls: ["s2s-compare-top"],
    enter: async () => {
      await show("compare");
      await s2sViews.loadCompare();
    },
    title: "lesson.seq2seq.tf.title",
    body: () => {
      const c = comparison();
      const failed = s2sViews.compareFailed;
      if (!c && failed && failed.task === s2s.task && failed.text === s2s.text && failed.run === s2s.run) {
        const vars = { field: say("s2s.reference"), compare: say("s2s.compare") };
        return [say("lesson.seq2seq.tf.what"), failed.target === null ? claim("lesson.seq2seq.tf.noReference", vars)
          : claim("lesson.seq2seq.tf.refused", { ...vars, ref: word("s2s-tf-ref", failed.target, "s2s-compare-top"),
            why: word("s2s-tf-why", failed.message, "s2s-compare-top") })];
      }
      if (!c) return [];
      const at = "s2s-compare-top";
      const N = c.gold_tokens.length + 1; // the reference's tokens and the end token
      const out: Text = [say("lesson.seq2seq.tf.what")];
      const ref = shown("s2s-tf-ref", c.target, at);
      const j = c.first_divergence;
      if (j === null) {
        out.push(claim("lesson.seq2seq.tf.agree", { ref, n: int("s2s-tf-positions", N, at) }));
        return out;
      }
      const st = c.steps[j];
      const tokenOr = (t: string | null) => t ?? "";
      const part = { s: int("s2s-tf-step", j + 1), ref, own: tok("s2s-tf-own", tokenOr(st.free_token), at),
        gold: tok("s2s-tf-gold", tokenOr(st.gold), at) };
      // the later positions fed the reference: after j, up to the end token
      const later = c.steps.slice(j + 1, N).filter((s) => s.gold !== null);
      if (!later.length) {
        out.push(claim("lesson.seq2seq.tf.last", part));
        return out;
      }
      const right = later.filter((s) => s.teacher_token === s.gold).length;
      out.push(claim("lesson.seq2seq.tf.leave", { ...part, r: int("s2s-tf-later-right", right, at),
        m: int("s2s-tf-later", later.length), free: shown("s2s-free-text", c.free_text, at) }));
      out.push(...emptyNote(c.free_text));
      out.push(right === later.length ? claim("lesson.seq2seq.tf.recovers")
        : claim("lesson.seq2seq.tf.derails", { miss: int("s2s-tf-later-miss", later.length - right, at) }));
      return out;
    },
    task: () => {
      const d = decoded();
      const ex = d ? wrongReference(d) : null;
      const compare = say("s2s.compare");
      return [ex ? say("lesson.seq2seq.tf.do", { ex: word("s2s-tf-example", ex), compare })
        : say("lesson.seq2seq.tf.doPlain", { compare })];
    },
    done: () => !!s2s.reference.trim() && comparison()?.first_divergence != null,
  },
  {
    id: "beam",
    target: "s2s-beams",
    controls: ["s2s-beam"],
    enter: async () => {
      await show("decoder");
      await s2s.ensureAlternatives();
    },
    title: "lesson.seq2seq.beam.title",
    body: () => {
      const d = decoded();
      if (!d || !d.steps.length) return [];
      const { greedy, differs } = beamComparison(d);
      if (!greedy) return [];
      const at = "s2s-beams";
      const out: Text = [say("lesson.seq2seq.beam.what")];
      if (!differs) {
        out.push(claim("lesson.seq2seq.beam.same", { maxb: int("s2s-beam-max", Math.max(...d.alternatives.map((a) => a.beam))),
          out: shown("s2s-beam-output", greedy.output, at), score: dec("s2s-beam-score", greedy.score, at),
          pmin: pct("s2s-beam-pmin", Math.min(...d.steps.map((s) => s.prob))) }), ...emptyNote(greedy.output));
      } else {
        const vars = { b: int("s2s-beam-width", differs.beam), bout: shown("s2s-beam-output", differs.output, at),
          bscore: dec("s2s-beam-score", differs.score, at), gout: shown("s2s-greedy-output", greedy.output, at),
          gscore: dec("s2s-greedy-score", greedy.score, at) };
        out.push(claim(differs.score > greedy.score ? "lesson.seq2seq.beam.differs" : "lesson.seq2seq.beam.differsLower",
          vars), ...emptyNote(differs.output, greedy.output));
      }
      if (d.beam > 1 && d.beams[0]) {
        out.push(say("lesson.seq2seq.beam.kept", { b: int("s2s-beam-size", d.beam),
          kept: int("s2s-beam-kept", d.beams[0].alive.length + d.beams[0].finished.length, "s2s-beam-table") }));
      }
      return out;
    },
    task: () => [say("lesson.seq2seq.beam.do", { beam: say("s2s.beam"), b: int("s2s-beam-target", beamTarget()) })],
    done: () => { const b = beamTarget(); return s2s.beam === b && s2s.decoded?.beam === b; },
  },
  {
    id: "training",
    target: "s2s-now",
    enter: async () => {
      await show("decoder");
      s2sViews.shown = 1;
    },
    title: "lesson.seq2seq.training.title",
    body: () => {
      const d = decoded();
      if (!d || !d.steps.length) return [];
      const V = d.tgt_vocab_size;
      const ceil = 0.9 + 0.1 / V;
      const p0 = d.steps[0].prob;
      const vars = { v: int("s2s-train-vocab", V), ceil: pct("s2s-train-ceiling", ceil),
        p0: pct("s2s-train-top-prob", p0, "s2s-next") };
      const out: Text = [
        say("lesson.seq2seq.training.how", { v: vars.v }),
        claim(Math.abs(p0 - ceil) <= 0.03 ? "lesson.seq2seq.training.near"
          : p0 < ceil ? "lesson.seq2seq.training.below" : "lesson.seq2seq.training.above", vars),
      ];
      out.push(say("lesson.seq2seq.training.live", { tab: say("s2s.tab_training") }));
      return out;
    },
  },
];

export const seq2seqLesson: Lesson = {
  id: "seq2seq",
  title: "lesson.seq2seq.title",
  steps,
};
