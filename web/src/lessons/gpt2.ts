// The GPT-2 page's guided lesson: one idea per step, in the order of the computation, each with its "why", told
// in the learner's own numbers. Its words are in the catalogues (src/locales/<lang>.json, "lesson.gpt2.*"). Every
// value is read from the same API answers the views show (the trace, the tensors the views fetch, the next-token
// distribution), so the text follows the text on screen, the focus and the settings as they change.
//
// A sentence whose truth depends on the numbers is a claim: the step's code says it only when the data shows it,
// with another wording beside it for when it does not (web/tests/lessons/claims.gpt2.ts checks each one on many
// texts and models). Where a step needs an example the data must supply (a head whose top key clearly wins, a
// query whose best match is positive, a word split for its own sake), its `enter` looks for one in the learner's
// data, moves the app's focus there so the views show what the text quotes, and the text says so.
import { SvelteMap } from "svelte/reactivity";
import { call } from "../lib/client";
import type { TensorSpec, TokenOut, TokensOut } from "../lib/generated/api";
import { MAX_TENSORS_PER_REQUEST } from "../lib/generated/limits";
import { visible } from "../lib/format";
import { claim, either, say, val, type Lesson, type LessonStep, type Text, type Value } from "../lib/lesson";
import { dec, int, pct, term, token, word } from "../lib/lessonFormat";
import { paramCounts } from "../lib/params";
import { app, DEFAULT_SAMPLING } from "../lib/state.svelte";
import { decodeTensor, row, type Tensor } from "../lib/tensor";
import { specsFor, stageSpecs, type LnWhich, type StageId } from "../lib/pipeline";

// -- the reference model ---------------------------------------------------------------------------------------

/** GPT-2 small (Radford et al. 2019), as its released weights have it. Parameters: the embeddings 50,257 × 768 +
 *  1,024 × 768 = 39,383,808, 12 blocks of 12d² + 13d = 7,087,872, the final norm 2d: 124,439,808 (the unembedding
 *  is W_E itself). The lesson quotes these figures beside the running model's, never as its own. */
const GPT2_SMALL = { n_layer: 12, n_head: 12, n_embd: 768, d_mlp: 3072, block_size: 1024, vocab_size: 50257 };
const GPT2_SMALL_PARAMS = 124_439_808;

// -- reading the trace -----------------------------------------------------------------------------------------

const cfg = () => app.trace?.config;
const nTok = () => app.trace?.token_ids.length ?? 0;
const modelName = () => app.trace?.model ?? app.model ?? "";
/** The running model's parameter count: /api/models's, else counted from its config. */
function nParams(): number {
  const c = cfg();
  return app.models.find((m) => m.name === app.trace?.model)?.n_params ?? (c ? paramCounts(c).total : 0);
}

/** A token id as the token bar and the tables print it (no thousands separator: it is a name, not a count). */
const idVal = (id: string, n: number, at?: string): Value => val(id, String(n), n, at);

/** Token `i` of the text as a value (its spaces visible, `raw` its id). */
function tokAt(id: string, i: number, at?: string): Value {
  const t = app.trace?.tokens[i];
  return t ? token(id, t.text, t.id, at) : word(id, "");
}
const focusTok = (id = "focus-token") => tokAt(id, app.pos);

/** The tensors of a view for the current focus, by their names in `stageSpecs` (the same specs as the view's, so the
 *  same cached answers). */
function viewTensors(view: StageId, ln?: LnWhich): Record<string, Tensor | undefined> {
  const f = app.focus();
  return Object.fromEntries(Object.entries(stageSpecs(view, ln ? { ...f, ln } : f)).map(([k, s]) => [k, app.tensor(s)]));
}

/** The first index of the largest (sign 1) or smallest (sign −1) of a[0..upto]: the keys a query sees. */
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

const PER_REQUEST = MAX_TENSORS_PER_REQUEST; // the most tensors one /api/tensors request may ask for
function chunks<T>(a: T[], n: number): T[][] {
  return Array.from({ length: Math.ceil(a.length / n) }, (_, i) => a.slice(i * n, (i + 1) * n));
}

/** Fetch `specs` for the current trace, in requests the server accepts, waiting for those another caller has
 *  already asked for. False when the trace changed or the server did not answer. */
async function fetched(specs: TensorSpec[]): Promise<boolean> {
  const tr = app.trace;
  for (let k = 0; k < 100 && tr && app.trace === tr; k++) {
    const missing = specs.filter((s) => !app.tensor(s));
    if (!missing.length) return true;
    await Promise.all(chunks(missing, PER_REQUEST).map((c) => app.ensure(c)));
    if (specs.every((s) => app.tensor(s))) return true;
    await new Promise((r) => setTimeout(r, 25));
  }
  return false;
}
/** Ask for `specs` without waiting (a text read while the learner moves the focus): the text follows once they
 *  are here. */
function request(specs: TensorSpec[]): void {
  const missing = specs.filter((s) => !app.tensor(s));
  if (missing.length) queueMicrotask(() => chunks(missing, PER_REQUEST).forEach((c) => void app.ensure(c)));
}

function show(view: StageId, ln?: LnWhich) {
  app.view = view;
  if (ln) app.ln = ln;
  mark();
}

// -- what the steps remember from when they opened (tasks compare against it; moves are reported) ----------------

const at = { pos: 0, head: 0, nTok: 0 };
function mark() {
  at.pos = app.pos;
  at.head = app.head;
  at.nTok = nTok();
}

/** The focus a step's `enter` moved to, to say so while the focus is still there. */
let moved: { step: string; layer: number; head: number; pos: number; trace: unknown } | null = null;
function moveTo(step: string, layer: number, head: number) {
  if (layer === app.layer && head === app.head) return;
  moved = { step, layer, head, pos: app.pos, trace: app.trace };
  app.layer = layer;
  app.head = head;
  at.head = head;
}
const movedHere = (step: string) => !!moved && moved.step === step && moved.layer === app.layer
  && moved.head === app.head && moved.pos === app.pos && moved.trace === app.trace;

// -- attention: one head's row for the focus token ------------------------------------------------------------------

const scoreSpec = (l: number, h: number, p: number): TensorSpec => ({ name: `blocks.${l}.attn.scores`, head: h, position: p });
const patternSpec = (l: number, h: number, p: number): TensorSpec => ({ name: `blocks.${l}.attn.pattern`, head: h, position: p });

/** Every head's scores and weights for position `p` (rows: a few numbers each). */
function headSpecs(p: number, layers?: number[]): TensorSpec[] {
  const c = cfg();
  if (!c) return [];
  const out: TensorSpec[] = [];
  for (const l of layers ?? [...Array(c.n_layer).keys()])
    for (let h = 0; h < c.n_head; h++) out.push(scoreSpec(l, h, p), patternSpec(l, h, p));
  return out;
}

/** What one head does for the query at `p`: its best and worst match among the `n` keys it sees, and its weights. */
interface HeadRow {
  n: number;
  best: number;
  bestScore: number;
  low: number;
  lowScore: number;
  top: number;
  w1: number;
  w2: number;
  /** The largest scaled score: negative when every visible score is. */
  maxScaled: number;
}
function headRow(l: number, h: number, p: number): HeadRow | null {
  const s = app.tensor(scoreSpec(l, h, p))?.data, w = app.tensor(patternSpec(l, h, p))?.data;
  const c = cfg();
  if (!s || !w || !c) return null;
  const best = argBest(s, p), low = argBest(s, p, -1), top = argBest(w, p);
  let w2 = 0;
  for (let j = 0; j <= p; j++) if (j !== top) w2 = Math.max(w2, w[j]);
  return { n: p + 1, best, bestScore: s[best], low, lowScore: s[low], top, w1: w[top], w2,
    maxScaled: s[best] / Math.sqrt(c.head_dim) };
}

/** A key clearly wins: at least half the weight, and at least twice the next key's. */
const CLEAR_SHARE = 0.5;
const positive = (r: HeadRow) => r.n >= 2 && r.bestScore > 0;
const clearWin = (r: HeadRow) => r.n >= 2 && r.w1 >= CLEAR_SHARE && r.w1 >= 2 * r.w2;
/** The best match is another token's key, not the query's own (a clearer example of a search). */
const notSelf = (r: HeadRow) => r.best !== r.n - 1;
/** The key the row weights most is not the first token: a search, not weight parked on position 0. */
const offFirst = (r: HeadRow) => r.top !== 0 && r.best !== 0;

// -- attention sinks: heads whose rows put most of their weight on the first token --------------------------------

/** A head whose rows give position 0 at least this share of their weight, on average, is a sink for the text. */
const SINK_SHARE = 0.5;
/** The focus head's whole pattern (T × T): every query's row. */
const headPatternSpec = (l: number, h: number): TensorSpec => ({ name: `blocks.${l}.attn.pattern`, head: h });
/** The mean weight the head's rows after the first give position 0, or null before its pattern is here (or with
 *  one token: the first row has only position 0 to weight). */
function firstShare(l: number, h: number): number | null {
  const pat = app.tensor(headPatternSpec(l, h)), T = nTok();
  if (!pat || T < 2 || pat.shape[0] !== T) return null;
  let s = 0;
  for (let i = 1; i < T; i++) s += pat.data[i * T];
  return s / (T - 1);
}
/** The sentence naming the focus head a sink, when the key the text quotes is position 0 and the head's rows put
 *  most of their weight there; none otherwise. */
function sinkNote(quoted: number): Text {
  const share = firstShare(app.layer, app.head);
  if (quoted !== 0 || share === null || share < SINK_SHARE) return [];
  return [claim("lesson.gpt2.attn.sink", { layer: layerVal(), head: headVal(), first: tokAt("first-token", 0),
    share: dec("sink-share", share), rows: int("sink-rows", nTok() - 1) })];
}

/** Put the focus on the first head (the current one first, then block by block) that `prefs[0]` accepts, else
 *  `prefs[1]`, …; the focus stays where it is when none does. */
async function pickHead(step: string, prefs: ((r: HeadRow) => boolean)[]): Promise<void> {
  const c = cfg();
  if (!c || !(await fetched(headSpecs(app.pos)))) return;
  const order: [number, number][] = [[app.layer, app.head]];
  for (let l = 0; l < c.n_layer; l++) for (let h = 0; h < c.n_head; h++) order.push([l, h]);
  for (const want of prefs) {
    for (const [l, h] of order) {
      const r = headRow(l, h, app.pos);
      if (r && want(r)) return moveTo(step, l, h);
    }
  }
}

/** The focus head's row, or null before its tensors are here. */
const focusRow = () => headRow(app.layer, app.head, app.pos);
const focusSpecs = () => [scoreSpec(app.layer, app.head, app.pos), patternSpec(app.layer, app.head, app.pos),
  headPatternSpec(app.layer, app.head)];

const layerVal = () => int("layer", app.layer);
const headVal = () => int("head", app.head);

// -- the residual stream: how long the vector is and how long each block's edits are ------------------------------

const residSpecs = (l: number, p: number): TensorSpec[] =>
  ["resid_pre", "attn_out", "mlp_out", "resid_post"].map((s) => ({ name: `blocks.${l}.${s}`, position: p }));
function residAt(l: number, p: number): { pre: number; attn: number; mlp: number; post: number } | null {
  const [a, b, c, d] = residSpecs(l, p).map((s) => app.tensor(s)?.data);
  return a && b && c && d ? { pre: norm(a), attn: norm(b), mlp: norm(c), post: norm(d) } : null;
}
/** Both of the block's edits are shorter than the vector they are added to. */
const smallEdits = (r: { pre: number; attn: number; mlp: number }) => r.attn < r.pre && r.mlp < r.pre;

// -- tokenization: words split into pieces, and which strings are single vocabulary entries ----------------------

/** Whether a string is one entry of a model's vocabulary: its id, null when it is not, "unknown" when the server
 *  could not say (an offline snapshot, a failed request). Asked of /api/attribution/tokens, which tokenizes any text:
 *  one token (after the BOS some models prepend) is one entry. */
const entries = new SvelteMap<string, number | null | "unknown">();
const asking = new Set<string>();
const entryKey = (s: string) => `${app.trace?.model}\u0000${s}`;
function lookUp(s: string): void {
  const model = app.trace?.model, key = entryKey(s);
  if (!model || !s || entries.has(key) || asking.has(key)) return;
  asking.add(key);
  (async () => {
    try {
      const out = await call<TokensOut>("attribution/tokens", { model, texts: [s] });
      const ids = out.texts[0].ids;
      const own = out.bos_id !== null && ids[0] === out.bos_id ? ids.slice(1) : ids;
      entries.set(key, own.length === 1 ? own[0] : null);
    } catch {
      entries.set(key, "unknown");
    } finally {
      asking.delete(key);
    }
  })();
}
const entry = (s: string) => entries.get(entryKey(s));
async function lookUpAll(strings: string[]): Promise<void> {
  strings.forEach(lookUp);
  for (let k = 0; k < 400 && strings.some((s) => entry(s) === undefined); k++) await new Promise((r) => setTimeout(r, 25));
}

/** A word of the text in Latin letters and the tokens that spell it (start..end-1). */
interface Word { start: number; end: number; text: string; spaced: boolean }
const LATIN = /^\p{Script=Latin}+$/u;
const FIRST = /^ ?\p{Script=Latin}+$/u;
function latinWords(tokens: TokenOut[]): Word[] {
  const out: Word[] = [];
  for (let i = 0; i < tokens.length; ) {
    const t = tokens[i].text, prev = i ? tokens[i - 1].text : "";
    // a word starts after a space or a non-word character: not in the middle of an identifier
    if (!FIRST.test(t) || (!t.startsWith(" ") && /[\p{L}\p{N}_]$/u.test(prev))) { i++; continue; }
    let j = i + 1;
    while (j < tokens.length && LATIN.test(tokens[j].text)) j++;
    const next = tokens[j]?.text ?? "";
    if (!/^[\p{L}\p{N}_]/u.test(next)) out.push({ start: i, end: j, text: tokens.slice(i, j).map((x) => x.text).join("").trim(), spaced: t.startsWith(" ") });
    i = j;
  }
  return out;
}
/** Tokens of the text that are a space and Latin letters (" capital"), longest first. */
function spacedTokens(tokens: TokenOut[]): number[] {
  return [...tokens.keys()].filter((i) => /^ \p{Script=Latin}{2,}$/u.test(tokens[i].text))
    .sort((a, b) => tokens[b].text.length - tokens[a].text.length || a - b);
}
/** The strings the tokenization step asks about: each unspaced split word with a space before it, and the first
 *  few spaced tokens without their space. */
function bpeQuestions(): string[] {
  const toks = app.trace?.tokens ?? [];
  const unspaced = latinWords(toks).filter((w) => w.end - w.start > 1 && !w.spaced).map((w) => ` ${w.text}`);
  return [...unspaced, ...spacedTokens(toks).slice(0, 4).map((i) => toks[i].text.slice(1))];
}
/** The tokens that spell a word, as the token bar shows them: "␣vis + ual + ization". */
const pieces = (w: Word) => word("pieces", (app.trace?.tokens ?? []).slice(w.start, w.end).map((t) => visible(t.text)).join(" + "));

/** GELU is close to max(x, 0) beyond ±2 (within 0.046 there): inside that it bends. */
const GELU_FAR = 2;
/** A top guess under this many times 1/V is close to an even spread. */
const NEAR_EVEN = 20;

/** The token the "tokens" step asks the learner to click: the one before the last. */
const clickTarget = () => Math.max(0, nTok() - 2);

// -- the steps -------------------------------------------------------------------------------------------------

const steps: LessonStep[] = [
  {
    id: "text",
    target: "input",
    title: "lesson.gpt2.text.title",
    body: () => {
      const out: Text = [say("lesson.gpt2.text.body", { chars: int("n-chars", [...app.text].length) })];
      const c = cfg();
      if (!c) return out;
      // the model that computes every number of the lesson, beside the one the lesson is named after
      const N = nParams();
      const same = c.n_layer === GPT2_SMALL.n_layer && c.n_head === GPT2_SMALL.n_head && c.n_embd === GPT2_SMALL.n_embd
        && c.d_mlp === GPT2_SMALL.d_mlp && c.block_size === GPT2_SMALL.block_size && c.vocab_size === GPT2_SMALL.vocab_size;
      const model = word("model", modelName());
      out.push(say("lesson.gpt2.model.sizes", { model, layers: int("n-layer", c.n_layer), heads: int("n-head", c.n_head),
        dHead: int("d-head", c.head_dim), d: int("d-model", c.n_embd), dMlp: int("d-mlp", c.d_mlp),
        ctx: int("ctx", c.block_size), vocab: int("vocab", c.vocab_size), params: int("n-params", N) }));
      out.push(say("lesson.gpt2.model.gpt2"));
      if (same) out.push(claim("lesson.gpt2.model.same", { model }));
      else if (N <= GPT2_SMALL_PARAMS) out.push(claim("lesson.gpt2.model.smaller", { model, ratio: dec("params-ratio", GPT2_SMALL_PARAMS / N) }));
      else out.push(claim("lesson.gpt2.model.larger", { model, ratio: dec("params-ratio", N / GPT2_SMALL_PARAMS) }));
      out.push(say("lesson.gpt2.model.why"));
      return out;
    },
  },
  {
    id: "overview",
    target: "overview",
    controls: ["play"],
    enter: () => show("overview"),
    title: "lesson.gpt2.overview.title",
    body: () => {
      const c = cfg();
      if (!c || !app.trace?.tokens[app.pos]) return [];
      return [say(nTok() > 1 ? "lesson.gpt2.overview.body" : "lesson.gpt2.overview.bodyOne",
        { nTok: int("n-tokens", nTok()), nLayer: int("n-layer", c.n_layer) })];
    },
    task: () => [say("lesson.gpt2.overview.task", { focus: focusTok("focus-token-2"), button: say("ui.ovPlay") })],
  },
  {
    id: "tokens",
    target: "tokens",
    enter: () => show("tokens"),
    title: "lesson.gpt2.tokens.title",
    body: () => {
      const c = cfg();
      if (!c || !app.trace?.tokens[app.pos]) return [];
      const vocab = int("vocab", c.vocab_size);
      return [
        say(nTok() > 1 ? "lesson.gpt2.tokens.body" : "lesson.gpt2.tokens.bodyOne", { nTok: int("n-tokens", nTok()), vocab, focus: focusTok(),
          id: idVal("focus-id", app.trace.token_ids[app.pos]) }),
        either(c.vocab_size === GPT2_SMALL.vocab_size, "lesson.gpt2.tokens.vocabSame", "lesson.gpt2.tokens.vocabOther", { vocab }),
        say("lesson.gpt2.tokens.why"),
      ];
    },
    task: () => {
      if (!app.trace) return [];
      const i = clickTarget();
      return nTok() > 1 ? [say("lesson.gpt2.tokens.task", { tok: tokAt("click-token", i, `chip-${i}`) })]
        : [say("lesson.gpt2.tokens.taskOne")];
    },
    done: () => app.pos === clickTarget(),
  },
  {
    id: "bpe",
    target: "token-table",
    enter: async () => {
      show("tokens");
      await lookUpAll(bpeQuestions());
    },
    title: "lesson.gpt2.bpe.title",
    body: () => {
      const toks = app.trace?.tokens;
      if (!toks) return [];
      const questions = bpeQuestions();
      questions.forEach(lookUp);
      if (questions.some((s) => entry(s) === undefined)) return []; // still asking the server
      const out: Text = [say("lesson.gpt2.bpe.body")];
      const words = latinWords(toks).filter((w) => w.end - w.start > 1);
      // a word cut into pieces for its own sake: even with a space before it, it is not one entry
      const own = words.filter((w) => w.spaced || entry(` ${w.text}`) === null)
        .sort((a, b) => (b.end - b.start) - (a.end - a.start) || a.start - b.start)[0];
      if (own) out.push(claim("lesson.gpt2.bpe.split", { word: word("split-word", own.text, `token-row-${own.start}`),
        n: int("n-pieces", own.end - own.start), pieces: pieces(own) }));
      else out.push(claim("lesson.gpt2.bpe.noSplit"));
      // the leading space: a word cut only because no space comes before it, else a token with its space
      const bySpace = words.find((w) => !w.spaced && typeof entry(` ${w.text}`) === "number");
      const spaced = spacedTokens(toks);
      let marked = -1;
      if (bySpace) {
        const id = entry(` ${bySpace.text}`) as number;
        out.push(claim("lesson.gpt2.bpe.spaceSplit", { word: word("space-word", bySpace.text, `token-row-${bySpace.start}`),
          pieces: pieces(bySpace), spaced: token("spaced", ` ${bySpace.text}`, id), id: idVal("spaced-id", id) }));
      } else if (spaced.length) {
        const asked = spaced.slice(0, 4);
        const i = asked.find((k) => typeof entry(toks[k].text.slice(1)) === "number") ?? asked[0];
        const bare = toks[i].text.slice(1), e = entry(bare);
        const tok = tokAt("space-token", i, `token-row-${i}`), id = idVal("space-id", toks[i].id);
        if (typeof e === "number") out.push(claim("lesson.gpt2.bpe.spaceTwo", { tok, id, bare: token("bare", bare, e), bareId: idVal("bare-id", e) }));
        else if (e === null) out.push(claim("lesson.gpt2.bpe.spaceOnly", { tok, id, bare: word("bare", bare) }));
        else out.push(claim("lesson.gpt2.bpe.space", { tok }));
        marked = i;
      } else {
        const i = toks.findIndex((t) => t.text.startsWith(" "));
        if (i >= 0) out.push(claim("lesson.gpt2.bpe.space", { tok: tokAt("space-token", i, `token-row-${i}`) }));
        else out.push(claim("lesson.gpt2.bpe.noSpace"));
        marked = i;
      }
      // the vocabulary file's own spelling of that space
      if (marked < 0 && spaced.length) marked = spaced[0];
      if (marked >= 0 && toks[marked].raw.startsWith("Ġ"))
        out.push(claim("lesson.gpt2.bpe.marker", { tok: tokAt("marker-token", marked), raw: word("raw", toks[marked].raw, `vocab-${marked}`) }));
      // characters spelt by several byte tokens
      const g = app.trace?.char_groups[0];
      if (g) out.push(claim("lesson.gpt2.bpe.bytes", { text: word("char-text", g.text, `char-group-${g.start}`),
        n: int("n-bytes", g.end - g.start) }));
      // a string the server could not tokenize here: the sentences above said nothing that needs it
      if (questions.some((q) => entry(q) === "unknown")) out.push(say("lesson.gpt2.bpe.unknown"));
      out.push(say("lesson.gpt2.bpe.why"));
      return out;
    },
  },
  {
    id: "embed-token",
    target: "emb-token",
    enter: () => show("embedding"),
    title: "lesson.gpt2.embed-token.title",
    body: () => {
      const c = cfg(), { token: we } = viewTensors("embedding");
      if (!c || !we || !app.trace?.tokens[app.pos]) return [];
      const id = idVal("focus-id", app.trace.token_ids[app.pos]);
      return [
        say("lesson.gpt2.embed-token.body", { id, focus: focusTok(), vocab: int("vocab", c.vocab_size),
          d: int("d-model", c.n_embd), x0: dec("we-0", we.data[0], "emb-token-0") }),
        say("lesson.gpt2.embed-token.why"),
        say("lesson.gpt2.embed-token.gpt2"),
      ];
    },
  },
  {
    id: "embed-pos",
    target: "emb-pos",
    enter: () => show("embedding"),
    title: "lesson.gpt2.embed-pos.title",
    body: () => {
      const c = cfg(), { token: we, position: wp, sum } = viewTensors("embedding");
      if (!c || !we || !wp || !sum || !app.trace?.tokens[app.pos]) return [];
      const ctx = int("ctx", c.block_size);
      return [
        say("lesson.gpt2.embed-pos.body", { focus: focusTok(), pos: int("pos", app.pos), ctx }),
        either(c.block_size === GPT2_SMALL.block_size, "lesson.gpt2.embed-pos.ctxSame", "lesson.gpt2.embed-pos.ctxOther", { ctx }),
        say("lesson.gpt2.embed-pos.sum", { a: dec("we-0", we.data[0], "emb-token-0"), b: term("wpos-0", wp.data[0], "emb-pos-0"),
          s: dec("sum-0", sum.data[0], "emb-sum-0") }),
        say("lesson.gpt2.embed-pos.why"),
      ];
    },
  },
  {
    id: "layernorm",
    target: "ln-stats",
    enter: () => show("layernorm", "ln1"),
    title: "lesson.gpt2.layernorm.title",
    body: () => {
      const { mean, variance } = viewTensors("layernorm", "ln1");
      if (!mean || !variance || !app.trace?.tokens[app.pos]) return [];
      return [
        say("lesson.gpt2.layernorm.body", { layer: layerVal(), focus: focusTok(),
          mean: dec("ln-mean", mean.data[app.pos], "ln-stats"), var: dec("ln-var", variance.data[app.pos], "ln-stats") }),
        say("lesson.gpt2.layernorm.why"),
      ];
    },
  },
  {
    id: "qkv",
    target: "qkv-mats",
    enter: async () => {
      show("qkv");
      await pickHead("qkv", [(r) => positive(r) && clearWin(r) && notSelf(r) && offFirst(r), (r) => positive(r) && notSelf(r) && offFirst(r),
        (r) => positive(r) && clearWin(r) && notSelf(r), (r) => positive(r) && notSelf(r), positive]);
    },
    needs: () => focusSpecs(),
    title: "lesson.gpt2.qkv.title",
    body: () => {
      const c = cfg(), r = focusRow();
      if (!c || !r) return [];
      const out: Text = [say("lesson.gpt2.qkv.body", { dHead: int("d-head", c.head_dim) })];
      if (movedHere("qkv")) out.push(claim("lesson.gpt2.attn.movedPositive", { layer: layerVal(), head: headVal(), focus: focusTok() }));
      const vars = { layer: layerVal(), head: headVal(), focus: focusTok(),
        key: tokAt("best-key", r.best, "k-best"), score: dec("best-score", r.bestScore) };
      if (r.n < 2) out.push(claim("lesson.gpt2.qkv.only", { focus: focusTok(), score: dec("best-score", r.bestScore) }));
      else if (r.bestScore <= 0) out.push(claim("lesson.gpt2.qkv.bestNeg", vars));
      else out.push(either(r.best === app.pos, "lesson.gpt2.qkv.bestSelf", "lesson.gpt2.qkv.best", vars));
      if (r.n >= 2 && r.bestScore > 0) out.push(...sinkNote(r.best));
      return out;
    },
  },
  {
    id: "dot",
    target: "stage-scores",
    enter: async () => {
      show("attention");
      await pickHead("dot", [(r) => positive(r) && notSelf(r) && offFirst(r), (r) => positive(r) && notSelf(r), positive]);
    },
    needs: () => focusSpecs(),
    title: "lesson.gpt2.dot.title",
    body: () => {
      const r = focusRow();
      if (!r) return [];
      const out: Text = [say("lesson.gpt2.dot.body")];
      if (movedHere("dot")) out.push(claim("lesson.gpt2.attn.movedPositive", { layer: layerVal(), head: headVal(), focus: focusTok() }));
      if (r.n < 2) out.push(claim("lesson.gpt2.dot.only", { focus: focusTok(), score: dec("high-score", r.bestScore, "score-best") }));
      else {
        const vars = { layer: layerVal(), head: headVal(), focus: focusTok(),
          high: tokAt("high-key", r.best), highScore: dec("high-score", r.bestScore, "score-best"),
          low: tokAt("low-key", r.low), lowScore: dec("low-score", r.lowScore, "score-low") };
        out.push(either(r.low === app.pos, "lesson.gpt2.dot.lowSelf", "lesson.gpt2.dot.range", vars));
        out.push(...sinkNote(r.best));
      }
      return out;
    },
  },
  {
    id: "scale",
    target: "stage-scaled",
    enter: async () => {
      show("attention");
      await pickHead("scale", [(r) => positive(r) && notSelf(r) && offFirst(r), (r) => positive(r) && notSelf(r), positive]);
    },
    needs: () => focusSpecs(),
    title: "lesson.gpt2.scale.title",
    body: () => {
      const c = cfg(), r = focusRow(), { scores, scaled } = viewTensors("attention");
      if (!c || !r || !scores || !scaled) return [];
      const dk = int("d-k", c.head_dim);
      const out: Text = [];
      if (movedHere("scale")) out.push(claim("lesson.gpt2.attn.movedPositive", { layer: layerVal(), head: headVal(), focus: focusTok() }));
      out.push(say("lesson.gpt2.scale.body", { dk, sqrt: dec("sqrt-dk", Math.sqrt(c.head_dim)),
        score: dec("best-score", scores.data[r.best], "score-best"), scaled: dec("scaled-score", scaled.data[r.best], "scaled-best") }));
      out.push(say("lesson.gpt2.scale.why", { dk }));
      if (r.n >= 2) {
        const sd = (a: ArrayLike<number>) => {
          let m = 0, v = 0;
          for (let j = 0; j < r.n; j++) m += a[j] / r.n;
          for (let j = 0; j < r.n; j++) v += (a[j] - m) ** 2 / r.n;
          return Math.sqrt(v);
        };
        out.push(say("lesson.gpt2.scale.spread", { focus: focusTok(), sd: dec("sd-scores", sd(scores.data)), sd2: dec("sd-scaled", sd(scaled.data)) }));
      }
      return out;
    },
  },
  {
    id: "mask",
    target: "attn-pattern",
    controls: ["stages"],
    enter: () => show("attention"),
    title: "lesson.gpt2.mask.title",
    body: () => {
      const T = nTok();
      if (!T || !app.trace?.tokens[app.pos]) return [];
      const out: Text = [say("lesson.gpt2.mask.body")];
      const vars = { focus: focusTok(), pos: int("pos", app.pos), seen: int("n-visible", app.pos + 1), masked: int("n-masked", T - 1 - app.pos) };
      if (T === 1) out.push(claim("lesson.gpt2.mask.single", vars));
      else if (app.pos === 0) out.push(claim("lesson.gpt2.mask.first", vars));
      else out.push(claim(app.pos === T - 1 ? "lesson.gpt2.mask.last" : "lesson.gpt2.mask.count", vars));
      return out;
    },
    task: () => [say(nTok() > 1 ? "lesson.gpt2.mask.task" : "lesson.gpt2.mask.taskOne")],
    done: () => app.pos !== at.pos,
  },
  {
    id: "softmax",
    target: "stage-softmax",
    enter: async () => {
      show("attention");
      await pickHead("softmax", [(r) => clearWin(r) && r.top !== app.pos && offFirst(r), (r) => clearWin(r) && offFirst(r),
        (r) => clearWin(r) && r.top !== app.pos, clearWin]);
    },
    needs: () => focusSpecs(),
    title: "lesson.gpt2.softmax.title",
    body: () => {
      const c = cfg(), r = focusRow(), { pattern } = viewTensors("attention");
      if (!c || !r || !pattern) return [];
      const out: Text = [say("lesson.gpt2.softmax.body")];
      if (movedHere("softmax")) out.push(claim("lesson.gpt2.attn.movedClear", { layer: layerVal(), head: headVal(), focus: focusTok() }));
      const vars = { layer: layerVal(), head: headVal(), focus: focusTok(), key: tokAt("top-key", r.top, "weight-best"),
        weight: dec("top-weight", r.w1, "weight-best"), n: int("n-visible", r.n), even: dec("even-weight", 1 / r.n) };
      if (r.n < 2) out.push(claim("lesson.gpt2.softmax.only", vars));
      else {
        out.push(either(clearWin(r), "lesson.gpt2.softmax.clear", "lesson.gpt2.softmax.lead", vars));
        if (r.maxScaled < 0) out.push(claim("lesson.gpt2.softmax.negative", { focus: focusTok() }));
        if (!clearWin(r)) {
          // does any head give one key a clear win here?
          let any = false, all = true;
          for (let l = 0; l < c.n_layer; l++) for (let h = 0; h < c.n_head; h++) {
            const x = headRow(l, h, app.pos);
            if (!x) all = false;
            else if (clearWin(x)) any = true;
          }
          if (all && !any) out.push(claim("lesson.gpt2.softmax.noHead", { focus: focusTok() }));
        }
        out.push(...sinkNote(r.top));
        if (r.top === 0 && clearWin(r)) {
          // the fallback: no head gives the row a clear winner beyond the first token
          let other = false, all = true;
          for (let l = 0; l < c.n_layer; l++) for (let h = 0; h < c.n_head; h++) {
            const x = headRow(l, h, app.pos);
            if (!x) all = false;
            else if (clearWin(x) && x.top !== 0) other = true;
          }
          if (all && !other) out.push(claim("lesson.gpt2.softmax.noSearch", { focus: focusTok(), first: tokAt("first-token", 0) }));
        }
      }
      const w = row(pattern, app.pos);
      let sum = 0;
      for (let j = 0; j < w.length; j++) sum += w[j];
      out.push(say("lesson.gpt2.softmax.sum", { sum: dec("row-sum", sum) }));
      return out;
    },
  },
  {
    id: "heads",
    target: "head-picker",
    controls: ["head-picker"],
    enter: async () => {
      show("attention");
      await fetched(headSpecs(app.pos, [app.layer]));
    },
    needs: () => focusSpecs(),
    title: "lesson.gpt2.heads.title",
    body: () => {
      const c = cfg();
      if (!c || !app.trace?.tokens[app.pos]) return [];
      const rows = Array.from({ length: c.n_head }, (_, h) => headRow(app.layer, h, app.pos));
      if (rows.some((r) => !r)) {
        request(headSpecs(app.pos, [app.layer]));
        return [];
      }
      const fav = rows.map((r) => r!.top);
      const out: Text = [say("lesson.gpt2.heads.body", { nHead: int("n-head", c.n_head) })];
      const a = app.head, b = fav.findIndex((f, h) => h !== a && f !== fav[a]);
      if (app.pos === 0) out.push(claim("lesson.gpt2.heads.only", { focus: focusTok() }));
      else if (b < 0) out.push(claim("lesson.gpt2.heads.same", { layer: layerVal(), focus: focusTok(), key: tokAt("head-key", fav[a]),
        kpos: int("head-key-pos", fav[a]) }));
      else out.push(claim("lesson.gpt2.heads.differ", { layer: layerVal(), focus: focusTok(),
        head: headVal(), key: tokAt("head-key", fav[a]), kpos: int("head-key-pos", fav[a]), weight: dec("head-weight", rows[a]!.w1),
        head2: int("head2", b), key2: tokAt("head2-key", fav[b]), kpos2: int("head2-key-pos", fav[b]), weight2: dec("head2-weight", rows[b]!.w1) }));
      if (app.pos > 0) out.push(...sinkNote(fav[a]));
      return out;
    },
    task: () => [say("lesson.gpt2.heads.task")],
    done: () => app.head !== at.head,
  },
  {
    id: "concat",
    target: "heads-concat",
    enter: () => show("heads"),
    title: "lesson.gpt2.concat.title",
    body: () => {
      const c = cfg();
      if (!c) return [];
      const width = c.n_head * c.head_dim;
      // the widths the text quotes are those of the two strips: the concatenation (its head outlined) and attn_out
      const vars = { nHead: int("n-head", c.n_head), dHead: int("d-head", c.head_dim), width: int("concat-width", width, "heads-concat"),
        d: int("d-model", c.n_embd, "heads-out"), head: headVal() };
      return [
        say("lesson.gpt2.concat.body", vars),
        either(width === c.n_embd, "lesson.gpt2.concat.fits", "lesson.gpt2.concat.other", vars),
        say("lesson.gpt2.concat.wo", vars),
      ];
    },
  },
  {
    id: "residual",
    target: "resid-attn",
    enter: async () => {
      show("residual");
      const c = cfg();
      if (!c) return;
      const layers = [...Array(c.n_layer).keys()];
      if (!(await fetched(layers.flatMap((l) => residSpecs(l, app.pos))))) return;
      const here = residAt(app.layer, app.pos);
      if (here && smallEdits(here)) return;
      // the block whose edits are shortest beside the vector they are added to
      const ratio = (l: number) => { const r = residAt(l, app.pos)!; return Math.max(r.attn, r.mlp) / r.pre; };
      const best = layers.reduce((a, l) => (ratio(l) < ratio(a) ? l : a), 0);
      if (smallEdits(residAt(best, app.pos)!)) moveTo("residual", best, app.head);
    },
    needs: () => [...residSpecs(0, app.pos), ...(app.layer ? residSpecs(app.layer, app.pos) : [])],
    title: "lesson.gpt2.residual.title",
    body: () => {
      const r = residAt(app.layer, app.pos), r0 = residAt(0, app.pos);
      if (!r || !r0 || !app.trace?.tokens[app.pos]) return [];
      const out: Text = [say("lesson.gpt2.residual.body")];
      if (movedHere("residual")) out.push(claim("lesson.gpt2.residual.moved", { layer: layerVal() }));
      out.push(say("lesson.gpt2.residual.lengths", { layer: layerVal(), focus: focusTok(), pre: dec("norm-pre", r.pre, "resid-pre"),
        attn: dec("norm-attn", r.attn, "resid-attn"), mlp: dec("norm-mlp", r.mlp, "resid-mlp"), post: dec("norm-post", r.post, "resid-post") }));
      const sum = r.pre + r.attn + r.mlp;
      if (r.post < sum) out.push(claim("lesson.gpt2.residual.notAdd", { post: dec("norm-post", r.post), sum: dec("norm-sum", sum) }));
      const big = r.attn >= r.mlp ? { part: say("lesson.gpt2.residual.partAttn"), len: r.attn } : { part: say("lesson.gpt2.residual.partMlp"), len: r.mlp };
      out.push(smallEdits(r) ? claim("lesson.gpt2.residual.small")
        : claim("lesson.gpt2.residual.large", { part: big.part, ratio: dec("edit-ratio", big.len / r.pre) }));
      if (app.layer !== 0 && r0.mlp > 3 * r0.pre)
        out.push(claim("lesson.gpt2.residual.block0", { ratio: dec("block0-ratio", r0.mlp / r0.pre) }));
      out.push(say("lesson.gpt2.residual.why"));
      return out;
    },
  },
  {
    id: "dropout",
    target: "dropout",
    enter: () => show("residual"),
    title: "lesson.gpt2.dropout.title",
    body: () => [say("lesson.gpt2.dropout.body"), say("lesson.gpt2.dropout.off")],
  },
  {
    id: "mlp",
    target: "mlp-pre",
    enter: () => show("mlp"),
    title: "lesson.gpt2.mlp.title",
    body: () => {
      const c = cfg();
      if (!c) return [];
      return [
        say("lesson.gpt2.mlp.body", { d: int("d-model", c.n_embd), m: int("d-mlp", c.d_mlp), ratio: dec("mlp-ratio", c.d_mlp / c.n_embd) }),
        say("lesson.gpt2.mlp.why"),
      ];
    },
  },
  {
    id: "gelu",
    target: "gelu",
    enter: () => show("mlp"),
    title: "lesson.gpt2.gelu.title",
    body: () => {
      const c = cfg(), { pre, post } = viewTensors("mlp");
      if (!c || !pre || !post) return [];
      const out: Text = [say("lesson.gpt2.gelu.body")];
      const act = c.activation;
      if (act === "gelu_new" || act === "gelu_pytorch_tanh" || act === "gelu_fast") out.push(claim("lesson.gpt2.gelu.tanh"));
      else if (act === "gelu") out.push(claim("lesson.gpt2.gelu.exact"));
      else out.push(claim("lesson.gpt2.gelu.other", { act: word("activation", act) }));
      const lo = argBest(pre.data, pre.data.length - 1, -1), hi = argBest(pre.data, pre.data.length - 1);
      const neg = { layer: layerVal(), unit: int("unit", lo), x: dec("gelu-in", pre.data[lo], "gelu-neg"), y: dec("gelu-out", post.data[lo], "gelu-neg") };
      const pos = { unit: int("unit-pos", hi), x: dec("gelu-in-pos", pre.data[hi], "gelu-pos"), y: dec("gelu-out-pos", post.data[hi], "gelu-pos") };
      if (pre.data[lo] < 0) {
        // far below 0 the output is tiny, and in float32 it may be exactly 0
        const far = pre.data[lo] <= -GELU_FAR;
        out.push(claim(!far ? "lesson.gpt2.gelu.negBend" : post.data[lo] === 0 ? "lesson.gpt2.gelu.negZero" : "lesson.gpt2.gelu.negFlat", neg));
      }
      if (pre.data[hi] > 0) out.push(either(pre.data[hi] >= GELU_FAR, "lesson.gpt2.gelu.posPass", "lesson.gpt2.gelu.posBend", pos));
      out.push(say("lesson.gpt2.gelu.why"));
      return out;
    },
  },
  {
    id: "params",
    target: "",
    enter: () => show("mlp"),
    title: "lesson.gpt2.params.title",
    body: () => {
      const c = cfg();
      if (!c) return [];
      const p = paramCounts(c), share = p.mlp / p.block, mlpShare = p.mlpAll / p.total;
      const out: Text = [
        claim("lesson.gpt2.params.block", { d: int("d-model", c.n_embd), mlp: int("mlp-params", p.mlp), block: int("block-params", p.block),
          share: pct("mlp-block-share", share) }),
        say("lesson.gpt2.params.model", { total: int("total-params", p.total), mlpShare: pct("mlp-model-share", mlpShare),
          embShare: pct("embed-share", p.embed / p.total) }),
        either(mlpShare < 0.5, "lesson.gpt2.params.notMost", "lesson.gpt2.params.most"),
        say("lesson.gpt2.params.gpt2"),
      ];
      return out;
    },
  },
  {
    id: "blocks",
    target: "resid-norms",
    enter: () => show("blocks"),
    title: "lesson.gpt2.blocks.title",
    body: () => {
      const tr = app.trace;
      if (!tr?.tokens[app.pos]) return [];
      const norms = decodeTensor(tr.resid_norms), T = norms.shape[1], rows = norms.shape[0];
      const first = norms.data[app.pos], last = norms.data[(rows - 1) * T + app.pos];
      return [
        say("lesson.gpt2.blocks.body", { nLayer: int("n-layer", tr.config.n_layer) }),
        either(last > first, "lesson.gpt2.blocks.grows", "lesson.gpt2.blocks.shrinks", { focus: focusTok(),
          first: dec("norm-first", first, "norm-first"), last: dec("norm-last", last, "norm-last") }),
      ];
    },
  },
  {
    id: "final-ln",
    target: "ln-stats",
    enter: () => {
      app.pos = Math.max(0, nTok() - 1);
      show("layernorm", "ln_final");
    },
    title: "lesson.gpt2.final-ln.title",
    body: () => {
      const { mean, variance } = viewTensors("layernorm", "ln_final");
      if (!mean || !variance || !app.trace?.tokens[app.pos]) return [];
      const vars = { focus: focusTok(), mean: dec("ln-mean", mean.data[app.pos], "ln-stats"), var: dec("ln-var", variance.data[app.pos], "ln-stats") };
      return [
        say("lesson.gpt2.final-ln.body"),
        either(app.pos === nTok() - 1, "lesson.gpt2.final-ln.last", "lesson.gpt2.final-ln.notLast", vars),
        say("lesson.gpt2.final-ln.why"),
      ];
    },
  },
  {
    id: "unembed",
    target: "logits",
    enter: () => show("output"),
    title: "lesson.gpt2.unembed.title",
    body: () => {
      const c = cfg(), top = app.next?.candidates[0];
      if (!c || !top) return [];
      const vars = { vocab: int("vocab", c.vocab_size), saved: int("saved", c.vocab_size * c.n_embd) };
      return [
        either(c.tie_word_embeddings !== false, "lesson.gpt2.unembed.tied", "lesson.gpt2.unembed.untied", vars),
        say("lesson.gpt2.unembed.top", { top: token("top-token", top.text, top.id, "cand-0"), logit: dec("top-logit", top.logit, "cand-0") }),
      ];
    },
  },
  {
    id: "probs",
    target: "candidates",
    enter: () => show("output"),
    title: "lesson.gpt2.probs.title",
    body: () => {
      const nx = app.next, c = cfg();
      if (!nx || !c || nx.candidates.length < 2) return [];
      const [c1, c2] = nx.candidates;
      const t1 = token("top-token", c1.text, c1.id, "cand-0"), p1 = pct("top-prob-nocut", c1.prob_no_cut);
      const out: Text = [say("lesson.gpt2.probs.body")];
      if (nx.greedy) out.push(claim("lesson.gpt2.probs.greedy", { top: t1 }));
      else {
        const gap = c1.logit - c2.logit;
        out.push(claim("lesson.gpt2.probs.pair", { top: t1, p1, second: token("second-token", c2.text, c2.id, "cand-1"),
          p2: pct("second-prob-nocut", c2.prob_no_cut), gap: dec("logit-gap", gap), T: dec("temperature", nx.temperature),
          ratio: dec("prob-ratio", c1.prob_no_cut / c2.prob_no_cut) }));
        const even = 1 / c.vocab_size;
        const vars = { top: t1, p1, vocab: int("vocab", c.vocab_size), even: pct("even-prob", even), times: dec("times-even", c1.prob_no_cut / even) };
        out.push(either(c1.prob_no_cut >= NEAR_EVEN * even, "lesson.gpt2.probs.aboveEven", "lesson.gpt2.probs.nearEven", vars));
      }
      const cut = nx.candidates.find((x) => !x.kept);
      out.push(cut ? claim("lesson.gpt2.probs.grey", { cut: token("first-cut", cut.text, cut.id, "cand-cut") }) : claim("lesson.gpt2.probs.noGrey"));
      return out;
    },
  },
  {
    id: "temperature",
    target: "sampling",
    controls: ["temperature"],
    enter: () => show("output"),
    title: "lesson.gpt2.temperature.title",
    body: () => {
      const nx = app.next, c = cfg(), top = nx?.candidates[0];
      if (!nx || !c || !top) return [];
      const vars = { top: token("top-token", top.text, top.id, "cand-0"), p: pct("top-prob", top.prob, "cand-0"),
        pNoCut: pct("top-prob-nocut", top.prob_no_cut), kept: int("n-kept", nx.n_kept) };
      return [
        say("lesson.gpt2.temperature.body", { T: dec("temperature", nx.temperature) }),
        nx.greedy ? claim("lesson.gpt2.temperature.greedy", vars)
          : either(nx.n_kept < c.vocab_size, "lesson.gpt2.temperature.cut", "lesson.gpt2.temperature.noCut", vars),
      ];
    },
    task: () => [say("lesson.gpt2.temperature.task")],
    done: () => (app.sampling.temperature ?? 1) >= 1.9,
  },
  {
    id: "top-k",
    target: "sampling",
    controls: ["top-k"],
    enter: () => show("output"),
    title: "lesson.gpt2.top-k.title",
    body: () => {
      const nx = app.next, c = cfg();
      if (!nx || !c) return [];
      const k = nx.top_k, kept = int("n-kept", nx.n_kept), d = int("default-k", DEFAULT_SAMPLING.top_k ?? 0);
      const out: Text = [];
      if (k != null && !nx.greedy) {
        out.push(claim("lesson.gpt2.top-k.on", { k: int("top-k", k), kept }));
        // the probability the cut removes, when every token top-k keeps is among the listed candidates
        const listed = nx.candidates.slice(0, k);
        const next = nx.candidates[k];
        if (k < nx.candidates.length && next) {
          const tail = 1 - listed.reduce((s, x) => s + x.prob_no_cut, 0);
          out.push(either(tail > 0.5, "lesson.gpt2.top-k.tailMost", "lesson.gpt2.top-k.tailLess", { tail: pct("tail-mass", tail),
            k: int("top-k", k), next: token("next-token", next.text, next.id), pNext: pct("next-prob", next.prob_no_cut) }));
        }
      } else if (nx.greedy) out.push(claim("lesson.gpt2.top-k.greedy"));
      else out.push(claim("lesson.gpt2.top-k.off", { kept }));
      out.push(say("lesson.gpt2.top-k.default", { k: d }));
      return out;
    },
    task: () => [say("lesson.gpt2.top-k.task")],
    done: () => app.sampling.top_k === 3,
  },
  {
    id: "top-p",
    target: "sampling",
    controls: ["top-p"],
    enter: () => show("output"),
    title: "lesson.gpt2.top-p.title",
    body: () => {
      const nx = app.next;
      if (!nx) return [];
      const kept = int("n-kept", nx.n_kept);
      return [
        say("lesson.gpt2.top-p.body"),
        nx.top_p != null && !nx.greedy ? claim("lesson.gpt2.top-p.on", { p: dec("top-p", nx.top_p), kept })
          : claim("lesson.gpt2.top-p.off", { kept }),
      ];
    },
    task: () => [say("lesson.gpt2.top-p.task")],
    done: () => app.sampling.top_p != null,
  },
  {
    id: "sample",
    target: "generate",
    enter: () => show("output"),
    title: "lesson.gpt2.sample.title",
    body: () => {
      const nx = app.next, top = nx?.candidates[0];
      if (!nx || !top) return [];
      const vars = { tok: token("sampled-token", nx.sampled.text, nx.sampled.id, "generate"), p: pct("sampled-prob", nx.sampled.prob),
        seed: int("seed", nx.seed), top: token("top-token", top.text, top.id), pTop: pct("top-prob", top.prob) };
      const out: Text = [say("lesson.gpt2.sample.body", vars)];
      if (nx.greedy) out.push(claim("lesson.gpt2.sample.greedy", vars));
      else if (nx.n_kept === 1) out.push(claim("lesson.gpt2.sample.one", vars));
      else out.push(either(nx.sampled.id === top.id, "lesson.gpt2.sample.top", "lesson.gpt2.sample.notTop", vars));
      out.push(say("lesson.gpt2.sample.why"));
      return out;
    },
  },
  {
    id: "kv-cache",
    target: "generate",
    controls: ["append"],
    enter: () => show("output"),
    title: "lesson.gpt2.kv-cache.title",
    body: () => {
      const tr = app.trace;
      if (!tr) return [];
      const [a, b] = tr.computed_positions;
      const one = b - a === 1 && tr.token_ids.length > 1;
      return [
        say(tr.token_ids.length > 1 ? "lesson.gpt2.kv-cache.body" : "lesson.gpt2.kv-cache.bodyOne", { T: int("n-tokens", tr.token_ids.length) }),
        one ? claim("lesson.gpt2.kv-cache.just", { pos: int("computed-pos", a) }) : claim("lesson.gpt2.kv-cache.try"),
        say("lesson.gpt2.kv-cache.ctx", { ctx: int("ctx", tr.config.block_size) }),
      ];
    },
    task: () => [say("lesson.gpt2.kv-cache.task", { button: say("ui.appendSampled") })],
    done: () => nTok() > at.nTok,
  },
];

export const gpt2Lesson: Lesson = {
  id: "gpt2",
  title: "lesson.gpt2.title",
  steps,
};
