/**
 * The checkpoint participant of an agent with session hooks (see docs/agent.md): sessions idle,
 * running or parked at a boundary; lazy boundary snapshots; seeds in progress; legacy `/run`
 * episodes on the SDK's {@link EpisodeSteps}; restored sessions installed under the replacement
 * attempt. Transport-free: the agent server drives it.
 *
 * @see docs/agent.md
 * @module
 */
import { refuseDuplicateRecords } from "../../control/duplicate-records.js";
import { Participant, type CloseAdmissionRequest } from "../../control/participant.js";
import { CheckpointError, EpisodeError } from "../../errors.js";
import {
  captureKey,
  episodeIdToWire,
  nextAttempt,
  parseEpisodeId,
  sameEpisode,
  type EpisodeId,
} from "../../identity/episode-id.js";
import { EpisodeAlreadyRunningError } from "../../steps/episode-errors.js";
import { EpisodeSteps } from "../../steps/episode-steps.js";
import { untilSettledOrAborted } from "../../util/abortable.js";
import { compareStrings } from "../../util/compare-strings.js";
import { MAX_LISTED_BLOCKERS, prepareReport, type PrepareReport } from "../../wire/control.js";
import type { JsonValue } from "../../json/json-value.js";
import { AgentAdmission } from "./agent-admission.js";
import {
  AGENT_KIND,
  AgentSessionRecordSchema,
  isLegacySessionKey,
  legacySessionKey,
  type AgentSessionHooks,
  type AgentSessionRecord,
} from "./agent-records.js";
import { AgentSessionEntry, AgentSessionTable } from "./agent-session-table.js";
import { DirectCalls, type DirectCall } from "./direct-calls.js";
import { LegacyRuns, type LegacyRunHandle } from "./legacy-runs.js";
import { SeedsInProgress, type SeedTicket } from "./seeds-in-progress.js";
import { startPhaseActivation, type AgentActivation } from "./session-activation.js";
import { ActivationCancelledError, SessionPhase, type AgentSessionState } from "./session-phase.js";
import { TrackedSessions } from "./tracked-sessions.js";

/** Options of an {@link AgentSessionParticipant}. */
export interface AgentSessionParticipantOptions {
  /** The agent's session hooks. */
  readonly hooks: AgentSessionHooks;
  /**
   * The agent's session table, where each tracked session's phase lives beside its state.
   * @default a table of the participant's own
   */
  readonly sessions?: AgentSessionTable<unknown>;
  /**
   * The worker whose cookies name the native sessions seeded here, recorded as their records'
   * `owner`. @default null (one process)
   */
  readonly owner?: string | null;
}

/**
 * The agent session participant (kind `agent`).
 *
 * ## Rules
 * - **Admission.** Closing it asks every session to park at its next boundary; seeds arriving
 *   meanwhile wait for resume; a new legacy `/run` is refused with `admission_closed`.
 * - **Blocking.** A session blocks while it is retired, closing, or `running` (unless its
 *   episode is a restart, from a legacy run or carried from an earlier prepare stage); a legacy
 *   episode blocks per {@link EpisodeSteps}; a seed in progress blocks. Ready means none does.
 * - **Export** calls the export hook once with every tracked session that is not retired, not
 *   closing, not a restart and inside the scope; a missing key fails the commit.
 * - **Restore** installs each record under its next attempt into a participant holding nothing.
 * - **Retire** waits for seeds of the attempt, cancels activations once, waits for them, retires
 *   the legacy episode, calls the retire hook, and only then removes the session.
 *
 * @see docs/agent.md
 */
export class AgentSessionParticipant extends Participant<AgentSessionRecord> {
  readonly kind = AGENT_KIND;
  readonly recordSchema = AgentSessionRecordSchema;
  /** Legacy `/run` episodes, keyed by capture key. */
  readonly steps = new EpisodeSteps({ onChange: () => this.notify() });

  readonly #hooks: AgentSessionHooks;
  readonly #table: AgentSessionTable<unknown>;
  /** The routing owner of native sessions seeded here (null with one worker). */
  readonly #owner: string | null;
  readonly #admission = new AgentAdmission();
  /** The tracked sessions' phases (an index of the table, for walks). */
  readonly #sessions = new TrackedSessions((s) => this.#isRestart(s));
  readonly #seeds = new SeedsInProgress();
  readonly #direct = new DirectCalls();
  readonly #legacy = new LegacyRuns(this.steps);
  /** Restored native sessions' owners: a record keeps the owner its cookies name. */
  readonly #restoredOwners = new Map<string, string>();

  constructor(options: AgentSessionParticipantOptions) {
    super();
    this.#hooks = options.hooks;
    this.#table = options.sessions ?? new AgentSessionTable({ receiptWindowMs: () => 0 });
    this.#owner = options.owner ?? null;
  }

  /** Whether agent admission is open (no checkpoint). */
  get accepting(): boolean {
    return this.#admission.accepting;
  }

  /** Number of tracked sessions. */
  get size(): number {
    return this.#sessions.size;
  }

  /** The state of a tracked session, or null. */
  stateOf(key: string): AgentSessionState | null {
    return this.#phase(key)?.state ?? null;
  }

  /** The attempt owning a tracked session, or null. */
  episodeOf(key: string): EpisodeId | null {
    return this.#phase(key)?.episode ?? null;
  }

  /** Whether a tracked session was restored and not yet claimed. */
  isRestoredPending(key: string): boolean {
    return this.#phase(key)?.restoredPending ?? false;
  }

  /** Resolves once agent admission is open (at once when it is). */
  async waitForAdmission(signal?: AbortSignal): Promise<void> {
    const admission = this.#admission;
    while (admission.reopened !== null) await untilSettledOrAborted(admission.reopened, [signal]);
  }

  // ---- Seeds -----------------------------------------------------------------------------

  /**
   * Enters a seed in progress for `key` of `episode`: refuses a retired attempt, waits while a
   * checkpoint is open, checks again, then counts the seed (it blocks prepare until it leaves).
   */
  async enterSeed(key: string, episode: EpisodeId, signal?: AbortSignal): Promise<SeedTicket> {
    this.retired.check(episode);
    await this.waitForAdmission(signal);
    this.retired.check(episode);
    const leave = this.#seeds.enter(key, episode);
    return {
      register: () => {
        this.retired.check(episode);
        this.openSession(key, episode, { seed: true });
      },
      leave: () => {
        if (leave()) this.#changed();
      },
    };
  }

  /** Whether any seed is in progress. */
  get seedsInProgress(): number {
    return this.#seeds.size;
  }

  // ---- Sessions --------------------------------------------------------------------------

  /**
   * Opens (tracks) a session. Re-opening a key with the same attempt is a no-op; another
   * attempt is `stale_attempt`. A new non-seed session is refused while admission is closed.
   */
  openSession(key: string, episode: EpisodeId, options: { readonly seed: boolean }): void {
    const existing = this.#phase(key);
    if (existing !== undefined) {
      if (sameEpisode(existing.episode, episode)) return;
      throw new EpisodeError(
        "stale_attempt",
        `agent session ${key} belongs to attempt ${existing.captureKey}, not ${captureKey(episode)}`,
        captureKey(episode),
      );
    }
    if (!options.seed && !this.#admission.accepting) {
      throw EpisodeError.admissionClosed(`a new agent session ${key}`);
    }
    const s = new SessionPhase(this.#entryFor(key, episode));
    s.parkRequested = !this.#admission.accepting;
    this.#sessions.track(s);
    this.#changed();
  }

  /** The table entry of `key` under `episode`, added (with no state) when the agent has none. */
  #entryFor(key: string, episode: EpisodeId): AgentSessionEntry<unknown> {
    let entry = this.#table.get(key);
    if (entry === undefined) {
      entry = new AgentSessionEntry<unknown>(key, episode, null, undefined);
      this.#table.add(entry);
    }
    entry.episode = episode;
    return entry;
  }

  /** The phase tracking `key`, or undefined. */
  #phase(key: string): SessionPhase | undefined {
    return this.#table.get(key)?.phase ?? undefined;
  }

  /** Whether `key` is tracked. */
  has(key: string): boolean {
    return this.#phase(key) !== undefined;
  }

  /** Claims a restored session (its live episode uses it now), e.g. by a replayed reply. */
  claim(key: string): void {
    const s = this.#phase(key);
    if (s !== undefined) s.restoredPending = false;
  }

  /**
   * Starts an activation of `key` for `episode`; the activation claims a
   * restored session and takes its continuation.
   *
   * @throws EpisodeError `stale_attempt` (retired attempt, or the session is another
   * attempt's); CheckpointError `checkpoint_error` (no such session, or one already running).
   */
  startActivation(
    key: string,
    episode: EpisodeId,
    options: { readonly signal?: AbortSignal } = {},
  ): AgentActivation {
    this.retired.check(episode);
    return startPhaseActivation(this.#phase(key), key, episode, {
      signal: options.signal,
      parkRequested: !this.#admission.accepting,
      sessions: this.#sessions,
      changed: () => this.#changed(),
    });
  }

  /**
   * The participant side of a close: waits while admission is closed,
   * marks the session closing, cancels its activation (unless a retire or close did), waits
   * until it has stopped, then removes the session. Resolves to whether a session was tracked.
   *
   * @throws EpisodeError `stale_attempt` when a retire took the session over; the abort reason
   * of `signal` when cut short (the session stays tracked and closing, blocking prepare).
   */
  async closeSession(
    key: string,
    options: { readonly signal?: AbortSignal } = {},
  ): Promise<boolean> {
    const { signal } = options;
    // Checked in the same synchronous run as the mark: a commit whose readiness check passed
    // therefore exports an open session, never a closing one.
    const admission = this.#admission;
    while (admission.reopened !== null) await untilSettledOrAborted(admission.reopened, [signal]);
    const entry = this.#table.get(key);
    const s = entry?.phase ?? undefined;
    const wasClosing = entry?.closing ?? false;
    if (entry !== undefined) entry.closing = true;
    if (s === undefined) return false;
    if (s.retired) throw EpisodeError.staleAttempt(s.captureKey, s.episode.attempt);
    if (!wasClosing) {
      this.#sessions.refresh(s);
      this.#changed();
    }
    const task = s.activation;
    if (task !== null && !task.done) {
      task.cancel(new ActivationCancelledError(key, "closing"));
      await untilSettledOrAborted(task.ended.promise, [signal]);
    }
    // The activation may have removed the closing session as it ended; only a retire that
    // took the session over refuses the close.
    if (s.retired) throw EpisodeError.staleAttempt(s.captureKey, s.episode.attempt);
    this.#sessions.untrack(s);
    this.#changed();
    return true;
  }

  /** Drops a tracked session outright (its state was freed elsewhere); idempotent. */
  dropSession(key: string): void {
    const s = this.#phase(key);
    if (s === undefined || s.activation !== null) return;
    this.#sessions.untrack(s);
    this.#changed();
  }

  // ---- Legacy runs -----------------------------------------------------------------------

  /**
   * Begins a legacy `/run` of `episode`: opens its session `run:<rollout>`
   * (refused while admission is closed), claims it, and begins the episode with the restored
   * legacy boundary of the key (consumed once).
   *
   * @throws EpisodeError `stale_attempt` / `admission_closed`; EpisodeAlreadyRunningError.
   */
  beginLegacyRun(
    episode: EpisodeId,
    options: { readonly signal?: AbortSignal; readonly deadlineTs?: number | null } = {},
  ): LegacyRunHandle {
    this.retired.check(episode);
    const key = legacySessionKey(episode.rollout_id);
    const ck = captureKey(episode);
    // Refused before the session is touched: the live run keeps its session.
    if (this.steps.has(ck)) throw new EpisodeAlreadyRunningError(ck);
    const existed = this.#table.get(key);
    const tracked = existed?.phase ?? undefined;
    this.openSession(key, episode, { seed: false });
    const entry = this.#table.get(key);
    const s = entry?.phase;
    if (entry === undefined || s === undefined || s === null) {
      throw new Error(`agent session ${key} is not tracked after it was opened`);
    }
    let run: LegacyRunHandle;
    try {
      run = this.#legacy.begin(episode, key, options, {
        restartMarked: () => {
          const session = this.#phase(key);
          if (session !== undefined) this.#sessions.refresh(session);
          this.#changed();
        },
        ended: () => {
          if (s.tracked && s.activation === null && !s.retired) this.#sessions.untrack(s);
          this.#changed();
        },
      });
    } catch (error) {
      if (tracked === undefined) this.dropSession(key);
      if (existed === undefined) this.#table.remove(entry);
      throw error;
    }
    s.restoredPending = false;
    return run;
  }

  // ---- Direct calls ----------------------------------------------------------------------

  /**
   * Tracks a direct `/v1/responses` call of `episode` as a restart for its duration.
   * @throws EpisodeError `stale_attempt` for a retired attempt.
   */
  trackDirect(episode: EpisodeId): DirectCall {
    this.retired.check(episode);
    return this.#direct.track(episode);
  }

  // ---- Control plane ---------------------------------------------------------------------

  override closeAdmission(request: CloseAdmissionRequest): void {
    this.#admission.close("restarts" in request ? request.restarts : undefined);
    this.steps.closeAdmission();
    for (const s of this.#sessions) {
      s.parkRequested = true;
      this.#sessions.refresh(s);
    }
    this.notify();
  }

  override openAdmission(): void {
    const releaseWaiters = this.#admission.open();
    this.steps.openAdmission();
    for (const s of this.#sessions) {
      s.parkRequested = false;
      this.#sessions.refresh(s);
      s.wake?.resolve();
    }
    releaseWaiters();
    this.notify();
  }

  override ready(): boolean {
    return this.#sessions.blockingCount === 0 && this.#seeds.size === 0 && this.steps.ready();
  }

  override readiness(): PrepareReport {
    const blockers = new Set<string>();
    for (const s of this.#sessions.blocking()) blockers.add(s.captureKey);
    for (const key of this.steps.blockers(Number.MAX_SAFE_INTEGER)) blockers.add(key);
    for (const key of this.#seeds.captureKeys()) blockers.add(key);
    const sorted = [...blockers].sort(compareStrings);
    let atBoundary = 0;
    for (const s of this.#sessions) if (s.state === "at_boundary") atBoundary += 1;
    const restarts = new Set<string>(this.#legacy.restarts());
    for (const key of this.#direct.keys()) restarts.add(key);
    return prepareReport({
      ready: sorted.length === 0,
      blockers: sorted.slice(0, MAX_LISTED_BLOCKERS),
      blockerCount: sorted.length,
      counts: { sessions: this.#sessions.size, at_boundary: atBoundary },
      restarts: [...restarts].sort(compareStrings),
    });
  }

  override statusExtra(): Record<string, unknown> {
    return { accepting: this.#admission.accepting };
  }

  override async export(
    scope: readonly EpisodeId[] | null,
    signal: AbortSignal,
  ): Promise<AgentSessionRecord[]> {
    const chosen = this.#sessions.inScope(
      scope,
      (s) => !s.retired && !s.closing && !this.#isRestart(s),
    );
    if (chosen.length === 0) return [];
    const states = await this.#hooks.exportAgentSessions({
      sessionKeys: chosen.map((s) => s.key),
      signal,
    });
    const missing = chosen.filter((s) => !states.has(s.key)).map((s) => s.key);
    if (missing.length > 0) {
      throw new CheckpointError(
        "checkpoint_error",
        `the agent did not export sessions [${missing.join(", ")}]; exportAgentSessions must return an entry for every key`,
      );
    }
    return chosen.map((s) => {
      const boundary =
        s.state === "at_boundary" && s.snapshot !== null ? s.snapshot() : s.continuation;
      const episode = isLegacySessionKey(s.key)
        ? (this.steps.exportedBoundary(s.captureKey) ??
          this.#legacy.restoredBoundary(s.key) ??
          null)
        : null;
      // Not walked here: the records writer checks every record once as it encodes it, and a
      // value that is not JSON fails the commit with 422 naming the episode and the path
      // (`$.session…`, `$.boundary…`; see docs/storage.md).
      const session = states.get(s.key) as JsonValue;
      const owner = isLegacySessionKey(s.key)
        ? null
        : (this.#restoredOwners.get(s.key) ?? this.#owner);
      return Object.freeze({
        episode_id: episodeIdToWire(s.episode) as AgentSessionRecord["episode_id"],
        session_key: s.key,
        session,
        boundary,
        episode,
        owner,
      });
    });
  }

  override async install(
    records: readonly AgentSessionRecord[],
    _scope: readonly EpisodeId[],
    signal: AbortSignal,
  ): Promise<void> {
    if (this.#sessions.size > 0 || this.#seeds.size > 0 || this.#legacy.size > 0) {
      throw new CheckpointError(
        "checkpoint_error",
        "agent restore requires a process with no live sessions or seeds; restore into a fresh process",
      );
    }
    refuseDuplicateRecords(
      records,
      (r) => r.session_key,
      "agent session",
      (r) => captureKey(parseEpisodeId(r.episode_id)),
    );
    await this.#installRecords(records, signal);
  }

  /** A legacy `/run`'s record is claimed by the replacement `/run`; native ones are routed. */
  claimKey(stored: AgentSessionRecord): string | null {
    if (!isLegacySessionKey(stored.session_key)) return null;
    return captureKey(nextAttempt(parseEpisodeId(stored.episode_id)));
  }

  /** A checkpoint holds each session once. */
  recordIdentity(record: AgentSessionRecord): { what: string; key: string } | null {
    const key = (record as { session_key?: unknown }).session_key;
    return typeof key === "string" ? { what: "agent session", key } : null;
  }

  async adoptRestored(stored: AgentSessionRecord, signal: AbortSignal): Promise<void> {
    const key = stored.session_key;
    if (this.has(key) || this.#legacy.restoredBoundary(key) !== undefined) {
      throw new CheckpointError(
        "checkpoint_error",
        `agent session ${stored.session_key} is already held by this worker`,
      );
    }
    await this.#installRecords([stored], signal);
  }

  async #installRecords(
    records: readonly AgentSessionRecord[],
    signal: AbortSignal,
  ): Promise<void> {
    const sessions = records.map((r) => ({
      sessionKey: r.session_key,
      episodeId: nextAttempt(parseEpisodeId(r.episode_id)),
      session: r.session,
    }));
    if (sessions.length > 0) await this.#hooks.restoreAgentSessions({ sessions, signal });
    records.forEach((r, i) => {
      const { sessionKey, episodeId } = sessions[i] as (typeof sessions)[number];
      const s = new SessionPhase(this.#entryFor(sessionKey, episodeId));
      s.continuation = r.boundary;
      s.restoredPending = true;
      s.parkRequested = !this.#admission.accepting;
      this.#sessions.track(s);
      if (r.episode !== null) this.#legacy.keepRestored(sessionKey, r.episode);
      if (r.owner !== null) this.#restoredOwners.set(sessionKey, r.owner);
    });
    this.#changed();
  }

  override restoredPending(): EpisodeId[] {
    return this.#sessions.restoredPending();
  }

  override async retire(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    // 1. Seeds of the attempt finish first: what they build is then tracked, or freed by them.
    const seeds = this.#seeds;
    while (seeds.holds(episode)) await untilSettledOrAborted(seeds.nextLeave, [signal]);
    // 2. Mark, wake and cancel (once) every session of the attempt; stop direct calls.
    const sessions = this.#sessions.coveredBy(episode);
    for (const s of sessions) {
      if (!s.retired) {
        s.retired = true;
        this.#sessions.refresh(s);
      }
      s.wake?.resolve();
      s.activation?.cancel(new ActivationCancelledError(s.key, "retired"));
    }
    const direct = this.#direct.stop(episode);
    this.#changed();
    await untilSettledOrAborted(
      Promise.all([...sessions.map((s) => s.activation?.ended.promise), ...direct]),
      [signal],
    );
    // 3. The legacy episodes of the attempt stop.
    const legacy = this.#legacy.covered(episode);
    await Promise.all(legacy.map((key) => this.steps.retire(key, signal)));
    // 4. The agent frees each session's state; 5. only then is the session forgotten.
    for (const s of sessions) {
      await this.#hooks.retireAgentSession({ sessionKey: s.key, signal });
      if (s.tracked) this.#sessions.untrack(s);
      this.#legacy.forgetRestored(s.key);
    }
    // The rollout's own legacy key only: no scan of every restored legacy session.
    const legacyKey = legacySessionKey(episode.rollout_id);
    if (this.#phase(legacyKey) === undefined) this.#legacy.forgetRestored(legacyKey);
    this.#changed();
  }

  // ---- Internals -------------------------------------------------------------------------

  #isRestart(s: SessionPhase): boolean {
    return this.#legacy.isRestart(s.captureKey) || this.#admission.carries(s.captureKey);
  }

  /**
   * Readiness or the counts changed. Wakes a waiting prepare only while a checkpoint is open
   * (none waits otherwise, so one process pays nothing per step), but tells a worker's link
   * either way: its coordinator answers status with the counts the workers report.
   */
  #changed(): void {
    if (!this.#admission.accepting) this.notify();
    else this.onChange?.();
  }
}
