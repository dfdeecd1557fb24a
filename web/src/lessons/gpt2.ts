// The GPT-2 page's guided lesson: one idea per step, in the order of the computation, each with its
// "why", told in the learner's own numbers. Every value is read from the same API answers the views
// show (the trace, the tensors the views fetch, the next-token distribution), so the lesson follows
// the text, the focus and the settings as they change. Where a sentence is a choice or an
// interpretation rather than a fact, it says so.
import { format } from "d3-format";
import { num, prob, visible } from "../lib/format";
import type { TensorSpec } from "../lib/generated/api";
import { L, val, type InlineLesson as Lesson, type InlineStep as LessonStep, type Part, type Value } from "../lib/lesson";
import { paramCounts } from "../lib/params";
import { app, DEFAULT_SAMPLING } from "../lib/state.svelte";
import { decodeTensor, row, type Tensor } from "../lib/tensor";
import { specsFor, type LnWhich, type ViewId } from "../lib/views";


// -- values -----------------------------------------------------------------------------------------

const cfg = () => app.trace?.config;
const nTok = () => app.trace?.token_ids.length ?? 0;
/** A number as the views print it. */
const n = (id: string, v: number): Value => val(id, num(v), v);
/** A whole number (a count, an id, a size). */
const int = (id: string, v: number): Value => val(id, String(v), v);
/** A large count, with thousands separators. */
const big = (id: string, v: number): Value => val(id, format(",")(v), v);
/** A number that may be whole (√16 = 4). */
const exact = (id: string, v: number): Value => val(id, Number.isInteger(v) ? String(v) : num(v), v);
/** A probability. */
const pr = (id: string, p: number): Value => val(id, prob(p), p);
/** Token `i` of the text, with its spaces visible; `raw` is its id. */
function tok(id: string, i: number): Value {
  const t = app.trace?.tokens[i];
  return t ? val(id, visible(t.text), t.id) : val(id, "", -1);
}
/** The focus token, or null before the first trace. */
const focusTok = (id = "focus-token") => (app.trace?.tokens[app.pos] ? tok(id, app.pos) : null);

/** The tensors of a view for the current focus (the same specs, so the same cached answers). */
function viewTensors(view: ViewId, ln?: LnWhich): (Tensor | undefined)[] {
  const f = app.focus();
  return specsFor(view, ln ? { ...f, ln } : f).map((s) => app.tensor(s));
}

/** Index of the largest (or smallest) of `a[0..upto]`. */
function argBest(a: ArrayLike<number>, upto: number, sign = 1): number {
  let best = 0;
  for (let j = 1; j <= upto && j < a.length; j++) if (sign * a[j] > sign * a[best]) best = j;
  return best;
}

function norm(a: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * a[i];
  return Math.sqrt(s);
}

// -- what the steps remember from when they opened (the task compares against it) -------------------

const at = { pos: 0, head: 0, nTok: 0 };
function mark() {
  at.pos = app.pos;
  at.head = app.head;
  at.nTok = nTok();
}

function show(view: ViewId, ln?: LnWhich) {
  app.view = view;
  if (ln) app.ln = ln;
  mark();
}

/** The token the "tokens" step asks the learner to click: the one before the last. */
const clickTarget = () => Math.max(0, nTok() - 2);

/** A word split into two BPE pieces: the first token that continues a word. */
function splitWord(): [number, number] | null {
  const toks = app.trace?.tokens ?? [];
  for (let i = 1; i < toks.length; i++) {
    if (/^\p{L}/u.test(toks[i].text) && /\p{L}$/u.test(toks[i - 1].text)) return [i - 1, i];
  }
  return null;
}

const attnSpecs = (): TensorSpec[] => specsFor("attention", app.focus());

// -- the steps ---------------------------------------------------------------------------------------

const steps: LessonStep[] = [
  {
    id: "text",
    target: "input",
    title: { en: "Your text", zh: "你的文本" },
    body: (lang) => {
      const chars = val("n-chars", String([...app.text].length), [...app.text].length);
      return lang === "en"
        ? L`Everything starts here. Type any text or pick an example: the model reads it at once. Every number in this lesson is computed for the ${chars} characters in the box; change them at any step and the numbers follow.`
        : L`一切从这里开始。随便输入一段文字，或者选一个示例，模型会立刻读入。这份讲解里的每个数字，都是针对框里这 ${chars} 个字符算出来的；任何一步改了文字，数字都会跟着变。`;
    },
  },
  {
    id: "overview",
    target: "overview",
    enter: () => show("overview"),
    title: { en: "The whole journey", zh: "完整的旅程" },
    body: (lang) => {
      const c = cfg(), f = focusTok();
      if (!c || !f) return [];
      const nt = int("n-tokens", nTok()), nl = int("n-layer", c.n_layer);
      return lang === "en"
        ? L`Before the details, the map. Each of your ${nt} tokens is a row; it becomes a vector, passes through ${nl} blocks that each read the vector and add to it, and at the end the last position's vector becomes a score for every possible next token. The tokens travel side by side: only attention (the arcs) lets one read another. The lesson now walks this path stage by stage, for ${f}.`
        : L`先看全局，再看细节。你的 ${nt} 个词元各占一行：每个词元先变成一个向量，依次经过 ${nl} 个块，每个块读取这个向量并在上面累加；最后，末位的向量变成对下一个词元的打分。各个词元并排前进，只有注意力（图中的弧线）让它们互相读取。接下来，这份讲解就以 ${f} 为例，沿着这条路一站一站地走。`;
    },
    task: (lang) => lang === "en"
      ? L`Press Play and follow the yellow dot: it is ${focusTok("focus-token-2") ?? ""}'s vector, with its real numbers below the picture.`
      : L`按“播放”，跟着黄色圆点走：它就是 ${focusTok("focus-token-2") ?? ""} 的向量，图下方是它的真实数值。`,
  },
  {
    id: "tokens",
    target: "tokens",
    enter: () => show("tokens"),
    title: { en: "Tokens", zh: "词元" },
    body: (lang) => {
      const c = cfg(), f = focusTok();
      if (!c || !f) return [];
      const nt = int("n-tokens", nTok()), V = big("vocab", c.vocab_size);
      const id = int("focus-id", app.trace!.token_ids[app.pos]);
      return lang === "en"
        ? L`The model does not read letters. Your text became ${nt} tokens, each an entry of a fixed vocabulary of ${V}. The token in focus, ${f}, is entry ${id}. Why: the model computes with numbers, and a fixed table of pieces can spell any text.`
        : L`模型并不直接读字母。你的文字被切成了 ${nt} 个词元，每个词元都是一张固定词表（共 ${V} 项）里的一项。当前焦点词元 ${f} 是第 ${id} 项。为什么这样做：模型只能拿数字来计算，而一张固定的片段表就能拼出任何文字。`;
    },
    task: (lang) => {
      if (!app.trace) return [];
      const t = tok("click-token", clickTarget());
      return lang === "en"
        ? L`Click (or tap) the token ${t} above: the focus moves to it, and every view shows its numbers.`
        : L`点一下上面的词元 ${t}：焦点会移到它身上，各个视图随即显示它的数值。`;
    },
    done: () => app.pos === clickTarget(),
  },
  {
    id: "bpe",
    target: "token-table",
    enter: () => show("tokens"),
    title: { en: "Pieces of words, and the leading space", zh: "词的片段，以及词前的空格" },
    body: (lang) => {
      const toks = app.trace?.tokens;
      if (!toks) return [];
      const sp = toks.findIndex((t) => t.text.startsWith(" "));
      const split = splitWord();
      const s = sp >= 0 ? tok("space-token", sp) : null;
      const a = split ? tok("split-a", split[0]) : null, b = split ? tok("split-b", split[1]) : null;
      const en: Part[] = [...L`GPT-2 cuts text with byte-level BPE: frequent words are one token, rarer ones are built from pieces that were merged because they often occur together. `,
        ...(a && b ? L`Here ${a} and ${b} together make one word. ` : L`Every word of your text is a single token; type a rare word (say “tokenization”) to see one split. `),
        ...(s ? L`A leading space belongs to the token (shown as ␣): ${s} is a different entry from the same letters without the space. ` : []),
        ...L`Why pieces: any string, even a typo or an emoji, can be spelt from bytes, so nothing is ever unknown, while common words still cost one step.`];
      const zh: Part[] = [...L`GPT-2 用字节级 BPE 切分文本：常见的词是一个词元，少见的词由几个片段拼成，这些片段是因为经常挨在一起出现而被合并出来的。`,
        ...(a && b ? L`比如这里的 ${a} 和 ${b} 合起来才是一个词。` : L`你这段文字里每个词都正好是一个词元；输入一个生僻词（比如 “tokenization”）就能看到它被拆开。`),
        ...(s ? L`词前的空格属于词元本身（显示为 ␣）：${s} 和不带空格的同样字母是词表里不同的两项。` : []),
        ...L`为什么用片段：任何字符串，哪怕是错别字或表情符号，都能用字节拼出来，所以不存在“不认识的词”；常见的词仍然只占一步。`];
      return lang === "en" ? en : zh;
    },
  },
  {
    id: "embed-token",
    target: "emb-token",
    enter: () => show("embedding"),
    title: { en: "Token embedding", zh: "词元嵌入" },
    body: (lang) => {
      const c = cfg(), f = focusTok(), [we] = viewTensors("embedding");
      if (!c || !f || !we) return [];
      const id = int("focus-id", app.trace!.token_ids[app.pos]), V = big("vocab", c.vocab_size);
      const d = int("d-model", c.n_embd), x0 = n("we-0", we.data[0]);
      return lang === "en"
        ? L`The id ${id} of ${f} picks row ${id} of the token embedding matrix W_E (${V} × ${d}): ${d} numbers, the first of them ${x0}. Why: an id is only a name (an id is no more like the next id than like any other), but vectors can be near or far. Training moves the rows so that tokens used in similar ways get similar vectors, and everything after this point computes with vectors.`
        : L`${f} 的编号 ${id} 选出词元嵌入矩阵 W_E（${V} × ${d}）的第 ${id} 行：${d} 个数，第一个是 ${x0}。为什么：编号只是个名字（相邻的编号并不意味着意思相近），向量却有远近之分。训练会不断调整这些行，让用法相近的词元得到相近的向量；从这里往后，所有计算都在向量上进行。`;
    },
  },
  {
    id: "embed-pos",
    target: "emb-pos",
    enter: () => show("embedding"),
    title: { en: "Position embedding", zh: "位置嵌入" },
    body: (lang) => {
      const c = cfg(), f = focusTok(), [we, wp, sum] = viewTensors("embedding");
      if (!c || !f || !we || !wp || !sum) return [];
      const p = int("pos", app.pos), ctx = int("ctx", c.block_size);
      const a = n("we-0", we.data[0]), b = n("wpos-0", wp.data[0]), s = n("sum-0", sum.data[0]);
      return lang === "en"
        ? L`${f} sits at position ${p}, and GPT-2 adds a learned vector for that position (one per position, up to ${ctx}). In the first dimension: ${a} + ${b} = ${s}. Why: attention, coming next, treats its inputs as an unordered set; without positions “dog bites man” and “man bites dog” would look the same.`
        : L`${f} 位于第 ${p} 个位置，GPT-2 会给它加上这个位置专属的一个向量（每个位置一个，最多 ${ctx} 个，都是训练出来的）。看第一个维度：${a} + ${b} = ${s}。为什么：接下来的注意力机制把输入当作一个无序的集合；没有位置信息，“狗咬人”和“人咬狗”看起来就一模一样。`;
    },
  },
  {
    id: "layernorm",
    target: "ln-stats",
    enter: () => show("layernorm", "ln1"),
    title: { en: "Layer norm", zh: "层归一化" },
    body: (lang) => {
      const f = focusTok(), [, mean, variance] = viewTensors("layernorm", "ln1");
      if (!f || !mean || !variance) return [];
      const l = int("layer", app.layer), mu = n("ln-mean", mean.data[app.pos]), v = n("ln-var", variance.data[app.pos]);
      return lang === "en"
        ? L`Before attention, block ${l} normalises the vector of ${f}: its mean ${mu} is subtracted and it is divided by √(σ² + ε), with variance σ² = ${v}, so it leaves with mean 0 and variance 1; then a learned scale γ and shift β are applied. Why: the vectors grow and drift as blocks add to them; normalising hands every sub-layer inputs of the same scale, which keeps a deep stack stable to train. GPT-2 normalises before each sub-layer (“pre-LN”).`
        : L`进入注意力之前，第 ${l} 块先把 ${f} 的向量归一化：减去均值 ${mu}，再除以 √(σ² + ε)（方差 σ² = ${v}），得到均值 0、方差 1 的向量，然后乘上可学习的缩放 γ、加上平移 β。为什么：向量在一层层累加中会越变越大、不断漂移；归一化让每个子层拿到的输入尺度一致，深层网络才训练得稳。GPT-2 在每个子层之前做归一化（称为 “pre-LN”）。`;
    },
  },
  {
    id: "qkv",
    target: "qkv-mats",
    enter: () => show("qkv"),
    needs: attnSpecs,
    title: { en: "Query, key, value: a search", zh: "查询、键、值：一次检索" },
    body: (lang) => {
      const c = cfg(), f = focusTok(), [scores] = viewTensors("attention");
      if (!c || !f || !scores) return [];
      const best = argBest(scores.data, app.pos);
      const k = tok("best-key", best), s = n("best-score", scores.data[best]);
      const dh = int("d-head", c.head_dim), h = int("head", app.head);
      return lang === "en"
        ? L`Attention is a soft search. From its normalised vector every token makes three vectors of ${dh} numbers per head: a query (what am I looking for?), a key (what do I offer?) and a value (what do I pass on if chosen?). The query of ${f} is matched against every key; in head ${h} the best match is the key of ${k}, with q·k = ${s}. The next steps turn such matches into weights and fetch the values.`
        : L`注意力是一种“模糊检索”。每个词元用归一化后的向量，为每个头各算出三个 ${dh} 维的向量：查询（我在找什么？）、键（我能提供什么？）和值（被选中时我交出什么？）。${f} 的查询会和每个键去比；在第 ${h} 个头里，最匹配的是 ${k} 的键，q·k = ${s}。接下来几步把这些匹配程度变成权重，再按权重取回值。`;
    },
  },
  {
    id: "dot",
    target: "stage-scores",
    enter: () => show("attention"),
    title: { en: "The dot product as similarity", zh: "点积：衡量相似" },
    body: (lang) => {
      const f = focusTok(), [scores] = viewTensors("attention");
      if (!f || !scores) return [];
      const hi = argBest(scores.data, app.pos), lo = argBest(scores.data, app.pos, -1);
      const k1 = tok("high-key", hi), s1 = n("high-score", scores.data[hi]);
      const k2 = tok("low-key", lo), s2 = n("low-score", scores.data[lo]);
      return lang === "en"
        ? L`The match is a dot product q·k: multiply the two vectors number by number and add up. It is large when they point the same way, near 0 when they are unrelated, negative when they point apart: a similarity that a GPU computes for all pairs at once as Q·Kᵀ. For ${f} the highest score goes to ${k1} (${s1}) and the lowest to ${k2} (${s2}).`
        : L`匹配程度就是点积 q·k：两个向量逐个数相乘再相加。方向一致时它很大，互不相关时接近 0，方向相反时为负：这就是一种相似度，而且 GPU 可以用一次矩阵乘法 Q·Kᵀ 把所有词元对一起算完。对 ${f} 来说，得分最高的是 ${k1}（${s1}），最低的是 ${k2}（${s2}）。`;
    },
  },
  {
    id: "scale",
    target: "stage-scaled",
    enter: () => show("attention"),
    title: { en: "Scaling by √d_k", zh: "除以 √d_k" },
    body: (lang) => {
      const c = cfg(), [scores, scaled] = viewTensors("attention");
      if (!c || !scores || !scaled) return [];
      const best = argBest(scores.data, app.pos);
      const dk = int("d-k", c.head_dim), r = exact("sqrt-dk", Math.sqrt(c.head_dim));
      const s = n("best-score", scores.data[best]), s2 = n("scaled-score", scaled.data[best]);
      return lang === "en"
        ? L`Every score is divided by √d_k = √${dk} = ${r}: the best score ${s} becomes ${s2}. Why: a dot product of d_k numbers spreads more the longer the vectors are (for random vectors its spread grows like √d_k). Unscaled, the scores of wide heads get so large that the softmax saturates (nearly all the weight on one key) and its gradients vanish, so the model could no longer learn where to look.`
        : L`每个得分都要除以 √d_k = √${dk} = ${r}：最高分 ${s} 变成 ${s2}。为什么：d_k 个数的点积，向量越长，数值的波动就越大（对随机向量来说，大约按 √d_k 增长）。如果不缩放，维度大的头得分会大到让 softmax 饱和（几乎所有权重都压在一个键上），梯度也随之消失，模型就再也学不会该看哪里。`;
    },
  },
  {
    id: "mask",
    target: "attn-pattern",
    enter: () => show("attention"),
    title: { en: "The causal mask", zh: "因果掩码" },
    body: (lang) => {
      const f = focusTok(), T = nTok();
      if (!f || !T) return [];
      const p = int("pos", app.pos), seen = int("n-visible", app.pos + 1), masked = int("n-masked", T - 1 - app.pos);
      const last = app.pos === T - 1;
      return lang === "en"
        ? [...L`GPT-2 learns by predicting every next token of a text at once, so no token may see the tokens after it: they are the answers. Scores of later keys are set to −∞ before the softmax, which makes their weights exactly 0 (the empty upper-right triangle). ${f} at position ${p} sees ${seen} keys, itself included; ${masked} are masked.`,
          ...(last ? L` It is the last token, so nothing is hidden from it; the rows above show the mask.` : [])]
        : [...L`GPT-2 训练时一次性预测一段文字里每个位置的下一个词元，所以任何词元都不能看到它后面的词元，那些正是答案。排在后面的键，得分在 softmax 之前被设为 −∞，权重因此恰好是 0（也就是右上方那块空白三角）。位于第 ${p} 个位置的 ${f} 能看到 ${seen} 个键（包括它自己），有 ${masked} 个被遮住。`,
          ...(last ? L`它是最后一个词元，所以什么都没被遮住；上面几行才看得出掩码。` : [])];
    },
    task: (lang) => lang === "en"
      ? L`Click (or tap) another row of the pattern: the focus moves to that token and its row of weights is read out above.`
      : L`点一下注意力图里的另一行：焦点会移到那个词元，上方随即显示它那一行权重。`,
    done: () => app.pos !== at.pos,
  },
  {
    id: "softmax",
    target: "stage-softmax",
    enter: () => show("attention"),
    title: { en: "Softmax: scores become weights", zh: "softmax：得分变成权重" },
    body: (lang) => {
      const f = focusTok(), [, , , pattern] = viewTensors("attention");
      if (!f || !pattern) return [];
      const w = row(pattern, app.pos), best = argBest(w, app.pos);
      let sum = 0;
      for (let j = 0; j < w.length; j++) sum += w[j];
      const k = tok("top-key", best), wk = n("top-weight", w[best]), s = val("row-sum", sum.toFixed(3), sum); // float16 weights: 3 decimals, not a spurious 1.0001
      return lang === "en"
        ? L`Softmax exponentiates each score (so all become positive) and divides by their sum (so they add up to 1). Exponentials widen the gaps, so the best matches win clearly, yet every visible key keeps some weight and the whole is smooth enough to train. ${f} gives its largest weight to ${k}: ${wk}; its row sums to ${s}.`
        : L`softmax 先对每个得分取指数（全部变成正数），再除以它们的和（加起来等于 1）。取指数会拉大差距，最匹配的键明显胜出，但每个看得见的键都还保留一点权重，整个过程也足够平滑，可以训练。${f} 给 ${k} 的权重最大：${wk}；它这一行加起来是 ${s}。`;
    },
  },
  {
    id: "heads",
    target: "head-picker",
    enter: () => show("attention"),
    needs: () => {
      const H = cfg()?.n_head ?? 0;
      return Array.from({ length: H }, (_, h) => ({ name: `blocks.${app.layer}.attn.pattern`, head: h, position: app.pos }));
    },
    title: { en: "Several heads", zh: "多个注意力头" },
    body: (lang) => {
      const c = cfg(), f = focusTok();
      if (!c || !f) return [];
      const rows = Array.from({ length: c.n_head }, (_, h) =>
        app.tensor({ name: `blocks.${app.layer}.attn.pattern`, head: h, position: app.pos }));
      if (rows.some((r) => !r)) return [];
      const fav = rows.map((r) => argBest(r!.data, app.pos));
      const h1 = app.head;
      // another head, preferably one whose favourite key differs
      const h2 = [...Array(c.n_head).keys()].find((h) => h !== h1 && fav[h] !== fav[h1])
        ?? (h1 + 1) % c.n_head;
      const H = int("n-head", c.n_head), l = int("layer", app.layer);
      const a = int("head", h1), ka = tok("head-key", fav[h1]), wa = n("head-weight", rows[h1]!.data[fav[h1]]);
      const b = int("head2", h2), kb = tok("head2-key", fav[h2]), wb = n("head2-weight", rows[h2]!.data[fav[h2]]);
      return lang === "en"
        ? L`One head computes one set of weights, so it can look for one kind of thing at a time. This model runs ${H} heads side by side, each with its own W_Q, W_K and W_V, so each can search for something different (the previous token, say, or an earlier mention of the same name). In layer ${l}, head ${a} sends ${f} mostly to ${ka} (${wa}), while head ${b} sends it to ${kb} (${wb}).`
        : L`一个头只算出一组权重，一次只能找一类东西。这个模型并排运行 ${H} 个头，各有自己的 W_Q、W_K、W_V，于是每个头可以找不同的东西（比如前一个词元，或者前文里同一个名字）。在第 ${l} 层，第 ${a} 个头让 ${f} 主要看 ${ka}（${wa}），第 ${b} 个头则主要看 ${kb}（${wb}）。`;
    },
    task: (lang) => lang === "en"
      ? L`Pick another head with these buttons and watch the pattern change.`
      : L`用这排按钮换一个头，看看注意力图怎么变。`,
    done: () => app.head !== at.head,
  },
  {
    id: "concat",
    target: "heads-concat",
    enter: () => show("heads"),
    title: { en: "Concatenation and W_O", zh: "拼接与 W_O" },
    body: (lang) => {
      const c = cfg();
      if (!c) return [];
      const dh = int("d-head", c.head_dim), H = int("n-head", c.n_head), w = int("concat-width", c.n_head * c.head_dim);
      const d = int("d-model", c.n_embd);
      return lang === "en"
        ? L`Each head returns z = weights · V: a mix of the values it looked at, ${dh} numbers per token. The ${H} heads' outputs are laid side by side, ${H} × ${dh} = ${w} numbers, exactly the model width ${d}. Then W_O (${d} × ${d}) mixes them into one update, attn_out. Why: concatenating keeps each head's findings apart; W_O is where they are combined and written in the residual stream's own coordinates.`
        : L`每个头输出 z = 权重 · V：它所关注的那些值按权重混合的结果，每个词元 ${dh} 个数。${H} 个头的输出并排拼在一起：${H} × ${dh} = ${w} 个数，正好是模型宽度 ${d}。随后 W_O（${d} × ${d}）把它们混合成一个更新量 attn_out。为什么：拼接让各个头的结果互不干扰；W_O 负责把它们合起来，并换算回残差流自己的坐标。`;
    },
  },
  {
    id: "residual",
    target: "resid-attn",
    enter: () => show("residual"),
    title: { en: "The residual stream", zh: "残差流" },
    body: (lang) => {
      const f = focusTok(), [pre, attn, , mlp, post] = viewTensors("residual");
      if (!f || !pre || !attn || !mlp || !post) return [];
      const l = int("layer", app.layer);
      const a = n("norm-pre", norm(pre.data)), b = n("norm-attn", norm(attn.data));
      const c = n("norm-mlp", norm(mlp.data)), d = n("norm-post", norm(post.data));
      return lang === "en"
        ? L`A block never replaces the vector; it adds to it. Entering block ${l}, the vector of ${f} has length ${a}; attention adds a vector of length ${b}, the MLP one of ${c}, and ${d} leaves. This sum is the residual stream: every block reads it and writes its edit back into it. Why: the input always passes through unchanged, so gradients flow straight back through a deep stack, and a block with nothing to add can add almost nothing.`
        : L`块从不替换向量，只往上加。进入第 ${l} 块时，${f} 的向量长度是 ${a}；注意力加上一个长度为 ${b} 的向量，MLP 再加上一个长度为 ${c} 的，出来时长度为 ${d}。这条不断累加的通道就是残差流：每个块都从中读取，再把自己的修改写回去。为什么：输入总能原样通过，梯度可以沿着这条加法通路直接传回很深的网络；某个块如果没什么可补充的，也可以几乎什么都不加。`;
    },
  },
  {
    id: "dropout",
    target: "dropout",
    enter: () => show("residual"),
    title: { en: "Dropout (off at inference)", zh: "Dropout（推理时关闭）" },
    body: (lang) => lang === "en"
      ? L`While training, dropout sets a random fraction of the values to 0 (GPT-2's configuration uses 10%) and scales up the rest, so the model cannot lean on any single path: a guard against learning the training text by heart. At inference, as here, it is switched off: nothing is dropped, and the same text always gives the same numbers.`
      : L`Dropout（随机丢弃）只在训练时使用：随机把一部分数值置为 0（GPT-2 的配置里是 10%），并把其余的相应放大，让模型不能只依赖某一条通路，从而避免把训练文本死记硬背下来。推理时（比如这里）它是关闭的：什么都不丢弃，同一段文字总是得到同样的数字。`,
  },
  {
    id: "mlp",
    target: "mlp-pre",
    enter: () => show("mlp"),
    title: { en: "The MLP: widen, bend, narrow", zh: "MLP：展宽、弯折、收窄" },
    body: (lang) => {
      const c = cfg();
      if (!c) return [];
      const d = int("d-model", c.n_embd), m = int("d-mlp", c.d_mlp), r = int("mlp-ratio", c.d_mlp / c.n_embd);
      return lang === "en"
        ? L`Attention moves information between positions; the MLP then works on each position alone. It widens the vector from ${d} to ${m} numbers (${r} ×), applies GELU, and projects back to ${d}. Why wider: more room to detect many patterns at once. A common interpretation (useful, not settled) is that the MLPs hold much of what the model knows, as learned key–value memories.`
        : L`注意力在位置之间传递信息；之后 MLP 对每个位置单独加工：把向量从 ${d} 维展宽到 ${m} 维（${r} 倍），经过 GELU，再投影回 ${d} 维。为什么要展宽：空间更大，才能同时识别许多种模式。一种常见的解读（有用，但尚无定论）认为，模型学到的知识有很大一部分存在 MLP 里，像一张学出来的“键–值”记忆表。`;
    },
  },
  {
    id: "gelu",
    target: "gelu",
    enter: () => show("mlp"),
    title: { en: "GELU, the bend", zh: "GELU：那道弯" },
    body: (lang) => {
      const [, pre, post] = viewTensors("mlp");
      if (!pre || !post) return [];
      const i = argBest(pre.data, pre.data.length - 1, -1);
      const u = int("unit", i), x = n("gelu-in", pre.data[i]), y = n("gelu-out", post.data[i]);
      return lang === "en"
        ? L`GELU lets positive inputs through almost unchanged and squashes negative ones towards 0. Here the most negative unit, ${u}, gets ${x} and comes out as ${y}. Why any bend at all: two linear maps in a row are just one linear map; the nonlinearity between them is what lets the MLP compute more than a weighted sum.`
        : L`GELU 让正的输入几乎原样通过，把负的输入压向 0。这里最负的是第 ${u} 个单元：输入 ${x}，输出 ${y}。为什么非要有这道弯：两个线性变换连在一起，仍然只是一个线性变换；正是中间这一步非线性，让 MLP 能算出比加权求和更多的东西。`;
    },
  },
  {
    id: "params",
    target: "",
    enter: () => show("mlp"),
    title: { en: "Where the parameters are", zh: "参数都在哪里" },
    body: (lang) => {
      const c = cfg();
      if (!c) return [];
      const p = paramCounts(c);
      const a = big("mlp-params", p.mlp), b = big("block-params", p.block), f1 = pr("mlp-block-share", p.mlp / p.block);
      const f2 = pr("mlp-model-share", p.mlpAll / p.total), N = big("total-params", p.total);
      const e = pr("embed-share", p.embed / p.total), d = int("d-model", c.n_embd);
      return lang === "en"
        ? L`With d = ${d}, each block's MLP has 8d² + 5d = ${a} parameters of the block's 12d² + 13d = ${b}: ${f1}, two thirds. Of this model's ${N} parameters, counting every weight and bias, the MLPs hold ${f2} and the embeddings ${e}. (GPT-2 small, d = 768 with 12 blocks, gives 45.5% by the same sums: “most parameters are in the MLP” holds for a block, not for the whole model.)`
        : L`d = ${d} 时，每个块的 MLP 有 8d² + 5d = ${a} 个参数，整个块有 12d² + 13d = ${b} 个：MLP 占 ${f1}，约三分之二。这个模型一共 ${N} 个参数（所有权重和偏置都算上），其中 MLP 占 ${f2}，嵌入占 ${e}。（GPT-2 small 的 d = 768、共 12 块，同样算下来 MLP 占 45.5%：“大部分参数都在 MLP 里”对单个块成立，对整个模型并不成立。）`;
    },
  },
  {
    id: "blocks",
    target: "resid-norms",
    enter: () => show("blocks"),
    title: { en: "The stack of blocks", zh: "块的堆叠" },
    body: (lang) => {
      const tr = app.trace, f = focusTok();
      if (!tr || !f) return [];
      const norms = decodeTensor(tr.resid_norms), T = norms.shape[1], Lr = norms.shape[0];
      const nl = int("n-layer", tr.config.n_layer);
      const a = n("norm-first", norms.data[app.pos]), b = n("norm-last", norms.data[(Lr - 1) * T + app.pos]);
      return lang === "en"
        ? L`All of that was one block. This model stacks ${nl} of them, the same in shape, each with its own weights. Each reads the stream the earlier ones wrote to, so later blocks can build on what earlier ones found; one block gets only one round of looking around. The vector of ${f} has length ${a} entering block 0 and ${b} at the end of the stack.`
        : L`前面讲的都只是一个块。这个模型把 ${nl} 个这样的块叠在一起，结构相同，权重各异。每个块都读取前面各块写入的残差流，所以后面的块可以在前面的发现之上继续加工；只有一个块的话，就只能“环顾”一轮。${f} 的向量进入第 0 块时长度为 ${a}，到整个堆叠末尾时为 ${b}。`;
    },
  },
  {
    id: "final-ln",
    target: "ln-stats",
    enter: () => { app.pos = Math.max(0, nTok() - 1); show("layernorm", "ln_final"); },
    title: { en: "The final layer norm", zh: "最后的层归一化" },
    body: (lang) => {
      const f = focusTok(), [, mean, variance] = viewTensors("layernorm", "ln_final");
      if (!f || !mean || !variance) return [];
      const mu = n("ln-mean", mean.data[app.pos]), v = n("ln-var", variance.data[app.pos]);
      return lang === "en"
        ? L`After the last block comes one more layer norm. The next token is predicted from the last position, so the focus is now on ${f}: its vector arrives with mean ${mu} and variance ${v}, and leaves normalised. Why: the stream's scale changes through the stack (see the previous step), and the output layer should see a vector of steady scale.`
        : L`最后一个块之后，还有一次层归一化。下一个词元是由最后一个位置预测的，所以焦点现在移到了 ${f}：它的向量进来时均值为 ${mu}、方差为 ${v}，出去时已经归一化。为什么：残差流的尺度在层层堆叠中不断变化（见上一步），输出层需要一个尺度稳定的向量。`;
    },
  },
  {
    id: "unembed",
    target: "logits",
    enter: () => show("output"),
    title: { en: "Unembedding: a score per token", zh: "反嵌入：给每个词元打分" },
    body: (lang) => {
      const c = cfg(), top = app.next?.candidates[0];
      if (!c || !top) return [];
      const V = big("vocab", c.vocab_size), t = val("top-token", visible(top.text), top.id), l = n("top-logit", top.logit);
      return lang === "en"
        ? L`To score the next token, the normalised vector is multiplied by W_Eᵀ: the same embedding matrix as at the start, transposed (GPT-2 ties the two and adds no bias). Each of the ${V} results is a logit, an unnormalised score: the dot product of the vector with that token's embedding, so similarity once more. The highest is ${t} at ${l}. Why tie them: it saves a whole V × d matrix, and “predict t” becomes “point towards t's embedding”.`
        : L`为了给下一个词元打分，归一化后的向量要乘以 W_Eᵀ：就是开头那个嵌入矩阵的转置（GPT-2 让两者共用权重，而且不加偏置）。得到的 ${V} 个结果叫 logit（未归一化的分数）：向量与各个词元嵌入的点积，又一次在衡量相似度。最高的是 ${t}，为 ${l}。为什么共用：省下一整个 V × d 的矩阵，而且“预测 t”就变成了“让向量指向 t 的嵌入”。`;
    },
  },
  {
    id: "probs",
    target: "candidates",
    enter: () => show("output"),
    title: { en: "From logits to probabilities", zh: "从 logit 到概率" },
    body: (lang) => {
      const nx = app.next;
      if (!nx || nx.candidates.length < 2) return [];
      const [c1, c2] = nx.candidates;
      const t1 = val("top-token", visible(c1.text), c1.id), t2 = val("second-token", visible(c2.text), c2.id);
      const p1 = pr("top-prob-nocut", c1.prob_no_cut), p2 = pr("second-prob-nocut", c2.prob_no_cut);
      const g = n("logit-gap", c1.logit - c2.logit);
      return lang === "en"
        ? L`As in attention, a softmax over all logits turns them into probabilities, and only the differences between logits matter. Before any cut, ${t1} has probability ${p1} and ${t2} ${p2}: their logits differ by ${g}, and their ratio is e^(difference / T). The table lists the likeliest candidates, with probabilities after the cuts explained next; grey rows were cut.`
        : L`和注意力里一样，对全部 logit 做 softmax 就得到概率，起作用的只是 logit 之间的差。在任何截断之前，${t1} 的概率是 ${p1}，${t2} 是 ${p2}：二者的 logit 相差 ${g}，概率之比就是 e^(差 / T)。表里列出最可能的候选词元，其中的概率是经过后面要讲的截断之后的；灰色的行已被截掉。`;
    },
  },
  {
    id: "temperature",
    target: "sampling",
    enter: () => show("output"),
    title: { en: "Temperature", zh: "温度" },
    body: (lang) => {
      const nx = app.next, top = nx?.candidates[0];
      if (!nx || !top) return [];
      const T = exact("temperature", nx.temperature), t = val("top-token", visible(top.text), top.id), p = pr("top-prob", top.prob);
      return lang === "en"
        ? L`Before the softmax every logit is divided by the temperature T, now ${T}. Below 1 it sharpens the distribution, above 1 it flattens it, and T = 0 means always take the top token (greedy). The top guess ${t} now gets ${p}.`
        : L`做 softmax 之前，每个 logit 都要除以温度 T，现在是 ${T}。T 小于 1 会让分布更尖锐，大于 1 会让它更平坦；T = 0 表示总是选概率最高的词元（贪心）。现在首选的 ${t} 概率为 ${p}。`;
    },
    task: (lang) => lang === "en"
      ? L`Drag the temperature to 2 and watch that probability fall.`
      : L`把温度拖到 2，看这个概率怎么往下掉。`,
    done: () => (app.sampling.temperature ?? 1) >= 1.9,
  },
  {
    id: "top-k",
    target: "sampling",
    enter: () => show("output"),
    title: { en: "Top-k, and this page's default", zh: "Top-k，以及本页的默认设置" },
    body: (lang) => {
      const nx = app.next, c = cfg();
      if (!nx || !c) return [];
      const k = nx.top_k, kept = int("n-kept", nx.n_kept), d = int("default-k", DEFAULT_SAMPLING.top_k ?? 0);
      // the probability the top-k cut removes, when all kept tokens are among the listed candidates
      const listed = nx.candidates.filter((x) => x.kept);
      const tail = k != null && listed.length === nx.n_kept ? 1 - listed.reduce((s, x) => s + x.prob_no_cut, 0) : null;
      const kv = k != null ? int("top-k", k) : null;
      const en: Part[] = [...(kv ? L`Top-k keeps only the ${kv} likeliest tokens and renormalises: ${kept} survive. ` : L`Top-k is off: all ${kept} tokens can be drawn. `),
        ...(tail != null ? L`Together the tokens it cuts would have had ${pr("tail-mass", tail)}. ` : []),
        ...L`This page starts with top-k, k = ${d}, at T = 1. That is our choice, not a rule: drawn from the whole vocabulary, the long tail of unlikely tokens (each tiny, but many) wins now and then, appending a token of well under 1%; greedy decoding avoids that but tends to repeat itself. With k = ${d}, every token that can be drawn is visible in the table.`];
      const zh: Part[] = [...(kv ? L`Top-k 只保留最可能的 ${kv} 个词元，再重新归一化：现在剩下 ${kept} 个。` : L`Top-k 已关闭：全部 ${kept} 个词元都可能被抽中。`),
        ...(tail != null ? L`被截掉的那些词元，原本加起来有 ${pr("tail-mass", tail)} 的概率。` : []),
        ...L`本页默认用 top-k，k = ${d}，温度为 1。这是我们的选择，不是定规：如果从整个词表里抽，大量低概率词元（每个都很小，但数量极多）时不时会被抽中，追加上去的可能是一个概率远不到 1% 的词元；贪心解码没有这个问题，却容易来回重复。取 k = ${d}，可能被抽中的词元在表里都看得到。`];
      return lang === "en" ? en : zh;
    },
    task: (lang) => lang === "en"
      ? L`Set k to 3 in its box: only three rows stay black.`
      : L`在 Top-k 的输入框里填 3：表里只有前三行还是黑色，其余都变灰。`,
    done: () => app.sampling.top_k === 3,
  },
  {
    id: "top-p",
    target: "sampling",
    enter: () => show("output"),
    title: { en: "Top-p", zh: "Top-p" },
    body: (lang) => {
      const nx = app.next;
      if (!nx) return [];
      const kept = int("n-kept", nx.n_kept);
      const p = nx.top_p != null ? n("top-p", nx.top_p) : null;
      return lang === "en"
        ? [...L`Top-p (nucleus sampling) keeps the smallest set of likeliest tokens whose probabilities together reach p: few tokens when the model is sure, many when it is not. Its cut adapts to the situation, where top-k's is fixed. `,
          ...(p ? L`With p = ${p}, ${kept} tokens survive (after top-k, if that is on too).` : L`It is off now; ${kept} tokens survive.`)]
        : [...L`Top-p（核采样）保留概率最高、且累计概率达到 p 的最小一组词元：模型有把握时只留几个，没把握时留很多。它的截断随情况而变，而 top-k 是固定的。`,
          ...(p ? L`p = ${p} 时剩下 ${kept} 个词元（如果 top-k 也开着，就在它之后再截）。` : L`现在它是关闭的，剩下 ${kept} 个词元。`)];
    },
    task: (lang) => lang === "en"
      ? L`Tick top-p and move its slider: watch how many tokens survive.`
      : L`勾选 Top-p 并拖动滑块，看看还剩多少个词元。`,
    done: () => app.sampling.top_p != null,
  },
  {
    id: "sample",
    target: "generate",
    enter: () => show("output"),
    title: { en: "Sampling", zh: "抽样" },
    body: (lang) => {
      const nx = app.next;
      if (!nx) return [];
      const t = val("sampled-token", visible(nx.sampled.text), nx.sampled.id), p = pr("sampled-prob", nx.sampled.prob);
      const s = int("seed", nx.seed);
      return lang === "en"
        ? L`Finally one token is drawn at random, each with its probability after the cuts: ${t} (${p}), with seed ${s}. Why not always the top one: always taking the likeliest token gives text that loops and repeats; drawing keeps it varied. The seed makes a draw repeatable; it moves on by one after each append.`
        : L`最后按截断后的概率随机抽一个词元：抽中的是 ${t}（${p}），随机种子为 ${s}。为什么不总是选最可能的那个：每次都选概率最高的词元，写出来的文字容易兜圈子、不断重复；随机抽取能让文字更多样。种子让同一次抽取可以复现；每追加一个词元，种子就加 1。`;
    },
  },
  {
    id: "kv-cache",
    target: "generate",
    enter: () => show("output"),
    title: { en: "Generation and the KV cache", zh: "生成与 KV 缓存" },
    body: (lang) => {
      const tr = app.trace;
      if (!tr) return [];
      const T = int("n-tokens", tr.token_ids.length);
      const [a, b] = tr.computed_positions;
      const one = b - a === 1 && tr.token_ids.length > 1;
      const p = int("computed-pos", a);
      const en: Part[] = [...L`The text has ${T} tokens. Appending one runs the model again, but only the new position needs computing: earlier tokens cannot see later ones (the mask), so their keys and values never change. They are kept in a cache and reused, and the new query attends to them. `,
        ...(one ? L`That is what just happened: only position ${p} was computed.` : L`Try it: the note under the button then says which position was computed.`)];
      const zh: Part[] = [...L`现在文本有 ${T} 个词元。再追加一个，模型就要再跑一遍，但真正需要计算的只有新位置：前面的词元看不到后面的（因为掩码），它们的键和值从不改变，于是存进缓存直接复用，新位置的查询去和它们匹配。`,
        ...(one ? L`刚才正是如此：只计算了第 ${p} 个位置。` : L`试试看：追加之后，按钮下方会注明计算了哪个位置。`)];
      return lang === "en" ? en : zh;
    },
    task: (lang) => lang === "en"
      ? L`Press “Append the sampled token” (or click a candidate in the table).`
      : L`点击“追加抽中的词元”（或者点表里的某个候选词元）。`,
    done: () => nTok() > at.nTok,
  },
];

export const gpt2Lesson: Lesson = {
  id: "gpt2",
  title: { en: "How GPT-2 reads your text", zh: "GPT-2 如何读懂你的文本" },
  steps,
};
