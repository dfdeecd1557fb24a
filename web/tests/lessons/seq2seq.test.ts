// Every step of the encoder-decoder lesson (src/lessons/seq2seq.ts) on the inputs below, across the page's
// tasks, the way the card runs it: the page's state (pages/seq2seq/state.svelte.ts) decodes the source on the
// server under test, each step's `enter` puts the page in its state and fetches what it reads, and its text
// is then checked like every lesson's (check.ts: placeholders, claims, number format). Where a step has a
// task, the test does it too (drags the slider, steps the decoder, types a wrong reference, sets the beam) and
// checks the text again. Run by tests/web/test_lesson_claims_seq2seq.py against a real server (TE_SERVER).
import { tick } from "svelte";
import { describe, expect, it } from "vitest";
import { seq2seqLesson } from "../../src/lessons/seq2seq";
import type { LessonStep, Text } from "../../src/lib/lesson";
import { s2sApi } from "../../src/pages/seq2seq/api";
import { COMPARE_BEAMS, s2s } from "../../src/pages/seq2seq/state.svelte";
import { s2sViews } from "../../src/pages/seq2seq/views.svelte";
import { problems } from "./check";
import type { ClaimContext, Seq2SeqClaimContext } from "./claims";

const SERVER = process.env.TE_SERVER;

/** (task, source): the tasks' own examples, edge cases (one token, repeated tokens, the longest source), and
 *  inputs unlike the training data (leading zeros), where the models are unsure and beam search can differ. */
const ALL_INPUTS: readonly [string, string][] = [
  ["reverse", "hello"], ["reverse", "transformer"], ["reverse", "a"], ["reverse", "zz"], ["reverse", "level"],
  ["reverse", "aaaaaaaaaaaa"], ["reverse", "abcabcabcabc"],
  ["number_words", "1234"], ["number_words", "90017"], ["number_words", "7"], ["number_words", "999999"],
  ["number_words", "010"], ["number_words", "007"],
  ["number_words_zh", "1234"], ["number_words_zh", "20050607"], ["number_words_zh", "10"], ["number_words_zh", "0000"],
  ["dates", "March 5, 2021"], ["dates", "5 Mar 1999"], ["dates", "December 31st, 2099"], ["dates", "14.07.1989"],
  ["dates", "1 January 1900"],
];
/** TE_INPUTS (JSON pairs) runs a few of them, while iterating; the coverage of both wordings is then not asked. */
const INPUTS: readonly [string, string][] = process.env.TE_INPUTS ? JSON.parse(process.env.TE_INPUTS) : ALL_INPUTS;

/** The page as a learner meets it: this task and source, greedy, the views at their defaults. */
async function start(task: string, text: string): Promise<void> {
  if (!s2s.loaded) await s2s.load();
  if (s2s.task !== task) s2s.setTask(task);
  s2s.text = text;
  s2s.beam = 1;
  s2s.run = null;
  s2s.reference = "";
  s2s.encLayer = 0;
  s2s.encHead = 0;
  s2s.decLayer = 1;
  s2s.decHead = 0;
  s2sViews.nPos = 64;
  s2sViews.shown = 1;
  await s2s.decode();
  if (s2s.error || !s2s.decoded) throw new Error(`${task} ${JSON.stringify(text)} did not decode: ${s2s.error}`);
}

/** The step's text once what it reads has arrived. */
async function read(step: LessonStep, enter = true): Promise<{ body: Text; task: Text }> {
  if (enter) await step.enter?.();
  for (let k = 0; k < 20; k++) {
    await tick();
    const body = step.body();
    if (body.length) return { body, task: step.task?.() ?? [] };
    await new Promise((r) => setTimeout(r, 50));
  }
  return { body: [], task: step.task?.() ?? [] };
}

/** The claims' context: the page's state now, and its API asked again for the same task, source and model. */
function context(): ClaimContext {
  const task = s2s.task, text = s2s.text, run = s2s.run;
  const seq2seq: Seq2SeqClaimContext = {
    task, text, run,
    focus: { encLayer: s2s.encLayer, encHead: s2s.encHead, decLayer: s2s.decLayer, decHead: s2s.decHead,
      shown: s2sViews.shown, nPos: s2sViews.nPos, beam: s2s.beam, reference: s2s.reference },
    decode: (beam, compareBeams = []) => s2sApi.decode({ task, text, beam, top_k: 5, run, compare_beams: compareBeams }),
    compare: (target) => s2sApi.compare({ task, text, target, run }),
    positions: (n) => s2sApi.positions({ task, n_positions: n }),
    tasks: () => s2sApi.tasks(),
  };
  // the decoder-model page's values do not exist here: a check that asks for them fails, saying so
  const none = (what: string): never => { throw new Error(`${what}: the encoder-decoder page has no decoder-model trace`); };
  return {
    get trace() { return none("trace"); }, get next() { return none("next"); }, get model() { return none("model"); },
    get focus() { return none("focus"); }, tensor: () => none("tensor"), seq2seq,
  };
}

/** What a learner does for a step's task, where the text changes with it (the task's own values are used);
 *  false where the task cannot be done on this input (nothing to step through). */
const TASKS: Record<string, (task: Text) => Promise<boolean | void>> = {
  beyond: async () => { s2sViews.nPos = 160; await s2sViews.loadPositions(); },
  encoder: async () => { s2s.encHead = (s2s.encHead + 1) % (s2s.decoded?.n_heads ?? 1); },
  start: async () => { s2sViews.shown = s2s.decoded?.steps.length ?? 1; },
  cross: async () => { s2s.decHead = (s2s.decHead + 1) % (s2s.decoded?.n_heads ?? 1); },
  "teacher-forcing": async (task) => {
    const ex = task[0]?.vars?.ex;
    if (!(typeof ex === "object" && "raw" in ex)) return false;
    s2s.reference = String(ex.raw);
    await s2sViews.loadCompare();
  },
  beam: async (task) => {
    const b = task[0]?.vars?.b;
    s2s.beam = typeof b === "object" && "raw" in b ? Number(b.raw) : 3;
    await s2s.decode();
  },
};

describe.skipIf(!SERVER)("the encoder-decoder lesson's claims", () => {
  it(`every step, on ${INPUTS.length} inputs across the tasks, says only what its numbers show`, async () => {
    expect(COMPARE_BEAMS).toContain(1);
    const failures: string[] = [];
    const said = new Set<string>();
    for (const [task, text] of INPUTS) {
      await start(task, text);
      for (const step of seq2seqLesson.steps) {
        const where = `${task} ${JSON.stringify(text)} ${step.id}`;
        const check = async (t: { body: Text; task: Text }, when: string) => {
          if (!t.body.length) { failures.push(`${where}${when}: the text never loaded`); return; }
          for (const s of [...t.body, ...t.task]) if (s.claim) said.add(s.key);
          for (const p of await problems([...t.body, ...t.task], context())) failures.push(`${where}${when}: ${p}`);
        };
        const first = await read(step);
        await check(first, "");
        const act = TASKS[step.id];
        if (act && first.body.length) {
          if ((await act(first.task)) !== false) {
            await check(await read(step, false), " (after its task)");
            if (step.done && !step.done()) failures.push(`${where}: its task, done, is not ticked`);
          }
        }
      }
    }
    expect(failures, failures.join("\n")).toEqual([]);
    // the inputs reach both sides of the lesson's main conditions
    if (INPUTS !== ALL_INPUTS) return;
    for (const key of ["lesson.seq2seq.beam.same", "lesson.seq2seq.beam.differs", "lesson.seq2seq.encoder.later",
      "lesson.seq2seq.cosine.pair", "lesson.seq2seq.cosine.one", "lesson.seq2seq.tf.agree", "lesson.seq2seq.tf.leave",
      "lesson.seq2seq.beyond.past", "lesson.seq2seq.heads.position", "lesson.seq2seq.tf.noReference"]) {
      expect(said, `no input made the lesson say ${key}`).toContain(key);
    }
  });
});
