// What each claim of a lesson means, as a check on the numbers: for every catalogue key a lesson says with
// `claim(...)`, a function here tells whether it holds for the values the sentence quotes and for the learner's
// data, fetched independently (ctx.tensor asks the server again; ctx.trace and ctx.next are the API's answers).
// A claim key without a check fails the test. The checks live in claims.<lesson>.ts, one file per lesson.
import { api } from "../../src/lib/client";
import type {
  CompareOut, DecodeOut, InductionConfigOut, InductionExample, InductionRecord, ModelConfigOut, ModelInfo, NextTokenOut,
  PositionalOut, TasksOut, TensorSpec, TraceOut,
} from "../../src/lib/generated/api";
import type { MessageKey } from "../../src/lib/i18n";
import type { OwnConfig } from "../../src/lib/family";
import type { Value } from "../../src/lib/lesson";
import type { Tensor } from "../../src/lib/tensor";

export interface ClaimContext {
  /** The lesson's trace: of a model with code of our own (lessons are opened on those only). */
  trace: TraceOut & { config: OwnConfig };
  next: NextTokenOut | null;
  model: ModelInfo | undefined;
  /** The focus when the step's text was read. */
  focus: { layer: number; head: number; pos: number };
  /** A tensor of the trace, fetched from the server here (float32). */
  tensor: (spec: TensorSpec) => Promise<Tensor>;
  /** On the encoder-decoder page (its own API, no decoder-model trace): see Seq2SeqClaimContext. */
  seq2seq?: Seq2SeqClaimContext;
  /** On the "Watch it learn" page (a run's records, no trace): see InductionClaimContext. */
  induction?: InductionClaimContext;
}

/** What the induction lesson's checks read: the run's records as its log files hold them (read by the test, not the
 *  page's state), its configuration and example, and the record the page showed when the text was read. */
export interface InductionClaimContext {
  config: InductionConfigOut;
  example: InductionExample;
  main: InductionRecord[];
  control: InductionRecord[];
  at: number;
}

/** What the encoder-decoder lesson's checks read: the page's state when the step's text was read, and the
 *  page's API for the same task, source and model, asked again here (not the page's cached answers). */
export interface Seq2SeqClaimContext {
  task: string;
  text: string;
  run: string | null;
  focus: { encLayer: number; encHead: number; decLayer: number; decHead: number; shown: number; nPos: number;
    beam: number; reference: string };
  decode: (beam: number, compareBeams?: number[]) => Promise<DecodeOut>;
  compare: (target: string | null) => Promise<CompareOut>;
  positions: (n: number) => Promise<PositionalOut>;
  tasks: () => Promise<TasksOut>;
}

/** True when the claim holds; otherwise a sentence saying what the numbers show instead. `v` holds the
 *  values the sentence quotes, by placeholder name (a placeholder filled with a sentence of the catalogue gives
 *  a value whose `raw` is that sentence's key). */
export type Check = (v: Record<string, Value>, ctx: ClaimContext) => true | string | Promise<true | string>;

const files = import.meta.glob<Partial<Record<MessageKey, Check>>>("./claims.*.ts", { eager: true, import: "CLAIMS" });

export const CLAIMS: Partial<Record<MessageKey, Check>> = Object.assign({}, ...Object.values(files));

/** The model as /api/models describes it (a request of its own, not the trace the lesson read). */
export async function described(ctx: ClaimContext): Promise<OwnConfig> {
  const info = await api.model(ctx.trace.model);
  if (!info.config) throw new Error(`/api/models/${ctx.trace.model} has no config`);
  return info.config as OwnConfig;
}

/** Whether the model has the weight `name` (the server refuses the names a model lacks). */
export async function hasWeight(ctx: ClaimContext, name: string): Promise<boolean> {
  try {
    await api.weights({ model: ctx.trace.model, tensors: [{ name }] });
    return true;
  } catch {
    return false;
  }
}
