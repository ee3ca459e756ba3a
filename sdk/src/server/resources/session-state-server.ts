/**
 * An opt-in base for resources servers whose per-session state is a small JSON value held in
 * memory: declare the state's schema and how a seed builds it; export, restore, retire and
 * close are written for you.
 *
 * @module
 */
import type { z } from "zod";
import type { JsonValue } from "../../json/json-value.js";
import { isPlainRecord } from "../../util/plain-record.js";
import { parseBody } from "../../wire/parse.js";
import { dataRoute, type DataRoute } from "../data-route.js";
import {
  ResourcesServer,
  resourcesSession,
  type ExportSessionStatesInput,
  type RestoreSessionStatesInput,
  type RetireSessionStateInput,
  type SeedInput,
  type SessionRouteInput,
} from "../resources-server.js";

/** What a {@link SessionStateServer.stateTool} handler receives. */
export interface StateToolInput<State, Body> extends SessionRouteInput<Body> {
  /** The calling session's state, or undefined when no seed built one. */
  readonly state: State | undefined;
  /**
   * Replaces the calling session's state; false (and nothing kept) for a session nobody
   * seeded: nothing would ever free its state.
   * @throws InvalidRequestError (422) naming the field when the state schema refuses `state`
   */
  setState(state: State): boolean;
}

/** A {@link SessionStateServer.stateTool}: a `POST` data route handed the session's state. */
export interface StateTool<
  State,
  Schema extends z.ZodType | null = null,
  Reply = unknown,
> extends Omit<DataRoute<Schema, Reply>, "method" | "handler"> {
  /** Answers the call; its return is typed by `reply` when there is one. */
  readonly handler: (
    input: StateToolInput<State, Schema extends z.ZodType ? z.infer<Schema> : undefined>,
  ) => NoInfer<Reply | Promise<Reply>>;
}

/**
 * A resources server in `exported` mode whose sessions' states live in {@link states}: a seed
 * stores {@link initialState} (a repeated seed keeps what is held; a body naming a
 * `resources_session_id` keys the session by it and is answered with it), a close (answered
 * with the session's ID) or retire deletes it, a checkpoint exports every held state and a
 * restore installs them once {@link sessionStateSchema} accepted all.
 *
 * @example
 * class Tally extends SessionStateServer<number> {
 *   protected override readonly stateSchema = z.number();
 *   override readonly seedRequest = z.looseObject({ start: z.number().default(0) });
 *   override readonly verifyRequest = z.looseObject({ target: z.number() });
 *   protected override initialState({ body }: SeedInput<this>) {
 *     return body.start;
 *   }
 *   protected override verify({ body, session }: VerifyInput<this>) {
 *     return { reward: this.states.get(session.id) === body.target ? 1 : 0 };
 *   }
 * }
 * @see docs/resources-server.md
 */
export abstract class SessionStateServer<
  State extends JsonValue,
  Config = unknown,
> extends ResourcesServer<Config> {
  /** Always `exported`: the states in {@link states} are exported and restored. */
  static override checkpointMode = "exported";

  /** Every held session's state, by session ID. */
  readonly states = new Map<string, State>();

  /**
   * The schema of one session's state: every restored state, and every state a tool sets, is
   * checked against it.
   */
  protected abstract readonly stateSchema: z.ZodType<State>;

  /**
   * The state a seed builds from its body as {@link seedRequest} parsed it (it may
   * `session.replaceId` first).
   */
  protected abstract initialState(input: SeedInput<this>): State;

  /**
   * A `POST` tool route handed the calling session's state, declared as one object: a
   * {@link DataRoute} without `method` (validated by `request`, documented with `reply` and
   * `examples`, its handler typed by both).
   *
   * @example
   * this.stateTool({
   *   path: "/add",
   *   summary: "Add an amount to this session's total",
   *   request: z.strictObject({ amount: z.number() }),
   *   reply: z.strictObject({ total: z.number().nullable() }),
   *   examples: { request: { amount: 2 }, reply: { total: 2 } },
   *   handler: (call) => ({ total: call.state ?? null }),
   * });
   */
  protected stateTool<Schema extends z.ZodType | null = null, Reply = unknown>(
    route: StateTool<State, Schema, Reply>,
  ): DataRoute {
    // The handler's types were checked against the schemas where the tool was declared.
    const { handler, ...doc } = route as StateTool<State, z.ZodType | null, unknown>;
    return dataRoute({
      ...doc,
      method: "post",
      handler: (input) => {
        const session = resourcesSession(input);
        return handler({
          ...input,
          session,
          state: this.states.get(session.id),
          setState: (state) => {
            if (!this.states.has(session.id)) return false;
            this.states.set(session.id, parseBody(this.stateSchema, state, "the session state"));
            return true;
          },
        });
      },
    });
  }

  protected override sessionStateSchema(): z.ZodType<State> {
    return this.stateSchema;
  }

  protected override seedSession(input: SeedInput<this>): unknown {
    // The native session ID as sent, whatever the seed schema parsed the body into.
    const named = nativeSessionId(input.req.body);
    if (named !== null) input.session.replaceId(named);
    const state = this.initialState(input);
    if (!this.states.has(input.session.id)) this.states.set(input.session.id, state);
    return named === null ? {} : { resources_session_id: input.session.id };
  }

  protected override closeSession(input: SessionRouteInput): unknown {
    this.states.delete(input.session.id);
    return { resources_session_id: input.session.id };
  }

  /** Every held state of the named sessions, by session ID. */
  protected override async exportSessionStates(
    input: ExportSessionStatesInput,
  ): Promise<ReadonlyMap<string, State>> {
    // A session no longer held is left out: the participant counts it as dropped. A Map holds
    // any session ID (`__proto__` included) as data; a loop, as a commit exports thousands.
    const out = new Map<string, State>();
    for (const id of input.sessionIds) {
      const state = this.states.get(id);
      if (state !== undefined) out.set(id, state);
    }
    return out;
  }

  protected override async restoreSessionStates(input: RestoreSessionStatesInput): Promise<void> {
    // Each state is already sessionStateSchema()'s parse output: the participant parsed every
    // one before handing any over, so none is walked again here, unless a subclass declared
    // another schema there.
    const parsed = this.sessionStateSchema() === this.stateSchema;
    const states = Object.entries(input.states).map(
      ([id, s]) => [id, parsed ? (s as State) : this.stateSchema.parse(s)] as const,
    );
    for (const [id, state] of states) this.states.set(id, state);
  }

  protected override async retireSessionState(input: RetireSessionStateInput): Promise<void> {
    this.states.delete(input.sessionId);
  }
}

/** The `resources_session_id` a seed body names, or null. */
function nativeSessionId(body: unknown): string | null {
  if (!isPlainRecord(body)) return null;
  const id = body.resources_session_id;
  return typeof id === "string" && id.length > 0 ? id : null;
}
