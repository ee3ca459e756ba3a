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
  request as httpRequest,
  type IncomingMessage,
  type RequestListener,
  type ServerResponse,
} from "node:http";
import { connect } from "node:net";
import { GymError } from "../../errors.js";
import { SocketMux } from "./socket-mux.js";

/** Where a request for a session goes. */
export type OwnerRoute =
  | { readonly to: "local" }
  | { readonly to: "worker"; readonly routingId: string }
  | { readonly to: "gone"; readonly owner: string };

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
  /** One socket per owner, every passed-on request a stream over it. */
  readonly #muxes = new Map<string, SocketMux>();

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

  /** Closes the sockets to other workers. */
  close(): void {
    for (const mux of this.#muxes.values()) mux.close();
    this.#muxes.clear();
  }

  /** The mux to a worker, connected on first use and again after its socket went away. */
  #muxFor(routingId: string): SocketMux {
    let mux = this.#muxes.get(routingId);
    if (mux === undefined || mux.closed) {
      const socket = connect(this.#directory.socketOf(routingId));
      mux = new SocketMux(socket);
      this.#muxes.set(routingId, mux);
    }
    return mux;
  }

  #forward(req: IncomingMessage, res: ServerResponse, routingId: string): void {
    const mux = this.#muxFor(routingId);
    const upstream = httpRequest({
      // A stream of the worker pair's one socket: a parked request holds no descriptor.
      createConnection: () => mux.open(),
      method: req.method,
      path: req.url,
      // One exchange per stream: the owner closes it after the answer.
      headers: { ...endToEnd(req.headers), connection: "close" },
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
      // Not `req.destroyed`: a request whose body was read is destroyed while its answer is due.
      if (res.writableEnded || res.destroyed) return;
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
