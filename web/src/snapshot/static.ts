// The offline snapshot: one HTML file holding the app and the data of one trace (written by
// `transformer-explainer snapshot`). When the page carries that data, every API call is answered from
// it here instead of going to a server: the same shapes, cut from the stored full tensors by the server's
// own rules (slicing.ts), derived stages computed by the trace's own rules (derive.ts), and the analyses
// computed when the file was written. Anything else gets a message saying so.
import type {
  AttributeOut, ComponentOut, EncodedTensor, FeatureHooksOut, FeaturesOut, ModelList, SamplingIn, TensorSpec, TokenIdText,
  TraceOut,
} from "../lib/generated/api";
import { visible } from "../lib/format";
import { describeIn } from "../lib/generated/names";
import { ABLATION_TOP } from "../lib/generated/limits";
import { decodeTensor, encodedTensor, type Tensor } from "../lib/tensor";
import { derivationOf, derive, type ModelShape } from "./derive";
import { refused } from "./refusals.svelte";
import { SnapshotError, takeHead, takePosition, takeRow } from "./slicing";

export { SnapshotError } from "./slicing";

interface Stored { dims: string[]; shape: number[]; dtype: "float16" | "float32"; data: string }

/** One direct logit attribution, as `model.attribute` answered it when the file was written. */
interface StoredAttribution {
  position: number;
  target: TokenIdText;
  metric: number;
  rest: number;
  scale: number;
  values: (number | null)[]; // in the order of `parts`
  experts?: number[]; // a mixture of experts: the expert of each "expert" part, in the order of `parts`
}

/** The attributions the file carries (src/transformer_explainer/notebook/snapshot_attribution.py). */
interface AttributionRecord {
  parts: [ComponentOut["kind"], number | null, number | null][]; // (kind, layer, head) of every component
  candidates: number; // the last position's likeliest tokens carried
  entries: StoredAttribution[]; // a position's default target first
  left_out: number[]; // positions without an attribution (the size budget)
  refused?: string | null; // the model's refusal of any attribution (its sentence, English), where it refused one
}

export interface SnapshotData {
  format: "transformer-explainer-snapshot";
  version: number;
  models: ModelList;
  trace: TraceOut;
  sampling: SamplingIn;
  top_n: number;
  tensors: Record<string, Stored>; // full activations by name (no head / position slicing)
  aliases: Record<string, string>; // names stored under another name (a block's output: the next one's input)
  weights: Record<string, Stored>;
  omitted: string[]; // names left out to keep the file small
  keep_mb?: number | null; // the size budget (MB) that would have kept them (absent in files of version 3 and before)
  languages: string[]; // the languages the page offers ("en", "zh")
  cjk_font: string | null; // the CJK font subset as a data: URL, where the page can show Chinese
  analysis: {
    lens: { top: number; out: Record<string, unknown> & { positions: number[]; layers: { positions: unknown[] }[] } } | null;
    heads: (Record<string, unknown> & { reference: unknown }) | null;
    importance: Record<string, unknown> | null;
    ablations: Record<string, Record<string, unknown>>; // "layer.head" -> zero ablation of that head
    ablation_top: number;
    neighbours: Record<string, Record<string, unknown> & { neighbours: unknown[] }>; // by token id
    analogy: { request: { positive: unknown[]; negative: unknown[] }; out: (Record<string, unknown> & { neighbours: unknown[] }) | null;
      error: string | null } | null;
    projection: { request: unknown[]; out: Record<string, unknown> | null; error: string | null } | null;
  };
  attribution: AttributionRecord;
  // the Features view of the text at the default autoencoder the model ships (absent in files before it, null where
  // the model ships none); a feature's page stays in the package
  features?: { hooks: FeatureHooksOut; out: FeaturesOut; top: number } | null;
}

function read(): SnapshotData | null {
  if (typeof document === "undefined") return null;
  const el = document.getElementById("te-snapshot");
  if (!el?.textContent) return null;
  const d = JSON.parse(el.textContent) as SnapshotData;
  return d.format === "transformer-explainer-snapshot" ? d : null;
}

export const snapshot: SnapshotData | null = read();

const NEEDS_SERVER = "This page is an offline snapshot of one text; {what} needs the live app " +
  "(transformer-explainer serve).";
const missing = (what: string) => new SnapshotError(NEEDS_SERVER.replace("{what}", what));
/** What the size budget left out: a snapshot written with a larger budget carries it (the budget that keeps
 *  everything, as the writer measured it). */
const leftOut = (what: string) => new SnapshotError(`This offline snapshot left out ${what} to keep the file small` +
  (snapshot?.keep_mb ? `; a snapshot written with max_mb=${snapshot.keep_mb} (the CLI's --max-mb ` +
    `${snapshot.keep_mb}) carries it.` : "."));

// -- tensors ---------------------------------------------------------------------------------------

const decoded = new Map<string, Tensor>();

/** A stored tensor, decoded once (float16 in the file; float32 here, which holds every float16 exactly). */
function stored(key: string, name: string, s: Stored): Tensor {
  let t = decoded.get(key);
  if (!t) decoded.set(key, (t = decodeTensor({ ...s, name })));
  return t;
}

function shapeOf(d: SnapshotData): ModelShape {
  const c = d.trace.config;
  const caps = c.capabilities;
  return { family: c.family ?? "gpt2", nHead: c.n_head, nKvHeads: c.n_kv_heads || c.n_head, headDim: c.head_dim,
    attnScale: caps?.attn_scale || 1 / Math.sqrt(c.head_dim),
    windows: (caps?.layer_types ?? []).map((kind) => (kind === "sliding_attention" ? caps.local_window : null)) };
}

/** The full activation `name`: stored, stored under another name, or derived from stored ones as the trace
 *  derives it. */
function activation(d: SnapshotData, name: string): Tensor {
  if (name in d.tensors) return stored(name, name, d.tensors[name]);
  if (name in d.aliases) return { ...activation(d, d.aliases[name]), name };
  const model = shapeOf(d), rule = derivationOf(model.family, name);
  if (rule) {
    let t = decoded.get(name);
    if (!t) decoded.set(name, (t = derive(name, rule.derivation, rule.layer, model, (n) => activation(d, n))));
    return t;
  }
  throw leftOut(name);
}

/** A name of this snapshot's model, checked as the server checks it (src/transformer_explainer/slicing.py). */
function known(d: SnapshotData, name: string, weight: boolean) {
  const family = shapeOf(d).family, info = describeIn(family, name);
  if (!info) throw new SnapshotError(`unknown tensor name '${name}' for a ${family} model`);
  if (info.layer !== null && info.layer >= d.trace.config.n_layer)
    throw new SnapshotError(`${name}: the model has ${d.trace.config.n_layer} blocks (0..${d.trace.config.n_layer - 1})`);
  if (info.weight && !weight) throw new SnapshotError(`${name} is a weight, not an activation: ask POST /api/weights for it`);
  if (!info.weight && weight) throw new SnapshotError(`${name} is an activation: ask POST /api/trace or /api/tensors for it`);
}

/** The answer for `spec`, echoing its fields as the server does (the app files tensors by them). */
function answer(spec: TensorSpec, t: Tensor, kvHead: number | null): EncodedTensor {
  return encodedTensor({ name: spec.name, head: spec.head ?? null, kv_head: kvHead, position: spec.position ?? null,
    row: spec.row ?? null, dims: t.dims, shape: t.shape, dtype: spec.dtype ?? "float16" }, t.data);
}

function activationSlice(d: SnapshotData, spec: TensorSpec): EncodedTensor {
  known(d, spec.name, false);
  if (spec.row != null) throw new SnapshotError("`row` applies to weights; for activations use `head` and `position`");
  let t = activation(d, spec.name), kvHead: number | null = null;
  if (spec.head != null) ({ tensor: t, kvHead } = takeHead(t, spec.head, shapeOf(d)));
  if (spec.position != null) t = takePosition(t, spec.position);
  return answer(spec, t, kvHead);
}

function weightSlice(d: SnapshotData, spec: TensorSpec): EncodedTensor {
  known(d, spec.name, true);
  if (spec.position != null) throw new SnapshotError("`position` applies to activations; for weights use `head` and `row`");
  if (!(spec.name in d.weights)) throw leftOut(`the weight ${spec.name}`);
  let t = stored(`w|${spec.name}`, spec.name, d.weights[spec.name]), kvHead: number | null = null;
  if (spec.head != null) ({ tensor: t, kvHead } = takeHead(t, spec.head, shapeOf(d)));
  if (spec.row != null) t = takeRow(t, spec.row);
  return answer(spec, t, kvHead);
}

// -- requests --------------------------------------------------------------------------------------

type Body = Record<string, unknown> & { model?: string | null; text?: string | null; ids?: number[] | null };

function sameInput(d: SnapshotData, b: Body): void {
  const tr = d.trace;
  const ok = (b.ids != null && b.ids.join() === tr.token_ids.join()) || (b.text != null && b.text === tr.text);
  if (!ok) throw missing("another text");
  if (b.model != null && b.model !== tr.model) throw missing(`the model ${b.model}`);
}

const sameSampling = (a: SamplingIn, b: SamplingIn | undefined) => !!b && (a.temperature ?? 1) === (b.temperature ?? 1)
  && (a.top_k ?? null) === (b.top_k ?? null) && (a.top_p ?? null) === (b.top_p ?? null)
  && (a.seed ?? null) === (b.seed ?? null);

const sameTokens = (a: unknown[], b: unknown[]) => JSON.stringify(a) === JSON.stringify(b);

function analysisCall(d: SnapshotData, what: string, b: Body): unknown {
  const a = d.analysis;
  if (["lens", "ablate", "importance", "heads"].includes(what)) sameInput(d, b);
  switch (what) {
    case "lens": {
      const top = Number(b.top ?? 5);
      if (!a.lens || top > a.lens.top) throw missing(`the logit lens with more than ${a.lens?.top ?? 0} tokens`);
      const all = a.lens.out, T = d.trace.token_ids.length;
      const cols = ((b.positions as number[] | undefined) ?? [-1]).map((p) => {
        const q = p < 0 ? T + p : p;
        if (q < 0 || q >= T) throw new SnapshotError(`position ${p} is outside the ${T} traced tokens`);
        return all.positions.indexOf(q);
      });
      const pick = <X>(xs: X[]) => cols.map((i) => xs[i]);
      return { ...all, positions: pick(all.positions), position_tokens: pick(all.position_tokens as string[]),
        targets: pick(all.targets as unknown[]),
        layers: all.layers.map((l) => ({ ...l, positions: pick(l.positions as { top: unknown[] }[])
          .map((c) => ({ ...c, top: c.top.slice(0, top) })) })) };
    }
    case "heads":
      if (!a.heads) throw missing("head roles");
      return b.reference === false ? { ...a.heads, reference: null, reference_role_of: null } : a.heads;
    case "importance":
      if (!a.importance || (b.mode ?? "zero") !== "zero") throw missing("this head-importance map");
      return a.importance;
    case "ablate": {
      // an expert taken out of the routing: the file holds no such run (one per expert of every block)
      if ((b.experts as unknown[] | undefined)?.length) throw missing("taking an expert out of the routing (it runs the model again)");
      const heads = (b.heads as number[][] | undefined) ?? [];
      const key = heads.length === 1 && !(b.layers as unknown[] | undefined)?.length ? heads[0].join(".") : "";
      const res = a.ablations[key];
      if (!res || (b.mode ?? "zero") !== "zero" || Number(b.top ?? ABLATION_TOP) > a.ablation_top)
        throw missing("this ablation (the snapshot holds each head alone, zero ablation)");
      return res;
    }
    case "neighbours": {
      const tok = b.token;
      const id = typeof tok === "number" ? tok
        : Object.keys(a.neighbours).find((k) => (a.neighbours[k].token as { token: string }).token === tok);
      const res = id != null ? a.neighbours[String(id)] : undefined;
      if (!res || Number(b.n ?? 10) > res.neighbours.length) throw missing("the neighbours of this token");
      return { ...res, neighbours: res.neighbours.slice(0, Number(b.n ?? 10)) };
    }
    case "analogy": {
      const r = a.analogy;
      if (!r || !sameTokens(r.request.positive, b.positive as unknown[]) || !sameTokens(r.request.negative,
        (b.negative as unknown[] | undefined) ?? [])) throw missing("this analogy");
      if (!r.out) throw new SnapshotError(r.error ?? "no answer");
      return { ...r.out, neighbours: r.out.neighbours.slice(0, Number(b.n ?? 10)) };
    }
    case "project": {
      const r = a.projection;
      if (!r || !sameTokens(r.request, b.tokens as unknown[])) throw missing("this projection");
      if (!r.out) throw new SnapshotError(r.error ?? "no answer");
      return r.out;
    }
  }
  throw missing(`analysis/${what}`);
}

// -- direct logit attribution ------------------------------------------------------------------------

/** The attributions carried at `position` (the default target first); empty where the file left it out. */
function attributionsAt(d: SnapshotData, position: number): StoredAttribution[] {
  return d.attribution.entries.filter((e) => e.position === position);
}

/** The tokens whose attribution the file carries at `position` (the default one first), for the page to say what
 *  it can show offline; empty where the file left that position out. */
export function snapshotAttributionTokens(position: number): TokenIdText[] {
  return snapshot ? attributionsAt(snapshot, position).map((e) => e.target) : [];
}

/** Why the file carries no attribution at all where the model refused one (`model.attribute`'s sentence, English),
 *  else null: no position was left out for the file's size then. */
export function snapshotAttributionRefused(): string | null {
  return snapshot?.attribution.refused ?? null;
}

/** The positions whose attribution the file carries, in order. */
export function snapshotAttributionPositions(): number[] {
  return snapshot ? [...new Set(snapshot.attribution.entries.map((e) => e.position))].sort((a, b) => a - b) : [];
}

/** Whether a token box's `token` (an id, or a text) names `target`: by id, or by its text exactly, as stored or as
 *  the page shows it (␣ for a space: the note lists the tokens so). The page has no tokenizer to do more. */
function names(target: TokenIdText, token: unknown): boolean {
  return typeof token === "number" ? target.id === token : target.text === token || visible(target.text) === token;
}

/** Whether the file carries the attribution a token box names at `position` (null: the default target). */
export function snapshotCarriesAttribution(position: number, token: string | number | null): boolean {
  const here = snapshot ? attributionsAt(snapshot, position) : [];
  return here.length > 0 && (token == null || here.some((x) => names(x.target, token)));
}

/** The entry a token box names at position `q` (see `names`). */
function attributionOf(d: SnapshotData, q: number, token: unknown): StoredAttribution {
  const here = attributionsAt(d, q);
  if (!here.length) throw leftOut(`the attribution at position ${q}`);
  if (token == null) return here[0];
  const e = here.find((x) => names(x.target, token));
  if (!e) throw missing(`the attribution of ${JSON.stringify(token)} at position ${q} (the file holds ` +
    `${here.map((x) => JSON.stringify(x.target.text)).join(", ")} there)`);
  return e;
}

/** What /api/attribution/attribute answers. "Rather than B" is the difference of the two tokens' attributions at
 *  that position: every term is linear in the unembedding direction W_U[:, A] − W_U[:, B], with the same frozen
 *  norm scale, as attribution.py computes it. The layer x head map is the head components in float32, as the
 *  server's map is. */
function attribute(d: SnapshotData, b: Body): AttributeOut {
  sameInput(d, b);
  if (d.attribution.refused) throw new SnapshotError(d.attribution.refused); // as the server would answer
  const tr = d.trace, T = tr.token_ids.length, p = b.position as number | null | undefined;
  if (p != null && (p < -T || p >= T)) throw new SnapshotError(`position ${p} is outside the ${T} traced tokens`);
  const q = p == null ? T - 1 : p < 0 ? T + p : p;
  const a = attributionOf(d, q, b.target);
  const v = b.versus == null ? null : attributionOf(d, q, b.versus);
  if (v && v.target.id === a.target.id)
    throw new SnapshotError("the target and the token it is compared with are the same token: their difference is 0");
  // a stored null is a value that was not finite (strict JSON has no NaN)
  const minus = (x: number | null, y: number | null | undefined): number | null =>
    v === null ? x : x === null || y == null ? null : x - y;
  const values = a.values.map((x, i) => minus(x, v?.values[i]));
  const { n_layer: L, n_head: H } = tr.config;
  const E = tr.config.capabilities.n_experts ?? 0;
  const heads: (number | null)[][] = Array.from({ length: L }, () => Array<number | null>(H).fill(null));
  // a mixture of experts: the (L, E) map, 0 where an expert was not chosen (as attribution.py's)
  const experts: (number | null)[][] | null = a.experts ? Array.from({ length: L }, () => Array<number | null>(E).fill(0)) : null;
  let k = 0; // the next "expert" part
  const components: ComponentOut[] = d.attribution.parts.map(([kind, layer, head], i) => {
    const f32 = values[i] == null ? null : Math.fround(values[i]!);
    if (kind === "head" && layer != null && head != null) heads[layer][head] = f32;
    if (kind !== "expert") return { kind, layer, head, expert: null, value: values[i] ?? NaN };
    const expert = a.experts?.[k++] ?? null;
    if (experts && layer != null && expert != null) experts[layer][expert] = f32;
    return { kind, layer, head, expert, value: values[i] ?? NaN };
  });
  return { model: tr.model, token_ids: tr.token_ids, tokens: tr.tokens.map((x) => x.text), position: q,
    target: a.target, versus: v ? v.target : null, metric: minus(a.metric, v?.metric) ?? NaN,
    rest: minus(a.rest, v?.rest) ?? NaN, scale: a.scale, components, heads, experts };
}

/** Answer an API call from the snapshot (the same JSON a server would send); a call it cannot answer rejects, and
 *  is noted (refusals.svelte.ts) for whoever waits on it without seeing the rejection. */
export async function snapshotCall(path: string, body?: unknown): Promise<unknown> {
  try {
    return answerCall(path, body);
  } catch (e) {
    refused(e as Error);
    throw e;
  }
}

/** The features of the snapshot's text at the autoencoder it carries; a feature's page needs the live app. */
function featuresCall(d: SnapshotData, path: string, b: Body): unknown {
  const f = d.features;
  if (!f) throw missing("the features of a text");
  if (path.startsWith("features/hooks")) return f.hooks;
  if (path !== "features") throw missing("a feature's page");
  sameInput(d, b);
  if (b.hook != null && b.hook !== f.out.hook) throw missing(`the features at ${String(b.hook)}`);
  return f.out;
}

function answerCall(path: string, body?: unknown): unknown {
  const d = snapshot!;
  const b = (body ?? {}) as Body;
  if (path === "models") return d.models;
  if (path.startsWith("models/")) {
    const m = d.models.models.find((x) => x.name === decodeURIComponent(path.slice(7)));
    if (!m) throw new SnapshotError(`unknown model ${path.slice(7)}`);
    return m;
  }
  if (path.startsWith("analysis/")) return analysisCall(d, path.slice(9), b);
  if (path === "features" || path.startsWith("features/")) return featuresCall(d, path, b);
  switch (path) {
    case "trace": {
      sameInput(d, b);
      if (!sameSampling(d.sampling, b.sampling as SamplingIn)) throw missing("other sampling settings");
      const include = (b.include as TensorSpec[] | undefined) ?? [];
      return { ...d.trace, tensors: include.map((s) => activationSlice(d, s)), timings_ms: {} };
    }
    case "tensors":
      sameInput(d, b);
      return { model: d.trace.model, token_ids: d.trace.token_ids,
        tensors: (b.tensors as TensorSpec[]).map((s) => activationSlice(d, s)) };
    case "weights":
      return { model: d.trace.model, token_ids: [], tensors: (b.tensors as TensorSpec[]).map((s) => weightSlice(d, s)) };
    case "next_token":
      sameInput(d, b);
      if (!sameSampling(d.sampling, b.sampling as SamplingIn)) throw missing("other sampling settings");
      return d.trace.next;
    case "generate":
      throw missing("generating more text");
    case "attribution/attribute":
      return attribute(d, b);
    case "attribution/patch":
      throw missing("activation patching (it runs the model on two prompts)");
  }
  throw missing(path);
}
