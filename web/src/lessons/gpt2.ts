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
import type { TokenOut } from "../lib/generated/api";
import { visible } from "../lib/format";
import { claim, either, say, type Lesson, type LessonStep, type Text } from "../lib/lesson";
import { dec, int, term, token, word } from "../lib/lessonFormat";
import { paramCounts } from "../lib/params";
import { app } from "../lib/state.svelte";
import { attentionSteps } from "./gpt2Attention";
import { blockSteps } from "./gpt2Block";
import { outputSteps } from "./gpt2Output";
import { cfg, entry, focusTok, idVal, info, lookUp, lookUpAll, nTok, show, tokAt, stageTensors } from "./reader";

// -- the reference model ---------------------------------------------------------------------------------------

/** GPT-2 small (Radford et al. 2019), as its released weights have it. Parameters: the embeddings 50,257 × 768 +
 *  1,024 × 768 = 39,383,808, 12 blocks of 12d² + 13d = 7,087,872, the final norm 2d: 124,439,808 (the unembedding
 *  is W_E itself). The lesson quotes these figures beside the running model's, never as its own. */
const GPT2_SMALL = { n_layer: 12, n_head: 12, n_embd: 768, d_mlp: 3072, block_size: 1024, vocab_size: 50257 };
const GPT2_SMALL_PARAMS = 124_439_808;

const modelName = () => app.trace?.model ?? app.model ?? "";
/** The running model's parameter count: /api/models's, else counted from its config. */
function nParams(): number {
  const c = cfg();
  return info()?.n_params ?? (c ? paramCounts(c).total : 0);
}

// -- tokenization: words split into pieces (reader.ts asks which strings are single vocabulary entries) ------------

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

/** The token the "tokens" step asks the learner to click: the one before the last. */
const clickTarget = () => Math.max(0, nTok() - 2);

// -- the steps: the text, its tokens and their embeddings; then gpt2Attention.ts, gpt2Block.ts, gpt2Output.ts ------

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
      questions.forEach((q) => void lookUp(q));
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
      const c = cfg(), { token: we } = stageTensors("embedding");
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
      const c = cfg(), { token: we, position: wp, sum } = stageTensors("embedding");
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
  ...attentionSteps,
  ...blockSteps,
  ...outputSteps,
];

export const gpt2Lesson: Lesson = {
  id: "gpt2",
  title: "lesson.gpt2.title",
  steps,
};
