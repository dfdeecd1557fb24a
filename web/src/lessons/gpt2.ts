// The GPT-2 page's guided lesson: one idea per step, in the order of the computation, each told in
// the learner's own numbers (read from the same API answers the views show).
import { prob, visible } from "../lib/format";
import { L, val, type Lesson, type LessonStep } from "../lib/lesson";
import { app } from "../lib/state.svelte";

/** The focus token as the lesson names it: its visible text. */
function focusToken() {
  const tok = app.trace?.tokens[app.pos];
  return tok ? val("focus-token", visible(tok.text), tok.text) : null;
}

const steps: LessonStep[] = [
  {
    id: "text",
    target: "input",
    title: { en: "Your text", zh: "你的文本" },
    body: (lang) => lang === "en"
      ? L`Everything starts here. Type any text or pick an example: the model reads it at once, and every number in this lesson is computed for it.`
      : L`一切从这里开始。输入任意文本，或选一个示例：模型会立刻读入它，这份讲解里的每个数字都是针对它算出来的。`,
  },
  {
    id: "tokens",
    target: "tokens",
    enter: () => { app.view = "tokens"; },
    title: { en: "Tokens", zh: "词元" },
    body: (lang) => {
      const tr = app.trace, f = focusToken();
      if (!tr || !f) return [];
      const n = val("n-tokens", String(tr.token_ids.length), tr.token_ids.length);
      const id = val("focus-id", String(tr.token_ids[app.pos]), tr.token_ids[app.pos]);
      return lang === "en"
        ? L`Your text became ${n} tokens. The one in focus, ${f}, is entry ${id} of the vocabulary.`
        : L`你的文本被切成了 ${n} 个词元。焦点词元 ${f} 是词表中的第 ${id} 项。`;
    },
  },
  {
    id: "output",
    target: "view-output",
    enter: () => { app.view = "output"; },
    title: { en: "Prediction", zh: "预测" },
    body: (lang) => {
      const c = app.next?.candidates[0];
      if (!c) return [];
      const tok = val("top-token", visible(c.text), c.text);
      const p = val("top-prob", prob(c.prob), c.prob);
      return lang === "en"
        ? L`The model's top guess for the next token is ${tok} at ${p}.`
        : L`模型对下一个词元的首选是 ${tok}，概率为 ${p}。`;
    },
  },
];

export const gpt2Lesson: Lesson = {
  id: "gpt2",
  title: { en: "How GPT-2 reads your text", zh: "GPT-2 如何读你的文本" },
  steps,
};
