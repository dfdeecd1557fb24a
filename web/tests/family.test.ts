// A model's family is what its config says, never another family's: a family this page was built without (a newer
// server's, here a hybrid) keeps its name and is drawn by the capabilities its config carries, so it is
// not shown as GPT-2 (which lib/family.ts did before the families were declarations). The views and the lesson
// button choose by capabilities, for known and unknown families alike.
import { describe, expect, it } from "vitest";
import { capsOf, declarationOf, familyLabel, familyOf, GPT2_CAPABILITIES, type Capabilities } from "../src/lib/family";
import { FAMILIES } from "../src/lib/generated/names";
import { lessonFor } from "../src/lessons/choose";
import { hasStage, normsOf } from "../src/lib/pipeline";

const rotary: Capabilities = {
  norm: "rms", norm_offset: false, positions: "rope", qkv: "split", mlp: "gated", qk_norm: false, sandwich_norm: false,
  embed_scale: false, kv_groups: 4, local_window: null,
  layer_types: ["full_attention", "full_attention"], attn_scale: 0.125, rope_local_theta: null,
};
const unknown = { family: "jamba", capabilities: { ...rotary, qk_norm: true } };

describe("a model's family", () => {
  it("is the config's, with its own label, for every declared family", () => {
    for (const [name, decl] of Object.entries(FAMILIES)) {
      expect(familyOf({ family: name })).toBe(name);
      expect(familyLabel({ family: name })).toBe(decl.label);
      expect(declarationOf({ family: name })).toBe(decl);
    }
  });

  it("of a family this page does not know keeps its name, and no declaration is made up for it", () => {
    expect(familyOf(unknown)).toBe("jamba");
    expect(familyLabel(unknown)).toBe("jamba");
    expect(declarationOf(unknown)).toBeNull();
    expect(declarationOf({ family: "constructor" })).toBeNull(); // not an inherited property either
    expect(familyOf(null)).toBeNull();
  });

  it("is drawn by its capabilities: an unknown rotary family gets the rotary views and lesson, not GPT-2's", () => {
    const caps = capsOf(unknown);
    expect(caps).toEqual(unknown.capabilities);
    expect(caps).not.toEqual(GPT2_CAPABILITIES);
    expect(hasStage("rope", caps) && hasStage("gqa", caps) && hasStage("qknorm", caps)).toBe(true);
    expect(hasStage("window", caps)).toBe(false);
    expect(normsOf(caps)).toEqual(["ln1", "ln2", "ln_final"]);
    expect(lessonFor(false, "overview", caps)).toBe("stable"); // QK-norm: the chapter on it
    expect(lessonFor(false, "overview", rotary)).toBe("modern");
    expect(lessonFor(false, "overview", { ...rotary, sandwich_norm: true })).toBe("stable");
    expect(lessonFor(false, "overview", { ...rotary, local_window: 5, layer_types: ["sliding_attention", "full_attention"] }))
      .toBe("stable");
    expect(lessonFor(false, "overview", GPT2_CAPABILITIES)).toBe("gpt2");
    expect(lessonFor(false, "overview", undefined)).toBe("gpt2"); // before any trace: the page's default lesson
  });

  it("with experts opens the chapter on mixtures of experts, even with QK-norm (Qwen3-MoE) or a window (Mixtral's)", () => {
    const moe: Capabilities = { ...rotary, mlp: "moe", n_experts: 8, top_k: 2, d_expert: 64, norm_topk_prob: true,
      moe_layers: [0, 1] };
    expect(lessonFor(false, "overview", moe)).toBe("moe");
    expect(lessonFor(false, "experts", { ...moe, qk_norm: true })).toBe("moe");
    expect(lessonFor(false, "overview", { ...moe, local_window: 16, layer_types: ["sliding_attention", "sliding_attention"] }))
      .toBe("moe");
    expect(lessonFor(false, "experiments", moe)).toBe("experiments"); // the Experiments area keeps its own lesson
    expect(lessonFor(false, "attribution", moe)).toBe("why");
    expect(lessonFor(true, "overview", moe)).toBe("seq2seq");
  });
});
