// The steering panel's state, kept outside the component so that what the learner wrote (the contrast prompts, the
// strength) and the last answer survive switching pages. One request at a time: a new run aborts the last.
import { asError } from "../../lib/errorText";
import type { SteerIn, SteerOut } from "../../lib/generated/api";
import { STEER_TOKENS } from "../../lib/generated/limits";
import { promptLines, steerApi } from "./steerApi";

export type SteerMode = "feature" | "contrast";

class SteerStore {
  mode = $state<SteerMode>("contrast");
  /** The feature whose decoder row steers (its autoencoder reads `blocks.{featureLayer}.hook_resid_post`). */
  featureLayer = $state(0);
  featureId = $state(0);
  /** The contrast: one prompt a line in each set, and the layer where the direction is read and added. */
  a = $state("I love this. It is wonderful and I am so happy.\nWhat a beautiful, joyful day.");
  b = $state("I hate this. It is awful and I am so sad.\nWhat a miserable, gloomy day.");
  layer = $state<number | null>(null);
  prompt = $state("");
  /** null while the field holds no number (a number field gives no NaN: it gives nothing). */
  strength = $state<number | null>(4);
  tokens = $state(STEER_TOKENS);
  running = $state(false);
  result = $state.raw<SteerOut | null>(null);
  /** What the answer was asked with: the panel words the direction from it. */
  asked = $state.raw<SteerIn | null>(null);
  error = $state.raw<Error | null>(null);
  #controller: AbortController | null = null;

  /** The request for the panel's fields (null while the strength is not a number). */
  request(model: string): SteerIn | null {
    if (this.strength === null || !Number.isFinite(this.strength)) return null;
    const direction: Partial<SteerIn> = this.mode === "feature"
      ? { feature: { layer: this.featureLayer, id: this.featureId } }
      : { contrast: { a: promptLines(this.a), b: promptLines(this.b) }, layer: this.layer };
    return { model, text: this.prompt, strength: this.strength, tokens: this.tokens, ...direction };
  }

  async run(model: string): Promise<void> {
    const body = this.request(model);
    if (!body) return;
    this.#controller?.abort();
    const controller = (this.#controller = new AbortController());
    this.running = true;
    this.error = null;
    try {
      const out = await steerApi.steer(body, controller.signal);
      if (controller !== this.#controller) return;
      this.result = out;
      this.asked = body;
    } catch (e) {
      if (controller !== this.#controller || controller.signal.aborted) return;
      this.error = asError(e);
    } finally {
      if (controller === this.#controller) {
        this.running = false;
        this.#controller = null;
      }
    }
  }

  cancel(): void {
    this.#controller?.abort();
    this.#controller = null;
    this.running = false;
  }
}

export const steerStore = new SteerStore();
