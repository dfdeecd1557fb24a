// The strings of the Llama family's views (RMSNorm, token-only embedding, gated MLP, rotated queries and
// keys, grouped-query attention), in English and Chinese, and the header's family and dtype badges. Kept
// beside lib/i18n.ts, which holds GPT-2's; `{name}` marks a value filled in at run time.
import { app } from "./state.svelte";

const en = {
  // header
  famGpt2: "GPT-2 family",
  famLlama: "Llama family · {type}",
  famTitle: "The model's family: {norm}, {positions} positions, {mlp} MLP, {h} query heads on {g} key/value heads",
  learnedPos: "learned",
  gatedSilu: "gated SiLU",
  bf16Badge: "weights in bfloat16",
  bf16Title: "This model was loaded in bfloat16: its weights and activations keep 8 significant bits (about 2 to 3 " +
    "decimal digits), so every number shown carries that rounding. Load it with --dtype float32 for full precision.",
  subtitleLlama: "A real Llama-family model (RMSNorm, rotary positions, grouped-query attention, gated MLP), opened up: " +
    "every number on this page is computed for your text.",
  // tokens
  e_tokens:
    "The text is cut into subword tokens by this model's own tokenizer. Each token has an id: its row in the " +
    "vocabulary. Many Llama-family tokenizers put a beginning-of-sequence token (such as <s>) first; it is a token " +
    "like any other, with its own vector. A character the vocabulary lacks can take several tokens, one byte each " +
    "(shown as <0xF0>); a bracket joins the tokens that make the character.",
  // embedding
  v_embedding: "Token embedding",
  e_embedding:
    "Each token id selects one row of the token embedding matrix W_E, and that row is the vector that enters the " +
    "first block. Nothing is added for the position here: this model has no position embedding. Position enters " +
    "inside attention instead, in every block: each query and key is rotated by angles that grow with its " +
    "position (RoPE), so the score of a query and a key depends on their contents and on how far apart they " +
    "are, not on where they stand.",
  embLlama: "input of block 0: no position vector is added",
  embNoPos: "No W_pos here: where the token stands is told to attention by rotating q and k (RoPE).",
  openRope: "Open the RoPE view",
  // RMSNorm
  v_rmsnorm: "RMSNorm",
  e_rmsnorm:
    "RMS normalisation divides each position's vector by its root mean square, √(mean(x²) + ε), then multiplies " +
    "each dimension by a learned scale w. Unlike LayerNorm it does not subtract the mean and adds no shift: only " +
    "the length of the vector is normalised, and its direction is kept. It comes before attention (ln1), before " +
    "the MLP (ln2) and at the end. On the right: what LayerNorm would do with the same vector.",
  rmsWhich: "Which RMSNorm",
  rms: "root mean square rms = √(mean(x²) + ε)",
  rmsShort: "rms",
  meanSq: "mean(x²)",
  rmsNormalized: "normalised x / rms",
  rmsScale: "scale w",
  rmsOut: "output w ⊙ x / rms",
  rmsModel: "What this model computes (RMSNorm)",
  lnCompare: "For comparison, not this model's step: LayerNorm on the same input",
  lnCompareNote: "computed here in the page from the input x; this model has no γ, β or mean subtraction",
  lnNormalizedCmp: "LayerNorm would give (x − μ) / √(σ² + ε)",
  rmsVsLn:
    "mean(x²) = σ² + μ²: the RMS counts the mean, LayerNorm's σ removes it. Here μ = {mu} and σ = {sigma}; the two " +
    "normalised vectors point the same way up to cos = {cos} (1 would be identical directions).",
  // MLP
  v_mlpGated: "Gated MLP",
  e_mlpGated:
    "The MLP works on each position separately, in a gated form. The input is projected twice to {m} numbers " +
    "({ratio} × the width {d}): the gate, which goes through SiLU, and the linear branch “up”. Their product, number by " +
    "number, is projected back to {d}. Where SiLU(gate) is near 0 a hidden unit is switched off whatever “up” says. " +
    "There are three d × m matrices instead of GPT-2's two; the MLPs hold {share} of this model's parameters.",
  mlpGate: "gate: x · W_gate",
  mlpAct: "SiLU(gate) = gate · σ(gate)",
  mlpUp: "up: x · W_in, the linear branch",
  mlpProd: "product SiLU(gate) ⊙ up",
  mlpDown: "projected back: · W_out",
  actCurve: "{act}: each dot is one of the {m} hidden units at the focus token ({x} on the x axis, {y} on the y axis)",
  // overview, architecture
  ovEmbedTok: "embed",
  ovFinalNorm: "norm_f",
  ovSay_embed: "the token embedding alone: no position vector is added (position enters attention by rotating q and k).",
  ovSay_ln_f: "the final RMSNorm: the last vector is divided by its root mean square and scaled before the unembedding.",
  // attention stages
  e_qkv:
    "The normalised vector is multiplied by W_Q, W_K and W_V{bias} to give a query, a key and a value, each split " +
    "into heads of {dh} numbers. There are {h} query heads but only {g} key/value heads: each group of {r} query heads " +
    "shares one key and one value (grouped-query attention). The queries and keys shown are before rotation; " +
    "attention compares the rotated ones (RoPE).",
  withBias: " (with biases, as Qwen2 has)",
  noBias: " (no biases)",
  keysG: "keys K of key/value head {g}, before rotation (tokens × d_head)",
  valuesG: "values V of key/value head {g} (tokens × d_head)",
  sharedBy: "query head {h} reads key/value head {g}, shared by query heads {from}–{to}",
  e_attention:
    "For one head: each rotated query is compared with every rotated key (RoPE: both were turned by angles set by " +
    "their positions), scaled by 1/√d_k; keys after the query are masked with −∞ (the model may not look ahead), " +
    "and a softmax turns each row into weights that sum to 1. The keys come from the head's key/value head, " +
    "shared with the other query heads of its group.",
  e_heads:
    "Each head mixes the value vectors of its key/value head with its attention weights (pattern · V). The heads' " +
    "outputs are placed side by side ({hd} numbers) and projected to the model width {d} by W_O, with no bias: this is " +
    "what attention adds.",
  attnOutNoBias: "attn_out = concat · W_O at the focus token",
  stageScoresRope: "rotated Q · rotated Kᵀ",
  // residual, output
  e_residual:
    "Attention and the MLP never replace the vector: they add to it (the residual connection). Each reads the " +
    "stream through its own RMSNorm. Nothing is dropped at inference.",
  e_output:
    "The last position's vector goes through the final RMSNorm and is multiplied by W_U{tied}, with no bias, giving " +
    "one logit per vocabulary entry. Temperature, top-k and top-p shape the probabilities from which the next token " +
    "is drawn. This page starts with top-k = 10 at temperature 1: our choice, not a rule.",
  tied: " (the transpose of W_E: this model ties them)",
  untied: " (its own matrix: this model does not tie it to W_E)",
  finalNorm: "final RMSNorm output at the last token",
  // architecture
  archNorm: "RMSNorm",
  archMlp: "Gated MLP",
};

type FKey = keyof typeof en;

const zh: Record<FKey, string> = {
  famGpt2: "GPT-2 系列",
  famLlama: "Llama 系列 · {type}",
  famTitle: "模型系列：{norm}，{positions} 位置编码，{mlp} MLP，{h} 个查询头共用 {g} 个键/值头",
  learnedPos: "可学习的",
  gatedSilu: "门控 SiLU",
  bf16Badge: "权重为 bfloat16",
  bf16Title: "这个模型以 bfloat16 加载：它的权重和激活值只保留 8 位有效二进制位（约 2 到 3 位十进制有效数字），所以这里显示的每个数都带有这种舍入。" +
    "用 --dtype float32 加载即可得到完整精度。",
  subtitleLlama: "一个真实的 Llama 系列模型（RMSNorm、旋转位置编码、分组查询注意力、门控 MLP），被完整打开：本页的每个数字都是模型针对你的文本实时算出的。",
  e_tokens:
    "这个模型自己的分词器把文本切成子词词元。每个词元有一个编号，即它在词表中的行号。许多 Llama 系列的分词器会在最前面放一个序列开始词元（例如 <s>）；" +
    "它和其他词元一样，也有自己的向量。词表里没有的字符可能占好几个词元，每个词元是一个字节（显示为 <0xF0>），括号把组成同一个字符的词元连在一起。",
  v_embedding: "词元嵌入",
  e_embedding:
    "每个词元编号从词元嵌入矩阵 W_E 中选出一行，这一行就是进入第一个块的向量。这里不加任何位置信息：这个模型没有位置嵌入。" +
    "位置改在每个块的注意力内部加入：每个查询和键都按随位置增大的角度旋转（RoPE），于是查询与键的分数取决于它们的内容和相隔多远，而不取决于它们各自所在的绝对位置。",
  embLlama: "第 0 块的输入：不加位置向量",
  embNoPos: "这里没有 W_pos：词元所在的位置通过旋转 q 和 k（RoPE）告诉注意力。",
  openRope: "打开 RoPE 视图",
  v_rmsnorm: "RMSNorm",
  e_rmsnorm:
    "RMS 归一化把每个位置的向量除以它的均方根 √(mean(x²) + ε)，再让每一维乘以一个学到的缩放 w。与 LayerNorm 不同，它不减去均值，也不加平移：" +
    "只把向量的长度归一化，方向保持不变。它出现在注意力之前（ln1）、MLP 之前（ln2）和最后。右侧是 LayerNorm 对同一个向量会做的事。",
  rmsWhich: "哪一个 RMSNorm",
  rms: "均方根 rms = √(mean(x²) + ε)",
  rmsShort: "rms",
  meanSq: "mean(x²)",
  rmsNormalized: "归一化 x / rms",
  rmsScale: "缩放 w",
  rmsOut: "输出 w ⊙ x / rms",
  rmsModel: "这个模型算的（RMSNorm）",
  lnCompare: "仅作对比，并非本模型的步骤：LayerNorm 作用于同一输入",
  lnCompareNote: "由页面根据输入 x 现场算出；这个模型没有 γ、β，也不减均值",
  lnNormalizedCmp: "LayerNorm 会得到 (x − μ) / √(σ² + ε)",
  rmsVsLn:
    "mean(x²) = σ² + μ²：RMS 把均值也算了进去，LayerNorm 的 σ 则把它去掉。这里 μ = {mu}，σ = {sigma}；两个归一化后的向量方向之间的余弦为 {cos}（1 表示方向完全相同）。",
  v_mlpGated: "门控 MLP",
  e_mlpGated:
    "MLP 对每个位置分别计算，采用门控形式。输入被投影两次，各得到 {m} 个数（宽度 {d} 的 {ratio} 倍）：一路是门（gate），经过 SiLU；另一路是线性分支 “up”。" +
    "两者逐个相乘，再投影回 {d} 维。SiLU(gate) 接近 0 的隐藏单元被关掉，无论 “up” 是多少。这里有三个 d × m 矩阵，而 GPT-2 只有两个；" +
    "所有 MLP 占这个模型参数的 {share}。",
  mlpGate: "门：x · W_gate",
  mlpAct: "SiLU(gate) = gate · σ(gate)",
  mlpUp: "up：x · W_in，线性分支",
  mlpProd: "乘积 SiLU(gate) ⊙ up",
  mlpDown: "投影回去：· W_out",
  actCurve: "{act}：每个点是焦点词元处 {m} 个隐藏单元之一（横轴为 {x}，纵轴为 {y}）",
  ovEmbedTok: "嵌入",
  ovFinalNorm: "norm_f",
  ovSay_embed: "只有词元嵌入，不加位置向量（位置通过旋转 q 和 k 进入注意力）。",
  ovSay_ln_f: "最终 RMSNorm：最后的向量除以它的均方根并缩放，再做反嵌入。",
  e_qkv:
    "归一化后的向量乘以 W_Q、W_K 和 W_V{bias}，得到查询、键和值，各自切分成每个 {dh} 个数的头。查询头有 {h} 个，键/值头却只有 {g} 个：" +
    "每 {r} 个查询头共用一组键和值（分组查询注意力）。这里显示的查询和键都是旋转之前的；注意力比较的是旋转后的查询和键（RoPE）。",
  withBias: "（带偏置，Qwen2 就是这样）",
  noBias: "（没有偏置）",
  keysG: "键/值头 {g} 的键 K，旋转之前（词元 × d_head）",
  valuesG: "键/值头 {g} 的值 V（词元 × d_head）",
  sharedBy: "查询头 {h} 读取键/值头 {g}，它由查询头 {from}–{to} 共用",
  e_attention:
    "对一个头：每个旋转后的查询与每个旋转后的键比较（RoPE：两者都按各自位置决定的角度转过），再乘以 1/√d_k；查询之后的键被 −∞ 遮住（模型不能往后看），" +
    "softmax 把每一行变成和为 1 的权重。键来自这个头所属的键/值头，与同组的其他查询头共用。",
  e_heads:
    "每个头用它的注意力权重混合它的键/值头里的值向量（pattern · V）。各头的输出并排拼接（{hd} 个数），再由 W_O 投影到模型宽度 {d}，" +
    "没有偏置：这就是注意力加上的部分。",
  attnOutNoBias: "焦点词元处的 attn_out = concat · W_O",
  stageScoresRope: "旋转后的 Q · 旋转后的 Kᵀ",
  e_residual:
    "注意力和 MLP 从不替换向量，而是往上加（残差连接）。它们各自通过自己的 RMSNorm 读取残差流。推理时不丢弃任何东西。",
  e_output:
    "最后一个位置的向量经过最终 RMSNorm，再乘以 W_U{tied}，没有偏置，为词表中每个词元得到一个 logit。温度、top-k 和 top-p 决定下一个词元从中抽取的概率。" +
    "本页开始时使用 top-k = 10、温度 1：这是我们的选择，而非规定。",
  tied: "（即 W_E 的转置：这个模型把两者绑定）",
  untied: "（它自己的矩阵：这个模型没有把它与 W_E 绑定）",
  finalNorm: "最后一个词元处的最终 RMSNorm 输出",
  archNorm: "RMSNorm",
  archMlp: "门控 MLP",
};

const DICTS = { en, zh } as const;

/** A Llama-family string in the current language (reactive, like `t`). */
export function tf(key: FKey, vars: Record<string, string | number> = {}): string {
  const s = DICTS[app.lang][key] ?? en[key];
  return s.replace(/\{(\w+)\}/g, (_, k: string) => (k in vars ? String(vars[k]) : `{${k}}`));
}
