// The MLP's activation functions by the name in the model's config (`activation`, as in
// src/transformer_explainer/config.py), for drawing their curves.

const SQRT_2_OVER_PI = Math.sqrt(2 / Math.PI);

/** erf to about 1e-7 (Abramowitz & Stegun 7.1.26): plenty for a curve on screen. */
function erf(x: number): number {
  const s = Math.sign(x), a = Math.abs(x);
  const t = 1 / (1 + 0.3275911 * a);
  const y = 1 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t *
    Math.exp(-a * a);
  return s * y;
}

const FUNCTIONS: Record<string, (u: number) => number> = {
  gelu_new: (u) => 0.5 * u * (1 + Math.tanh(SQRT_2_OVER_PI * (u + 0.044715 * u ** 3))), // GPT-2's tanh approximation
  gelu_pytorch_tanh: (u) => 0.5 * u * (1 + Math.tanh(SQRT_2_OVER_PI * (u + 0.044715 * u ** 3))),
  gelu: (u) => 0.5 * u * (1 + erf(u / Math.SQRT2)), // exact GELU: u Φ(u)
  silu: (u) => u / (1 + Math.exp(-u)),
};

/** The activation called `name`; null for a name this app does not know (no curve is drawn then). */
export function activationFn(name: string | undefined): ((u: number) => number) | null {
  return (name && FUNCTIONS[name]) || null;
}
