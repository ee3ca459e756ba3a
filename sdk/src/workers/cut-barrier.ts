/**
 * One generation-cut round for every worker of a model server: each worker hands in the calls
 * it wants cut while its admission closes, and once every worker of the close has (or left, or
 * the prepare's time is up) the coordinator sends one inventory per backend and hands each
 * worker its acks.
 *
 * @module
 */
import type { GenerationCutPrefixAck } from "../capture/generation-cut.js";
import { deferred, type Deferred } from "../util/deferred.js";
import type { CutCandidate, CutService } from "../participants/model/cut-service.js";

interface Submission {
  readonly candidates: readonly CutCandidate[];
  readonly answer: Deferred<GenerationCutPrefixAck[]>;
}

/** Waits at most this long for a worker's share of a round without a prepare deadline (ms). */
const UNBOUNDED_WAIT_MS = 30_000;

/** The cut round of one close, gathered from the workers that closed. */
export class CutBarrier {
  readonly #service: CutService;
  readonly #deadlineTs: number | null;
  readonly #waiting: Set<number>;
  readonly #submissions: Submission[] = [];
  readonly #timer: NodeJS.Timeout;
  #started = false;

  /**
   * @param workers the indices of the workers the close reaches
   * @param deadlineTs the prepare's deadline (epoch seconds), or null
   */
  constructor(service: CutService, workers: readonly number[], deadlineTs: number | null) {
    this.#service = service;
    this.#deadlineTs = deadlineTs;
    this.#waiting = new Set(workers);
    // A worker that never hands in its share must not hold the others' cuts past the deadline.
    const waitMs =
      deadlineTs === null ? UNBOUNDED_WAIT_MS : Math.max(0, deadlineTs * 1000 - Date.now());
    this.#timer = setTimeout(() => this.#start(), waitMs);
    this.#timer.unref();
    this.#startWhenComplete();
  }

  /** Whether the round has been sent (later shares get no cut: their calls regenerate). */
  get started(): boolean {
    return this.#started;
  }

  /** Worker `index` hands in its calls; resolves with their acks once the round ran. */
  submit(index: number, candidates: readonly CutCandidate[]): Promise<GenerationCutPrefixAck[]> {
    if (this.#started || !this.#waiting.has(index)) return Promise.resolve([]);
    const answer = deferred<GenerationCutPrefixAck[]>();
    this.#submissions.push({ candidates, answer });
    this.#waiting.delete(index);
    this.#startWhenComplete();
    return answer.promise;
  }

  /** The workers still live: one that left is waited for no more. */
  retain(live: readonly number[]): void {
    const alive = new Set(live);
    for (const index of [...this.#waiting]) if (!alive.has(index)) this.#waiting.delete(index);
    this.#startWhenComplete();
  }

  /** Gives up waiting: the round runs with what was handed in. */
  finish(): void {
    this.#start();
  }

  #startWhenComplete(): void {
    if (this.#waiting.size === 0) this.#start();
  }

  #start(): void {
    if (this.#started) return;
    this.#started = true;
    clearTimeout(this.#timer);
    void this.#run();
  }

  async #run(): Promise<void> {
    const all = this.#submissions.flatMap((submission) => submission.candidates);
    let acks: ReadonlyMap<string, GenerationCutPrefixAck> = new Map();
    if (all.length > 0) {
      acks = await this.#service.cut(all, this.#deadlineTs).catch(() => new Map());
    }
    for (const { candidates, answer } of this.#submissions) {
      const mine: GenerationCutPrefixAck[] = [];
      for (const candidate of candidates) {
        const ack = acks.get(candidate.ticket_id);
        if (ack !== undefined) mine.push(ack);
      }
      answer.resolve(mine);
    }
  }
}
