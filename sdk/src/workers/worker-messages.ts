/**
 * The messages between a multi-worker server's coordinator and its workers (over a
 * `FrameChannel`). Worker → coordinator: `register`, `listening`, `report`, `control`, `claim`. Coordinator →
 * worker: `close`, `open`, `mark`, `check_forget`, `forget`, `retire`, `export`,
 * `restore_manifest`, `install`, `restored_pending`, `delete_restored`, `cancel`, `membership`,
 * `stop`.
 *
 * Episode lists the coordinator sends (`export` and `install`'s `scope_keys`, `mark`'s
 * `episode_keys`) are capture keys, in the order and with the duplicates of the request: the
 * coordinator keyed the parsed scope once already, and a worker decodes the keys once
 * (`scopeFromCaptureKeys`) without keying them again. A single episode (`retire`,
 * `delete_restored`) and the lists workers send back stay `{rollout_id, attempt}` objects.
 *
 * @see docs/workers.md
 */
import type { JsonValue } from "../json/json-value.js";
import type { PrepareReport } from "../wire/control.js";

/** Environment variables a worker process is started with. */
export const WORKER_ENV = {
  /** The worker's index, 0-based. */
  index: "GYM_WORKER_INDEX",
  /** How many workers the server runs. */
  count: "GYM_WORKER_COUNT",
  /** The coordinator's socket. */
  coordinator: "GYM_WORKER_COORDINATOR",
  /** The directory of the workers' private sockets. */
  socketDir: "GYM_WORKER_SOCKET_DIR",
  /** The server's configured session secret, handed on by the coordinator. */
  sessionSecret: "GYM_WORKER_SESSION_SECRET",
  /** The random session secret the coordinator drew for its workers (none configured, checkpointing off). */
  randomSessionSecret: "GYM_WORKER_RANDOM_SESSION_SECRET",
} as const;

/** A worker's first message. */
export interface RegisterMessage {
  readonly index: number;
  readonly pid: number;
  /** The owner its sessions' cookies name: 32 random hex characters, new per process. */
  readonly routing_id: string;
}

/** What a joining worker adopts. */
export interface JoinState {
  readonly accepting: boolean;
  readonly generation: number;
  /** The request that closed admission, while closed. */
  readonly request: JsonValue;
  /** Retired marks: `[rollout_id, attempt]`. */
  readonly marks: [string, number][];
  /** Old owner → live worker routing ID. */
  readonly aliases: [string, string][];
  /** Replacement keys whose restored record the coordinator holds until one worker claims it. */
  readonly claims: string[];
  /** The membership's version: a worker keeps the newest it has seen. */
  readonly epoch: number;
  /** Live workers: `[routing_id, index]`. */
  readonly workers: [string, number][];
  /** Workers that exited. */
  readonly lost: LostWorker[];
}

/** A worker's readiness, pushed whenever it may have changed. */
export interface WorkerReport {
  /** The admission generation it belongs to (older ones are dropped). */
  readonly generation: number;
  readonly report: PrepareReport;
  readonly extra: Record<string, unknown>;
}

/** A worker process that exited while the server ran. */
export interface LostWorker {
  readonly index: number;
  readonly pid: number;
  /** How it ended: `code 1`, `signal SIGKILL`, `disconnected`. */
  exit: string;
}

/**
 * The owner a session record names (`""` for one written by a single-process server, which
 * names none: its sessions are placed as one group).
 */
export function ownerOfRecord(record: object): string {
  const owner = (record as { owner?: unknown }).owner;
  return typeof owner === "string" ? owner : "";
}
