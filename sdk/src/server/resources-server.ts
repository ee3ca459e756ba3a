import type { IncomingMessage } from "node:http";
import type { Express } from "express";
import { z } from "zod";
import { ConfigError, type ErrorCode } from "../errors.js";
import {
  CHECKPOINT_MODES,
  CHECKPOINT_VERIFY_MODES,
  CLOSE_SESSION_PATH,
  SEED_SESSION_PATH,
  VERIFY_PATH,
  checkDeclaration,
  type CheckpointMode,
  type CheckpointVerify,
} from "../participants/resources/declarations.js";
import {
  ResourcesParticipant,
  type SessionHooks,
} from "../participants/resources/resources-participant.js";
import type { JsonValue } from "../json/json-value.js";
import type { BySession } from "../util/by-session.js";
import {
  AnySeedRequestSchema,
  ResourcesCloseSessionReplySchema,
  ResourcesCloseSessionRequestSchema,
  ResourcesSeedSessionReplySchema,
  ResourcesSeedSessionRequestSchema,
  VerifyReplySchema,
  VerifyRequestSchema,
  type ResourcesCloseSessionRequest,
} from "../wire/resources.js";
import { dataRoute, documentedReply, type DataRoute, type RouteInput } from "./data-route.js";
import {
  AggregateMetricsReplySchema,
  AggregateMetricsRequestSchema,
  aggregateMetrics,
  type AggregateMetricsRequest,
} from "./resources/aggregate-metrics.js";
import { resourcesCheckpointMiddleware } from "./resources/checkpoint-middleware.js";
import { mcpAccess, mcpRoutes, mcpTools, withMcpAccess } from "./resources/mcp-endpoint.js";
import { MCP_TOKEN_SALT, McpSessionTokens, isMcpPath } from "./resources/mcp-session-token.js";
import {
  sessionCookie,
  sessionOf,
  sessionOwnerFromCookies,
  type ResourcesSession,
} from "./resources/session-cookie.js";
import { Server, type ServerOptions } from "./server.js";

/**
 * The `config:` settings every resources server takes; a server declaring settings of its own
 * extends it (`ResourcesConfigSchema.extend({...})`).
 */
export const ResourcesConfigSchema = z
  .strictObject({
    /**
     * Serve the tool routes as MCP tools on `/mcp`, and hand out an MCP session token in every
     * `/seed_session` reply (see docs/mcp.md). @default false
     */
    expose_tools_over_mcp: z.boolean().default(false),
  })
  .meta({ id: "ResourcesConfig" });
/** The base resources server settings. */
export type ResourcesConfig = z.infer<typeof ResourcesConfigSchema>;

/** The path of the base aggregation route. */
const AGGREGATE_METRICS_PATH = "/aggregate_metrics";

/** What {@link ResourcesServer.exportSessionStates} receives. */
export interface ExportSessionStatesInput {
  /** The sessions to snapshot; leave out one no longer held. */
  readonly sessionIds: readonly string[];
  readonly signal: AbortSignal;
}

/** What {@link ResourcesServer.restoreSessionStates} receives. */
export interface RestoreSessionStatesInput {
  /**
   * Every restored session's state, by session ID. When the server declares
   * `sessionStateSchema()`, each is that schema's parse output (unknown keys stripped, defaults
   * filled, as `parse` returns it), so the hook need not parse again; otherwise as stored.
   */
  readonly states: Readonly<Record<string, JsonValue>>;
  readonly signal: AbortSignal;
}

/** What {@link ResourcesServer.retireSessionState} receives. */
export interface RetireSessionStateInput {
  readonly sessionId: string;
  readonly signal: AbortSignal;
}

/** What a `/verify` implementation returns; the reply adds the request's fields and defaults. */
export interface VerifyResult {
  /** The reward. */
  readonly reward: number;
  /** @default false */
  readonly mask_sample?: boolean;
  /** @default null */
  readonly failure_kind?: string | null;
  /** @default null */
  readonly failure_reason?: string | null;
}

/** What a resources route handler receives: the data route input plus the request's session. */
export interface SessionRouteInput<Body = unknown> extends RouteInput<Body> {
  /** The request's session (replace its ID to key state by a caller-assigned one). */
  readonly session: ResourcesSession;
}

/**
 * What {@link ResourcesServer.seedSession} receives on server `S` (write `SeedInput<this>`):
 * the body as `S`'s {@link ResourcesServer.seedRequest} parsed it.
 */
export type SeedInput<S extends { readonly seedRequest: z.ZodType }> = SessionRouteInput<
  z.output<S["seedRequest"]>
>;

/** What {@link ResourcesServer.closeSession} receives: the validated `/close_session` body. */
export type CloseSessionInput = SessionRouteInput<ResourcesCloseSessionRequest>;

/**
 * What {@link ResourcesServer.verify} receives on server `S` (write `VerifyInput<this>`): the
 * body as `S`'s {@link ResourcesServer.verifyRequest} parsed it.
 *
 * @example
 * class Judge extends ResourcesServer {
 *   override readonly verifyRequest = z.looseObject({ answer: z.string() });
 *   protected override verify({ body }: VerifyInput<this>) {
 *     return { reward: body.answer === "42" ? 1 : 0 };
 *   }
 * }
 */
export type VerifyInput<S extends { readonly verifyRequest: z.ZodType<Record<string, unknown>> }> =
  SessionRouteInput<z.output<S["verifyRequest"]>>;

/**
 * What the session routes can answer besides 422: the checkpoint middleware's refusals (with
 * checkpointing on), and 502 when the handler's call to another server fails (a judge, a
 * sandbox service).
 */
const SESSION_ROUTE_ERRORS: readonly ErrorCode[] = [
  "rollout_id_required",
  "stale_attempt",
  "admission_closed",
  "upstream_unreachable",
  "upstream_error",
];

const HOOK_NAMES = ["exportSessionStates", "restoreSessionStates", "retireSessionState"] as const;

/**
 * The base class of resources servers: tools, a verifier and per-rollout session state. It
 * serves `/seed_session`, `/verify`, `/close_session` and the subclass's {@link tools}, keeps a
 * signed session cookie per client, and, with checkpointing on, takes part in checkpoints as
 * its class declares.
 *
 * ## Declarations (static fields, checked at construction whether or not checkpointing is on)
 * - `checkpointMode`: `restart_only` (default) | `stateless` | `exported`.
 * - `checkpointVerify`: `wait` (default) | `replay`.
 * - `checkpointSessionStarts`: routes that start a session. @default ["/seed_session"]
 *
 * ## Hooks (override; `exported` must override all three)
 * {@link exportSessionStates}, {@link restoreSessionStates}, {@link retireSessionState}.
 *
 * ## Request schemas (fields that type the routes' handlers)
 * {@link seedRequest} types {@link seedSession}'s body (`SeedInput<this>`), {@link verifyRequest}
 * types {@link verify}'s (`VerifyInput<this>`); each validates its route (422 naming the field)
 * and documents it.
 *
 * The session layer and the checkpoint middleware are installed before any `configureApp` of
 * yours runs; no override needs to call `super`.
 *
 * @example
 * class Echo extends ResourcesServer {
 *   static override checkpointMode = "stateless";
 *   override readonly verifyRequest = z.looseObject({ reward: z.number() });
 *   protected override verify({ body }: VerifyInput<this>) {
 *     return { reward: body.reward };
 *   }
 * }
 *
 * @see docs/resources-server.md
 */
export abstract class ResourcesServer<Config = unknown> extends Server<Config> {
  // The two declarations are typed `string`, not their unions: TypeScript does not type a
  // subclass's field initializer from the base, so `static override checkpointMode =
  // "exported"` infers `string`, which a union-typed base would refuse. Each value is checked
  // against its allowed values when the server is constructed (ConfigError naming them).
  /**
   * How this server's sessions take part in checkpoints: a {@link CheckpointMode}
   * (`restart_only`, `stateless` or `exported`), checked at construction.
   * @default "restart_only"
   */
  static checkpointMode: string = "restart_only";
  /**
   * Whether `/verify` may run again after a crash: a {@link CheckpointVerify} (`wait` or
   * `replay`), checked at construction. @default "wait"
   */
  static checkpointVerify: string = "wait";
  /** The routes that start a session. @default ["/seed_session"] */
  static checkpointSessionStarts: readonly string[] = [SEED_SESSION_PATH];

  /** The declared checkpoint mode, validated. */
  readonly checkpointMode: CheckpointMode;
  /** The declared verify mode, validated. */
  readonly checkpointVerify: CheckpointVerify;
  /** The routes that start a session, as declared. */
  readonly #sessionStarts: readonly string[];
  /** The class's name, which names its session cookie. */
  readonly #className: string;
  #participant: ResourcesParticipant | null = null;
  /** The MCP session tokens, when the server serves `/mcp` (read once, from the settings). */
  #mcpTokens: McpSessionTokens | null | undefined;

  constructor(options: ServerOptions) {
    super(options);
    const cls = new.target;
    this.#className = cls.name;
    this.#sessionStarts = cls.checkpointSessionStarts;
    this.checkpointMode = checkDeclaration(
      cls.name,
      "checkpointMode",
      cls.checkpointMode,
      CHECKPOINT_MODES,
    );
    this.checkpointVerify = checkDeclaration(
      cls.name,
      "checkpointVerify",
      cls.checkpointVerify,
      CHECKPOINT_VERIFY_MODES,
    );
    if (this.checkpointMode === "exported") {
      const missing = HOOK_NAMES.filter((hook) => this[hook] === ResourcesServer.prototype[hook]);
      if (missing.length > 0) {
        throw new ConfigError(
          `${cls.name} declares checkpointMode = "exported" but does not implement [${missing.join(", ")}]`,
        );
      }
    }
  }

  /** The participant, once the app is built with checkpointing on. */
  override get participant(): ResourcesParticipant | null {
    this.app();
    return this.#participant;
  }

  /**
   * Snapshots the named sessions at commit, by session ID as a `Map` or a plain object; leave
   * out a session no longer held. Session IDs are caller-chosen: the SDK reads only own keys,
   * so `constructor` or `__proto__` needs no prototype-free object (a `Map` holds any value
   * under `__proto__`; `{}` only an object one).
   */
  protected exportSessionStates(_input: ExportSessionStatesInput): Promise<BySession<JsonValue>> {
    return Promise.resolve(new Map());
  }

  /** Validates every state, then installs all (fresh process); throw to install nothing. */
  protected restoreSessionStates(_input: RestoreSessionStatesInput): Promise<void> {
    return Promise.resolve();
  }

  /** Frees one session's state on retire, in every mode; may run twice for one session. */
  protected retireSessionState(_input: RetireSessionStateInput): Promise<void> {
    return Promise.resolve();
  }

  /**
   * The subclass's tool routes. Each is documented under `/ng-rollout/{capture_key}/` as well
   * (how an episode calls it) unless it sets `rolloutPrefixed: false`.
   */
  protected tools(): readonly DataRoute[] {
    return [];
  }

  /**
   * The schema of one session's exported state (`exported` mode). When given, every restored
   * state is parsed by it before `restoreSessionStates` runs, which receives the parsed values:
   * a checkpoint holding a state that fails it is refused with 422 `invalid_checkpoint_state`
   * naming the episode, and nothing is restored. @default null (the hook checks states itself)
   */
  protected sessionStateSchema(): z.ZodType | null {
    return null;
  }

  /**
   * The body schema of `/seed_session`: it validates the seed (422 naming the field), documents
   * it, and its parse output is the body {@link seedSession} receives (`SeedInput<this>`).
   * @default any JSON value
   */
  readonly seedRequest: z.ZodType = AnySeedRequestSchema;

  /**
   * The body schema of `/verify`: narrow it to the fields your verifier reads, so a request
   * missing one is refused with 422 naming it; its parse output is the body {@link verify}
   * receives (`VerifyInput<this>`). Its `.meta({ example })` shows in Swagger UI.
   * @default any JSON object
   */
  readonly verifyRequest: z.ZodType<Record<string, unknown>> = VerifyRequestSchema;

  /**
   * Seeds a session. The default keeps no state and answers a native body with
   * `{resources_session_id, resources_tools: null, sandbox_access: null}`, anything else `{}`.
   */
  protected seedSession(input: SeedInput<this>): unknown {
    // The native fields as sent, whatever the declared seed schema parsed them into.
    const native = ResourcesSeedSessionRequestSchema.safeParse(input.req.body);
    if (!native.success) return {};
    return {
      resources_session_id: native.data.resources_session_id,
      resources_tools: null,
      sandbox_access: null,
    };
  }

  /** Verifies the episode of a session and returns its reward. */
  protected abstract verify(input: VerifyInput<this>): VerifyResult | Promise<VerifyResult>;

  /**
   * Aggregates the verify responses of many rollouts (`POST /aggregate_metrics`, what an
   * environment forwards). The default describes every numeric field per task and over all;
   * override it for metrics of your own.
   */
  protected aggregateMetrics(request: AggregateMetricsRequest): unknown {
    return aggregateMetrics(request);
  }

  /**
   * The tools a seeded session may call over MCP, named in its session token (`tools/list`
   * shows it only those); null: every tool. Read only when the server exposes its tools over
   * MCP. @default null
   */
  protected mcpAllowedTools(_input: SeedInput<this>): readonly string[] | null {
    return null;
  }

  /** Closes a session; succeed when already closed or never seeded. The default keeps no state. */
  protected closeSession(input: CloseSessionInput): unknown {
    return { resources_session_id: input.body.resources_session_id ?? null };
  }

  /**
   * Tells the participant a session ended on a route other than `/close_session` or `/verify`
   * (e.g. a terminal `/step`). No-op with checkpointing off.
   */
  protected checkpointSessionEnded(session: ResourcesSession): void {
    this.#participant?.sessionEnded(session.id);
  }

  protected override createParticipant(): ResourcesParticipant {
    const hooks: SessionHooks = {
      exportSessionStates: (input) => this.exportSessionStates(input),
      restoreSessionStates: (input) => this.restoreSessionStates(input),
      retireSessionState: (input) => this.retireSessionState(input),
    };
    this.#participant = new ResourcesParticipant({
      mode: this.checkpointMode,
      verify: this.checkpointVerify,
      sessionStarts: this.#sessionStarts,
      hooks,
      stateSchema: this.sessionStateSchema(),
      logger: this.logger,
      owner: this.workerRoutingId,
    });
    return this.#participant;
  }

  get #cookieName(): string {
    return `${this.#className}___${this.name}`;
  }

  /** {@link ResourcesConfigSchema}, unless {@link configSchema} declares an extension of it. */
  protected override baseConfigSchema(): z.ZodType<ResourcesConfig> {
    return ResourcesConfigSchema;
  }

  /** The MCP session tokens when `expose_tools_over_mcp` is on, else null. */
  get #mcp(): McpSessionTokens | null {
    if (this.#mcpTokens === undefined) {
      // A declared schema that does not extend ResourcesConfigSchema has no such setting.
      const settings = this.config as { readonly expose_tools_over_mcp?: unknown } | undefined;
      this.#mcpTokens =
        settings?.expose_tools_over_mcp === true
          ? new McpSessionTokens(this.sessionCookieKey(`${this.#cookieName}:${MCP_TOKEN_SALT}`))
          : null;
    }
    return this.#mcpTokens;
  }

  protected override installKindMiddleware(app: Express): void {
    const mcp = this.#mcp;
    app.use(
      sessionCookie({
        cookieName: this.#cookieName,
        key: this.sessionCookieKey(this.#cookieName),
        owner: this.workerRoutingId,
        namedSession:
          mcp === null
            ? undefined
            : (req) => (isMcpPath(req.path) ? (mcp.claimsOf(req)?.sessionId ?? null) : null),
      }),
    );
    if (this.#participant !== null) {
      app.use(resourcesCheckpointMiddleware(this.#participant, { mcpTokens: mcp }));
    }
  }

  /** A seed's reply with the session's MCP access added (when the server serves `/mcp`). */
  #withMcpAccess(reply: unknown, input: SeedInput<this>): unknown {
    const mcp = this.#mcp;
    if (mcp === null) return reply;
    const token = mcp.mint({
      // The session as the seed left it (it may have replaced the ID).
      sessionId: input.session.id,
      episode: this.checkpointEnabled ? (input.rollout?.episodeId ?? null) : null,
      tools: this.mcpAllowedTools(input),
      // The worker that seeded it holds it, as the session cookie says.
      owner: this.workerRoutingId,
    });
    return withMcpAccess(reply, mcpAccess(this.name, token));
  }

  /** `/mcp` and its tools, built from the tool routes (the names are checked here, at startup). */
  #mcpRoutes(): readonly DataRoute[] {
    const mcp = this.#mcp;
    if (mcp === null) return [];
    return mcpRoutes({
      serverName: this.name,
      version: this.apiInfo().version,
      tools: mcpTools([...this.tools(), ...this.extraRoutes()]),
      tokens: mcp,
      errors: SESSION_ROUTE_ERRORS,
      logger: this.logger,
    });
  }

  /**
   * The owner an MCP call's session token names (the token names the call's session), else the
   * session cookie's, else the `x-ng-session-owner` header's.
   */
  protected override sessionOwnerOf(req: IncomingMessage): string | null {
    return (
      this.#mcp?.ownerOf(req) ??
      sessionOwnerFromCookies(
        req.headers.cookie,
        this.#cookieName,
        this.sessionCookieKey(this.#cookieName),
      ) ??
      super.sessionOwnerOf(req)
    );
  }

  protected override routes(): readonly DataRoute[] {
    const withSession = <B>(input: RouteInput<B>): SessionRouteInput<B> => ({
      ...input,
      session: sessionOf(input.req),
    });
    // `this.seedRequest` and `this.verifyRequest` parse the bodies: the hooks' `this`-typed
    // inputs are their parse outputs, which the compiler cannot see through `this`.
    type Seed = z.output<this["seedRequest"]>;
    type Verified = z.output<this["verifyRequest"]>;
    return [
      dataRoute({
        method: "post",
        path: SEED_SESSION_PATH,
        summary: "Start a session",
        request: this.seedRequest,
        reply: documentedReply(ResourcesSeedSessionReplySchema),
        errors: SESSION_ROUTE_ERRORS,
        rolloutPrefixed: true,
        rolloutRequired: true,
        handler: async (input) => {
          const seed = withSession(input as RouteInput<Seed>);
          return this.#withMcpAccess(await this.seedSession(seed), seed);
        },
      }),
      dataRoute({
        method: "post",
        path: VERIFY_PATH,
        summary: "Verify a session's episode",
        request: this.verifyRequest,
        reply: VerifyReplySchema,
        errors: SESSION_ROUTE_ERRORS,
        rolloutPrefixed: true,
        rolloutRequired: true,
        handler: async (input) => {
          const result = await this.verify(withSession(input as RouteInput<Verified>));
          return {
            ...input.body,
            mask_sample: false,
            failure_kind: null,
            failure_reason: null,
            ...result,
          };
        },
      }),
      dataRoute({
        method: "post",
        path: CLOSE_SESSION_PATH,
        summary: "Close a session and free its state",
        request: ResourcesCloseSessionRequestSchema,
        reply: documentedReply(ResourcesCloseSessionReplySchema),
        errors: SESSION_ROUTE_ERRORS,
        rolloutPrefixed: true,
        rolloutRequired: true,
        handler: (input) => this.closeSession(withSession(input)),
      }),
      dataRoute({
        method: "post",
        path: AGGREGATE_METRICS_PATH,
        summary: "Aggregate verify responses (statistics per task and overall)",
        request: AggregateMetricsRequestSchema,
        reply: documentedReply(AggregateMetricsReplySchema),
        // Metrics of many rollouts at once: no episode, no session.
        rolloutPrefixed: false,
        handler: ({ body }) => this.aggregateMetrics(body),
      }),
      // A tool is called under the episode's `/ng-rollout/<capture key>/` prefix (a restored
      // session needs it): documented there too, unless the tool says otherwise. A tool that
      // starts a session is refused without the prefix, as `/seed_session` is.
      ...this.#mcpRoutes(),
      ...this.tools().map((tool) => {
        const prefixed = tool.rolloutPrefixed ?? true;
        return {
          ...tool,
          rolloutPrefixed: prefixed,
          rolloutRequired:
            tool.rolloutRequired ?? (prefixed && this.#sessionStarts.includes(tool.path)),
        };
      }),
    ];
  }
}

/** The session of a request to a resources server (for tool handlers). */
export function resourcesSession(input: RouteInput<unknown>): ResourcesSession {
  return sessionOf(input.req);
}
