/**
 * The agent's session table: every session the agent holds (seeded, restored, or a legacy
 * `/run`'s `run:<rollout>`), its state, its activation count and kept reply, and the close
 * receipts a retried close is answered from. One table whether or not checkpointing is on;
 * the checkpoint participant tracks the same keys' phases (running, parked, closing) and the
 * server keeps only routes, cookies and the author's hooks. What a checkpoint stores of a
 * session and how a restore fills the table are in session-checkpoint.ts.
 *
 * @module
 */
import { DetailError, EpisodeError } from "../../errors.js";
import { captureKey, sameEpisode, type EpisodeId } from "../../identity/episode-id.js";
import type { CookieJar } from "../../util/cookies.js";
import { deferred, type Deferred } from "../../util/deferred.js";
import { KeyedMutex } from "../../util/keyed-mutex.js";
import {
  ACTIVATION_HEADER,
  parseActivationIndex,
  type AgentCloseReply,
  type AgentSeedRequest,
} from "../../wire/agent.js";
import { NotJsonError } from "../../json/json-value.js";
import { frozenJson } from "../../json/frozen-json.js";
import type { SessionPhase } from "./session-phase.js";

/** The reply of a completed activation, kept to answer a repeated request for it. */
export interface StoredActivationReply {
  /** The reply JSON (without `_ng_trajectory`). */
  readonly response: Record<string, unknown>;
  /** Cookies the reply set. */
  readonly cookies: CookieJar;
}

/** One session of the table. */
export class AgentSessionEntry<State> {
  /** A close has begun: no activation may start. */
  closing = false;
  /** How many activations started (the next is `activations + 1`). */
  activations = 0;
  /** The index of the activation that completed last. */
  completedActivation = 0;
  /** Its reply, kept when the activation was indexed. */
  completedReply: StoredActivationReply | null = null;
  /** The activation running now, whose reply a repeat of it joins. */
  running: { readonly index: number; readonly reply: Deferred<StoredActivationReply> } | null =
    null;
  /** The session's checkpoint phase while the session participant tracks it. */
  phase: SessionPhase | null = null;

  constructor(
    readonly key: string,
    public episode: EpisodeId,
    /** The seed request; null for a legacy `/run` session. */
    readonly request: AgentSeedRequest | null,
    public state: State | undefined,
  ) {}

  /** Whether the session was seeded (not a legacy `/run`). */
  get native(): boolean {
    return this.request !== null;
  }
}

/** How an activation request is answered, by its `x-ng-agent-activation` index. */
export type ActivationTurn =
  /** Run the turn loop; `index` is the request's index, or null without the header. */
  | { readonly kind: "run"; readonly index: number | null }
  /** The same activation is running: answer with its reply. */
  | { readonly kind: "join"; readonly reply: Promise<StoredActivationReply> }
  /** The same activation completed: answer with its kept reply. */
  | { readonly kind: "replay"; readonly reply: StoredActivationReply };

/** A turn loop's result before it is kept. */
export interface ActivationResult {
  readonly response: Record<string, unknown>;
  readonly cookies?: CookieJar;
}

interface Receipt {
  readonly reply: AgentCloseReply;
  readonly expiresAt: number;
}

/** How {@link AgentSessionTable.seed} builds and registers a session. */
export interface SessionSeed<State> {
  readonly key: string;
  readonly episode: EpisodeId;
  readonly request: AgentSeedRequest;
  /** Whether the request carried the agent's session cookie (naming this key). */
  readonly hadCookie: boolean;
  /** Builds the state; `failure` keeps a partial state, marked closing, and fails the seed. */
  build(): Promise<
    { readonly state: State | undefined } | { readonly state: State; readonly failure: unknown }
  >;
  /** Registers the session with the participant; throws when it was retired meanwhile. */
  register(): void;
  /** Frees what was built when the register refused it. */
  retiredWhileBuilding(): Promise<void>;
}

/** How {@link AgentSessionTable.close} closes a session. */
export interface SessionClose<State> {
  readonly key: string;
  readonly episode: EpisodeId;
  /** Whether the request carried the agent's session cookie (naming this key). */
  readonly hadCookie: boolean;
  /** Marks the session closing (through the participant when one tracks it). */
  markClosing(entry: AgentSessionEntry<State>): Promise<void>;
  /** The agent's close hook. */
  closeState(
    entry: AgentSessionEntry<State>,
  ): Promise<Omit<AgentCloseReply, "agent_session_id">> | Omit<AgentCloseReply, "agent_session_id">;
  /** Called once the session is gone, before its receipt is kept. */
  closed(): void;
}

/** Options of an {@link AgentSessionTable}. */
export interface AgentSessionTableOptions {
  /** How long a close receipt answers a retried close, in ms (read at each close). */
  readonly receiptWindowMs: () => number;
}

/** The agent's sessions, close receipts and per-session locks. */
export class AgentSessionTable<State> {
  readonly #entries = new Map<string, AgentSessionEntry<State>>();
  readonly #receipts = new Map<string, Receipt>();
  readonly #locks = new KeyedMutex();
  readonly #receiptWindowMs: () => number;

  constructor(options: AgentSessionTableOptions) {
    this.#receiptWindowMs = options.receiptWindowMs;
  }

  /** The session of `key`, or undefined. */
  get(key: string): AgentSessionEntry<State> | undefined {
    return this.#entries.get(key);
  }

  has(key: string): boolean {
    return this.#entries.has(key);
  }

  /** Adds (or replaces) a session. */
  add(entry: AgentSessionEntry<State>): void {
    this.#entries.set(entry.key, entry);
  }

  /** Removes `entry` if it is still the session of its key (a retire may have replaced it). */
  remove(entry: AgentSessionEntry<State>): void {
    if (this.#entries.get(entry.key) === entry) this.#entries.delete(entry.key);
  }

  /** Removes the session of `key`, whatever it is. */
  delete(key: string): void {
    this.#entries.delete(key);
  }

  /**
   * Throws `stale_attempt` when `entry` is no longer the session of its key: a retire took it
   * while a seed or close awaited.
   */
  requireCurrent(entry: AgentSessionEntry<State>): void {
    if (this.#entries.get(entry.key) !== entry) {
      throw EpisodeError.staleAttempt(captureKey(entry.episode), entry.episode.attempt);
    }
  }

  /** Runs `fn` holding the lock of `key`: seeds and closes of one session run one at a time. */
  withLock<T>(key: string, fn: () => Promise<T>): Promise<T> {
    return this.#locks.run([key], fn);
  }

  // ---- Seed and close ------------------------------------------------------------------------

  /**
   * Seeds a session under its lock: a seed repeating the one that built the session is a
   * no-op; a closed, closing or differently seeded key is refused with 409.
   */
  async seed(seed: SessionSeed<State>): Promise<void> {
    const { key } = seed;
    await this.withLock(key, async () => {
      if (this.receipt(key) !== null) throw new DetailError(409, "Agent session is already closed");
      const existing = this.#entries.get(key);
      if (existing?.closing === true) throw new DetailError(409, "Agent session is closing");
      if (existing !== undefined) {
        if (JSON.stringify(existing.request) !== JSON.stringify(seed.request)) {
          throw new DetailError(409, "agent_session_id is already bound to another seed request");
        }
        seed.register();
        return;
      }
      if (seed.hadCookie) throw new DetailError(409, "Agent session cookie has expired");
      const request = frozenCopy(seed.request);
      const entry = new AgentSessionEntry<State>(key, seed.episode, request, undefined);
      const built = await seed.build();
      entry.state = built.state;
      if ("failure" in built) {
        entry.closing = true; // only a close can use (and free) a partial state
        this.add(entry);
        throw built.failure;
      }
      this.add(entry);
      try {
        seed.register();
      } catch (error) {
        await seed.retiredWhileBuilding();
        throw error;
      }
    });
  }

  /**
   * Closes a session under its lock and keeps its receipt: a retried close gets the same
   * reply within the window; a close of an unknown session without a cookie is answered with
   * an empty receipt.
   * @throws EpisodeError `stale_attempt` when a retire took the session while it closed
   */
  async close(close: SessionClose<State>): Promise<AgentCloseReply> {
    const { key } = close;
    return await this.withLock(key, async () => {
      const receipt = this.receipt(key);
      const entry = this.#entries.get(key);
      if (entry !== undefined && !sameEpisode(entry.episode, close.episode)) {
        throw new DetailError(409, "episode_id does not match the seeded agent session");
      }
      if (receipt !== null) return receipt;
      if (entry === undefined) {
        if (close.hadCookie) throw new DetailError(409, "Agent close receipt has expired");
        const empty = { agent_session_id: key, agent_observations: null, resources_cookies: null };
        return this.storeReceipt(key, empty);
      }
      await close.markClosing(entry);
      this.requireCurrent(entry);
      const result = await close.closeState(entry);
      this.requireCurrent(entry);
      this.#entries.delete(key);
      close.closed();
      return this.storeReceipt(key, {
        agent_session_id: key,
        agent_observations: result.agent_observations,
        resources_cookies: result.resources_cookies,
      });
    });
  }

  // ---- Close receipts ----------------------------------------------------------------------

  /** The kept close reply of `key` (a copy), or null; drops receipts past their window first. */
  receipt(key: string): AgentCloseReply | null {
    this.#purgeReceipts();
    const receipt = this.#receipts.get(key);
    return receipt === undefined ? null : structuredClone(receipt.reply);
  }

  /** Keeps `reply` for a retried close and returns a copy. */
  storeReceipt(key: string, reply: AgentCloseReply): AgentCloseReply {
    this.#receipts.set(key, { reply, expiresAt: Date.now() + this.#receiptWindowMs() });
    return structuredClone(reply);
  }

  /** Drops receipts past their window; receipts expire in insertion order. */
  #purgeReceipts(): void {
    const now = Date.now();
    for (const [key, receipt] of this.#receipts) {
      if (receipt.expiresAt > now) break;
      this.#receipts.delete(key);
    }
  }

  // ---- Activations -------------------------------------------------------------------------

  /**
   * How an activation of `entry` with the activation header `header` (undefined: none) is
   * answered: run, join the same running activation, or replay its kept reply.
   * @throws EpisodeError `activation_out_of_order` for a malformed, skipped or unkept index
   */
  turnOf(entry: AgentSessionEntry<State>, header: string | undefined, key: string): ActivationTurn {
    if (header === undefined) return { kind: "run", index: null };
    const index = parseActivationIndex(header);
    if (index === null) {
      throw new EpisodeError(
        "activation_out_of_order",
        `${ACTIVATION_HEADER} must be a positive integer, got ${JSON.stringify(header)}`,
        key,
      );
    }
    const completed = entry.completedActivation;
    if (entry.running !== null && entry.running.index === index) {
      return { kind: "join", reply: entry.running.reply.promise };
    }
    if (index === completed) {
      if (entry.completedReply === null) {
        throw new EpisodeError(
          "activation_out_of_order",
          `activation ${index} of agent session ${entry.key} completed but its reply is not kept`,
          key,
        );
      }
      return { kind: "replay", reply: entry.completedReply };
    }
    if (index !== completed + 1) {
      throw new EpisodeError(
        "activation_out_of_order",
        `activation ${index} of agent session ${entry.key} is out of order: activation ${completed} completed last`,
        key,
      );
    }
    return { kind: "run", index };
  }

  /**
   * Runs one activation's turn loop (`entry` null: a session-less call) and keeps its reply:
   * recorded before the activation ends, so a checkpoint exports it with the session, and
   * handed to a repeat of the same activation that joined it.
   */
  async runActivation(
    entry: AgentSessionEntry<State> | null,
    indexed: boolean,
    loop: () => Promise<ActivationResult>,
  ): Promise<StoredActivationReply> {
    const running =
      entry === null
        ? null
        : { index: entry.activations, reply: deferred<StoredActivationReply>() };
    running?.reply.promise.catch(() => undefined); // joiners see it; nobody else must
    if (entry !== null) entry.running = running;
    try {
      const result = await loop();
      // A native session reports its trajectory through its observations at close; a legacy
      // /run has no bundle, so its loop keeps the trajectory in the reply.
      const native = entry?.native === true;
      const response = indexed && native ? withoutTrajectory(result.response) : result.response;
      let stored: StoredActivationReply = { response, cookies: { ...(result.cookies ?? {}) } };
      if (entry !== null && running !== null) {
        // Kept, it is exported with the session at every commit until the next activation.
        if (indexed) stored = frozenCopy(stored);
        entry.completedActivation = running.index;
        entry.completedReply = indexed ? stored : null;
        running.reply.resolve(stored);
      }
      return stored;
    } catch (error) {
      running?.reply.reject(error);
      throw error;
    } finally {
      if (entry !== null && entry.running === running) entry.running = null;
    }
  }
}

/** The `activation-<n>` invocation ID of an activation (`root` for the first). */
export function invocationId(activations: number): string {
  return activations <= 1 ? "root" : `activation-${activations}`;
}

/**
 * The table's own frozen copy of a value it keeps and exports with the session (the seed
 * request, a kept reply), validated as it is copied: commits export it without walking it
 * again, and the objects it was copied from stay their holders'. A value that is not JSON is
 * kept as it is: the commit then fails naming the path, as for any session value.
 * @internal
 */
export function frozenCopy<T>(value: T): T {
  try {
    return frozenJson(value);
  } catch (error) {
    if (error instanceof NotJsonError) return value;
    throw error;
  }
}

function withoutTrajectory(response: Record<string, unknown>): Record<string, unknown> {
  if (!Object.hasOwn(response, "_ng_trajectory")) return response;
  const { _ng_trajectory: _dropped, ...rest } = response;
  return rest;
}
