// The JSON API, typed by the generated schema types. Every call goes to this page's own origin.
import type {
  ErrorOut, GenerateIn, GenerateOut, ModelInfo, ModelList, NextTokenIn, NextTokenOut, TensorSpec, TensorsIn,
  TensorsOut, TraceIn, TraceOut, WeightIn,
} from "./generated/api";
import { snapshot, snapshotCall } from "../snapshot/static";

export class ApiError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

export async function call<T>(path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  if (snapshot) { // an offline snapshot page: the answers come from the data it carries
    try { return (await snapshotCall(path, body)) as T; } catch (e) { throw new ApiError(404, (e as Error).message); }
  }
  const res = await fetch(`api/${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  if (!res.ok) {
    let msg = `${res.status} ${res.statusText}`;
    try {
      msg = ((await res.json()) as ErrorOut).detail || msg;
    } catch {
      /* not JSON: keep the status line */
    }
    throw new ApiError(res.status, msg);
  }
  return (await res.json()) as T;
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
