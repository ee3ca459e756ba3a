/**
 * A worker's end of its coordinator: registers, carries out what the coordinator asks of the
 * worker's own participant, pushes its readiness, hands control calls to the coordinator, and
 * keeps the routing facts (live workers, aliases) its session router reads.
 *
 * @see docs/workers.md
 */
import { randomBytes } from "node:crypto";
import { connect } from "node:net";
import { pino, type Logger } from "pino";
import { GymError } from "../errors.js";
import { parseEpisodeId } from "../identity/episode-id.js";
import { scopeFromCaptureKeys } from "../identity/scope-keys.js";
import type { Operation } from "../wire/control.js";
import type { CloseAdmissionRequest } from "../control/participant.js";
import { encodeExport } from "./encoded-export.js";
import { ChannelClosedError, FrameBytes, FrameChannel } from "./frame-channel.js";
import { fromFrame, type BodyOf, type FrameValue, type ReplyOf } from "./frame-codec.js";
import { decodeStoredLine } from "../store/records-reader.js";
import { linesOf } from "../util/buffer-parts.js";
import type { InstallHead, LostWorker, ToCoordinator, ToWorker } from "./worker-messages.js";
import type { OwnerRoute } from "../server/routing/session-router.js";
import type { ServerWorker } from "../server/server-worker.js";
import { adoptRestored, type WorkerParticipant } from "./kind-hooks.js";
import { PolicyWorker, isPolicyParticipant } from "./policy-worker.js";

/** How a worker reaches its coordinator. */
export interface WorkerLinkOptions {
  /** The coordinator's socket. */
  readonly coordinator: string;
  /** This worker's index, 0-based. */
  readonly index: number;
  /** How many workers the server runs. */
  readonly count: number;
  /** The directory of the workers' private sockets. */
  readonly socketDir: string;
  /**
   * The random session secret the coordinator drew for all its workers (only when none is
   * configured or derived): every worker must sign session cookies with one key.
   * @default none
   */
  readonly sessionSecret?: string | null;
  readonly logger?: Logger;
}

/** While open, a change is reported at most this often (ms); while closed, at once. */
const OPEN_REPORT_INTERVAL_MS = 250;

/** The lines (without their newlines) of a block of newline-terminated stored lines. */
function storedLinesOf(block: FrameBytes): Buffer[] {
  return linesOf(block.parts).lines.map((line) => line.subarray(0, line.length - 1));
}

/**
 * One worker's link to its coordinator. Build it, build the server with it, then
 * {@link register} with the server's participant (null with checkpointing off).
 */
export class WorkerLink implements ServerWorker {
  /** The owner this worker's sessions name: 32 random hex characters, new per process. */
  readonly routingId = randomBytes(16).toString("hex");
  readonly index: number;
  readonly count: number;
  readonly socketDir: string;
  readonly #sessionSecret: string | null;
  readonly #log: Logger;
  readonly #channel: FrameChannel<ToCoordinator>;
  #participant: WorkerParticipant | null = null;
  /** A model server's worker side, once its participant asked for one. */
  #policy: PolicyWorker | null = null;
  #generation = 0;
  #closed = false;
  #reportTimer: NodeJS.Timeout | null = null;
  /** Whether the pending report waits out the open interval. */
  #reportThrottled = false;
  /** While closing or opening: the reply carries the readiness, so no report goes first. */
  #switching = false;
  readonly #calls = new Map<number, AbortController>();
  #aliases = new Map<string, string>();
  #workers = new Map<string, number>();
  /** Every routing ID ever seen live: a request naming one that left is for a gone worker. */
  readonly #everSeen = new Set<string>();
  #joined = false;
  #lost: LostWorker[] = [];
  #epoch = -1;
  /** Replacement keys whose restored record waits at the coordinator. */
  #claimable = new Set<string>();
  /** Claims on their way: a close waits for them, so what they bring is exported. */
  readonly #pendingClaims = new Set<Promise<void>>();
  #stopListeners: (() => void)[] = [];

  private constructor(
    options: WorkerLinkOptions,
    channel: (link: WorkerLink) => FrameChannel<ToCoordinator>,
  ) {
    this.index = options.index;
    this.count = options.count;
    this.socketDir = options.socketDir;
    this.#sessionSecret = options.sessionSecret ?? null;
    this.#log = options.logger ?? pino({ level: "silent" });
    this.#channel = channel(this);
  }

  /** The random session secret shared by the server's workers, or null (a getter: never serialized). */
  get sessionSecret(): string | null {
    return this.#sessionSecret;
  }

  /** Connects to the coordinator. */
  static async connect(options: WorkerLinkOptions): Promise<WorkerLink> {
    const socket = connect(options.coordinator);
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", reject);
    });
    return new WorkerLink(
      options,
      (link) => new FrameChannel(socket, (kind, body) => link.#handle(kind, body)),
    );
  }

  /** Runs `listener` when the coordinator is gone (the worker should then stop). */
  onCoordinatorLost(listener: (reason: string) => void): void {
    this.#channel.onClose(listener);
  }

  /** Runs `listener` when the coordinator asks this worker to stop (the server is stopping). */
  onStopRequested(listener: () => void): void {
    this.#stopListeners.push(listener);
  }

  /** Registers with the coordinator and adopts its state (closed admission, marks, aliases). */
  async register(participant: WorkerParticipant | null): Promise<void> {
    this.#participant = participant;
    const join = await this.#channel.call("register", {
      index: this.index,
      pid: process.pid,
      routing_id: this.routingId,
    });
    this.#adoptMembership(join.epoch, join.workers, join.lost);
    this.#aliases = new Map(join.aliases);
    this.#claimable = new Set(join.claims);
    if (participant !== null) {
      participant.retired.update(join.marks);
      participant.onChange = () => this.#scheduleReport();
      this.#generation = join.generation;
      if (!join.accepting && join.request !== null) {
        this.#closed = true;
        await participant.closeAdmission(join.request);
      }
      this.#report();
    }
    this.#joined = true;
  }

  /**
   * Before the replacement attempt `key` begins here: fetches the restored record it continues
   * from the coordinator and adopts it (a no-op when there is none to claim). The data plane
   * awaits it before its synchronous admission.
   */
  async claimRestored(key: string): Promise<void> {
    const participant = this.#participant;
    if (participant !== null) await this.#claim(participant, key);
  }

  /**
   * The worker side of a model server's participant: the coordinator's cut round, restored
   * cuts and ledger keys, and the answers to its policy messages. One per link.
   */
  policyWorker(logger: Pick<Logger, "warn"> | null = null): PolicyWorker {
    this.#policy ??= new PolicyWorker(this.request, logger);
    return this.#policy;
  }

  /** Tells the coordinator this worker accepts connections now. */
  async listening(): Promise<void> {
    await this.#channel.call("listening");
  }

  /** Whether every worker of the server has registered and listens. */
  get allJoined(): boolean {
    return this.#joined && this.#workers.size >= this.count;
  }

  /** Workers of this server that exited. */
  get lostWorkers(): readonly LostWorker[] {
    return this.#lost;
  }

  /** How many workers are registered, connected and listening. */
  get liveWorkers(): number {
    return this.#workers.size;
  }

  /** A control call received by this worker, answered by the coordinator. */
  async dispatch(operation: Operation, body: unknown): Promise<unknown> {
    const call = body === undefined ? { operation } : { operation, body };
    return await this.request("control", call);
  }

  /**
   * This worker's own metrics as Prometheus text (null: off), for the coordinator's merged
   * scrape. Set by the server the link was built for: its telemetry is the one installed.
   */
  metricsSource: (() => Promise<string | null>) | null = null;

  /**
   * The Prometheus text of the whole server: the coordinator's and every live worker's
   * metrics, each sample labelled with its process (`worker`).
   */
  async serverMetrics(): Promise<string> {
    return String(await this.request("metrics", null));
  }

  /**
   * Sends a message of the participant's own to the coordinator and waits for its answer (no
   * time limit: the coordinator bounds what it waits for).
   * @throws GymError `checkpoint_coordinator_unavailable` when the coordinator is gone
   */
  readonly request = async <K extends keyof ToCoordinator & string>(
    kind: K,
    body: BodyOf<ToCoordinator, K>,
  ): Promise<ReplyOf<ToCoordinator, K>> => {
    try {
      return await this.#channel.call(kind, body, null);
    } catch (error) {
      if (error instanceof ChannelClosedError) {
        throw new GymError(
          "checkpoint_coordinator_unavailable",
          `this worker cannot reach the server's checkpoint coordinator: ${error.message}`,
        );
      }
      throw error;
    }
  };

  /**
   * Where a request naming `owner` goes: here, another live worker (following the restore's
   * alias table), or nowhere because that worker is gone. `null` names no session (served
   * here); `""` is a session cookie of a one-process server, which follows the alias of its
   * owner-less records. An owner nobody knows (e.g. from before a restart without restore) is
   * served here.
   */
  routeOwner(owner: string | null): OwnerRoute {
    if (owner === null) return { to: "local" };
    const target = this.#aliases.get(owner) ?? (owner === "" ? null : owner);
    if (target === null || target === this.routingId) return { to: "local" };
    if (this.#workers.has(target)) return { to: "worker", routingId: target };
    if (this.#everSeen.has(target) || this.#aliases.has(owner))
      return { to: "gone", owner: target };
    return { to: "local" };
  }

  /** The private socket of a worker. */
  socketOf(routingId: string): string {
    return `${this.socketDir}/${routingId}.sock`;
  }

  /** Stops talking to the coordinator (shutdown). */
  close(): void {
    if (this.#reportTimer !== null) clearTimeout(this.#reportTimer);
    this.#channel.close();
  }

  #adoptMembership(epoch: number, workers: [string, number][], lost: LostWorker[]): void {
    // The join reply and a later broadcast may be handled in either order.
    if (epoch <= this.#epoch) return;
    this.#epoch = epoch;
    this.#workers = new Map(workers);
    this.#lost = lost;
    for (const [routingId] of workers) this.#everSeen.add(routingId);
  }

  #scheduleReport(): void {
    if (this.#switching) return;
    if (this.#reportTimer !== null) {
      // A report throttled while admission was open waits no longer once a checkpoint is open.
      if (!this.#closed || !this.#reportThrottled) return;
      clearTimeout(this.#reportTimer);
    }
    this.#reportThrottled = !this.#closed;
    this.#reportTimer = setTimeout(
      () => {
        this.#reportTimer = null;
        this.#report();
      },
      this.#closed ? 0 : OPEN_REPORT_INTERVAL_MS,
    );
    this.#reportTimer.unref();
  }

  /**
   * Reports now, before the reply to a call that changed what this worker holds: the reply
   * follows the report on the channel, so a status after the call counts what it changed.
   */
  async #reportAfter<T>(work: Promise<T>): Promise<T> {
    try {
      return await work;
    } finally {
      this.#cancelReport();
      this.#report();
    }
  }

  #cancelReport(): void {
    if (this.#reportTimer !== null) clearTimeout(this.#reportTimer);
    this.#reportTimer = null;
  }

  /**
   * Closes or opens admission and answers with the readiness after it. No report is sent
   * meanwhile: the coordinator takes the reply unless a report followed it, so one sent while
   * the participant was still closing (e.g. before a model's cut round ended) would stand in
   * for it.
   */
  async #switchAdmission(
    generation: number,
    closed: boolean,
    work: () => void | Promise<void>,
  ): Promise<unknown> {
    const participant = this.#need();
    this.#generation = generation;
    this.#closed = closed;
    this.#switching = true;
    try {
      await work();
    } finally {
      this.#switching = false;
      // What a pending report would say, the reply says.
      this.#cancelReport();
    }
    return participant.readiness();
  }

  #report(): void {
    const participant = this.#participant;
    if (participant === null) return;
    this.#channel.send("report", {
      generation: this.#generation,
      report: participant.readiness(),
      extra: participant.statusExtra(),
    });
  }

  #signal(body: { readonly call?: number }): { signal: AbortSignal; done: () => void } {
    const call = body.call as number;
    const controller = new AbortController();
    this.#calls.set(call, controller);
    return { signal: controller.signal, done: () => this.#calls.delete(call) };
  }

  #need(): WorkerParticipant {
    if (this.#participant === null) throw new Error("this worker takes no part in checkpoints");
    return this.#participant;
  }

  async #withSignal<T>(
    body: { readonly call?: number },
    work: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const { signal, done } = this.#signal(body);
    try {
      return await work(signal);
    } finally {
      done();
    }
  }

  #handle(kind: string, value: FrameValue): unknown {
    // The body of this message, as the catalogue types it (see `frame-codec.ts`).
    const bodyOf = <K extends keyof ToWorker>(_kind: K): BodyOf<ToWorker, K> =>
      fromFrame<BodyOf<ToWorker, K>>(value ?? {});
    switch (kind) {
      case "membership": {
        const { epoch, workers, lost } = bodyOf(kind);
        this.#adoptMembership(epoch, workers, lost);
        return null;
      }
      case "stop":
        for (const listener of this.#stopListeners) listener();
        return null;
      case "metrics_text":
        return (this.metricsSource?.() ?? Promise.resolve(null)).then((text) => text ?? "");
      case "cancel":
        this.#calls.get(bodyOf(kind).call)?.abort(new Error("the coordinator gave up"));
        return null;
      case "close": {
        const { request, generation } = bodyOf(kind);
        return this.#close(request, generation);
      }
      case "open":
        return this.#open(bodyOf(kind).generation);
      case "mark":
        return this.#need().markRetired(scopeFromCaptureKeys(bodyOf(kind).episode_keys));
      case "check_forget":
        return this.#need().checkForget(bodyOf(kind).rollout_ids);
      case "forget":
        return this.#need().forget(bodyOf(kind).rollout_ids);
      case "retire": {
        const body = bodyOf(kind);
        return this.#reportAfter(
          this.#withSignal(body, (signal) =>
            this.#need().retire(parseEpisodeId(body.episode), signal),
          ),
        );
      }
      case "export": {
        const body = bodyOf(kind);
        return this.#withSignal(body, async (signal) => {
          const keys = body.scope_keys;
          const scope = keys === null ? null : scopeFromCaptureKeys(keys);
          const records = await this.#need().export(scope, signal);
          return body.encoded === true ? encodeExport(records) : records;
        });
      }
      case "restore_manifest":
        return this.#need().restoreManifest(bodyOf(kind).manifest);
      case "install": {
        // A share of stored lines (validated here, in parallel with the other workers) or of
        // records.
        const body = bodyOf(kind);
        const lines = body instanceof FrameBytes ? body : null;
        const head =
          body instanceof FrameBytes
            ? fromFrame<InstallHead & { readonly call?: number }>(body.head)
            : body;
        this.#aliases = new Map(head.aliases);
        this.#claimable = new Set(head.claims);
        const installing = this.#withSignal(head, (signal) => {
          const participant = this.#need();
          const records =
            body instanceof FrameBytes
              ? storedLinesOf(lines!).map((line) => {
                  // Validated by the participant's own copy of the package (its fast paths).
                  const stored = decodeStoredLine(line);
                  return participant.recordFromStored(stored.value, stored.episode_id);
                })
              : body.records;
          return participant.install(records, scopeFromCaptureKeys(head.scope_keys), signal);
        });
        return this.#reportAfter(installing);
      }
      case "restored_pending":
        return Promise.resolve(this.#need().restoredPending());
      case "delete_restored": {
        const body = bodyOf(kind);
        return this.#reportAfter(
          this.#withSignal(body, (signal) =>
            this.#need().deleteRestored(parseEpisodeId(body.episode), signal),
          ),
        );
      }
      default:
        return this.#withSignal(fromFrame<{ readonly call?: number }>(value ?? {}), async () => {
          const participant = this.#need();
          const policy = this.#policy;
          const answer =
            policy !== null && isPolicyParticipant(participant)
              ? policy.answer(participant, kind, value)
              : undefined;
          if (answer === undefined)
            throw new Error(`unknown message '${kind}' from the coordinator`);
          return answer.reply;
        });
    }
  }

  /** Fetches the restored record of replacement `key` from the coordinator and adopts it. */
  async #claim(participant: WorkerParticipant, key: string): Promise<void> {
    if (!this.#claimable.has(key)) return;
    const claiming = (async () => {
      const record = await this.#channel.call("claim", { key });
      this.#claimable.delete(key);
      if (record !== null) await adoptRestored(participant, record, new AbortController().signal);
    })();
    this.#pendingClaims.add(claiming);
    try {
      await claiming;
    } finally {
      this.#pendingClaims.delete(claiming);
    }
  }

  /** Reopens and answers with the readiness of the new generation (status reads it). */
  async #open(generation: number): Promise<unknown> {
    const participant = this.#need();
    return await this.#switchAdmission(generation, false, () => participant.openAdmission());
  }

  async #close(request: CloseAdmissionRequest, generation: number): Promise<unknown> {
    const participant = this.#need();
    // A claim answered before this close must be adopted first, or the export would miss it.
    await Promise.allSettled([...this.#pendingClaims]);
    const readiness = await this.#switchAdmission(generation, true, () =>
      participant.closeAdmission(request),
    );
    this.#log.debug({ worker: this.index }, "admission closed");
    return readiness;
  }
}
