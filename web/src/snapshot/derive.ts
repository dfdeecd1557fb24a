// The stages a snapshot does not store, computed from those it does by the trace's own rules: names.py's
// DERIVATIONS (generated into FAMILY_NAMES), the rule the Python trace follows too (Trace._derive). No family
// is named here: a family's table says which rule makes which stage, and from what.
import { describeIn, FAMILY_NAMES, type Derivation } from "../lib/generated/names";
import type { Tensor } from "../lib/tensor";
import { kvHeadOf, SnapshotError, takeHead, type Heads } from "./slicing";

export interface ModelShape extends Heads {
  family: string;
  headDim: number;
  /** What scores are multiplied by: 1 / sqrt(head_dim), or 1 / sqrt(query_pre_attn_scalar) (capabilities.attn_scale). */
  attnScale: number;
  /** Each block's local window (null: global), from the capabilities' layer_types and local_window. */
  windows: (number | null)[];
}

/** The rule that derives `name` in `family`, with its block (null: a global stage); null if it is not derived. */
export function derivationOf(family: string, name: string): { derivation: Derivation; layer: number | null } | null {
  const info = describeIn(family, name);
  const derivation = info && FAMILY_NAMES[family].derivations[info.suffix];
  return derivation ? { derivation, layer: info.layer } : null;
}

/** `name`, derived by `derivation` from the tensors `get` answers (stored ones, or derived in turn). */
export function derive(name: string, derivation: Derivation, layer: number | null, model: ModelShape,
  get: (name: string) => Tensor): Tensor {
  const src = derivation.sources.map((s) => (layer === null ? s : `blocks.${layer}.${s}`));
  const dims = describeIn(model.family, name)?.dims.slice() ?? [];
  const op = derivation.op;
  switch (op) {
    case "same":
      return { ...get(src[0]), name };
    case "kv_head_index": { // (H,): the key/value head each query head reads
      const H = model.nHead, data = new Float32Array(H);
      for (let h = 0; h < H; h++) data[h] = kvHeadOf(h, H, model.nKvHeads);
      return { name, dims, shape: [H], data };
    }
    case "concat_heads": { // (H, T, Dh) -> (T, H*Dh)
      const z = get(src[0]), [H, T, Dh] = z.shape, data = new Float32Array(z.data.length);
      for (let h = 0; h < H; h++) for (let t = 0; t < T; t++)
        data.set(z.data.subarray((h * T + t) * Dh, (h * T + t + 1) * Dh), t * H * Dh + h * Dh);
      return { name, dims, shape: [T, H * Dh], data };
    }
    case "scores": { // (H, T, Dh) @ (keys of the head's key/value head: S, Dh)^T -> (H, T, S)
      const q = get(src[0]), k = get(src[1]), [H, T, Dh] = q.shape, S = k.shape[k.shape.length - 2];
      const data = new Float32Array(H * T * S);
      for (let h = 0; h < H; h++) {
        const qh = takeHead(q, h, model).tensor.data, kh = takeHead(k, h, model).tensor.data;
        for (let t = 0; t < T; t++) for (let s = 0; s < S; s++) {
          let acc = 0;
          for (let i = 0; i < Dh; i++) acc += qh[t * Dh + i] * kh[s * Dh + i];
          data[(h * T + t) * S + s] = acc;
        }
      }
      return { name, dims, shape: [H, T, S], data };
    }
    case "scale": {
      const x = get(src[0]), scale = model.attnScale;
      return { name, dims, shape: x.shape, data: x.data.map((v) => v * scale) };
    }
    case "causal_mask": { // -inf where the key lies after the query (queries are the last T of the S keys), and in
      // a local layer where it lies `window` or more positions before it
      const x = get(src[0]), [T, S] = x.shape.slice(-2), offset = S - T, data = x.data.slice();
      const window = layer === null ? null : model.windows[layer] ?? null;
      for (let i = 0; i < data.length; i++) {
        const s = i % S, t = Math.floor(i / S) % T;
        if (s > t + offset || (window !== null && s <= t + offset - window)) data[i] = -Infinity;
      }
      return { name, dims, shape: x.shape, data };
    }
    default: {
      const unknown: never = op; // a rule names.py added: this file must learn it (svelte-check says so)
      throw new SnapshotError(`no rule to derive ${name} (${String(unknown)})`);
    }
  }
}
