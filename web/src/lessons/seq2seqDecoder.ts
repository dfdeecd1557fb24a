// The encoder-decoder lesson's decoder steps (lessons/seq2seq.ts assembles the lesson): the start token, the masked
// self-attention, cross-attention, teacher forcing, beam search and training, told with the decode the page shows.
import { untrack } from "svelte";
import type { DecodeOut } from "../lib/generated/api";
import { claim, say, type LessonStep, type Text } from "../lib/lesson";
import { dec, int, outputText, pct, tokenText, word } from "../lib/lessonFormat";
import { s2s } from "../pages/seq2seq/state.svelte";
import { s2sViews } from "../pages/seq2seq/views.svelte";
import { decoded, emptyNote, lh, showTab } from "./reader";

/** The current step of the step-by-step decoder view (0-based) and its record. */
function current() {
  const d = decoded();
  if (!d || !d.steps.length) return null;
  const k = Math.min(Math.max(1, s2sViews.shown), d.steps.length) - 1;
  return { d, k, st: d.steps[k] };
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


export const decoderSteps: LessonStep[] = [
  {
    id: "start",
    target: "s2s-now",
    controls: ["s2s-player"],
    enter: async () => {
      await showTab("decoder");
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
        say("lesson.seq2seq.start.first", { tok: tokenText("s2s-step0-token", d.steps[0].token, first),
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
      await showTab("decoder");
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
      await showTab("decoder");
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
      const vars = { ...lh(s2s.decLayer, s2s.decHead, "s2s-cross"), out: tokenText("s2s-cross-out", d.steps[0].token, at),
        src: tokenText("s2s-cross-src", d.src_tokens[j], at), j: int("s2s-cross-src-pos", j),
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
      await showTab("compare");
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
      const ref = outputText("s2s-tf-ref", c.target, at);
      const j = c.first_divergence;
      if (j === null) {
        out.push(claim("lesson.seq2seq.tf.agree", { ref, n: int("s2s-tf-positions", N, at) }));
        return out;
      }
      const st = c.steps[j];
      const tokenOr = (t: string | null) => t ?? "";
      const part = { s: int("s2s-tf-step", j + 1), ref, own: tokenText("s2s-tf-own", tokenOr(st.free_token), at),
        gold: tokenText("s2s-tf-gold", tokenOr(st.gold), at) };
      // the later positions fed the reference: after j, up to the end token
      const later = c.steps.slice(j + 1, N).filter((s) => s.gold !== null);
      if (!later.length) {
        out.push(claim("lesson.seq2seq.tf.last", part));
        return out;
      }
      const right = later.filter((s) => s.teacher_token === s.gold).length;
      out.push(claim("lesson.seq2seq.tf.leave", { ...part, r: int("s2s-tf-later-right", right, at),
        m: int("s2s-tf-later", later.length), free: outputText("s2s-free-text", c.free_text, at) }));
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
      await showTab("decoder");
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
          out: outputText("s2s-beam-output", greedy.output, at), score: dec("s2s-beam-score", greedy.score, at),
          pmin: pct("s2s-beam-pmin", Math.min(...d.steps.map((s) => s.prob))) }), ...emptyNote(greedy.output));
      } else {
        const vars = { b: int("s2s-beam-width", differs.beam), bout: outputText("s2s-beam-output", differs.output, at),
          bscore: dec("s2s-beam-score", differs.score, at), gout: outputText("s2s-greedy-output", greedy.output, at),
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
      await showTab("decoder");
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
