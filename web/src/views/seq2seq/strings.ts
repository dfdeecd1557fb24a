// The encoder-decoder page's strings, in English and Chinese (kept beside its components; the shared
// dictionary in lib/i18n.ts is not touched). `{name}` marks a value filled in at run time.
import { app } from "../../lib/state.svelte";

const en = {
  modeGpt2: "Decoder only (GPT-2, Llama)",
  modeSeq2seq: "Encoder-decoder (2017)",
  modeLabel: "Which Transformer",
  subtitle: "The original Transformer of “Attention Is All You Need”, trained here on small translation tasks: " +
    "every number on this page is computed by a real trained model for your input.",
  task: "Task",
  t_reverse: "Reverse a string",
  t_number_words: "Number → English words",
  t_number_words_zh: "Number → Chinese numerals",
  t_dates: "Date → ISO 8601",
  d_reverse: "Reverse a string of letters: the cross-attention forms an anti-diagonal.",
  d_number_words: "Write an integer in English words: several digits make one word.",
  d_number_words_zh: "Write an integer in Chinese numerals (1234 → 一千二百三十四): digits, units and 零.",
  d_dates: "Normalise a written date to ISO 8601 (March 5, 2021 → 2021-03-05): the parts are reordered.",
  source: "Source text",
  sourceHelp: "Type an input for the task; it is decoded as you type.",
  allowed: "Allowed: {chars}",
  allowedWords: "digits only",
  maxLen: "at most {n} tokens",
  examples: "Examples",
  beam: "Beam size",
  greedy: "1 = greedy",
  problem: "Problem",
  computing: "Computing…",
  shipped: "Shipped checkpoint: {enc}+{dec} layers, d_model {d}, {h} heads, d_ff {ff} · {acc} exact match on held-out inputs",
  usingRun: "Using the model of live training run {run} (not the shipped checkpoint).",
  backToShipped: "Back to the shipped checkpoint",
  output: "Output",
  tab_encoder: "Encoder",
  tab_decoder: "Decoding step by step",
  tab_compare: "Teacher forcing vs free running",
  tab_positions: "Positional encoding",
  tab_training: "Training, live",
  // encoder
  encTitle: "Source → embedding + positions → encoder",
  e_encoder:
    "Each source token becomes a row of the embedding table, multiplied by √d_model. The paper does this (section " +
    "3.4) without giving a reason; a common explanation, not the paper's, is that it brings the small entries of " +
    "the embedding table to the size of the positional encoding that is added next: a fixed pattern of sines and " +
    "cosines that tells the model where the token stands. The encoder blocks then let every source token attend to every other one (no mask: the " +
    "whole input is known at once), N times, each followed by a feed-forward layer, residual sum and LayerNorm.",
  srcTokens: "Source tokens",
  embedTitle: "Token embedding × √d_model (× {s})",
  peTitle: "+ positional encoding",
  sumTitle: "= input of encoder block 0",
  embedCell: "“{tok}” (position {p}), dimension {d}: {v}",
  sameScale: "One colour scale for all three (blue −{v} … red +{v}), so that their sizes can be compared.",
  encAttnTitle: "Encoder self-attention · layer {l}, head {h}",
  encAttnHelp: "rows: the token that looks (query) · columns: the token looked at (key) · every row sums to 1",
  encCell: "source token “{q}” ({qi}) attends to source token “{k}” ({ki}): {v}",
  headsGrid: "All layers and heads: click one to enlarge it",
  layerN: "layer {l}",
  headN: "head {h}",
  pickHead: "Layer {l}, head {h}",
  // decoder
  decTitle: "Decoding, one token at a time",
  e_decoder:
    "The decoder starts from the start token <s> and writes the output one token at a time. At each step its input " +
    "is <s> followed by what it has written so far. Masked self-attention lets each position look only at itself " +
    "and earlier positions; cross-attention lets it look at the encoder's output for every source token. The most " +
    "probable next token (greedy) or the best few partial outputs (beam search) are kept, until the end token </s>. " +
    "(The probabilities top out near 90%: the models were trained with label smoothing 0.1.)",
  f_self: "self",
  f_cross: "cross",
  f_tf: "teacher forcing",
  f_fr: "free running",
  f_lr: "learning rate: linear warmup, then cosine decay",
  restart: "Restart",
  back: "Step back",
  play: "Play",
  pause: "Pause",
  step: "Step",
  stepOf: "Step {k} of {n}",
  speed: "Speed",
  decInput: "Decoder input at this step",
  nextToken: "→ next token",
  candidates: "Most probable next tokens",
  outputSoFar: "Output so far",
  crossTitle: "Cross-attention · layer {l}, head {h}",
  crossHelp: "rows: output tokens · columns: source tokens · how strongly each output step looks at each source token",
  crossCell: "output token “{o}” (step {s}) attends to source token “{k}” ({ki}): {v}",
  selfTitle: "Masked self-attention · layer {l}, head {h}",
  selfHelp: "rows: decoder input positions · columns: the positions they may see · grey: masked (the future)",
  selfCell: "decoder position {q} (“{qt}”) attends to position {k} (“{kt}”): {v}",
  selfMasked: "decoder position {q} (“{qt}”) cannot see position {k} (“{kt}”): it lies in the future",
  crossGrid: "Cross-attention in every layer and head, up to this step: click one to enlarge it",
  beamTitle: "Beam search after step {k}",
  beamAlive: "still growing",
  beamFinished: "finished",
  beamScore: "log-probability",
  unfinished: "The length limit stopped decoding before the end token.",
  finalScore: "Output log-probability: {v}",
  // compare
  cmpTitle: "Teacher forcing vs free running (exposure bias)",
  e_compare:
    "In training (teacher forcing) the decoder is always fed the correct previous tokens, so all positions are " +
    "trained at once. When it runs by itself (free running) it is fed its own previous outputs instead: after one " +
    "mistake every later input is something it never saw in training, and errors can pile up. That gap is called " +
    "exposure bias. Here both are run on the same example; a model that is not fully trained shows it best (train one " +
    "in the “Training, live” tab, then use its model here).",
  reference: "Reference output",
  referenceHelp: "Empty: the task's own correct answer.",
  compare: "Compare",
  tfSummary: "Teacher forcing: {k} of {n} positions predicted right",
  frRight: "Free running: “{out}”, correct",
  frWrong: "Free running: “{out}”, wrong",
  firstDiv: "it first leaves the reference at step {s}",
  colStep: "step",
  colGold: "reference",
  colTf: "teacher forcing: input → prediction",
  colFr: "free running: input → prediction",
  pGold: "P(reference)",
  differ: "the free-running input has left the reference here",
  stopped: "(stopped)",
  // positions
  posTitle: "Sinusoidal positional encoding",
  e_positions:
    "Position pos gets the vector PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)): " +
    "waves whose wavelengths grow from 2π to 10000·2π across the dimensions. Every position's vector has the same " +
    "length, and the dot product of two positions depends only on how far apart they are, so near positions are " +
    "similar. Nothing stops the formula at the longest input seen in training: the dashed line marks it, and the " +
    "pattern carries on unchanged beyond it (the model itself, though, never learned to use those positions).",
  nPositions: "Positions shown",
  trainedLen: "trained length: {n}",
  encMatrix: "PE: positions × dimensions",
  peCell: "position {p}, dimension {d}: {v}",
  simMatrix: "Dot product PE[i] · PE[j]",
  simCell: "position {i} · position {j} = {v}",
  simScale: "white {lo} … purple {hi}",
  simRow: "PE[{p}] · PE[j] for every position j (click a row of the dot-product map to choose {p})",
  waves: "Dimension {d} across positions (click a column of PE to choose it)",
  beyond: "beyond the trained length",
  normNote: "every row has norm √(d_model/2) = {v}",
  // training
  trainTitle: "Train a small model, live",
  e_training:
    "A fresh tiny encoder-decoder (2+2 layers, d_model 64) learns the chosen task with teacher forcing, label " +
    "smoothing and a warmup schedule, on pairs generated on the fly. The loss is streamed to this page step by step; " +
    "every few steps the cross-attention of one fixed example is recorded, so you can watch it sharpen from an even " +
    "spread into an alignment. One run at a time per server; it ends by itself after the steps you ask for.",
  steps: "Steps",
  example: "Watched example",
  start: "Start training",
  stop: "Stop",
  st_starting: "starting…",
  st_running: "running",
  st_stopping: "stopping after this step…",
  st_finished: "finished",
  st_stopped: "stopped",
  st_failed: "failed",
  runLine: "Run {run} · {task} · step {step} of {steps} · {status}",
  busy: "Busy",
  watch: "Watch that run",
  connLost: "The connection to the training run was lost.",
  lossChart: "Training loss (cross-entropy with label smoothing) per step",
  lossAxis: "loss",
  stepAxis: "step",
  smoothed: "smoothed",
  evalPoint: "exact match on held-out inputs",
  atStep: "Cross-attention of the example at step {s}",
  snapshot: "Snapshot",
  follow: "follow the latest",
  modelSays: "The model's own greedy answer: “{out}”",
  right: "right",
  wrongAns: "wrong",
  goldProb: "probability of each reference token",
  doneLine: "Ended at step {s}: {em} exact match on held-out inputs",
  useModel: "Use this model in the other tabs",
  noRun: "No run yet on this server.",
  modelShape: "{enc}+{dec} layers, d_model {d}, {h} heads, {p} parameters; batch {b}, peak learning rate {lr}",
};

export type SKey = keyof typeof en;

const zh: Record<SKey, string> = {
  modeGpt2: "仅解码器（GPT-2、Llama）",
  modeSeq2seq: "编码器-解码器（2017）",
  modeLabel: "选择 Transformer",
  subtitle: "《Attention Is All You Need》中最初的 Transformer，在几个小型翻译任务上训练：本页每个数字都由真实训练好的模型针对你的输入算出。",
  task: "任务",
  t_reverse: "字符串倒序",
  t_number_words: "数字 → 英文单词",
  t_number_words_zh: "数字 → 中文数字",
  t_dates: "日期 → ISO 8601",
  d_reverse: "把一串字母倒过来：交叉注意力形成一条反对角线。",
  d_number_words: "用英文单词写出整数：几个数字合成一个单词。",
  d_number_words_zh: "用中文数字写出整数（1234 → 一千二百三十四）：数字、单位和“零”。",
  d_dates: "把书面日期规范为 ISO 8601（March 5, 2021 → 2021-03-05）：各部分要重新排序。",
  source: "源文本",
  sourceHelp: "输入该任务的一个输入；输入时即时解码。",
  allowed: "可用字符：{chars}",
  allowedWords: "仅限数字",
  maxLen: "最多 {n} 个词元",
  examples: "示例",
  beam: "束宽",
  greedy: "1 = 贪心",
  problem: "问题",
  computing: "计算中…",
  shipped: "内置检查点：{enc}+{dec} 层，d_model {d}，{h} 个头，d_ff {ff} · 留出输入上完全匹配率 {acc}",
  usingRun: "正在使用现场训练 {run} 得到的模型（不是内置检查点）。",
  backToShipped: "改回内置检查点",
  output: "输出",
  tab_encoder: "编码器",
  tab_decoder: "逐步解码",
  tab_compare: "教师强制 vs 自由运行",
  tab_positions: "位置编码",
  tab_training: "现场训练",
  encTitle: "源文本 → 嵌入 + 位置 → 编码器",
  e_encoder:
    "每个源词元变成嵌入表中的一行，再乘以 √d_model。论文（第 3.4 节）这样做，却没有说明原因；常见的解释（并非出自论文）是：" +
    "这样能把嵌入表里很小的数值放大到与随后加上的位置编码相当。位置编码是一组固定的正弦和余弦，告诉模型词元所在的位置。随后各编码器块让每个源词元关注所有其他源词元（没有掩码：整个输入一次就已知），共 N 次，" +
    "每次之后是前馈层、残差相加和 LayerNorm。",
  srcTokens: "源词元",
  embedTitle: "词元嵌入 × √d_model（× {s}）",
  peTitle: "+ 位置编码",
  sumTitle: "= 编码器第 0 块的输入",
  embedCell: "“{tok}”（位置 {p}），维度 {d}：{v}",
  sameScale: "三幅图使用同一色标（蓝 −{v} … 红 +{v}），便于比较它们的大小。",
  encAttnTitle: "编码器自注意力 · 第 {l} 层，第 {h} 个头",
  encAttnHelp: "行：发出关注的词元（查询）· 列：被关注的词元（键）· 每行之和为 1",
  encCell: "源词元 “{q}”（{qi}）关注源词元 “{k}”（{ki}）：{v}",
  headsGrid: "所有层和头：点击其中一个放大",
  layerN: "第 {l} 层",
  headN: "头 {h}",
  pickHead: "第 {l} 层，第 {h} 个头",
  decTitle: "逐个词元地解码",
  e_decoder:
    "解码器从起始词元 <s> 出发，每次写出一个输出词元。每一步的输入是 <s> 加上已经写出的词元。带掩码的自注意力让每个位置" +
    "只能看到自己和之前的位置；交叉注意力让它查看编码器对每个源词元的输出。每步保留最可能的下一个词元（贪心），" +
    "或最好的几个部分输出（束搜索），直到结束词元 </s>。" +
    "（概率最高只到 90% 左右：这些模型训练时用了 0.1 的标签平滑。）",
  f_self: "自注意力",
  f_cross: "交叉注意力",
  f_tf: "教师强制",
  f_fr: "自由运行",
  f_lr: "学习率：线性预热，然后余弦衰减",
  restart: "重新开始",
  back: "后退一步",
  play: "播放",
  pause: "暂停",
  step: "单步",
  stepOf: "第 {k} 步，共 {n} 步",
  speed: "速度",
  decInput: "这一步的解码器输入",
  nextToken: "→ 下一个词元",
  candidates: "最可能的下一个词元",
  outputSoFar: "目前的输出",
  crossTitle: "交叉注意力 · 第 {l} 层，第 {h} 个头",
  crossHelp: "行：输出词元 · 列：源词元 · 每个输出步骤对每个源词元的关注程度",
  crossCell: "输出词元 “{o}”（第 {s} 步）关注源词元 “{k}”（{ki}）：{v}",
  selfTitle: "带掩码的自注意力 · 第 {l} 层，第 {h} 个头",
  selfHelp: "行：解码器输入位置 · 列：它们能看到的位置 · 灰色：被掩码（未来）",
  selfCell: "解码器位置 {q}（“{qt}”）关注位置 {k}（“{kt}”）：{v}",
  selfMasked: "解码器位置 {q}（“{qt}”）看不到位置 {k}（“{kt}”）：它在未来",
  crossGrid: "到这一步为止，每一层、每个头的交叉注意力：点击其中一个放大",
  beamTitle: "第 {k} 步后的束搜索",
  beamAlive: "仍在增长",
  beamFinished: "已结束",
  beamScore: "对数概率",
  unfinished: "长度上限在结束词元之前终止了解码。",
  finalScore: "输出的对数概率：{v}",
  cmpTitle: "教师强制 vs 自由运行（暴露偏差）",
  e_compare:
    "训练时（教师强制）解码器总是得到正确的前文词元，因此所有位置可以一次训练。独立运行时（自由运行）它得到的是自己之前的输出：" +
    "一旦出错，之后的每个输入都是训练中从未见过的情况，错误可能越积越多。这种差距称为暴露偏差。这里在同一个例子上同时运行两者；" +
    "没有完全训练好的模型最能说明问题（可在“现场训练”标签页训练一个，然后在这里使用它）。",
  reference: "参考输出",
  referenceHelp: "留空：使用任务自身的正确答案。",
  compare: "比较",
  tfSummary: "教师强制：{n} 个位置中预测正确 {k} 个",
  frRight: "自由运行：“{out}”，正确",
  frWrong: "自由运行：“{out}”，错误",
  firstDiv: "它在第 {s} 步首次偏离参考输出",
  colStep: "步",
  colGold: "参考",
  colTf: "教师强制：输入 → 预测",
  colFr: "自由运行：输入 → 预测",
  pGold: "P(参考)",
  differ: "自由运行的输入在这里已偏离参考输出",
  stopped: "（已停止）",
  posTitle: "正弦位置编码",
  e_positions:
    "位置 pos 得到向量 PE[pos, 2i] = sin(pos / 10000^(2i/d))，PE[pos, 2i+1] = cos(pos / 10000^(2i/d))：" +
    "一组波长从 2π 增长到 10000·2π 的波。每个位置向量的长度相同，两个位置的点积只取决于它们相距多远，所以相近的位置相似。" +
    "公式并不止于训练中见过的最长输入：虚线标出了这个长度，超出之后图案照样延续（不过模型本身从未学过使用这些位置）。",
  nPositions: "显示的位置数",
  trainedLen: "训练长度：{n}",
  encMatrix: "PE：位置 × 维度",
  peCell: "位置 {p}，维度 {d}：{v}",
  simMatrix: "点积 PE[i] · PE[j]",
  simCell: "位置 {i} · 位置 {j} = {v}",
  simScale: "白 {lo} … 紫 {hi}",
  simRow: "PE[{p}] 与每个位置 j 的点积（在点积图中点击一行来选择 {p}）",
  waves: "维度 {d} 随位置的变化（在 PE 图中点击一列来选择）",
  beyond: "超出训练长度",
  normNote: "每一行的范数都是 √(d_model/2) = {v}",
  trainTitle: "现场训练一个小模型",
  e_training:
    "一个全新的微型编码器-解码器（2+2 层，d_model 64）用教师强制、标签平滑和预热学习率在即时生成的样本上学习所选任务。" +
    "损失逐步推送到本页；每隔几步记录一个固定例子的交叉注意力，你可以看到它从均匀分布逐渐变成对齐关系。" +
    "每台服务器同一时间只运行一个训练；达到你设定的步数后自动结束。",
  steps: "步数",
  example: "观察的例子",
  start: "开始训练",
  stop: "停止",
  st_starting: "正在启动…",
  st_running: "运行中",
  st_stopping: "这一步之后停止…",
  st_finished: "已完成",
  st_stopped: "已停止",
  st_failed: "失败",
  runLine: "训练 {run} · {task} · 第 {step} 步，共 {steps} 步 · {status}",
  busy: "忙碌",
  watch: "观看那个训练",
  connLost: "与训练的连接已断开。",
  lossChart: "每一步的训练损失（带标签平滑的交叉熵）",
  lossAxis: "损失",
  stepAxis: "步",
  smoothed: "平滑",
  evalPoint: "留出输入上的完全匹配率",
  atStep: "第 {s} 步时该例子的交叉注意力",
  snapshot: "快照",
  follow: "跟随最新",
  modelSays: "模型自己的贪心答案：“{out}”",
  right: "正确",
  wrongAns: "错误",
  goldProb: "每个参考词元的概率",
  doneLine: "在第 {s} 步结束：留出输入上完全匹配率 {em}",
  useModel: "在其他标签页中使用这个模型",
  noRun: "这台服务器上还没有训练。",
  modelShape: "{enc}+{dec} 层，d_model {d}，{h} 个头，{p} 个参数；批大小 {b}，峰值学习率 {lr}",
};

const DICTS = { en, zh };

export function ts(key: SKey, vars: Record<string, string | number> = {}): string {
  const s = DICTS[app.lang][key] ?? en[key];
  return s.replace(/\{(\w+)\}/g, (_, k: string) => (k in vars ? String(vars[k]) : `{${k}}`));
}

/** A task's name as shown. */
export function taskName(name: string): string {
  const key = `t_${name}` as SKey;
  return key in en ? ts(key) : name;
}

/** A task's description as shown; `fallback` (the API's, in English) for tasks this page does not know. */
export function taskDescription(name: string, fallback: string): string {
  const key = `d_${name}` as SKey;
  return key in en ? ts(key) : fallback;
}
