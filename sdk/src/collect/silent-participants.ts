/**
 * A collection's answer to host loss: participants that did not answer a checkpoint (their host
 * is down or frozen) are remembered with the checkpoints they have yet to be resumed from, and
 * resumed in the background, with a growing back-off, until they answer. While any is silent no
 * checkpoint is taken: it would only fail the same way, with dispatch paused.
 *
 * @see docs/collect.md
 */
import type { Logger } from "pino";
import { resume, UnreachableParticipantsError, type Participants } from "../client/coordination.js";
import { locateServer, locatedName } from "../client/host-loss.js";
import type { ResolvedDeployment } from "../wire/deployment.js";
import { pause } from "../util/deadline.js";

/** What {@link SilentParticipants} calls. */
export interface SilentParticipantsHooks {
  /** The deadline of the next coordination step, in seconds since the epoch. */
  deadline(): number;
  /** Told which silent participants answered again, sorted. */
  reachable(servers: readonly string[]): void;
  readonly logger: Logger;
}

/** The participants that did not answer a checkpoint, resumed in the background until they do. */
export class SilentParticipants {
  readonly #hooks: SilentParticipantsHooks;
  /** Participant → the checkpoint IDs it has yet to be resumed from. */
  readonly #unanswered = new Map<string, Set<string>>();
  #reaching: Promise<void> | null = null;
  readonly #abort = new AbortController();

  constructor(hooks: SilentParticipantsHooks) {
    this.#hooks = hooks;
  }

  /** How many participants are silent: no checkpoint is taken while any is. */
  get size(): number {
    return this.#unanswered.size;
  }

  /**
   * Resumes checkpoint `id` everywhere after it ended. A participant that let the failed step's
   * deadline pass without a word is not waited for again here (its host is down or frozen: the
   * pause would last another step); it and any that the resume cannot reach are resumed in the
   * background until they answer, so a host that comes back does not keep the checkpoint's
   * admission closed until its lease expires.
   */
  async resumeAfter(participants: Participants, id: string, failure: unknown): Promise<void> {
    const silent = new Set<string>();
    if (failure instanceof UnreachableParticipantsError) {
      for (const [name, where] of Object.entries(failure.unreachable)) {
        if (where.reason === "timeout") silent.add(name);
      }
    }
    const answering = participants.members.filter((member) => !silent.has(member.name));
    try {
      if (answering.length > 0) {
        await resume({ ...participants, members: answering }, id, this.#hooks.deadline());
      }
    } catch (error) {
      this.#hooks.logger.warn({ err: error }, "resuming after the checkpoint failed");
      if (error instanceof UnreachableParticipantsError) {
        for (const name of Object.keys(error.unreachable)) silent.add(name);
      }
      // A participant that refused the resume answers: it resumes on its own at lease expiry.
    }
    for (const name of silent) {
      const ids = this.#unanswered.get(name) ?? new Set<string>();
      ids.add(id);
      this.#unanswered.set(name, ids);
    }
    if (this.#unanswered.size > 0) this.#reaching ??= this.#reach(participants);
  }

  /** Why no checkpoint is taken while participants are silent, naming them and their hosts. */
  reason(deployment: ResolvedDeployment): string {
    const names = [...this.#unanswered.keys()].sort();
    const shown = names.map((name) => locatedName(name, locateServer(deployment, name)));
    const hosts = [...new Set(names.map((name) => locateServer(deployment, name).host))].sort();
    return (
      `${shown.join(", ")} did not answer the last checkpoint (is host ${hosts.join(", ")} down or frozen?); ` +
      "none is taken until it answers, and the last published one stays"
    );
  }

  /**
   * Stops resuming in the background and waits for the loop to end: with nothing left to
   * checkpoint, a participant still silent resumes at its lease expiry.
   */
  async close(): Promise<void> {
    this.#abort.abort();
    await this.#reaching;
  }

  /**
   * Resumes the checkpoints each silent participant missed, with a growing back-off, until it
   * answers (any reply: a refusal says the host is back too) or {@link close}.
   */
  async #reach(participants: Participants): Promise<void> {
    let backoffMs = 500;
    try {
      while (this.#unanswered.size > 0 && !this.#abort.signal.aborted) {
        const back: string[] = [];
        await Promise.all(
          [...this.#unanswered].map(async ([name, ids]) => {
            const member = participants.members.filter((m) => m.name === name);
            for (const id of [...ids]) {
              try {
                await resume({ ...participants, members: member }, id, this.#hooks.deadline());
              } catch (error) {
                if (!answered(error)) return;
                this.#hooks.logger.warn({ err: error, server: name }, "a late resume was refused");
              }
              ids.delete(id);
            }
            this.#unanswered.delete(name);
            back.push(name);
          }),
        );
        if (back.length > 0) {
          this.#hooks.logger.info({ servers: back }, "participants answer again");
          this.#hooks.reachable(back.sort());
          backoffMs = 500;
        }
        if (this.#unanswered.size === 0) break;
        await pause(backoffMs, this.#abort.signal);
        backoffMs = Math.min(backoffMs * 2, 10_000);
      }
    } finally {
      this.#reaching = null;
    }
  }
}

/** Whether a participant's resume failed because it answered (refused), not for silence. */
function answered(error: unknown): boolean {
  if (!(error instanceof UnreachableParticipantsError)) return true;
  return Object.keys(error.unreachable).length === 0;
}
