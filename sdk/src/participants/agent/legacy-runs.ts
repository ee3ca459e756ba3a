/**
 * The legacy `/run` episodes of an agent with session hooks, as its participant sees them: the
 * episodes live on the steps, the ones marked restart, and the legacy boundaries a restore
 * installed until the replacement `/run` consumes them. The session `run:<rollout>` of each is
 * the participant's to track.
 *
 * @module
 */
import { AttemptSet } from "../../control/attempt-keys.js";
import { captureKey, type EpisodeId } from "../../identity/episode-id.js";
import type { EpisodeSteps, BoundaryState, StepMode } from "../../steps/episode-steps.js";
import type { JsonValue } from "../../json/json-value.js";

/** A legacy `/run` episode: the steps of the run and its session. */
export interface LegacyRunHandle {
  readonly episode: EpisodeId;
  readonly captureKey: string;
  /** The run's session key, `run:<rollout_id>`. */
  readonly sessionKey: string;
  /** Aborted by retire or the request's signal. */
  readonly signal: AbortSignal;
  /** The restored legacy boundary, handed out once; null: start from the input. */
  continuation(): JsonValue | null;
  /** Records a boundary; inside a checkpoint the run parks here until resume. */
  boundary(state: BoundaryState): Promise<void>;
  /** Runs one step in `wait` or `replay` mode. */
  step<T>(mode: StepMode, fn: (signal: AbortSignal) => T | Promise<T>): Promise<T>;
  /** Makes the run a restart once no checkpoint is open. */
  markRestart(signal?: AbortSignal): Promise<void>;
  /** The run ended; removes its session. Idempotent; call in `finally`. */
  end(): void;
}

/** What the participant does when a legacy run changes. */
export interface LegacyRunEvents {
  /** The run became a restart (its session no longer blocks). */
  restartMarked(): void;
  /** The run ended (after its episode left the steps). */
  ended(): void;
}

/** The live legacy episodes, their restart marks and the restored legacy boundaries. */
export class LegacyRuns {
  readonly #steps: EpisodeSteps;
  /** Restored legacy boundaries by session key, until the replacement `/run` consumes one. */
  readonly #restored = new Map<string, JsonValue>();
  /** Legacy episodes tracked by the steps, by capture key (indexed by rollout). */
  readonly #live = new AttemptSet();
  /** Capture keys of legacy episodes marked restart. */
  readonly #restarts = new Set<string>();

  constructor(steps: EpisodeSteps) {
    this.#steps = steps;
  }

  /** Number of live legacy episodes. */
  get size(): number {
    return this.#live.size;
  }

  /** The capture keys of the live episodes marked restart. */
  restarts(): IterableIterator<string> {
    return this.#restarts.values();
  }

  /** Whether the episode of capture key `key` is marked restart. */
  isRestart(key: string): boolean {
    return this.#restarts.has(key);
  }

  /** The capture keys of live legacy episodes of `episode`'s attempt and earlier ones. */
  covered(episode: EpisodeId): string[] {
    return this.#live.covered(episode);
  }

  /** The restored legacy boundary of session `key` not consumed yet, or undefined. */
  restoredBoundary(key: string): JsonValue | undefined {
    return this.#restored.get(key);
  }

  /** Keeps a restored legacy boundary for the replacement `/run` of session `key`. */
  keepRestored(key: string, boundary: JsonValue): void {
    this.#restored.set(key, boundary);
  }

  /** Drops the restored legacy boundary of session `key`, if any. */
  forgetRestored(key: string): void {
    this.#restored.delete(key);
  }

  /**
   * Begins the episode on the steps with the restored boundary of `sessionKey` (consumed once
   * the episode began) and records it live.
   * @throws what {@link EpisodeSteps.begin} throws; nothing is recorded then
   */
  begin(
    episode: EpisodeId,
    sessionKey: string,
    options: { readonly signal?: AbortSignal; readonly deadlineTs?: number | null },
    events: LegacyRunEvents,
  ): LegacyRunHandle {
    const ck = captureKey(episode);
    const steps = this.#steps;
    const signal = steps.begin(ck, {
      continuation: this.#restored.get(sessionKey) ?? null,
      deadlineTs: options.deadlineTs ?? null,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
    this.#restored.delete(sessionKey);
    this.#live.add(episode);
    let ended = false;
    return {
      episode,
      captureKey: ck,
      sessionKey,
      signal,
      continuation: () => steps.continuation(ck),
      boundary: (state) => steps.boundary(ck, state),
      step: (mode, fn) => steps.step(ck, mode, fn),
      markRestart: async (markSignal) => {
        await steps.markRestart(ck, markSignal);
        if (!this.#live.has(ck)) return;
        this.#restarts.add(ck);
        events.restartMarked();
      },
      end: () => {
        if (ended) return;
        ended = true;
        this.#live.delete(ck);
        this.#restarts.delete(ck);
        steps.end(ck);
        events.ended();
      },
    };
  }
}
