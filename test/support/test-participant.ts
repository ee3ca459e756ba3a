/**
 * A realistic in-memory participant for control-plane tests, plus the few helpers every control
 * test needs (requests, temp directories, error assertions).
 *
 * ## The participant
 * {@link TestParticipant} holds episodes keyed by capture key. Each is `running` (a blocker) or
 * `parked` at a boundary with a JSON payload; an episode marked a restart never blocks and is
 * never exported. Restored episodes whose replacement has not started yet are kept apart as
 * "pending" (they are what `restoredPending()` returns and what `deleteRestored` frees).
 *
 * ## Injecting failures and delays
 * Every hook the control plane awaits (`closeAdmission`, `openAdmission`, `export`, `install`,
 * `retire`, `deleteRestored`, `parkExported`) first runs the oldest pending interceptor for that
 * hook, then its default behaviour:
 * - {@link TestParticipant.hold} returns a {@link Gate}: the next call(s) wait until the test
 *   releases or fails the gate (or, by default, until the call's signal aborts). Tests never
 *   sleep to synchronize: they await `gate.entered()` instead.
 * - {@link TestParticipant.fail} makes the next call(s) throw.
 * - {@link TestParticipant.intercept} runs any function first.
 *
 * ## Logs
 * `calls` lists every hook call at entry (hook, detail, signal, arguments); `events` is a
 * timeline of entries and exits (`"install r-a1"`, `"install:done"`, `"install:failed"`), so
 * tests can assert exactly which hooks ran and in which order.
 */
import { mkdtemp, readdir, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { expect } from "vitest";
import type { z } from "zod";
import { Participant, type CloseAdmissionRequest } from "#sdk/control/participant.js";
import { ControlPlane, type ControlPlaneOptions } from "#sdk/control/control-plane.js";
import { CheckpointStateError, type ErrorCode } from "#sdk/errors.js";
import {
  captureKey,
  episodeId,
  fromCaptureKey,
  nextAttempt,
  type EpisodeId,
} from "#sdk/identity/episode-id.js";
import { deferred, type Deferred } from "#sdk/util/deferred.js";
import { nowTs } from "#sdk/util/deadline.js";
import {
  prepareReport,
  type CheckpointRequest,
  type CommitRequest,
  type ParticipantKind,
  type PrepareReply,
  type PrepareReport,
  type RestoreRequest,
} from "#sdk/wire/control.js";
import type { JsonValue } from "#sdk/json/json-value.js";
import { JsonPayloadSchema } from "#sdk/json/json-payload-schema.js";
import { recordSchema, type CommitReply, type Manifest } from "#sdk/wire/storage.js";

/** The record every test participant stores: its episode and the boundary payload. */
export const TestRecordSchema = recordSchema({ payload: JsonPayloadSchema });
/** One stored record of a {@link TestParticipant}. */
export type TestRecord = z.infer<typeof TestRecordSchema>;

/** The hooks a test can delay, fail or observe. */
export type HookName =
  | "closeAdmission"
  | "openAdmission"
  | "export"
  | "install"
  | "retire"
  | "deleteRestored"
  | "parkExported";

/** One hook call, logged at entry. */
export interface HookCall {
  readonly hook: HookName;
  /** What the call named: a capture key, a scope, or a checkpoint ID; "" when nothing. */
  readonly detail: string;
  /** The call's abort signal, when the hook takes one. */
  readonly signal: AbortSignal | null;
  /** The raw arguments. */
  readonly args: readonly unknown[];
}

/** A hold on the next call(s) of one hook. */
export interface Gate {
  /** Resolves once `count` calls have entered the gate (default 1); returns them. */
  entered(count?: number): Promise<HookCall[]>;
  /** Calls that have entered so far. */
  readonly calls: readonly HookCall[];
  /** Lets every held call (and later ones this gate still covers) continue. */
  release(): void;
  /** Makes every held call (and later ones this gate still covers) throw `error`. */
  fail(error: unknown): void;
}

/** Options of {@link TestParticipant.hold}. */
export interface HoldOptions {
  /** How many calls the gate covers. @default 1 */
  readonly times?: number;
  /** Whether a held call ends (rejecting with the signal's reason) when its signal aborts. @default true */
  readonly abortable?: boolean;
}

/** One live episode. */
export interface TestEpisode {
  readonly episode: EpisodeId;
  state: "running" | "parked";
  /** The latest boundary, or null when none was recorded yet. */
  payload: JsonValue | null;
  restart: boolean;
}

/** A restored episode whose replacement has not started here. */
export interface PendingEpisode {
  /** The continuing (replacement) attempt. */
  readonly episode: EpisodeId;
  readonly payload: JsonValue | null;
}

interface CallWaiter {
  readonly hook: HookName | "ready";
  readonly count: number;
  readonly done: Deferred<void>;
}

interface Interceptor {
  remaining: number;
  run(call: HookCall): void | Promise<void>;
}

/** Options of a {@link TestParticipant}. */
export interface TestParticipantOptions {
  /** @default "resources" */
  readonly kind?: ParticipantKind;
}

/** A failure injected by {@link TestParticipant.fail} unless the test gives its own. */
export class InjectedError extends Error {
  override name = "InjectedError";
}

/** An in-memory participant driven by tests; see the module documentation. */
export class TestParticipant extends Participant<TestRecord> {
  readonly kind: ParticipantKind;
  readonly recordSchema = TestRecordSchema;

  /** Live episodes by capture key. */
  readonly episodes = new Map<string, TestEpisode>();
  /** Restored episodes not started here, by capture key of the continuing attempt. */
  readonly pending = new Map<string, PendingEpisode>();
  /** Whether new work is admitted. */
  admissionOpen = true;

  /** Every hook call, at entry. */
  readonly calls: HookCall[] = [];
  /** Entries and exits of hooks, in order. */
  readonly events: string[] = [];
  /** How often `readiness()` (the full report) and `ready()` (the cheap check) ran. */
  readinessCalls = 0;
  readyCalls = 0;

  /** Extra fields of `status`, `commit` replies and manifests. */
  statusExtras: Record<string, unknown> = {};
  commitExtras: Record<string, unknown> = {};
  manifestExtras: Record<string, unknown> = {};
  /** Manifests handed to `restoreManifest`. */
  readonly restoredManifests: Manifest[] = [];
  /** A record whose payload equals this is refused by `restoreRecords`. */
  invalidPayload: JsonValue = "invalid";

  readonly #interceptors = new Map<HookName, Interceptor[]>();
  #callWaiters: CallWaiter[] = [];

  constructor(options: TestParticipantOptions = {}) {
    super();
    this.kind = options.kind ?? "resources";
  }

  // ------------------------------------------------------------------ episode controls

  /** Registers a running episode (a blocker unless it is a restart). */
  start(key: string, options: { restart?: boolean; payload?: JsonValue | null } = {}): void {
    if (this.episodes.has(key)) throw new Error(`episode ${key} already running`);
    this.episodes.set(key, {
      episode: fromCaptureKey(key),
      state: "running",
      payload: options.payload ?? null,
      restart: options.restart ?? false,
    });
    this.notify();
  }

  /** Parks an episode at a boundary holding `payload`; notifies unless told not to. */
  park(key: string, payload: JsonValue, options: { notify?: boolean } = {}): void {
    const episode = this.#episode(key);
    episode.state = "parked";
    episode.payload = payload;
    if (options.notify ?? true) this.notify();
  }

  /** Lets a parked episode run again (it blocks again). */
  unpark(key: string, options: { notify?: boolean } = {}): void {
    this.#episode(key).state = "running";
    if (options.notify ?? true) this.notify();
  }

  /** Replaces an episode's boundary without changing its state (no in-place mutation). */
  setPayload(key: string, payload: JsonValue): void {
    this.#episode(key).payload = payload;
  }

  /** Marks an episode a restart: never blocking, never exported. */
  markRestart(key: string): void {
    this.#episode(key).restart = true;
    this.notify();
  }

  /** Unregisters an episode. */
  end(key: string): void {
    this.episodes.delete(key);
    this.notify();
  }

  /** Adds a restored episode whose replacement (`key`, the continuing attempt) has not started. */
  addPending(key: string, payload: JsonValue | null = null): void {
    this.pending.set(key, { episode: fromCaptureKey(key), payload });
  }

  /** The replacement of a pending restored episode starts: it runs from its boundary. */
  startRestored(key: string): void {
    const pending = this.pending.get(key);
    if (pending === undefined) throw new Error(`no pending restored episode ${key}`);
    this.pending.delete(key);
    this.start(key, { payload: pending.payload });
  }

  // ------------------------------------------------------------------ injection

  /** Runs `fn` before the default behaviour of the next `times` calls of `hook`. */
  intercept(hook: HookName, fn: (call: HookCall) => void | Promise<void>, times = 1): void {
    const list = this.#interceptors.get(hook) ?? [];
    list.push({ remaining: times, run: fn });
    this.#interceptors.set(hook, list);
  }

  /** The next `times` calls of `hook` throw `error`. */
  fail(hook: HookName, error: unknown = new InjectedError(`${hook} failed`), times = 1): void {
    this.intercept(
      hook,
      () => {
        throw error;
      },
      times,
    );
  }

  /** Holds the next call(s) of `hook` until the test releases or fails the gate. */
  hold(hook: HookName, options: HoldOptions = {}): Gate {
    const abortable = options.abortable ?? true;
    const settled = deferred<void>();
    // A gate failed before any call entered must not be an unhandled rejection.
    settled.promise.catch(() => undefined);
    let outcome: { ok: true } | { ok: false; error: unknown } | null = null;
    const calls: HookCall[] = [];
    const waiters: { count: number; done: Deferred<HookCall[]> }[] = [];
    const wake = (): void => {
      for (const waiter of waiters.filter((w) => calls.length >= w.count)) {
        waiter.done.resolve(calls.slice(0, waiter.count));
      }
    };
    this.intercept(
      hook,
      async (call) => {
        calls.push(call);
        wake();
        const waits: Promise<void>[] = [settled.promise];
        const signal = call.signal;
        if (abortable && signal !== null) {
          waits.push(
            new Promise<void>((_, reject) => {
              if (signal.aborted) reject(signal.reason);
              signal.addEventListener("abort", () => reject(signal.reason), { once: true });
            }),
          );
        }
        await Promise.race(waits);
      },
      options.times ?? 1,
    );
    return {
      calls,
      entered: (count = 1) => {
        if (calls.length >= count) return Promise.resolve(calls.slice(0, count));
        const done = deferred<HookCall[]>();
        waiters.push({ count, done });
        return done.promise;
      },
      release: () => {
        if (outcome !== null) return;
        outcome = { ok: true };
        settled.resolve();
      },
      fail: (error) => {
        if (outcome !== null) return;
        outcome = { ok: false, error };
        settled.reject(error);
      },
    };
  }

  /** Resolves once `hook` has been called at least `count` times in all. */
  called(hook: HookName | "ready", count = 1): Promise<void> {
    if (this.#count(hook) >= count) return Promise.resolve();
    const done = deferred<void>();
    this.#callWaiters.push({ hook, count, done });
    return done.promise;
  }

  /** The calls of one hook, in order. */
  callsOf(hook: HookName): HookCall[] {
    return this.calls.filter((call) => call.hook === hook);
  }

  /** The details of the calls of one hook, in order. */
  detailsOf(hook: HookName): string[] {
    return this.callsOf(hook).map((call) => call.detail);
  }

  // ------------------------------------------------------------------ hooks

  async closeAdmission(request: CloseAdmissionRequest): Promise<void> {
    await this.#run("closeAdmission", request.checkpoint_id, null, [request], () => {
      this.admissionOpen = false;
    });
  }

  async openAdmission(): Promise<void> {
    await this.#run("openAdmission", "", null, [], () => {
      this.admissionOpen = true;
    });
  }

  readiness(): PrepareReport {
    this.readinessCalls += 1;
    const blockers: string[] = [];
    const restarts: string[] = [];
    for (const [key, episode] of this.episodes) {
      if (episode.restart) restarts.push(key);
      else if (episode.state === "running") blockers.push(key);
    }
    return prepareReport({
      ready: blockers.length === 0,
      blockers: blockers.sort(),
      restarts: restarts.sort(),
      counts: { episodes: this.episodes.size, pending: this.pending.size },
    });
  }

  override ready(): boolean {
    this.readyCalls += 1;
    this.#wakeCallWaiters();
    for (const episode of this.episodes.values()) {
      if (!episode.restart && episode.state === "running") return false;
    }
    return true;
  }

  exportRecords(scope: readonly EpisodeId[] | null): TestRecord[] {
    const inScope = scope === null ? null : new Set(scope.map(captureKey));
    const records: TestRecord[] = [];
    for (const key of [...this.episodes.keys()].sort()) {
      const episode = this.episodes.get(key) as TestEpisode;
      if (episode.restart || episode.state !== "parked") continue;
      if (inScope !== null && !inScope.has(key)) continue;
      records.push({ episode_id: episode.episode, payload: episode.payload });
    }
    for (const key of [...this.pending.keys()].sort()) {
      // Restored state outside a non-null scope is never exported.
      if (inScope !== null && !inScope.has(key)) continue;
      const pending = this.pending.get(key) as PendingEpisode;
      records.push({ episode_id: pending.episode, payload: pending.payload });
    }
    return records;
  }

  override async export(
    scope: readonly EpisodeId[] | null,
    signal: AbortSignal,
  ): Promise<TestRecord[]> {
    const detail = scope === null ? "null" : JSON.stringify(scope.map(captureKey));
    return await this.#run("export", detail, signal, [scope], () => this.exportRecords(scope));
  }

  /** Validates every record first, then installs each under its next attempt (as pending). */
  restoreRecords(records: readonly TestRecord[]): void {
    for (const record of records) {
      const key = captureKey(record.episode_id);
      if (JSON.stringify(record.payload) === JSON.stringify(this.invalidPayload)) {
        throw new CheckpointStateError(
          `checkpoint record of episode '${key}' is invalid: refused payload`,
          key,
        );
      }
      const next = captureKey(nextAttempt(record.episode_id));
      if (this.episodes.has(next)) {
        throw new CheckpointStateError(`episode '${next}' is already running here`, key);
      }
    }
    for (const record of records) {
      const next = nextAttempt(record.episode_id);
      this.pending.set(captureKey(next), { episode: next, payload: record.payload });
    }
  }

  override async install(
    records: readonly TestRecord[],
    scope: readonly EpisodeId[],
    signal: AbortSignal,
  ): Promise<void> {
    const detail = JSON.stringify(records.map((record) => captureKey(record.episode_id)));
    await this.#run("install", detail, signal, [records, scope], () =>
      this.restoreRecords(records),
    );
  }

  async retire(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    await this.#run("retire", captureKey(episode), signal, [episode], () => {
      this.#drop(episode, true);
      this.notify();
    });
  }

  /** Frees pending restored state only; leaves no refusal mark. */
  override async deleteRestored(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    await this.#run("deleteRestored", captureKey(episode), signal, [episode], () => {
      this.#drop(episode, false);
    });
  }

  override async parkExported(records: readonly TestRecord[]): Promise<void> {
    const detail = JSON.stringify(records.map((record) => captureKey(record.episode_id)));
    await this.#run("parkExported", detail, null, [records], () => undefined);
  }

  override restoredPending(): EpisodeId[] {
    return [...this.pending.values()].map((pending) => pending.episode);
  }

  override commitReply(): Record<string, unknown> {
    return { ...this.commitExtras };
  }

  override statusExtra(): Record<string, unknown> {
    return { ...this.statusExtras };
  }

  override manifestExtra(): Record<string, unknown> {
    return { ...this.manifestExtras };
  }

  override restoreManifest(manifest: Manifest): void {
    this.restoredManifests.push(manifest);
  }

  // ------------------------------------------------------------------ internals

  #episode(key: string): TestEpisode {
    const episode = this.episodes.get(key);
    if (episode === undefined) throw new Error(`no episode ${key}`);
    return episode;
  }

  /** Drops this attempt and earlier ones of its rollout (live ones only when `live`). */
  #drop(episode: EpisodeId, live: boolean): void {
    const stale = (e: EpisodeId): boolean =>
      e.rollout_id === episode.rollout_id && e.attempt <= episode.attempt;
    if (live) {
      for (const [key, e] of this.episodes) if (stale(e.episode)) this.episodes.delete(key);
    }
    for (const [key, p] of this.pending) if (stale(p.episode)) this.pending.delete(key);
  }

  #count(hook: HookName | "ready"): number {
    return hook === "ready" ? this.readyCalls : this.callsOf(hook).length;
  }

  #wakeCallWaiters(): void {
    const still: CallWaiter[] = [];
    for (const waiter of this.#callWaiters) {
      if (this.#count(waiter.hook) >= waiter.count) waiter.done.resolve();
      else still.push(waiter);
    }
    this.#callWaiters = still;
  }

  async #run<T>(
    hook: HookName,
    detail: string,
    signal: AbortSignal | null,
    args: readonly unknown[],
    body: () => T | Promise<T>,
  ): Promise<T> {
    const call: HookCall = { hook, detail, signal, args };
    this.calls.push(call);
    this.events.push(detail === "" ? hook : `${hook} ${detail}`);
    this.#wakeCallWaiters();
    try {
      const list = this.#interceptors.get(hook) ?? [];
      const interceptor = list.find((candidate) => candidate.remaining > 0);
      if (interceptor !== undefined) {
        interceptor.remaining -= 1;
        if (interceptor.remaining === 0) list.splice(list.indexOf(interceptor), 1);
        await interceptor.run(call);
      }
      const result = await body();
      this.events.push(`${hook}:done`);
      return result;
    } catch (error) {
      this.events.push(`${hook}:failed`);
      throw error;
    }
  }
}

// -------------------------------------------------------------------- helpers for tests

/** The default instance name of test control planes. */
export const INSTANCE = "inst";

/** A participant and its control plane. */
export interface Harness {
  readonly participant: TestParticipant;
  readonly cp: ControlPlane<TestRecord>;
}

/** A fresh test participant and control plane. */
export function harness(
  options: Partial<ControlPlaneOptions> & TestParticipantOptions = {},
): Harness {
  const participant = new TestParticipant(options.kind === undefined ? {} : { kind: options.kind });
  const cp = new ControlPlane<TestRecord>(participant, { instance: INSTANCE, ...options });
  return { participant, cp };
}

/** An absolute deadline `seconds` from now (negative: already passed). */
export function inSeconds(seconds: number): number {
  return nowTs() + seconds;
}

/** A checkpoint request whose deadline is `seconds` from now. */
export function req(checkpointId: string, seconds = 30): CheckpointRequest {
  return { checkpoint_id: checkpointId, deadline_ts: inSeconds(seconds) };
}

/** Parses capture keys into EpisodeIds. */
export function eps(...keys: string[]): EpisodeId[] {
  return keys.map(fromCaptureKey);
}

/** An EpisodeId. */
export function ep(rolloutId: string, attempt = 0): EpisodeId {
  return episodeId(rolloutId, attempt);
}

/** Awaits `promise`, expecting a GymError with this code; returns the error. */
export async function expectCode(
  promise: Promise<unknown>,
  code: ErrorCode,
): Promise<Error & { code: ErrorCode; status: number }> {
  let caught: unknown = undefined;
  let resolved = false;
  try {
    await promise;
    resolved = true;
  } catch (error) {
    caught = error;
  }
  expect(resolved, `expected a ${code} refusal, but the call succeeded`).toBe(false);
  expect(caught).toMatchObject({ code });
  return caught as Error & { code: ErrorCode; status: number };
}

/** A fresh temporary directory; remove it with {@link removeTempDir}. */
export async function makeTempDir(): Promise<string> {
  return await mkdtemp(path.join(tmpdir(), "cp-test-"));
}

/** Removes a directory made by {@link makeTempDir}. */
export async function removeTempDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
}

/** The participant directory of a test participant inside a checkpoint directory. */
export function participantPath(dir: string, kind: ParticipantKind = "resources"): string {
  return path.join(dir, "gym", kind, INSTANCE);
}

/** Whether a path exists. */
export async function exists(file: string): Promise<boolean> {
  try {
    await stat(file);
    return true;
  } catch {
    return false;
  }
}

/** The file names in a directory (empty when it does not exist). */
export async function listDir(dir: string): Promise<string[]> {
  try {
    return (await readdir(dir)).sort();
  } catch {
    return [];
  }
}

/** Lets every pending promise callback and I/O callback queued so far run (not a sleep). */
export async function flush(rounds = 3): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** A commit request; `scope` null means no scope. */
export function commitReq(
  checkpointId: string,
  dir: string,
  scope: string[] | null,
  options: { seconds?: number; deadline?: number; stop?: boolean } = {},
): CommitRequest {
  return {
    checkpoint_id: checkpointId,
    deadline_ts: options.deadline ?? inSeconds(options.seconds ?? 30),
    checkpoint_dir: dir,
    episode_ids: scope === null ? null : eps(...scope),
    stop: options.stop ?? false,
  };
}

/** A restore request. */
export function restoreReq(
  checkpointId: string,
  dir: string,
  scope: string[],
  options: { seconds?: number; deadline?: number } = {},
): RestoreRequest {
  return {
    checkpoint_id: checkpointId,
    deadline_ts: options.deadline ?? inSeconds(options.seconds ?? 30),
    checkpoint_dir: dir,
    episode_ids: eps(...scope),
  };
}

/** Prepares `checkpointId`, expecting it to reach `prepared`. */
export async function prepareReady(
  cp: ControlPlane<TestRecord>,
  checkpointId: string,
): Promise<PrepareReply> {
  const reply = await cp.prepare(req(checkpointId));
  expect(reply.phase).toBe("prepared");
  return reply;
}

/**
 * Writes a checkpoint of `episodes` (capture key → parked payload) into `dir` through a
 * separate participant and control plane, as checkpoint `checkpointId`; returns the reply.
 */
export async function writeCheckpoint(
  dir: string,
  episodes: Record<string, JsonValue>,
  checkpointId = "source",
): Promise<CommitReply> {
  const { participant, cp } = harness();
  for (const [key, payload] of Object.entries(episodes)) {
    participant.start(key);
    participant.park(key, payload);
  }
  await prepareReady(cp, checkpointId);
  const reply = await cp.commit(commitReq(checkpointId, dir, null));
  await cp.resume(req(checkpointId));
  cp.close();
  return reply;
}
