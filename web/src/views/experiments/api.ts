// Calls to /api/analysis through the app's one `call` (so the offline snapshot can answer them too).
import { call } from "../../lib/client";
import type { AblateOut, AnalogyOut, HeadsOut, ImportanceOut, LensOut, NeighboursOut, ProjectOut, PruneOut,
  TokenArg } from "./types";

interface Input { model: string; ids: number[] }

export const analysis = {
  lens: (b: Input & { positions: number[]; top: number }) => call<LensOut>("analysis/lens", b),
  ablate: (b: Input & { heads: [number, number][]; mode: "zero" | "mean"; top: number }) =>
    call<AblateOut>("analysis/ablate", b),
  importance: (b: Input & { mode: "zero" | "mean" }) => call<ImportanceOut>("analysis/importance", b),
  prune: (b: Input & { mode: "zero" | "mean"; max_heads: number | null; recompute: boolean }) =>
    call<PruneOut>("analysis/prune", b),
  heads: (b: Input & { reference: boolean }) => call<HeadsOut>("analysis/heads", b),
  neighbours: (b: { model: string; token: TokenArg; n: number }) => call<NeighboursOut>("analysis/neighbours", b),
  analogy: (b: { model: string; positive: TokenArg[]; negative: TokenArg[]; n: number }) =>
    call<AnalogyOut>("analysis/analogy", b),
  project: (b: { model: string; tokens: TokenArg[] }) => call<ProjectOut>("analysis/project", b),
};

/** Parse "king, man" or "' king', 42" into tokens: quoted strings keep their spaces, bare numbers are ids. */
export function parseTokens(s: string): TokenArg[] {
  const out: TokenArg[] = [];
  for (const m of s.matchAll(/'([^']*)'|"([^"]*)"|([^,]+)/g)) {
    const q = m[1] ?? m[2];
    if (q !== undefined) { if (q) out.push(q); continue; }
    const bare = m[3].trim();
    if (!bare) continue;
    out.push(/^\d+$/.test(bare) ? Number(bare) : " " + bare);
  }
  return out;
}
