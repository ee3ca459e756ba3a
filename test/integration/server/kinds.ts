/**
 * One server of every kind, checkpointing on, for the HTTP-layer hardening tests; and a raw
 * HTTP sender that sets exactly the headers and bytes a test asks for (supertest would fix up
 * `Content-Length` and the content type).
 */
import {
  request as httpRequest,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
} from "node:http";
import { z } from "zod";
import { Participant } from "#sdk/control/participant.js";
import type { EpisodeId } from "#sdk/identity/episode-id.js";
import { dataRoute, type DataRoute } from "#sdk/server/data-route.js";
import { EnvironmentServer } from "#sdk/server/environment-server.js";
import { PolicyModelServer } from "#sdk/server/policy-model-server.js";
import { ResourcesServer, type VerifyResult } from "#sdk/server/resources-server.js";
import { Server, type ServerOptions } from "#sdk/server/server.js";
import { prepareReport, type PrepareReport } from "#sdk/wire/control.js";
import { recordSchema } from "#sdk/wire/storage.js";
import { RestartOnlyAgent, ScriptedAgent } from "../../support/agent-harness.js";

export const TOKEN = "hardening-token";
export const AUTH = `Bearer ${TOKEN}`;
export const CHECKPOINT = { enabled: true, control_auth_token: TOKEN } as const;
const quiet = { logLevel: "silent", shutdownGraceMs: 50 } as const;

class IdleParticipant extends Participant {
  readonly kind = "resources" as const;
  readonly recordSchema = recordSchema({});
  closeAdmission(): void {}
  openAdmission(): void {}
  readiness(): PrepareReport {
    return prepareReport({ ready: true });
  }
  async retire(_episode: EpisodeId): Promise<void> {}
  async export(): Promise<[]> {
    return [];
  }
  async install(): Promise<void> {}
}

/** A plain server: an echo of any JSON, a route without a body schema, and a GET. */
export class PlainServer extends Server {
  constructor(options: ServerOptions) {
    super({ ...quiet, ...options });
  }
  protected override createParticipant(): Participant {
    return new IdleParticipant();
  }
  protected override routes(): readonly DataRoute[] {
    return [
      dataRoute({
        method: "post",
        path: "/echo",
        summary: "Echo any JSON body",
        request: z.unknown(),
        rolloutPrefixed: true,
        handler: ({ body }) => ({ echo: body }),
      }),
      dataRoute({
        method: "post",
        path: "/no-schema",
        summary: "A route without a body schema",
        handler: () => ({ ok: true }),
      }),
      dataRoute({
        method: "get",
        path: "/thing",
        summary: "A GET route",
        handler: () => ({ ok: true }),
      }),
    ];
  }
}

/** A stateless resources server whose `/verify` echoes its body (the base class does). */
export class EchoResources extends ResourcesServer {
  static override checkpointMode = "stateless" as const;
  constructor(options: ServerOptions) {
    super({ ...quiet, ...options });
  }
  protected override verify(): VerifyResult {
    return { reward: 1 };
  }
}

/** An environment server whose episodes succeed at once. */
export class QuickEnvironment extends EnvironmentServer {
  constructor(options: ServerOptions) {
    super({ ...quiet, config: { cleanup_timeout_seconds: 5 }, ...options });
  }
  protected override async runEpisode() {
    return { result: { ok: true } };
  }
}

/** A policy model server in front of a backend nobody listens on, without a capture ledger. */
export function policyServer(name: string): PolicyModelServer {
  return new PolicyModelServer({
    name,
    checkpoint: CHECKPOINT,
    ...quiet,
    // One bearer token for control and ledger routes: the tests send one Authorization.
    config: {
      backend_url: "http://127.0.0.1:9/v1",
      capture_dir: null,
      capture_control_token: TOKEN,
    },
  });
}

/** One server of each kind, checkpointing on (the plain server also without it). */
export function everyKind(): { kind: string; server: Server }[] {
  return [
    { kind: "plain", server: new PlainServer({ name: "plain", checkpoint: CHECKPOINT }) },
    { kind: "plain, checkpointing off", server: new PlainServer({ name: "plain-off" }) },
    { kind: "resources", server: new EchoResources({ name: "resources", checkpoint: CHECKPOINT }) },
    { kind: "session agent", server: new ScriptedAgent({ name: "agent", checkpoint: CHECKPOINT }) },
    {
      kind: "restart-only agent",
      server: new RestartOnlyAgent({ name: "agent-ro", checkpoint: CHECKPOINT }),
    },
    {
      kind: "environment",
      server: new QuickEnvironment({ name: "environment", checkpoint: CHECKPOINT }),
    },
    { kind: "policy model", server: policyServer("policy") },
  ];
}

/** Every operation a server documents, as `[METHOD, path]` with path parameters filled in. */
export function documentedOperations(server: Server): [string, string][] {
  const doc = server.openApiDocument() as unknown as {
    paths: Record<string, Record<string, unknown>>;
  };
  const operations: [string, string][] = [];
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const method of Object.keys(ops)) {
      operations.push([method.toUpperCase(), path.replace(/\{[^}]+\}/g, "r")]);
    }
  }
  return operations;
}

/** A reply as received. */
export interface RawReply {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  /** The body parsed as JSON when it is JSON, else the text. */
  readonly body: unknown;
}

/** What {@link send} sends. */
export interface RawRequest {
  readonly method?: string;
  readonly path: string;
  readonly headers?: OutgoingHttpHeaders;
  readonly body?: Buffer | string;
  /** Leave the request unfinished (the declared length not reached); the reply still counts. */
  readonly unfinished?: boolean;
}

/**
 * Sends one request with exactly these headers and bytes over a fresh connection and resolves
 * with the reply (the connection is dropped once the reply has been read).
 */
export function send(url: string, request: RawRequest): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}${request.path}`, {
      method: request.method ?? "POST",
      headers: request.headers ?? {},
      agent: false,
    });
    req.on("error", reject);
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("error", reject);
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          // not JSON: keep the text
        }
        req.destroy();
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body });
      });
    });
    if (request.body !== undefined) req.write(request.body);
    if (request.unfinished !== true) req.end();
    else req.flushHeaders();
  });
}

/** The error code of an envelope reply, or null. */
export function codeOf(reply: RawReply): string | null {
  const body = reply.body as { error?: { code?: unknown } } | null;
  return typeof body?.error?.code === "string" ? body.error.code : null;
}
