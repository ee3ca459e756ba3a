/**
 * The checkpoint participant of an agent with session hooks (see docs/agent.md): sessions idle,
 * running or parked at a boundary; lazy boundary snapshots; seeds in progress; legacy `/run`
 * episodes on the SDK's {@link EpisodeSteps}; restored sessions installed under the replacement
 * attempt. Transport-free: the agent server drives it.
 *
 * @see docs/agent.md
 * @module
 */
import { AttemptSet } from "../../control/attempt-keys.js";
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
import { scopeInKeyOrder, sortedScopeKeys } from "../../identity/scope-keys.js";
import { EpisodeAlreadyRunningError } from "../../steps/episode-errors.js";
import { EpisodeSteps, type BoundaryState, type StepMode } from "../../steps/episode-steps.js";
import { untilSettledOrAborted } from "../../util/abortable.js";
import { deferred, type Deferred } from "../../util/deferred.js";
import { indexAdd, indexDelete } from "../../util/multimap.js";
import { MAX_LISTED_BLOCKERS, prepareReport, type PrepareReport } from "../../wire/control.js";
import type { JsonValue } from "../../json/json-value.js";
import {
  AGENT_KIND,
  AgentSessionRecordSchema,
  isLegacySessionKey,
  legacySessionKey,
  type AgentSessionHooks,
  type AgentSessionRecord,
} from "./agent-records.js";
import { compareStrings } from "../../util/compare-strings.js";
import { AgentSessionEntry, AgentSessionTable } from "./agent-session-table.js";
import {
  ActivationCancelledError,
  ActivationTask,
  SessionPhase,
  type AgentSessionState,
  type BoundarySnapshot,
} from "./session-phase.js";

export {
  ActivationCancelledError,
  type AgentSessionState,
  type BoundarySnapshot,
} from "./session-phase.js";

class SeedEntry {
  count = 0;
  readonly captureKey: string;
  constructor(
    readonly key: string,
    readonly episode: EpisodeId,
  ) {
    this.captureKey = captureKey(episode);
  }
}

/** A seed in progress: register the session, then leave (in a `finally`). */
export interface SeedTicket {
  /**
   * Registers the seeded session with the participant (allowed while admission is closed).
   * @throws EpisodeError `stale_attempt` when the attempt was retired while the seed built it,
   * or the key belongs to another attempt.
   */
  register(): void;
  /** Ends the seed; idempotent. */
  leave(): void;
}

/**
 * One running activation of a session: the turn loop records boundaries through it and wraps
 * each policy call made right after a boundary in {@link modelCall}.
 */
export interface AgentActivation {
  /** The session key. */
  readonly sessionKey: string;
  /** The attempt that owns the session. */
  readonly episode: EpisodeId;
  /** The restored boundary this activation continues from (consumed by this activation), or null. */
  readonly continuation: JsonValue | null;
  /** Aborted when a close or retire cancels the activation, or the request's signal fires. */
  readonly signal: AbortSignal;
  /**
   * Records a boundary: a function building the loop's state, called only at export. Parks
   * here while a checkpoint asked the session to park, until resume.
   * @throws EpisodeError `stale_attempt` when the session was retired or closed under it.
   */
  boundary(snapshot: BoundarySnapshot): Promise<void>;
  /**
   * Runs a policy call made right after a boundary: during it the session counts as parked at
   * that boundary; a reply arriving while a checkpoint is open is held here until resume.
   */
  modelCall<T>(call: (signal: AbortSignal) => Promise<T>): Promise<T>;
  /** The activation ended (normally, with an error or cancelled); idempotent. Call in `finally`. */
  end(): void;
}

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

/** A direct `/v1/responses` call tracked as a restart for its duration. */
export interface DirectCall {
  /** Aborted by a retire of its attempt. */
  readonly signal: AbortSignal;
  /** Untracks the call; idempotent. */
  done(): void;
}

interface DirectEntry {
  readonly episode: EpisodeId;
  readonly key: string;
  readonly controller: AbortController;
  readonly ended: Deferred<void>;
  done: boolean;
}

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
  /** The tracked sessions' phases (an index of the table, for walks). */
  readonly #tracked = new Set<SessionPhase>();
  readonly #sessionsByRollout = new Map<string, Set<SessionPhase>>();
  readonly #blocking = new Set<SessionPhase>();
  readonly #seeds = new Map<string, SeedEntry>();
  readonly #seedsByRollout = new Map<string, Set<SeedEntry>>();
  #seedChanged = deferred<void>();
  readonly #direct = new Map<string, Set<DirectEntry>>();
  readonly #directByRollout = new Map<string, Set<DirectEntry>>();
  /** Restored legacy boundaries by session key, until the replacement `/run` consumes one. */
  readonly #legacyRestored = new Map<string, JsonValue>();
  /** Legacy episodes tracked by the steps, by capture key (indexed by rollout). */
  readonly #legacyLive = new AttemptSet();
  /** Capture keys of legacy episodes marked restart. */
  readonly #legacyRestarts = new Set<string>();
  /** Capture keys earlier prepare stages reported as restarts, until admission reopens. */
  #carried: ReadonlySet<string> = new Set();
  #accepting = true;
  #opened: Deferred<void> | null = null;

  constructor(options: AgentSessionParticipantOptions) {
    super();
    this.#hooks = options.hooks;
    this.#table = options.sessions ?? new AgentSessionTable({ receiptWindowMs: () => 0 });
    this.#owner = options.owner ?? null;
  }

  /** The routing owner of native sessions seeded here (null with one worker). */
  readonly #owner: string | null;
  /** Restored native sessions' owners: a record keeps the owner its cookies name. */
  readonly #restoredOwners = new Map<string, string>();

  /** Whether agent admission is open (no checkpoint). */
  get accepting(): boolean {
    return this.#accepting;
  }

  /** Number of tracked sessions. */
  get size(): number {
    return this.#tracked.size;
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
    while (this.#opened !== null) await untilSettledOrAborted(this.#opened.promise, [signal]);
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
    const id = `${key}\u0000${captureKey(episode)}`;
    let entry = this.#seeds.get(id);
    if (entry === undefined) {
      entry = new SeedEntry(key, episode);
      this.#seeds.set(id, entry);
      indexAdd(this.#seedsByRollout, episode.rollout_id, entry);
    }
    entry.count += 1;
    const seed = entry;
    let left = false;
    return {
      register: () => {
        this.retired.check(episode);
        this.openSession(key, episode, { seed: true });
      },
      leave: () => {
        if (left) return;
        left = true;
        seed.count -= 1;
        if (seed.count === 0) {
          this.#seeds.delete(id);
          indexDelete(this.#seedsByRollout, episode.rollout_id, seed);
        }
        const changed = this.#seedChanged;
        this.#seedChanged = deferred<void>();
        changed.resolve();
        this.#changed();
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
    if (!options.seed && !this.#accepting) {
      throw EpisodeError.admissionClosed(`a new agent session ${key}`);
    }
    const s = new SessionPhase(this.#entryFor(key, episode));
    s.parkRequested = !this.#accepting;
    this.#track(s);
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
    const s = this.#phase(key);
    if (s === undefined || s.closing) {
      throw new CheckpointError("checkpoint_error", `agent session ${key} is not open`);
    }
    if (!sameEpisode(s.episode, episode)) {
      throw new EpisodeError(
        "stale_attempt",
        `agent session ${key} belongs to attempt ${s.captureKey}, not ${captureKey(episode)}`,
        captureKey(episode),
      );
    }
    if (s.retired) throw EpisodeError.staleAttempt(s.captureKey, s.episode.attempt);
    if (s.state !== "idle" || s.activation !== null) {
      throw new CheckpointError(
        "checkpoint_error",
        `agent session ${key} already has an active activation`,
      );
    }
    const task = new ActivationTask(options.signal);
    s.state = "running";
    s.parkRequested = !this.#accepting;
    s.activation = task;
    const continuation = s.continuation;
    s.continuation = null;
    s.restoredPending = false;
    this.#refresh(s);
    this.#changed();
    return {
      sessionKey: key,
      episode: s.episode,
      continuation,
      signal: task.signal,
      boundary: (snapshot) => this.#boundary(s, task, snapshot),
      modelCall: (call) => this.#modelCall(s, task, call),
      end: () => this.#endActivation(s, task),
    };
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
    while (this.#opened !== null) await untilSettledOrAborted(this.#opened.promise, [signal]);
    const entry = this.#table.get(key);
    const s = entry?.phase ?? undefined;
    const wasClosing = entry?.closing ?? false;
    if (entry !== undefined) entry.closing = true;
    if (s === undefined) return false;
    if (s.retired) throw EpisodeError.staleAttempt(s.captureKey, s.episode.attempt);
    if (!wasClosing) {
      this.#refresh(s);
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
    this.#untrack(s);
    this.#changed();
    return true;
  }

  /** Drops a tracked session outright (its state was freed elsewhere); idempotent. */
  dropSession(key: string): void {
    const s = this.#phase(key);
    if (s === undefined || s.activation !== null) return;
    this.#untrack(s);
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
    const continuation = this.#legacyRestored.get(key) ?? null;
    let signal: AbortSignal;
    try {
      signal = this.steps.begin(ck, {
        continuation,
        deadlineTs: options.deadlineTs ?? null,
        ...(options.signal === undefined ? {} : { signal: options.signal }),
      });
    } catch (error) {
      if (tracked === undefined) this.dropSession(key);
      if (existed === undefined) this.#table.remove(entry);
      throw error;
    }
    this.#legacyRestored.delete(key);
    s.restoredPending = false;
    this.#legacyLive.add(episode);
    let ended = false;
    const steps = this.steps;
    return {
      episode,
      captureKey: ck,
      sessionKey: key,
      signal,
      continuation: () => steps.continuation(ck),
      boundary: (state) => steps.boundary(ck, state),
      step: (mode, fn) => steps.step(ck, mode, fn),
      markRestart: async (markSignal) => {
        await steps.markRestart(ck, markSignal);
        if (!this.#legacyLive.has(ck)) return;
        this.#legacyRestarts.add(ck);
        const session = this.#phase(key);
        if (session !== undefined) this.#refresh(session);
        this.#changed();
      },
      end: () => {
        if (ended) return;
        ended = true;
        this.#legacyLive.delete(ck);
        this.#legacyRestarts.delete(ck);
        steps.end(ck);
        if (s.tracked && s.activation === null && !s.retired) {
          this.#untrack(s);
        }
        this.#changed();
      },
    };
  }

  // ---- Direct calls ----------------------------------------------------------------------

  /**
   * Tracks a direct `/v1/responses` call of `episode` as a restart for its duration.
   * @throws EpisodeError `stale_attempt` for a retired attempt.
   */
  trackDirect(episode: EpisodeId): DirectCall {
    this.retired.check(episode);
    const key = captureKey(episode);
    const entry: DirectEntry = {
      episode,
      key,
      controller: new AbortController(),
      ended: deferred<void>(),
      done: false,
    };
    indexAdd(this.#direct, key, entry);
    indexAdd(this.#directByRollout, episode.rollout_id, entry);
    return {
      signal: entry.controller.signal,
      done: () => {
        if (entry.done) return;
        entry.done = true;
        indexDelete(this.#direct, key, entry);
        indexDelete(this.#directByRollout, episode.rollout_id, entry);
        entry.ended.resolve();
      },
    };
  }

  // ---- Control plane ---------------------------------------------------------------------

  override closeAdmission(request: CloseAdmissionRequest): void {
    this.#accepting = false;
    this.#opened ??= deferred<void>();
    if ("restarts" in request && request.restarts !== undefined) {
      this.#carried = new Set(request.restarts);
    }
    this.steps.closeAdmission();
    for (const s of this.#tracked) {
      s.parkRequested = true;
      this.#refresh(s);
    }
    this.notify();
  }

  override openAdmission(): void {
    this.#accepting = true;
    this.#carried = new Set();
    this.steps.openAdmission();
    for (const s of this.#tracked) {
      s.parkRequested = false;
      this.#refresh(s);
      s.wake?.resolve();
    }
    const opened = this.#opened;
    this.#opened = null;
    opened?.resolve();
    this.notify();
  }

  override ready(): boolean {
    return this.#blocking.size === 0 && this.#seeds.size === 0 && this.steps.ready();
  }

  override readiness(): PrepareReport {
    const blockers = new Set<string>();
    for (const s of this.#blocking) blockers.add(s.captureKey);
    for (const key of this.steps.blockers(Number.MAX_SAFE_INTEGER)) blockers.add(key);
    for (const seed of this.#seeds.values()) blockers.add(seed.captureKey);
    const sorted = [...blockers].sort(compareStrings);
    let atBoundary = 0;
    for (const s of this.#tracked) if (s.state === "at_boundary") atBoundary += 1;
    const restarts = new Set<string>(this.#legacyRestarts);
    for (const key of this.#direct.keys()) restarts.add(key);
    return prepareReport({
      ready: sorted.length === 0,
      blockers: sorted.slice(0, MAX_LISTED_BLOCKERS),
      blockerCount: sorted.length,
      counts: { sessions: this.#tracked.size, at_boundary: atBoundary },
      restarts: [...restarts].sort(compareStrings),
    });
  }

  override statusExtra(): Record<string, unknown> {
    return { accepting: this.#accepting };
  }

  override async export(
    scope: readonly EpisodeId[] | null,
    signal: AbortSignal,
  ): Promise<AgentSessionRecord[]> {
    const chosen = this.#exportedSessions(scope);
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
        ? (this.steps.exportedBoundary(s.captureKey) ?? this.#legacyRestored.get(s.key) ?? null)
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

  /**
   * The sessions an export writes, in capture-key order (ties by session key), so the commit
   * reply's sorted episode list needs no sort (unless one attempt has several sessions). With a scope, walked in the scope's key order
   * (a controller sends it sorted): no sort of thousands of sessions.
   */
  #exportedSessions(scope: readonly EpisodeId[] | null): SessionPhase[] {
    const exported = (s: SessionPhase): boolean => !s.retired && !s.closing && !this.#isRestart(s);
    const byKeys = (a: SessionPhase, b: SessionPhase): number =>
      compareStrings(a.captureKey, b.captureKey) || compareStrings(a.key, b.key);
    if (scope === null) return [...this.#tracked].filter(exported).sort(byKeys);
    const chosen: SessionPhase[] = [];
    const episodes = scopeInKeyOrder(scope);
    const keys = sortedScopeKeys(scope);
    for (let i = 0; i < episodes.length; i++) {
      const sessions = this.#sessionsByRollout.get((episodes[i] as EpisodeId).rollout_id);
      if (sessions === undefined) continue;
      const first = chosen.length;
      for (const s of sessions) {
        if (s.captureKey === keys[i] && exported(s)) chosen.push(s);
      }
      // Several sessions of one attempt (rare): ordered among themselves by session key.
      if (chosen.length - first > 1) {
        const group = chosen.splice(first).sort(byKeys);
        for (const s of group) chosen.push(s);
      }
    }
    return chosen;
  }

  override async install(
    records: readonly AgentSessionRecord[],
    _scope: readonly EpisodeId[],
    signal: AbortSignal,
  ): Promise<void> {
    if (this.#tracked.size > 0 || this.#seeds.size > 0 || this.#legacyLive.size > 0) {
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
    if (this.has(stored.session_key) || this.#legacyRestored.has(stored.session_key)) {
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
      s.parkRequested = !this.#accepting;
      this.#track(s);
      if (r.episode !== null) this.#legacyRestored.set(sessionKey, r.episode);
      if (r.owner !== null) this.#restoredOwners.set(sessionKey, r.owner);
    });
    this.#changed();
  }

  override restoredPending(): EpisodeId[] {
    return [...this.#tracked]
      .filter((s) => s.restoredPending)
      .map((s) => s.episode)
      .sort((a, b) => compareStrings(captureKey(a), captureKey(b)));
  }

  override async retire(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    const covers = (e: EpisodeId): boolean =>
      e.rollout_id === episode.rollout_id && e.attempt <= episode.attempt;
    // 1. Seeds of the attempt finish first: what they build is then tracked, or freed by them.
    for (;;) {
      const seeds = this.#seedsByRollout.get(episode.rollout_id);
      if (seeds === undefined || ![...seeds].some((seed) => covers(seed.episode))) break;
      await untilSettledOrAborted(this.#seedChanged.promise, [signal]);
    }
    // 2. Mark, wake and cancel (once) every session of the attempt; stop direct calls.
    const sessions = [...(this.#sessionsByRollout.get(episode.rollout_id) ?? [])].filter((s) =>
      covers(s.episode),
    );
    for (const s of sessions) {
      if (!s.retired) {
        s.retired = true;
        this.#refresh(s);
      }
      s.wake?.resolve();
      s.activation?.cancel(new ActivationCancelledError(s.key, "retired"));
    }
    const direct = [...(this.#directByRollout.get(episode.rollout_id) ?? [])].filter((d) =>
      covers(d.episode),
    );
    for (const d of direct) {
      if (!d.controller.signal.aborted) {
        d.controller.abort(EpisodeError.staleAttempt(d.key, episode.attempt));
      }
    }
    this.#changed();
    await untilSettledOrAborted(
      Promise.all([
        ...sessions.map((s) => s.activation?.ended.promise),
        ...direct.map((d) => d.ended.promise),
      ]),
      [signal],
    );
    // 3. The legacy episodes of the attempt stop.
    const legacy = this.#legacyLive.covered(episode);
    await Promise.all(legacy.map((key) => this.steps.retire(key, signal)));
    // 4. The agent frees each session's state; 5. only then is the session forgotten.
    for (const s of sessions) {
      await this.#hooks.retireAgentSession({ sessionKey: s.key, signal });
      if (s.tracked) this.#untrack(s);
      this.#legacyRestored.delete(s.key);
    }
    // The rollout's own legacy key only: no scan of every restored legacy session.
    const legacyKey = legacySessionKey(episode.rollout_id);
    if (this.#phase(legacyKey) === undefined) this.#legacyRestored.delete(legacyKey);
    this.#changed();
  }

  // ---- Internals -------------------------------------------------------------------------

  async #boundary(
    s: SessionPhase,
    task: ActivationTask,
    snapshot: BoundarySnapshot,
  ): Promise<void> {
    this.#requireLive(s, task);
    s.snapshot = snapshot;
    if (s.parkRequested) await this.#park(s, task);
  }

  async #modelCall<T>(
    s: SessionPhase,
    task: ActivationTask,
    call: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    this.#requireLive(s, task);
    const afterBoundary = s.snapshot !== null;
    if (afterBoundary) {
      s.state = "at_boundary";
      this.#refresh(s);
      this.#changed();
    }
    let result: T;
    try {
      result = await call(task.signal);
    } catch (error) {
      if (afterBoundary && s.activation === task) {
        s.state = "running";
        this.#refresh(s);
        this.#changed();
      }
      throw error;
    }
    this.#requireLive(s, task);
    // The checkpoint counted this session at the boundary before the call: hold the reply.
    if (afterBoundary && s.parkRequested) await this.#park(s, task);
    else if (afterBoundary) {
      s.state = "running";
      this.#refresh(s);
      this.#changed();
    }
    return result;
  }

  async #park(s: SessionPhase, task: ActivationTask): Promise<void> {
    s.state = "at_boundary";
    this.#refresh(s);
    this.#changed();
    for (;;) {
      s.wake = deferred<void>();
      try {
        await untilSettledOrAborted(s.wake.promise, [task.signal]);
      } finally {
        s.wake = null;
      }
      this.#requireLive(s, task);
      if (!s.parkRequested) break;
    }
    s.state = "running";
    this.#refresh(s);
    this.#changed();
  }

  #requireLive(s: SessionPhase, task: ActivationTask): void {
    if (!s.tracked || s.retired || s.activation !== task) {
      throw EpisodeError.staleAttempt(s.captureKey, s.episode.attempt);
    }
    task.signal.throwIfAborted();
  }

  #endActivation(s: SessionPhase, task: ActivationTask): void {
    if (task.done) return;
    task.done = true;
    if (s.activation === task) {
      s.activation = null;
      s.snapshot = null;
      s.state = "idle";
      if (s.tracked && s.closing && !s.retired) this.#untrack(s);
      else this.#refresh(s);
    }
    task.ended.resolve();
    this.#changed();
  }

  #isRestart(s: SessionPhase): boolean {
    return this.#legacyRestarts.has(s.captureKey) || this.#carried.has(s.captureKey);
  }

  #refresh(s: SessionPhase): void {
    const blocking =
      s.tracked && (s.retired || s.closing || (s.state === "running" && !this.#isRestart(s)));
    if (blocking === s.blocking) return;
    s.blocking = blocking;
    if (blocking) this.#blocking.add(s);
    else this.#blocking.delete(s);
  }

  #track(s: SessionPhase): void {
    s.owner.phase = s;
    this.#tracked.add(s);
    indexAdd(this.#sessionsByRollout, s.episode.rollout_id, s);
    this.#refresh(s);
  }

  #untrack(s: SessionPhase): void {
    if (!s.tracked) return;
    s.owner.phase = null;
    this.#tracked.delete(s);
    indexDelete(this.#sessionsByRollout, s.episode.rollout_id, s);
    if (s.blocking) {
      s.blocking = false;
      this.#blocking.delete(s);
    }
  }

  /**
   * Readiness or the counts changed. Wakes a waiting prepare only while a checkpoint is open
   * (none waits otherwise, so one process pays nothing per step), but tells a worker's link
   * either way: its coordinator answers status with the counts the workers report.
   */
  #changed(): void {
    if (!this.#accepting) this.notify();
    else this.onChange?.();
  }
}
