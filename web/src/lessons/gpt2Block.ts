// The GPT-2 lesson's steps after attention (lessons/gpt2.ts assembles the lesson): the residual stream, dropout,
// the MLP and its GELU, where the parameters are, the stack of blocks and the final layer norm.
import type { TensorSpec } from "../lib/generated/api";
import { claim, either, say, type LessonStep, type Text } from "../lib/lesson";
import { dec, int, pct, word } from "../lib/lessonFormat";
import { paramCounts } from "../lib/params";
import { app } from "../lib/state.svelte";
import { decodeTensor } from "../lib/tensor";
import { argBest, cfg, fetched, focusTok, layerVal, moveTo, movedHere, norm, nTok, show, stageTensors } from "./reader";

// -- the residual stream: how long the vector is and how long each block's edits are ------------------------------

const residSpecs = (l: number, p: number): TensorSpec[] =>
  ["resid_pre", "attn_out", "mlp_out", "resid_post"].map((s) => ({ name: `blocks.${l}.${s}`, position: p }));
function residAt(l: number, p: number): { pre: number; attn: number; mlp: number; post: number } | null {
  const [a, b, c, d] = residSpecs(l, p).map((s) => app.tensor(s)?.data);
  return a && b && c && d ? { pre: norm(a), attn: norm(b), mlp: norm(c), post: norm(d) } : null;
}
/** Both of the block's edits are shorter than the vector they are added to. */
const smallEdits = (r: { pre: number; attn: number; mlp: number }) => r.attn < r.pre && r.mlp < r.pre;

/** GELU is close to max(x, 0) beyond ±2 (within 0.046 there): inside that it bends. */
const GELU_FAR = 2;

export const blockSteps: LessonStep[] = [
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
      const c = cfg(), { pre, post } = stageTensors("mlp");
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
      const { mean, variance } = stageTensors("layernorm", "ln_final");
      if (!mean || !variance || !app.trace?.tokens[app.pos]) return [];
      const vars = { focus: focusTok(), mean: dec("ln-mean", mean.data[app.pos], "ln-stats"), var: dec("ln-var", variance.data[app.pos], "ln-stats") };
      return [
        say("lesson.gpt2.final-ln.body"),
        either(app.pos === nTok() - 1, "lesson.gpt2.final-ln.last", "lesson.gpt2.final-ln.notLast", vars),
        say("lesson.gpt2.final-ln.why"),
      ];
    },
  },
];
