// The GPT-2 lesson's output steps (lessons/gpt2.ts assembles the lesson): the unembedding, the probabilities of the
// next token, temperature, top-k and top-p, the sampled token and the KV cache.
import { claim, either, say, type LessonStep, type Text } from "../lib/lesson";
import { dec, int, pct, token } from "../lib/lessonFormat";
import { app, DEFAULT_SAMPLING } from "../lib/state.svelte";
import { cfg, nTok, opened, show } from "./reader";

/** A top guess under this many times 1/V is close to an even spread. */
const NEAR_EVEN = 20;

export const outputSteps: LessonStep[] = [
  {
    id: "unembed",
    target: "logits",
    enter: () => show("output"),
    title: "lesson.gpt2.unembed.title",
    body: () => {
      const c = cfg(), top = app.next?.candidates[0];
      if (!c || !top) return [];
      const vars = { vocab: int("vocab", c.vocab_size), saved: int("saved", c.vocab_size * c.n_embd) };
      return [
        either(c.tie_word_embeddings !== false, "lesson.gpt2.unembed.tied", "lesson.gpt2.unembed.untied", vars),
        say("lesson.gpt2.unembed.top", { top: token("top-token", top.text, top.id, "cand-0"), logit: dec("top-logit", top.logit, "cand-0") }),
      ];
    },
  },
  {
    id: "probs",
    target: "candidates",
    enter: () => show("output"),
    title: "lesson.gpt2.probs.title",
    body: () => {
      const nx = app.next, c = cfg();
      if (!nx || !c || nx.candidates.length < 2) return [];
      const [c1, c2] = nx.candidates;
      const t1 = token("top-token", c1.text, c1.id, "cand-0"), p1 = pct("top-prob-nocut", c1.prob_no_cut);
      const out: Text = [say("lesson.gpt2.probs.body")];
      if (nx.greedy) out.push(claim("lesson.gpt2.probs.greedy", { top: t1 }));
      else {
        const gap = c1.logit - c2.logit;
        out.push(claim("lesson.gpt2.probs.pair", { top: t1, p1, second: token("second-token", c2.text, c2.id, "cand-1"),
          p2: pct("second-prob-nocut", c2.prob_no_cut), gap: dec("logit-gap", gap), T: dec("temperature", nx.temperature),
          ratio: dec("prob-ratio", c1.prob_no_cut / c2.prob_no_cut) }));
        const even = 1 / c.vocab_size;
        const vars = { top: t1, p1, vocab: int("vocab", c.vocab_size), even: pct("even-prob", even), times: dec("times-even", c1.prob_no_cut / even) };
        out.push(either(c1.prob_no_cut >= NEAR_EVEN * even, "lesson.gpt2.probs.aboveEven", "lesson.gpt2.probs.nearEven", vars));
      }
      const cut = nx.candidates.find((x) => !x.kept);
      out.push(cut ? claim("lesson.gpt2.probs.grey", { cut: token("first-cut", cut.text, cut.id, "cand-cut") }) : claim("lesson.gpt2.probs.noGrey"));
      return out;
    },
  },
  {
    id: "temperature",
    target: "sampling",
    controls: ["temperature"],
    enter: () => show("output"),
    title: "lesson.gpt2.temperature.title",
    body: () => {
      const nx = app.next, c = cfg(), top = nx?.candidates[0];
      if (!nx || !c || !top) return [];
      const vars = { top: token("top-token", top.text, top.id, "cand-0"), p: pct("top-prob", top.prob, "cand-0"),
        pNoCut: pct("top-prob-nocut", top.prob_no_cut), kept: int("n-kept", nx.n_kept) };
      return [
        say("lesson.gpt2.temperature.body", { T: dec("temperature", nx.temperature) }),
        nx.greedy ? claim("lesson.gpt2.temperature.greedy", vars)
          : either(nx.n_kept < c.vocab_size, "lesson.gpt2.temperature.cut", "lesson.gpt2.temperature.noCut", vars),
      ];
    },
    task: () => [say("lesson.gpt2.temperature.task")],
    done: () => (app.sampling.temperature ?? 1) >= 1.9,
  },
  {
    id: "top-k",
    target: "sampling",
    controls: ["top-k"],
    enter: () => show("output"),
    title: "lesson.gpt2.top-k.title",
    body: () => {
      const nx = app.next, c = cfg();
      if (!nx || !c) return [];
      const k = nx.top_k, kept = int("n-kept", nx.n_kept), d = int("default-k", DEFAULT_SAMPLING.top_k ?? 0);
      const out: Text = [];
      if (k != null && !nx.greedy) {
        out.push(claim("lesson.gpt2.top-k.on", { k: int("top-k", k), kept }));
        // the probability the cut removes, when every token top-k keeps is among the listed candidates
        const listed = nx.candidates.slice(0, k);
        const next = nx.candidates[k];
        if (k < nx.candidates.length && next) {
          const tail = 1 - listed.reduce((s, x) => s + x.prob_no_cut, 0);
          out.push(either(tail > 0.5, "lesson.gpt2.top-k.tailMost", "lesson.gpt2.top-k.tailLess", { tail: pct("tail-mass", tail),
            k: int("top-k", k), next: token("next-token", next.text, next.id), pNext: pct("next-prob", next.prob_no_cut) }));
        }
      } else if (nx.greedy) out.push(claim("lesson.gpt2.top-k.greedy"));
      else out.push(claim("lesson.gpt2.top-k.off", { kept }));
      out.push(say("lesson.gpt2.top-k.default", { k: d }));
      return out;
    },
    task: () => [say("lesson.gpt2.top-k.task")],
    done: () => app.sampling.top_k === 3,
  },
  {
    id: "top-p",
    target: "sampling",
    controls: ["top-p"],
    enter: () => show("output"),
    title: "lesson.gpt2.top-p.title",
    body: () => {
      const nx = app.next;
      if (!nx) return [];
      const kept = int("n-kept", nx.n_kept);
      return [
        say("lesson.gpt2.top-p.body"),
        nx.top_p != null && !nx.greedy ? claim("lesson.gpt2.top-p.on", { p: dec("top-p", nx.top_p), kept })
          : claim("lesson.gpt2.top-p.off", { kept }),
      ];
    },
    task: () => [say("lesson.gpt2.top-p.task")],
    done: () => app.sampling.top_p != null,
  },
  {
    id: "sample",
    target: "generate",
    enter: () => show("output"),
    title: "lesson.gpt2.sample.title",
    body: () => {
      const nx = app.next, top = nx?.candidates[0];
      if (!nx || !top) return [];
      const vars = { tok: token("sampled-token", nx.sampled.text, nx.sampled.id, "generate"), p: pct("sampled-prob", nx.sampled.prob),
        seed: int("seed", nx.seed), top: token("top-token", top.text, top.id), pTop: pct("top-prob", top.prob) };
      const out: Text = [say("lesson.gpt2.sample.body", vars)];
      if (nx.greedy) out.push(claim("lesson.gpt2.sample.greedy", vars));
      else if (nx.n_kept === 1) out.push(claim("lesson.gpt2.sample.one", vars));
      else out.push(either(nx.sampled.id === top.id, "lesson.gpt2.sample.top", "lesson.gpt2.sample.notTop", vars));
      out.push(say("lesson.gpt2.sample.why"));
      return out;
    },
  },
  {
    id: "kv-cache",
    target: "generate",
    controls: ["append"],
    enter: () => show("output"),
    title: "lesson.gpt2.kv-cache.title",
    body: () => {
      const tr = app.trace;
      if (!tr) return [];
      const [a, b] = tr.computed_positions;
      const one = b - a === 1 && tr.token_ids.length > 1;
      return [
        say(tr.token_ids.length > 1 ? "lesson.gpt2.kv-cache.body" : "lesson.gpt2.kv-cache.bodyOne", { T: int("n-tokens", tr.token_ids.length) }),
        one ? claim("lesson.gpt2.kv-cache.just", { pos: int("computed-pos", a) }) : claim("lesson.gpt2.kv-cache.try"),
        say("lesson.gpt2.kv-cache.ctx", { ctx: int("ctx", tr.config.block_size) }),
      ];
    },
    task: () => [say("lesson.gpt2.kv-cache.task", { button: say("ui.appendSampled") })],
    done: () => nTok() > opened.nTok,
  },
];
