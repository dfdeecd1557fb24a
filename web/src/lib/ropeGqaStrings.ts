// The strings of the RoPE and GQA views (Llama family), in English and Chinese, kept beside the shared
// dictionary (lib/i18n.ts) as the encoder-decoder page keeps its own. `{name}` marks a value filled in at run time.
import { app } from "./state.svelte";

const en = {
  v_rope: "RoPE",
  v_gqa: "Shared K/V (GQA)",
  e_rope:
    "Llama-family models add no position vector to the input. Instead, just before queries meet keys, each head " +
    "cuts its {dh} numbers into {half} pairs and turns every pair by an angle: position × the pair's frequency. " +
    "Turning the query at position m by m·θ and the key at position n by n·θ gives the same dot product as " +
    "turning only the key, by (n − m)·θ: the score feels how far apart the two tokens are, not where they stand. " +
    "Values are not turned.",
  pairsTitle: "Each pair of dimensions, turned by its angle",
  pairsHelp:
    "Pair i is dimensions (i, i + {half}) (Hugging Face's layout). Grey: before rotation; coloured: after. Each box " +
    "is scaled to its own pair (a rotation keeps the length). Left pairs turn fast, right pairs slowly.",
  side: "Show",
  sideQuery: "the query of the focus token",
  sideKey: "the key of token",
  posLabel: "position {p}",
  pairTip: "pair {i}: angle {a} rad = {p} × {f}",
  anglesTitle: "The angle of each position for each pair (turns, wrapped at 2π)",
  anglesHelp:
    "Rows are positions, columns pairs; the colour goes once round the wheel per full turn. Pair 0 turns {f0} rad " +
    "per token, a full turn every {w0} tokens: it tells near neighbours apart, and repeats itself further away. " +
    "The last pair turns {fl} rad per token, a full turn every {wl} tokens (the context holds {ctx}): it hardly " +
    "differs between neighbours and changes noticeably only over long distances. Without scaling, frequency i is " +
    "base^(−2i/{dh}) with base {base}; the colours come from the trace's own angles.",
  anglesScaled:
    " This model uses Llama 3's rope scaling: the slow pairs are slowed down by the scaling factor, so that " +
    "positions beyond the original training length give them angles like those seen in training; the fast " +
    "pairs are unchanged and the pairs in between are blended.",
  distTitle: "Live: the score depends only on the distance",
  distHelp:
    "The real query of “{q}” (head {h}) and the real key of “{k}” (key/value head {g}), both before rotation, " +
    "placed at positions m and n of your choosing and turned with the model's frequencies. Move both by the same " +
    "shift s: the score does not change. Change m − n: it does.",
  keyToken: "Key token",
  mLabel: "query position m",
  nLabel: "key position n",
  sLabel: "shift both by s",
  scoreAt: "score at (m, n)",
  scoreShifted: "score at (m + s, n + s)",
  difference: "difference",
  distance: "m − n",
  realScore: "The model's raw score for these two tokens (q·k after rotation, before ÷√{dh}): {v}; the demo at their real positions m = {m}, n = {n}: {d}.",
  resetReal: "Back to the real positions",
  needTwo: "The text needs at least two tokens to read the frequencies off the angles.",
  scoreVsDist: "score against m − n for this query and key",
  e_gqa:
    "This model has {H} query heads but only {G} key/value heads: each group of {per} query heads reads the same " +
    "keys and values. When the model writes text, it keeps every earlier token's keys and values (the KV cache) " +
    "so it does not recompute them, and for each new token it reads that whole cache from memory. " +
    "Fewer key/value heads make the cache smaller and that read faster; in the comparisons of the paper that " +
    "introduced grouped-query attention (Ainslie et al., 2023) quality stayed close to that of one K/V head " +
    "per query head.",
  eGqaMha:
    "This model gives every query head its own key/value head ({H} of each): nothing is shared, so the cache is " +
    "as large as multi-head attention makes it. Models with grouped-query attention share one key/value head " +
    "among several query heads.",
  groupsTitle: "Query heads grouped on their key/value head (layer {l})",
  kvHeadN: "K/V head {g}",
  qHeadN: "query head {h}",
  groupPatterns: "The attention patterns of the heads that share K/V head {g}",
  groupPatternsHelp:
    "Same keys, same values, different queries: each head can still look at different tokens.",
  memTitle: "KV cache memory for this model",
  memFormula: "bytes per token = 2 (K and V) × {L} layers × {G} key/value heads × {dh} numbers × {b} bytes ({dtype})",
  memUnknownDtype: "The model's dtype ({dtype}) has no known size; the figures assume 2 bytes per value.",
  memRow: "Attention",
  memThis: "this model: {G} K/V heads",
  memMha: "if every head had its own K/V: {H}",
  memMqa: "one K/V head for all (multi-query)",
  perToken: "per token",
  forText: "your text ({n} tokens)",
  forContext: "full context ({n} tokens)",
  memSaving: "Sharing makes the cache {r}× smaller (n_head / n_kv_heads = {H} / {G}). Every sequence generated at " +
    "the same time keeps its own cache.",
  memNoSaving: "No sharing here: n_head / n_kv_heads = 1.",
};

export type RgKey = keyof typeof en;

const zh: Record<RgKey, string> = {
  v_rope: "旋转位置编码 RoPE",
  v_gqa: "共享 K/V（GQA）",
  e_rope:
    "Llama 系列模型不在输入上加位置向量。它在查询与键相遇之前，把每个头的 {dh} 个数切成 {half} 对，" +
    "把每一对转过一个角度：位置 × 这一对的频率。把位置 m 的查询转 m·θ、位置 n 的键转 n·θ，所得点积与只把键转 (n − m)·θ 相同：" +
    "分数只感受到两个词元相距多远，而不是它们各在哪里。值向量不旋转。",
  pairsTitle: "每一对维度，按各自的角度旋转",
  pairsHelp:
    "第 i 对是维度 (i, i + {half})（Hugging Face 的排列）。灰色：旋转前；彩色：旋转后。每个小框按该对自身的长度缩放" +
    "（旋转不改变长度）。左边的对转得快，右边的对转得慢。",
  side: "显示",
  sideQuery: "焦点词元的查询",
  sideKey: "词元的键：",
  posLabel: "位置 {p}",
  pairTip: "第 {i} 对：角度 {a} 弧度 = {p} × {f}",
  anglesTitle: "每个位置在每一对上的角度（按 2π 折回）",
  anglesHelp:
    "行是位置，列是维度对；每转满一圈，颜色沿色环走一圈。第 0 对每个词元转 {f0} 弧度，每 {w0} 个词元转满一圈：" +
    "它区分相邻的词元，离得更远就会重复。最后一对每个词元只转 {fl} 弧度，每 {wl} 个词元才转满一圈（上下文可容纳 {ctx} 个）：" +
    "相邻词元在这里几乎没有差别，只有相距很远时角度才明显变化。不加缩放时，第 i 个频率是 base^(−2i/{dh})，base 为 {base}；" +
    "颜色取自轨迹中真实的角度。",
  anglesScaled:
    "本模型使用 Llama 3 的 RoPE 缩放：慢的维度对按缩放因子放慢，使超出原训练长度的位置在这些维度上得到与训练时相近的角度；" +
    "快的维度对保持不变，介于两者之间的平滑过渡。",
  distTitle: "动手试：分数只取决于距离",
  distHelp:
    "“{q}”的真实查询（头 {h}）与“{k}”的真实键（键/值头 {g}），都取旋转前的值，放在你选的位置 m 和 n 上，" +
    "用模型自己的频率旋转。把两者平移同样的 s：分数不变。改变 m − n：分数随之改变。",
  keyToken: "键词元",
  mLabel: "查询位置 m",
  nLabel: "键位置 n",
  sLabel: "两者同时平移 s",
  scoreAt: "(m, n) 处的分数",
  scoreShifted: "(m + s, n + s) 处的分数",
  difference: "差",
  distance: "m − n",
  realScore: "模型对这两个词元的原始分数（旋转后的 q·k，未除以 √{dh}）：{v}；演示在它们的真实位置 m = {m}、n = {n} 处算得：{d}。",
  resetReal: "回到真实位置",
  needTwo: "文本至少需要两个词元，才能从角度读出频率。",
  scoreVsDist: "这对查询与键的分数随 m − n 的变化",
  e_gqa:
    "本模型有 {H} 个查询头，却只有 {G} 个键/值头：每组 {per} 个查询头读取同一份键和值。模型生成文本时，" +
    "会保存之前每个词元的键和值（KV 缓存），免得重新计算；每生成一个新词元，都要从内存读一遍整个缓存。" +
    "键/值头越少，缓存越小，读取越快；在提出分组查询注意力的论文（Ainslie 等，2023）的比较中，" +
    "质量与每个查询头各有一个 K/V 头时相近。",
  eGqaMha:
    "本模型给每个查询头各配一个键/值头（各 {H} 个）：没有共享，缓存和多头注意力一样大。" +
    "采用分组查询注意力的模型让几个查询头共用一个键/值头。",
  groupsTitle: "按键/值头分组的查询头（第 {l} 层）",
  kvHeadN: "K/V 头 {g}",
  qHeadN: "查询头 {h}",
  groupPatterns: "共用 K/V 头 {g} 的各个头的注意力模式",
  groupPatternsHelp: "同样的键，同样的值，不同的查询：每个头仍可关注不同的词元。",
  memTitle: "本模型的 KV 缓存占用",
  memFormula: "每个词元的字节数 = 2（K 和 V）× {L} 层 × {G} 个键/值头 × {dh} 个数 × {b} 字节（{dtype}）",
  memUnknownDtype: "模型的数据类型（{dtype}）大小未知；以下按每个数 2 字节计算。",
  memRow: "注意力",
  memThis: "本模型：{G} 个 K/V 头",
  memMha: "若每个头各有 K/V：{H} 个",
  memMqa: "所有头共用一个 K/V（多查询）",
  perToken: "每个词元",
  forText: "你的文本（{n} 个词元）",
  forContext: "完整上下文（{n} 个词元）",
  memSaving: "共享使缓存缩小为 1/{r}（n_head / n_kv_heads = {H} / {G}）。同时生成的每条序列各有自己的缓存。",
  memNoSaving: "这里没有共享：n_head / n_kv_heads = 1。",
};

const DICTS = { en, zh };

/** A string of the RoPE / GQA views in the current language. */
export function tr(key: RgKey, vars: Record<string, string | number> = {}): string {
  const s = DICTS[app.lang][key] ?? en[key];
  return s.replace(/\{(\w+)\}/g, (_, k: string) => (k in vars ? String(vars[k]) : `{${k}}`));
}
