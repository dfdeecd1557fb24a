import { hasExperts, routerOf, runsThrough, type Capabilities } from "./family";

// The formula beside each view, as plain HTML (no math library needed): math is the same in every language.
const v = (s: string) => `<i>${s}</i>`;
const sub = (s: string, x: string) => `${s}<sub>${x}</sub>`;

export const FORMULAS: Record<string, string> = {
  overview: `${sub(v("x"), "0")} = embed(${v("t")}) &nbsp;→&nbsp; ${sub(v("x"), "ℓ+1")} = ${sub(v("x"), "ℓ")} + Attn(…) + MLP(…) &nbsp;→&nbsp; ` +
    `logits = LN<sub>f</sub>(${sub(v("x"), "L")}) ${sub(v("W"), "U")}`,
  tokens: `${v("text")} → [${sub(v("t"), "0")}, ${sub(v("t"), "1")}, …, ${sub(v("t"), "T−1")}], &nbsp;${sub(v("t"), "i")} ∈ {0, …, ${v("V")}−1}`,
  embedding: `${sub(v("x"), "i")} = ${sub("W", "E")}[${sub(v("t"), "i")}] + ${sub("W", "pos")}[${v("i")}]`,
  blocks: `${sub(v("x"), "ℓ+1")} = Block<sub>ℓ</sub>(${sub(v("x"), "ℓ")}), &nbsp; ℓ = 0, …, ${v("L")}−1`,
  layernorm: `μ = mean(${v("x")}), &nbsp;σ² = mean((${v("x")} − μ)²)<br>` +
    `LN(${v("x")}) = γ ⊙ (${v("x")} − μ) / √(σ² + ε) + β`,
  qkv: `${v("Q")} = ${v("x")}${sub(v("W"), "Q")} + ${sub(v("b"), "Q")}, &nbsp;${v("K")} = ${v("x")}${sub(v("W"), "K")} + ${sub(v("b"), "K")}, &nbsp;` +
    `${v("V")} = ${v("x")}${sub(v("W"), "V")} + ${sub(v("b"), "V")}<br>${v("Q")} = [${sub(v("Q"), "0")} ‖ … ‖ ${sub(v("Q"), "H−1")}], &nbsp;${sub(v("Q"), "h")} ∈ ℝ<sup>${v("T")}×${sub(v("d"), "k")}</sup>`,
  attention: `${v("A")} = softmax( ${v("Q")}${v("K")}<sup>⊤</sup> / √${sub(v("d"), "k")} + ${v("M")} )<br>` +
    `${sub(v("M"), "ij")} = −∞ (${v("j")} &gt; ${v("i")}), &nbsp;0 (${v("j")} ≤ ${v("i")})`,
  heads: `${sub(v("z"), "h")} = ${sub(v("A"), "h")}${sub(v("V"), "h")}<br>` +
    `attn_out = [${sub(v("z"), "0")} ‖ … ‖ ${sub(v("z"), "H−1")}] ${sub(v("W"), "O")} + ${sub(v("b"), "O")}`,
  residual: `${sub(v("x"), "mid")} = ${v("x")} + Attn(LN<sub>1</sub>(${v("x")}))<br>` +
    `${sub(v("x"), "out")} = ${sub(v("x"), "mid")} + MLP(LN<sub>2</sub>(${sub(v("x"), "mid")}))<br>Dropout<sub>inference</sub>(${v("x")}) = ${v("x")}`,
  mlp: `MLP(${v("x")}) = GELU(${v("x")}${sub(v("W"), "in")} + ${sub(v("b"), "in")}) ${sub(v("W"), "out")} + ${sub(v("b"), "out")}<br>` +
    `GELU(${v("u")}) ≈ ½${v("u")}(1 + tanh(√(2/π)(${v("u")} + 0.044715${v("u")}³)))`,
  output: `logits = LN<sub>f</sub>(${sub(v("x"), "T−1")}) ${sub(v("W"), "U")}, &nbsp;${sub(v("W"), "U")} = ${sub(v("W"), "E")}<sup>⊤</sup><br>` +
    `${sub(v("p"), "i")} ∝ exp(${sub("logit", "i")} / ${v("T")}) · 1[${v("i")} ∈ top-k ∩ top-p]`,
};

// The Llama family (RMSNorm, RoPE, grouped-query attention, gated SiLU MLP, no biases but Qwen2's q, k, v):
// the views whose math differs. R_i is the rotation of position i (RoPE); g(h) the key/value head of head h.
export const LLAMA_FORMULAS: Record<string, string> = {
  overview: `${sub(v("x"), "0")} = ${sub("W", "E")}[${v("t")}] &nbsp;→&nbsp; ${sub(v("x"), "ℓ+1")} = ${sub(v("x"), "ℓ")} + Attn(…) + MLP(…) &nbsp;→&nbsp; ` +
    `logits = RMSNorm<sub>f</sub>(${sub(v("x"), "L")}) ${sub(v("W"), "U")}`,
  embedding: `${sub(v("x"), "i")} = ${sub("W", "E")}[${sub(v("t"), "i")}]`,
  layernorm: `rms = √(mean(${v("x")}²) + ε)<br>RMSNorm(${v("x")}) = ${v("w")} ⊙ ${v("x")} / rms<br>` +
    `<span style="opacity:.6">LN(${v("x")}) = γ ⊙ (${v("x")} − μ) / √(σ² + ε) + β</span>`,
  qkv: `${v("Q")} = ${v("x")}${sub(v("W"), "Q")}, &nbsp;${v("K")} = ${v("x")}${sub(v("W"), "K")}, &nbsp;${v("V")} = ${v("x")}${sub(v("W"), "V")} &nbsp;(+ ${v("b")}: Qwen2)<br>` +
    `${sub(v("Q"), "h")}: ${v("h")} &lt; ${v("H")}, &nbsp;${sub(v("K"), "g")}, ${sub(v("V"), "g")}: ${v("g")} &lt; ${v("G")}, &nbsp;${v("g")}(${v("h")}) = ⌊${v("h")} / (${v("H")}/${v("G")})⌋`,
  attention: `${sub(v("A"), "h")} = softmax( ${sub(v("R"), "i")}${sub(v("q"), "i")} · ${sub(v("R"), "j")}${sub(v("k"), "j")} / √${sub(v("d"), "k")} + ${v("M")} ), &nbsp;${sub(v("k"), "j")} ∈ ${sub(v("K"), "g(h)")}<br>` +
    `${sub(v("M"), "ij")} = −∞ (${v("j")} &gt; ${v("i")}), &nbsp;0 (${v("j")} ≤ ${v("i")})`,
  heads: `${sub(v("z"), "h")} = ${sub(v("A"), "h")}${sub(v("V"), "g(h)")}<br>` +
    `attn_out = [${sub(v("z"), "0")} ‖ … ‖ ${sub(v("z"), "H−1")}] ${sub(v("W"), "O")}`,
  residual: `${sub(v("x"), "mid")} = ${v("x")} + Attn(RMSNorm<sub>1</sub>(${v("x")}))<br>` +
    `${sub(v("x"), "out")} = ${sub(v("x"), "mid")} + MLP(RMSNorm<sub>2</sub>(${sub(v("x"), "mid")}))`,
  mlp: `MLP(${v("x")}) = (SiLU(${v("x")}${sub(v("W"), "gate")}) ⊙ ${v("x")}${sub(v("W"), "in")}) ${sub(v("W"), "out")}<br>` +
    `SiLU(${v("u")}) = ${v("u")} · σ(${v("u")}) = ${v("u")} / (1 + ${v("e")}<sup>−${v("u")}</sup>)`,
  output: `logits = RMSNorm<sub>f</sub>(${sub(v("x"), "T−1")}) ${sub(v("W"), "U")}<br>` +
    `${sub(v("p"), "i")} ∝ exp(${sub("logit", "i")} / ${v("T")}) · 1[${v("i")} ∈ top-k ∩ top-p]`,
};

// QK-norm (Qwen3, Gemma 3): each head's query and key through an RMSNorm of their own, before the rotation.
const QK_NORM = `${sub(v("q̂"), "h")} = ${sub(v("w"), "q")} ⊙ ${sub(v("q"), "h")} / rms(${sub(v("q"), "h")}), &nbsp;` +
  `${sub(v("k̂"), "g")} = ${sub(v("w"), "k")} ⊙ ${sub(v("k"), "g")} / rms(${sub(v("k"), "g")})<br>` +
  `|${v("R")}${sub(v("q̂"), "i")} · ${v("R")}${sub(v("k̂"), "j")}| ≤ ‖${sub(v("q̂"), "i")}‖ ‖${sub(v("k̂"), "j")}‖ ≤ ` +
  `max|${sub(v("w"), "q")}| · max|${sub(v("w"), "k")}| · ${sub(v("d"), "k")}`;
// a local layer's mask: the query sees itself and the window − 1 keys before it
const WINDOW = `${sub(v("M"), "ij")}<sup>(${v("w")})</sup> = 0 (${v("i")} − ${v("w")} &lt; ${v("j")} ≤ ${v("i")}), &nbsp;` +
  `−∞ (${v("j")} ≤ ${v("i")} − ${v("w")} ∨ ${v("j")} &gt; ${v("i")})<br>` +
  `${sub(v("M"), "ij")} = 0 (${v("j")} ≤ ${v("i")}), &nbsp;−∞ (${v("j")} &gt; ${v("i")})`;
/** Where a family's maths differs again: the token embedding scaled by √d (Gemma), norms scaling by 1 + w,
 *  sandwich norms, scores scaled by 1/√s (query_pre_attn_scalar), GeGLU. */
function gemmaFormula(view: string, caps: Capabilities, activation: string): string | undefined {
  if (view === "embedding" && caps.embed_scale) return `${sub(v("x"), "i")} = √${v("d")} · ${sub("W", "E")}[${sub(v("t"), "i")}]`;
  if (view === "layernorm" && caps.norm_offset) return `rms = √(mean(${v("x")}²) + ε)<br>RMSNorm(${v("x")}) = (1 + ${v("w")}) ⊙ ${v("x")} / rms`;
  if (view === "residual" && caps.sandwich_norm)
    return `${sub(v("x"), "mid")} = ${v("x")} + RMSNorm<sub>1,post</sub>(Attn(RMSNorm<sub>1</sub>(${v("x")})))<br>` +
      `${sub(v("x"), "out")} = ${sub(v("x"), "mid")} + RMSNorm<sub>2,post</sub>(MLP(RMSNorm<sub>2</sub>(${sub(v("x"), "mid")})))`;
  if (view === "mlp" && caps.mlp === "gated" && activation.startsWith("gelu"))
    return `MLP(${v("x")}) = (GELU<sub>tanh</sub>(${v("x")}${sub(v("W"), "gate")}) ⊙ ${v("x")}${sub(v("W"), "in")}) ${sub(v("W"), "out")} &nbsp;(GeGLU)`;
  if (view === "attention" && caps.local_window !== null)
    return `${sub(v("A"), "h")} = softmax( ${sub(v("R"), "i")}${sub(v("q̂"), "i")} · ${sub(v("R"), "j")}${sub(v("k̂"), "j")} · ${num(caps.attn_scale)} + ${v("M")} )<br>${WINDOW}`;
  return undefined;
}

const num = (x: number) => (Math.abs(x) >= 0.01 ? x.toPrecision(3) : x.toExponential(2));

/** A mixture of experts: the router's softmax, the top-k experts S, their weights (renormalised over S where the
 *  model does so) and the weighted sum of their outputs, each expert a gated MLP. */
function moeFormula(caps: Capabilities): string {
  const router = routerOf(caps);
  const konst = (x: number | null | undefined) => (x == null ? "?" : String(Number(x.toPrecision(4)))); // 1.702, 0.5, 2.5
  const wi = sub(v("w"), v("i")), si = sub(v("s"), v("i")), inS = `<sub>${v("i")}∈S</sub>`;
  const Ei = `${sub(v("E"), v("i"))}(${v("x")})`;
  if (router === "sigmoid_grouped") { // DeepSeek-V3: sigmoid scores, a choice bias, groups, a shared expert
    const r = caps.routed_scaling ?? 1;
    const w = caps.norm_topk_prob ? `${wi} = ${konst(r)} · ${si} / Σ<sub>${v("j")}∈S</sub> ${sub(v("s"), v("j"))}` : `${wi} = ${konst(r)} · ${si}`;
    return `${v("s")} = σ(${v("x")} ${sub(v("W"), "router")}), &nbsp;${v("c")} = ${v("s")} + ${v("b")}<br>` +
      `G* = top-${caps.topk_groups ?? 1} groups by Σ top-2(${sub(v("c"), "group")}), &nbsp;S = top-${caps.top_k ?? v("k")}(${v("c")} in G*)<br>${w}<br>` +
      `MoE(${v("x")}) = ${caps.d_shared ? `shared(${v("x")}) + ` : ""}Σ${inS} ${wi} · ${Ei}`;
  }
  if (router === "softmax_topk") { // gpt-oss: a softmax over the chosen logits alone, clamped SwiGLU experts
    const L = konst(caps.swiglu_limit), g = v("g"), u = v("u");
    return `${v("l")} = ${v("x")} ${sub(v("W"), "router")} + ${v("b")}, &nbsp;S = top-${caps.top_k ?? v("k")}(${v("l")})<br>` +
      `${wi} = exp(${sub(v("l"), v("i"))}) / Σ<sub>${v("j")}∈S</sub> exp(${sub(v("l"), v("j"))})<br>` +
      `MoE(${v("x")}) = Σ${inS} ${wi} · ${Ei}, &nbsp;${Ei} = ((${u} + 1) ⊙ ${g} σ(${konst(caps.swiglu_alpha)} ${g})) ${sub(v("W"), "out," + v("i"))}, ` +
      `${g} = min(${v("x")}${sub(v("W"), "gate," + v("i"))}, ${L}), ${u} = clamp(${v("x")}${sub(v("W"), "in," + v("i"))}, −${L}, ${L})`;
  }
  const w = caps.norm_topk_prob ? `${sub(v("w"), v("i"))} = ${sub(v("p"), v("i"))} / Σ<sub>${v("j")}∈S</sub> ${sub(v("p"), v("j"))}`
    : `${sub(v("w"), v("i"))} = ${sub(v("p"), v("i"))}`;
  return `${v("p")} = softmax(${v("x")} ${sub(v("W"), "router")}), &nbsp;S = top-${caps.top_k ?? v("k")}(${v("p")})<br>${w}<br>` +
    `MoE(${v("x")}) = Σ<sub>${v("i")}∈S</sub> ${sub(v("w"), v("i"))} · ${sub(v("E"), v("i"))}(${v("x")}), &nbsp;` +
    `${sub(v("E"), v("i"))}(${v("x")}) = (SiLU(${v("x")}${sub(v("W"), "gate," + v("i"))}) ⊙ ${v("x")}${sub(v("W"), "in," + v("i"))}) ${sub(v("W"), "out," + v("i"))}`;
}

// A model that runs through transformers' own modules: what its trace records, with the model's own modules as named
// functions (norm, mixer, MLP: transformers' code; the mixer is attention, linear attention, a convolution, ...).
export const GENERIC_FORMULAS: Record<string, string> = {
  overview: `${sub(v("x"), "0")} = embed(${v("t")}) &nbsp;→&nbsp; ${sub(v("x"), "ℓ+1")} = ${sub(v("x"), "ℓ")} + Mixer(…) + MLP(…) &nbsp;→&nbsp; ` +
    `logits = head(norm(${sub(v("x"), "L")}))`,
  embedding: `${sub(v("x"), "i")} = embed(${sub(v("t"), "i")})`,
  attention: `${v("A")} = softmax( scores + ${v("M")} )<br>${sub(v("M"), "ij")} = 0 where the query reads key ${v("j")}, −∞ where not`,
  // the branches with the model's own norms (before or after each sublayer: transformers' code)
  residual: `${sub(v("x"), "mid")} = ${v("x")} + Mixer<sub>branch</sub>(${v("x")})<br>` +
    `${sub(v("x"), "out")} = ${sub(v("x"), "mid")} + MLP<sub>branch</sub>(${sub(v("x"), "mid")})`,
  output: `logits = head(norm(${sub(v("x"), "T−1")}))<br>` +
    `${sub(v("p"), "i")} ∝ exp(${sub("logit", "i")} / ${v("T")}) · 1[${v("i")} ∈ top-k ∩ top-p]`,
};

/** The formula of `view` for a model with these capabilities (and MLP activation, config.activation); `layer`: the
 *  block the view shows (a mixture of experts may keep dense blocks). */
export function formulaFor(view: string, caps: Capabilities, activation = "", layer?: number): string {
  if (view === "experts" || (view === "mlp" && layer !== undefined && hasExperts(caps, layer))) return moeFormula(caps);
  if (view === "qknorm") return QK_NORM;
  if (view === "window") return WINDOW;
  if (runsThrough(caps)) return GENERIC_FORMULAS[view] ?? FORMULAS[view];
  return gemmaFormula(view, caps, activation) ?? (caps.norm === "rms" ? LLAMA_FORMULAS[view] : undefined) ?? FORMULAS[view];
}
