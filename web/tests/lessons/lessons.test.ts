// Every step of the lessons for the loaded model, on every text of texts.ts, in every language: the text loads,
// every placeholder is filled, every claim holds for the numbers (claims.ts), no number in prose carries more than
// 3 significant digits, no negative number follows an operator without parentheses. Run by
// tests/web/test_lesson_claims.py against a real server (TE_SERVER), for the lessons it names (TE_LESSONS).
import { describe, expect, it } from "vitest";
import { LESSONS } from "../../src/lessons";
import type { Lesson } from "../../src/lib/lesson";
import { app } from "../../src/lib/state.svelte";
import { problems } from "./check";
import type { ClaimContext } from "./claims";
import { fetchTensor, open, trace } from "./harness";
import { TEXTS } from "./texts";

const SERVER = process.env.TE_SERVER;
const LESSON_IDS = (process.env.TE_LESSONS ?? "").split(",").filter(Boolean);
const texts = process.env.TE_TEXTS ? (JSON.parse(process.env.TE_TEXTS) as string[]) : TEXTS;

describe.skipIf(!SERVER || !LESSON_IDS.length)("lesson claims", () => {
  for (const id of LESSON_IDS) {
    it(`${id}: every step, on every text, says only what its numbers show`, async () => {
      const lesson = (LESSONS as Record<string, Lesson>)[id];
      expect(lesson, `no lesson ${id}`).toBeTruthy();
      expect(typeof lesson.title, `${id} still has inline text`).toBe("string");
      const failures: string[] = [];
      for (const text of texts) {
        await trace(text);
        for (const step of lesson.steps) {
          const { body, task } = await open(step);
          const where = `[${app.trace?.model}] ${JSON.stringify(text.slice(0, 40))} ${id}/${step.id}`;
          if (!body.length) { failures.push(`${where}: the text never loaded`); continue; }
          const ctx: ClaimContext = {
            trace: app.trace! as ClaimContext["trace"], next: app.next, model: app.models.find((m) => m.name === app.trace?.model),
            focus: { layer: app.layer, head: app.head, pos: app.pos }, tensor: fetchTensor,
          };
          for (const p of await problems([...body, ...(task ?? [])], ctx)) failures.push(`${where}: ${p}`);
        }
      }
      expect(failures, failures.join("\n")).toEqual([]);
    });
  }
});
