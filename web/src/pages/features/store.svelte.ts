// The Features page's state, kept outside its components so that it survives switching views: the depth chosen,
// the token whose features are listed, the feature lit in the text and the feature whose page is open, and the
// learner's guess of what that feature detects (kept per feature, so that a guess is never lost on a re-render).
class FeaturesStore {
  /** The hook chosen (null: the model's default, its middle autoencoder). */
  hook = $state<string | null>(null);
  /** The position whose features are listed (clamped to the text). */
  pos = $state(0);
  /** The feature the pointer is on: its tokens light up in the text. */
  hovered = $state<number | null>(null);
  /** The feature whose page is open, and at which hook. */
  open = $state.raw<{ hook: string; id: number } | null>(null);
  /** The learner's guess per feature (`hook|id`), and which features' answers are revealed. */
  guesses = $state.raw(new Map<string, string>());
  revealed = $state.raw(new Set<string>());
}

export const fx = new FeaturesStore();

export const featureKey = (hook: string, id: number) => `${hook}|${id}`;
