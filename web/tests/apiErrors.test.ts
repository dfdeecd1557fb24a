// The server's errors are read in one place (lib/client.ts: apiError, errorOf): an error answer's body, a streamed
// patching's error line and a failed download job all become the same ApiError (the English detail, the code, its
// params), which errorText words in the learner's language; a body that is not JSON keeps the status line. No other
// module reads an error body or builds an ApiError from one.
import { describe, expect, it } from "vitest";
import { ApiError, apiError, errorOf } from "../src/lib/client";
import { errorText } from "../src/lib/errorText";

const sources = import.meta.glob<string>(["../src/**/*.ts", "../src/**/*.svelte"], { eager: true, query: "?raw", import: "default" });

describe("the server's errors", () => {
  it("an error answer's body", async () => {
    const body = { detail: "the text has 2000 tokens; this model reads at most 1024", code: "text_too_long",
      params: { tokens: 2000, limit: 1024, context: 1024 } };
    const e = await errorOf(new Response(JSON.stringify(body), { status: 422, statusText: "Unprocessable Content",
      headers: { "content-type": "application/json" } }));
    expect(e).toBeInstanceOf(ApiError);
    expect([e.status, e.message, e.code, e.params]).toEqual([422, body.detail, "text_too_long", body.params]);
    expect(errorText("en", e)).not.toBe(body.detail); // worded from the catalogue, not the server's English
  });
  it("a body that is not JSON, or not the server's shape, keeps the status line", async () => {
    for (const text of ["<html>Bad Gateway</html>", "null", "\"oops\"", "{}"]) {
      const e = await errorOf(new Response(text, { status: 502, statusText: "Bad Gateway" }));
      expect([e.status, e.message, e.code, e.params]).toEqual([502, "502 Bad Gateway", null, {}]);
    }
  });
  it("an error inside an answer (a streamed line, a download job)", () => {
    const line = { status: 422, detail: "too long", code: "prompt_too_long", params: { tokens: 9, limit: 8 } };
    const e = apiError(line.status, line);
    expect([e.status, e.message, e.code, e.params]).toEqual([422, "too long", "prompt_too_long", { tokens: 9, limit: 8 }]);
    const job = apiError(0, { detail: null, code: null, params: {} });
    expect([job.status, job.message, job.code, job.params]).toEqual([0, "", null, {}]);
  });
  it("a live run's state is worded in the learner's language, not the server's English word", () => {
    const statuses = ["starting", "running", "paused", "stopping", "finished", "stopped", "failed"];
    for (const status of statuses) {
      const e = apiError(409, { detail: `the live run abc is ${status}`, code: "induction_state", params: { run: "abc", status } });
      const zh = errorText("zh", e);
      expect(zh).toContain("abc");
      expect(zh).not.toMatch(/[a-z]{4,}/); // no English status word left in the 中文 sentence
      expect(errorText("en", e)).toContain(status);
    }
  });
  it("are read nowhere else", () => {
    const elsewhere = Object.entries(sources)
      .filter(([path, text]) => !path.endsWith("/lib/client.ts") && !path.includes("/generated/")
        && (/\bas ErrorOut\b/.test(text) || /new ApiError\([^)]*\.(detail|code|error_code)\b/.test(text)))
      .map(([path]) => path);
    expect(elsewhere).toEqual([]);
  });
});
