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
import type { GenerationCutPrefixAck } from "../capture/generation-cut.js";
import type { CloseAdmissionRequest } from "../control/participant.js";
import type { EpisodeId } from "../identity/episode-id.js";
import type { CutCandidate } from "../participants/model/cut-service.js";
import type { PolicySnapshot } from "../participants/model/policy-participant.js";
import type { CutRecord } from "../participants/model/restored-cuts.js";
import type { Operation, PrepareReport } from "../wire/control.js";
import type { Manifest, RecordBase } from "../wire/storage.js";
import type { Exchange, FrameBytes } from "./frame-codec.js";

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
  readonly request: CloseAdmissionRequest | null;
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

/** The membership a coordinator broadcasts: its version, the live workers, the lost ones. */
export interface Membership {
  readonly epoch: number;
  /** Live workers: `[routing_id, index]`. */
  readonly workers: [string, number][];
  readonly lost: LostWorker[];
}

/** The coordinator's answer to a cut claim: the cut, or null; `keep` when it may still be claimed. */
export interface CutClaimReply {
  readonly record: CutRecord | null;
  readonly keep: boolean;
}

/** The answer to a worker's share of a cut round: an ack per call the round covered. */
export interface CutReply {
  readonly acks: GenerationCutPrefixAck[];
}

/** What an `install` carries besides the records: the scope, the alias table, the claim keys. */
export interface InstallHead {
  readonly scope_keys: readonly string[];
  readonly aliases: readonly [string, string][];
  readonly claims: readonly string[];
}

/** The number a coordinator gives one call to every worker (`cancel` names it). */
interface Numbered {
  readonly call?: number;
}

/** Every message a worker sends its coordinator: its body and its reply. */
export interface ToCoordinator {
  register: Exchange<RegisterMessage, JoinState>;
  listening: Exchange<null, null>;
  report: Exchange<WorkerReport, null>;
  /** A GET carries no body: `undefined` does not travel, so the key is left out. */
  control: Exchange<{ readonly operation: Operation; readonly body?: unknown }, unknown>;
  /** The restored request-scoped record of replacement `key`, or null. */
  claim: Exchange<{ readonly key: string }, RecordBase | null>;
  metrics: Exchange<null, string>;
  policy_cut: Exchange<{ readonly candidates: readonly CutCandidate[] }, CutReply>;
  policy_claim_cut: Exchange<
    { readonly key: string; readonly request_digest: string },
    CutClaimReply
  >;
  policy_settle_cut: Exchange<
    { readonly key: string; readonly record: CutRecord; readonly used: boolean },
    null
  >;
  policy_settle: Exchange<{ readonly keys: readonly string[] }, null>;
}

/** Every message a coordinator sends its workers: its body and its reply. */
export interface ToWorker {
  membership: Exchange<Membership, null>;
  stop: Exchange<null, null>;
  metrics_text: Exchange<object, string>;
  cancel: Exchange<{ readonly call: number }, null>;
  close: Exchange<
    { readonly request: CloseAdmissionRequest; readonly generation: number } & Numbered,
    PrepareReport
  >;
  open: Exchange<{ readonly generation: number }, PrepareReport>;
  mark: Exchange<{ readonly episode_keys: readonly string[] } & Numbered, null>;
  check_forget: Exchange<{ readonly rollout_ids: readonly string[] } & Numbered, null>;
  forget: Exchange<{ readonly rollout_ids: readonly string[] } & Numbered, null>;
  retire: Exchange<{ readonly episode: EpisodeId } & Numbered, null>;
  /** Encoded: the stored lines ({@link FrameBytes}, see `encoded-export.ts`); else the records. */
  export: Exchange<
    { readonly scope_keys: readonly string[] | null; readonly encoded: boolean } & Numbered,
    FrameBytes | RecordBase[]
  >;
  restore_manifest: Exchange<{ readonly manifest: Manifest } & Numbered, null>;
  /** A share of stored lines (their head the {@link InstallHead}) or of records. */
  install: Exchange<
    FrameBytes | (InstallHead & { readonly records: RecordBase[] } & Numbered),
    null
  >;
  restored_pending: Exchange<object, EpisodeId[]>;
  delete_restored: Exchange<{ readonly episode: EpisodeId } & Numbered, null>;
  policy_snapshot: Exchange<object, PolicySnapshot>;
  policy_check_fresh: Exchange<object, null>;
  policy_restored: Exchange<
    {
      readonly targets: readonly string[];
      readonly owed_keys: readonly string[];
      readonly cut_keys: readonly string[];
    },
    null
  >;
}
