// The answers of /api/analysis (see src/transformer_explainer/analysis/api.py): plain JSON, NaN as null.

export interface TokenRef { token: string; id: number }
export interface TokenProb extends TokenRef { prob: number }

export interface LensColumn { position: number; top: TokenProb[]; target_rank: number; target_prob: number }
export interface LensOut {
  model: string;
  tokens: string[];
  token_ids: number[];
  positions: number[];
  position_tokens: string[];
  targets: TokenRef[];
  layers: { name: string; label: string; positions: LensColumn[] }[];
}

export interface AblateOut {
  model: string;
  heads: [number, number][];
  mode: "zero" | "mean";
  loss_before: number | null;
  loss_after: number | null;
  loss_change: number | null;
  kl: number;
  before: TokenProb[];
  after: TokenProb[];
  changes: (TokenRef & { before: number; after: number })[];
}

export interface ImportanceOut {
  model: string;
  n_layer: number;
  n_head: number;
  mode: "zero" | "mean";
  clean_loss: number;
  loss_change: number[][];
  kl: number[][];
  ranked: [number, number][];
}

export interface RolesOut { source: string; counts: Record<string, number>; scores: Record<string, (number | null)[][]> }
export interface HeadsOut {
  model: string;
  n_layer: number;
  n_head: number;
  roles: string[];
  text: RolesOut;
  text_role_of: (string | null)[][];
  reference: RolesOut | null;
  reference_role_of: (string | null)[][] | null;
  stats: { entropy: (number | null)[][]; normalized_entropy: (number | null)[][]; mean_distance: (number | null)[][];
    queries: number };
}

export interface Neighbour extends TokenRef { similarity: number }
export interface NeighboursOut { model: string; token: TokenRef; neighbours: Neighbour[] }
export interface AnalogyOut { model: string; positive: TokenRef[]; negative: TokenRef[]; neighbours: Neighbour[] }
export interface ProjectOut { model: string; points: (TokenRef & { x: number; y: number })[]; explained_variance: number[] }

export type TokenArg = string | number;

export interface PruneOut {
  model: string;
  mode: "zero" | "mean";
  recompute: boolean;
  clean_loss: number;
  steps: { head: [number, number]; loss: number | null }[];
}
