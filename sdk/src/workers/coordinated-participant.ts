/**
 * The participant of a multi-worker server, run by its coordinator (a process that serves no
 * data). Each hook reaches every worker over its channel and answers for all of them, so the
 * control plane above it behaves exactly as for one process.
 *
 * @see docs/workers.md
 */
import type { z } from "zod";
import { CheckpointError, EpisodeError } from "../errors.js";
import {
  captureKey,
  episodeIdToWire,
  fromCaptureKey,
  type EpisodeId,
} from "../identity/episode-id.js";
import { captureKeySet, captureKeysOf } from "../identity/scope-keys.js";
import { compareStrings } from "../util/compare-strings.js";
import type { ParticipantKind, PrepareReport } from "../wire/control.js";
import type { Manifest, RecordBase } from "../wire/storage.js";
import type { StoredRecord } from "../store/records-reader.js";
import { refuseDuplicateRecords } from "../control/duplicate-records.js";
import { Participant, type CloseAdmissionRequest } from "../control/participant.js";
import type { SpanningParticipant } from "../control/spanning-participant.js";
import { claimKeyOf, identityOf, type WorkerParticipant } from "./kind-hooks.js";
import { mergeReports, mergeStatusExtras } from "./merge-reports.js";
import { decodeExport } from "./encoded-export.js";
import { FrameBytes, type FrameValue } from "./frame-codec.js";
import { placeOwners } from "./owner-placement.js";
import {
  ownerOfRecord,
  type InstallHead,
  type JoinState,
  type WorkerReport,
} from "./worker-messages.js";
import type { Member, WorkerPool } from "./worker-pool.js";

const NEWLINE = Buffer.from("\n");

/**
 * Whether `object`'s method `name` is the base `Participant`'s default: the root class of its
 * chain owns it. Compared by position, not identity: the prototype may come from another copy
 * of this package (a server's own dependency), whose `Participant` is another class.
 */
function isBaseDefault(object: object, name: string): boolean {
  let owner: object | null = object;
  while (owner !== null && !Object.hasOwn(owner, name)) {
    owner = Object.getPrototypeOf(owner) as object | null;
  }
  return owner !== null && Object.getPrototypeOf(owner) === Object.prototype;
}

/** A worker's latest answers, kept for the synchronous readiness and status. */
interface Latest {
  /** Its report for the current admission generation, or null. */
  report: PrepareReport | null;
  extra: Record<string, unknown>;
}

/**
 * The participant of a multi-worker server: closes, reports, fences, exports and installs
 * across every worker of its {@link WorkerPool}. Once a worker process is lost, prepare, commit
 * and restore are refused with `worker_lost` naming it (its state is gone with it).
 */
export class CoordinatedParticipant extends Participant implements SpanningParticipant {
  readonly kind: ParticipantKind;
  readonly recordSchema: z.ZodType<RecordBase>;
  readonly #prototype: WorkerParticipant;
  readonly #pool: WorkerPool;
  readonly #latest = new Map<string, Latest>();
  #accepting = true;
  #request: CloseAdmissionRequest | null = null;
  #generation = 0;
  /** Old owner → live worker routing ID, from the last restore. */
  #aliases = new Map<string, string>();
  /** Owners the last restored manifest listed. */
  #restoredOwners: string[] = [];
  /** Restored request-scoped records no worker claimed yet, by replacement key. */
  readonly #held = new Map<string, RecordBase>();
  /** The latest close or open round trip: a status waits for it, as one process never shows a half-closed state. */
  #round: Promise<void> = Promise.resolve();
  /** Replacement keys whose request-scoped record a worker claimed since the last restore. */
  readonly #claimed = new Set<string>();

  /**
   * @param pool the server's workers
   * @param prototype a participant built like the workers' that never serves: its kind,
   *   record schema and pure hooks (`checkCommit`, `commitReply`, `claimKey`) answer for all
   * @param control runs a control call a worker received (the control plane's dispatcher)
   */
  constructor(
    pool: WorkerPool,
    prototype: WorkerParticipant,
    control: (operation: string, body: unknown) => Promise<unknown>,
  ) {
    super();
    this.#pool = pool;
    this.#prototype = prototype;
    this.kind = prototype.kind;
    this.recordSchema = prototype.recordSchema as z.ZodType<RecordBase>;
    pool.coordinate({
      joinState: () => this.#joinState(),
      report: (member, report) => this.#takeReport(member, report),
      claim: (key) => this.#claim(key),
      control,
      message: (member, kind, body) => this.onWorkerMessage(member, kind, body),
      changed: () => {
        this.onMembershipChanged();
        this.notify();
      },
    });
  }

  /** The server's workers. */
  protected get pool(): WorkerPool {
    return this.#pool;
  }

  /** Whether admission is open (no checkpoint or restore in progress). */
  protected get accepting(): boolean {
    return this.#accepting;
  }

  /** Answers a worker's message of its participant's own; the generic one knows none. */
  protected onWorkerMessage(_member: Member, kind: string, _body: FrameValue): unknown {
    throw new Error(`unknown message '${kind}' from a worker`);
  }

  /** A worker joined or left. */
  protected onMembershipChanged(): void {}

  /** The blocker prefix of this kind (`policy` for the model, as its own blockers). */
  get #prefix(): string {
    return this.kind === "model" ? "policy" : this.kind;
  }

  #latestOf(member: Member): Latest {
    let latest = this.#latest.get(member.routingId);
    if (latest === undefined) {
      latest = { report: null, extra: {} };
      this.#latest.set(member.routingId, latest);
    }
    return latest;
  }

  #joinState(): Omit<JoinState, "workers" | "lost" | "epoch"> {
    return {
      accepting: this.#accepting,
      generation: this.#generation,
      request: this.#request,
      marks: [...this.retired.marks()],
      aliases: [...this.#aliases],
      claims: this.#claimable(),
    };
  }

  /** The replacement keys whose record the coordinator holds. */
  #claimable(): string[] {
    return [...this.#held.keys()];
  }

  /** Drops the held records of `episode` and every earlier attempt of its rollout. */
  #dropHeld(episode: EpisodeId): void {
    for (const key of [...this.#held.keys()]) {
      const held = fromCaptureKey(key);
      if (held.rollout_id === episode.rollout_id && held.attempt <= episode.attempt) {
        this.#held.delete(key);
      }
    }
  }

  /**
   * Hands the restored record of replacement `key` to the worker that received its request;
   * answered synchronously, so the reply reaches that worker before any later `close`. Refused
   * while a checkpoint is open, and for a second worker claiming the same replacement (it runs
   * on the first, as a duplicate request is refused in one process).
   */
  #claim(key: string): unknown {
    if (!this.#accepting) {
      throw new EpisodeError(
        "admission_closed",
        `episode ${key} cannot start while a checkpoint is open or a restore awaits its resume; retry after resume`,
        key,
      );
    }
    if (this.#claimed.has(key)) {
      throw new CheckpointError(
        "checkpoint_error",
        `episode ${key} already continues on another worker of this server`,
      );
    }
    const record = this.#held.get(key);
    if (record === undefined) return null;
    this.#held.delete(key);
    this.#claimed.add(key);
    return record;
  }

  #takeReport(member: Member, message: WorkerReport): void {
    const latest = this.#latestOf(member);
    latest.extra = message.extra;
    if (message.generation !== this.#generation) return;
    latest.report = message.report;
    this.notify();
  }

  async settled(): Promise<void> {
    // A round may start while an earlier one is awaited: wait until none is left running.
    let round: Promise<void>;
    do {
      round = this.#round;
      await round;
    } while (round !== this.#round);
  }

  checkMembership(operation: "prepare" | "commit" | "restore"): void {
    const lost = this.#pool.lost;
    if (lost.length > 0) {
      const named = lost
        .map((lost) => `worker ${lost.index} (pid ${lost.pid}, ${lost.exit})`)
        .join(", ");
      throw CheckpointError.workerLost(operation, `${named} of this server exited`);
    }
    if (operation === "restore" && this.#pool.registered < this.#pool.expected) {
      throw new CheckpointError(
        "checkpoint_error",
        `restore refused: ${this.#pool.registered} of ${this.#pool.expected} workers have started; wait for /health to answer 200`,
      );
    }
  }

  override async closeAdmission(request: CloseAdmissionRequest): Promise<void> {
    this.#accepting = false;
    this.#request = request;
    const generation = ++this.#generation;
    for (const latest of this.#latest.values()) latest.report = null;
    const members = this.#pool.live();
    const round = this.#pool.callAll("close", () => ({ request, generation }));
    this.#round = round.then(
      () => undefined,
      () => undefined,
    );
    const reports = await round;
    members.forEach((member, i) => {
      const latest = this.#latestOf(member);
      if (this.#generation === generation && latest.report === null) {
        latest.report = reports[i]!;
      }
    });
    this.notify();
  }

  override async openAdmission(): Promise<void> {
    this.#accepting = true;
    this.#request = null;
    const generation = ++this.#generation;
    for (const latest of this.#latest.values()) latest.report = null;
    // A worker that cannot be reached serves nothing: reopening the others is what matters.
    const round = this.#pool.tellAll("open", { generation });
    this.#round = round.then(() => undefined);
    const replies = await round;
    for (const [member, reply] of replies) {
      const latest = this.#latestOf(member);
      if (this.#generation === generation && latest.report === null && reply !== undefined) {
        latest.report = reply;
      }
    }
    this.notify();
  }

  override readiness(): PrepareReport {
    const reports: PrepareReport[] = [];
    for (const member of this.#pool.live()) {
      const report = this.#latest.get(member.routingId)?.report ?? null;
      if (report !== null) reports.push(report);
    }
    return mergeReports(reports, {
      blockerPrefix: this.#prefix,
      expected: this.#pool.expected,
      lost: this.#pool.lost.length > 0,
    });
  }

  override async markRetired(episodes: readonly EpisodeId[]): Promise<void> {
    this.retired.mark(episodes);
    await this.#pool.callAll("mark", () => ({ episode_keys: captureKeysOf(episodes) }));
  }

  override async checkForget(rolloutIds: readonly string[]): Promise<void> {
    await this.#pool.callAll("check_forget", () => ({ rollout_ids: rolloutIds }));
  }

  override async forget(rolloutIds: readonly string[]): Promise<void> {
    this.retired.forget(rolloutIds);
    await this.#pool.callAll("forget", () => ({ rollout_ids: rolloutIds }));
  }

  override async retire(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    this.#dropHeld(episode);
    await this.#pool.callAll("retire", () => ({ episode }), signal);
  }

  /** Every worker's records, and the restored records no worker claimed (exported again). */
  override async export(
    scope: readonly EpisodeId[] | null,
    signal: AbortSignal,
  ): Promise<RecordBase[]> {
    // Claims are refused while closed: the held records cannot move during the export. Each is
    // exported as its replacement's, as one process exports a restored episode not yet begun.
    const inScope = scope === null || this.#held.size === 0 ? null : captureKeySet(scope);
    const held: RecordBase[] = [];
    for (const [key, record] of this.#held) {
      if (inScope !== null && !inScope.has(key)) continue;
      held.push({ ...record, episode_id: episodeIdToWire(fromCaptureKey(key)) } as RecordBase);
    }
    // Stored lines, encoded by each worker, unless a hook here reads the records' contents.
    const encoded =
      isBaseDefault(this.#prototype, "commitReply") &&
      isBaseDefault(this.#prototype, "parkExported");
    // The scope as the capture keys already computed here: each worker decodes them without
    // keying them again (see `scopeFromCaptureKeys`).
    const scopeKeys = scope === null ? null : captureKeysOf(scope);
    const parts = await this.#pool.callAll(
      "export",
      () => ({ scope_keys: scopeKeys, encoded }),
      signal,
    );
    // Encoded, an answer without its lines is refused by `decodeExport`.
    const exported = parts.flatMap((part) =>
      encoded || part instanceof FrameBytes ? decodeExport(part) : part,
    );
    return [...exported, ...held];
  }

  override checkCommit(scope: readonly EpisodeId[] | null): void {
    this.#prototype.checkCommit(scope);
  }

  override commitReply(records: readonly RecordBase[]): Record<string, unknown> {
    return this.#prototype.commitReply(records);
  }

  /** Every owner a live cookie may name: the workers and every alias. */
  override manifestExtra(): Record<string, unknown> {
    const live = this.#pool.live().map((member) => member.routingId);
    const owners = new Set([...live, ...this.#aliases.keys()]);
    return { session_owners: [...owners].sort(compareStrings) };
  }

  override async restoreManifest(manifest: Manifest): Promise<void> {
    const owners = (manifest as { session_owners?: unknown }).session_owners;
    this.#restoredOwners = Array.isArray(owners)
      ? owners.filter((owner): owner is string => typeof owner === "string")
      : [];
    await this.#pool.callAll("restore_manifest", () => ({ manifest }));
  }

  /**
   * Places every pre-crash owner's sessions on one live worker (see `placeOwners`), tells every
   * worker the alias table, and installs each worker's share (an empty one included, so each
   * checks it holds nothing live).
   */
  override async install(
    records: readonly RecordBase[],
    scope: readonly EpisodeId[],
    signal: AbortSignal,
  ): Promise<void> {
    // Request-scoped records wait here for the worker that receives their replacement.
    const placed = this.#holdClaimable(records.map((record) => [record, record]));
    await this.#installShares(placed, ownerOfRecord, scope, signal, (share) => ({
      records: share,
    }));
  }

  /**
   * {@link install} from the stored lines: each worker receives its share's lines as they are
   * stored and validates them itself (in parallel); only the request-scoped records the
   * coordinator holds are validated here.
   */
  async installStored(
    records: readonly StoredRecord[],
    scope: readonly EpisodeId[],
    signal: AbortSignal,
  ): Promise<void> {
    const placed = this.#holdClaimable(
      // A decoded line, not validated yet: only the hooks (`claimKey`, `recordIdentity`) read it, and
      // they check what they read.
      records.map((stored) => [stored.value as unknown as RecordBase, stored]),
      (stored) => this.#prototype.recordFromStored(stored.value, stored.episode_id),
    );
    await this.#installShares(
      placed,
      (stored) => ownerOfRecord(stored.value),
      scope,
      signal,
      // The lines as they are, each with a newline: sent one after another, never joined.
      (share, head) =>
        new FrameBytes(
          head,
          share.flatMap((stored) => [stored.line, NEWLINE]),
        ),
    );
  }

  /**
   * Keeps the request-scoped records (a claim key) for the workers that will claim them,
   * validated by `validate`; returns the others. Each entry: what `claimKey` reads, and the
   * record as given. A checkpoint holding one replacement's record twice, or one thing the
   * participant holds once (its `recordIdentity`) twice, is refused here, before
   * anything is held or sent: each worker sees only its own share.
   */
  #holdClaimable<T extends RecordBase>(
    entries: readonly [RecordBase, T][],
    validate: (item: T) => RecordBase = (item) => item,
  ): T[] {
    const prototype = this.#prototype;
    const claimable: { key: string; item: T }[] = [];
    const identified: { what: string; key: string; item: T }[] = [];
    const placed: T[] = [];
    for (const [view, item] of entries) {
      const key = claimKeyOf(prototype, view);
      if (key !== null) {
        claimable.push({ key, item });
        continue;
      }
      const identity = identityOf(prototype, view);
      if (identity !== null) identified.push({ ...identity, item });
      placed.push(item);
    }
    const episodeOf = (entry: { item: T }) => captureKey(entry.item.episode_id);
    // A claim key is the replacement of the record's episode: one key twice is one episode twice.
    refuseDuplicateRecords(claimable, episodeOf, "episode");
    const what = identified[0]?.what ?? "record";
    refuseDuplicateRecords(identified, (entry) => entry.key, what, episodeOf);
    const held = claimable.map(({ key, item }) => [key, validate(item)] as const);
    this.#held.clear();
    this.#claimed.clear();
    for (const [key, record] of held) this.#held.set(key, record);
    return placed;
  }

  /** Places owners, then installs each live worker's share (built by `shareOf`). */
  async #installShares<T>(
    placed: readonly T[],
    ownerOf: (item: T) => string,
    scope: readonly EpisodeId[],
    signal: AbortSignal,
    shareOf: (share: T[], head: InstallHead) => FrameBytes | { readonly records: RecordBase[] },
  ): Promise<void> {
    const counts = new Map<string, number>(this.#restoredOwners.map((owner) => [owner, 0]));
    for (const item of placed) {
      const owner = ownerOf(item);
      counts.set(owner, (counts.get(owner) ?? 0) + 1);
    }
    const members = this.#pool.live();
    const aliases = placeOwners(
      counts,
      members.map((member) => member.routingId),
    );
    const shares = new Map<string, T[]>(members.map((member) => [member.routingId, []]));
    for (const item of placed) shares.get(aliases.get(ownerOf(item))!)!.push(item);
    this.#aliases = aliases;
    const head: InstallHead = {
      scope_keys: captureKeysOf(scope),
      aliases: [...aliases],
      claims: this.#claimable(),
    };
    await this.#pool.callAll(
      "install",
      (member) => {
        const share = shareOf(shares.get(member.routingId) ?? [], head);
        return share instanceof FrameBytes ? share : { ...head, ...share };
      },
      signal,
    );
  }

  override async restoredPending(): Promise<EpisodeId[]> {
    const lists = await this.#pool.callAll("restored_pending", () => ({}));
    const held = [...this.#held.keys()].map(fromCaptureKey);
    return [...lists.flat(), ...held];
  }

  override async deleteRestored(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    this.#dropHeld(episode);
    await this.#pool.callAll("delete_restored", () => ({ episode }), signal);
  }

  override statusExtra(): Record<string, unknown> {
    const live = this.#pool.live();
    return {
      ...mergeStatusExtras([
        ...live.map((member) => this.#latest.get(member.routingId)?.extra ?? {}),
        // The held records are restored episodes not yet begun, as one process lists them.
        ...(this.#held.size > 0 ? [{ restored_pending: [...this.#held.keys()] }] : []),
      ]),
      workers: live.length,
      expected_workers: this.#pool.expected,
      lost_workers: this.#pool.lost.map((lost) => ({ ...lost })),
      session_aliases: Object.fromEntries(this.#aliases),
    };
  }
}
