/**
 * The input's rollouts in order: each task row `repeats` times, each as its first attempt,
 * skipping the rollouts that need no send from the input (ended already, or restored or fenced
 * at the start). The input is read once, as the run goes.
 *
 * @see docs/collect.md
 */
import { episodeId, type EpisodeId } from "../identity/episode-id.js";
import { rowRolloutId } from "./resume-plan.js";
import type { TaskRow } from "./task-rows.js";

/** A rollout of the input: its row, which repeat, and its first attempt. */
export interface InputRollout {
  readonly row: TaskRow;
  readonly repeat: number;
  readonly episode: EpisodeId;
}

/** What {@link InputRollouts} reads and skips. */
export interface InputRolloutsOptions {
  /** The input's rows, in order (see `readTaskRows`). */
  readonly rows: AsyncGenerator<TaskRow>;
  /** The run's ID, the prefix of every rollout ID. */
  readonly runId: string;
  /** Rollouts per task. */
  readonly repeats: number;
  /** Whether the rollout needs no send from the input. */
  readonly skip: (rolloutId: string) => boolean;
}

/** The rollouts of the input not ended, restored or fenced already. */
export class InputRollouts {
  readonly #options: InputRolloutsOptions;
  #row: TaskRow | null = null;
  #repeat = 0;
  #done = false;

  constructor(options: InputRolloutsOptions) {
    this.#options = options;
  }

  /** Whether the input has no rollout left. */
  get done(): boolean {
    return this.#done;
  }

  /** The next rollout to send from the input, or null at its end. One call at a time. */
  async next(): Promise<InputRollout | null> {
    const { rows, runId, repeats, skip } = this.#options;
    for (;;) {
      if (this.#row === null || this.#repeat >= repeats) {
        const next = await rows.next();
        if (next.done === true) {
          this.#done = true;
          return null;
        }
        this.#row = next.value;
        this.#repeat = 0;
      }
      const row = this.#row;
      const repeat = this.#repeat++;
      const rolloutId = rowRolloutId(runId, row.index, repeat);
      // The input is read once, in order: only rows queued at the start can come up again.
      if (skip(rolloutId)) continue;
      return { row, repeat, episode: episodeId(rolloutId, 0) };
    }
  }

  /** Stops reading the input (closes its file). */
  async close(): Promise<void> {
    await this.#options.rows.return(undefined);
  }
}
