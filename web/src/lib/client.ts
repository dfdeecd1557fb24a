// The JSON API, typed by the generated schema types. Every call goes to this page's own origin.
import type {
  ErrorCode, ErrorOut, GenerateIn, GenerateOut, ModelInfo, ModelList, NextTokenIn, NextTokenOut, TensorSpec, TensorsIn,
  TensorsOut, TraceIn, TraceOut, WeightIn,
} from "./generated/api";
import { snapshot, snapshotCall } from "../snapshot/static";
import { BINARY_MEDIA_TYPE, unpackBinary } from "./tensor";

/** An answer other than 2xx: its status, the server's English sentence (`message`, ErrorOut's detail), and its
 *  code and params, which the page words in the learner's language (errorText.ts). */
export class ApiError extends Error {
  constructor(public status: number, message: string, public code: ErrorCode | null = null,
              public params: Record<string, string | number> = {}) {
    super(message);
  }
}

/** The server's error as an ApiError: `body` is an error answer's body or an error carried inside an answer (a
 *  streamed line, a download job), in ErrorOut's shape: the English `detail`, the `code` and its `params`. The one
 *  place the page reads the server's errors; a body not of that shape gives `fallback` as the message. */
export function apiError(status: number, body: unknown, fallback = ""): ApiError {
  const out = (body !== null && typeof body === "object" ? body : {}) as Partial<ErrorOut>;
  return new ApiError(status, out.detail || fallback, out.code ?? null, out.params ?? {});
}

/** An answer other than 2xx as an ApiError; one whose body is not JSON keeps its status line. */
export async function errorOf(res: Response): Promise<ApiError> {
  const body: unknown = await res.json().catch(() => null);
  return apiError(res.status, body, `${res.status} ${res.statusText}`);
}

/** Where the time of one API call went (ms, from performance.now()), for the benchmarks: `server` is the
 *  server's own Server-Timing (forward pass "model", "encode", "serialise"). */
export interface CallTiming {
  path: string;
  start: number;
  headers: number; // the answer's headers arrived
  body: number; // its last byte arrived
  parsed: number; // JSON parsed (and, for a binary answer, its tensors' bytes attached)
  bytes: number;
  binary: boolean;
  server: Record<string, number>;
}

/** The last calls' timings, newest last (at most 50); benchmarks read it as `window.__teCalls`. */
export const callTimings: CallTiming[] = [];
(globalThis as { __teCalls?: CallTiming[] }).__teCalls = callTimings;

function serverTiming(h: string | null): Record<string, number> {
  const out: Record<string, number> = {};
  for (const part of (h ?? "").split(",")) {
    const m = /^\s*([\w-]+)\s*;\s*dur=([\d.]+)/.exec(part);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

/** Binary answers unless the page was opened with ?json (benchmarks compare the two). */
const BINARY = typeof location === "undefined" || !new URLSearchParams(location.search).has("json");

export async function call<T>(path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  if (snapshot) { // an offline snapshot page: the answers come from the data it carries
    try { return (await snapshotCall(path, body)) as T; } catch (e) { throw new ApiError(404, (e as Error).message, "error"); }
  }
  const start = performance.now();
  // a POST asks for the binary answer (tensors as raw bytes after a JSON header, see tensor.ts); routes
  // without one answer JSON, told apart by the content type
  const res = await fetch(`api/${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: body === undefined ? {} : { "content-type": "application/json",
      accept: BINARY ? `${BINARY_MEDIA_TYPE}, application/json` : "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  const headers = performance.now();
  if (!res.ok) throw await errorOf(res);
  const binary = (res.headers.get("content-type") ?? "").startsWith(BINARY_MEDIA_TYPE);
  let out: T, bytes: number, done: number;
  if (binary) {
    const buf = await res.arrayBuffer();
    done = performance.now();
    bytes = buf.byteLength;
    out = unpackBinary(buf) as T;
  } else {
    const text = await res.text();
    done = performance.now();
    bytes = text.length;
    out = JSON.parse(text) as T;
  }
  callTimings.push({ path, start, headers, body: done, parsed: performance.now(), bytes, binary,
    server: serverTiming(res.headers.get("server-timing")) });
  if (callTimings.length > 50) callTimings.shift();
  return out;
}

export const api = {
  models: () => call<ModelList>("models"),
  model: (name: string) => call<ModelInfo>(`models/${encodeURIComponent(name)}`),
  trace: (b: TraceIn, s?: AbortSignal) => call<TraceOut>("trace", b, s),
  tensors: (b: TensorsIn, s?: AbortSignal) => call<TensorsOut>("tensors", b, s),
  weights: (b: WeightIn, s?: AbortSignal) => call<TensorsOut>("weights", b, s),
  nextToken: (b: NextTokenIn, s?: AbortSignal) => call<NextTokenOut>("next_token", b, s),
  generate: (b: GenerateIn, s?: AbortSignal) => call<GenerateOut>("generate", b, s),
};

export function specKey(s: TensorSpec): string {
  return `${s.name}|${s.head ?? ""}|${s.position ?? ""}|${s.row ?? ""}|${s.dtype ?? "float16"}`;
}
