// Every step of the induction lesson (src/lessons/induction.ts) on the records of real runs, the way the card runs it
// on the "Watch it learn" page: the page's state (pages/learn/state.svelte.ts) holds a run's records, each step's
// `enter` moves the scrub, and its text is checked like every lesson's (check.ts: placeholders, claims, number
// format) against the records as the log files hold them (claims.induction.ts). The runs: TE_INDUCTION_RUNS, a JSON
// file written by tests/web/test_lesson_claims_induction.py (the shipped run, and runs it trains); each run is read
// as a live run sees it too, record by record (its main run's records so far, then the control's).
import { readFileSync } from "node:fs";
import { tick } from "svelte";
import { describe, expect, it } from "vitest";
import { inductionLesson } from "../../src/lessons/induction";
import type { InductionConfigOut, InductionExample, InductionInfo, InductionRecord } from "../../src/lib/generated/api";
import type { Text } from "../../src/lib/lesson";
import { learn } from "../../src/pages/learn/state.svelte";
import { problems } from "./check";
import type { ClaimContext, InductionClaimContext } from "./claims";

interface Run { name: string; config: InductionConfigOut; example: InductionExample; main: InductionRecord[]; control: InductionRecord[] }

const FILE = process.env.TE_INDUCTION_RUNS;

/** The page showing `main` and `control` of a run as its recorded run. */
function show(run: Run, main: InductionRecord[], control: InductionRecord[]): void {
  learn.info = { example: run.example, recorded: { config: run.config, runs: {} } } as unknown as InductionInfo;
  learn.source = "recorded";
  learn.runs = { main, control };
  learn.at = main.length - 1;
}

function context(run: Run): ClaimContext {
  const induction: InductionClaimContext = { config: run.config, example: run.example, main: [...learn.runs.main],
    control: [...learn.runs.control], at: learn.at };
  const none = (what: string): never => { throw new Error(`${what}: the induction page has no decoder-model trace`); };
  return {
    get trace() { return none("trace"); }, get next() { return none("next"); }, get model() { return none("model"); },
    get focus() { return none("focus"); }, tensor: () => none("tensor"), induction,
  };
}

async function read(body: () => Text): Promise<Text> {
  await tick();
  return body();
}

describe.skipIf(!FILE)("the induction lesson's claims", () => {
  it("every step, on every run and every prefix of it, says only what its records show", async () => {
    const runs = JSON.parse(readFileSync(FILE!, "utf8")) as Run[];
    const failures: string[] = [];
    const said = new Set<string>();
    let views = 0;
    for (const run of runs) {
      // a live run's view as it goes: the main run's records so far, then all of them with the control's so far
      const states: [InductionRecord[], InductionRecord[]][] = [];
      for (let k = 1; k <= run.main.length; k++) states.push([run.main.slice(0, k), []]);
      for (let k = 1; k <= run.control.length; k++) states.push([run.main, run.control.slice(0, k)]);
      for (const [main, control] of states) {
        show(run, main, control);
        views++;
        for (const step of inductionLesson.steps) {
          const where = `${run.name} (main ${main.length}, control ${control.length}) ${step.id}`;
          await step.enter?.();
          const check = async (when: string) => {
            const body = await read(step.body), task = step.task?.() ?? [];
            if (!body.length) { failures.push(`${where}${when}: the text never loaded`); return; }
            for (const s of [...body, ...task]) if (s.claim) said.add(s.key);
            for (const p of await problems([...body, ...task], context(run))) failures.push(`${where}${when}: ${p}`);
          };
          await check("");
          if (step.id === "maps") {
            // the task: scrub to the middle record and to the first; the text follows the record shown
            for (const i of [Math.floor(main.length / 2), 0]) {
              learn.setAt(i);
              await check(` (scrubbed to record ${i})`);
            }
            if (main.length > 1 && step.done && !step.done()) failures.push(`${where}: its task, done, is not ticked`);
          }
        }
      }
    }
    expect(failures, failures.join("\n")).toEqual([]);
    expect(views).toBeGreaterThan(0);
    // the runs reach both sides of the lesson's conditions
    for (const key of ["plateau.sat", "plateau.still", "plateau.fell", "plateau.notYet", "heads.indFirst", "heads.indOnly",
      "heads.none", "heads.partial", "maps.stripe", "maps.noStripe", "maps.row", "maps.rowNot", "maps.prev", "maps.prevPart",
      "two.controlNever", "two.controlLater", "icl.fell", "icl.not"]) {
      expect(said, `no run made the lesson say lesson.induction.${key}`).toContain(`lesson.induction.${key}`);
    }
    console.log(`claims said: ${[...said].sort().join(", ")}`);
  });
});
