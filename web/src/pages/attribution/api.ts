// Calls to /api/attribution through the app's one `call` (so an offline snapshot can answer them later), and the
// patching's streamed answer: progress lines after each batch of patched runs, then the result. Aborting the
// signal closes the connection, and the server stops the runs at its next batch.
import { ApiError, apiError, call, errorOf } from "../../lib/client";
import type { AttributeIn, AttributeOut, PatchIn, PatchLine, PatchOut, TokensIn, TokensOut } from "../../lib/generated/api";
import { snapshot } from "../../snapshot/static";

const NDJSON = "application/x-ndjson";

export const why = {
  attribute: (b: AttributeIn, s?: AbortSignal) => call<AttributeOut>("attribution/attribute", b, s),
  tokens: (b: TokensIn, s?: AbortSignal) => call<TokensOut>("attribution/tokens", b, s),
  patch: patchStreamed,
};

/** The lines of a streamed answer as they arrive (a body without a stream reader is read whole). */
async function* lines(res: Response): AsyncGenerator<string> {
  const reader = res.body?.getReader?.();
  if (!reader) {
    yield* (await res.text()).split("\n").filter(Boolean);
    return;
  }
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line) yield line;
    }
  }
  if (buf.trim()) yield buf;
}

/** Activation patching, with `onProgress(done, total)` told after each batch of patched runs. */
export async function patchStreamed(b: PatchIn, onProgress: (done: number, total: number) => void,
  signal?: AbortSignal): Promise<PatchOut> {
  if (snapshot) return call<PatchOut>("attribution/patch", b, signal); // the snapshot says what it lacks
  const res = await fetch("api/attribution/patch", {
    method: "POST", headers: { "content-type": "application/json", accept: NDJSON }, body: JSON.stringify(b), signal,
  });
  if (!res.ok) throw await errorOf(res);
  for await (const text of lines(res)) {
    const line = JSON.parse(text) as PatchLine;
    if (line.progress) onProgress(line.progress.done, line.progress.total);
    else if (line.result) return line.result;
    else if (line.error) throw apiError(line.error.status, line.error);
  }
  throw new ApiError(502, "the patching's answer ended before its result");
}
