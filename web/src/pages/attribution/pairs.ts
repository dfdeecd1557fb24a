// Example prompt pairs for activation patching, and the choice of one for the loaded model: a pair is usable when
// both prompts have the same number of tokens and the answer and the wrong token are one token each; the best is
// one whose answer actually moves (the model's top prediction is the answer for the clean prompt and the wrong
// token for the corrupted one), else the usable pair whose logit difference moves most. Each pair changes one
// word that the end of the prompt asks the model to repeat: small models learn to copy a word they have just read
// before they learn much else, so these are the pairs such a model has a chance to follow.
import { api } from "../../lib/client";
import type { Candidate } from "../../lib/generated/api";
import { decodeTensor } from "../../lib/tensor";
import { why } from "./api";

export interface Pair { clean: string; corrupted: string; answer: string; wrong: string }

export const PAIRS: readonly Pair[] = [
  { clean: "She opened the door. She closed the", corrupted: "She opened the window. She closed the", answer: " door",
    wrong: " window" },
  { clean: "The man opened the door. Then the man closed the", corrupted: "The man opened the window. Then the man closed the",
    answer: " door", wrong: " window" },
  { clean: "He lost his key. He looked for his", corrupted: "He lost his book. He looked for his", answer: " key",
    wrong: " book" },
  { clean: "He went to the house and then he came back to the", corrupted: "He went to the store and then he came back to the",
    answer: " house", wrong: " store" },
];

/** A pair as the loaded model reads it. */
export interface CheckedPair {
  pair: Pair;
  model: string;
  n: number; // tokens of each prompt
  answer: number; // token ids
  wrong: number;
  clean: number; // logit(answer) − logit(wrong) after each prompt
  corrupted: number;
  topClean: Candidate; // the model's top prediction after each prompt
  topCorrupted: Candidate;
  /** The answer moves: the top prediction is the answer after the clean prompt and the wrong token after the
   *  corrupted one. */
  moves: boolean;
}

async function lastLogits(model: string, text: string): Promise<Float32Array> {
  const out = await api.tensors({ model, text, tensors: [{ name: "logits", position: -1, dtype: "float32" }] });
  return decodeTensor(out.tensors[0]).data;
}

async function top(model: string, text: string): Promise<Candidate> {
  const nx = await api.nextToken({ model, text, top_n: 1, sampling: { temperature: 0 } });
  return nx.candidates[0];
}

/** The pair read by `model`, or null when it cannot be patched there (lengths differ, a token is several). */
export async function checkPair(model: string, pair: Pair): Promise<CheckedPair | null> {
  const tk = await why.tokens({ model, texts: [pair.clean, pair.corrupted, pair.answer, pair.wrong] });
  const [c, x, a, w] = tk.texts.map((t) => (tk.bos_id !== null && t.ids[0] === tk.bos_id ? t.ids.slice(1) : t.ids));
  if (c.length !== x.length || a.length !== 1 || w.length !== 1) return null;
  const [lc, lx, tc, tx] = await Promise.all([lastLogits(model, pair.clean), lastLogits(model, pair.corrupted),
    top(model, pair.clean), top(model, pair.corrupted)]);
  const m = (l: Float32Array) => l[a[0]] - l[w[0]];
  return { pair, model, n: tk.texts[0].ids.length, answer: a[0], wrong: w[0], clean: m(lc), corrupted: m(lx),
    topClean: tc, topCorrupted: tx, moves: tc.id === a[0] && tx.id === w[0] };
}

/** The example pair for `model`: the first whose answer moves, else the usable one whose difference moves most. */
export async function choosePair(model: string): Promise<CheckedPair | null> {
  const usable: CheckedPair[] = [];
  for (const p of PAIRS) {
    const c = await checkPair(model, p);
    if (c?.moves) return c;
    if (c && Math.abs(c.clean - c.corrupted) > 1e-3) usable.push(c);
  }
  usable.sort((a, b) => Math.abs(b.clean - b.corrupted) - Math.abs(a.clean - a.corrupted));
  return usable[0] ?? null;
}
