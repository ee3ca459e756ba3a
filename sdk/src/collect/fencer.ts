/**
 * Fences lost attempts in the background: a `/run` that got no reply may still be running, so
 * before its row is sent again its attempt is retired everywhere. Lost attempts are retired in
 * batches (whatever accumulated while the previous batch ran); a failed retire is retried with
 * a growing back-off, and after {@link FENCE_TRIES} tries its rows are settled as not fenced.
 */
import type { Logger } from "pino";
import type { EpisodeId } from "../identity/episode-id.js";
import { deferred, type Deferred } from "../util/deferred.js";

/** Retire tries per batch before its rows are given up on. */
export const FENCE_TRIES = 8;
const FIRST_BACKOFF_MS = 500;
const MAX_BACKOFF_MS = 30_000;

/** What a {@link Fencer} calls. */
export interface FencerHooks<T> {
  /** Retires the attempts everywhere; throws when that failed. */
  retire(episodes: readonly EpisodeId[]): Promise<void>;
  /** Told each item once its attempt was retired (`fenced`), or given up on. */
  settled(item: T, fenced: boolean): Promise<void> | void;
  /** Told after each item stopped counting in {@link Fencer.size}. */
  changed(): void;
  readonly logger: Logger;
}

/** Background batches of retires. */
export class Fencer<T> {
  #waiting: { episode: EpisodeId; item: T }[] = [];
  #running = 0;
  #loop: Promise<void> | null = null;
  #stopped = false;
  #wakeBackoff: Deferred<void> = deferred();

  constructor(readonly hooks: FencerHooks<T>) {}

  /** Attempts waiting or being retired. */
  get size(): number {
    return this.#waiting.length + this.#running;
  }

  /** Fences `episode`; `item` goes back through `settled`. */
  add(episode: EpisodeId, item: T): void {
    if (this.#stopped) return;
    this.#waiting.push({ episode, item });
    this.#loop ??= this.#drain().finally(() => {
      this.#loop = null;
    });
  }

  /** Resolves once nothing is waiting or being retired. */
  async idle(): Promise<void> {
    while (this.#loop !== null) await this.#loop;
  }

  /** Stops retrying; what is waiting stays unsettled (a resumed run fences it from the log). */
  stop(): void {
    this.#stopped = true;
    this.#wakeBackoff.resolve();
  }

  async #drain(): Promise<void> {
    while (this.#waiting.length > 0 && !this.#stopped) {
      const batch = this.#waiting;
      this.#waiting = [];
      this.#running = batch.length;
      let fenced = false;
      for (let tries = 1; tries <= FENCE_TRIES && !this.#stopped; tries++) {
        try {
          await this.hooks.retire(batch.map((entry) => entry.episode));
          fenced = true;
          break;
        } catch (error) {
          this.hooks.logger.warn(
            { err: error, tries, rollouts: batch.length },
            "fencing lost attempts failed; retrying",
          );
          await this.#backoff(Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** (tries - 1)));
        }
      }
      if (this.#stopped) return;
      // Counted until settled: the collector ends once nothing is in flight or fencing, so a
      // row must be back in its queue before it stops counting here.
      for (const entry of batch) {
        try {
          await this.hooks.settled(entry.item, fenced);
        } finally {
          this.#running--;
          this.hooks.changed();
        }
      }
    }
  }

  async #backoff(ms: number): Promise<void> {
    this.#wakeBackoff = deferred();
    const timer = setTimeout(() => this.#wakeBackoff.resolve(), ms);
    await this.#wakeBackoff.promise;
    clearTimeout(timer);
  }
}
