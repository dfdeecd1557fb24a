// The encoder-decoder page's guided lesson: the original Transformer of "Attention Is All You Need",
// in the order a translation flows through it, each step told with the numbers of the learner's own
// source (read from the same /api/seq2seq answers the page's views show: s2s.decoded, and the
// positional-encoding and compare views' answers in s2sViews).
import { tick, untrack } from "svelte";
import { num, prob, visible } from "../lib/format";
import type { Lang } from "../lib/i18n";
import { L, val, type InlineLesson as Lesson, type InlineStep as LessonStep, type Part } from "../lib/lesson";
import { s2s } from "../views/seq2seq/state.svelte";
import { taskName } from "../views/seq2seq/strings";
import { s2sViews } from "../views/seq2seq/views.svelte";

const norm = (v: number[]) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const tok = (id: string, t: string) => val(id, visible(t), t);
const n = (id: string, v: number) => val(id, String(v), v);
const x4 = (id: string, v: number) => val(id, num(v), v);
const pc = (id: string, v: number) => val(id, prob(v), v);

/** The decode the page shows, once loaded and without an error. */
function decoded() {
  return s2s.error ? null : s2s.decoded;
}

/** The current step of the step-by-step decoder view (0-based) and its record. */
function current() {
  const d = decoded();
  if (!d || !d.steps.length) return null;
  const k = Math.min(Math.max(1, s2sViews.shown), d.steps.length) - 1;
  return { d, k, st: d.steps[k] };
}

async function show(tab: typeof s2s.tab): Promise<void> {
  s2s.tab = tab;
  await tick();
}

const steps: LessonStep[] = [
  {
    id: "task",
    target: "s2s-input",
    // untracked: the card runs `enter` inside an effect, and reading the text there would re-run it on every edit
    enter: () => { s2sViews.entered.text = untrack(() => s2s.text); },
    title: { en: "A task and a source", zh: "任务与源文本" },
    body: (lang) => {
      const d = decoded();
      if (!d) return [];
      const task = val("s2s-task", taskName(d.task), d.task);
      const src = val("s2s-input", d.input, d.input);
      const S = n("s2s-n-src", d.src_tokens.length);
      const out = val("s2s-output", d.output, d.output);
      return lang === "en"
        ? L`This is the 2017 Transformer: an encoder reads the whole source at once, a decoder writes the output one token at a time. This one learned a small task, ${task}. Your source ${src} is ${S} tokens, and the model answers ${out}. Every number in this lesson is computed for that input.`
        : L`这是 2017 年的 Transformer：编码器一次读完整个源文本，解码器再一个词元一个词元地写出输出。这里的模型学的是一个小任务：${task}。你的源文本 ${src} 有 ${S} 个词元，模型的答案是 ${out}。这份讲解里的每个数字都是针对这个输入算出来的。`;
    },
    task: (lang) => lang === "en" ? L`Type another source, or click an example.` : L`换一个源文本，或点一个示例。`,
    done: () => !!s2s.decoded && s2s.decoded.input !== s2sViews.entered.text,
  },
  {
    id: "embedding",
    target: "s2s-stages",
    enter: () => show("encoder"),
    title: { en: "Embedding × √d_model, plus positions", zh: "嵌入乘以 √d_model，再加上位置" },
    body: (lang) => {
      const d = decoded();
      if (!d?.source) return [];
      const D = n("s2s-d-model", d.d_model);
      const scale = x4("s2s-embed-scale", d.embed_scale);
      const first = tok("s2s-first-token", d.src_tokens[0]);
      const e = x4("s2s-embed-norm", norm(d.source.embed[0]));
      const p = x4("s2s-pe-norm", norm(d.source.pos_encoding[0]));
      return lang === "en"
        ? L`Each source token becomes a row of a learned table, ${D} numbers wide, multiplied by √${D} = ${scale}. Why? The paper (section 3.4) only says “we multiply those weights by √d_model” and gives no reason. A common explanation, not the paper's: the table starts with small entries, and the factor brings them to the size of the positional encoding added next. Here the row of ${first} has length ${e}, its positional encoding ${p}.`
        : L`每个源词元变成一张可学习表格中的一行，宽 ${D} 个数，再乘以 √${D} = ${scale}。为什么？论文（第 3.4 节）只写了“我们把这些权重乘以 √d_model”，并没有给出理由。常见的解释（并非出自论文）是：表格的初始值很小，乘上这个系数，正好与随后加上的位置编码大小相当。这里 ${first} 那一行的长度是 ${e}，它的位置编码长度是 ${p}。`;
    },
  },
  {
    id: "sinusoids",
    target: "s2s-sim",
    enter: async () => {
      if (untrack(() => s2sViews.nPos) < 64) s2sViews.nPos = 64;
      await show("positions");
    },
    title: { en: "Why sines and cosines", zh: "为什么用正弦和余弦" },
    body: (lang) => {
      const P = s2sViews.positions;
      if (!P || P.n_positions < 15) return [];
      const a = x4("s2s-sim-2-4", P.similarity[2][4]);
      const b = x4("s2s-sim-12-14", P.similarity[12][14]);
      const c = x4("s2s-sim-2-12", P.similarity[2][12]);
      return lang === "en"
        ? L`Attention itself ignores order, so each position gets a fixed vector added. Each pair of dimensions is a point on a circle turning at its own speed; moving k places along turns every circle by an angle that depends on k alone. So “k places earlier” is the same linear map (a rotation) at every position, which the paper hoped would let the model “easily learn to attend by relative positions” (section 3.5). You see it in the dot products: PE[2]·PE[4] = ${a} and PE[12]·PE[14] = ${b} are equal, both pairs being 2 apart; PE[2]·PE[12] = ${c}, 10 apart, is smaller.`
        : L`注意力本身不管顺序，所以每个位置都要加上一个固定的向量。每两个维度构成圆上的一个点，各自以不同的速度转动；往后挪 k 个位置，每个圆都转过一个只取决于 k 的角度。于是“往前数 k 个”在任何位置都是同一个线性变换（一次旋转），论文希望这能让模型“轻松学会按相对位置来关注”（第 3.5 节）。点积就能说明这一点：PE[2]·PE[4] = ${a}，PE[12]·PE[14] = ${b}，两者相等，因为两对位置都相隔 2；相隔 10 的 PE[2]·PE[12] = ${c}，就小一些。`;
    },
  },
  {
    id: "beyond",
    target: "s2s-npos",
    enter: () => show("positions"),
    title: { en: "Lengths beyond training", zh: "超出训练长度" },
    body: (lang) => {
      const P = s2sViews.positions;
      if (!P) return [];
      const T = P.trained_length ?? 0;
      const t = n("s2s-trained-len", T);
      const N = n("s2s-n-pos", P.n_positions);
      return lang === "en"
        ? L`The formula has no end: this model never saw more than ${t} positions, yet the table runs to ${N}, and past the dashed line the waves carry on. That is the paper's second reason: sinusoids “may allow the model to extrapolate to sequence lengths longer than the ones encountered during training”. May: the model never learned to use those positions (this page caps the source at its trained length). In the paper, learned position vectors did about as well.`
        : L`这个公式没有尽头：模型训练时从未见过超过 ${t} 个位置，这里的表却一直延伸到 ${N}，虚线之后的波形照样延续。这是论文给出的第二个理由：正弦编码“也许能让模型外推到比训练时更长的序列”。只是“也许”：模型从没学过怎么用这些位置（本页把源文本限制在训练长度以内）。论文里，可学习的位置向量效果也差不多。`;
    },
    task: (lang) => lang === "en"
      ? L`Drag “Positions shown” to 128 or more and follow the waves past the dashed line.`
      : L`把“显示的位置数”拖到 128 以上，看看虚线之后的波形。`,
    done: () => (s2sViews.positions?.n_positions ?? 0) >= 128,
  },
  {
    id: "encoder",
    target: "s2s-enc-attn",
    enter: async () => {
      await show("encoder");
      s2sViews.entered.layer = s2s.encLayer;
      s2sViews.entered.head = s2s.encHead;
    },
    title: { en: "The encoder sees everything", zh: "编码器能看到全部" },
    body: (lang) => {
      const d = decoded();
      const S = d?.src_tokens.length ?? 0;
      const m = d?.encoder_attn[s2s.encLayer]?.[s2s.encHead];
      if (!d || !m || S < 1) return [];
      const first = tok("s2s-enc-first", d.src_tokens[0]);
      const last = tok("s2s-enc-last", d.src_tokens[S - 1]);
      const w = x4("s2s-enc-first-last", m[0][S - 1]);
      const l = n("s2s-enc-layer", s2s.encLayer), h = n("s2s-enc-head", s2s.encHead);
      return lang === "en"
        ? L`The source is known in full before any output is written, so encoder self-attention has no mask: every token may look at every other, before or after it. In layer ${l}, head ${h}, the first token ${first} gives weight ${w} to the last one, ${last}. Each encoder layer is self-attention then a feed-forward network, each wrapped as LayerNorm(x + sublayer(x)); the last layer's output (the “memory”, one vector per source token) is what the decoder will read.`
        : L`在写出任何输出之前，源文本就已经完整可见，所以编码器的自注意力没有掩码：每个词元都可以看任何其他词元，不论在前还是在后。在第 ${l} 层第 ${h} 个头里，第一个词元 ${first} 分给最后一个词元 ${last} 的权重是 ${w}。每个编码器层先做自注意力，再过一个前馈网络，两者都包成 LayerNorm(x + 子层(x))；最后一层的输出（称为“记忆”，每个源词元一个向量）就是解码器要读取的内容。`;
    },
    task: (lang) => lang === "en" ? L`Click another layer or head in the grid.` : L`在网格里点另一个层或头。`,
    done: () => s2s.encLayer !== s2sViews.entered.layer || s2s.encHead !== s2sViews.entered.head,
  },
  {
    id: "start",
    target: "s2s-now",
    enter: async () => {
      await show("decoder");
      s2sViews.shown = 1;
    },
    title: { en: "One token at a time, from <s>", zh: "从 <s> 出发，一次一个词元" },
    body: (lang) => {
      const d = decoded();
      if (!d || !d.steps.length) return [];
      const t0 = tok("s2s-step0-token", d.steps[0].token);
      const p0 = pc("s2s-step0-prob", d.steps[0].prob);
      const N = n("s2s-n-steps", d.steps.length);
      return lang === "en"
        ? L`The decoder has nothing written yet, so its first input is the start token <s> alone. From it and the encoder's memory it predicts ${t0} with probability ${p0}. That token is appended to its input and the decoder runs again: ${N} steps in all, until it writes the end token </s>. This is autoregressive decoding.`
        : L`解码器一开始什么都还没写，所以它的第一个输入只有起始词元 <s>。根据它和编码器的记忆，解码器预测出 ${t0}，概率为 ${p0}。这个词元接到输入后面，解码器再运行一次：一共 ${N} 步，直到写出结束词元 </s>。这就是自回归解码。`;
    },
    task: (lang) => lang === "en" ? L`Press Step until the end token appears.` : L`不断点“单步”，直到出现结束词元。`,
    done: () => { const d = decoded(); return !!d && d.steps.length > 0 && s2sViews.shown >= d.steps.length; },
  },
  {
    id: "masked",
    target: "s2s-self-map",
    enter: async () => {
      await show("decoder");
      // a few steps in, so that there is a past to see and a future to hide
      const total = s2s.decoded?.steps.length ?? 1;
      s2sViews.shown = Math.max(s2sViews.shown, Math.min(3, total));
    },
    title: { en: "Masked self-attention", zh: "带掩码的自注意力" },
    body: (lang) => {
      const c = current();
      const row = c?.st.self_attn[s2s.decLayer]?.[s2s.decHead];
      if (!c || !row) return [];
      const k = n("s2s-self-step", c.k + 1);
      const w = x4("s2s-self-start", row[0]);
      const seen = n("s2s-self-seen", row.length);
      return lang === "en"
        ? L`The decoder's own tokens attend to each other too, but each position only to itself and earlier ones: the future is masked (grey, set to −∞ before the softmax). At step ${k} the newest position sees ${seen} positions and gives ${w} to <s>. While decoding, the future does not exist yet anyway; the mask matters in training, where the whole reference is fed in at once and position t must not peek at token t+1, the very token it is asked to predict.`
        : L`解码器自己的词元之间也做注意力，但每个位置只能看自己和前面的位置：未来被掩码遮住（灰色，在 softmax 之前设为 −∞）。在第 ${k} 步，最新的位置能看到 ${seen} 个位置，分给 <s> 的权重是 ${w}。解码时未来本来就还不存在；掩码真正起作用是在训练时：那时整段参考答案一次性输入，位置 t 不能偷看第 t+1 个词元，因为那正是它要预测的答案。`;
    },
  },
  {
    id: "cross",
    target: "s2s-cross-map",
    enter: () => show("decoder"),
    title: { en: "Cross-attention: the alignment", zh: "交叉注意力：对齐" },
    body: (lang) => {
      const c = current();
      const row = c?.st.cross_attn[s2s.decLayer]?.[s2s.decHead];
      if (!c || !row || !row.length) return [];
      const j = row.indexOf(Math.max(...row));
      const out = tok("s2s-cross-out", c.st.token);
      const src = tok("s2s-cross-src", c.d.src_tokens[j]);
      const jv = n("s2s-cross-src-pos", j);
      const w = x4("s2s-cross-weight", row[j]);
      const l = n("s2s-cross-layer", s2s.decLayer), h = n("s2s-cross-head", s2s.decHead);
      return lang === "en"
        ? L`In each decoder layer a second attention takes its queries from the decoder and its keys and values from the encoder's memory: this is how the output reads the source. Stacked over the steps, the rows form an alignment map. In layer ${l}, head ${h}, while writing ${out} the decoder looks hardest at source token ${src} (position ${jv}), with weight ${w}. Not every head aligns this cleanly: look through the grid.`
        : L`每个解码器层里还有第二个注意力：查询来自解码器，键和值来自编码器的记忆，输出就是这样读取源文本的。把各步的行叠起来，就得到一张对齐图。在第 ${l} 层第 ${h} 个头里，写出 ${out} 时，解码器最关注的是源词元 ${src}（位置 ${jv}），权重为 ${w}。并不是每个头都对得这么整齐，可以在网格里逐个看看。`;
    },
    task: (lang) => lang === "en" ? L`Press Step and watch the bright cell move.` : L`点“单步”，看亮格怎样移动。`,
    done: () => s2sViews.shown > 1,
  },
  {
    id: "teacher-forcing",
    target: "s2s-compare-top",
    enter: () => show("compare"),
    title: { en: "Teacher forcing vs free running", zh: "教师强制与自由运行" },
    body: (lang) => {
      const c = s2sViews.compare;
      if (!c) return [];
      const k = n("s2s-tf-correct", c.teacher_correct_steps);
      const N = n("s2s-tf-positions", c.gold_tokens.length + 1);
      const fr = val("s2s-free-text", c.free_text, c.free_text);
      return lang === "en"
        ? L`In training the decoder is fed the reference, not its own guesses (teacher forcing): every position is trained at once, in one pass. Fed the reference here, it predicts ${k} of ${N} positions right. In use it must feed itself (free running) and writes ${fr}. After one wrong token every later input is something it never saw in training, so errors can pile up: this gap is called exposure bias.`
        : L`训练时，解码器的输入是参考答案，而不是它自己的猜测（教师强制）：所有位置在一次前向计算里同时训练。这里喂给它参考答案，${N} 个位置中它预测对了 ${k} 个。实际使用时，它只能把自己的输出当作下一步的输入（自由运行），写出的是 ${fr}。一旦写错一个词元，之后的每个输入都是训练时没见过的情况，错误就可能越滚越多，这种落差叫作暴露偏差。`;
    },
    task: (lang) => lang === "en"
      ? L`Type a reference with one wrong token (e.g. change its last letter) and press Compare.`
      : L`在“参考输出”里故意写错一个词元（比如改掉最后一个字母），再点“比较”。`,
    done: () => s2sViews.compare?.first_divergence != null,
  },
  {
    id: "beam",
    target: "s2s-beam",
    enter: () => show("decoder"),
    title: { en: "Greedy vs beam search", zh: "贪心与束搜索" },
    body: (lang) => {
      const d = decoded();
      if (!d) return [];
      const B = n("s2s-beam-size", d.beam);
      const out = val("s2s-beam-output", d.output, d.output);
      const sc = x4("s2s-beam-score", d.score);
      const kept = d.beams[0] ? n("s2s-beam-kept", d.beams[0].alive.length + d.beams[0].finished.length) : null;
      const en: Part[] = L`Greedy decoding keeps only the most probable token at each step. A token that looks best now can lead to a worse whole output, so beam search keeps the k best partial outputs, ranked by the sum of their tokens' log-probabilities. With beam ${B} the output is ${out}, log-probability ${sc}.`;
      const zh: Part[] = L`贪心解码每一步只保留最可能的那个词元。眼下最好的词元，未必能带来最好的整体输出，所以束搜索同时保留 k 个最好的部分输出，按各词元对数概率之和排序。束宽为 ${B} 时，输出是 ${out}，对数概率为 ${sc}。`;
      const more = (l: Lang): Part[] => kept ? (l === "en"
        ? L` After the first step the beam holds ${kept} hypotheses (the table below the maps lists them). On tasks this small greedy is usually already right.`
        : L` 第一步之后，束里有 ${kept} 个候选（注意力图下方的表格列出了它们）。在这么小的任务上，贪心通常就已经对了。`) : [];
      return lang === "en" ? [...en, ...more("en")] : [...zh, ...more("zh")];
    },
    task: (lang) => lang === "en" ? L`Set the beam size to 3.` : L`把束宽设为 3。`,
    done: () => s2s.beam === 3 && s2s.decoded?.beam === 3,
  },
  {
    id: "training",
    target: "s2s-tabs",
    title: { en: "How it was trained", zh: "它是怎么训练出来的" },
    body: (lang) => {
      const d = decoded();
      const card = s2s.info?.checkpoint;
      if (!d || !card || card.exact_match === null || !d.steps.length) return [];
      const em = pc("s2s-exact-match", card.exact_match);
      const p0 = pc("s2s-train-top-prob", d.steps[0].prob);
      return lang === "en"
        ? L`This model learned from pairs generated on the fly, with teacher forcing, the AdamW optimiser with a learning rate that warms up and then decays, and label smoothing 0.1: the target puts 0.9 on the right token and spreads 0.1 over the whole vocabulary, which is why even a sure answer gets only about 90% (the first step above: ${p0}). It gets ${em} of held-out inputs exactly right. In the “Training, live” tab you can train a tiny one yourself and watch its cross-attention turn into an alignment.`
        : L`这个模型用即时生成的样本对训练：教师强制、AdamW 优化器（学习率先预热再衰减），以及 0.1 的标签平滑，也就是训练目标给正确词元 0.9，剩下的 0.1 平摊到整个词表上。所以即使答案很确定，概率也只有 90% 左右（上面第一步是 ${p0}）。在留出的输入上，它完全答对的比例是 ${em}。在“现场训练”标签页里，你可以亲手训练一个微型模型，看它的交叉注意力怎样变成对齐图。`;
    },
  },
];

export const seq2seqLesson: Lesson = {
  id: "seq2seq",
  title: { en: "The original Transformer", zh: "最初的 Transformer" },
  steps,
};
