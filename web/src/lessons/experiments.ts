// The Experiments area's guided lesson: interventions on the GPT-2 model for the learner's own text
// (head importance and roles, ablation, pruning, the logit lens, word arithmetic), each told with the
// numbers the panels show: the same /api/analysis answers, kept in views/experiments/store.svelte.ts.
import { tick } from "svelte";
import { num, prob, visible } from "../lib/format";
import { L, val, type InlineLesson as Lesson, type InlineStep as LessonStep, type Part } from "../lib/lesson";
import { app } from "../lib/state.svelte";
import { analysis } from "../views/experiments/api";
import { inputKey, xp, type XTab } from "../views/experiments/store.svelte";

const n = (id: string, v: number) => val(id, String(v), v);
const x4 = (id: string, v: number) => val(id, num(v), v);
const pc = (id: string, v: number) => val(id, prob(v), v);
const tok = (id: string, t: string) => val(id, visible(t), t);
const head = (id: string, l: number, h: number) => val(id, `L${l}H${h}`, `${l},${h}`);

/** The key of the learner's current text (answers stored under another key are stale). */
function key(): string {
  return app.trace ? inputKey(app.trace.model, app.trace.token_ids) : "";
}

async function open(tab: XTab): Promise<void> {
  app.view = "experiments";
  xp.tab = tab;
  await tick();
}

function importance() {
  return xp.importance && xp.importanceKey === key() && xp.importance.mode === "zero" ? xp.importance : null;
}

/** The pruning curve for this text: the one the panel shows, or the same request made here. */
async function ensurePrune(): Promise<void> {
  const tr = app.trace;
  if (!tr) return;
  const k = key();
  if (xp.prune && xp.pruneKey === k && xp.prune.mode === "zero") return;
  const r = await analysis.prune({ model: tr.model, ids: tr.token_ids, mode: "zero", max_heads: null, recompute: false });
  if (key() === k) { xp.prune = r; xp.pruneKey = k; }
}

const ROLE_NAMES: Record<string, { en: string; zh: string }> = {
  previous_token: { en: "previous-token", zh: "前一词元头" },
  first_token: { en: "first-token", zh: "首词元头" },
  duplicate_token: { en: "duplicate-token", zh: "重复词元头" },
  induction: { en: "induction", zh: "归纳头" },
  rare_token: { en: "rare-token", zh: "罕见词元头" },
};

const steps: LessonStep[] = [
  {
    id: "importance",
    target: "exp-head-map",
    enter: () => open("heads"),
    title: { en: "Which heads matter here", zh: "哪些头在这里起作用" },
    body: (lang) => {
      const imp = importance();
      if (!imp || !imp.ranked.length) return [];
      const [l, h] = imp.ranked[0];
      const all = imp.loss_change.flat();
      const small = all.filter((v) => Math.abs(v) < 0.01).length;
      const clean = x4("exp-clean-loss", imp.clean_loss);
      const top = head("exp-top-head", l, h);
      const d = x4("exp-top-change", imp.loss_change[l][h]);
      const s = n("exp-small-heads", small);
      const N = n("exp-n-heads", all.length);
      return lang === "en"
        ? L`One way to ask what a head does: switch it off and see what breaks. Each cell is the rise in the loss on your text (now ${clean} nats per token) when that head alone is set to zero. The one that hurts most is ${top}, +${d}; ${s} of the ${N} heads change the loss by less than 0.01. A head that does not matter for this text may matter for another.`
        : L`想知道一个头有什么用，一个办法是把它关掉，看哪里出了问题。每个格子是单独把那个头置零后，你这段文本上损失的上升量（现在是每个词元 ${clean} 奈特）。影响最大的是 ${top}，+${d}；${N} 个头里有 ${s} 个让损失变化不到 0.01。对这段文本无关紧要的头，换一段文本也许就很重要。`;
    },
  },
  {
    id: "roles",
    target: "exp-head-map",
    enter: () => open("heads"),
    title: { en: "Heads have habits", zh: "注意力头各有习惯" },
    body: (lang) => {
      const H = xp.heads && xp.headsKey === key() ? xp.heads : null;
      const roleOf = H?.reference_role_of ?? H?.text_role_of;
      if (!H || !roleOf) return [];
      const counts = new Map<string, number>();
      for (const r of roleOf.flat()) if (r) counts.set(r, (counts.get(r) ?? 0) + 1);
      const named = [...counts.values()].reduce((a, b) => a + b, 0);
      const N = n("exp-roles-heads", roleOf.flat().length);
      const k = n("exp-roles-named", named);
      const list: Part[] = [];
      [...counts.entries()].sort((a, b) => b[1] - a[1]).forEach(([r, c], i) => {
        if (i) list.push(lang === "en" ? ", " : "、");
        list.push(n(`exp-role-${r}`, c), lang === "en" ? ` ${ROLE_NAMES[r]?.en ?? r}` : ` 个${ROLE_NAMES[r]?.zh ?? r}`);
      });
      const where = H.reference ? (lang === "en" ? "a reference set of texts" : "一组参考文本") : (lang === "en" ? "your text" : "你的文本");
      const en: Part[] = L`Looking at where each head puts its attention on ${where}, ${k} of the ${N} heads have one clear habit (a score of at least 0.5; the letter in the cell)`;
      const zh: Part[] = L`看每个头在${where}上把注意力放在哪里，${N} 个头里有 ${k} 个有一个明显的习惯（得分至少 0.5，格子里的字母）`;
      const tail = lang === "en"
        ? L`. The habits: looking at the previous token, at the first token, at an earlier copy of the current token, at the token that followed that copy (induction, which lets a model continue a repeated pattern), or at a rare token. These names describe attention patterns; they do not prove what the head is for, and one head can do several things.`
        : L`。这些习惯是：看前一个词元、看第一个词元、看当前词元先前出现过的那一次，看那次出现之后的词元（归纳头，模型靠它接着写出重复的模式），或者看罕见的词元。这些名字描述的是注意力的模式，并不能证明这个头的用途，一个头也可能兼做几件事。`;
      const mid: Part[] = list.length ? [lang === "en" ? ": " : "：", ...list] : [];
      return lang === "en" ? [...en, ...mid, ...tail] : [...zh, ...mid, ...tail];
    },
  },
  {
    id: "ablation",
    target: "exp-ablation",
    enter: () => open("heads"),
    title: { en: "Switch one head off", zh: "关掉一个头" },
    body: (lang) => {
      const imp = importance();
      if (!imp) return [];
      const [l, h] = imp.ranked[0];
      const top = head("exp-abl-target", l, h);
      const a = xp.ablation && xp.ablated && xp.ablation.mode === "zero" ? xp.ablation : null;
      const intro = lang === "en"
        ? L`Zero ablation replaces a head's output by zeros and runs the model again; mean ablation uses the head's average output instead, a gentler change. Try the most important head, ${top}.`
        : L`置零消融把一个头的输出换成零，再把模型跑一遍；均值消融则换成这个头的平均输出，改动温和一些。试试最重要的那个头 ${top}。`;
      if (!a || !xp.ablated || a.loss_before == null || a.loss_after == null || !a.before.length) return intro;
      const who = head("exp-abl-head", xp.ablated[0], xp.ablated[1]);
      const b = x4("exp-abl-before", a.loss_before), af = x4("exp-abl-after", a.loss_after);
      const kl = x4("exp-abl-kl", a.kl);
      const t = tok("exp-abl-top", a.before[0].token);
      const p1 = pc("exp-abl-top-before", a.before[0].prob);
      const p2 = pc("exp-abl-top-after", a.changes.find((c) => c.id === a.before[0].id)?.after ?? NaN);
      const res = lang === "en"
        ? L` With ${who} off the loss goes ${b} → ${af} nats per token; the next-token guess ${t} goes ${p1} → ${p2} (KL ${kl} nats).`
        : L` 关掉 ${who} 后，损失从 ${b} 变成 ${af} 奈特/词元；对下一个词元的首选 ${t} 从 ${p1} 变成 ${p2}（KL 为 ${kl} 奈特）。`;
      return [...intro, ...res];
    },
    task: (lang) => {
      const imp = importance();
      const h = imp ? `L${imp.ranked[0][0]}H${imp.ranked[0][1]}` : "";
      return lang === "en" ? L`Click ${h} in the map.` : L`在图中点击 ${h}。`;
    },
    done: () => {
      const imp = importance();
      return !!imp && !!xp.ablated && xp.ablated[0] === imp.ranked[0][0] && xp.ablated[1] === imp.ranked[0][1];
    },
  },
  {
    id: "pruning",
    target: "exp-prune",
    enter: async () => { await open("heads"); await ensurePrune(); },
    title: { en: "Pruning: most heads can go", zh: "剪枝：多数头可以去掉" },
    body: (lang) => {
      const P = xp.prune && xp.pruneKey === key() ? xp.prune : null;
      if (!P || !P.steps.length) return [];
      const N = n("exp-prune-heads", P.steps.length);
      const clean = x4("exp-prune-clean", P.clean_loss);
      const knee = P.steps.findIndex((s) => s.loss != null && s.loss > P.clean_loss * 1.1);
      const last = P.steps[P.steps.length - 1].loss;
      const end = x4("exp-prune-all-off", last ?? NaN);
      const lead = lang === "en"
        ? L`Now switch heads off one after another, least important first, each on top of the ones already off. From ${clean} nats per token with all ${N} heads on, `
        : L`现在把头一个接一个地关掉，从最不重要的开始，每次都在已关掉的基础上再关一个。所有 ${N} 个头都开着时损失是每个词元 ${clean} 奈特，`;
      if (knee < 0) {
        return [...lead, ...(lang === "en"
          ? L`the loss never rises by 10%, even with every head off (${end}): this model's heads do little for this text.`
          : L`即使全部关掉（${end}），损失也没有上升 10%：对这段文本来说，这个模型的头几乎不起作用。`)];
      }
      const safe = n("exp-prune-safe", knee);
      const kneeLoss = x4("exp-prune-knee-loss", P.steps[knee].loss ?? NaN);
      return [...lead, ...(lang === "en"
        ? L`${safe} heads can go before the loss rises by 10%; the next one takes it to ${kneeLoss}, and with all heads off it is ${end}. Studies of bigger Transformers (Michel et al., 2019; Voita et al., 2019) found the same shape: most heads can be removed, a few cannot.`
        : L`可以关掉 ${safe} 个头，损失才上升 10%；再关一个就到了 ${kneeLoss}，全部关掉时是 ${end}。对更大的 Transformer 的研究（Michel 等，2019；Voita 等，2019）也得到同样的形状：大多数头可以去掉，少数几个不行。`)];
    },
  },
  {
    id: "lens",
    target: "exp-lens-table",
    enter: async () => { await open("lens"); xp.lessonPos = app.pos; },
    title: { en: "The logit lens", zh: "逻辑透镜" },
    body: (lang) => {
      const lens = xp.lens;
      const t = lens?.targets[0];
      if (!lens || !t || lens.positions[0] !== app.pos || !lens.layers.length) return [];
      const rows = lens.layers.map((l) => l.positions[0]);
      const at = tok("exp-lens-token", lens.position_tokens[0]);
      const pred = tok("exp-lens-pred", t.token);
      const r0 = n("exp-lens-rank0", rows[0].target_rank);
      const first = rows.findIndex((r) => r.target_rank === 1);
      const pf = pc("exp-lens-final-prob", rows[rows.length - 1].target_prob);
      const where: Part[] = first === rows.length - 1
        ? (lang === "en" ? L`only at the very end` : L`直到最后才排到第一`)
        : first === 0
          ? (lang === "en" ? L`already straight from the embeddings` : L`直接从嵌入就已经排第一`)
          : (lang === "en" ? L`from block ${n("exp-lens-first-block", first - 1)} on` : L`从第 ${n("exp-lens-first-block", first - 1)} 块之后开始排第一`);
      return lang === "en"
        ? [...L`What if the model stopped early? The logit lens sends the residual stream after each block through the final LayerNorm and unembedding, as if it were the last. After ${at} the model finally predicts ${pred} (${pf}). Read from the embeddings alone, ${pred} ranks ${r0}; it ranks first `, ...where, ...L`. A rough reading: the middle layers were never trained to be read this way.`]
        : [...L`如果模型提前停下来会怎样？逻辑透镜把每个块之后的残差流直接送进最终的 LayerNorm 和反嵌入，当作最后一层来读。在 ${at} 之后，模型最终预测 ${pred}（${pf}）。只看嵌入时，${pred} 排第 ${r0} 名；它`, ...where, ...L`。这只是粗略的读法：中间层从来没有被训练成可以这样读。`];
    },
    task: (lang) => lang === "en" ? L`Click another token of your text above.` : L`在上方点击文本中的另一个词元。`,
    done: () => xp.lessonPos >= 0 && app.pos !== xp.lessonPos,
  },
  {
    id: "arithmetic",
    target: "exp-analogy",
    enter: () => open("embed"),
    title: { en: "Word arithmetic", zh: "词向量算术" },
    body: (lang) => {
      const a = xp.analogy;
      if (!a || !a.neighbours.length) return [];
      const w = (t: string) => t.trim();
      const expr = [w(a.positive[0].token), ...a.negative.map((x) => `− ${w(x.token)}`),
        ...a.positive.slice(1).map((x) => `+ ${w(x.token)}`)].join(" ");
      const e = val("exp-analogy-expr", expr);
      const best = tok("exp-analogy-top", a.neighbours[0].token);
      const sim = x4("exp-analogy-sim", a.neighbours[0].similarity);
      return lang === "en"
        ? L`Embedding rows can be added and subtracted. Here ${e} lands nearest to ${best} (cosine ${sim}; the input words themselves are left out). The famous answer “queen” came from word2vec, vectors trained only to represent words, on billions of words. A small GPT's embeddings are a side product of predicting the next token: on the built-in explainer-small, king − man + woman gives “prince”, and “queen” is not even one of its 8192 tokens (it is split into “que” + “en”), so it cannot be the answer. Simpler analogies do work there: he − him + her gives “she”.`
        : L`嵌入行可以相加相减。这里 ${e} 最接近 ${best}（余弦相似度 ${sim}；输入的词本身不参与排名）。著名的答案“queen”来自 word2vec：那种词向量只为表示词语而训练，用的是数十亿词的语料。小型 GPT 的嵌入只是预测下一个词元的副产品：在内置的 explainer-small 上，king − man + woman 得到的是“prince”，而“queen”甚至不在它的 8192 个词元里（会被切成“que”+“en”），所以根本不可能是答案。简单一些的类比倒能成立：he − him + her 得到“she”。`;
    },
    task: (lang) => lang === "en" ? L`Type he − him + her and press Compute.` : L`输入 he − him + her，再点“计算”。`,
    done: () => {
      const a = xp.analogy;
      return !!a && a.positive.map((x) => x.token.trim()).join() === "he,her" && a.negative.map((x) => x.token.trim()).join() === "him";
    },
  },
];

export const experimentsLesson: Lesson = {
  id: "experiments",
  title: { en: "Experiments on the model", zh: "对模型做实验" },
  steps,
};
