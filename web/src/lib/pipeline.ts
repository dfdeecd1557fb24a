// The pipeline's stages, in order, and the tensors each one shows for the current layer, head and
// focus token, by name (`{input, rms, normalized, out}`): a stage reads `tensors.rms`, never `vals[1]`. The
// app asks for these along with the trace, so one round trip updates the stage. Which stages a model has and
// which tensors hold each stage follow its capabilities (family.ts), not its family's name. The component that
// draws each stage is in src/stages/index.ts.
import { blockName } from "./generated/names";
import type { TensorSpec } from "./generated/api";
import { hasExperts, isLocal, layerHas, mixerOf, MIXER_STAGES, runsThrough, type Capabilities } from "./family";

export const STAGES = [
  "overview", "tokens", "embedding", "blocks", "layernorm", "qkv", "qknorm", "rope", "gqa", "attention", "window", "heads",
  "residual", "mlp", "experts", "output", "experiments", "attribution", "features",
] as const;
export type StageId = (typeof STAGES)[number];

/** Whether a model with these capabilities has this stage: rotary positions (RoPE), shared key/value heads
 *  (GQA), QK-norm, local layers (the sliding window), a mixture of experts (the experts' routing). */
export function hasStage(stage: StageId, caps: Capabilities): boolean {
  // a model that runs through transformers' own modules: what its trace holds (each layer's input and output, its
  // mixer's and MLP's outputs, attention's pattern), not the insides that these stages draw (GENERIC_HIDDEN says so)
  if (runsThrough(caps)) return stage === "experts" ? hasExpertLens(caps) : !GENERIC_HIDDEN.includes(stage);
  switch (stage) {
    case "rope": return caps.positions === "rope";
    case "gqa": return caps.positions === "rope";
    case "qknorm": return caps.qk_norm;
    case "window": return caps.local_window !== null;
    case "experts": return caps.mlp === "moe";
    default: return true;
  }
}

/** The stages a model that runs through transformers does not show: their values are inside transformers' code (the
 *  norms' statistics, the q/k/v projections and their weights, rotary positions, QK-norm, the heads' concatenation,
 *  the MLP's hidden units; the experts' routing too, unless our own code reads the mixture: hasExpertLens), which
 *  records each module's input and output, not its insides.
 *  (The analyses' pages ask the server, which answers such a model or says in one sentence why not.) */
export const GENERIC_HIDDEN: readonly StageId[] = ["layernorm", "qkv", "qknorm", "rope", "gqa", "window", "heads", "mlp"];

/** Whether a model that runs through transformers shows its experts' routing: our own code reads its mixture
 *  (bridge/moe_lens.py: DeepSeek-V3's, gpt-oss's), so its capabilities name the router and the layers with experts;
 *  other mixtures' routing is inside transformers' code (its trace holds their output only). */
function hasExpertLens(caps: Capabilities): boolean {
  return caps.router != null && (caps.moe_layers ?? []).length > 0;
}

/** The norms a block (or the model's end) has: two, four with sandwich norms (after attention, after the MLP). */
export type LnWhich = "ln1" | "ln1_post" | "ln2" | "ln2_post" | "ln_final";

export function normsOf(caps: Capabilities): LnWhich[] {
  return caps.sandwich_norm ? ["ln1", "ln1_post", "ln2", "ln2_post", "ln_final"] : ["ln1", "ln2", "ln_final"];
}

export interface Focus {
  layer: number;
  head: number;
  pos: number;
  nTokens: number;
  nLayer: number;
  ln: LnWhich;
  nHead?: number;
  nKvHeads?: number;
  /** What the model's blocks are made of: which names hold each stage. */
  caps: Capabilities;
}

/** The query heads that share query head `h`'s key/value head: h // (H / G) (the trace's attn.kv_head). */
export function groupOf(h: number, nHead: number, nKvHeads: number): number[] {
  const per = nHead / nKvHeads, g = Math.floor(h / per);
  return Array.from({ length: per }, (_, i) => g * per + i);
}

export type NamedSpecs = Record<string, TensorSpec>;

/** The tensors of `stage`, by what each one is. Their order is the stages' (and the older lessons') reading order. */
export function stageSpecs(stage: StageId, f: Focus): NamedSpecs {
  const L = f.layer, h = f.head, p = f.pos, c = f.caps;
  const b = (s: string) => `blocks.${L}.${s}`;
  const rope = c.positions === "rope";
  // the vector entering block 0: token + position embedding (learned positions), the token embedding (RoPE
  // brings position in inside attention), times sqrt(d_model) where the family scales it
  const embedded = c.embed_scale ? "embed.scaled" : rope || runsThrough(c) ? "embed.token" : "embed.sum";
  if (runsThrough(c)) return genericSpecs(stage, f);
  switch (stage) {
    case "tokens":
    case "blocks":
    case "experiments": // asks /api/analysis itself
    case "attribution": // asks /api/attribution itself
    case "features": // asks /api/features itself
      return {};
    case "overview": {
      // the focus token's vector at every stop of its journey, and its attention in the focus block
      const out: NamedSpecs = { embedded: { name: embedded, position: p }, final: { name: "ln_final.out", position: p },
        pattern: { name: b("attn.pattern"), head: h, position: p }, attnOut: { name: b("attn_out"), position: p },
        mid: { name: b("resid_mid"), position: p }, mlpOut: { name: b("mlp_out"), position: p } };
      for (let l = 0; l < f.nLayer; l++) out[`post${l}`] = { name: blockName(l, "resid_post"), position: p };
      return out;
    }
    case "embedding":
      if (!rope) return { token: { name: "embed.token", position: p }, position: { name: "embed.position", position: p },
        sum: { name: "embed.sum", position: p } };
      return c.embed_scale ? { token: { name: "embed.token", position: p }, scaled: { name: "embed.scaled", position: p } }
        : { token: { name: "embed.token", position: p } };
    case "layernorm": {
      // LayerNorm: input, mean, var, normalized, out; RMSNorm: input, rms, normalized, out
      const at = (s: string) => (f.ln === "ln_final" ? `ln_final.${s}` : b(`${f.ln}.${s}`));
      const input = { ln_final: blockName(f.nLayer - 1, "resid_post"), ln1: b("resid_pre"), ln2: b("resid_mid"),
        ln1_post: b("attn.out"), ln2_post: b("mlp.out") }[f.ln];
      const stats: NamedSpecs = c.norm === "rms" ? { rms: { name: at("rms") } }
        : { mean: { name: at("mean") }, variance: { name: at("var") } };
      return { input: { name: input, position: p }, ...stats, normalized: { name: at("normalized"), position: p },
        out: { name: at("out"), position: p } };
    }
    case "qkv":
      // under grouped-query attention keys and values have G heads: head h of them is the key/value head that
      // query head h reads (the API answers its kv_head)
      return { input: { name: b("ln1.out"), position: p }, q: { name: b("attn.q"), head: h },
        k: { name: b("attn.k"), head: h }, v: { name: b("attn.v"), head: h } };
    case "qknorm": // each head's query and key before and after QK-norm, and what they make of the scores
      return { q: { name: b("attn.q"), head: h }, qRms: { name: b("attn.q_norm.rms"), head: h },
        qNormed: { name: b("attn.q_norm.out"), head: h }, k: { name: b("attn.k"), head: h },
        kRms: { name: b("attn.k_norm.rms"), head: h }, kNormed: { name: b("attn.k_norm.out"), head: h },
        scaled: { name: b("attn.scaled_scores"), head: h, position: p } };
    case "rope": // float32: the page recomputes the rotation and the score from these. The queries and keys that
      // are rotated are the normed ones where the family has QK-norm; local layers have their own angles
      return { angles: { name: c.rope_local_theta !== null && isLocal(c, L) ? "rope.local_angles" : "rope.angles", dtype: "float32" },
        q: { name: b(c.qk_norm ? "attn.q_norm.out" : "attn.q"), head: h, position: p, dtype: "float32" },
        rotQ: { name: b("attn.rot_q"), head: h, position: p, dtype: "float32" },
        k: { name: b(c.qk_norm ? "attn.k_norm.out" : "attn.k"), dtype: "float32" },
        rotK: { name: b("attn.rot_k"), dtype: "float32" }, kvHead: { name: b("attn.kv_head") },
        scores: { name: b("attn.scores"), head: h, position: p, dtype: "float32" } };
    case "gqa": {
      const heads = f.nHead && f.nKvHeads ? groupOf(h, f.nHead, f.nKvHeads) : [h];
      return { kvHead: { name: b("attn.kv_head") },
        ...Object.fromEntries(heads.map((hh) => [`pattern${hh}`, { name: b("attn.pattern"), head: hh }])) };
    }
    case "attention":
      return { scores: { name: b("attn.scores"), head: h, position: p }, scaled: { name: b("attn.scaled_scores"), head: h, position: p },
        // the pattern's lower triangle: above it a causal pattern is 0 (half the bytes at the full context)
        masked: { name: b("attn.masked_scores"), head: h, position: p },
        pattern: { name: b("attn.pattern"), head: h, triangle: true } };
    case "window": // the focus head's pattern in this layer: zero outside the window in a local layer
      return { pattern: { name: b("attn.pattern"), head: h } };
    case "heads":
      return { weights: { name: b("attn.pattern"), head: h, position: p }, v: { name: b("attn.v"), head: h },
        z: { name: b("attn.z"), head: h }, concat: { name: b("attn.concat"), position: p },
        out: { name: b(c.sandwich_norm ? "attn.out" : "attn_out"), position: p } }; // concat · W_O
    case "residual":
      // with sandwich norms the branch outputs before their norms too (attn.out, mlp.out)
      return { pre: { name: b("resid_pre"), position: p },
        ...(c.sandwich_norm ? { attnRaw: { name: b("attn.out"), position: p } } : {}),
        attn: { name: b("attn_out"), position: p }, mid: { name: b("resid_mid"), position: p },
        ...(c.sandwich_norm ? { mlpRaw: { name: b("mlp.out"), position: p } } : {}),
        mlp: { name: b("mlp_out"), position: p }, post: { name: b("resid_post"), position: p } };
    case "mlp":
      // a block with experts: its input, the experts chosen at the focus token, their weights and outputs, and
      // the weighted sum (the experts' hidden layers are not traced; the experts view shows the routing)
      if (hasExperts(c, L))
        return { input: { name: b("ln2.out"), position: p }, indices: { name: b("mlp.expert_indices"), position: p },
          weights: { name: b("mlp.expert_weights"), position: p }, expertOut: { name: b("mlp.expert_out"), position: p },
          out: { name: b("mlp_out"), position: p } };
      // GELU: in, pre, post = GELU(pre), out; gated (and a mixture's blocks without experts): in, gate,
      // act = act(gate), up, post = act * up, out
      return c.mlp !== "gelu"
        ? { input: { name: b("ln2.out"), position: p }, gate: { name: b("mlp.gate"), position: p },
          act: { name: b("mlp.act"), position: p }, up: { name: b("mlp.up"), position: p },
          post: { name: b("mlp.post"), position: p }, out: { name: b(c.sandwich_norm ? "mlp.out" : "mlp_out"), position: p } }
        : { input: { name: b("ln2.out"), position: p }, pre: { name: b("mlp.pre"), position: p },
          post: { name: b("mlp.post"), position: p }, out: { name: b("mlp_out"), position: p } };
    case "experts":
      // the routing of every token in the focus block (router probabilities, the chosen experts and their weights),
      // and the focus token's chosen experts' outputs and their weighted sum; nothing in a block without experts
      if (!hasExperts(c, L)) return {};
      return { probs: { name: b("mlp.router_probs") }, indices: { name: b("mlp.expert_indices") },
        weights: { name: b("mlp.expert_weights") }, expertOut: { name: b("mlp.expert_out"), position: p },
        out: { name: b("mlp_out"), position: p } };
    case "output":
      return { final: { name: "ln_final.out", position: f.pos < 0 ? -1 : f.nTokens - 1 } };
  }
}

/** A model that runs through transformers: what its trace records of each stage it shows (hasStage), by layer (a
 *  layer without attention has no pattern; one with parallel sublayers no resid_mid). */
function genericSpecs(stage: StageId, f: Focus): NamedSpecs {
  const L = f.layer, h = f.head, p = f.pos, c = f.caps;
  const b = (s: string) => `blocks.${L}.${s}`;
  const has = (s: string) => layerHas(c, L, s);
  // the layer's mixers: attention (attn_out) and/or one of another kind (Falcon-H1 runs both side by side)
  const mixer = mixerOf(c, L);
  const other = mixer === "attention" ? null : MIXER_STAGES[mixer].out;
  const mixOut = has("attn_out") || !other ? "attn_out" : other;
  const at = (key: string, s: string): NamedSpecs => (has(s) ? { [key]: { name: b(s), position: p } } : {});
  switch (stage) {
    case "overview": {
      const out: NamedSpecs = { embedded: { name: "embed.token", position: p }, final: { name: "ln_final.out", position: p },
        ...(has("attn.pattern") ? { pattern: { name: b("attn.pattern"), head: h, position: p } } : {}),
        ...at("attnOut", mixOut), ...at("mid", "resid_mid"), ...at("mlpOut", "mlp_out") };
      for (let l = 0; l < f.nLayer; l++) out[`post${l}`] = { name: blockName(l, "resid_post"), position: p };
      return out;
    }
    case "embedding":
      return { token: { name: "embed.token", position: p } };
    case "attention": // the scores as the softmax reads them (scaled, masked) and the pattern; none in a layer without
      return has("attn.pattern") ? { masked: { name: b("attn.masked_scores"), head: h, position: p },
        pattern: { name: b("attn.pattern"), head: h, triangle: true } } : {};
    case "residual":
      return { ...at("pre", "resid_pre"), ...at("attn", "attn_out"), ...(other ? at("mixer", other) : {}),
        ...at("mid", "resid_mid"), ...at("mlp", "mlp_out"), ...at("post", "resid_post") };
    case "output":
      return { final: { name: "ln_final.out", position: f.pos < 0 ? -1 : f.nTokens - 1 } };
    case "experts": {
      // our own code's reading of the layer's mixture (bridge/moe_lens.py): every token's routing, and the focus token's
      // chosen experts' outputs and what the MLP writes; nothing in a layer without experts
      if (!hasExperts(c, L)) return {};
      const routing: NamedSpecs = { indices: { name: b("mlp.expert_indices") }, weights: { name: b("mlp.expert_weights") },
        expertOut: { name: b("mlp.expert_out"), position: p }, out: { name: b("mlp_out"), position: p } };
      if (c.router === "sigmoid_grouped") // DeepSeek-V3: sigmoid scores, the groups, the shared expert beside the routed
        return { scores: { name: b("mlp.router_scores") }, ...routing, groupScores: { name: b("mlp.group_scores") },
          chosenGroups: { name: b("mlp.chosen_groups") }, routed: { name: b("mlp.routed_out"), position: p },
          shared: { name: b("mlp.shared_out"), position: p } };
      // gpt-oss: the logits (a softmax over the chosen ones alone) and the clamped SwiGLU's gate and up at the focus token
      return { logits: { name: b("mlp.router_logits") }, ...routing, gate: { name: b("mlp.gate"), position: p },
        gateClamped: { name: b("mlp.gate_clamped"), position: p }, up: { name: b("mlp.up"), position: p },
        upClamped: { name: b("mlp.up_clamped"), position: p } };
    }
    default:
      return {};
  }
}

/** Tokens a mixer layer's view reads at once: a window around the focus token (two rows each, one request). */
export const MIXER_ROWS = 6;

/** The first token of the mixer view's window: the focus token's neighbours, within the text. */
export function mixerFirst(pos: number, nTokens: number): number {
  return Math.max(0, Math.min(pos - Math.floor(MIXER_ROWS / 2), nTokens - MIXER_ROWS));
}

/** A layer's mixer's input and output (a layer without attention, drawn as what it is), each token's row in the
 *  window around the focus token (`in${i}` and `out${i}` for token i): bounded however long the text. */
export function mixerSpecs(f: Focus): NamedSpecs {
  const m = MIXER_STAGES[mixerOf(f.caps, f.layer)] ?? { in: "resid_pre", out: "attn_out" };
  const out: NamedSpecs = {};
  const first = mixerFirst(f.pos, f.nTokens);
  for (let i = first; i < Math.min(f.nTokens, first + MIXER_ROWS); i++) {
    out[`in${i}`] = { name: `blocks.${f.layer}.${m.in}`, position: i };
    out[`out${i}`] = { name: `blocks.${f.layer}.${m.out}`, position: i };
  }
  return out;
}

/** The tensors of `stage` as a list, for fetching them (in `stageSpecs`' order). */
export function specsFor(stage: StageId, f: Focus): TensorSpec[] {
  return Object.values(stageSpecs(stage, f));
}
