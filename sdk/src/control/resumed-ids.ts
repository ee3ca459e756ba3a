/** How many resumed checkpoint IDs are remembered for `stale_checkpoint`. */
export const REMEMBERED_RESUMED_IDS = 64;

/**
 * The most recently resumed checkpoint IDs (at most {@link REMEMBERED_RESUMED_IDS}), so a
 * delayed call naming one is refused as stale instead of starting it again.
 */
export class ResumedIds {
  // A Set iterates in insertion order: the first entry is the oldest.
  readonly #ids = new Set<string>();

  /** Whether `id` is one of the remembered resumed IDs. */
  has(id: string): boolean {
    return this.#ids.has(id);
  }

  /** Remembers `id` as the newest resumed ID, forgetting the oldest beyond the bound. */
  remember(id: string): void {
    this.#ids.delete(id);
    this.#ids.add(id);
    while (this.#ids.size > REMEMBERED_RESUMED_IDS) {
      const oldest = this.#ids.values().next().value as string;
      this.#ids.delete(oldest);
    }
  }
}
