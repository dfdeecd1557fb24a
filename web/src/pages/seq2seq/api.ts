// Calls to the encoder-decoder API under /api/seq2seq (src/transformer_explainer/server/routes/seq2seq.py)
// through the app's one `call`, typed by the generated schema types.
import { call } from "../../lib/client";
import type {
  CompareOut, CompareRequest, CurrentRunOut, DecodeOut, DecodeRequest, DoneEvent, EvalEvent, PositionalOut,
  PositionalRequest, RunSummary, SnapshotEvent, StartEvent, StepEvent, TasksOut, TrainRequest,
} from "../../lib/generated/api";

/** One event of a training run's stream. */
export type TrainEvent = StartEvent | StepEvent | SnapshotEvent | EvalEvent | DoneEvent;
export type RunStatus = RunSummary["status"];

export const s2sApi = {
  tasks: () => call<TasksOut>("seq2seq/tasks"),
  decode: (b: DecodeRequest, s?: AbortSignal) => call<DecodeOut>("seq2seq/decode", b, s),
  compare: (b: CompareRequest, s?: AbortSignal) => call<CompareOut>("seq2seq/compare", b, s),
  positions: (b: PositionalRequest, s?: AbortSignal) => call<PositionalOut>("seq2seq/positional-encoding", b, s),
  trainStart: (b: TrainRequest) => call<RunSummary>("seq2seq/train", b),
  trainCurrent: () => call<CurrentRunOut>("seq2seq/train"),
  trainStop: (run: string) => call<RunSummary>(`seq2seq/train/${encodeURIComponent(run)}/stop`, {}),
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
