// Calls to /api/analysis through the app's one `call` (so the offline snapshot can answer them too),
// typed by the generated schema types.
import { call } from "../../lib/client";
import type {
  AblateIn, AblateOut, AnalogyIn, AnalogyOut, HeadsIn, HeadsOut, ImportanceIn, ImportanceOut, LensIn, LensOut,
  NeighboursIn, NeighboursOut, ProjectIn, ProjectOut, PruneIn, PruneOut,
} from "../../lib/generated/api";

/** A token as the explorer takes it: its text (leading space kept) or its id. */
export type TokenArg = NeighboursIn["token"];

export const analysis = {
  lens: (b: LensIn) => call<LensOut>("analysis/lens", b),
  ablate: (b: AblateIn) => call<AblateOut>("analysis/ablate", b),
  importance: (b: ImportanceIn) => call<ImportanceOut>("analysis/importance", b),
  prune: (b: PruneIn) => call<PruneOut>("analysis/prune", b),
  heads: (b: HeadsIn) => call<HeadsOut>("analysis/heads", b),
  neighbours: (b: NeighboursIn) => call<NeighboursOut>("analysis/neighbours", b),
  analogy: (b: AnalogyIn) => call<AnalogyOut>("analysis/analogy", b),
  project: (b: ProjectIn) => call<ProjectOut>("analysis/project", b),
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
