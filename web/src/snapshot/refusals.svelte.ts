// What the offline snapshot has refused to answer, for whoever waits on an answer that will not come: the lesson
// card (components/Lesson.svelte) says that its step cannot be shown from the file, and why, and offers to skip it.
// `seq` counts the refusals; `last` is the latest one's reason (a SnapshotError's message).
export const refusals = $state<{ seq: number; last: Error | null }>({ seq: 0, last: null });

/** Note that the snapshot could not answer a call, and why. */
export function refused(e: Error): void {
  refusals.seq += 1;
  refusals.last = e;
}
