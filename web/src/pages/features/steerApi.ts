// The call to /api/steer through the app's one `call` (an offline snapshot answers what it carries, or says it
// lacks it), typed by the generated schema types.
import { call } from "../../lib/client";
import type { SteerIn, SteerOut } from "../../lib/generated/api";

export const steerApi = {
  steer: (b: SteerIn, s?: AbortSignal) => call<SteerOut>("steer", b, s),
};

/** The prompts of a contrast set as the learner writes them: one a line, blank lines skipped. */
export function promptLines(s: string): string[] {
  return s.split("\n").map((x) => x.trim()).filter(Boolean);
}

/** The layer of a feature's hook when steering can add its direction there (`blocks.L.hook_resid_post`); null for
 *  any other hook (steering adds after a block, so only those features steer). */
export function steerLayerOf(hook: string | null | undefined): number | null {
  const m = /^blocks\.(\d+)\.hook_resid_post$/.exec(hook ?? "");
  return m ? Number(m[1]) : null;
}
