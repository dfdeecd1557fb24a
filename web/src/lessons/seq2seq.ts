// The encoder-decoder page's guided lesson: the original Transformer of "Attention Is All You Need", in the
// order a source flows through it, each step told with the numbers of the learner's own source, read from
// the same /api/seq2seq answers the page's views show (s2s.decoded; the positional-encoding and compare
// answers in s2sViews, fetched by the step that needs them). Its words are the catalogue's
// (lesson.seq2seq.*); a sentence that depends on the numbers is a claim, chosen by a condition on them with
// another wording beside it, and web/tests/lessons/claims.seq2seq.ts checks each one.
//
// The source's steps are here; the decoder's (from the start token on) in seq2seqDecoder.ts.
import { untrack } from "svelte";
import type { DecodeOut } from "../lib/generated/api";
import { isKey } from "../lib/i18n";
import { claim, say, type Lesson, type LessonStep, type Text, type Var } from "../lib/lesson";
import { dec, int, outputText, pct, term, tokenText, word } from "../lib/lessonFormat";
import { s2s } from "../pages/seq2seq/state.svelte";
import { s2sViews } from "../pages/seq2seq/views.svelte";
import { decoded, dot, emptyNote, lh, norm, showTab } from "./reader";
import { decoderSteps } from "./seq2seqDecoder";

// -- the numbers the steps read ------------------------------------------------------------------------

/** The paper's base model (Vaswani et al. 2017, Table 3): about 65 million parameters. */
const PAPER_PARAMS = 65e6;
/** Attention weights from this size on count as "clearly looked at" (a later token, a cross-attention's focus). */
const CLEAR = 0.1;
/** Cosines within this of 0 count as "nearly at right angles". */
const NEAR_RIGHT_ANGLE = 0.3;

/** A task's name: the catalogue's, in the reader's language, for the tasks the page knows. */
function taskOf(name: string): Var {
  const key = `s2s.t_${name}`;
  return isKey(key) ? say(key) : word("s2s-task", name);
}

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

/** The source's distinct tokens with their (scaled) embedding rows, in order of first appearance. */
function distinctRows(d: DecodeOut): { text: string; row: number[] }[] {
  const seen = new Map<string, number[]>();
  d.src_tokens.forEach((t, p) => { if (!seen.has(t)) seen.set(t, d.source!.embed[p]); });
  return [...seen].map(([text, row]) => ({ text, row }));
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
        out: outputText("s2s-output", d.output, "s2s-output") };
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
    enter: () => showTab("encoder"),
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
    enter: () => showTab("encoder"),
    title: "lesson.seq2seq.onehot.title",
    body: () => {
      const d = decoded();
      if (!d?.source) return [];
      const D = int("s2s-oh-d", d.d_model);
      return [
        say("lesson.seq2seq.onehot.lookup", { tok: tokenText("s2s-oh-token", d.src_tokens[0], "s2s-src-chips"),
          id: int("s2s-oh-id", d.src_ids[0], "s2s-src-chips"), v: int("s2s-oh-vocab", d.src_vocab_size), d: D }),
        say("lesson.seq2seq.onehot.dense", { d: D }),
      ];
    },
  },
  {
    id: "cosine",
    target: "s2s-stages",
    enter: () => showTab("encoder"),
    title: "lesson.seq2seq.cosine.title",
    body: () => {
      const d = decoded();
      if (!d?.source) return [];
      const rows = distinctRows(d);
      const text: Text = [say("lesson.seq2seq.cosine.def")];
      if (rows.length < 2) {
        text.push(claim("lesson.seq2seq.cosine.one", { a: tokenText("s2s-cos-a", rows[0].text) }));
        return text;
      }
      const pairs = rows.flatMap((a, i) => rows.slice(i + 1).map((b) => {
        const la = norm(a.row), lb = norm(b.row);
        return { a, b, la, lb, dot: dot(a.row, b.row), cos: dot(a.row, b.row) / (la * lb) };
      }));
      const top = pairs.reduce((x, y) => (y.cos > x.cos ? y : x));
      text.push(claim("lesson.seq2seq.cosine.pair", {
        a: tokenText("s2s-cos-a", top.a.text, "s2s-stages"), b: tokenText("s2s-cos-b", top.b.text, "s2s-stages"),
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
    enter: () => showTab("encoder"),
    title: "lesson.seq2seq.embedding.title",
    body: () => {
      const d = decoded();
      if (!d?.source) return [];
      const D = int("s2s-d-model", d.d_model);
      const vs = int("s2s-src-vocab", d.src_vocab_size), vt = int("s2s-tgt-vocab", d.tgt_vocab_size);
      const scaled = norm(d.source.embed[0]);
      const raw = scaled / d.embed_scale;
      const pe = norm(d.source.pos_encoding[0]);
      const vars = { tok: tokenText("s2s-first-token", d.src_tokens[0], "s2s-stages"), raw: dec("s2s-embed-raw", raw, "s2s-stages"),
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
      await showTab("positions");
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
      await showTab("positions");
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
      await showTab("encoder");
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
        const pick = (x: typeof here, p: string) => ({ q: tokenText(`${p}-q`, d.src_tokens[x.q], at), qi: int(`${p}-qi`, x.q),
          k: tokenText(`${p}-k`, d.src_tokens[x.k], at), ki: int(`${p}-ki`, x.k) });
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
      await showTab("encoder");
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
  ...decoderSteps,
];

export const seq2seqLesson: Lesson = {
  id: "seq2seq",
  title: "lesson.seq2seq.title",
  steps,
};
