// The pipeline's views, in order, and the tensors each one shows for the current layer, head and
// focus token. The app asks for these along with the trace, so one round trip updates the view.
import { blockName, LLAMA_BLOCK_ACTIVATIONS } from "./generated/names";
import type { TensorSpec } from "./generated/api";

export const VIEWS = [
  "overview", "tokens", "embedding", "blocks", "layernorm", "qkv", "rope", "gqa", "attention", "heads", "residual", "mlp", "output",
  "experiments",
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
}

/** The query heads that share query head `h`'s key/value head: h // (H / G) (the trace's attn.kv_head). */
export function groupOf(h: number, nHead: number, nKvHeads: number): number[] {
  const per = nHead / nKvHeads, g = Math.floor(h / per);
  return Array.from({ length: per }, (_, i) => g * per + i);
}

export function specsFor(view: ViewId, f: Focus): TensorSpec[] {
  const L = f.layer, h = f.head, p = f.pos;
  const b = (s: Parameters<typeof blockName>[1]) => blockName(L, s);
  const lb = (s: keyof typeof LLAMA_BLOCK_ACTIVATIONS) => `blocks.${L}.${s}`; // the Llama family's names
  switch (view) {
    case "tokens":
    case "blocks":
    case "experiments": // asks /api/analysis itself
      return [];
    case "overview": {
      // the focus token's vector at every stop of its journey, and its attention in the focus block
      const out: TensorSpec[] = [{ name: "embed.sum", position: p }, { name: "ln_final.out", position: p },
        { name: b("attn.pattern"), head: h, position: p }];
      for (const s of ["attn_out", "resid_mid", "mlp_out"] as const) out.push({ name: b(s), position: p });
      for (let l = 0; l < f.nLayer; l++) out.push({ name: blockName(l, "resid_post"), position: p });
      return out;
    }
    case "embedding":
      return ["embed.token", "embed.position", "embed.sum"].map((name) => ({ name, position: p }));
    case "layernorm": {
      if (f.ln === "ln_final") {
        const last = blockName(f.nLayer - 1, "resid_post");
        return [{ name: last, position: p }, { name: "ln_final.mean" }, { name: "ln_final.var" },
          { name: "ln_final.normalized", position: p }, { name: "ln_final.out", position: p }];
      }
      const input = f.ln === "ln1" ? b("resid_pre") : b("resid_mid");
      return [{ name: input, position: p }, { name: b(`${f.ln}.mean`) }, { name: b(`${f.ln}.var`) },
        { name: b(`${f.ln}.normalized`), position: p }, { name: b(`${f.ln}.out`), position: p }];
    }
    case "qkv":
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
      return [{ name: b("ln2.out"), position: p }, { name: b("mlp.pre"), position: p },
        { name: b("mlp.post"), position: p }, { name: b("mlp_out"), position: p }];
    case "output":
      return [{ name: "ln_final.out", position: f.pos < 0 ? -1 : f.nTokens - 1 }];
  }
}
