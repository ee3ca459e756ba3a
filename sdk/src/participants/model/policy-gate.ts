/**
 * The policy gate (see docs/policy-model.md): one per model server process. It admits generation
 * calls, holds every response that has not started while a checkpoint is open, counts the
 * responses already streaming (the only thing a prepare waits for), and stops the calls of a
 * retired attempt. Transport-free: the model server calls it around each generation.
 *
 * @see docs/policy-model.md
 * @module
 */
import { randomUUID } from "node:crypto";
import { EpisodeError } from "../../errors.js";
import { captureKey, type EpisodeId } from "../../identity/episode-id.js";
import { AttemptSet } from "../../control/attempt-keys.js";
import type { RetiredAttempts } from "../../control/retired-attempts.js";
import { untilSettledOrAborted } from "../../util/abortable.js";
import { deferred, type Deferred } from "../../util/deferred.js";
import { indexAdd, indexDelete } from "../../util/multimap.js";

/** What the capture layer attached to a call: its ID and the request items it digests. */
export interface CallCapture {
  /** The model call ID minted for the call. */
  readonly modelCallId: string;
  /** The request's conversation items (for the cut's request digest). */
  readonly requestItems: readonly unknown[];
}

/** The reason a ticket's response was stopped by a retire. */
export class CallRetiredError extends EpisodeError {
  override name = "CallRetiredError";
  constructor(key: string, mark: number) {
    super(
      "stale_attempt",
      `attempt '${key}' was retired (its rollout is retired up to attempt ${mark}); the call stops`,
      key,
    );
  }
}

/**
 * One admitted call. The gate reads `responseStarted`, `capture` and the cut fields; the
 * model server sets the rest through the gate's hooks.
 */
export class Ticket {
  /** 32 lowercase hex characters. */
  readonly ticketId = randomUUID().replaceAll("-", "");
  /** Wall-clock admission time, epoch seconds. */
  readonly admittedAt = Date.now() / 1000;
  responseStarted = false;
  /** The inference worker serving the call (its OpenAI-compatible base URL). */
  backend: string | null = null;
  capture: CallCapture | null = null;
  /** Why the call can never be cut (constrained decoding), or null. */
  restartReason: string | null = null;
  /** Generation-cut state, owned by the cut round (opaque to the gate). */
  cut: unknown = null;
  cutRecord: unknown = null;
  /** Aborted once by a retire of the call's attempt. */
  readonly #controller = new AbortController();
  readonly ended = deferred<void>();
  done = false;

  constructor(
    /** The call's capture key; "" for an untagged call. */
    readonly captureKey: string,
    readonly episode: EpisodeId | null,
    parent: AbortSignal | undefined,
  ) {
    this.signal =
      parent === undefined
        ? this.#controller.signal
        : AbortSignal.any([this.#controller.signal, parent]);
  }

  /** Aborted by a retire of the call's attempt, or the request's own signal. */
  readonly signal: AbortSignal;

  /** The model call ID of a call whose response has not started, or null. */
  get undeliveredCallId(): string | null {
    return this.capture !== null && !this.responseStarted ? this.capture.modelCallId : null;
  }

  /** Whether a retire aborted this call already. */
  get cancelled(): boolean {
    return this.#controller.signal.aborted;
  }

  cancel(reason: Error): void {
    if (!this.#controller.signal.aborted) this.#controller.abort(reason);
  }
}

/** The gate's readiness report. */
export interface GateReport {
  readonly ready: boolean;
  /** Sorted capture keys of calls whose response is streaming. */
  readonly streaming: string[];
  readonly inflight: number;
  readonly held: number;
  readonly cut: number;
  readonly cut_failed: number;
  readonly cut_skipped: number;
  readonly served: boolean;
}

interface Waiter {
  readonly key: string;
  readonly episode: EpisodeId;
  refused: boolean;
  readonly left: Deferred<void>;
}

/** Options of a {@link PolicyGate}. */
export interface PolicyGateOptions {
  /** The participant's retired marks. */
  readonly retired: RetiredAttempts;
  /** Called whenever readiness may have changed (the participant's `notify`). */
  readonly onChange?: () => void;
  /**
   * Runs when a restored target's first call is admitted, before the call proceeds (writes
   * the shared started marker).
   */
  readonly onTargetStarted?: (key: string) => Promise<void>;
  /**
   * Runs the cut round while admission closes, with the tickets already on a worker and the
   * prepare's deadline.
   */
  readonly cutRound?: (tickets: readonly Ticket[], deadlineTs: number | null) => Promise<void>;
}

/**
 * The policy gate.
 *
 * ## Rules
 * - **Admission.** A tagged call of a retired attempt is refused with `stale_attempt`; while a
 *   checkpoint is open a call waits (not admitted: no ticket, not counted, not exported), and
 *   is refused at once if its attempt is marked retired meanwhile, for good (the refusal stays
 *   after `forget`). Ticket creation follows the admission check with no await in between.
 * - **Delivery.** {@link deliver} is called before a response's first data chunk; while
 *   admission is closed it holds the response until resume. A response that started keeps
 *   streaming and is the only thing that blocks readiness.
 * - **Retire** refuses waiting calls of the attempt, cancels the admitted ones once, and waits
 *   until they and the refused waiters have left. Untagged calls are never cancelled.
 */
export class PolicyGate {
  readonly #retired: RetiredAttempts;
  readonly #onChange: () => void;
  readonly #onTargetStarted: ((key: string) => Promise<void>) | null;
  readonly #cutRound:
    ((tickets: readonly Ticket[], deadlineTs: number | null) => Promise<void>) | null;
  readonly #tickets = new Set<Ticket>();
  /** Tagged tickets by rollout: a retire looks up only its own rollout's calls. */
  readonly #ticketsByRollout = new Map<string, Set<Ticket>>();
  readonly #waiting = new Map<string, Set<Waiter>>();
  #accepting = true;
  #opened: Deferred<void> | null = null;
  #admissionChanged = deferred<void>();
  #served = false;
  /** Next attempts a restore installed and no call has reached yet, by capture key. */
  readonly restoredTargets = new AttemptSet();

  constructor(options: PolicyGateOptions) {
    this.#retired = options.retired;
    this.#onChange = options.onChange ?? (() => undefined);
    this.#onTargetStarted = options.onTargetStarted ?? null;
    this.#cutRound = options.cutRound ?? null;
  }

  /** Whether admission is open. */
  get accepting(): boolean {
    return this.#accepting;
  }

  /** Whether the gate admitted any call since the process started. */
  get served(): boolean {
    return this.#served;
  }

  /** The admitted calls. */
  get tickets(): ReadonlySet<Ticket> {
    return this.#tickets;
  }

  /** Number of calls waiting at closed admission. */
  get waitingCount(): number {
    let n = 0;
    for (const set of this.#waiting.values()) n += set.size;
    return n;
  }

  /**
   * Admits a call of `episode` (null: untagged). Waits while a checkpoint is open.
   * @throws EpisodeError `stale_attempt` for a retired attempt; the signal's reason if it aborts.
   */
  async admit(episode: EpisodeId | null, signal?: AbortSignal): Promise<Ticket> {
    const key = episode === null ? "" : captureKey(episode);
    let waiter: Waiter | null = null;
    try {
      for (;;) {
        const changed = this.#admissionChanged.promise;
        if (episode !== null) {
          if (waiter?.refused === true) throw this.#refusal(episode);
          this.#retired.check(episode);
        }
        if (this.#accepting) break;
        if (episode !== null && waiter === null) {
          waiter = { key, episode, refused: false, left: deferred<void>() };
          indexAdd(this.#waiting, episode.rollout_id, waiter);
        }
        await untilSettledOrAborted(changed, [signal]);
      }
    } finally {
      if (waiter !== null) {
        indexDelete(this.#waiting, waiter.episode.rollout_id, waiter);
        waiter.left.resolve();
      }
    }
    // No await between the admission check and here: no checkpoint can close in between.
    const ticket = new Ticket(key, episode, signal);
    this.#served = true;
    this.#tickets.add(ticket);
    if (episode !== null) indexAdd(this.#ticketsByRollout, episode.rollout_id, ticket);
    this.#onChange();
    if (this.restoredTargets.has(key)) {
      // Marked before the call can write a row or be held; a target whose marker could not be
      // written stays pending, so its next call tries again.
      try {
        await this.#onTargetStarted?.(key);
      } catch (error) {
        this.exit(ticket);
        throw error;
      }
      this.restoredTargets.delete(key);
    }
    return ticket;
  }

  /**
   * Lets the response of `ticket` start: call it right before its first data chunk (never at
   * headers, empty chunks or keep-alive comments). While admission is closed the response is
   * held until resume. Idempotent once started.
   */
  async deliver(ticket: Ticket, signal?: AbortSignal): Promise<void> {
    if (ticket.responseStarted) return;
    while (!this.#accepting) {
      this.#onChange();
      const opened = this.#opened;
      if (opened === null) break;
      await untilSettledOrAborted(opened.promise, [signal, ticket.signal]);
    }
    ticket.signal.throwIfAborted();
    ticket.responseStarted = true;
    this.#onChange();
  }

  /** The call left (in a `finally`); always reports a change. */
  exit(ticket: Ticket): void {
    if (ticket.done) return;
    ticket.done = true;
    this.#tickets.delete(ticket);
    if (ticket.episode !== null) {
      indexDelete(this.#ticketsByRollout, ticket.episode.rollout_id, ticket);
    }
    ticket.ended.resolve();
    this.#onChange();
  }

  /** Closes admission and runs the cut round (when configured) for calls already on a worker. */
  async close(deadlineTs: number | null): Promise<void> {
    this.#accepting = false;
    this.#opened ??= deferred<void>();
    this.#onChange();
    if (this.#cutRound !== null) {
      const onWorker = [...this.#tickets].filter(
        (t) => t.backend !== null && t.undeliveredCallId !== null && t.restartReason === null,
      );
      // Run even with no calls: a worker of several hands in its (empty) share of the round.
      await this.#cutRound(onWorker, deadlineTs);
    }
  }

  /** Opens admission: held responses start, waiting calls are admitted, cuts are cleared. */
  open(): void {
    this.#accepting = true;
    const opened = this.#opened;
    this.#opened = null;
    opened?.resolve();
    this.#fireAdmissionChanged();
    for (const t of this.#tickets) {
      t.cut = null;
      t.cutRecord = null;
    }
    this.#onChange();
  }

  /**
   * Flags every call waiting at closed admission whose attempt `marks` cover as refused for
   * good, and wakes them. Call it right after the participant raised its retired marks.
   */
  refuseWaiting(episodes: readonly EpisodeId[]): void {
    let any = false;
    for (const e of episodes) {
      for (const w of this.#waiting.get(e.rollout_id) ?? []) {
        if (w.episode.attempt <= e.attempt && !w.refused) {
          w.refused = true;
          any = true;
        }
      }
    }
    if (any) this.#fireAdmissionChanged();
  }

  /**
   * Stops the calls of `episode` and earlier attempts: refuses waiting ones, cancels admitted
   * ones once, and waits until all have left.
   */
  async retire(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    this.refuseWaiting([episode]);
    this.#fireAdmissionChanged();
    const waiters = [...(this.#waiting.get(episode.rollout_id) ?? [])].filter(
      (w) => w.episode.attempt <= episode.attempt,
    );
    const covered = [...(this.#ticketsByRollout.get(episode.rollout_id) ?? [])].filter(
      (t) => t.episode !== null && t.episode.attempt <= episode.attempt,
    );
    for (const t of covered) t.cancel(new CallRetiredError(t.captureKey, episode.attempt));
    await untilSettledOrAborted(
      Promise.all([...covered.map((t) => t.ended.promise), ...waiters.map((w) => w.left.promise)]),
      [signal],
    );
  }

  /** The readiness report; cheap (no digests). */
  report(): GateReport {
    const streaming = new Set<string>();
    let held = 0;
    let cut = 0;
    let cutFailed = 0;
    let cutSkipped = 0;
    for (const t of this.#tickets) {
      if (t.responseStarted) streaming.add(t.captureKey);
      else held += 1;
      if (t.undeliveredCallId === null) continue;
      if (t.restartReason !== null) cutSkipped += 1;
      else if (t.cutRecord !== null) cut += 1;
      else if (t.cut !== null) cutFailed += 1;
    }
    return {
      ready: streaming.size === 0,
      streaming: [...streaming].sort(),
      inflight: this.#tickets.size,
      held,
      cut,
      cut_failed: cutFailed,
      cut_skipped: cutSkipped,
      served: this.#served,
    };
  }

  /** The model call IDs of admitted calls whose response has not started. */
  undeliveredCallIds(): Set<string> {
    const ids = new Set<string>();
    for (const t of this.#tickets) {
      const id = t.undeliveredCallId;
      if (id !== null) ids.add(id);
    }
    return ids;
  }

  #refusal(episode: EpisodeId): EpisodeError {
    return new EpisodeError(
      "stale_attempt",
      `attempt '${captureKey(episode)}' was retired while its call waited for a checkpoint to end; send the next attempt`,
      captureKey(episode),
    );
  }

  #fireAdmissionChanged(): void {
    const previous = this.#admissionChanged;
    this.#admissionChanged = deferred<void>();
    previous.resolve();
  }
}
