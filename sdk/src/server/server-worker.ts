/**
 * What a server needs of the process it runs in when it is one worker of several: the link to
 * the server's coordinator that `gym serve` builds (in `sdk/src/workers`) and hands over as
 * `ServerOptions.worker`. The server layer knows only this interface.
 *
 * @see docs/workers.md
 */
import type { Logger } from "pino";
import type { PolicyWorkerSide } from "../participants/model/policy-participant.js";
import type { Operation } from "../wire/control.js";
import type { OwnerDirectory } from "./routing/session-router.js";

/** A worker process of this server that exited while it ran. */
export interface ExitedWorker {
  readonly index: number;
  readonly pid: number;
  /** How it ended: `code 1`, `signal SIGKILL`, `disconnected`. */
  readonly exit: string;
}

/** One worker process's link to its server's coordinator, as the server uses it. */
export interface ServerWorker extends OwnerDirectory {
  /** The owner this worker's sessions name: 32 random hex characters, new per process. */
  readonly routingId: string;
  /** This worker's index, 0-based. */
  readonly index: number;
  /** How many workers the server runs. */
  readonly count: number;
  /** The random session secret shared by the server's workers, or null. */
  readonly sessionSecret: string | null;
  /** Whether every worker of the server has registered and listens. */
  readonly allJoined: boolean;
  /** How many workers are registered, connected and listening. */
  readonly liveWorkers: number;
  /** Workers of this server that exited. */
  readonly lostWorkers: readonly ExitedWorker[];
  /** This worker's own metrics as Prometheus text (null: off), set by the server. */
  metricsSource: (() => Promise<string | null>) | null;
  /** The Prometheus text of the whole server, every process's samples labelled. */
  serverMetrics(): Promise<string>;
  /** A control call received by this worker, answered by the coordinator. */
  dispatch(operation: Operation, body: unknown): Promise<unknown>;
  /**
   * Before the replacement attempt `key` begins: adopts the restored record it continues, which
   * the coordinator holds until one worker claims it (a no-op when there is none).
   */
  claimRestored(key: string): Promise<void>;
  /** The worker side of a model server's participant (its coordinator owns what they share). */
  policyWorker(logger: Pick<Logger, "warn"> | null): PolicyWorkerSide;
}
