/**
 * The base class of policy model servers: an OpenAI-compatible `/v1/responses` in front of an
 * inference backend speaking chat completions, with the policy gate, the capture ledger and
 * generation cuts when checkpointing is on.
 *
 * @see docs/policy-model.md
 * @module
 */
import { randomUUID } from "node:crypto";
import type { Request, RequestHandler, Response } from "express";
import { Agent, fetch } from "undici";
import { z } from "zod";
import { BURST_CONNECT_TIMEOUT_MS, IDLE } from "../client/server-client.js";
import { mixedClientTlsOptions } from "../client/tls.js";
import { CaptureAdmissionSchema, type CaptureAdmissionInput } from "../capture/admission.js";
import { assistantFingerprint, conversationDigest } from "../capture/fingerprints.js";
import { CaptureLedger } from "../capture/ledger/capture-ledger.js";
import { InvalidLedgerKeyError, RolloutRetiredError } from "../capture/ledger/errors.js";
import { CaptureError } from "../capture/capture-error.js";
import { CallRecordSchema, CommitCoordsSchema } from "../capture/records.js";
import { ConfigError, DetailError, EpisodeError, InvalidRequestError } from "../errors.js";
import type { EpisodeId } from "../identity/episode-id.js";
import type { Ticket } from "../participants/model/policy-gate.js";
import {
  PolicyParticipant,
  type PolicyLedgerHook,
} from "../participants/model/policy-participant.js";
import type { CutService } from "../participants/model/cut-service.js";
import type { CutClaim } from "../participants/model/restored-cuts.js";
import { ResponsesReplySchema } from "../wire/agent.js";
import { bearerAuth } from "./bearer-auth.js";
import { dataRoute, documentedReply, type DataRoute, type RouteInput } from "./data-route.js";
import { custodyRow, resolveLineage } from "./model/capture-lineage.js";
import { restartReason } from "./model/constrained-decoding.js";
import { CutRequester } from "./model/cut-round.js";
import {
  chatRequestOf,
  inputItems,
  outputItems,
  responseOf,
  type ChatCompletionLike,
} from "./model/responses-chat.js";
import { PolicyResponsesRequestSchema } from "./model/responses-request.js";
import { Server, type ServerOptions } from "./server.js";

/** The `config:` of a policy model server. */
export const PolicyModelConfigSchema = z
  .strictObject({
    /** The deployment server (usually `kind: backend`) whose chat completions generate. */
    backend_server: z.string().nullable().default(null),
    /** Or the backend's OpenAI base URL directly (e.g. `http://127.0.0.1:8000/v1`). */
    backend_url: z.string().nullable().default(null),
    /** The model name sent to the backend when the request names none. */
    model: z.string().min(1).default("policy"),
    /** This server is the policy participant (gate, ledger). @default true */
    checkpoint_policy: z.boolean().default(true),
    /** Cut undelivered generations at prepare. @default false */
    checkpoint_generation_cuts: z.boolean().default(false),
    /** Control root per backend base URL, for backends serving cuts elsewhere. */
    generation_cut_control_url: z.record(z.string(), z.string()).nullable().default(null),
    /** The capture ledger directory; null: token capture off. */
    capture_dir: z.string().min(1).nullable().default(null),
    /** Bearer token of the ledger control routes. @default $GYM_CAPTURE_CONTROL_TOKEN */
    capture_control_token: z.string().min(1).nullable().default(null),
  })
  .meta({ id: "PolicyModelConfig" });
/** The settings of a policy model server. */
export type PolicyModelConfig = z.infer<typeof PolicyModelConfigSchema>;

const LedgerBatchSchema = z
  .strictObject({ rollout_ids: z.array(z.string()).min(1).max(4096) })
  .meta({ id: "LedgerBatch" });

/** What a ledger retire or delete batch answers (the ledger's `LedgerRemoval`). */
const LedgerRemovalSchema = z
  .strictObject({
    removed: z
      .array(z.string())
      .readonly()
      .meta({ description: "Keys whose ledger was removed, in batch order." }),
    absent: z
      .array(z.string())
      .readonly()
      .meta({ description: "The batch's other keys, in batch order." }),
  })
  .meta({ id: "LedgerRemoval" });

/** The token-free capture manifest of one attempt (the ledger's `LedgerManifest`). */
const LedgerManifestSchema = z
  .strictObject({
    schema_version: z.literal(2),
    rollout_id: z.string().meta({ description: "The capture key the manifest describes." }),
    records: z.array(CallRecordSchema),
    failures: z.array(
      z.strictObject({
        schema_version: z.literal(2),
        model_call_id: z.string(),
        reason: z.string(),
      }),
    ),
  })
  .meta({ id: "LedgerManifest" });

/** What {@link PolicyModelServer.generate} receives. */
export interface GenerateInput {
  /** The chat completions body (with `ng_capture` when the call is captured). */
  readonly body: Record<string, unknown>;
  readonly signal: AbortSignal;
}

/** A worker's stand-in cut service: its participant replaces it by its coordinator's round. */
const NO_CUTS: CutService = { cut: async () => new Map() };

/** The prefix of the ledger control routes. */
export const LEDGER_CONTROL_PREFIX = "/training-token-capture/control";

/**
 * A policy model server: `POST /v1/responses` (JSON or `stream: true` server-sent events)
 * answered by the configured backend's chat completions. With checkpointing on and
 * `checkpoint_policy`, every generation passes the policy gate; with `capture_dir`, every
 * call under a rollout prefix is captured (its worker stages the tokens; the ledger records
 * where); with `checkpoint_generation_cuts`, prepare cuts undelivered generations.
 *
 * Subclasses may override {@link generate} to reach a backend that does not speak chat
 * completions.
 *
 * @example
 * // Most deployments serve the class as it is, configured by the deployment file:
 * export default class PolicyModel extends PolicyModelServer {}
 * if (isMainModule(import.meta.url)) await serveMain(PolicyModel);
 *
 * // A backend that does not speak chat completions: answer one in generate().
 * class CannedModel extends PolicyModelServer {
 *   protected override async generate({ body }: GenerateInput) {
 *     const model = typeof body.model === "string" ? body.model : "canned";
 *     const message = { role: "assistant", content: "42" };
 *     return { id: "c-1", model, choices: [{ index: 0, message, finish_reason: "stop" }] };
 *   }
 * }
 *
 * @see docs/policy-model.md
 */
export class PolicyModelServer<
  Config extends PolicyModelConfig = PolicyModelConfig,
> extends Server<Config> {
  #participant: PolicyParticipant | null = null;
  #ledger: CaptureLedger | null = null;
  #cuts: CutRequester | null = null;
  #checkpointId = "";
  /**
   * The backend's pool: generations can take long, and many start at once (thousands of held
   * calls open as many connections, which one backend process accepts only so fast).
   */
  readonly #backend = new Agent({
    ...IDLE,
    // A backend_server of a deployment with tls: serves HTTPS with the deployment's certificate.
    connect: { timeout: BURST_CONNECT_TIMEOUT_MS, ...mixedClientTlsOptions(this.deployment.tls) },
    headersTimeout: 0,
    bodyTimeout: 0,
  });

  constructor(options: ServerOptions) {
    super(options);
  }

  /** {@link PolicyModelConfigSchema}, unless {@link configSchema} declares an extension of it. */
  protected override baseConfigSchema(): z.ZodType<PolicyModelConfig> {
    return PolicyModelConfigSchema;
  }

  /** The policy participant, once the app is built with checkpointing on. */
  override get participant(): PolicyParticipant | null {
    this.app();
    return this.#participant;
  }

  /** The capture ledger, or null when token capture is off. */
  get ledger(): CaptureLedger | null {
    this.app();
    return this.#ledger;
  }

  /** The backend's OpenAI base URL. */
  protected backendUrl(): string {
    const config = this.config;
    if (config.backend_url !== null) return config.backend_url.replace(/\/+$/, "");
    if (config.backend_server !== null) {
      const servers = this.deployment.servers;
      const server = Object.hasOwn(servers, config.backend_server)
        ? servers[config.backend_server]
        : undefined;
      if (server === undefined) {
        throw new ConfigError(
          `server ${this.name}: backend_server ${config.backend_server} is not in the deployment`,
        );
      }
      return `${server.url.replace(/\/+$/, "")}/v1`;
    }
    throw new ConfigError(`server ${this.name}: set backend_server or backend_url`);
  }

  protected override createParticipant(): PolicyParticipant | null {
    const config = this.config;
    const ledgerAt = (hook: PolicyLedgerHook | null): CaptureLedger | null =>
      config.capture_dir === null
        ? null
        : new CaptureLedger(config.capture_dir, {
            logger: this.logger,
            beforeUse: hook?.beforeUse,
            // A worker's coordinator owns the restore's fence lists (see docs/workers.md).
            recoverFenceLists: hook === null,
          });
    if (!config.checkpoint_policy) {
      this.#ledger = ledgerAt(null);
      return null;
    }
    // A worker of several: its coordinator owns what the workers share (see docs/workers.md).
    const worker = this.workerLink?.policyWorker(this.logger) ?? null;
    if (config.checkpoint_generation_cuts && worker === null) {
      this.#cuts = new CutRequester({
        serverName: this.name,
        token: this.checkpointSettings.control_auth_token ?? "",
        checkpointId: () => this.#checkpointId,
        controlUrls: config.generation_cut_control_url,
        logger: this.logger,
        tls: mixedClientTlsOptions(this.deployment.tls),
      });
    }
    const participant = new PolicyParticipant({
      ledger: null,
      cuts: config.checkpoint_generation_cuts ? (this.#cuts ?? NO_CUTS) : null,
      onCheckpoint: (id) => {
        this.#checkpointId = id;
      },
      worker,
    });
    this.#ledger = ledgerAt(participant.ledgerHook);
    participant.attachLedger(this.#ledger);
    this.#participant = participant;
    return participant;
  }

  protected override routes(): readonly DataRoute[] {
    const routes: DataRoute[] = [
      dataRoute({
        method: "post",
        path: "/v1/responses",
        summary: "Create a response (OpenAI Responses API)",
        description:
          "Also served under /ng-rollout/{capture_key}/ and /ng-rollout/{capture_key}/training-token-capture/. " +
          "With checkpointing on, a call waits while a checkpoint is open and its response is held until resume. " +
          'A failing or unreachable inference backend is 502 with {"detail": "..."}. ' +
          "With `stream: true` (uncaptured calls only) the reply is server-sent events instead.",
        request: PolicyResponsesRequestSchema,
        reply: documentedReply(ResponsesReplySchema),
        errors: ["invalid_rollout_id", "stale_attempt"],
        rolloutPrefixed: true,
        tag: "model",
        handler: (input) => this.#responses(input),
      }),
    ];
    return [...routes, ...this.#ledgerRoutes()];
  }

  /**
   * Generates one chat completion on the backend; `body` carries `ng_capture` when the call
   * is captured, and the reply's `ng_commit_coords` say where the worker staged its tokens.
   */
  protected async generate(
    input: GenerateInput,
  ): Promise<ChatCompletionLike & { ng_commit_coords?: unknown }> {
    const url = new URL(`${this.backendUrl()}/chat/completions`);
    const response = await this.#backendFetch(url, JSON.stringify(input.body), input.signal);
    const text = await backendStep(url, input.signal, () => response.text());
    if (!response.ok) {
      throw new BackendError(response.status, text.slice(0, 500));
    }
    try {
      return JSON.parse(text) as ChatCompletionLike & { ng_commit_coords?: unknown };
    } catch {
      throw new BackendError(response.status, `a body that is not JSON: ${text.slice(0, 200)}`);
    }
  }

  async #responses(
    input: RouteInput<z.infer<typeof PolicyResponsesRequestSchema>>,
  ): Promise<unknown> {
    const { body, req, res, signal } = input;
    const rollout = input.rollout;
    const episode: EpisodeId | null = rollout?.episodeId ?? null;
    const participant = this.#participant;
    const captured = this.#ledger !== null && rollout !== null;
    if (body.stream === true && captured) {
      throw new DetailError(422, "worker-owned token capture does not support streaming requests");
    }
    const items = inputItems(body.input);
    const chat = chatRequestOf(body, this.config.model);
    delete chat.stream;
    // Checked before admission: a request that cannot be answered or captured never waits.
    refuseWithoutMessages(chat);
    const requestDigest = captured ? captureDigestOf(items) : "";
    const ticket = participant === null ? null : await participant.gate.admit(episode, signal);
    let claim: CutClaim | null = null;
    try {
      const callSignal = ticket?.signal ?? signal;
      if (ticket !== null) ticket.restartReason = restartReason(body);
      let admission: CaptureAdmissionInput | null = null;
      let unresolved: string | null = null;
      const modelCallId = `call_${randomUUID().replaceAll("-", "")}`;
      if (captured) {
        const key = rollout.captureKey;
        const lineage = resolveLineage(key, modelCallId, items, await this.#ledgerRows(key));
        if (lineage.kind === "unresolved") {
          // Like a row, the failure is published only once the response starts.
          unresolved = lineage.reason;
        } else {
          admission = lineage.admission;
          if (ticket !== null) {
            ticket.capture = { modelCallId, requestItems: items };
            if (ticket.restartReason === null && participant !== null) {
              claim = await participant.claimCut(key, requestDigest, modelCallId);
              if (claim !== null) {
                admission = { ...admission, generation_cut: claim.record.continuation };
              }
            }
          }
          chat.ng_capture = CaptureAdmissionSchema.parse(admission);
        }
      }
      if (ticket !== null) ticket.backend = this.backendUrl();
      if (body.stream === true && !captured) {
        return await this.#stream(chat, ticket, req, res, callSignal);
      }
      const completion = await this.generate({ body: chat, signal: callSignal });
      const response = responseOf(completion, this.config.model);
      const row =
        unresolved !== null
          ? { failure: unresolved }
          : admission === null
            ? null
            : this.#rowOf(
                admission,
                completion.ng_commit_coords,
                items,
                requestDigest,
                response,
                ticket,
              );
      if (ticket !== null && participant !== null) await participant.gate.deliver(ticket, signal);
      if (row !== null && rollout !== null) {
        await this.#publish(rollout.captureKey, modelCallId, row);
      }
      return response;
    } catch (error) {
      if (
        ticket !== null &&
        ticket.signal.aborted &&
        ticket.signal.reason instanceof EpisodeError
      ) {
        throw ticket.signal.reason;
      }
      throw error;
    } finally {
      if (claim !== null && participant !== null) {
        participant.settleCut(claim, ticket?.responseStarted ?? false);
      }
      if (ticket !== null) participant?.gate.exit(ticket);
    }
  }

  /** The custody row (or failure) a captured call leaves, published when its response starts. */
  #rowOf(
    admission: CaptureAdmissionInput,
    rawCoords: unknown,
    items: readonly unknown[],
    requestDigest: string,
    response: Record<string, unknown>,
    ticket: Ticket | null,
  ): { readonly failure: string } | { readonly row: Record<string, unknown> } {
    if (rawCoords === undefined || rawCoords === null) {
      return { failure: "worker_response_missing_commit_coordinates" };
    }
    const coords = CommitCoordsSchema.safeParse(rawCoords);
    if (!coords.success) return { failure: "invalid_worker_commit_coordinates" };
    if (coords.data.disposition !== "staged") return { failure: "worker_capture_failed" };
    return {
      row: custodyRow({
        coords: coords.data,
        admission,
        requestItems: items,
        contextDigest: requestDigest,
        outputItems: outputItems(response),
        responseId: String(response.id),
        admittedAt: ticket?.admittedAt ?? Date.now() / 1000,
      }),
    };
  }

  /**
   * Writes a delivered call's row; not cut short by a cancellation. A failed write poisons the
   * call: no answer is sent.
   */
  async #publish(
    key: string,
    modelCallId: string,
    outcome: { readonly failure: string } | { readonly row: Record<string, unknown> },
  ): Promise<void> {
    const ledger = this.#ledger;
    if (ledger === null) return;
    try {
      if ("row" in outcome) {
        await ledger.record(key, outcome.row as { model_call_id: string });
      } else {
        await ledger.recordFailure(key, modelCallId, outcome.failure);
      }
    } catch (error) {
      this.logger.error({ err: error, key }, "capture ledger write failed; the call is poisoned");
      throw error;
    }
  }

  async #ledgerRows(key: string) {
    try {
      return await (this.#ledger as CaptureLedger).rows(key);
    } catch (error) {
      if (error instanceof RolloutRetiredError) return [];
      throw error;
    }
  }

  /** POSTs `body` to the backend over its pool; not reaching it is a {@link BackendUnreachableError}. */
  async #backendFetch(url: URL, body: string, signal: AbortSignal): Promise<globalThis.Response> {
    return await backendStep(url, signal, () =>
      fetch(url, {
        dispatcher: this.#backend,
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
        signal,
      }),
    );
  }

  async #stream(
    chat: Record<string, unknown>,
    ticket: Ticket | null,
    _req: Request,
    res: Response,
    signal: AbortSignal,
  ): Promise<undefined> {
    const url = new URL(`${this.backendUrl()}/chat/completions`);
    const upstream = await this.#backendFetch(
      url,
      JSON.stringify({ ...chat, stream: true }),
      signal,
    );
    if (!upstream.ok || upstream.body === null) {
      const body = await backendStep(url, signal, () => upstream.text());
      throw new BackendError(upstream.status, body.slice(0, 500));
    }
    const responseId = `resp_${randomUUID().replaceAll("-", "")}`;
    let text = "";
    const calls: { id: string; name: string; arguments: string }[] = [];
    let started = false;
    const decoder = new TextDecoder();
    let buffer = "";
    const start = async (): Promise<void> => {
      if (started) return;
      // The first answer data: held while a checkpoint is open, then it starts the response.
      if (ticket !== null && this.#participant !== null) {
        await this.#participant.gate.deliver(ticket, signal);
      }
      started = true;
      res.status(200);
      res.setHeader("content-type", "text/event-stream");
      res.setHeader("cache-control", "no-cache");
      res.write(
        sse("response.created", {
          type: "response.created",
          response: { id: responseId, object: "response", status: "in_progress", output: [] },
        }),
      );
    };
    for await (const chunk of upstream.body) {
      buffer += decoder.decode(chunk as Uint8Array, { stream: true });
      for (;;) {
        const end = buffer.indexOf("\n\n");
        if (end < 0) break;
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = frame
          .split("\n")
          .filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).trim())
          .join("\n");
        // Keep-alive comments and empty frames carry no answer: they start nothing.
        if (data.length === 0 || data === "[DONE]") continue;
        const chunk = JSON.parse(data) as {
          choices?: {
            delta?: {
              content?: unknown;
              tool_calls?: {
                index?: number;
                id?: string;
                function?: { name?: string; arguments?: string };
              }[];
            };
          }[];
        };
        const delta = chunk.choices?.[0]?.delta;
        const content = typeof delta?.content === "string" ? delta.content : "";
        const toolDeltas = delta?.tool_calls ?? [];
        // Only answer data starts a response: role-only and empty deltas do not.
        if (content.length === 0 && toolDeltas.length === 0) continue;
        await start();
        if (content.length > 0) {
          text += content;
          res.write(
            sse("response.output_text.delta", {
              type: "response.output_text.delta",
              delta: content,
            }),
          );
        }
        for (const part of toolDeltas) {
          const index = part.index ?? 0;
          const call = (calls[index] ??= { id: "", name: "", arguments: "" });
          if (part.id !== undefined) call.id = part.id;
          if (part.function?.name !== undefined) call.name += part.function.name;
          if (part.function?.arguments !== undefined) {
            call.arguments += part.function.arguments;
            res.write(
              sse("response.function_call_arguments.delta", {
                type: "response.function_call_arguments.delta",
                output_index: index,
                delta: part.function.arguments,
              }),
            );
          }
        }
      }
    }
    await start();
    const toolCalls = calls
      .filter((call) => call !== undefined)
      .map((call) => ({ id: call.id, function: { name: call.name, arguments: call.arguments } }));
    const response = responseOf(
      {
        id: responseId.slice(5),
        choices: [
          {
            message: { content: text, ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}) },
            finish_reason: toolCalls.length > 0 ? "tool_calls" : "stop",
          },
        ],
      },
      this.config.model,
    );
    res.write(sse("response.completed", { type: "response.completed", response }));
    res.end();
    return undefined;
  }

  #ledgerRoutes(): DataRoute[] {
    // The bearer check runs before the body is read, in constant time, like the control routes';
    // its refusal keeps the ledger routes' `{"detail"}` shape.
    const refuse = (): Error =>
      new DetailError(401, "missing or wrong capture control bearer token");
    const token = this.config.capture_control_token ?? process.env.GYM_CAPTURE_CONTROL_TOKEN;
    const auth: RequestHandler =
      token === undefined || token.trim() === ""
        ? (_req, _res, next) => next(refuse())
        : bearerAuth(token, { refuse });
    const guard = (): CaptureLedger => {
      const ledger = this.#ledger;
      if (ledger === null) throw new DetailError(404, "this model server has no capture ledger");
      return ledger;
    };
    const refuseDuringCheckpoint = (): void => {
      if (this.#participant !== null && !this.#participant.gate.accepting) {
        throw new DetailError(
          409,
          "a checkpoint is open on this model server; retry the ledger operation after it resumes",
        );
      }
    };
    const batch = (op: "retire" | "delete") =>
      dataRoute({
        method: "post",
        path: `${LEDGER_CONTROL_PREFIX}/rollouts/${op}`,
        summary: op === "retire" ? "Retire capture ledgers (fenced)" : "Delete capture ledgers",
        request: LedgerBatchSchema,
        reply: LedgerRemovalSchema,
        before: [auth],
        tag: "capture",
        handler: async ({ body }) => {
          const ledger = guard();
          refuseDuringCheckpoint();
          try {
            return op === "retire"
              ? await ledger.retire(body.rollout_ids)
              : await ledger.delete(body.rollout_ids);
          } catch (error) {
            if (error instanceof InvalidLedgerKeyError) throw new DetailError(400, error.message);
            throw error;
          }
        },
      });
    return [
      dataRoute({
        method: "get",
        path: `${LEDGER_CONTROL_PREFIX}/rollouts/:rollout_id/manifest`,
        summary: "The capture manifest of one attempt",
        // Its records are CallRecord-shaped rows, not parsed here: documented, not typed.
        reply: documentedReply(LedgerManifestSchema),
        before: [auth],
        tag: "capture",
        handler: async ({ req }) => {
          const ledger = guard();
          const key = String(req.params.rollout_id);
          try {
            const manifest = await ledger.manifest(key);
            return manifest;
          } catch (error) {
            if (error instanceof RolloutRetiredError) throw new DetailError(410, error.message);
            if (error instanceof InvalidLedgerKeyError) throw new DetailError(400, error.message);
            throw error;
          }
        },
      }),
      batch("retire"),
      batch("delete"),
    ];
  }

  override async close(): Promise<void> {
    await this.#cuts?.close();
    await super.close();
    await this.#backend.destroy();
    // Ledger files a restore deferred are written before the process goes, for the servers
    // sharing the directory (a crash loses them, and the next restore writes them again).
    try {
      await this.#ledger?.settleDeferred();
    } catch (error) {
      this.logger.warn({ err: error }, "could not write the ledgers a restore deferred");
    }
  }
}

/**
 * The conversation digest of a captured call's input items, computed before anything reaches the
 * backend: items the lineage fingerprints cannot read (tool arguments whose JSON decodes to a lone
 * surrogate, say) are the caller's fault, so they are 422 `invalid_request` naming `input`, not a
 * failure after the generation. The assistant fingerprint the custody row takes is tried too: it
 * reads items the digest skips (a `function_call` with an instruction role).
 */
function captureDigestOf(items: readonly unknown[]): string {
  try {
    assistantFingerprint(items);
    return conversationDigest(items);
  } catch (error) {
    if (!(error instanceof CaptureError)) throw error;
    const detail = `input cannot be captured: ${error.message}`;
    throw new InvalidRequestError(detail, [{ path: ["input"], message: error.message }]);
  }
}

/** Refuses a request none of whose items a chat backend takes (only reasoning items, say). */
function refuseWithoutMessages(chat: Record<string, unknown>): void {
  if (Array.isArray(chat.messages) && chat.messages.length > 0) return;
  const message =
    "input holds no message, function_call or function_call_output item for the model to answer";
  throw new InvalidRequestError(message, [{ path: ["input"], message }]);
}

/**
 * The inference backend failed a call: it answered an error status or a body that is not a
 * chat completion. Answered as 502 with `{"detail": ...}`: the fault is upstream of this server.
 */
export class BackendError extends DetailError {
  override name = "BackendError";
  constructor(
    /** The backend's HTTP status (200 when its body was the problem). */
    readonly backendStatus: number,
    /** The start of the backend's body. */
    readonly body: string,
  ) {
    super(502, `the inference backend answered ${backendStatus}: ${body}`);
  }
}

/**
 * The inference backend could not be reached, or its connection failed before its answer was
 * read. Answered as 502 with `{"detail": ...}`, like {@link BackendError}: the fault is upstream.
 */
export class BackendUnreachableError extends DetailError {
  override name = "BackendUnreachableError";
  constructor(url: URL, reason: string) {
    super(502, `the inference backend at ${url.origin} is unreachable: ${reason}`);
  }
}

/**
 * Runs one step of a backend call; a failure that is not our own cancellation (`signal`) is
 * the backend's: a {@link BackendUnreachableError} naming the network error.
 */
async function backendStep<T>(url: URL, signal: AbortSignal, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    if (signal.aborted) throw error;
    throw new BackendUnreachableError(url, networkReason(error));
  }
}

/** The most specific words of a fetch failure: undici puts the socket error in `cause`. */
function networkReason(error: unknown): string {
  const cause = (error as { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const code = (cause as NodeJS.ErrnoException).code;
    return code !== undefined && !cause.message.includes(code)
      ? `${code} ${cause.message}`
      : cause.message;
  }
  return error instanceof Error ? error.message : String(error);
}

function sse(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}
