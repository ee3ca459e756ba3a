/**
 * The participant of an agent without session hooks: its rollouts are never
 * captured, only reported as restarts while a request of theirs runs, and stopped by a retire.
 *
 * @module
 */
import type { Logger } from "pino";
import { Participant, type CloseAdmissionRequest } from "../../control/participant.js";
import { CheckpointError, EpisodeError } from "../../errors.js";
import type { EpisodeId } from "../../identity/episode-id.js";
import { deferred, type Deferred } from "../../util/deferred.js";
import { prepareReport, type PrepareReport } from "../../wire/control.js";
import { AGENT_KIND, AgentSessionRecordSchema, type AgentSessionRecord } from "./agent-records.js";

/** Options of a {@link RestartOnlyAgentParticipant}. */
export interface RestartOnlyAgentParticipantOptions {
  /**
   * Frees one seeded session of a retired attempt: the agent's retire hook, which for a
   * restart-only agent releases the session through its close hook. Must tolerate a key with
   * no state.
   */
  readonly freeSession: (input: { sessionKey: string; signal: AbortSignal }) => Promise<void>;
  /** Where retire progress and failures are logged. */
  readonly logger?: Logger;
}

/** One tracked data request (a `/run` or a `/v1/responses` call). */
export interface TrackedRequest {
  /** Aborted (with `stale_attempt`) when a retire stops the request's attempt. */
  readonly signal: AbortSignal;
  /** Untracks the request; idempotent. Call it once the handler has settled. */
  done(): void;
}

/** A seed in progress, from {@link RestartOnlyAgentParticipant.enterSeed}. */
export interface SeedTicket {
  /**
   * Records the seeded session so a retire of its attempt frees it. Throws `stale_attempt` when
   * the attempt was retired meanwhile; the session is recorded anyway, so the retire that is
   * waiting for this seed frees it.
   */
  register(): void;
  /** Ends the seed (however it went); idempotent. */
  leave(): void;
}

interface Tracked {
  readonly controller: AbortController;
  readonly finished: Deferred<void>;
}

interface KeyEntry {
  readonly episode: EpisodeId;
  readonly requests: Set<Tracked>;
}

interface Seed {
  readonly episode: EpisodeId;
  readonly left: Deferred<void>;
}

/**
 * The `agent` participant of an agent that cannot export its sessions. Nothing is ever
 * exported or restored: every rollout with a request in flight is a restart, which never
 * blocks a prepare, and a commit naming one is refused by the control plane (409
 * `restart_in_scope`, checked against {@link readiness}'s `restarts`).
 *
 * ## Rules (see docs/agent.md)
 * - Rollouts keep running through a checkpoint; closing admission only holds new seeds, so the
 *   restarts a prepare reports cannot gain a seeded rollout before its commit.
 * - A retire aborts the tracked requests of the attempt and earlier ones (each once), waits for
 *   them and for their seeds in progress, then frees their seeded sessions via `freeSession`.
 *   Cut short, it leaves what remains tracked; a retry waits again without aborting twice.
 *
 * Everything is indexed by rollout, so a retire touches only its own rollout.
 */
export class RestartOnlyAgentParticipant extends Participant<AgentSessionRecord> {
  readonly kind = AGENT_KIND;
  readonly recordSchema = AgentSessionRecordSchema;

  readonly #freeSession: RestartOnlyAgentParticipantOptions["freeSession"];
  readonly #logger: Logger | null;

  /** Admission: false while a checkpoint is open (seeds wait). */
  #open = true;
  #opened: Deferred<void> = deferred<void>();
  /** Rollout ID → capture key → the requests tracked under it. */
  readonly #requests = new Map<string, Map<string, KeyEntry>>();
  /** Rollout ID → seeds in progress. */
  readonly #seeds = new Map<string, Set<Seed>>();
  /** Session key → the attempt that seeded it. */
  readonly #sessions = new Map<string, EpisodeId>();
  /** Rollout ID → its seeded session keys. */
  readonly #sessionsByRollout = new Map<string, Set<string>>();

  constructor(options: RestartOnlyAgentParticipantOptions) {
    super();
    this.#freeSession = options.freeSession;
    this.#logger = options.logger ?? null;
  }

  // ---- Data plane ----------------------------------------------------------------------

  /**
   * Tracks one request of `episode` under `key` for its duration (several per key allowed).
   *
   * @throws EpisodeError `stale_attempt` when the attempt is retired
   */
  track(key: string, episode: EpisodeId): TrackedRequest {
    this.retired.check(episode);
    let byKey = this.#requests.get(episode.rollout_id);
    if (byKey === undefined) this.#requests.set(episode.rollout_id, (byKey = new Map()));
    let entry = byKey.get(key);
    const newKey = entry === undefined;
    if (entry === undefined) byKey.set(key, (entry = { episode, requests: new Set() }));
    const request: Tracked = { controller: new AbortController(), finished: deferred<void>() };
    entry.requests.add(request);
    // Requests run during a checkpoint: a new key changes the restarts an open prepare reports.
    if (newKey) this.notify();
    let done = false;
    return {
      signal: request.controller.signal,
      done: () => {
        if (done) return;
        done = true;
        request.finished.resolve();
        this.#untrack(episode.rollout_id, key, request);
      },
    };
  }

  #untrack(rolloutId: string, key: string, request: Tracked): void {
    const byKey = this.#requests.get(rolloutId);
    const entry = byKey?.get(key);
    if (byKey === undefined || entry === undefined) return;
    entry.requests.delete(request);
    if (entry.requests.size > 0) return;
    byKey.delete(key);
    if (byKey.size === 0) this.#requests.delete(rolloutId);
    this.notify();
  }

  /**
   * Enters a seed of `sessionKey` for `episode`: waits while a checkpoint is open, then checks
   * the retired mark. The seed is in progress until {@link SeedTicket.leave}.
   *
   * @throws EpisodeError `stale_attempt` when the attempt is retired; `signal`'s reason when it
   *   aborts the wait
   */
  async enterSeed(
    sessionKey: string,
    episode: EpisodeId,
    signal?: AbortSignal,
  ): Promise<SeedTicket> {
    // Re-check on every wake: another checkpoint may have opened before this seed ran.
    while (!this.#open) await this.#until(this.#opened.promise, signal);
    this.retired.check(episode);
    const rolloutId = episode.rollout_id;
    const seed: Seed = { episode, left: deferred<void>() };
    let seeds = this.#seeds.get(rolloutId);
    if (seeds === undefined) this.#seeds.set(rolloutId, (seeds = new Set()));
    seeds.add(seed);
    let left = false;
    return {
      register: () => {
        this.#remember(sessionKey, episode);
        this.retired.check(episode);
      },
      leave: () => {
        if (left) return;
        left = true;
        const set = this.#seeds.get(rolloutId);
        set?.delete(seed);
        if (set?.size === 0) this.#seeds.delete(rolloutId);
        seed.left.resolve();
      },
    };
  }

  /** Forgets a seeded session the agent closed (a retire no longer frees it). Unknown: no-op. */
  sessionClosed(sessionKey: string): void {
    const episode = this.#sessions.get(sessionKey);
    if (episode === undefined) return;
    this.#sessions.delete(sessionKey);
    const keys = this.#sessionsByRollout.get(episode.rollout_id);
    keys?.delete(sessionKey);
    if (keys?.size === 0) this.#sessionsByRollout.delete(episode.rollout_id);
  }

  #remember(sessionKey: string, episode: EpisodeId): void {
    this.sessionClosed(sessionKey); // a re-seed may move the key to another rollout
    this.#sessions.set(sessionKey, episode);
    let keys = this.#sessionsByRollout.get(episode.rollout_id);
    if (keys === undefined) this.#sessionsByRollout.set(episode.rollout_id, (keys = new Set()));
    keys.add(sessionKey);
  }

  // ---- Control plane -------------------------------------------------------------------

  override closeAdmission(_request: CloseAdmissionRequest): void {
    this.#open = false;
  }

  override openAdmission(): void {
    this.#open = true;
    const opened = this.#opened;
    this.#opened = deferred<void>();
    opened.resolve();
  }

  override ready(): boolean {
    return true;
  }

  override readiness(): PrepareReport {
    const keys: string[] = [];
    for (const byKey of this.#requests.values()) keys.push(...byKey.keys());
    keys.sort();
    return prepareReport({ ready: true, counts: { inflight: keys.length }, restarts: keys });
  }

  /** Nothing is ever captured. (A scope naming a restart is refused by the control plane.) */
  override async export(
    _scope: readonly EpisodeId[] | null,
    _signal: AbortSignal,
  ): Promise<AgentSessionRecord[]> {
    return [];
  }

  override async install(
    records: readonly AgentSessionRecord[],
    _scope: readonly EpisodeId[],
    _signal: AbortSignal,
  ): Promise<void> {
    if (records.length === 0) return;
    throw new CheckpointError(
      "checkpoint_error",
      `a restart-only agent cannot restore rollouts (got ${records.length} record(s)); ` +
        "its rollouts start over",
    );
  }

  /** Nothing is ever restored, so there is nothing to delete (and no mark to leave). */
  override async deleteRestored(_episode: EpisodeId, _signal: AbortSignal): Promise<void> {}

  override async retire(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    // The control plane marked already; marking here too keeps a direct call from racing new work.
    this.retired.mark([episode]);
    const rolloutId = episode.rollout_id;
    // 1. Abort the attempt's requests (each once) and wait until every one has settled.
    for (;;) {
      signal.throwIfAborted();
      const pending: Tracked[] = [];
      for (const [key, entry] of this.#requests.get(rolloutId) ?? []) {
        if (entry.episode.attempt > episode.attempt) continue;
        for (const request of entry.requests) {
          if (!request.controller.signal.aborted) {
            request.controller.abort(EpisodeError.staleAttempt(key, episode.attempt));
          }
          pending.push(request);
        }
      }
      if (pending.length === 0) break;
      this.#logger?.info(
        { rollout: rolloutId, upTo: episode.attempt, requests: pending.length },
        "retire: waiting for aborted requests to settle",
      );
      await this.#until(Promise.all(pending.map((r) => r.finished.promise)), signal);
    }
    // 2. Seeds of the attempt in progress register (or drop) their session first.
    for (;;) {
      signal.throwIfAborted();
      const seeds = [...(this.#seeds.get(rolloutId) ?? [])].filter(
        (seed) => seed.episode.attempt <= episode.attempt,
      );
      if (seeds.length === 0) break;
      await this.#until(Promise.all(seeds.map((seed) => seed.left.promise)), signal);
    }
    // 3. Free each seeded session; it stays recorded until freed, so a retry frees it again.
    const keys = [...(this.#sessionsByRollout.get(rolloutId) ?? [])].filter(
      (key) => (this.#sessions.get(key)?.attempt ?? Infinity) <= episode.attempt,
    );
    for (const sessionKey of keys) {
      signal.throwIfAborted();
      const seededBy = this.#sessions.get(sessionKey);
      if (seededBy === undefined) continue; // closed meanwhile
      try {
        await this.#freeSession({ sessionKey, signal });
      } catch (error) {
        this.#logger?.warn({ err: error, sessionKey }, "retire: freeing a seeded session failed");
        throw error;
      }
      // Forget only the seed that was freed: a re-seed meanwhile belongs to another attempt.
      if (this.#sessions.get(sessionKey) === seededBy) this.sessionClosed(sessionKey);
    }
  }

  /** Awaits `promise`, or throws `signal`'s reason when it aborts first. */
  async #until(promise: Promise<unknown>, signal: AbortSignal | undefined): Promise<void> {
    if (signal === undefined) {
      await promise;
      return;
    }
    signal.throwIfAborted();
    const aborted = deferred<void>();
    const onAbort = (): void => aborted.reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      await Promise.race([promise, aborted.promise]);
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }
}
