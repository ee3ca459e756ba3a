/**
 * The coordinator's view of a multi-worker server's workers: who registered, who left, and a
 * channel to each. Membership is all a server with checkpointing off needs (its `/health`
 * waits for every worker); the {@link CoordinatedParticipant} builds on it.
 *
 * @see docs/workers.md
 */
import type { Socket } from "node:net";
import { pino, type Logger } from "pino";
import { CheckpointError } from "../errors.js";
import { ChannelClosedError, FrameBytes, FrameChannel } from "./frame-channel.js";
import { fromFrame, type BodyOf, type FrameValue, type ReplyOf } from "./frame-codec.js";
import type {
  JoinState,
  LostWorker,
  RegisterMessage,
  ToCoordinator,
  ToWorker,
  WorkerReport,
} from "./worker-messages.js";
import { mergeExpositions, type ProcessExposition } from "../telemetry/merge-exposition.js";

/** How long a scrape waits for one worker's metrics (Prometheus' default scrape timeout is 10 s). */
const METRICS_TIMEOUT_MS = 5_000;

/** A worker that registered and is still connected. */
export interface Member {
  readonly index: number;
  readonly pid: number;
  readonly routingId: string;
  readonly channel: FrameChannel<ToWorker>;
  /** Whether it accepts connections yet (it registers first, to adopt fences before serving). */
  listening: boolean;
}

/** What the pool asks of whoever coordinates the workers' checkpoint state. */
export interface PoolCoordination {
  /** The checkpoint state a joining worker adopts (membership is added by the pool). */
  joinState(): Omit<JoinState, "workers" | "lost" | "epoch">;
  /** A worker's readiness report arrived. */
  report(member: Member, report: WorkerReport): void;
  /** A worker claims the restored record of a replacement (answered synchronously). */
  claim(key: string): unknown;
  /** A control call received by a worker. */
  control(operation: string, body: unknown): Promise<unknown>;
  /** Any other message of a worker (its participant's own). */
  message(member: Member, kind: string, body: FrameValue): unknown;
  /** Membership changed (a worker joined or left). */
  changed(): void;
}

/** A call's body with its call number (in the JSON head of a body with bytes). */
function messageBody<B>(call: number, body: B): B {
  if (body instanceof FrameBytes) {
    return new FrameBytes({ call, ...(body.head as object) }, body.parts) as B;
  }
  return { call, ...(body as object) } as B;
}

/** A worker's message body, as the catalogue types it (see `frame-codec.ts`). */
export function bodyOf<K extends keyof ToCoordinator>(
  _kind: K,
  body: FrameValue,
): BodyOf<ToCoordinator, K> {
  return fromFrame<BodyOf<ToCoordinator, K>>(body);
}

/** The workers of one server, as seen by its coordinator. */
export class WorkerPool {
  readonly expected: number;
  readonly #log: Logger;
  readonly #members = new Map<number, Member>();
  readonly #lost: LostWorker[] = [];
  #coordination: PoolCoordination | null = null;
  #shuttingDown = false;
  #nextCall = 1;
  /** Bumped at every membership change, so a worker never adopts an older view. */
  #epoch = 0;

  /**
   * The coordinator's own metrics as Prometheus text (null: off), merged into every scrape
   * with the workers'. Set by whoever built the server (its telemetry is the one installed).
   */
  metricsSource: (() => Promise<string | null>) | null = null;

  constructor(expected: number, logger?: Logger) {
    this.expected = expected;
    this.#log = logger ?? pino({ level: "silent" });
  }

  /** Connects the checkpoint coordination (with checkpointing on). */
  coordinate(coordination: PoolCoordination): void {
    this.#coordination = coordination;
  }

  /** Live workers in index order. */
  live(): Member[] {
    return [...this.#members.values()].sort((a, b) => a.index - b.index);
  }

  /** How many workers registered and are connected. */
  get registered(): number {
    return this.#members.size;
  }

  /** Workers that exited (never forgotten until the server restarts). */
  get lost(): readonly LostWorker[] {
    return this.#lost;
  }

  /** Takes a worker's connection: it registers, then reports and forwards control calls. */
  accept(socket: Socket): void {
    let member: Member | null = null;
    const channel = new FrameChannel<ToWorker>(socket, (kind, body) => {
      switch (kind) {
        case "register": {
          member = this.#register(bodyOf(kind, body), channel);
          return this.#joinState();
        }
        case "claim": {
          if (this.#coordination === null) return null;
          // Answered before the next message is read: see FrameChannel.
          return this.#coordination.claim(bodyOf(kind, body).key);
        }
        case "listening":
          if (member !== null) {
            member.listening = true;
            this.#broadcastMembership();
            this.#coordination?.changed();
          }
          return null;
        case "report":
          if (member !== null) this.#coordination?.report(member, bodyOf(kind, body));
          return null;
        case "metrics":
          return this.#metrics();
        case "control": {
          // A GET carries no body: `undefined` does not travel, so the key is left out.
          const call = bodyOf(kind, body);
          if (this.#coordination === null) {
            throw new Error("this server takes no part in checkpoints");
          }
          return this.#coordination.control(call.operation, "body" in call ? call.body : undefined);
        }
        default:
          if (member === null || this.#coordination === null) {
            throw new Error(`unknown message '${kind}' from a worker`);
          }
          return this.#coordination.message(member, kind, body);
      }
    });
    channel.onClose(() => {
      if (member !== null && this.#members.get(member.index) === member) {
        this.#members.delete(member.index);
        if (!this.#shuttingDown)
          this.#lose({ index: member.index, pid: member.pid, exit: "disconnected" });
      }
    });
  }

  /** A worker process exited (seen by the process supervisor). */
  workerExited(index: number, pid: number, exit: string): void {
    if (this.#shuttingDown) return;
    const member = this.#members.get(index);
    if (member !== undefined && member.pid === pid) {
      this.#members.delete(index);
      member.channel.close();
    }
    const known = this.#lost.find((lost) => lost.pid === pid);
    if (known === undefined) {
      this.#lose({ index, pid, exit });
    } else {
      // Lost when its channel closed; now its exit is known: every worker's health says how.
      known.exit = exit;
      this.#broadcastMembership();
      this.#coordination?.changed();
    }
  }

  /** The server is stopping: workers exiting now are not lost; each is asked to stop. */
  shutdown(): void {
    this.#shuttingDown = true;
    for (const member of this.#members.values()) member.channel.send("stop");
  }

  /**
   * Sends `kind` to every live worker and waits for each answer; a typed refusal of any worker
   * is the refusal of the whole, and a worker gone meanwhile refuses with `worker_lost`.
   * `signal` gives up on the workers still working (they are told to stop).
   */
  async callAll<K extends keyof ToWorker & string>(
    kind: K,
    bodyOf: (member: Member) => BodyOf<ToWorker, K>,
    signal?: AbortSignal,
  ): Promise<ReplyOf<ToWorker, K>[]> {
    const members = this.live();
    const call = this.#nextCall++;
    const calls = members.map((member) =>
      member.channel.call(kind, messageBody(call, bodyOf(member)), null).catch((error: unknown) => {
        if (error instanceof ChannelClosedError) {
          throw CheckpointError.workerLost(
            kind,
            `worker ${member.index} (pid ${member.pid}) is gone`,
          );
        }
        throw error;
      }),
    );
    if (signal === undefined) return await Promise.all(calls);
    signal.throwIfAborted();
    return await new Promise<ReplyOf<ToWorker, K>[]>((resolve, reject) => {
      const onAbort = (): void => {
        for (const member of members) member.channel.send("cancel", { call });
        reject(signal.reason as Error);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      const settle = (): void => signal.removeEventListener("abort", onAbort);
      Promise.all(calls).then(
        (values) => {
          settle();
          resolve(values);
        },
        (error: unknown) => {
          settle();
          reject(error as Error);
        },
      );
    });
  }

  /**
   * Sends `kind` to every live worker and waits (at most `timeoutMs` each, null: no limit); a
   * worker that fails or does not answer in time is only logged (its answer is then undefined).
   */
  async tellAll<K extends keyof ToWorker & string>(
    kind: K,
    body: BodyOf<ToWorker, K>,
    timeoutMs: number | null = null,
  ): Promise<[Member, ReplyOf<ToWorker, K> | undefined][]> {
    const members = this.live();
    const answers = await Promise.all(
      members.map((member) =>
        member.channel.call(kind, body, timeoutMs).catch((error: unknown) => {
          this.#log.warn({ err: error, worker: member.index }, `'${kind}' failed on a worker`);
          return undefined;
        }),
      ),
    );
    return members.map((member, i) => [member, answers[i]]);
  }

  /** The coordinator's metrics and every live worker's, as one exposition. */
  async #metrics(): Promise<string> {
    const own = await (this.metricsSource?.() ?? Promise.resolve(null)).catch((error: unknown) => {
      this.#log.warn({ err: error }, "the coordinator's metrics failed");
      return null;
    });
    // A stuck worker must not hang every scrape: its samples are left out of this one.
    const answers = await this.tellAll("metrics_text", {}, METRICS_TIMEOUT_MS);
    const expositions: ProcessExposition[] =
      own === null ? [] : [{ worker: "coordinator", text: own }];
    for (const [member, text] of answers) {
      if (typeof text === "string") expositions.push({ worker: String(member.index), text });
    }
    return mergeExpositions(expositions);
  }

  #lose(lost: LostWorker): void {
    this.#lost.push(lost);
    this.#log.error(
      { worker: lost.index, pid: lost.pid, exit: lost.exit },
      "a worker process is gone: prepare, commit and restore are refused until the server restarts",
    );
    this.#broadcastMembership();
    this.#coordination?.changed();
  }

  #register(message: RegisterMessage, channel: FrameChannel<ToWorker>): Member {
    const member: Member = {
      index: message.index,
      pid: message.pid,
      routingId: message.routing_id,
      channel,
      listening: false,
    };
    this.#members.set(message.index, member);
    this.#log.info({ worker: message.index, pid: message.pid }, "worker registered");
    this.#broadcastMembership();
    this.#coordination?.changed();
    return member;
  }

  #joinState(): JoinState {
    return {
      accepting: true,
      generation: 0,
      request: null,
      marks: [],
      aliases: [],
      claims: [],
      ...this.#coordination?.joinState(),
      epoch: this.#epoch,
      workers: this.#membership(),
      lost: this.#lost.map((lost) => ({ ...lost })),
    };
  }

  /** The workers that serve: the ones a request may be passed on to. */
  #membership(): [string, number][] {
    return this.live()
      .filter((member) => member.listening)
      .map((member) => [member.routingId, member.index]);
  }

  #broadcastMembership(): void {
    const epoch = ++this.#epoch;
    const workers = this.#membership();
    const lost = this.#lost.map((worker) => ({ ...worker }));
    for (const member of this.#members.values()) {
      member.channel.send("membership", { epoch, workers, lost });
    }
  }
}
