// A full tensor cut by head, position and row as the server cuts it (src/transformer_explainer/slicing.py),
// by the same tables, generated from names.py: which dim a head index picks, and by which rule (HEAD_DIMS:
// a query head itself, or the key/value head it reads under grouped-query attention), and which dim a
// position picks (POSITION_DIMS). No family is named here: each tensor carries its dims.
import { HEAD_DIMS, POSITION_DIMS } from "../lib/generated/names";
import type { Tensor } from "../lib/tensor";

/** A request the data cannot answer; the message says why, in the server's words. */
export class SnapshotError extends Error {
  status = 404;
}

/** The head counts a head index is mapped with. */
export interface Heads {
  nHead: number;
  nKvHeads: number;
}

const prod = (xs: number[]) => xs.reduce((a, b) => a * b, 1);

/** The key/value head that query head `head` reads (names.kv_head_of): query heads g*H/G .. (g+1)*H/G - 1
 *  share key/value head g. */
export function kvHeadOf(head: number, nHead: number, nKvHeads: number): number {
  return Math.floor(head / Math.floor(nHead / nKvHeads));
}

/** `t` with index `i` (negative: from the end) of dim `dim` taken, that dim removed; `what` names the
 *  index in the messages. */
export function take(t: Tensor, dim: string, i: number, what: string): Tensor {
  const axis = t.dims.indexOf(dim);
  if (axis < 0) throw new SnapshotError(`${t.name} has no ${what} dimension (its dims are ${t.dims.join(", ")})`);
  const n = t.shape[axis], j = i < 0 ? n + i : i;
  if (j < 0 || j >= n) throw new SnapshotError(`${what} ${i} is out of range for ${t.name} (0..${n - 1})`);
  const outer = prod(t.shape.slice(0, axis)), inner = prod(t.shape.slice(axis + 1));
  const data = new Float32Array(outer * inner);
  for (let o = 0; o < outer; o++) data.set(t.data.subarray((o * n + j) * inner, (o * n + j + 1) * inner), o * inner);
  const keep = (_: unknown, k: number) => k !== axis;
  return { name: t.name, dims: t.dims.filter(keep), shape: t.shape.filter(keep), data };
}

/** The slice of query head `head`, and the key/value head it was taken at (for a dim whose rule maps it). */
export function takeHead(t: Tensor, head: number, heads: Heads): { tensor: Tensor; kvHead: number | null } {
  const dim = Object.keys(HEAD_DIMS).find((d) => t.dims.includes(d));
  if (dim === undefined) throw new SnapshotError(`${t.name} has no head dimension (its dims are ${t.dims.join(", ")})`);
  const rule = HEAD_DIMS[dim];
  switch (rule) {
    case "query_head":
      return { tensor: take(t, dim, head, "head"), kvHead: null };
    case "kv_head_of_query": {
      const H = heads.nHead;
      if (head < -H || head >= H) throw new SnapshotError(`head ${head} is out of range for ${t.name} (0..${H - 1})`);
      const g = kvHeadOf((head + H) % H, H, heads.nKvHeads);
      return { tensor: take(t, dim, g, "key/value head"), kvHead: g };
    }
    default: {
      const unknown: never = rule; // a rule names.py added: this file must learn it (svelte-check says so)
      throw new SnapshotError(`no slicing rule ${String(unknown)}`);
    }
  }
}

/** The slice at `position` of the first position dim `t` has (query positions, else key positions). */
export function takePosition(t: Tensor, position: number): Tensor {
  return take(t, POSITION_DIMS.find((d) => t.dims.includes(d)) ?? POSITION_DIMS[0], position, "position");
}

/** Row `row` of a weight: its first dim. */
export function takeRow(t: Tensor, row: number): Tensor {
  if (!t.dims.length) throw new SnapshotError(`${t.name} has no rows`);
  return take(t, t.dims[0], row, "row");
}
