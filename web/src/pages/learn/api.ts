// Calls to the induction-run API under /api/induction (src/transformer_explainer/server/routes/induction.py)
// through the app's one `call`: the server's settings and the shipped recorded run, a live run's start and
// controls, and its events as they happen (server-sent events).
import { call } from "../../lib/client";
import type {
  InductionDoneEvent, InductionInfo, InductionLiveRun, InductionRecord, InductionRecordEvent, InductionRecordsOut,
  InductionStartEvent, InductionStatusEvent, InductionTrainIn,
} from "../../lib/generated/api";

export type { InductionInfo, InductionLiveRun, InductionRecord };
export type RunName = InductionRecordEvent["run"];
export type LiveStatus = InductionLiveRun["status"];
/** One event of a live run's stream. */
export type LearnEvent = InductionStartEvent | InductionRecordEvent | InductionStatusEvent | InductionDoneEvent;

const path = (id: string, what = "") => `induction/train/${encodeURIComponent(id)}${what}`;

export const learnApi = {
  info: () => call<InductionInfo>("induction"),
  recorded: (name: RunName) => call<InductionRecordsOut>(`induction/recorded/${name}`),
  start: (b: InductionTrainIn) => call<InductionLiveRun>("induction/train", b),
  run: (id: string) => call<InductionLiveRun>(path(id)),
  stop: (id: string) => call<InductionLiveRun>(path(id, "/stop"), {}),
  pause: (id: string) => call<InductionLiveRun>(path(id, "/pause"), {}),
  resume: (id: string) => call<InductionLiveRun>(path(id, "/resume"), {}),
  step: (id: string) => call<InductionLiveRun>(path(id, "/step"), {}),
  /** The run's events from its first (a dropped connection resumes where it left off: Last-Event-ID). */
  events(id: string, on: (ev: LearnEvent) => void, onLost: () => void): () => void {
    const src = new EventSource(`api/${path(id, "/events")}`);
    src.onmessage = (m) => {
      const ev = JSON.parse(m.data) as LearnEvent;
      on(ev);
      if (ev.kind === "done") src.close();
    };
    src.onerror = () => {
      if (src.readyState === EventSource.CLOSED) onLost();
    };
    return () => src.close();
  },
};
