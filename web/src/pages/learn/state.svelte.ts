// State of the "Watch it learn" page: the server's settings, the run shown (the shipped recorded run or a live
// one), its records, and the record in view (the scrub). Lives outside the page so that leaving it keeps a live
// run's stream (its owner's lease) open. The induction lesson (lessons/induction.ts) reads `learn`.
import { ApiError } from "../../lib/client";
import { asError } from "../../lib/errorText";
import { num } from "../../lib/format";
import { learnApi, type InductionInfo, type InductionRecord, type InductionLiveRun, type LearnEvent,
  type LiveStatus, type RunName } from "./api";

export type Source = "recorded" | "live";
export type LearnTab = "copy" | "text";
export interface Runs { main: InductionRecord[]; control: InductionRecord[] }

/** The bars of the run's milestones (training/induction.py: INDUCTION_BAR, summary()). */
export const BAR = 0.5;
/** The page's colours: the two head scores, the two losses (the control's lines are dashed). */
export const COLORS = { prev: "#2a8fbd", ind: "#c2410c", first: "#7a7a8c", repeat: "#5b3fc4", icl: "#2b7a3d" };
/** Records a second that play steps through. */
export const PLAY_RATE = 4;

const ENDED: LiveStatus[] = ["finished", "stopped", "failed"];

/** The first record's step at which `test` holds and keeps holding to the last record (training/induction.py's
 *  `crossing`), or null: the milestones of a live run before its summary arrives. */
export function crossing(records: readonly InductionRecord[], test: (r: InductionRecord) => boolean): number | null {
  let found: number | null = null;
  for (const r of records) found = test(r) ? (found ?? r.step) : null;
  return found;
}

export const best = (m: number[][]): number => Math.max(...m.map((row) => Math.max(...row)));

/** A head's score (a mean attention weight, 0 to 1) as the page and its lesson write it: 3 decimals for every head
 *  alike ("0.441", "0.028"); a positive score under 0.001 as "< 0.001" (4 significant digits there, "0.0004506",
 *  read unevenly beside the others); never rounded up onto the 0.5 bar ("< 0.500": the page and the lesson say such a
 *  head has not reached it) nor to 1 ("> 0.999"). */
export function score(v: number): string {
  if (!Number.isFinite(v) || v < 0) return num(v); // not a score: as the rest of the app writes numbers
  if (v === 0) return "0";
  if (v < 1e-3) return "< 0.001";
  const s = v.toFixed(3);
  if (v < BAR && Number(s) >= BAR) return `< ${BAR.toFixed(3)}`;
  if (v < 1 && Number(s) >= 1) return "> 0.999";
  return s;
}

/** The milestones summary() reports, from the records (the same definitions). */
export function milestones(records: readonly InductionRecord[]) {
  return {
    repeat_loss_falls: crossing(records, (r) => r.repeat_loss < 0.5 * r.first_loss),
    induction_head: crossing(records, (r) => best(r.induction) >= BAR),
    previous_token_head: crossing(records, (r) => best(r.previous_token) >= BAR),
  };
}

class LearnState {
  info = $state.raw<InductionInfo | null>(null);
  source = $state<Source>("recorded");
  runs = $state.raw<Runs>({ main: [], control: [] });
  /** Index into runs.main of the record shown. */
  at = $state(0);
  live = $state.raw<InductionLiveRun | null>(null);
  tab = $state<LearnTab>("copy");
  /** A live run: the newest record is shown as it arrives (false once the learner scrubs back). */
  follow = $state(true);
  playing = $state(false);
  error = $state.raw<Error | null>(null); // loading failed, a control was refused, the stream was lost
  busy = $state.raw<Error | null>(null); // the server's 409: a run is going
  failure = $state<string | null>(null); // the run's own failure sentence (its done event)
  lost = $state(false);
  starting = $state(false);
  liveModel = $state<string | null>(null);

  #recorded: Runs | null = null;
  #liveRuns: Runs = { main: [], control: [] };
  #close: (() => void) | null = null;
  #timer: ReturnType<typeof setInterval> | undefined;
  #pending: { run: RunName; record: InductionRecord }[] = [];
  #frame = 0;

  get going(): boolean {
    return !!this.live && !ENDED.includes(this.live.status);
  }

  /** The record in view, and the control's record of the same step (or the last before it). */
  get record(): InductionRecord | null {
    return this.runs.main[Math.min(this.at, this.runs.main.length - 1)] ?? null;
  }

  get controlRecord(): InductionRecord | null {
    const step = this.record?.step ?? -1;
    let out: InductionRecord | null = null;
    for (const r of this.runs.control) if (r.step <= step) out = r;
    return out;
  }

  async load(): Promise<void> {
    if (this.info) return;
    try {
      const [info, main, control] = await Promise.all([learnApi.info(), learnApi.recorded("main"),
        learnApi.recorded("control")]);
      this.info = info;
      this.#recorded = { main: main.records, control: control.records };
      if (this.source === "recorded") this.useRecorded();
      // a live run going on the server (ours before a reload, or someone else's): join it
      if (info.current && !ENDED.includes(info.current.status)) this.attach(info.current);
    } catch (e) {
      this.error = asError(e);
    }
  }

  /** Show the shipped recorded run, at its last record. */
  useRecorded(): void {
    if (!this.#recorded) return;
    this.source = "recorded";
    this.runs = this.#recorded;
    this.at = this.runs.main.length - 1;
  }

  /** Show the live run (the one going, or the last one watched). */
  useLive(): void {
    this.pause();
    this.source = "live";
    this.runs = { ...this.#liveRuns };
    this.at = Math.max(0, this.runs.main.length - 1);
    this.follow = true;
  }

  /** Scrub to record `i` (a live run stops following its newest record unless `i` is the newest). */
  setAt(i: number): void {
    const n = this.runs.main.length;
    this.at = Math.max(0, Math.min(n - 1, Math.round(i)));
    if (this.source === "live") this.follow = this.at === n - 1;
  }

  /** Play through the records at PLAY_RATE a second, from the start when at the end. */
  play(): void {
    if (this.playing || this.runs.main.length < 2) return;
    if (this.at >= this.runs.main.length - 1) this.at = 0;
    this.playing = true;
    this.#timer = setInterval(() => {
      if (this.at >= this.runs.main.length - 1) this.pause();
      else this.at += 1;
    }, 1000 / PLAY_RATE);
  }

  pause(): void {
    clearInterval(this.#timer);
    this.playing = false;
  }

  /** Follow a live run's events from its first one. */
  attach(s: InductionLiveRun): void {
    this.#close?.();
    this.live = s;
    this.liveModel = s.model;
    this.failure = null;
    this.lost = false;
    this.busy = null;
    this.#liveRuns = { main: [], control: [] };
    this.#pending = [];
    this.useLive();
    this.#close = learnApi.events(s.id, (ev) => this.#on(ev), () => { this.lost = true; });
  }

  #on(ev: LearnEvent): void {
    if (!this.live) return;
    switch (ev.kind) {
      case "start":
        if (this.live.status === "starting") this.live = { ...this.live, status: "running" };
        break;
      case "record":
        this.#pending.push({ run: ev.run, record: ev.record });
        // a burst of records (joining mid-run) becomes one update per frame
        if (!this.#frame) this.#frame = requestAnimationFrame(() => this.#flush());
        break;
      case "status":
        this.live = { ...this.live, status: ev.status, step: ev.step, run: ev.run };
        break;
      case "done":
        this.#flush();
        this.live = { ...this.live, status: ev.status };
        this.liveModel = ev.model;
        this.failure = ev.message ?? null; // why it stopped or failed, when not by its owner's hand
        this.#close = null;
        break;
    }
  }

  #flush(): void {
    cancelAnimationFrame(this.#frame);
    this.#frame = 0;
    if (!this.#pending.length) return;
    const next = { main: [...this.#liveRuns.main], control: [...this.#liveRuns.control] };
    for (const { run, record } of this.#pending) {
      next[run].push(record);
      if (this.live && (this.live.run !== run || record.step > this.live.step)) this.live = { ...this.live, run, step: record.step };
    }
    this.#pending = [];
    this.#liveRuns = next;
    if (this.source === "live") {
      this.runs = next;
      if (this.follow) this.at = next.main.length - 1;
    }
  }

  async begin(req: { steps?: number; seed?: number; width?: number }): Promise<void> {
    this.starting = true;
    this.error = null;
    this.busy = null;
    try {
      this.attach(await learnApi.start(req));
    } catch (e) {
      if (e instanceof ApiError && e.status === 409) this.busy = e;
      else this.error = asError(e);
    } finally {
      this.starting = false;
    }
  }

  /** Stop, pause, resume or step the live run (its owner only: the server says so otherwise). */
  async control(what: "stop" | "pause" | "resume" | "step"): Promise<void> {
    if (!this.live) return;
    this.error = null;
    try {
      const s = await learnApi[what](this.live.id);
      if (this.live && !ENDED.includes(this.live.status)) this.live = { ...this.live, status: s.status, step: Math.max(s.step, this.live.step) };
    } catch (e) {
      this.error = asError(e);
    }
  }

  /** Join the run going on the server (after a 409), if any. */
  async joinCurrent(): Promise<void> {
    try {
      const cur = (await learnApi.info()).current;
      if (cur) this.attach(cur);
    } catch (e) {
      this.error = asError(e);
    }
  }
}

export const learn = new LearnState();
