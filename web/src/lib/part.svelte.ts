// A part of the page that is a chunk of its own (vite.config.ts), loaded the first time it is shown (or asked
// for ahead, with load()): the first page carries and runs only what it draws. src/parts.ts lists them.
import type { Component } from "svelte";

type AnyComponent = Component<any>;

export class Part {
  /** The part's component, once its chunk has loaded. */
  component = $state.raw<AnyComponent | null>(null);
  /** Why its chunk did not load (the server gone, or rebuilt since this page loaded), if it did not. */
  failed = $state.raw<Error | null>(null);
  readonly #importer: () => Promise<{ default: AnyComponent }>;
  #loading: Promise<void> | null = null;

  constructor(importer: () => Promise<{ default: AnyComponent }>) {
    this.#importer = importer;
  }

  /** Load the chunk (once; again after a failure). */
  load(): Promise<void> {
    this.#loading ??= this.#importer().then(
      (m) => { this.component = m.default; this.failed = null; },
      (e: unknown) => { this.failed = e instanceof Error ? e : new Error(String(e)); this.#loading = null; },
    );
    return this.#loading;
  }
}
