/**
 * Session routing of a multi-worker server. A session's state lives on the worker that created
 * it, and every session cookie names that worker (its owner). Whichever worker accepts the
 * connection reads the owner before anything else runs and, when it is another live worker,
 * passes the request through unchanged to that worker's private socket and streams the answer
 * back. A request is passed on at most once (what arrives on a private socket is served there),
 * never retried, and cancelled upstream when its client leaves.
 *
 * @see docs/workers.md
 */
import {
  Agent,
  request as httpRequest,
  type IncomingMessage,
  type RequestListener,
  type ServerResponse,
} from "node:http";
import type { OwnerRoute } from "../../control/workers/worker-link.js";
import { GymError } from "../../errors.js";

/** What the router needs of the worker's link. */
export interface OwnerDirectory {
  routeOwner(owner: string | null): OwnerRoute;
  socketOf(routingId: string): string;
}

/** Headers that belong to one connection, not to the request: never passed on. */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "proxy-authorization",
  "proxy-authenticate",
]);

function endToEnd(headers: IncomingMessage["headers"]): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const named = new Set(
    String(headers.connection ?? "")
      .split(",")
      .map((name) => name.trim().toLowerCase()),
  );
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  return out;
}

function refuse(res: ServerResponse, error: GymError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify(error.toEnvelope());
  res.writeHead(error.status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(body),
  });
  res.end(body);
}

/** A request listener that sends each session's requests to its owner. */
export class SessionRouter {
  readonly #directory: OwnerDirectory;
  readonly #ownerOf: (req: IncomingMessage) => string | null;
  readonly #local: RequestListener;
  readonly #agents = new Map<string, Agent>();

  constructor(
    directory: OwnerDirectory,
    ownerOf: (req: IncomingMessage) => string | null,
    local: RequestListener,
  ) {
    this.#directory = directory;
    this.#ownerOf = ownerOf;
    this.#local = local;
  }

  /** For the public port: route by owner. */
  readonly listener: RequestListener = (req, res) => {
    let route: OwnerRoute;
    try {
      route = this.#directory.routeOwner(this.#ownerOf(req));
    } catch {
      route = { to: "local" };
    }
    if (route.to === "local") {
      this.#local(req, res);
    } else if (route.to === "gone") {
      req.resume();
      refuse(
        res,
        new GymError(
          "session_owner_gone",
          `the worker process that held this session (${route.owner}) is gone, and its state with it`,
        ),
      );
    } else {
      this.#forward(req, res, route.routingId);
    }
  };

  /** Closes the pooled connections to other workers. */
  close(): void {
    for (const agent of this.#agents.values()) agent.destroy();
    this.#agents.clear();
  }

  #agentFor(routingId: string): Agent {
    let agent = this.#agents.get(routingId);
    if (agent === undefined) {
      // Never capped: parked requests pin their connections, and a cap would queue the
      // request that would let them go. Few idle ones kept, dropped well before the owner's
      // keep-alive timeout so a reused connection is never closed under a request.
      agent = new Agent({ keepAlive: true, maxFreeSockets: 64, timeout: 30_000 });
      this.#agents.set(routingId, agent);
    }
    return agent;
  }

  #forward(req: IncomingMessage, res: ServerResponse, routingId: string): void {
    const upstream = httpRequest({
      socketPath: this.#directory.socketOf(routingId),
      agent: this.#agentFor(routingId),
      method: req.method,
      path: req.url,
      headers: endToEnd(req.headers),
    });
    const onClientGone = (): void => {
      if (!res.writableFinished) upstream.destroy();
    };
    res.on("close", onClientGone);
    upstream.on("response", (answer) => {
      const headers: Record<string, string | string[]> = {};
      for (const [name, value] of Object.entries(answer.headers)) {
        if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
      }
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, headers);
      answer.pipe(res);
      answer.on("error", () => res.destroy());
    });
    upstream.on("error", (error: NodeJS.ErrnoException) => {
      if (res.writableEnded || req.destroyed) return;
      const gone = error.code === "ENOENT" || error.code === "ECONNREFUSED";
      refuse(
        res,
        gone
          ? new GymError(
              "session_owner_gone",
              `the worker process that holds this session (${routingId}) is gone, and its state with it`,
            )
          : new GymError(
              "upstream_unreachable",
              `the worker process that holds this session (${routingId}) could not be reached: ${error.message}`,
            ),
      );
    });
    req.pipe(upstream);
  }
}
