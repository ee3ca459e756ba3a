/**
 * What one worker of a multi-worker model server asks of its coordinator (see docs/workers.md).
 *
 * Restored generation cuts as one worker of a multi-worker model server sees them (see
 * docs/workers.md): the coordinator holds every restored cut; a worker knows only which keys have
 * one, claims a cut when a call of that key arrives (the coordinator hands it out once), and
 * gives it back when the call leaves before its response started.
 *
 * @module
 */
import type { Logger } from "pino";
import { AttemptSet } from "../control/attempt-keys.js";
import type { EpisodeId } from "../identity/episode-id.js";
import type { CutService } from "../participants/model/cut-service.js";
import type { CutClaim, CutRecord } from "../participants/model/restored-cuts.js";
import { fromFrame, type BodyOf, type FrameValue, type ReplyOf } from "./frame-codec.js";
import type { CutClaimReply, ToCoordinator, ToWorker } from "./worker-messages.js";
import type { Participant } from "../control/participant.js";
import type {
  PolicyLedgerHook,
  PolicyParticipant,
  PolicyWorkerSide,
  WorkerCutClaimsView,
} from "../participants/model/policy-participant.js";

/** Sends a message to the server's coordinator and waits for its answer. */
export type CoordinatorRequest = <K extends keyof ToCoordinator & string>(
  kind: K,
  body: BodyOf<ToCoordinator, K>,
) => Promise<ReplyOf<ToCoordinator, K>>;

/** One worker's view of the restored cuts its coordinator holds. */
export class WorkerCutClaims implements WorkerCutClaimsView {
  readonly #request: CoordinatorRequest;
  readonly #log: Pick<Logger, "warn"> | null;
  /** Keys with a cut at the coordinator, as of the last restore (a claim removes its own). */
  readonly #keys = new AttemptSet();
  /** Claims of calls still running, by key: exported again should the call be cut again. */
  readonly #claimed = new Map<string, CutClaim>();

  constructor(request: CoordinatorRequest, logger: Pick<Logger, "warn"> | null = null) {
    this.#request = request;
    this.#log = logger;
  }

  /** Adopts the keys a restore installed cuts for (replacing the earlier ones). */
  adopt(keys: readonly string[]): void {
    for (const key of [...this.#keys]) this.#keys.delete(key);
    for (const key of keys) this.#keys.add(key);
  }

  /**
   * Claims the cut of `key` for a call whose request digest is `requestDigest`. Null when none
   * is held for the key, it does not match, or the coordinator cannot be reached (the call then
   * regenerates).
   */
  async take(key: string, requestDigest: string, modelCallId: string): Promise<CutClaim | null> {
    if (!this.#keys.has(key)) return null;
    let reply: CutClaimReply;
    try {
      reply = await this.#request("policy_claim_cut", { key, request_digest: requestDigest });
    } catch (error) {
      this.#log?.warn(
        { err: error, capture_key: key },
        "could not claim a restored generation cut",
      );
      return null;
    }
    if (reply.record === null) {
      if (!reply.keep) this.#keys.delete(key);
      return null;
    }
    this.#keys.delete(key);
    const claim: CutClaim = { key, record: reply.record, modelCallId };
    this.#claimed.set(key, claim);
    return claim;
  }

  /**
   * Settles a claim when its call leaves: used once the response started; otherwise given back
   * to the coordinator, so the next call of the key (on any worker) continues from it.
   */
  settle(claim: CutClaim, responseStarted: boolean): void {
    if (this.#claimed.get(claim.key) === claim) this.#claimed.delete(claim.key);
    if (!responseStarted) this.#keys.add(claim.key);
    this.#request("policy_settle_cut", {
      key: claim.key,
      record: claim.record,
      used: responseStarted,
    }).catch((error: unknown) => {
      this.#log?.warn({ err: error, capture_key: claim.key }, "could not settle a generation cut");
    });
  }

  /** The cuts claimed by calls still running: `[key, record]`. */
  claimed(): [string, CutRecord][] {
    return [...this.#claimed].map(([key, claim]) => [key, claim.record]);
  }

  /** Forgets the key of `episode` and earlier attempts of its rollout (a retire). */
  dropCovered(episode: EpisodeId): void {
    this.#keys.deleteCovered(episode);
  }

  /** Forgets `key` (a restored attempt deleted before it started). */
  drop(key: string): void {
    this.#keys.delete(key);
  }
}

/**
 * The cut service of a worker: its calls join the one round the coordinator runs for every
 * worker of the server (one inventory per backend per checkpoint).
 */
export function coordinatorCutService(request: CoordinatorRequest): CutService {
  return {
    async cut(candidates) {
      const reply = await request("policy_cut", { candidates });
      return new Map(reply.acks.map((ack) => [ack.ticket_id, ack]));
    },
  };
}

/**
 * The ledger keys whose files a restore left for the coordinator to write (it defers them, see
 * `CaptureLedger.importRecords`): a worker asks the coordinator to write a key's files before
 * its first use of the key, so it never reads or appends to a ledger the restore has not
 * written yet.
 */
export class UnsettledLedgerKeys {
  readonly #request: CoordinatorRequest;
  readonly #keys = new Set<string>();

  constructor(request: CoordinatorRequest) {
    this.#request = request;
  }

  /** Adopts the restored keys (the coordinator may still owe their files). */
  adopt(keys: readonly string[]): void {
    this.#keys.clear();
    for (const key of keys) this.#keys.add(key);
  }

  /** Runs before the ledger uses `keys` (its `beforeUse` hook). */
  readonly beforeUse = async (keys: readonly string[]): Promise<void> => {
    if (this.#keys.size === 0) return;
    const owed = keys.filter((key) => this.#keys.has(key));
    if (owed.length === 0) return;
    await this.#request("policy_settle", { keys: owed });
    for (const key of owed) this.#keys.delete(key);
  };
}

/** Whether `participant` is a policy model's (matched by kind: it may come from another copy of the package). */
export function isPolicyParticipant(participant: Participant): participant is PolicyParticipant {
  return participant.kind === "model";
}

/**
 * A worker's side of a multi-worker model server ({@link PolicyWorkerSide}): what its policy
 * participant asks of the coordinator, and its answers to the coordinator's policy messages.
 */
export class PolicyWorker implements PolicyWorkerSide {
  readonly cuts: CutService;
  readonly claims: WorkerCutClaims;
  readonly #owed: UnsettledLedgerKeys;
  readonly ledgerHook: PolicyLedgerHook;

  constructor(request: CoordinatorRequest, logger: Pick<Logger, "warn"> | null = null) {
    this.cuts = coordinatorCutService(request);
    this.claims = new WorkerCutClaims(request, logger);
    this.#owed = new UnsettledLedgerKeys(request);
    this.ledgerHook = { beforeUse: this.#owed.beforeUse };
  }

  /**
   * Answers a policy message of the coordinator to this worker's participant; undefined when
   * `kind` is none of them.
   */
  answer(
    participant: PolicyParticipant,
    kind: string,
    body: FrameValue,
  ): { readonly reply: unknown } | undefined {
    switch (kind) {
      case "policy_snapshot":
        return { reply: participant.snapshot() };
      case "policy_check_fresh":
        participant.refuseServed();
        return { reply: null };
      case "policy_restored": {
        const restored = fromFrame<BodyOf<ToWorker, "policy_restored">>(body);
        const targets = restored.targets;
        this.#owed.adopt([...targets, ...(restored.owed_keys ?? [])]);
        this.claims.adopt(restored.cut_keys);
        participant.adoptRestoredTargets(targets);
        return { reply: null };
      }
      default:
        return undefined;
    }
  }
}
