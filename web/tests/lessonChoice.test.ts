// Which lesson the lesson button opens for a model that runs through transformers (lessons/choose.ts): the chapter
// "Attention that forgets, compresses and sinks" for a model with a layer that is not attention (Gated DeltaNet in
// Qwen3.5, LFM2's short convolutions, Falcon-H1's state-space layers beside attention), learned sinks (gpt-oss) or
// latent attention (DeepSeek-V3), or per-layer inputs (Gemma 4); not for one whose layers are all plain attention; the
// other models' choices as before. Run by tests/web/test_lesson_hybrid.py.
import { describe, expect, it } from "vitest";
import { GPT2_CAPABILITIES, type Capabilities } from "../src/lib/family";
import { lessonFor, newAttention } from "../src/lessons/choose";

/** A model that runs through transformers: no family fields, its layers' mixers, windows and sinks. */
const generic = (mixers: string[][], extra: Partial<Capabilities> = {}): Capabilities => ({
  ...GPT2_CAPABILITIES, norm: null, norm_offset: null, positions: null, qkv: null, mlp: null, qk_norm: null,
  sandwich_norm: null, embed_scale: null, layer_types: [], attn_scale: null, runs: "transformers", mixers,
  windows: mixers.map(() => null), sinks: mixers.map(() => false),
  attention_layers: mixers.flatMap((m, l) => (m.includes("attention") ? [l] : [])), ...extra,
} as Capabilities);

const qwen35 = generic([["linear_attention"], ["attention"], ["linear_attention"], ["attention"]]);
const gptOss = generic([["attention"], ["attention"]], { sinks: [true, true], windows: [4, null] });
// the widths and bytes of a random DeepSeek-V3 checkpoint's latent (tests/helpers/hf_checkpoints.py, float32)
const deepseek = generic([["attention"], ["attention"]], { kv_latent: { layers: [0, 1], n_heads: 4, kv_lora_rank: 16,
  qk_rope_head_dim: 8, qk_nope_head_dim: 16, v_head_dim: 16, gqa_heads: 2, mla_per_token: 96, mha_per_token: 640,
  gqa_per_token: 320, tokens: [1024], mla_bytes: [196608], mha_bytes: [1310720], gqa_bytes: [655360], dtype: "float32" } });
// per-layer inputs and KV sharing, every layer attention (a random Gemma 4 checkpoint's, tests/helpers/hf_checkpoints.py)
const gemma4 = generic([["attention"], ["attention"], ["attention"], ["attention"]], { per_layer: { d_per_layer: 8,
  per_layer_layers: [0, 1, 2, 3], per_layer_table_params: 8388608, kv_sources: [0, 1, 0, 1], tokens: [1024],
  kv_unshared_bytes: [525824], kv_shared_bytes: [262912], kv_saved_bytes: [262912], dtype: "float32" } });
const phi3 = generic([["attention"], ["attention"]]);
const lfm2 = generic([["short_conv"], ["attention"]]);
const falconH1 = generic([["attention", "state_space"], ["attention", "state_space"]]);

describe("the lesson of a model that runs through transformers", () => {
  it("is the chapter on attention that forgets, compresses and sinks where the model has one of those", () => {
    for (const caps of [qwen35, lfm2, falconH1, gptOss, deepseek, gemma4]) {
      expect(newAttention(caps)).toBe(true);
      expect(lessonFor(false, "overview", caps)).toBe("hybrid");
      expect(lessonFor(false, "attention", caps)).toBe("hybrid");
    }
  });

  it("is not that chapter for a model of plain attention", () => {
    expect(newAttention(phi3)).toBe(false);
    expect(lessonFor(false, "overview", phi3)).not.toBe("hybrid");
  });

  it("leaves the Experiments area's, Why this token's and the encoder-decoder page's lessons as they were", () => {
    expect(lessonFor(false, "experiments", qwen35)).toBe("experiments");
    expect(lessonFor(false, "attribution", qwen35)).toBe("why");
    expect(lessonFor(true, "overview", qwen35)).toBe("seq2seq");
    expect(lessonFor(false, "overview", GPT2_CAPABILITIES)).toBe("gpt2");
    expect(newAttention(GPT2_CAPABILITIES)).toBe(false);
  });
});
