// The Experiments area's strings, in English and Chinese (kept beside its components; the shared
// dictionary in lib/i18n.ts holds only the navigation label). `{name}` marks a value filled in at run time.
import { app } from "../../lib/state.svelte";

const en = {
  tabLens: "Logit lens",
  tabHeads: "Heads: importance & roles",
  tabEmbed: "Embedding explorer",
  e_lens:
    "What would the model predict if it stopped early? The residual stream after each block goes through the final " +
    "normalisation (LayerNorm or RMSNorm, as the model has) and the unembedding, exactly like the real output. The last row is the real prediction; the rank and " +
    "probability columns follow the finally predicted token up through the layers.",
  e_heads:
    "Switch a head off (its output z set to zero, or to its average over a reference set) and run the model again: " +
    "how much worse does it predict this text? Heads also have recognisable habits: looking at the previous token, " +
    "the first token, an earlier copy of the same token, or the token after it (induction). Click a head to ablate it.",
  e_embed:
    "Each token is a row of the embedding matrix. Tokens used alike get similar rows: here are the nearest rows by " +
    "cosine similarity, vector arithmetic on rows (king − man + woman), and a 2-D picture (PCA) of chosen tokens.",
  loading: "Computing…",
  lensAt: "At position {p} (“{tok}”) the model finally predicts “{pred}”. Click another token above to move.",
  layerCol: "after",
  rankOf: "rank of “{tok}”",
  probOf: "P(“{tok}”)",
  topN: "top {n} predictions at this layer",
  embeddings: "embeddings",
  afterBlock: "block {l}",
  metric: "Show",
  m_loss: "importance: loss increase when ablated",
  m_kl: "importance: KL of the next token when ablated",
  m_previous_token: "role: previous token",
  m_first_token: "role: first token",
  m_duplicate_token: "role: duplicate token",
  m_induction: "role: induction",
  m_rare_token: "role: rare token",
  m_entropy: "attention entropy (normalised)",
  m_distance: "how far back (tokens, on average)",
  source: "Role scores on",
  srcText: "your text",
  srcRef: "reference set",
  mode: "Ablation",
  modeZero: "zero",
  modeMean: "mean",
  headsHelp: "rows: layers · columns: heads · the letters name the head's strongest role on the reference set",
  roleLegend: "P previous · F first · D duplicate · I induction · R rare",
  noValue: "no position in this text to judge by",
  cleanLoss: "loss on the text without ablation: {v} nats/token",
  clickHead: "Click a head in the map to switch it off and compare the next-token distribution.",
  ablated: "Layer {l}, head {h} switched off ({mode})",
  lossLine: "loss {a} → {b} ({d} nats/token)",
  klLine: "KL(before ‖ after) of the next token: {v} nats",
  nextToken: "next token",
  before: "before",
  after: "after",
  change: "change",
  nearest: "Nearest tokens to",
  nearestHelp: "a word (a leading space is added, as in mid-sentence; quote it to keep it exact: 'king'), or an id",
  useFocus: "the focus token",
  similarity: "cosine similarity",
  analogy: "Vector arithmetic",
  minus: "−",
  plus: "+",
  go: "Compute",
  projection: "PCA of tokens",
  projHelp: "comma-separated words or ids; empty: the tokens of your text",
  explained: "PC1 explains {a}, PC2 {b} of these tokens' variance",
  pruneTitle: "Pruning: switch heads off one by one",
  pruneHeads: "heads to prune",
  rescore: "re-score the remaining heads at every step",
  rescoreTooMany: "too slow here: {n} forward passes; prune fewer heads to allow it",
  pruneRun: "Prune",
  pruneHelp: "Least important head first, each on top of those already off; the loss on your text after each " +
    "removal ({passes} forward passes). Without re-scoring, the order is the importance map's.",
  pruneClean: "no head off: loss {v} nats/token",
  pruneStep: "{n} heads off, the last L{l} H{h}: loss {v} ({d}) nats/token",
  pruneStale: "computed for another text or ablation mode: press Prune again",
  pruneKnee: "+10 % at {n}",
  pruneX: "heads switched off",
  pruneY: "loss (nats/token)",
  pruneOrder: "order:",
  offline: "offline snapshot",
};

const zh: Record<keyof typeof en, string> = {
  tabLens: "逻辑透镜",
  tabHeads: "注意力头：重要性与角色",
  tabEmbed: "嵌入探索",
  e_lens:
    "如果模型提前停下，它会预测什么？每个块之后的残差流都经过最终的归一化（LayerNorm 或 RMSNorm，视模型而定）和反嵌入，与真实输出的计算完全相同。最后一行就是真实预测；" +
    "“排名”和“概率”两列跟踪最终预测的词元在各层的情况。",
  e_heads:
    "关闭一个注意力头（把它的输出 z 设为零，或设为它在参考文本上的平均值），再运行一次模型：它对这段文本的预测变差了多少？" +
    "注意力头也有可辨认的习惯：看前一个词元、看第一个词元、看同一词元较早的出现，或看那之后的词元（归纳头）。点击一个头即可关闭它。",
  e_embed:
    "每个词元是嵌入矩阵中的一行。用法相近的词元，行向量也相近：这里列出余弦相似度最高的行，演示行向量的加减（king − man + woman），" +
    "并把选定词元投影到二维（主成分分析）。",
  loading: "计算中…",
  lensAt: "在位置 {p}（“{tok}”），模型最终预测 “{pred}”。点击上方其他词元即可切换。",
  layerCol: "经过",
  rankOf: "“{tok}” 的排名",
  probOf: "P(“{tok}”)",
  topN: "该层预测的前 {n} 个词元",
  embeddings: "嵌入",
  afterBlock: "第 {l} 块",
  metric: "显示",
  m_loss: "重要性：关闭后损失的增加",
  m_kl: "重要性：关闭后下一个词元分布的 KL 散度",
  m_previous_token: "角色：前一个词元",
  m_first_token: "角色：第一个词元",
  m_duplicate_token: "角色：重复词元",
  m_induction: "角色：归纳",
  m_rare_token: "角色：罕见词元",
  m_entropy: "注意力熵（归一化）",
  m_distance: "平均回看距离（词元数）",
  source: "角色分数依据",
  srcText: "你的文本",
  srcRef: "参考文本集",
  mode: "消融方式",
  modeZero: "置零",
  modeMean: "取平均",
  headsHelp: "行：层 · 列：头 · 字母表示该头在参考文本集上最强的角色",
  roleLegend: "P 前一个 · F 第一个 · D 重复 · I 归纳 · R 罕见",
  noValue: "这段文本中没有可用于判断的位置",
  cleanLoss: "未消融时文本的损失：{v} 奈特/词元",
  clickHead: "点击图中的一个头即可关闭它，并比较下一个词元的分布。",
  ablated: "已关闭第 {l} 层第 {h} 个头（{mode}）",
  lossLine: "损失 {a} → {b}（{d} 奈特/词元）",
  klLine: "下一个词元分布的 KL(前 ‖ 后)：{v} 奈特",
  nextToken: "下一个词元",
  before: "关闭前",
  after: "关闭后",
  change: "变化",
  nearest: "最接近的词元：",
  nearestHelp: "输入一个词（会像句中那样加上前导空格；加引号可保持原样：'king'），或一个编号",
  useFocus: "焦点词元",
  similarity: "余弦相似度",
  analogy: "向量运算",
  minus: "−",
  plus: "+",
  go: "计算",
  projection: "词元的主成分分析",
  projHelp: "用逗号分隔的词或编号；留空则使用你文本中的词元",
  explained: "第一主成分解释了这些词元方差的 {a}，第二主成分 {b}",
  pruneTitle: "剪枝：逐个关闭注意力头",
  pruneHeads: "要剪掉的头数",
  rescore: "每一步重新评估剩余的头",
  rescoreTooMany: "在这里太慢：需要 {n} 次前向计算；减少剪枝的头数即可启用",
  pruneRun: "剪枝",
  pruneHelp: "先关闭最不重要的头，每次都在已关闭的头之上再关一个；显示每次关闭后文本上的损失（共 {passes} 次前向计算）。" +
    "不重新评估时，顺序取自重要性图。",
  pruneClean: "未关闭任何头：损失 {v} 奈特/词元",
  pruneStep: "已关闭 {n} 个头，最后一个是 L{l} H{h}：损失 {v}（{d}）奈特/词元",
  pruneStale: "这是为另一段文本或另一种消融方式计算的：请再按一次“剪枝”",
  pruneKnee: "第 {n} 个时 +10%",
  pruneX: "已关闭的头数",
  pruneY: "损失（奈特/词元）",
  pruneOrder: "顺序：",
  offline: "离线快照",
};

export type XKey = keyof typeof en;

/** A string of the Experiments area in the app's current language (reactive). */
export function tx(key: XKey, vars: Record<string, string | number> = {}): string {
  const s = (app.lang === "zh" ? zh : en)[key] ?? en[key];
  return s.replace(/\{(\w+)\}/g, (_, k: string) => (k in vars ? String(vars[k]) : `{${k}}`));
}
