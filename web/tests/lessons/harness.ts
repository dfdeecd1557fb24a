// Runs a lesson's steps the way the card does, without the page: the app's state (lib/state.svelte.ts) traces a
// text on the server under test, each step's `enter` puts the app in its state, and the tensors the step and its
// view read are fetched through the same API calls, until the step's text is there. The claims it makes are then
// checked (claims.ts) against numbers fetched here, independently of the lesson's own reading.
import { tick } from "svelte";
import type { TensorSpec } from "../../src/lib/generated/api";
import type { Lesson, LessonStep, Text } from "../../src/lib/lesson";
import { app } from "../../src/lib/state.svelte";
import { decodeTensor, type Tensor } from "../../src/lib/tensor";
import { specsFor } from "../../src/lib/pipeline";
import { api } from "../../src/lib/client";

/** Trace `text` as the page does when it is typed (focus on the last token, layer 0, head 0, default sampling). */
export async function trace(text: string): Promise<void> {
  if (!app.models.length) await app.loadModels();
  if (!app.models.length) throw new Error(`no models: ${app.error}`);
  app.layer = 0;
  app.head = 0;
  app.view = "tokens";
  app.setText(text);
  await app.run();
  if (!app.trace && app.overLong) await app.runTruncated(); // longer than the context: its last tokens, as the page offers
  if (!app.trace) throw new Error(`the text could not be traced: ${app.error}`);
}

/** The step's text once its values have arrived (at most `rounds` fetches of what it still lacks). */
export async function open(step: LessonStep, rounds = 6): Promise<{ body: Text; task: Text | null }> {
  await step.enter?.();
  await tick();
  for (let k = 0; k < rounds; k++) {
    const specs: TensorSpec[] = [...(step.needs?.() ?? []), ...specsFor(app.view, app.focus())];
    await app.ensure(specs);
    await tick();
    const body = step.body();
    if (body.length) return { body, task: step.task ? step.task() : null };
  }
  return { body: [], task: step.task ? step.task() : null };
}

/** A tensor of the current trace fetched here (not from the app's cache), float32, for the claims' own checks. */
export async function fetchTensor(spec: TensorSpec): Promise<Tensor> {
  const tr = app.trace!;
  const out = await api.tensors({ model: tr.model, ids: tr.token_ids, tensors: [{ ...spec, dtype: "float32" }] });
  return decodeTensor(out.tensors[0]);
}

export interface StepRun { lesson: Lesson; step: LessonStep; body: Text; task: Text | null }
