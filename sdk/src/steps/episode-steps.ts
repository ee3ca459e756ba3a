/**
 * Episode steps (see docs/episode-steps.md): the bookkeeping every owner of an episode protocol
 * shares. An episode records a boundary after each completed step; a checkpoint can be cut at a
 * boundary, or inside a step that is safe to run again.
 *
 * @see docs/concepts.md
 * @module
 */
import { untilSettledOrAborted } from "../util/abortable.js";
import { deferred, type Deferred } from "../util/deferred.js";
import { MAX_LISTED_BLOCKERS, prepareReport, type PrepareReport } from "../wire/control.js";
import type { JsonValue } from "../json/json-value.js";
import {
  EpisodeAlreadyRunningError,
  EpisodeDeadlineError,
  EpisodeRetiredError,
} from "./episode-errors.js";
import { PausableTimer } from "./pausable-timer.js";

/**
 * How a step meets a checkpoint.
 * - `wait` (use it for anything unsafe to run twice): the checkpoint waits for the step; the
 *   episode then records the boundary after it and parks there.
 * - `replay` (only for steps safe to run again: idempotent seeds, pure or judge verification,
 *   agent activations): the checkpoint does not wait; the episode counts as parked at the
 *   boundary before the step, and after a crash the step runs again from there.
 */
export type StepMode = "wait" | "replay";

/**
 * Where an episode is.
 * - `running`: between boundaries and steps (blocks a checkpoint).
 * - `wait_step`: inside a `wait` step (blocks).
 * - `replay_step`: inside a `replay` step, or held at the boundary before one that ended while a
 *   checkpoint is open (does not block; exported with its latest boundary).
 * - `parked`: at a boundary, waiting for the checkpoint to end (does not block; exported).
 */
export type EpisodeState = "running" | "wait_step" | "replay_step" | "parked";

/**
 * A boundary state: an opaque JSON value (usually an object naming the next step and the results
 * it needs), or a function building it. The function is called at most once, synchronously,
 * and only when the state will be kept (never for a restart or an episode being retired).
 * The value is kept by reference: do not mutate it afterwards.
 */
export type BoundaryState = JsonValue | (() => JsonValue);

/** Options of {@link EpisodeSteps.begin}. */
export interface BeginOptions {
  /**
   * The restored boundary this attempt continues from: handed out once by
   * {@link EpisodeSteps.continuation}, and the boundary exported until the episode records one.
   * Null: the episode starts from its input.
   * @default null
   */
  readonly continuation?: JsonValue | null;
  /**
   * Absolute deadline, Unix seconds. When the episode has used up its time its signal aborts
   * with an {@link EpisodeDeadlineError}. Time parked for a checkpoint, or spent in a replay step
   * while a checkpoint is open, does not count; a wait step's time does. Null: no deadline.
   * @default null
   */
  readonly deadlineTs?: number | null;
  /**
   * The episode cannot be captured: it never blocks, never parks, is never exported, and is
   * listed in {@link EpisodeSteps.restarts}.
   * @default false
   */
  readonly restart?: boolean;
  /**
   * Aborting it aborts the episode with the same reason (client gone, shutdown).
   * @default none
   */
  readonly signal?: AbortSignal;
}

/** Options of {@link EpisodeSteps.begin} when the runner owns the episode's task. */
export interface BeginRunOptions<T> extends BeginOptions {
  /**
   * The episode's task, started at once with the episode's signal. When it settles the episode
   * ends (as by {@link EpisodeSteps.end}), then `begin`'s promise settles the same way.
   */
  readonly run: (signal: AbortSignal) => Promise<T>;
}

/** Options of an {@link EpisodeSteps} runner. */
export interface EpisodeStepsOptions {
  /**
   * Called after every change that can affect readiness, but only while a checkpoint is open
   * (admission closed), so readiness costs nothing per step outside a checkpoint. A participant
   * passes `() => this.notify()`. It must not throw.
   * @default none
   */
  readonly onChange?: () => void;
}

/** One tracked episode. Every field that readiness depends on changes through `#refresh`. */
class Episode {
  state: EpisodeState = "running";
  boundary: JsonValue | null;
  continuation: JsonValue | null;
  restart: boolean;
  /** Set by the first retire; also the abort reason that retire used (if it aborted). */
  retired: EpisodeRetiredError | null = null;
  /** Final cleanup started: a retire waits but no longer aborts. */
  finishing = false;
  /** A retire aborted the work already (it does so once). */
  cancelled = false;
  /** A step's function is in flight. */
  stepping = false;
  /** Resolved to wake the episode from a park. */
  wake: Deferred<void> | null = null;
  deadline: PausableTimer | null = null;
  detachParent: (() => void) | null = null;
  readonly controller = new AbortController();
  /** Resolved when the episode ends; made only when a retire waits for it. */
  ended: Deferred<void> | null = null;
  // Mirrors of the runner's index sets, so each transition updates them in O(1).
  blocking = false;
  capturable = false;
  listedRestart = false;

  constructor(
    readonly key: string,
    options: BeginOptions,
  ) {
    this.boundary = this.continuation = options.continuation ?? null;
    this.restart = options.restart ?? false;
  }
}

/**
 * The episode steps of one participant, keyed by capture key: who blocks a checkpoint, what a
 * checkpoint exports, and when an episode parks. A participant drives it from its admission
 * hooks ({@link closeAdmission}, {@link openAdmission}), answers `ready()` with {@link ready}
 * and `readiness()` with {@link readiness}, exports {@link exported}, and retires through
 * {@link retire}. With checkpointing off, do not use it at all.
 *
 * ## Rules
 * - **Lifecycle.** {@link begin} registers an episode (`running`); a tracked key is refused
 *   with "already running". It stays tracked until {@link end} (or the end of its `run` task).
 *   An episode records boundaries and runs steps one at a time.
 * - **Blocking.** An episode blocks a checkpoint iff it is being retired, or it is not a restart
 *   and its state is `running` or `wait_step`. {@link blockerCount} is kept on every transition
 *   (O(1) to read); ready means it is 0.
 * - **Boundaries.** {@link boundary} records the state. Outside a checkpoint, or for a restart,
 *   the episode goes on at once (`running`). Inside one it parks (`parked`, deadline suspended)
 *   until {@link openAdmission}; if a new checkpoint closes admission before it woke, it stays
 *   parked for that one too; if it is retired while parked the boundary rejects with
 *   {@link EpisodeRetiredError}.
 * - **Steps.** {@link step} runs a function as a `wait_step` or a `replay_step`. A replay step
 *   started inside a checkpoint does not count against the deadline. When a step ends:
 *   - a replay step that succeeds while a checkpoint is open leaves the episode held at the
 *     boundary before the step (`replay_step`, not blocking) until its next boundary parks it
 *     with the step's result; a step started while held first parks there until resume, so
 *     readiness never regresses; at resume a held episode is `running` again;
 *   - a replay step that fails while a checkpoint is open clears the boundary (exported as
 *     null: it starts over from its input after a crash), parks there until resume without
 *     blocking, then rethrows the failure (its cleanup and end therefore wait for resume);
 *   - otherwise the episode is `running` again and its deadline runs.
 * - **Restarts.** A restart (from {@link begin} or {@link markRestart}) never blocks, never
 *   parks, is never exported, and is listed in {@link restarts} until it ends or is retired.
 *   {@link markRestart} waits until no checkpoint is open, so what an open checkpoint reported
 *   never changes under it.
 * - **Retire.** {@link retire} marks the episode (blocking, not exported, not a listed restart,
 *   no longer parking), wakes it, aborts its signal once (on the first retire, unless its final
 *   cleanup started: {@link finishing}), waits until it has ended, and leaves it unregistered.
 *   Cut short, the episode stays tracked (blocking, `begin` of its key refused); a retry waits
 *   again without aborting again.
 * - **Export.** {@link exported} maps every `parked` or `replay_step` episode, not retired and
 *   not a restart, to its latest boundary, or null when it has none yet.
 * - **Cancellation.** Each episode has one AbortSignal, aborted by the first of: a retire
 *   ({@link EpisodeRetiredError}), its deadline ({@link EpisodeDeadlineError}), or the `signal`
 *   given to `begin` (client gone, shutdown: its reason). Once it fires, stop: {@link boundary}
 *   and {@link step} throw its reason instead of starting, and a park rejects with it. A step's
 *   function is never abandoned: the runner awaits it (abort, then await).
 * - **Notifications.** `onChange` is called after a change only while a checkpoint is open;
 *   outside one, readiness costs nothing per step.
 * - **Timers.** Only episodes with a deadline hold a timer (unref'd); it is cleared when the
 *   episode ends, is retired, starts its final cleanup, or times out.
 *
 * @example
 * // In a participant; `restored`, `seedSession` and `verify` come from the protocol.
 * const steps = new EpisodeSteps({ onChange: () => this.notify() });
 * const reply = await steps.begin("task-3-a1", {
 *   continuation: restored,
 *   deadlineTs: nowTs() + 600,
 *   run: async (signal) => {
 *     await steps.boundary("task-3-a1", { next: "seed" });
 *     const seed = await steps.step("task-3-a1", "replay", () => seedSession(signal));
 *     await steps.boundary("task-3-a1", () => ({ next: "verify", seed }));
 *     return await steps.step("task-3-a1", "wait", () => verify(seed, signal));
 *   },
 * });
 * @see docs/concepts.md
 * @see docs/episode-steps.md
 */
export class EpisodeSteps {
  readonly #episodes = new Map<string, Episode>();
  readonly #blocking = new Set<Episode>();
  /** Episodes `parked` or in `replay_step` (restarts and retired ones included). */
  readonly #capturable = new Set<Episode>();
  /** Restarts not being retired. */
  readonly #restarts = new Set<Episode>();
  /** Episodes whose deadline a checkpoint suspended. */
  readonly #suspended = new Set<Episode>();
  #closed = false;
  /** Resolved by the next {@link openAdmission}. */
  #opened: Deferred<void> | null = null;
  readonly #onChange: (() => void) | null;

  /** @param options - See {@link EpisodeStepsOptions}. */
  constructor(options: EpisodeStepsOptions = {}) {
    this.#onChange = options.onChange ?? null;
  }

  /** Whether a checkpoint is open (admission closed). */
  get admissionClosed(): boolean {
    return this.#closed;
  }

  /** Number of tracked episodes (including ones whose retire was cut short). */
  get size(): number {
    return this.#episodes.size;
  }

  /** Whether `key` is tracked. */
  has(key: string): boolean {
    return this.#episodes.has(key);
  }

  /** The state of `key`, or null when it is not tracked. */
  stateOf(key: string): EpisodeState | null {
    return this.#episodes.get(key)?.state ?? null;
  }

  /**
   * Registers an episode and returns its AbortSignal; the caller calls {@link end} when the
   * episode's task has ended (in a `finally`), which is what a retire waits for.
   *
   * @throws {@link EpisodeAlreadyRunningError} (409 `checkpoint_error`) when `key` is tracked,
   * synchronously; the live episode is untouched. `RangeError` when `deadlineTs` is NaN.
   */
  begin(key: string, options?: BeginOptions): AbortSignal;
  /**
   * Registers an episode and runs `options.run` as its task; the episode ends when the task
   * settles, and the returned promise settles like the task.
   *
   * @throws {@link EpisodeAlreadyRunningError} synchronously when `key` is tracked.
   */
  begin<T>(key: string, options: BeginRunOptions<T>): Promise<T>;
  begin<T>(key: string, options: BeginOptions | BeginRunOptions<T> = {}): AbortSignal | Promise<T> {
    if (this.#episodes.has(key)) throw new EpisodeAlreadyRunningError(key);
    if (Number.isNaN(options.deadlineTs)) {
      throw new RangeError(`begin(${key}): deadlineTs is NaN; pass Unix seconds, or null for none`);
    }
    const e = new Episode(key, options);
    this.#episodes.set(key, e);
    this.#watchParent(e, options.signal);
    this.#startDeadline(e, options.deadlineTs ?? null);
    this.#refresh(e);
    this.#changed();
    if ("run" in options) return this.#runTask(e, options.run);
    return e.controller.signal;
  }

  /** The signal of a tracked episode (aborted by retire, deadline or the begin signal). */
  signal(key: string): AbortSignal {
    return this.#require(key, "signal").controller.signal;
  }

  /**
   * The restored boundary the episode continues from: the first call returns it, later calls
   * (and episodes that were not restored, or are not tracked) get null.
   */
  continuation(key: string): JsonValue | null {
    const e = this.#episodes.get(key);
    if (e === undefined) return null;
    const continuation = e.continuation;
    e.continuation = null;
    return continuation;
  }

  /**
   * Records a boundary. Resolves at once outside a checkpoint or for a restart; inside a
   * checkpoint the episode parks until {@link openAdmission}.
   *
   * @param state - The boundary, or a function building it (called only when kept).
   * @throws the episode's abort reason when its signal has fired (before recording anything);
   * {@link EpisodeRetiredError} when retired while parked.
   */
  async boundary(key: string, state: BoundaryState): Promise<void> {
    const e = this.#require(key, "boundary");
    this.#refuseInsideStep(e, "record a boundary");
    e.controller.signal.throwIfAborted();
    if (e.restart || e.retired !== null) {
      // Never exported: nothing to record, and nothing to park for.
      this.#toRunning(e);
      return;
    }
    e.boundary = typeof state === "function" ? state() : state;
    if (!this.#closed) {
      this.#toRunning(e);
      return;
    }
    await this.#park(e);
  }

  /**
   * Runs `fn` as one step of the episode in `mode` and returns its result (see the class Rules
   * for what happens when it ends inside a checkpoint). `fn` gets the episode's signal; the
   * runner never abandons it: on abort it still waits for `fn` to settle.
   *
   * @throws whatever `fn` throws; the episode's abort reason when its signal has fired before
   * the step starts; {@link EpisodeRetiredError} when retired while parked after a failed replay
   * step.
   */
  async step<T>(
    key: string,
    mode: StepMode,
    fn: (signal: AbortSignal) => T | Promise<T>,
  ): Promise<T> {
    const e = this.#require(key, "step");
    this.#refuseInsideStep(e, "start a step");
    e.controller.signal.throwIfAborted();
    if (this.#isHeld(e)) {
      // Starting work now would leave the boundary the checkpoint counted: wait for resume.
      await this.#park(e);
    }
    e.stepping = true;
    e.state = mode === "wait" ? "wait_step" : "replay_step";
    if (mode === "replay" && this.#closed) this.#suspend(e);
    this.#refresh(e);
    this.#changed();
    let result: T;
    try {
      result = await fn(e.controller.signal);
    } catch (error) {
      e.stepping = false;
      if (this.#tracked(e) && mode === "replay" && this.#capturedNow(e)) {
        // Counted at the boundary before the step, which the failure may have made stale:
        // export none (start over from the input) and keep the failure until resume.
        e.boundary = null;
        await this.#park(e);
      } else {
        this.#stepEnded(e);
      }
      throw error;
    }
    e.stepping = false;
    if (this.#tracked(e) && mode === "replay" && this.#capturedNow(e)) {
      // Held at the boundary before the step until the next boundary parks it.
      this.#changed();
    } else {
      this.#stepEnded(e);
    }
    return result;
  }

  /**
   * Marks the episode's final cleanup as started: from now on a retire waits for the episode
   * but does not abort it, and its deadline no longer runs. No-op when not tracked.
   */
  finishing(key: string): void {
    const e = this.#episodes.get(key);
    if (e === undefined) return;
    e.finishing = true;
    this.#disposeDeadline(e);
  }

  /**
   * Unregisters the episode (its task has ended): clears its timer, settles a pending retire,
   * and notifies. No-op when not tracked. Episodes begun with `run` end by themselves.
   */
  end(key: string): void {
    const e = this.#episodes.get(key);
    if (e !== undefined) this.#forget(e);
  }

  /**
   * A checkpoint closed admission: parked and replay-step episodes stop their deadlines, and
   * boundaries park from now on. Idempotent.
   */
  closeAdmission(): void {
    if (!this.#closed) {
      this.#closed = true;
      this.#opened = deferred<void>();
    }
    for (const e of this.#capturable) this.#suspend(e);
    this.#changed();
  }

  /**
   * The checkpoint ended (admission open): every suspended deadline runs again, every parked
   * episode wakes, and episodes held after a replay step are `running`. Idempotent.
   */
  openAdmission(): void {
    if (!this.#closed) return;
    this.#closed = false;
    const opened = this.#opened;
    this.#opened = null;
    for (const e of this.#suspended) e.deadline?.resume();
    this.#suspended.clear();
    for (const e of [...this.#capturable]) {
      if (e.state === "parked") e.wake?.resolve();
      else if (this.#isHeld(e)) this.#toRunning(e);
    }
    opened?.resolve();
  }

  /**
   * Marks the episode a restart once no checkpoint is open, so the restarts and exports an open
   * checkpoint reported never change during it. No-op when it is not tracked (then or after the
   * wait).
   *
   * @param signal - Bounds the wait, as does the episode's own signal; the wait rejects with
   * the reason of whichever fires first.
   */
  async markRestart(key: string, signal?: AbortSignal): Promise<void> {
    const e = this.#episodes.get(key);
    if (e === undefined) return;
    while (this.#opened !== null) {
      await untilSettledOrAborted(this.#opened.promise, [e.controller.signal, signal]);
    }
    if (!this.#tracked(e) || e.restart) return;
    e.restart = true;
    this.#refresh(e);
    this.#changed();
  }

  /**
   * Retires the episode: marks it (blocking, not exported), wakes it, aborts its signal with an
   * {@link EpisodeRetiredError} (only on the first retire, and not once its final cleanup
   * started), then waits until it has ended. Resolves at once when `key` is not tracked.
   *
   * @param signal - Cuts the wait short: the promise rejects with its reason and the episode
   * stays tracked (blocking, not exported, `begin` refused) for a retry, which waits again
   * without aborting again.
   */
  async retire(key: string, signal: AbortSignal): Promise<void> {
    const e = this.#episodes.get(key);
    if (e === undefined) return;
    if (e.retired === null) {
      e.retired = new EpisodeRetiredError(key);
      this.#disposeDeadline(e);
      this.#refresh(e);
    }
    e.wake?.resolve();
    if (!e.cancelled && !e.finishing) {
      e.cancelled = true;
      this.#abort(e, e.retired);
    }
    this.#changed();
    e.ended ??= deferred<void>();
    await untilSettledOrAborted(e.ended.promise, [signal]);
  }

  /** Number of blocking episodes; O(1). */
  blockerCount(): number {
    return this.#blocking.size;
  }

  /** Whether nothing blocks a checkpoint. */
  ready(): boolean {
    return this.#blocking.size === 0;
  }

  /**
   * The `limit` lexicographically smallest blocking capture keys, sorted. Visits only blocking
   * episodes, so it is free when none block.
   */
  blockers(limit: number = MAX_LISTED_BLOCKERS): string[] {
    const n = Math.floor(limit);
    if (this.#blocking.size === 0 || !(n > 0)) return [];
    return smallestKeys(this.#blocking, n);
  }

  /**
   * What a checkpoint exports: every `parked` or `replay_step` episode, not being retired and
   * not a restart, mapped to its latest boundary (null: none yet, it starts over from its
   * input). In capture-key order.
   */
  exported(): Map<string, JsonValue | null> {
    const episodes = [...this.#capturable].filter((e) => e.retired === null && !e.restart);
    episodes.sort(byKey);
    return new Map(episodes.map((e) => [e.key, e.boundary]));
  }

  /**
   * The latest boundary of `key` as {@link exported} maps it (null: none yet), or undefined when
   * {@link exported} leaves the episode out: for a caller walking a scope in its own order.
   */
  exportedBoundary(key: string): JsonValue | null | undefined {
    const e = this.#episodes.get(key);
    if (e === undefined || !this.#capturable.has(e) || e.retired !== null || e.restart) {
      return undefined;
    }
    return e.boundary;
  }

  /**
   * What {@link exported} maps, visited in no particular order: for a caller that orders its
   * records itself, so a commit sorts them once (not once here and again there).
   */
  forEachExported(visit: (key: string, boundary: JsonValue | null) => void): void {
    for (const e of this.#capturable) {
      if (e.retired === null && !e.restart) visit(e.key, e.boundary);
    }
  }

  /** Sorted capture keys of restarts not being retired; never capped. */
  restarts(): string[] {
    return [...this.#restarts].sort(byKey).map((e) => e.key);
  }

  /**
   * The readiness report: ready iff nothing blocks, at most 100 blockers listed with the full
   * count, the restarts, and `counts.episodes` (tracked episodes) plus `counts`.
   */
  readiness(counts: Record<string, number> = {}): PrepareReport {
    const blockerCount = this.#blocking.size;
    return prepareReport({
      ready: blockerCount === 0,
      blockers: this.blockers(MAX_LISTED_BLOCKERS),
      blockerCount,
      counts: { episodes: this.#episodes.size, ...counts },
      restarts: this.restarts(),
    });
  }

  // -------------------------------------------------------------------------------------------

  #require(key: string, operation: string): Episode {
    const e = this.#episodes.get(key);
    if (e === undefined) {
      throw new Error(`${operation}: episode ${key} is not running; call begin(${key}) first`);
    }
    return e;
  }

  #refuseInsideStep(e: Episode, what: string): void {
    if (e.stepping || e.state === "parked") {
      throw new Error(
        `episode ${e.key} cannot ${what} while it is ${e.stepping ? "inside a step" : "parked"}; ` +
          `an episode records boundaries and runs steps one at a time`,
      );
    }
  }

  #tracked(e: Episode): boolean {
    return this.#episodes.get(e.key) === e;
  }

  /** Whether a checkpoint captures this episode at a boundary right now (it is not running). */
  #capturedNow(e: Episode): boolean {
    return this.#closed && !e.restart && e.retired === null;
  }

  /** Held at the boundary before a replay step that ended while a checkpoint is open. */
  #isHeld(e: Episode): boolean {
    return e.state === "replay_step" && !e.stepping;
  }

  /** Parks at the recorded boundary until admission opens (and stays open when it wakes). */
  async #park(e: Episode): Promise<void> {
    e.state = "parked";
    this.#suspend(e);
    this.#refresh(e);
    this.#changed();
    try {
      for (;;) {
        // Every abort of the episode goes through #abort, which wakes the park: no listener.
        e.controller.signal.throwIfAborted();
        if (e.retired !== null) throw e.retired;
        if (!this.#tracked(e)) {
          throw new Error(`episode ${e.key} was ended while parked at a boundary`);
        }
        // Checked after every wake: a new checkpoint that closed admission before this episode
        // woke keeps it parked for that one too.
        if (!this.#closed) break;
        e.wake = deferred<void>();
        await e.wake.promise;
      }
    } finally {
      e.wake = null;
      if (this.#tracked(e)) this.#toRunning(e);
    }
  }

  #stepEnded(e: Episode): void {
    if (!this.#tracked(e)) return;
    this.#toRunning(e);
    this.#changed();
  }

  #toRunning(e: Episode): void {
    this.#resumeDeadline(e);
    if (e.state === "running") return;
    e.state = "running";
    this.#refresh(e);
  }

  /** Keeps the index sets in step with the episode's fields; O(1). */
  #refresh(e: Episode): void {
    const blocking =
      e.retired !== null || (!e.restart && (e.state === "running" || e.state === "wait_step"));
    if (blocking !== e.blocking) {
      e.blocking = blocking;
      if (blocking) this.#blocking.add(e);
      else this.#blocking.delete(e);
    }
    const capturable = e.state === "parked" || e.state === "replay_step";
    if (capturable !== e.capturable) {
      e.capturable = capturable;
      if (capturable) this.#capturable.add(e);
      else this.#capturable.delete(e);
    }
    const listedRestart = e.restart && e.retired === null;
    if (listedRestart !== e.listedRestart) {
      e.listedRestart = listedRestart;
      if (listedRestart) this.#restarts.add(e);
      else this.#restarts.delete(e);
    }
  }

  #forget(e: Episode): void {
    this.#episodes.delete(e.key);
    this.#disposeDeadline(e);
    e.detachParent?.();
    e.detachParent = null;
    this.#blocking.delete(e);
    this.#capturable.delete(e);
    this.#restarts.delete(e);
    e.blocking = e.capturable = e.listedRestart = false;
    e.ended?.resolve();
    e.wake?.resolve();
    this.#changed();
  }

  async #runTask<T>(e: Episode, run: (signal: AbortSignal) => Promise<T>): Promise<T> {
    try {
      return await run(e.controller.signal);
    } finally {
      if (this.#tracked(e)) this.#forget(e);
    }
  }

  #watchParent(e: Episode, parent: AbortSignal | undefined): void {
    if (parent === undefined) return;
    if (parent.aborted) {
      this.#abort(e, parent.reason);
      return;
    }
    const onAbort = (): void => this.#abort(e, parent.reason);
    parent.addEventListener("abort", onAbort, { once: true });
    e.detachParent = () => parent.removeEventListener("abort", onAbort);
  }

  #startDeadline(e: Episode, deadlineTs: number | null): void {
    if (deadlineTs === null) return;
    const timedOut = (): void => {
      this.#disposeDeadline(e);
      this.#abort(e, new EpisodeDeadlineError(e.key, deadlineTs));
    };
    const ms = deadlineTs * 1000 - Date.now();
    if (ms <= 0) {
      timedOut();
      return;
    }
    e.deadline = new PausableTimer(ms, timedOut);
    e.deadline.resume();
  }

  /** Aborts the episode's work (first reason wins) and wakes it if parked. */
  #abort(e: Episode, reason: unknown): void {
    e.controller.abort(reason);
    e.wake?.resolve();
  }

  #suspend(e: Episode): void {
    if (e.deadline === null) return;
    e.deadline.suspend();
    this.#suspended.add(e);
  }

  #resumeDeadline(e: Episode): void {
    if (e.deadline === null || !this.#suspended.delete(e)) return;
    e.deadline.resume();
  }

  #disposeDeadline(e: Episode): void {
    e.deadline?.dispose();
    e.deadline = null;
    this.#suspended.delete(e);
  }

  #changed(): void {
    if (this.#closed) this.#onChange?.();
  }
}

function byKey(a: Episode, b: Episode): number {
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}

/** The `limit` smallest keys of `episodes`, sorted; O(n log limit) rather than a full sort. */
function smallestKeys(episodes: Iterable<Episode>, limit: number): string[] {
  const out: string[] = [];
  for (const { key } of episodes) {
    if (out.length === limit && key >= (out[limit - 1] as string)) continue;
    let lo = 0;
    let hi = out.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((out[mid] as string) < key) lo = mid + 1;
      else hi = mid;
    }
    out.splice(lo, 0, key);
    if (out.length > limit) out.pop();
  }
  return out;
}
