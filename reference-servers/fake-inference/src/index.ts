/**
 * The fake inference backend: a deterministic OpenAI chat completions server with worker-owned
 * token capture and generation cuts, for tests of policy model servers and whole deployments. It
 * runs as `kind: backend` (never a checkpoint participant), and its token store lives on disk, so
 * it survives a crash of every other server. See README.md.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { Express, RequestHandler } from "express";
import {
  Server,
  UnauthorizedError,
  dataRoute,
  isMainModule,
  serveMain,
  type DataRoute,
  type ServerOptions,
} from "gym-participant-sdk";
import { z } from "zod";
import { CallEntrySchema, CallLog } from "./call-log.js";
import { completeChat, type CompletionDeps } from "./completions.js";
import { GenerationCutter } from "./generation-cuts.js";
import { HoldGate, HoldRequestSchema } from "./holds.js";
import { LiveCalls } from "./live-calls.js";
import { ScriptSchema, TurnScript } from "./script.js";
import {
  GENERATION_CUT_ROUTE,
  GenerationCutInventorySchema,
  GenerationCutReceiptSchema,
  generationCutInventoryFromWire,
  RolloutTokenCapture,
} from "./sdk-capture.js";
import { TokenStore } from "./token-store.js";
import { ChatCompletionReplySchema, ChatCompletionRequestSchema } from "./wire.js";

export { ROLLOUT_HEADER } from "./completions.js";
export { cutStagingKey } from "./generation-cuts.js";
export { stagedFilePath } from "./token-store.js";
export { renderMessage, renderPrompt } from "./chat-template.js";
export { pieceId, tokenize } from "./tokenizer.js";
export type { CallEntry } from "./call-log.js";
export { HoldRequestSchema, ScriptSchema };

/** The `config:` of the fake inference backend. */
export const FakeInferenceConfigSchema = z
  .strictObject({
    /** The directory of the durable token store (created when missing). */
    token_store_dir: z.string().min(1),
    /**
     * Bearer token of `POST /ng-control/v1/generation-cut`. @default the deployment's
     * `checkpoint.control_auth_token`, else `$GYM_CONTROL_TOKEN`; with neither, every cut
     * request is refused.
     */
    control_token: z.string().min(1).nullable().default(null),
    /** The policy (weight) version stamped on every staged record. @default 0 */
    weight_version: z.int().min(0).default(0),
  })
  .meta({ id: "FakeInferenceConfig" });
/** The settings of the fake inference backend. */
export type FakeInferenceConfig = z.infer<typeof FakeInferenceConfigSchema>;

const OkSchema = z.strictObject({ ok: z.literal(true) });

function digest(value: string): Buffer {
  return createHash("sha256").update(value, "utf8").digest();
}

/** Refuses a request without `Authorization: Bearer <token>` (compared in constant time). */
function bearer(token: string | null): RequestHandler {
  const expected = token === null ? null : digest(`Bearer ${token}`);
  return (req, _res, next) => {
    const header = req.headers.authorization;
    const ok =
      expected !== null && typeof header === "string" && timingSafeEqual(digest(header), expected);
    next(ok ? undefined : new UnauthorizedError());
  };
}

/** What the server builds from its settings, once. */
interface Runtime {
  readonly completions: CompletionDeps;
  readonly cutter: GenerationCutter;
}

/**
 * The fake inference backend.
 *
 * Routes: `POST /v1/chat/completions` (also under `/ng-rollout/<capture key>/`),
 * `POST /ng-control/v1/generation-cut` (bearer), and the test controls under `/_ctl/`: `hold`,
 * `release`, `script`, `call_count`, `calls`, `cuts`.
 *
 * @example
 * const backend = new FakeInferenceServer({
 *   name: "inference",
 *   config: { token_store_dir: "/tmp/tokens", control_token: "t" },
 * });
 * const { url } = await backend.listen({ port: 0 });
 */
export default class FakeInferenceServer extends Server<FakeInferenceConfig> {
  /** The scripted turn policy (`POST /_ctl/script`). */
  readonly script = new TurnScript();
  /** The hold rule and its release event (`POST /_ctl/hold`, `POST /_ctl/release`). */
  readonly holds = new HoldGate();
  /** Every call and every cut round (`GET /_ctl/calls`, `GET /_ctl/cuts`). */
  readonly calls = new CallLog();
  readonly #live = new LiveCalls();
  #runtime: Runtime | null = null;

  constructor(options: ServerOptions) {
    super(options);
  }

  protected override configSchema(): z.ZodType<FakeInferenceConfig> {
    return FakeInferenceConfigSchema;
  }

  /** The validated settings. */
  get settings(): FakeInferenceConfig {
    return this.config;
  }

  /** The bearer token of the cut route, or null when none is configured. */
  get controlToken(): string | null {
    return (
      this.settings.control_token ??
      this.checkpointSettings.control_auth_token ??
      this.deployment.checkpoint?.control_auth_token ??
      (process.env.GYM_CONTROL_TOKEN || null)
    );
  }

  /** The durable token store. */
  get tokenStore(): TokenStore {
    return this.#build().completions.store;
  }

  #build(): Runtime {
    if (this.#runtime !== null) return this.#runtime;
    const { token_store_dir: dir, weight_version: weightVersion } = this.settings;
    const store = new TokenStore(dir);
    const capture = new RolloutTokenCapture({
      sink: store,
      weightVersion: () => weightVersion,
      logger: this.logger,
    });
    const shared = { live: this.#live, capture, store, log: this.calls, weightVersion };
    this.#runtime = {
      completions: { ...shared, script: this.script, holds: this.holds },
      cutter: new GenerationCutter({ ...shared, logger: this.logger, backendName: this.name }),
    };
    return this.#runtime;
  }

  protected override configureApp(app: Express): void {
    // Before the route's body parser: an unauthenticated caller learns nothing about its body.
    app.use(GENERATION_CUT_ROUTE, bearer(this.controlToken));
  }

  protected override routes(): readonly DataRoute[] {
    return [
      dataRoute({
        method: "post",
        path: "/v1/chat/completions",
        summary: "Create a chat completion from the script (OpenAI chat completions)",
        description:
          "Body key `ng_capture` (a CaptureAdmission) captures the call's tokens; the reply then " +
          "carries `ng_commit_coords`. `stream: true` answers server-sent events (uncaptured only).",
        request: ChatCompletionRequestSchema,
        reply: ChatCompletionReplySchema,
        rolloutPrefixed: true,
        tag: "inference",
        handler: (input) => completeChat(this.#build().completions, input),
      }),
      dataRoute({
        method: "post",
        path: GENERATION_CUT_ROUTE,
        summary: "Stage the generated prefix of each call in flight (generation cut)",
        request: GenerationCutInventorySchema,
        // A round's inventory lists every call in flight: checked by hand, the schema as fallback.
        parse: generationCutInventoryFromWire,
        reply: GenerationCutReceiptSchema,
        errors: ["unauthorized"],
        tag: "inference",
        handler: ({ body }) => this.#build().cutter.cut(body),
      }),
      dataRoute({
        method: "post",
        path: "/_ctl/hold",
        summary: "Hold matching calls part-way through their generation",
        request: HoldRequestSchema,
        reply: OkSchema,
        tag: "test-control",
        handler: ({ body }) => {
          this.holds.place(body);
          return { ok: true } as const;
        },
      }),
      dataRoute({
        method: "post",
        path: "/_ctl/release",
        summary: "Lift the hold and free every held call",
        reply: z.strictObject({ released: z.int() }),
        tag: "test-control",
        handler: () => ({ released: this.holds.release() }),
      }),
      dataRoute({
        method: "post",
        path: "/_ctl/script",
        summary: "Replace the turn script",
        request: ScriptSchema,
        reply: OkSchema,
        tag: "test-control",
        handler: ({ body }) => {
          this.script.set(body);
          return { ok: true } as const;
        },
      }),
      dataRoute({
        method: "get",
        path: "/_ctl/call_count",
        summary: "How many calls arrived",
        reply: z.strictObject({ count: z.int() }),
        tag: "test-control",
        handler: () => ({ count: this.calls.count }),
      }),
      dataRoute({
        method: "get",
        path: "/_ctl/calls",
        summary: "Every call, logged on arrival",
        reply: z.strictObject({ calls: z.array(CallEntrySchema) }),
        tag: "test-control",
        handler: () => ({ calls: this.calls.calls() }),
      }),
      dataRoute({
        method: "get",
        path: "/_ctl/cuts",
        summary: "The model call IDs each cut round cut",
        reply: z.strictObject({ cuts: z.array(z.array(z.string())) }),
        tag: "test-control",
        handler: () => ({ cuts: this.calls.cutRounds() }),
      }),
    ];
  }
}

if (isMainModule(import.meta.url)) await serveMain(FakeInferenceServer);
