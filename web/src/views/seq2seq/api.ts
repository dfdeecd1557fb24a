// The encoder-decoder API under /api/seq2seq (src/transformer_explainer/seq2seq/api.py): its types and
// calls. Every request goes to this page's own origin.

export interface CheckpointCard {
  n_encoder_layers: number; n_decoder_layers: number; d_model: number; n_head: number; d_ff: number;
  exact_match: number | null; steps: number | null;
}

export interface TaskInfo {
  name: string;
  description: string;
  examples: string[];
  max_src_len: number;
  has_checkpoint: boolean;
  src_level: "char" | "word";
  tgt_level: "char" | "word";
  src_vocab: string[];
  checkpoint: CheckpointCard | null;
}

export interface TasksOut { tasks: TaskInfo[]; max_train_steps: number }

export interface TopToken { token: string; prob: number }

export interface DecodeStep {
  step: number;
  input_tokens: string[]; // the decoder input at this step: <s> and the tokens chosen so far
  token: string; // the token chosen at this step
  prob: number;
  top: TopToken[];
  cross_attn: number[][][]; // (layers, heads, source): the new position's row
  self_attn: number[][][]; // (layers, heads, step + 1)
}

export interface Hyp { tokens: string[]; score: number }
export interface BeamStep { step: number; alive: Hyp[]; finished: Hyp[] }

export interface DecodeOut {
  task: string;
  run: string | null;
  input: string;
  src_tokens: string[];
  src_ids: number[];
  output: string;
  tokens: string[];
  finished: boolean;
  score: number;
  beam: number;
  d_model: number;
  embed_scale: number;
  max_src_len: number;
  n_encoder_layers: number;
  n_decoder_layers: number;
  n_heads: number;
  source: { embed: number[][]; pos_encoding: number[][]; embed_sum: number[][] } | null;
  encoder_attn: number[][][][]; // (layers, heads, source, source)
  steps: DecodeStep[];
  beams: BeamStep[];
}

export interface CompareStep {
  step: number;
  gold: string | null;
  teacher_input: string[];
  teacher_token: string;
  teacher_prob: number;
  teacher_gold_prob: number | null;
  free_input: string[] | null;
  free_token: string | null;
  free_prob: number | null;
  free_gold_prob: number | null;
  inputs_differ: boolean;
}

export interface CompareOut {
  task: string;
  run: string | null;
  input: string;
  target: string;
  src_tokens: string[];
  gold_tokens: string[];
  teacher_tokens: string[];
  free_tokens: string[];
  free_text: string;
  free_correct: boolean;
  teacher_correct_steps: number;
  first_divergence: number | null;
  steps: CompareStep[];
}

export interface PositionalOut {
  d_model: number;
  n_positions: number;
  trained_length: number | null;
  encoding: number[][]; // (positions, d_model)
  similarity: number[][]; // (positions, positions): PE PE^T
  norm: number;
}

export type RunStatus = "starting" | "running" | "stopping" | "finished" | "stopped" | "failed";

export interface RunSummary {
  run: string; task: string; status: RunStatus; step: number; steps: number; example: string; reference: string;
  preset: string; elapsed_s: number; n_events: number;
}

export interface StartEvent {
  kind: "start"; run: string; task: string; steps: number; example: string; reference: string;
  src_tokens: string[]; rows: string[]; n_layers: number; n_heads: number;
  model: { n_encoder_layers: number; n_decoder_layers: number; d_model: number; n_head: number; d_ff: number; params: number };
  batch_size: number; lr: number; warmup: number; max_minutes: number;
}
export interface StepEvent { kind: "step"; step: number; loss: number; lr: number }
export interface SnapshotEvent {
  kind: "snapshot"; step: number; cross_attn: number[][][][]; gold_prob: number[]; output: string; correct: boolean;
}
export interface EvalEvent { kind: "eval"; step: number; exact_match: number; val_loss: number; token_acc: number }
export interface DoneEvent {
  kind: "done"; step: number; status: "finished" | "stopped" | "failed"; message?: string; elapsed_s?: number;
  exact_match?: number; val_loss?: number; token_acc?: number;
}
export type TrainEvent = StartEvent | StepEvent | SnapshotEvent | EvalEvent | DoneEvent;

export class Seq2SeqError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

async function call<T>(path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const res = await fetch(`api/seq2seq/${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  if (!res.ok) {
    let msg = `${res.status} ${res.statusText}`;
    try {
      const d = (await res.json()).detail;
      if (typeof d === "string") msg = d;
      else if (Array.isArray(d)) msg = d.map((e) => e.msg ?? String(e)).join("; ");
    } catch {
      /* not JSON: keep the status line */
    }
    throw new Seq2SeqError(res.status, msg);
  }
  return (await res.json()) as T;
}

export interface ModelPick { task: string; run?: string | null }

export const s2sApi = {
  tasks: () => call<TasksOut>("tasks"),
  decode: (b: ModelPick & { text: string; beam: number; top_k?: number }, s?: AbortSignal) =>
    call<DecodeOut>("decode", b, s),
  compare: (b: ModelPick & { text: string; target?: string | null }, s?: AbortSignal) =>
    call<CompareOut>("compare", b, s),
  positions: (b: { task: string; n_positions: number }, s?: AbortSignal) =>
    call<PositionalOut>("positional-encoding", b, s),
  trainStart: (b: { task: string; steps: number; example?: string | null }) => call<RunSummary>("train", b),
  trainCurrent: () => call<{ run: RunSummary | null; max_steps: number }>("train"),
  trainStop: (run: string) => call<RunSummary>(`train/${encodeURIComponent(run)}/stop`, {}),
  /** The run's events as they happen (server-sent events; a dropped connection resumes where it left off). */
  trainEvents(run: string, on: (ev: TrainEvent) => void, onLost: () => void): () => void {
    const src = new EventSource(`api/seq2seq/train/${encodeURIComponent(run)}/events`);
    src.onmessage = (m) => {
      const ev = JSON.parse(m.data) as TrainEvent;
      on(ev);
      if (ev.kind === "done") src.close();
    };
    src.onerror = () => {
      if (src.readyState === EventSource.CLOSED) onLost();
      // otherwise the browser reconnects by itself, sending the id of the last event it had
    };
    return () => src.close();
  },
};
