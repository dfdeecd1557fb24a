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
