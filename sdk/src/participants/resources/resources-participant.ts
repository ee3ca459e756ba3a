import type { Logger } from "pino";
import { z } from "zod";
import { Participant, type CloseAdmissionRequest } from "../../control/participant.js";
import { refuseDuplicateRecords } from "../../control/duplicate-records.js";
import { CheckpointError, CheckpointStateError, EpisodeError, GymError } from "../../errors.js";
import {
  captureKey,
  episodeIdToWire,
  nextAttempt,
  parseEpisodeId,
  sameEpisode,
  type EpisodeId,
} from "../../identity/episode-id.js";
import { scopeInKeyOrder, sortedScopeKeys } from "../../identity/scope-keys.js";
import { compareStrings } from "../../util/compare-strings.js";
import { deferred, type Deferred } from "../../util/deferred.js";
import { ABSENT, sessionValue, type BySession } from "../../util/by-session.js";
import { setOwnKey } from "../../util/own-key.js";
import { prepareReport, type PrepareReport } from "../../wire/control.js";
import type { JsonValue } from "../../json/json-value.js";
import { JsonPayloadSchema } from "../../json/json-payload-schema.js";
import { recordSchema } from "../../wire/storage.js";
import {
  CLOSE_SESSION_PATH,
  SEED_SESSION_PATH,
  VERIFY_PATH,
  type CheckpointMode,
  type CheckpointVerify,
} from "./declarations.js";

/** One stored session of a resources server. */
export const ResourcesRecordSchema = recordSchema({
  session_id: z.string(),
  state: JsonPayloadSchema,
  owner: z.string().nullable().default(null),
});
/** One stored session record. */
export type ResourcesRecord = z.infer<typeof ResourcesRecordSchema>;

/** The session hooks the participant calls; each takes one input object. */
export interface SessionHooks {
  /**
   * Snapshots the named sessions, by session ID as a `Map` or a plain object (own keys only are
   * read, a `__proto__` assigned into `{}` included); leave out a session no longer held.
   */
  exportSessionStates(input: {
    readonly sessionIds: readonly string[];
    readonly signal: AbortSignal;
  }): Promise<BySession<JsonValue>>;
  /** Validates every state, then installs all; throws and installs nothing on any invalid one. */
  restoreSessionStates(input: {
    readonly states: Readonly<Record<string, JsonValue>>;
    readonly signal: AbortSignal;
  }): Promise<void>;
  /** Frees one session's state; must tolerate state it already freed. */
  retireSessionState(input: {
    readonly sessionId: string;
    readonly signal: AbortSignal;
  }): Promise<void>;
}

/** Options of a {@link ResourcesParticipant}. */
export interface ResourcesParticipantOptions {
  /**
   * The worker whose cookies name the sessions started here, recorded as each record's
   * `owner` (a restore places a session with its owner's others). @default null (one process)
   */
  readonly owner?: string | null;
  /** @default "restart_only" */
  readonly mode?: CheckpointMode;
  /** @default "wait" */
  readonly verify?: CheckpointVerify;
  /** Paths that start a session. @default ["/seed_session"] */
  readonly sessionStarts?: readonly string[];
  /** The server's session hooks. @default hooks that hold nothing */
  readonly hooks?: Partial<SessionHooks>;
  /**
   * The schema each restored session state must pass before any is handed to
   * `restoreSessionStates`, which then gets each state as the schema parsed it; a state that
   * fails it refuses the restore with 422 `invalid_checkpoint_state` naming its episode, and
   * nothing is installed. @default none
   */
  readonly stateSchema?: z.ZodType | null;
  /** Where warnings go (a session missing from an export). */
  readonly logger?: Logger;
}

/** One data request the middleware asks to admit. */
export interface AdmitRequest {
  /** The cookie session's ID. */
  readonly sessionId: string;
  /** The routed path (rollout prefix stripped). */
  readonly path: string;
  /** The request's episode from its rollout prefix, or null. */
  readonly episode: EpisodeId | null;
  /** Aborts the wait for admission (the client went away, the server shuts down). */
  readonly signal?: AbortSignal;
}

/** An admitted request: tell it when the response starts, and when it is over. */
export interface AdmittedRequest {
  /** The episode a session start binds, or null for other requests. */
  readonly seedEpisode: EpisodeId | null;
  /**
   * Applies the request to session tracking when its response starts. `sessionId` is the
   * session's ID at that moment (a seed may have replaced it); `closeFollows` is true when a
   * `/verify` caller said the close follows.
   */
  responseStarted(input: {
    readonly status: number;
    readonly sessionId: string;
    readonly closeFollows: boolean;
  }): void;
  /** Releases the request's counts; idempotent; call it however the request ended. */
  finish(): void;
}

const noHooks: SessionHooks = {
  exportSessionStates: () => Promise.resolve({}),
  restoreSessionStates: () => Promise.resolve(),
  retireSessionState: () => Promise.resolve(),
};

/**
 * The checkpoint participant of a resources server: tracks which attempt each session belongs
 * to, gates and counts data requests, and exports, restores and frees session state through the
 * server's hooks. Transport-free; the express middleware drives it through {@link admit}.
 *
 * ## Rules (see docs/resources-server.md)
 * - A request arriving while a checkpoint is open waits for resume instead of being refused; a
 *   replayable `/verify` is admitted at once. Session starts also wait out the seed gate, which
 *   a `restart_only` server closes too.
 * - A session belongs to the attempt that seeded it: another attempt's request on it is refused
 *   with `stale_attempt` (session starts excepted). `/close_session` is never refused by retire
 *   marks.
 * - Retire marks first (fencing the attempt's sessions at once), drains admitted seeds and
 *   requests in flight, then frees each session through `retireSessionState`. The refusal lasts
 *   until `forget`, which is refused with `retire_incomplete` while anything retired remains.
 *
 * @see docs/resources-server.md
 */
export class ResourcesParticipant extends Participant<ResourcesRecord> {
  readonly kind = "resources" as const;
  readonly recordSchema = ResourcesRecordSchema;
  readonly mode: CheckpointMode;
  readonly verify: CheckpointVerify;
  readonly #sessionStarts: ReadonlySet<string>;
  readonly #hooks: SessionHooks;
  readonly #stateSchema: z.ZodType | null;
  readonly #logger: Logger | null;

  /** Data admission: false only for stateless/exported while a checkpoint is open. */
  #accepting = true;
  /** The seed gate: closed by every close-admission, in every mode. */
  #open = true;
  #opened: Deferred<void> = deferred<void>();
  /** Admitted, non-replayable requests executing. */
  #inflight = 0;
  /** The same, per capture key of the episode each request is for ("" when none). */
  readonly #inflightByKey = new Map<string, number>();
  /** Session ID → the attempt it is bound to. */
  readonly #sessions = new Map<string, EpisodeId>();
  /** Rollout ID → its session IDs. */
  readonly #byRollout = new Map<string, Set<string>>();
  /** The routing owner of sessions started here (null with one worker). */
  readonly #owner: string | null;
  /** Session ID → routing owner (null with one worker). */
  readonly #owners = new Map<string, string | null>();
  /** Capture key → admitted-but-unfinished session starts. */
  readonly #seeding = new Map<string, { episode: EpisodeId; count: number }>();
  /** Session ID → requests executing on it (replayable ones included). */
  readonly #sessionRequests = new Map<string, number>();
  /** Sessions a replayable `/verify` ended while admission was closed. */
  readonly #deferredEnds = new Set<string>();
  /** Rollout ID → session IDs retired under it (until forget). */
  readonly #retiredByRollout = new Map<string, Set<string>>();
  /** The refusal set: session ID → its rollout. */
  readonly #refused = new Map<string, string>();
  /** Restored sessions no request has used yet. */
  readonly #restoredPending = new Set<string>();
  /** Sessions a restore installed (requests on them must name their attempt). */
  readonly #restored = new Set<string>();
  /** Capture keys earlier prepare stages reported as restarts, until admission reopens. */
  #carried = new Set<string>();

  constructor(options: ResourcesParticipantOptions = {}) {
    super();
    this.#owner = options.owner ?? null;
    this.mode = options.mode ?? "restart_only";
    this.verify = options.verify ?? "wait";
    this.#sessionStarts = new Set(options.sessionStarts ?? [SEED_SESSION_PATH]);
    this.#hooks = { ...noHooks, ...options.hooks };
    this.#stateSchema = options.stateSchema ?? null;
    this.#logger = options.logger ?? null;
  }

  // ---- Data plane ----------------------------------------------------------------------

  /** Whether `path` starts a session. */
  isSessionStart(path: string): boolean {
    return this.#sessionStarts.has(path);
  }

  /** Whether `path` may run while admission is closed (a replayable `/verify`). */
  isReplayable(path: string): boolean {
    return path === VERIFY_PATH && this.verify === "replay";
  }

  /** Whether `path` needs a rollout prefix with checkpointing on (starts and ends). */
  needsRollout(path: string): boolean {
    return this.isSessionStart(path) || path === VERIFY_PATH || path === CLOSE_SESSION_PATH;
  }

  /** Whether a session is tracked and not fenced. */
  isOpen(sessionId: string): boolean {
    return this.#sessions.has(sessionId) && !this.#refused.has(sessionId);
  }

  /** The attempt a session is bound to, or null when untracked. */
  sessionEpisode(sessionId: string): EpisodeId | null {
    return this.#sessions.get(sessionId) ?? null;
  }

  /**
   * Waits until the request may run, then admits it (or throws the refusal). Never refuses for
   * an open checkpoint: the request waits for resume. A waiting request is not in flight.
   *
   * @throws EpisodeError `rollout_id_required` (400) or `stale_attempt` (409)
   */
  async admit(request: AdmitRequest): Promise<AdmittedRequest> {
    const { sessionId, path, episode } = request;
    const start = this.isSessionStart(path);
    if (episode === null && this.needsRollout(path)) throw EpisodeError.rolloutIdRequired(path);
    const replayable = this.isReplayable(path);
    // Re-check on every wake: a new checkpoint may close admission before this request runs.
    while ((!replayable && !this.#accepting) || (start && !this.#open)) {
      await this.#waitOpen(request.signal);
    }
    // From here to the end nothing awaits: a retire that marks after this point sees the seed.
    const seedEpisode = start ? episode : null;
    if (seedEpisode !== null) this.#addSeeding(seedEpisode, 1);
    try {
      this.#check(sessionId, path, episode, start, replayable);
    } catch (error) {
      if (seedEpisode !== null) this.#addSeeding(seedEpisode, -1);
      throw error;
    }
    this.#restoredPending.delete(sessionId);
    const counted = !replayable;
    // A session start is its own attempt's request, whatever attempt the cookie's session held.
    const key = !counted
      ? ""
      : seedEpisode !== null
        ? captureKey(seedEpisode)
        : this.#keyOf(sessionId, episode);
    this.#sessionRequests.set(sessionId, (this.#sessionRequests.get(sessionId) ?? 0) + 1);
    if (counted) {
      this.#inflight += 1;
      this.#inflightByKey.set(key, (this.#inflightByKey.get(key) ?? 0) + 1);
    }
    let tracked = false;
    let finished = false;
    return {
      seedEpisode,
      responseStarted: ({ status, sessionId: now, closeFollows }) => {
        if (tracked || finished) return;
        tracked = true;
        if (status < 200 || status >= 300) return;
        if (seedEpisode !== null) this.seeded(now, seedEpisode, this.#owner);
        else if (path === CLOSE_SESSION_PATH) this.sessionEnded(sessionId);
        else if (path === VERIFY_PATH && !(replayable && closeFollows)) {
          if (replayable && !this.#accepting) this.#deferredEnds.add(sessionId);
          else this.sessionEnded(sessionId);
        }
        this.notify();
      },
      finish: () => {
        if (finished) return;
        finished = true;
        const left = (this.#sessionRequests.get(sessionId) ?? 1) - 1;
        if (left > 0) this.#sessionRequests.set(sessionId, left);
        else this.#sessionRequests.delete(sessionId);
        if (counted) {
          this.#inflight -= 1;
          const n = (this.#inflightByKey.get(key) ?? 1) - 1;
          if (n > 0) this.#inflightByKey.set(key, n);
          else this.#inflightByKey.delete(key);
        }
        if (seedEpisode !== null) this.#addSeeding(seedEpisode, -1);
        this.notify();
      },
    };
  }

  /**
   * Binds a session to the attempt that started it (a seed of a restored ID claims it). A
   * session whose attempt was retired meanwhile is registered as retired at once.
   */
  seeded(sessionId: string, episode: EpisodeId, owner: string | null = null): void {
    this.#bind(sessionId, episode, owner);
    this.notify();
  }

  /** {@link seeded} without the notification: a restore binds thousands, then notifies once. */
  #bind(sessionId: string, episode: EpisodeId, owner: string | null): void {
    this.#unbind(sessionId);
    this.#restoredPending.delete(sessionId);
    this.#restored.delete(sessionId);
    this.#sessions.set(sessionId, episode);
    let ids = this.#byRollout.get(episode.rollout_id);
    if (ids === undefined) this.#byRollout.set(episode.rollout_id, (ids = new Set()));
    ids.add(sessionId);
    // A restored session keeps the owner its cookies name, wherever it is served now.
    this.#owners.set(sessionId, this.#owners.get(sessionId) ?? owner ?? null);
    if (this.retired.isRetired(episode)) this.#fence(sessionId, episode.rollout_id);
  }

  /** Stops tracking a session (a close, a verify, or a server-declared end). Unknown IDs: no-op. */
  sessionEnded(sessionId: string): void {
    this.#unbind(sessionId);
    this.#owners.delete(sessionId);
    this.#restoredPending.delete(sessionId);
    this.#restored.delete(sessionId);
    this.#deferredEnds.delete(sessionId);
    this.notify();
  }

  #check(
    sessionId: string,
    path: string,
    episode: EpisodeId | null,
    start: boolean,
    replayable: boolean,
  ): void {
    const bound = this.#sessions.get(sessionId);
    if (path !== CLOSE_SESSION_PATH) {
      if (this.#refused.has(sessionId)) {
        throw new EpisodeError(
          "stale_attempt",
          `session '${sessionId}' belongs to a retired attempt; seed a new session under the next attempt`,
          bound === undefined ? null : captureKey(bound),
        );
      }
      if (episode !== null) this.retired.check(episode);
    }
    if (bound !== undefined && episode !== null && !start && !sameEpisode(bound, episode)) {
      throw new EpisodeError(
        "stale_attempt",
        `session '${sessionId}' belongs to attempt '${captureKey(bound)}', not '${captureKey(episode)}'`,
        captureKey(episode),
      );
    }
    if (episode === null && this.#restored.has(sessionId)) {
      throw EpisodeError.rolloutIdRequired(`a request on restored session '${sessionId}'`);
    }
    if (!this.#accepting && !replayable) throw EpisodeError.admissionClosed(path);
  }

  #keyOf(sessionId: string, episode: EpisodeId | null): string {
    const bound = this.#sessions.get(sessionId) ?? episode;
    return bound === null ? "" : captureKey(bound);
  }

  #addSeeding(episode: EpisodeId, delta: number): void {
    const key = captureKey(episode);
    const entry = this.#seeding.get(key) ?? { episode, count: 0 };
    entry.count += delta;
    if (entry.count > 0) this.#seeding.set(key, entry);
    else this.#seeding.delete(key);
  }

  async #waitOpen(signal: AbortSignal | undefined): Promise<void> {
    signal?.throwIfAborted();
    if (signal === undefined) {
      await this.#opened.promise;
      return;
    }
    const aborted = deferred<void>();
    const onAbort = (): void => aborted.reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      await Promise.race([this.#opened.promise, aborted.promise]);
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  #unbind(sessionId: string): void {
    const bound = this.#sessions.get(sessionId);
    if (bound === undefined) return;
    this.#sessions.delete(sessionId);
    const ids = this.#byRollout.get(bound.rollout_id);
    ids?.delete(sessionId);
    if (ids?.size === 0) this.#byRollout.delete(bound.rollout_id);
  }

  #fence(sessionId: string, rolloutId: string): void {
    this.#refused.set(sessionId, rolloutId);
    let ids = this.#retiredByRollout.get(rolloutId);
    if (ids === undefined) this.#retiredByRollout.set(rolloutId, (ids = new Set()));
    ids.add(sessionId);
  }

  /** Sessions of `episode`'s rollout bound to that attempt or an earlier one (via the index). */
  #sessionsUpTo(episode: EpisodeId): string[] {
    const ids = this.#byRollout.get(episode.rollout_id);
    if (ids === undefined) return [];
    return [...ids].filter(
      (id) => (this.#sessions.get(id)?.attempt ?? Infinity) <= episode.attempt,
    );
  }

  // ---- Control plane -------------------------------------------------------------------

  override closeAdmission(request: CloseAdmissionRequest): void {
    this.#open = false;
    if (this.mode !== "restart_only") this.#accepting = false;
    if ("restarts" in request && request.restarts !== undefined) {
      this.#carried = new Set(request.restarts);
    }
    this.notify();
  }

  override openAdmission(): void {
    this.#accepting = true;
    for (const id of [...this.#deferredEnds]) this.sessionEnded(id);
    this.#carried = new Set();
    this.#open = true;
    const opened = this.#opened;
    this.#opened = deferred<void>();
    opened.resolve();
    this.notify();
  }

  #effectiveInflight(): number {
    let n = this.#inflight;
    for (const key of this.#carried) n -= this.#inflightByKey.get(key) ?? 0;
    return n;
  }

  #blockers(): string[] {
    const keys = new Set<string>();
    for (const id of this.#refused.keys()) {
      const bound = this.#sessions.get(id);
      if (bound === undefined) continue;
      const key = captureKey(bound);
      if (!this.#carried.has(key)) keys.add(key);
    }
    return [...keys].sort();
  }

  override ready(): boolean {
    if (this.mode !== "restart_only" && this.#effectiveInflight() > 0) return false;
    for (const id of this.#refused.keys()) {
      const bound = this.#sessions.get(id);
      if (bound !== undefined && !this.#carried.has(captureKey(bound))) return false;
    }
    return true;
  }

  override readiness(): PrepareReport {
    const blockers = this.#blockers();
    const restarts = new Set<string>();
    if (this.mode === "restart_only") {
      for (const [id, bound] of this.#sessions) {
        if (!this.#refused.has(id)) restarts.add(captureKey(bound));
      }
      // A seed in flight when admission closed: its reply says restart, so report it now.
      for (const [key, { episode }] of this.#seeding) {
        if (!this.retired.isRetired(episode)) restarts.add(key);
      }
    }
    return prepareReport({
      ready:
        (this.mode === "restart_only" || this.#effectiveInflight() === 0) && blockers.length === 0,
      blockers,
      counts: { inflight: this.#inflight, sessions: this.#sessions.size },
      restarts: [...restarts].sort(),
    });
  }

  override async export(
    scope: readonly EpisodeId[] | null,
    signal: AbortSignal,
  ): Promise<ResourcesRecord[]> {
    // Nothing held (a stateless server, or no session live): the scope is not even looked at.
    if (this.mode !== "exported" || this.#sessions.size === 0) return [];
    const candidates = this.#exportCandidates(scope);
    if (candidates.length === 0) return [];
    const states = await this.#hooks.exportSessionStates({
      sessionIds: candidates.map((c) => c.id),
      signal,
    });
    const records: ResourcesRecord[] = [];
    for (const { id, bound } of candidates) {
      const state = sessionValue(states, id);
      if (state === ABSENT) {
        // Already dropped (e.g. a verifier that cleaned up after failing): stop tracking it.
        this.#logger?.warn(
          { sessionId: id, episode: captureKey(bound) },
          "session missing from exportSessionStates: dropped, not exported",
        );
        this.sessionEnded(id);
        continue;
      }
      records.push({
        episode_id: episodeIdToWire(bound) as ResourcesRecord["episode_id"],
        session_id: id,
        state,
        owner: this.#owners.get(id) ?? null,
      });
    }
    return records;
  }

  /**
   * The sessions an export writes, in capture-key order, sessions of one attempt by session ID:
   * the commit reply and, after a crash, the restore reply then list their episodes in one pass
   * rather than sorting 8,000 keys in a process still cold. With a scope, walked in the scope's
   * key order (a controller sends it sorted) through the sessions of each rollout: no sort.
   */
  #exportCandidates(scope: readonly EpisodeId[] | null): ExportCandidate[] {
    const candidates: ExportCandidate[] = [];
    const exported = (id: string, bound: EpisodeId, key: string): boolean =>
      !this.#refused.has(id) && !this.#carried.has(key) && captureKey(bound) === key;
    if (scope === null) {
      for (const [id, bound] of this.#sessions) {
        const key = captureKey(bound);
        if (exported(id, bound, key)) candidates.push({ id, bound, key });
      }
      return candidates.sort(byKeyThenId);
    }
    const episodes = scopeInKeyOrder(scope);
    const keys = sortedScopeKeys(scope);
    for (let i = 0; i < episodes.length; i++) {
      const ids = this.#byRollout.get((episodes[i] as EpisodeId).rollout_id);
      if (ids === undefined) continue;
      const key = keys[i] as string;
      const first = candidates.length;
      for (const id of ids) {
        const bound = this.#sessions.get(id);
        if (bound !== undefined && exported(id, bound, key)) candidates.push({ id, bound, key });
      }
      // Several sessions of one attempt (rare): ordered among themselves by session ID.
      if (candidates.length - first > 1) {
        const group = candidates.splice(first).sort(byKeyThenId);
        for (const c of group) candidates.push(c);
      }
    }
    return candidates;
  }

  override async install(
    records: readonly ResourcesRecord[],
    _scope: readonly EpisodeId[],
    signal: AbortSignal,
  ): Promise<void> {
    if (this.#sessions.size > 0 || this.#inflight > 0 || this.#sessionRequests.size > 0) {
      throw new CheckpointError(
        "checkpoint_error",
        "resources restore requires a process that has not served sessions; restore into a fresh process",
      );
    }
    if (records.length === 0) return;
    if (this.mode === "restart_only") {
      throw new CheckpointError(
        "checkpoint_error",
        "a restart_only resources server cannot restore session state; its rollouts start over",
      );
    }
    refuseDuplicateRecords(
      records,
      (r) => r.session_id,
      "resources session",
      (r) => captureKey(parseEpisodeId(r.episode_id)),
    );
    if (this.mode === "exported") {
      // Every state checked before any is handed over: a bad one installs nothing. The hook
      // gets what the schema parsed, so neither it nor the base classes walk a state again.
      const schema = this.#stateSchema;
      const checked =
        schema === null
          ? records.map((record) => record.state)
          : records.map((record) => checkState(schema, record));
      // Own keys, `__proto__` included; a loop rather than an entry pair per session.
      const states: Record<string, JsonValue> = {};
      for (let i = 0; i < records.length; i++) {
        setOwnKey(states, (records[i] as ResourcesRecord).session_id, checked[i]);
      }
      try {
        await this.#hooks.restoreSessionStates({ states, signal });
      } catch (error) {
        if (error instanceof GymError) throw error;
        throw new CheckpointStateError(
          `restoreSessionStates refused the checkpoint's session states: ${(error as Error).message}; ` +
            "nothing was restored",
          null,
          { cause: error },
        );
      }
    }
    for (const record of records) {
      const next = nextAttempt(parseEpisodeId(record.episode_id));
      this.#bind(record.session_id, next, record.owner);
      this.#owners.set(record.session_id, record.owner);
      this.#restoredPending.add(record.session_id);
      this.#restored.add(record.session_id);
    }
    this.notify();
  }

  /** A checkpoint holds each session once. */
  recordIdentity(record: ResourcesRecord): { what: string; key: string } | null {
    const id = (record as { session_id?: unknown }).session_id;
    return typeof id === "string" ? { what: "resources session", key: id } : null;
  }

  override restoredPending(): EpisodeId[] {
    const byKey = new Map<string, EpisodeId>();
    for (const id of this.#restoredPending) {
      const bound = this.#sessions.get(id);
      if (bound !== undefined) byKey.set(captureKey(bound), bound);
    }
    return [...byKey.keys()].sort().map((key) => byKey.get(key) as EpisodeId);
  }

  override async deleteRestored(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    for (const id of this.#sessionsUpTo(episode)) {
      if (!this.#restoredPending.has(id)) continue;
      if (this.mode === "exported") await this.#hooks.retireSessionState({ sessionId: id, signal });
      this.sessionEnded(id);
    }
  }

  override markRetired(episodes: readonly EpisodeId[]): void {
    this.retired.mark(episodes);
    // Fence the attempts' sessions before anything awaits, so a retire cut short still refuses them.
    // None held (a stateless server, a fresh process at restore): no lookup per episode.
    if (this.#sessions.size > 0) {
      for (const episode of episodes) {
        for (const id of this.#sessionsUpTo(episode)) this.#fence(id, episode.rollout_id);
      }
    }
    this.notify();
  }

  override async retire(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    this.retired.mark([episode]);
    // 1. Admitted seeds of this rollout up to the attempt register their session first.
    await this.#waitUntil(signal, () => !this.#seedingUpTo(episode));
    // 2-3. Fence the attempt's sessions (the mark did already; sessions seeded since, too).
    const ids = this.#sessionsUpTo(episode);
    for (const id of ids) this.#fence(id, episode.rollout_id);
    this.notify();
    // 4. Drain requests executing on them (new ones are refused).
    await this.#waitUntil(signal, () => ids.every((id) => !this.#sessionRequests.has(id)));
    // 5. Free, then untrack: a session stays tracked until its hook returned.
    for (const id of ids) {
      signal.throwIfAborted();
      if (!this.#sessions.has(id)) continue;
      await this.#hooks.retireSessionState({ sessionId: id, signal });
      this.#unbind(id);
      this.#owners.delete(id);
      this.#restoredPending.delete(id);
      this.#restored.delete(id);
      this.#deferredEnds.delete(id);
    }
    this.notify();
  }

  #seedingUpTo(episode: EpisodeId): boolean {
    for (const { episode: e } of this.#seeding.values()) {
      if (e.rollout_id === episode.rollout_id && e.attempt <= episode.attempt) return true;
    }
    return false;
  }

  async #waitUntil(signal: AbortSignal, done: () => boolean): Promise<void> {
    for (;;) {
      signal.throwIfAborted();
      const change = this.nextChange();
      if (done()) return;
      const aborted = deferred<void>();
      const onAbort = (): void => aborted.reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      // Re-check at least every second even without a notification.
      const timer = setTimeout(() => aborted.resolve(), 1000);
      try {
        await Promise.race([change, aborted.promise]);
      } finally {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
      }
    }
  }

  override checkForget(rolloutIds: readonly string[]): void {
    // Linear in the rollouts named: one pass over the seeds in flight, one lookup per rollout.
    const held = new Set<string>();
    const seedsByRollout = new Map<string, EpisodeId[]>();
    for (const { episode } of this.#seeding.values()) {
      const seeds = seedsByRollout.get(episode.rollout_id);
      if (seeds === undefined) seedsByRollout.set(episode.rollout_id, [episode]);
      else seeds.push(episode);
    }
    for (const rolloutId of rolloutIds) {
      for (const id of this.#retiredByRollout.get(rolloutId) ?? []) {
        if (this.#sessions.has(id)) held.add(id);
      }
      const mark = this.retired.markOf(rolloutId);
      if (mark === undefined) continue;
      for (const id of this.#byRollout.get(rolloutId) ?? []) {
        const bound = this.#sessions.get(id);
        if (bound !== undefined && bound.attempt <= mark) held.add(id);
      }
      for (const episode of seedsByRollout.get(rolloutId) ?? []) {
        if (episode.attempt <= mark) held.add(`(a seed of ${captureKey(episode)} in flight)`);
      }
    }
    if (held.size > 0) {
      const named = [...held].slice(0, 10).join(", ");
      throw new CheckpointError(
        "retire_incomplete",
        `forget refused: retired sessions are still held (${named}); retire again first`,
      );
    }
  }

  override forget(rolloutIds: readonly string[]): void {
    this.retired.forget(rolloutIds);
    for (const rolloutId of rolloutIds) {
      for (const id of this.#retiredByRollout.get(rolloutId) ?? []) this.#refused.delete(id);
      this.#retiredByRollout.delete(rolloutId);
    }
  }

  override statusExtra(): Record<string, unknown> {
    return { mode: this.mode, verify: this.verify, retired_sessions: this.#refused.size };
  }
}

/**
 * The record's state as `schema` parsed it; throws 422 `invalid_checkpoint_state` naming the
 * episode when it fails.
 */
function checkState(schema: z.ZodType, record: ResourcesRecord): JsonValue {
  const parsed = schema.safeParse(record.state);
  if (parsed.success) return parsed.data as JsonValue;
  const key = captureKey(parseEpisodeId(record.episode_id));
  const issues = parsed.error.issues
    .slice(0, 3)
    .map((issue) => `${["state", ...issue.path].join(".")}: ${issue.message}`)
    .join("; ");
  throw new CheckpointStateError(
    `checkpoint record of episode '${key}' (session '${record.session_id}') holds a state this server does not accept: ${issues}; nothing was restored`,
    key,
  );
}

/** A session a commit exports: its ID, the attempt it is bound to, and that attempt's key. */
interface ExportCandidate {
  readonly id: string;
  readonly bound: EpisodeId;
  readonly key: string;
}

/** Capture-key order, then session ID: the order of a resources server's records. */
function byKeyThenId(a: ExportCandidate, b: ExportCandidate): number {
  return compareStrings(a.key, b.key) || compareStrings(a.id, b.id);
}
