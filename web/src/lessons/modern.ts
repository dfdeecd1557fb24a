// The tour chapter for the Llama family (Llama, Qwen2, Mistral): what changed between GPT-2 and
// today's open decoders, and why, one change per step in the order of the computation. As in the
// GPT-2 lesson, every value is the learner's own: read from the loaded model's config, from
// /api/models, or from the tensors of the text on screen, fetched through the same API the views use.
// Where a sentence reports a paper's finding rather than a fact about this model, it names the paper.
import { format } from "d3-format";
import { num, prob, visible } from "../lib/format";
import type { ModelConfigOut, TensorSpec } from "../lib/generated/api";
import type { Lang } from "../lib/i18n";
import type { LLAMA_BLOCK_ACTIVATIONS, LLAMA_GLOBAL_ACTIVATIONS } from "../lib/generated/names";
import { L, val, type InlineLesson as Lesson, type InlineStep as LessonStep, type Part, type Value } from "../lib/lesson";
import { app } from "../lib/state.svelte";
import type { Tensor } from "../lib/tensor";
import { VIEWS, type LnWhich, type ViewId } from "../lib/views";

// -- names, checked against the Llama family's tables (a misspelt name is a type error) ---------------

type LlamaBlock = keyof typeof LLAMA_BLOCK_ACTIVATIONS;
type LlamaGlobal = keyof typeof LLAMA_GLOBAL_ACTIVATIONS;
const blk = (s: LlamaBlock, layer = app.layer) => `blocks.${layer}.${s}` as `blocks.${number}.${LlamaBlock}`;

/** A tensor of the current trace, as a lesson step asks for it (see `needs`). */
interface Spec extends TensorSpec { name: ReturnType<typeof blk> | LlamaGlobal }
const spec = (s: Spec): TensorSpec => s;
const get = (s: Spec): Tensor | undefined => app.tensor(s);

// -- values -----------------------------------------------------------------------------------------

const cfg = (): ModelConfigOut | undefined => app.trace?.config;
const nTok = () => app.trace?.token_ids.length ?? 0;
const n = (id: string, v: number): Value => val(id, num(v), v);
const int = (id: string, v: number): Value => val(id, String(v), v);
const big = (id: string, v: number): Value => val(id, format(",")(v), v);
const pr = (id: string, p: number): Value => val(id, prob(p), p);
const str = (id: string, s: string): Value => val(id, s, s);
/** A ratio such as 8/3 or 2.5, to one decimal place when it is not whole. */
const ratio = (id: string, v: number): Value => val(id, Number.isInteger(v) ? String(v) : v.toFixed(2), v);
/** A size in bytes, in the binary units (1 KiB = 1,024 bytes). */
function bytes(id: string, b: number, lang: Lang): Value {
  const units = [lang === "en" ? "bytes" : "字节", "KiB", "MiB", "GiB", "TiB"];
  let k = 0;
  while (k < units.length - 1 && b >= 1024 ** (k + 1)) k++;
  const x = b / 1024 ** k;
  return val(id, `${k === 0 ? String(x) : format(".3~r")(x)} ${units[k]}`, b);
}
/** A token as the card shows it: its text with spaces visible, or its id when the text is empty (a
 *  token that is part of a character's bytes); `raw` is its id. */
const shown = (text: string, id: number) => visible(text) || `#${id}`;
function tok(id: string, i: number): Value {
  const t = app.trace?.tokens[i];
  return t ? val(id, shown(t.text, t.id), t.id) : val(id, "", -1);
}
const focusTok = (id = "focus-token") => (app.trace?.tokens[app.pos] ? tok(id, app.pos) : null);

/** Bytes of one number in the model's dtype (the KV cache is kept in it too). */
const bytesPer = (dtype: string | undefined) => (dtype === "float32" ? 4 : dtype === "float64" ? 8 : 2);

/** The loaded model's parameter count, as /api/models reports it. */
const nParams = () => app.models.find((m) => m.name === app.trace?.model)?.n_params ?? null;

function argAbsMax(a: ArrayLike<number>): number {
  let best = 0;
  for (let j = 1; j < a.length; j++) if (Math.abs(a[j]) > Math.abs(a[best])) best = j;
  return best;
}

// -- the app's state for a step ------------------------------------------------------------------------

/** The views this lesson opens: the pipeline's, and the rotary-position and grouped-query views. */
type LessonView = ViewId | "rope" | "gqa";

function show(view: LessonView, ln?: LnWhich) {
  // a view this build does not have leaves the page as it is (the card then has nothing to point at)
  if ((VIEWS as readonly string[]).includes(view)) app.view = view as ViewId;
  if (ln) app.ln = ln;
}

// -- rotary positions: the angles of the text, and a rotation computed here to show what it keeps ------

const anglesSpec = (): Spec => ({ name: "rope.angles", dtype: "float32" });

/** Radians per position of each pair, read off the angles of two rows (whatever the first position). */
function frequencies(angles: Tensor): Float32Array | null {
  const [T, R] = angles.shape;
  if (T < 2) return null;
  const w = new Float32Array(R);
  for (let i = 0; i < R; i++) w[i] = (angles.data[(T - 1) * R + i] - angles.data[i]) / (T - 1);
  return w;
}

/** Rotate a head vector the way this family does: dimension i pairs with i + Dh/2, turned by angle[i]. */
export function rotate(x: ArrayLike<number>, angle: ArrayLike<number>): Float64Array {
  const R = x.length / 2, out = new Float64Array(x.length);
  for (let i = 0; i < R; i++) {
    const c = Math.cos(angle[i]), s = Math.sin(angle[i]);
    out[i] = x[i] * c - x[i + R] * s;
    out[i + R] = x[i + R] * c + x[i] * s;
  }
  return out;
}

const dot = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
};

/** How far the rope step moves the query and the key together, to show their score does not change. */
export const ROPE_SHIFT = 100;

/** The key the "relative" step compares the focus query with: the token before it (itself at position 0). */
const prevPos = () => Math.max(0, app.pos - 1);

const ropeSpecs = (): TensorSpec[] => [
  spec(anglesSpec()),
  spec({ name: blk("attn.q"), head: app.head, position: app.pos, dtype: "float32" }),
  spec({ name: blk("attn.k"), position: prevPos(), dtype: "float32" }),
  spec({ name: blk("attn.kv_head") }),
  spec({ name: blk("attn.scores"), head: app.head, position: app.pos, dtype: "float32" }),
];

// -- the steps ---------------------------------------------------------------------------------------

const steps: LessonStep[] = [
  {
    id: "big-picture",
    target: "",
    title: { en: "From GPT-2 to today's models", zh: "从 GPT-2 到今天的模型" },
    body: (lang) => {
      const c = cfg(), f = focusTok();
      if (!c || !f) return [];
      const name = str("model-name", app.trace!.model), t = str("model-type", c.model_type ?? c.family ?? "");
      const nl = int("n-layer", c.n_layer), h = int("n-head", c.n_head), d = int("d-model", c.n_embd);
      return lang === "en"
        ? L`The model on this page, ${name} (model type “${t}”), has ${nl} blocks, ${h} heads, vectors of ${d} numbers, and the same decoder-only design as GPT-2. Much is unchanged: tokens and their embeddings, attention as a soft search with scaled dot products, the causal mask and the softmax, the residual stream that every block adds to, the scores over the vocabulary and the sampling. What changed are a few parts, each cheaper or steadier at scale: the position table is gone (positions become rotations inside attention), LayerNorm became RMSNorm, several query heads share one key/value head, the MLP has a gate, and most biases are gone. This chapter follows ${f} through each change, in the order of the computation.`
        : L`这个页面上的模型是 ${name}（模型类型 “${t}”）：${nl} 个块、${h} 个头、每个向量 ${d} 个数，和 GPT-2 一样是只有解码器的结构。很多东西没有变：词元和词元嵌入，注意力作为一种用缩放点积实现的“模糊检索”，因果掩码和 softmax，每个块都往上累加的残差流，对整个词表的打分，以及最后的抽样。变了的是几个部件，每一处改动都让大模型算得更省或训练得更稳：位置嵌入表没有了（位置变成了注意力内部的旋转），层归一化换成了 RMSNorm，多个查询头共用一个键/值头，MLP 多了一道门控，大部分偏置也去掉了。这一章按计算顺序，以 ${f} 为例，把这些改动逐一走一遍。`;
    },
  },
  {
    id: "no-position-table",
    target: "emb-token",
    enter: () => show("embedding"),
    needs: () => [spec({ name: "embed.token", position: app.pos }), spec({ name: blk("resid_pre", 0), position: app.pos })],
    title: { en: "No position table", zh: "没有位置嵌入表" },
    body: (lang) => {
      const f = focusTok(), we = get({ name: "embed.token", position: app.pos });
      const x = get({ name: blk("resid_pre", 0), position: app.pos });
      if (!f || !we || !x) return [];
      const id = int("focus-id", app.trace!.token_ids[app.pos]);
      const a = n("we-0", we.data[0]), b = n("resid0-0", x.data[0]);
      return lang === "en"
        ? L`GPT-2 added a learned vector for each position to every token's embedding. Here nothing is added: row ${id} of W_E, the embedding of ${f}, enters block 0 as it is. Its first number is ${a} in the table and ${b} entering block 0. Why drop the table: a learned table ends at its last row (GPT-2's at 1,024 positions), and it tells the model where a token is in absolute terms, when what matters in language is mostly how far apart two tokens are. Positions come back inside attention, as rotations of the queries and keys (two steps ahead).`
        : L`GPT-2 会给每个词元的嵌入加上一个学出来的位置向量。这里什么都不加：${f} 的嵌入，也就是 W_E 的第 ${id} 行，原封不动地进入第 0 块。它的第一个数在嵌入表里是 ${a}，进入第 0 块时还是 ${b}。为什么不要这张表：学出来的表到最后一行就到头了（GPT-2 只有 1,024 个位置），而且它告诉模型的是词元的绝对位置，可语言里更要紧的往往是两个词元相隔多远。位置信息会在注意力内部回来，变成对查询和键的旋转（再往后两步就讲）。`;
    },
  },
  {
    id: "rmsnorm",
    target: "ln-stats",
    enter: () => show("layernorm", "ln1"),
    needs: () => [spec({ name: blk("resid_pre"), position: app.pos }), spec({ name: blk("ln1.rms") })],
    title: { en: "RMSNorm instead of LayerNorm", zh: "用 RMSNorm 代替层归一化" },
    body: (lang) => {
      const f = focusTok(), x = get({ name: blk("resid_pre"), position: app.pos }), rms = get({ name: blk("ln1.rms") });
      if (!f || !x || !rms) return [];
      const mean = x.data.reduce((s, v) => s + v, 0) / x.data.length;
      const l = int("layer", app.layer), r = n("rms", rms.data[app.pos]), mu = n("mean", mean);
      return lang === "en"
        ? L`Before attention, block ${l} normalises the vector of ${f} with RMSNorm: it divides the vector by its root mean square, √(mean(x²) + ε) = ${r}, then multiplies by a learned scale γ. Unlike LayerNorm it subtracts no mean (this vector's mean, ${mu}, stays in) and adds no shift β. Why: Zhang and Sennrich (2019, “Root Mean Square Layer Normalization”) argued that what makes LayerNorm work is the re-scaling, not the re-centring; dropping the mean saves work in every norm of every block, and in their experiments RMSNorm matched LayerNorm's quality while running 7% to 64% faster, depending on the model.`
        : L`进入注意力之前，第 ${l} 块用 RMSNorm 把 ${f} 的向量归一化：把向量除以它的均方根 √(mean(x²) + ε) = ${r}，再乘上可学习的缩放 γ。和层归一化不同，它不减均值（这个向量的均值 ${mu} 原样保留），也不加平移 β。为什么：Zhang 和 Sennrich（2019，《Root Mean Square Layer Normalization》）认为，层归一化真正起作用的是缩放，而不是把均值拉回 0；去掉均值这一步，每个块里的每次归一化都省了计算。在他们的实验里，RMSNorm 的效果和层归一化相当，运行时间却少了 7% 到 64%（视模型而定）。`;
    },
  },
  {
    id: "qkv-bias",
    target: "qkv-mats",
    enter: () => show("qkv"),
    title: { en: "Queries, keys, values, and no biases", zh: "查询、键、值，以及去掉的偏置" },
    body: (lang) => {
      const c = cfg();
      if (!c) return [];
      const dh = int("d-head", c.head_dim), G = c.n_kv_heads ?? c.n_head;
      const t = str("model-type", c.model_type ?? c.family ?? ""), has = c.qkv_bias ?? false;
      const nb = big("n-qkv-bias", c.n_head * c.head_dim + 2 * G * c.head_dim), b = str("qkv-bias", String(has));
      const en: Part[] = [...L`As in GPT-2, every token makes a query, a key and a value of ${dh} numbers per head from its normalised vector. `,
        ...(has
          ? L`This model (${t}) keeps a bias on these three (qkv_bias = ${b}): ${nb} numbers per block, and none anywhere else. Qwen's authors (Bai et al. 2023, “Qwen Technical Report”) removed biases from most layers but kept these, to help the model extrapolate to longer texts. `
          : L`But here they are plain matrix products: this model (${t}) has no bias in them (qkv_bias = ${b}), nor in the output projection, the MLP or the norms. A bias is a small share of the parameters, and the PaLM authors (Chowdhery et al. 2022) reported that leaving them all out made large models train more stably. `),
        ...L`The values go on as they are; the queries and keys are now turned according to their position.`];
      const zh: Part[] = [...L`和 GPT-2 一样，每个词元用归一化后的向量，为每个头算出 ${dh} 维的查询、键和值。`,
        ...(has
          ? L`这个模型（${t}）在这三者上保留了偏置（qkv_bias = ${b}）：每个块 ${nb} 个数，其他地方都没有偏置。Qwen 的作者（Bai 等，2023，《Qwen Technical Report》）去掉了大多数层的偏置，唯独保留了这几个，为的是让模型更好地外推到更长的文本。`
          : L`不过这里只是单纯的矩阵乘法：这个模型（${t}）在这里没有偏置（qkv_bias = ${b}），输出投影、MLP 和归一化里也都没有。偏置只占参数的一小部分，而 PaLM 的作者（Chowdhery 等，2022）发现，把偏置全部去掉后，大模型训练起来更稳定。`),
        ...L`值照原样往下传；查询和键接下来要按各自的位置旋转。`];
      return lang === "en" ? en : zh;
    },
  },
  {
    id: "rope-angles",
    target: "rope-angles",
    enter: () => show("rope"),
    needs: () => [spec(anglesSpec())],
    title: { en: "Rotary positions (RoPE)", zh: "旋转位置编码（RoPE）" },
    body: (lang) => {
      const c = cfg(), f = focusTok(), angles = get(anglesSpec());
      if (!c || !f || !angles) return [];
      const R = angles.shape[1], row = angles.data.subarray(app.pos * R, (app.pos + 1) * R);
      const dh = int("d-head", c.head_dim), nr = int("n-pairs", R), p = int("pos", app.pos);
      const theta = big("rope-theta", c.rope_theta ?? 10000), last = int("slow-pair", R - 1);
      const a0 = n("angle-fast", row[0]), aN = n("angle-slow", row[R - 1]);
      const w = frequencies(angles);
      const formula = (c.rope_theta ?? 10000) ** (-2 * (R - 1) / c.head_dim);
      const scaled = w && c.rope_scaling ? str("rope-scaling", c.rope_scaling) : null;
      const slower = w && scaled ? ratio("slow-ratio", Math.round((formula / w[R - 1]) * 100) / 100) : null;
      const turn = w ? big("slow-period", Math.round((2 * Math.PI) / w[R - 1])) : null;
      const fast = w ? n("omega-fast", w[0]) : null;
      const en: Part[] = [...L`RoPE (rotary position embedding; Su et al. 2021, “RoFormer”) splits each query and key of ${dh} numbers into ${nr} pairs and turns each pair, as a point in a plane, by an angle that grows with the position: angle = position × ωᵢ, with ωᵢ = θ^(−2i/${dh}) and base θ = ${theta} from the config. At position ${p}, the fastest pair of ${f} is turned by ${a0} radians, the slowest (pair ${last}) by only ${aN}. `,
        ...(scaled && slower ? L`This model also stretches its slow frequencies (rope scaling “${scaled}”), so its slowest pair turns ${slower} times slower than that formula says. ` : []),
        ...(fast && turn ? L`Why many speeds: the fastest pair turns ${fast} radian per position and tells neighbours apart; the slowest needs about ${turn} positions for one full turn, so it still changes smoothly across a long text. ` : L`Why many speeds: the fast pairs tell neighbours apart, the slow ones still change smoothly across a long text. `),
        ...L`(This implementation pairs dimension i with i + ${nr}, where the paper pairs neighbours: the same rotation, with the dimensions in another order.)`];
      const zh: Part[] = [...L`RoPE（旋转位置编码；Su 等，2021，《RoFormer》）把每个 ${dh} 维的查询和键分成 ${nr} 对，把每一对看成平面上的一个点，按一个随位置增大的角度旋转：角度 = 位置 × ωᵢ，其中 ωᵢ = θ^(−2i/${dh})，底数 θ = ${theta} 来自模型配置。在第 ${p} 个位置，${f} 转得最快的那一对转了 ${a0} 弧度，最慢的那一对（第 ${last} 对）只转了 ${aN} 弧度。`,
        ...(scaled && slower ? L`这个模型还把低频部分拉长了（rope scaling 为 “${scaled}”），所以最慢的那一对比公式给出的还要慢 ${slower} 倍。` : []),
        ...(fast && turn ? L`为什么要有快有慢：最快的一对每个位置转 ${fast} 弧度，用来区分相邻的词元；最慢的一对大约要 ${turn} 个位置才转满一圈，所以在很长的文本里也只是平缓地变化。` : L`为什么要有快有慢：快的几对用来区分相邻的词元，慢的几对在很长的文本里也只是平缓地变化。`),
        ...L`（这里的实现把第 i 维和第 i + ${nr} 维配成一对，而论文里配对的是相邻的两维：旋转是一样的，只是维度的排列顺序不同。）`];
      return lang === "en" ? en : zh;
    },
  },
  {
    id: "rope-relative",
    target: "rope-distance",
    enter: () => show("rope"),
    needs: ropeSpecs,
    title: { en: "Why a rotation: relative distance", zh: "为什么是旋转：相对距离" },
    body: (lang) => {
      const c = cfg(), f = focusTok(), angles = get(anglesSpec());
      const q = get({ name: blk("attn.q"), head: app.head, position: app.pos, dtype: "float32" });
      const k = get({ name: blk("attn.k"), position: prevPos(), dtype: "float32" });
      const kvh = get({ name: blk("attn.kv_head") });
      const scores = get({ name: blk("attn.scores"), head: app.head, position: app.pos, dtype: "float32" });
      if (!c || !f || !angles || !q || !k || !kvh || !scores) return [];
      const w = frequencies(angles), R = angles.shape[1], j = prevPos(), g = kvh.data[app.head];
      const kg = k.data.subarray(g * c.head_dim, (g + 1) * c.head_dim);
      const at = (pos: number) => angles.data.subarray(pos * R, (pos + 1) * R);
      const real = n("score-real", scores.data[j]);
      const dist = int("distance", app.pos - j), other = tok("key-token", j), h = int("head", app.head);
      const shiftBy = (a: Float32Array) => a.map((x, i) => x + ROPE_SHIFT * (w ? w[i] : 0));
      const moved = w ? n("score-shifted", dot(rotate(q.data, shiftBy(at(app.pos))), rotate(kg, shiftBy(at(j))))) : null;
      const s = int("shift", ROPE_SHIFT);
      const en: Part[] = [...L`Turning two vectors by the same angle leaves their dot product unchanged. So when the query is turned by its position's angle and the key by its own, their dot product depends only on the difference of the two angles, that is, on how far apart the two tokens are. In head ${h}, the query of ${f} and the key of ${other}, at distance ${dist}, score ${real}. `,
        ...(moved ? L`Move both ${s} positions later (computed here from the same unrotated vectors) and they still score ${moved}. ` : []),
        ...L`Why it matters: a pattern such as “look at the previous token” is learnt once and works at every position. Nor is there a table to run out of, though going beyond the lengths seen in training still needs care: that is what rescaling the slow frequencies (rope scaling, as in Llama 3.1) is for. Nothing is added to the residual stream, and the values are not turned: positions change where a token looks, not what it passes on.`];
      const zh: Part[] = [...L`两个向量转过同样的角度，它们的点积不变。所以，当查询按自己位置的角度旋转、键也按自己位置的角度旋转时，二者的点积只取决于两个角度之差，也就是这两个词元相隔多远。在第 ${h} 个头里，${f} 的查询和相距 ${dist} 个位置的 ${other} 的键，得分是 ${real}。`,
        ...(moved ? L`把两者一起往后挪 ${s} 个位置（这里用同样的、旋转前的向量重新算），得分仍是 ${moved}。` : []),
        ...L`为什么重要：像“看前一个词元”这样的模式只需学一次，在哪个位置都管用。也没有哪张表会用到尽头；不过要超出训练时见过的长度，仍需小心处理，把低频部分拉长的 rope scaling（如 Llama 3.1 所用）就是为此而设的。残差流里没有加入任何东西，值也不旋转：位置改变的是一个词元去看哪里，而不是它传出什么。`];
      return lang === "en" ? en : zh;
    },
  },
  {
    id: "gqa",
    target: "gqa-groups",
    enter: () => show("gqa"),
    needs: () => [spec({ name: blk("attn.kv_head") })],
    title: { en: "Grouped-query attention", zh: "分组查询注意力" },
    body: (lang) => {
      const c = cfg(), kvh = get({ name: blk("attn.kv_head") });
      if (!c || !kvh) return [];
      const H = c.n_head, G = c.n_kv_heads ?? H, g = kvh.data[app.head];
      const mates = Array.from(kvh.data).map((x, i) => (x === g ? i : -1)).filter((i) => i >= 0);
      const nh = int("n-head", H), ng = int("n-kv-heads", G), per = int("group-size", H / G);
      const h = int("head", app.head), gv = int("kv-head", g), list = val("group-heads", mates.join(lang === "en" ? ", " : "、"), mates.join(", "));
      const en: Part[] = G === H
        ? L`This model gives each of its ${nh} query heads its own key/value head (${ng} of them): plain multi-head attention, as in GPT-2. Many newer models let a group of query heads share one key/value head instead (grouped-query attention; Ainslie et al. 2023, “GQA”), to shrink the memory a generating model keeps (next step).`
        : [...L`This model has ${nh} query heads but only ${ng} key/value heads: each group of ${per} query heads shares one set of keys and values (grouped-query attention; Ainslie et al. 2023, “GQA”). The head in focus, ${h}, reads key/value head ${gv}, which serves heads ${list}. `,
          ...L`Every head keeps its own queries, so it can still look for something of its own; it only searches the same keys and collects the same values as the rest of its group. Why: Ainslie et al. found this keeps quality close to one key/value head per query head while being almost as fast as a single key/value head for all (multi-query attention, Shazeer 2019), because a generating model spends much of its time reading its cached keys and values.`];
      const zh: Part[] = G === H
        ? L`这个模型的 ${nh} 个查询头各有自己的键/值头（共 ${ng} 个）：就是普通的多头注意力，和 GPT-2 一样。许多新模型则让一组查询头共用一个键/值头（分组查询注意力；Ainslie 等，2023，《GQA》），以减少生成时要保存的内存（见下一步）。`
        : [...L`这个模型有 ${nh} 个查询头，却只有 ${ng} 个键/值头：每 ${per} 个查询头为一组，共用一套键和值（分组查询注意力；Ainslie 等，2023，《GQA》）。当前的第 ${h} 个头读的是第 ${gv} 个键/值头，共用它的是第 ${list} 个头。`,
          ...L`每个头仍有自己的查询，所以还能各找各的；只是同组的头检索的是同一批键，取回的是同一批值。为什么：Ainslie 等人发现，这样做的效果接近每个查询头各配一个键/值头，速度却几乎和所有头共用一个键/值头（多查询注意力，Shazeer 2019）一样快，因为模型生成文本时，很多时间都花在读取缓存的键和值上。`];
      return lang === "en" ? en : zh;
    },
  },
  {
    id: "kv-cache",
    target: "gqa-memory",
    enter: () => show("gqa"),
    title: { en: "What the KV cache saves", zh: "KV 缓存省下了多少" },
    body: (lang) => {
      const c = cfg();
      if (!c) return [];
      const H = c.n_head, G = c.n_kv_heads ?? H, b = bytesPer(c.dtype);
      const perTok = 2 * c.n_layer * G * c.head_dim * b;
      const nl = int("n-layer", c.n_layer), ng = int("n-kv-heads", G), dh = int("d-head", c.head_dim);
      const nb = int("bytes-per-number", b), dt = str("dtype", c.dtype ?? "float32");
      const t1 = bytes("cache-per-token", perTok, lang), ctx = big("ctx", c.block_size);
      const full = bytes("cache-full", perTok * c.block_size, lang);
      const mha = bytes("cache-full-mha", perTok * c.block_size * H / G, lang);
      const x = int("group-size", H / G);
      return lang === "en"
        ? L`While generating, the model keeps the rotated keys and the values of every earlier token, so that each new token costs one position of work (the KV cache). Per token that is 2 (a key and a value) × ${nl} blocks × ${ng} key/value heads × ${dh} numbers × ${nb} bytes (${dt}) = ${t1}; for a full context of ${ctx} tokens, ${full}. With a key/value head for every query head it would be ${x} times as much, ${mha}. For scale: Llama 3 8B (32 blocks, 8 key/value heads of 128 numbers for its 32 query heads, bfloat16) keeps 128 KiB per token instead of 512 KiB, and that memory is much of what limits how many long conversations one GPU can serve at once.`
        : L`生成文本时，模型会把之前每个词元旋转后的键和值都存起来，这样每来一个新词元只需算一个位置（这就是 KV 缓存）。每个词元要存 2（一个键、一个值）× ${nl} 个块 × ${ng} 个键/值头 × ${dh} 个数 × ${nb} 字节（${dt}）= ${t1}；存满 ${ctx} 个词元的上下文，就是 ${full}。如果每个查询头都配一个键/值头，就要 ${x} 倍，即 ${mha}。作个对比：Llama 3 8B（32 个块，32 个查询头配 8 个键/值头，每个 128 维，bfloat16）每个词元存 128 KiB，而不是 512 KiB；一块 GPU 能同时服务多少段长对话，很大程度上就受这块内存所限。`;
    },
  },
  {
    id: "attention",
    target: "attn-pattern",
    enter: () => show("attention"),
    needs: () => [spec({ name: blk("attn.pattern"), head: app.head, position: app.pos })],
    title: { en: "The rest of attention is GPT-2's", zh: "注意力的其余部分与 GPT-2 相同" },
    body: (lang) => {
      const c = cfg(), f = focusTok(), w = get({ name: blk("attn.pattern"), head: app.head, position: app.pos });
      if (!c || !f || !w) return [];
      let best = 0;
      for (let j = 1; j <= app.pos && j < w.data.length; j++) if (w.data[j] > w.data[best]) best = j;
      const dh = int("d-head", c.head_dim), h = int("head", app.head), k = tok("top-key", best), p = pr("top-weight", w.data[best]);
      return lang === "en"
        ? L`From here on, attention is what the GPT-2 lesson showed: the rotated queries and keys give the scores q·k, divided by √${dh}; later keys are masked; a softmax turns each row into weights that sum to 1. In head ${h}, ${f} gives its largest weight, ${p}, to ${k}. The weights mix the values of the head's key/value head, and the heads' outputs, side by side, are projected back into the residual stream.`
        : L`从这里开始，注意力和 GPT-2 那一课讲的一样：旋转后的查询和键算出得分 q·k，再除以 √${dh}；后面的键被掩码遮住；softmax 把每一行变成加起来为 1 的权重。在第 ${h} 个头里，${f} 把最大的权重 ${p} 给了 ${k}。这些权重对该头所用键/值头的值做加权求和，各个头的输出并排拼起来，再投影回残差流。`;
    },
  },
  {
    id: "swiglu",
    target: "mlp-pre",
    enter: () => show("mlp"),
    needs: () => (["mlp.gate", "mlp.up", "mlp.act", "mlp.post"] as const).map((s) => spec({ name: blk(s), position: app.pos })),
    title: { en: "The gated MLP (SwiGLU)", zh: "带门控的 MLP（SwiGLU）" },
    body: (lang) => {
      const c = cfg(), f = focusTok();
      const [gate, up, act, post] = (["mlp.gate", "mlp.up", "mlp.act", "mlp.post"] as const)
        .map((s) => get({ name: blk(s), position: app.pos }));
      if (!c || !f || !gate || !up || !act || !post) return [];
      const u = argAbsMax(post.data);
      const m = int("d-mlp", c.d_mlp), d = int("d-model", c.n_embd), unit = int("unit", u);
      const g = n("gate", gate.data[u]), a = n("act", act.data[u]), v = n("up", up.data[u]), hv = n("post", post.data[u]);
      return lang === "en"
        ? L`The MLP now has a gate. Instead of one widening matrix and GELU, it makes two vectors of ${m} numbers from the token's vector: a gate g and a linear branch u (“up”). The gate is bent by SiLU, g·σ(g), and the two are multiplied unit by unit, h = SiLU(g) × u; a third matrix (“down”) projects h back to ${d} numbers. For the token ${f}, the strongest unit, ${unit}, has g = ${g}, SiLU(g) = ${a} and u = ${v}, so h = ${hv}. Why a gate: one projection decides, token by token, how much of the other gets through. Shazeer (2020, “GLU Variants Improve Transformer”) found SwiGLU gave better results than the GELU MLP at the same size, and offered no explanation, attributing its success “to divine benevolence”.`
        : L`MLP 现在多了一道门控。它不再只用一个展宽矩阵加 GELU，而是从词元的向量算出两个 ${m} 维的向量：门 g 和一条线性支路 u（“up”）。门先经过 SiLU 弯折，即 g·σ(g)，再和 u 逐个单元相乘：h = SiLU(g) × u；第三个矩阵（“down”）把 h 投影回 ${d} 维。对词元 ${f} 来说，最强的第 ${unit} 个单元：g = ${g}，SiLU(g) = ${a}，u = ${v}，所以 h = ${hv}。为什么要门控：一路投影逐个词元地决定另一路能通过多少。Shazeer（2020，《GLU Variants Improve Transformer》）发现，在同样的规模下，SwiGLU 的效果比 GELU 的 MLP 更好；他并没有给出解释，而是把这归功于“神的恩典”（divine benevolence）。`;
    },
  },
  {
    id: "mlp-width",
    target: "mlp-pre",
    enter: () => show("mlp"),
    title: { en: "Why the hidden layer is 8/3 d wide", zh: "为什么隐藏层是 8/3 d 宽" },
    body: (lang) => {
      const c = cfg();
      if (!c) return [];
      const D = c.n_embd, M = c.d_mlp;
      const d = int("d-model", D), m = int("d-mlp", M), r = ratio("mlp-ratio", Math.round((M / D) * 100) / 100);
      const gated = big("mlp-weights", 3 * D * M), gelu = big("gelu-weights", 8 * D * D);
      return lang === "en"
        ? L`Three matrices instead of two would cost more, so the hidden layer is made narrower. A GELU MLP of width 4d has 2 × d × 4d = 8d² weights; a gated one of width h has 3 × d × h, which is the same 8d² when h = 8/3 d ≈ 2.67 d. Shazeer shrank the hidden layer by that factor of 2/3 to compare at equal cost, and LLaMA (Touvron et al. 2023) took 2/3 × 4d, rounded up (Llama 2 7B: 11,008 for d = 4,096). This model has d = ${d} and h = ${m} = ${r} d: ${gated} weights per MLP, where a 4d GELU MLP would have ${gelu}.`
        : L`三个矩阵比两个更费参数，所以隐藏层要窄一些。宽度为 4d 的 GELU MLP 有 2 × d × 4d = 8d² 个权重；宽度为 h 的门控 MLP 有 3 × d × h 个，当 h = 8/3 d ≈ 2.67 d 时，恰好也是 8d²。Shazeer 正是把隐藏层缩小到 2/3，在同等代价下作比较；LLaMA（Touvron 等，2023）取 2/3 × 4d 再向上取整（Llama 2 7B：d = 4,096 时为 11,008）。这个模型 d = ${d}，h = ${m} = ${r} d：每个 MLP 有 ${gated} 个权重，而 4d 宽的 GELU MLP 会有 ${gelu} 个。`;
    },
  },
  {
    id: "unembed",
    target: "logits",
    enter: () => { app.pos = Math.max(0, nTok() - 1); show("output"); },
    title: { en: "Final RMSNorm, and a tied or separate unembedding", zh: "最后的 RMSNorm，以及共用或独立的反嵌入" },
    body: (lang) => {
      const c = cfg(), top = app.next?.candidates[0], N = nParams();
      if (!c || !top || N == null) return [];
      const tied = c.tie_word_embeddings ?? true, t = str("tied", String(tied));
      const vd = big("vd", c.vocab_size * c.n_embd), V = big("vocab", c.vocab_size);
      const share = pr("vd-share", (c.vocab_size * c.n_embd) / N);
      const top1 = val("top-token", shown(top.text, top.id), top.id), l = n("top-logit", top.logit);
      const en: Part[] = [...L`After the last block, one more RMSNorm, and the last position's vector is scored against all ${V} tokens. `,
        ...(tied
          ? L`This model scores with W_Eᵀ, the embedding matrix itself, as GPT-2 does (tie_word_embeddings = ${t}); an unembedding of its own would add V × d = ${vd} numbers, ${share} of the model's size. `
          : L`This model has an unembedding matrix of its own (tie_word_embeddings = ${t}): V × d = ${vd} more numbers, ${share} of the model's size, so that reading a token and predicting it can use different vectors. `),
        ...L`Large models such as Llama 2 7B and Llama 3 8B keep the two apart; small ones (Llama 3.2 1B and 3B, Qwen2 0.5B) tie them, because in a small model that matrix is a large part of the whole (Llama 3.2 1B: 128,256 × 2,048, about 263 million of its 1.24 billion parameters). The top candidate here is ${top1}, with logit ${l}; temperature, top-k, top-p and sampling work exactly as in the GPT-2 lesson.`];
      const zh: Part[] = [...L`最后一个块之后，再做一次 RMSNorm，然后用最后一个位置的向量给全部 ${V} 个词元打分。`,
        ...(tied
          ? L`这个模型和 GPT-2 一样，用嵌入矩阵本身的转置 W_Eᵀ 来打分（tie_word_embeddings = ${t}）；如果另配一个反嵌入矩阵，就要多出 V × d = ${vd} 个数，相当于模型大小的 ${share}。`
          : L`这个模型有自己单独的反嵌入矩阵（tie_word_embeddings = ${t}）：多出 V × d = ${vd} 个数，相当于模型大小的 ${share}，好让“读入一个词元”和“预测一个词元”可以用不同的向量。`),
        ...L`像 Llama 2 7B、Llama 3 8B 这样的大模型把两者分开；小模型（Llama 3.2 1B 和 3B、Qwen2 0.5B）则共用，因为在小模型里，这个矩阵占了整个模型很大一块（Llama 3.2 1B：128,256 × 2,048，约 2.63 亿个参数，而全部才 12.4 亿）。这里的首选候选是 ${top1}，logit 为 ${l}；温度、top-k、top-p 和抽样，都和 GPT-2 那一课讲的完全一样。`];
      return lang === "en" ? en : zh;
    },
  },
  {
    id: "precision",
    target: "",
    enter: () => show("output"),
    title: { en: "How many bits per number", zh: "每个数用多少位" },
    body: (lang) => {
      const c = cfg(), N = nParams();
      if (!c || N == null) return [];
      const dt = c.dtype ?? "float32", b = bytesPer(dt), bf16 = dt === "bfloat16";
      const d = str("dtype", dt), np = big("n-params", N), nb = int("bytes-per-number", b), size = bytes("weights-size", N * b, lang);
      const half = bytes("weights-bf16", N * 2, lang);
      const why = L`bfloat16 keeps float32's 8 exponent bits, so the same range (up to about 3.4 × 10³⁸), and gives up precision: 7 fraction bits, two to three significant digits. float16, with 5 exponent bits, overflows above 65,504, which can break training; bfloat16 does not, and a little lost precision matters less than halving the memory and the time spent moving weights.`;
      const whyZh = L`bfloat16 保留了 float32 的 8 个指数位，所以数值范围一样（最大约 3.4 × 10³⁸），牺牲的是精度：只有 7 个尾数位，大约两三位有效数字。float16 只有 5 个指数位，超过 65,504 就会溢出，可能让训练崩掉；bfloat16 不会。少一点精度，换来内存减半、搬运权重的时间减半，是划算的。`;
      const en: Part[] = bf16
        ? [...L`This model's weights are in ${d}: ${nb} bytes per number, so its ${np} parameters take ${size}, half of what float32 would need. `, ...why]
        : [...L`This copy of the model computes in ${d}: ${nb} bytes per number, so its ${np} parameters take ${size}. Today's large models are usually trained and published in bfloat16, which would take ${half}. `, ...why];
      const zh: Part[] = bf16
        ? [...L`这个模型的权重是 ${d} 格式：每个数 ${nb} 字节，${np} 个参数共占 ${size}，是 float32 的一半。`, ...whyZh]
        : [...L`这份模型用 ${d} 计算：每个数 ${nb} 字节，${np} 个参数共占 ${size}。如今的大模型通常用 bfloat16 训练和发布，那样只需 ${half}。`, ...whyZh];
      return lang === "en" ? en : zh;
    },
  },
];

export const modernLesson: Lesson = {
  id: "modern",
  title: { en: "From GPT-2 to today's models", zh: "从 GPT-2 到今天的模型" },
  steps,
};
