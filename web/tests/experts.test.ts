// A mixture of experts in the views' tables (lib/pipeline.ts): the experts view exists only where the blocks have
// experts, right after the MLP; the MLP and experts views ask for a block's tensors by the names its kind of block
// has (the experts' in a block with experts, the gated MLP's in a dense block of a partly dense model, nothing of
// the experts' there), and never for a dense MLP's stage in a block with experts (the server refuses those names).
import { describe, expect, it } from "vitest";
import { hasExperts, type Capabilities } from "../src/lib/family";
import { hasStage, specsFor, stageSpecs, STAGES, type Focus } from "../src/lib/pipeline";

const moe: Capabilities = {
  norm: "rms", norm_offset: false, positions: "rope", qkv: "split", mlp: "moe", qk_norm: true, sandwich_norm: false,
  embed_scale: false, kv_groups: 2, local_window: null, layer_types: Array(4).fill("full_attention"), attn_scale: 0.18,
  rope_local_theta: null, n_experts: 6, top_k: 3, d_expert: 48, norm_topk_prob: true, moe_layers: [0, 1, 3],
};
const dense: Capabilities = { ...moe, mlp: "gated", n_experts: null, top_k: null, d_expert: null, moe_layers: [] };
const at = (layer: number, caps: Capabilities): Focus => ({ layer, head: 0, pos: 2, nTokens: 5, nLayer: 4, ln: "ln2", caps });
const names = (view: "mlp" | "experts", f: Focus) => specsFor(view, f).map((s) => s.name);

describe("a mixture of experts", () => {
  it("has the experts view, after the MLP; a dense model has not", () => {
    expect(STAGES.indexOf("experts")).toBe(STAGES.indexOf("mlp") + 1);
    expect(hasStage("experts", moe)).toBe(true);
    expect(hasStage("experts", dense)).toBe(false);
    expect([0, 1, 2, 3].map((l) => hasExperts(moe, l))).toEqual([true, true, false, true]);
  });

  it("asks for the experts' tensors in a block with experts, by name", () => {
    const s = stageSpecs("experts", at(1, moe));
    expect(Object.keys(s).sort()).toEqual(["expertOut", "indices", "out", "probs", "weights"]);
    expect(s.probs).toEqual({ name: "blocks.1.mlp.router_probs" });
    expect(s.expertOut).toEqual({ name: "blocks.1.mlp.expert_out", position: 2 });
    const mlp = names("mlp", at(1, moe));
    expect(mlp).toContain("blocks.1.mlp.expert_indices");
    expect(mlp.some((n) => /mlp\.(pre|gate|up|act|post)$/.test(n))).toBe(false);
  });

  it("asks for the gated MLP in a dense block, and nothing of the experts' there", () => {
    expect(names("mlp", at(2, moe))).toEqual(["blocks.2.ln2.out", "blocks.2.mlp.gate", "blocks.2.mlp.act", "blocks.2.mlp.up",
      "blocks.2.mlp.post", "blocks.2.mlp_out"]);
    expect(specsFor("experts", at(2, moe))).toEqual([]);
  });
});
