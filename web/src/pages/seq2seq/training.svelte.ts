// The live training run the page watches: started here or joined (one run per server), its events
// streamed in (server-sent events) and kept for the charts. Lives outside the view so that switching
// tabs keeps the run in sight.
import { ApiError } from "../../lib/client";
import { asError } from "../../lib/errorText";
import type { DoneEvent, EvalEvent, RunSummary, SnapshotEvent, StartEvent } from "../../lib/generated/api";
import { s2sApi, type RunStatus, type TrainEvent } from "./api";

class TrainingState {
  summary = $state.raw<RunSummary | null>(null);
  start = $state.raw<StartEvent | null>(null);
  losses = $state.raw<number[]>([]); // loss after step i + 1
  evals = $state.raw<EvalEvent[]>([]);
  snaps = $state.raw<SnapshotEvent[]>([]);
  done = $state.raw<DoneEvent | null>(null);
  status = $state<RunStatus | null>(null);
  step = $state(0);
  error = $state.raw<Error | null>(null); // why starting failed, or the stream was lost
  lost = $state(false);
  busy = $state.raw<Error | null>(null); // the server's 409: another run is going
  starting = $state(false);

  #close: (() => void) | null = null;
  #pending: number[] = [];
  #frame = 0;

  get going(): boolean {
    return this.status === "starting" || this.status === "running" || this.status === "stopping";
  }

  /** Follow a run's events from its first one. */
  attach(s: RunSummary): void {
    this.#close?.();
    this.summary = s;
    this.start = null;
    this.losses = [];
    this.evals = [];
    this.snaps = [];
    this.done = null;
    this.status = s.status;
    this.step = s.step;
    this.busy = null;
    this.error = null;
    this.lost = false;
    this.#pending = [];
    this.#close = s2sApi.trainEvents(s.run, (ev) => this.#on(ev), () => { this.lost = true; });
  }

  #on(ev: TrainEvent): void {
    switch (ev.kind) {
      case "start":
        this.start = ev;
        if (this.status === "starting") this.status = "running";
        break;
      case "step":
        this.#pending.push(ev.loss);
        this.step = ev.step;
        // a burst of events (joining mid-run) becomes one update per frame
        if (!this.#frame) this.#frame = requestAnimationFrame(() => this.#flush());
        break;
      case "snapshot":
        this.snaps = [...this.snaps, ev];
        break;
      case "eval":
        this.evals = [...this.evals, ev];
        break;
      case "done":
        this.#flush();
        this.done = ev;
        this.status = ev.status;
        this.step = ev.step;
        this.#close = null;
        break;
    }
  }

  #flush(): void {
    cancelAnimationFrame(this.#frame);
    this.#frame = 0;
    if (this.#pending.length) this.losses = [...this.losses, ...this.#pending];
    this.#pending = [];
  }

  async begin(task: string, steps: number, example: string | null): Promise<void> {
    this.starting = true;
    this.error = null;
    this.busy = null;
    try {
      this.attach(await s2sApi.trainStart({ task, steps, example }));
    } catch (e) {
      if (e instanceof ApiError && e.status === 409) this.busy = e;
      else this.error = asError(e);
    } finally {
      this.starting = false;
    }
  }

  async stop(): Promise<void> {
    if (!this.summary) return;
    try {
      const s = await s2sApi.trainStop(this.summary.run);
      if (!this.done) this.status = s.status;
    } catch (e) {
      this.error = asError(e);
    }
  }

  /** Join the run going on the server (someone else's, or ours before a reload), if any. */
  async joinCurrent(onlyGoing = true): Promise<void> {
    try {
      const cur = (await s2sApi.trainCurrent()).run;
      if (cur && (!onlyGoing || !["finished", "stopped", "failed"].includes(cur.status))) this.attach(cur);
    } catch (e) {
      this.error = asError(e);
    }
  }
}

export const training = new TrainingState();
