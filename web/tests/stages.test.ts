// The stages' table (src/stages/index.ts): every stage of the pipeline (lib/pipeline.ts) has exactly one component
// or part, and the app draws the stage in view from that table, with no branch of its own per stage: a new stage
// is its component and one line of the table.
import { describe, expect, it } from "vitest";
import { Part } from "../src/lib/part.svelte";
import { STAGES } from "../src/lib/pipeline";
import { STAGE_COMPONENTS } from "../src/stages";
import { PARTS } from "../src/parts";
import appSource from "../src/App.svelte?raw";

describe("the stages' table", () => {
  it("has one entry per stage, no more", () => {
    expect(Object.keys(STAGE_COMPONENTS).sort()).toEqual([...STAGES].sort());
    for (const s of STAGES) expect(STAGE_COMPONENTS[s], s).toBeTruthy();
  });
  it("gives each stage its own component, and the pages their part", () => {
    const eager = STAGES.filter((s) => !(STAGE_COMPONENTS[s] instanceof Part));
    expect(new Set(eager.map((s) => STAGE_COMPONENTS[s])).size).toBe(eager.length);
    expect(STAGE_COMPONENTS.experiments).toBe(PARTS.experiments);
    expect(STAGE_COMPONENTS.attribution).toBe(PARTS.attribution);
  });
  it("is what the app draws from: App.svelte names no stage", () => {
    expect(appSource).toContain("STAGE_COMPONENTS[app.view]");
    const named = STAGES.filter((s) => appSource.includes(`app.view === "${s}"`) || appSource.includes(`./stages/`));
    expect(named).toEqual([]);
  });
});
