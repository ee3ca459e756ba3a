/**
 * The phases the agent session participant tracks, indexed for its walks: every tracked
 * phase, the phases of each rollout (a retire or a scoped export touches only its own) and the
 * ones that block a prepare. The three change together here, so they stay consistent.
 *
 * @module
 */
import { captureKey, type EpisodeId } from "../../identity/episode-id.js";
import { scopeInKeyOrder, sortedScopeKeys } from "../../identity/scope-keys.js";
import { compareStrings } from "../../util/compare-strings.js";
import { indexAdd, indexDelete } from "../../util/multimap.js";
import type { SessionPhase } from "./session-phase.js";

/** Orders phases by capture key, ties by session key: the order a commit lists its records in. */
function byKeys(a: SessionPhase, b: SessionPhase): number {
  return compareStrings(a.captureKey, b.captureKey) || compareStrings(a.key, b.key);
}

/** The tracked phases of the agent's sessions, by rollout and by whether they block. */
export class TrackedSessions implements Iterable<SessionPhase> {
  readonly #all = new Set<SessionPhase>();
  readonly #byRollout = new Map<string, Set<SessionPhase>>();
  readonly #blocking = new Set<SessionPhase>();
  readonly #isRestart: (s: SessionPhase) => boolean;

  /** @param isRestart whether a phase's episode is a restart (a running restart never blocks) */
  constructor(isRestart: (s: SessionPhase) => boolean) {
    this.#isRestart = isRestart;
  }

  /** Number of tracked phases. */
  get size(): number {
    return this.#all.size;
  }

  /** Number of tracked phases that block a prepare. */
  get blockingCount(): number {
    return this.#blocking.size;
  }

  /** The tracked phases, in the order they were tracked. */
  [Symbol.iterator](): IterableIterator<SessionPhase> {
    return this.#all.values();
  }

  /** The tracked phases that block a prepare. */
  blocking(): IterableIterator<SessionPhase> {
    return this.#blocking.values();
  }

  /** Tracks `s`: it becomes its entry's phase. */
  track(s: SessionPhase): void {
    s.owner.phase = s;
    this.#all.add(s);
    indexAdd(this.#byRollout, s.episode.rollout_id, s);
    this.refresh(s);
  }

  /** Stops tracking `s` (no-op when it no longer tracks its session). */
  untrack(s: SessionPhase): void {
    if (!s.tracked) return;
    s.owner.phase = null;
    this.#all.delete(s);
    indexDelete(this.#byRollout, s.episode.rollout_id, s);
    if (s.blocking) {
      s.blocking = false;
      this.#blocking.delete(s);
    }
  }

  /**
   * Recomputes whether `s` blocks, after its state, marks or restart status changed: it blocks
   * while tracked and retired, closing, or running (unless its episode is a restart).
   */
  refresh(s: SessionPhase): void {
    const blocking =
      s.tracked && (s.retired || s.closing || (s.state === "running" && !this.#isRestart(s)));
    if (blocking === s.blocking) return;
    s.blocking = blocking;
    if (blocking) this.#blocking.add(s);
    else this.#blocking.delete(s);
  }

  /** The tracked phases of `episode`'s attempt and the earlier attempts of its rollout. */
  coveredBy(episode: EpisodeId): SessionPhase[] {
    return [...(this.#byRollout.get(episode.rollout_id) ?? [])].filter(
      (s) => s.episode.attempt <= episode.attempt,
    );
  }

  /**
   * The phases `include` accepts, in capture-key order (ties by session key), so a commit
   * reply's sorted episode list needs no sort. With a scope, walked in the scope's key order (a
   * controller sends it sorted): no sort of thousands of sessions.
   */
  inScope(
    scope: readonly EpisodeId[] | null,
    include: (s: SessionPhase) => boolean,
  ): SessionPhase[] {
    if (scope === null) return [...this.#all].filter(include).sort(byKeys);
    const chosen: SessionPhase[] = [];
    const episodes = scopeInKeyOrder(scope);
    const keys = sortedScopeKeys(scope);
    for (let i = 0; i < episodes.length; i++) {
      const sessions = this.#byRollout.get((episodes[i] as EpisodeId).rollout_id);
      if (sessions === undefined) continue;
      const first = chosen.length;
      for (const s of sessions) {
        if (s.captureKey === keys[i] && include(s)) chosen.push(s);
      }
      // Several sessions of one attempt (rare): ordered among themselves by session key.
      if (chosen.length - first > 1) {
        const group = chosen.splice(first).sort(byKeys);
        for (const s of group) chosen.push(s);
      }
    }
    return chosen;
  }

  /** The attempts of restored sessions not yet claimed, in capture-key order. */
  restoredPending(): EpisodeId[] {
    return [...this.#all]
      .filter((s) => s.restoredPending)
      .map((s) => s.episode)
      .sort((a, b) => compareStrings(captureKey(a), captureKey(b)));
  }
}
