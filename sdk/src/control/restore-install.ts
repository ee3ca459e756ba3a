import type { Logger } from "pino";
import { CheckpointError } from "../errors.js";
import { awaitUntil } from "../util/deadline.js";
import type { Mutex } from "../util/mutex.js";

/** What a {@link RestoreInstall} needs of the control plane and its participant. */
export interface RestoreInstallOptions {
  /** The control plane's transition lock: a deferred reopen runs under it. */
  readonly lock: Mutex;
  /** Where a reopen that failed is logged. */
  readonly log: Logger;
  /** Reopens the participant's admission. */
  readonly openAdmission: () => void | Promise<void>;
  /** Whether no checkpoint is active (idle, no ID): only then is a deferred reopen still due. */
  readonly idle: () => boolean;
}

/**
 * The install a restore started, which may outlive the restore's deadline (later restores,
 * retires and resumes wait for it), and the reopen of admission a failed restore leaves
 * pending: done at once, or once a still-running install ends, or by the next resume.
 */
export class RestoreInstall {
  readonly #options: RestoreInstallOptions;
  #install: Promise<void> | null = null;
  #generation = 0;
  #pendingReopen = false;

  constructor(options: RestoreInstallOptions) {
    this.#options = options;
  }

  /** Whether an install is still running. */
  get running(): boolean {
    return this.#install !== null;
  }

  /** Whether a failed restore left admission closed, for the next resume to reopen. */
  get reopenPending(): boolean {
    return this.#pendingReopen;
  }

  /** Admission was reopened (a resume, or an abandoned prepare): no reopen is pending. */
  admissionReopened(): void {
    this.#pendingReopen = false;
  }

  /** Resolves once the running install ends, whatever its outcome (at once when none runs). */
  async settled(): Promise<void> {
    if (this.#install !== null) await this.#install.catch(() => undefined);
  }

  /**
   * Waits until `deadlineTs` for the running install to end; its outcome is not the caller's.
   * @throws CheckpointError `deadline_exceeded` when it is still running then.
   */
  async settledBy(deadlineTs: number): Promise<void> {
    if (this.#install === null) return;
    const previous = await awaitUntil(
      this.#install.catch(() => undefined),
      deadlineTs,
    );
    if (!previous.done) throw CheckpointError.deadline("a previous install");
  }

  /**
   * Starts a restore's turn and returns its generation: a restore takes over only from here,
   * so one that failed earlier does not cancel the deferred reopen of an earlier failed restore.
   */
  nextGeneration(): number {
    return ++this.#generation;
  }

  /** Tracks `task` as the running install until it ends, and returns the tracked promise. */
  track(task: Promise<void>): Promise<void> {
    const tracked: Promise<void> = task.finally(() => {
      if (this.#install === tracked) this.#install = null;
    });
    tracked.catch(() => undefined);
    this.#install = tracked;
    return tracked;
  }

  /**
   * After the failed restore of `generation`: reopen now (before the restore replies, so a
   * failure is pending for the next resume), or once a still-running install ends.
   */
  async reopenAfterFailure(generation: number): Promise<void> {
    const { lock, log, openAdmission, idle } = this.#options;
    const reopen = async (): Promise<void> => {
      try {
        await openAdmission();
        this.#pendingReopen = false;
      } catch (error) {
        this.#pendingReopen = true;
        log.error({ err: error }, "reopening admission after a failed restore failed");
      }
    };
    const installing = this.#install;
    if (installing === null) {
      await reopen();
      return;
    }
    this.#pendingReopen = true;
    installing
      .catch(() => undefined)
      .then(() =>
        lock.runExclusive(async () => {
          // A resume may have reopened meanwhile (it waits for the install too).
          const stillOurs = this.#pendingReopen && this.#generation === generation && idle();
          if (stillOurs) await reopen();
        }),
      )
      .catch(() => undefined);
  }
}
