// The pipeline's views, in order, and the tensors each one shows for the current layer, head and
// focus token. The app asks for these along with the trace, so one round trip updates the view.
import { blockName, LLAMA_BLOCK_ACTIVATIONS } from "./generated/names";
import type { TensorSpec } from "./generated/api";
import type { Family } from "./family";

export const VIEWS = [
  "overview", "tokens", "embedding", "blocks", "layernorm", "qkv", "rope", "gqa", "attention", "heads", "residual", "mlp", "output",
  "experiments", "attribution",
] as const;
export type ViewId = (typeof VIEWS)[number];

/** Views that only the Llama family has: rotary positions and grouped-query attention. */
export const LLAMA_ONLY_VIEWS: readonly ViewId[] = ["rope", "gqa"];

/** Whether a model of `family` has this view (GPT-2 has no rotation and one key/value head per query head). */
export function hasView(view: ViewId, family: string | undefined): boolean {
  return !LLAMA_ONLY_VIEWS.includes(view) || family === "llama";
}

export type LnWhich = "ln1" | "ln2" | "ln_final";

export interface Focus {
  layer: number;
  head: number;
  pos: number;
  nTokens: number;
  nLayer: number;
  ln: LnWhich;
  nHead?: number;
  nKvHeads?: number;
  /** The model's family: which names hold each stage (generated/names.ts: GPT-2's tables, LLAMA_*). */
  family: Family;
}

/** The query heads that share query head `h`'s key/value head: h // (H / G) (the trace's attn.kv_head). */
export function groupOf(h: number, nHead: number, nKvHeads: number): number[] {
  const per = nHead / nKvHeads, g = Math.floor(h / per);
  return Array.from({ length: per }, (_, i) => g * per + i);
}

export function specsFor(view: ViewId, f: Focus): TensorSpec[] {
  const L = f.layer, h = f.head, p = f.pos;
  const b = (s: string) => `blocks.${L}.${s}`;
  const lb = (s: keyof typeof LLAMA_BLOCK_ACTIVATIONS) => `blocks.${L}.${s}`; // the Llama family's names
  const llama = f.family === "llama";
  // the vector entering block 0: token + position embedding (GPT-2), the token embedding alone (Llama: RoPE
  // brings position in inside attention)
  const embedded = llama ? "embed.token" : "embed.sum";
  switch (view) {
    case "tokens":
    case "blocks":
    case "experiments": // asks /api/analysis itself
    case "attribution": // asks /api/attribution itself
      return [];
    case "overview": {
      // the focus token's vector at every stop of its journey, and its attention in the focus block
      const out: TensorSpec[] = [{ name: embedded, position: p }, { name: "ln_final.out", position: p },
        { name: b("attn.pattern"), head: h, position: p }];
      for (const s of ["attn_out", "resid_mid", "mlp_out"] as const) out.push({ name: b(s), position: p });
      for (let l = 0; l < f.nLayer; l++) out.push({ name: blockName(l, "resid_post"), position: p });
      return out;
    }
    case "embedding":
      return (llama ? ["embed.token"] : ["embed.token", "embed.position", "embed.sum"]).map((name) => ({ name, position: p }));
    case "layernorm": {
      // GPT-2: input, mean, var, normalized, out; Llama (RMSNorm): input, rms, normalized, out
      const at = (s: string) => (f.ln === "ln_final" ? `ln_final.${s}` : b(`${f.ln}.${s}`));
      const input = f.ln === "ln_final" ? blockName(f.nLayer - 1, "resid_post") : f.ln === "ln1" ? b("resid_pre") : b("resid_mid");
      const stats: TensorSpec[] = llama ? [{ name: at("rms") }] : [{ name: at("mean") }, { name: at("var") }];
      return [{ name: input, position: p }, ...stats, { name: at("normalized"), position: p }, { name: at("out"), position: p }];
    }
    case "qkv":
      // under grouped-query attention (Llama) keys and values have G heads: head h of them is the key/value
      // head that query head h reads (the API answers its kv_head)
      return [{ name: b("ln1.out"), position: p }, { name: b("attn.q"), head: h }, { name: b("attn.k"), head: h },
        { name: b("attn.v"), head: h }];
    case "rope": // float32: the page recomputes the rotation and the score from these
      return [{ name: "rope.angles", dtype: "float32" }, { name: lb("attn.q"), head: h, position: p, dtype: "float32" },
        { name: lb("attn.rot_q"), head: h, position: p, dtype: "float32" }, { name: lb("attn.k"), dtype: "float32" },
        { name: lb("attn.rot_k"), dtype: "float32" }, { name: lb("attn.kv_head") },
        { name: lb("attn.scores"), head: h, position: p, dtype: "float32" }];
    case "gqa": {
      const heads = f.nHead && f.nKvHeads ? groupOf(h, f.nHead, f.nKvHeads) : [h];
      return [{ name: lb("attn.kv_head") }, ...heads.map((hh) => ({ name: lb("attn.pattern"), head: hh }))];
    }
    case "attention":
      return [{ name: b("attn.scores"), head: h, position: p }, { name: b("attn.scaled_scores"), head: h, position: p },
        { name: b("attn.masked_scores"), head: h, position: p }, { name: b("attn.pattern"), head: h }];
    case "heads":
      return [{ name: b("attn.pattern"), head: h, position: p }, { name: b("attn.v"), head: h },
        { name: b("attn.z"), head: h }, { name: b("attn.concat"), position: p }, { name: b("attn_out"), position: p }];
    case "residual":
      return [{ name: b("resid_pre"), position: p }, { name: b("attn_out"), position: p },
        { name: b("resid_mid"), position: p }, { name: b("mlp_out"), position: p }, { name: b("resid_post"), position: p }];
    case "mlp":
      // GPT-2: in, pre, post = GELU(pre), out; Llama (gated): in, gate, act = SiLU(gate), up, post = act * up, out
      return (llama ? ["ln2.out", "mlp.gate", "mlp.act", "mlp.up", "mlp.post", "mlp_out"]
        : ["ln2.out", "mlp.pre", "mlp.post", "mlp_out"]).map((s) => ({ name: b(s), position: p }));
    case "output":
      return [{ name: "ln_final.out", position: f.pos < 0 ? -1 : f.nTokens - 1 }];
  }
}
