/**
 * A server "on another machine with its own disk": an HTTP proxy in front of a server in this
 * process that moves every `checkpoint_dir` of a commit or restore under `nodeRoot`, so the
 * server writes and reads its checkpoint state where the controller (this process, looking at
 * the path it sent) does not see it. Everything else passes through unchanged.
 */
import { createServer, request, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { CONTROL_PREFIX } from "#sdk/wire/control.js";

/** A running proxy: its URL and port, and how to stop it. */
export interface NodeLocalProxy {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/** `dir` as the node whose disk is `nodeRoot` holds it: the same path, under that root. */
export function onNode(nodeRoot: string, dir: string): string {
  return path.join(nodeRoot, path.resolve(dir));
}

async function bodyOf(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** Starts a proxy to `target` (an `http://host:port` URL) whose checkpoint disk is `nodeRoot`. */
export async function startNodeLocalProxy(
  target: string,
  nodeRoot: string,
): Promise<NodeLocalProxy> {
  const upstream = new URL(target);
  const server: Server = createServer((req, res) => {
    void (async () => {
      let body = await bodyOf(req);
      const url = req.url ?? "/";
      if (
        req.method === "POST" &&
        (url === `${CONTROL_PREFIX}/commit` || url === `${CONTROL_PREFIX}/restore`)
      ) {
        const parsed = JSON.parse(body.toString("utf8")) as { checkpoint_dir?: unknown };
        if (typeof parsed.checkpoint_dir === "string" && parsed.checkpoint_dir !== "") {
          parsed.checkpoint_dir = onNode(nodeRoot, parsed.checkpoint_dir);
        }
        body = Buffer.from(JSON.stringify(parsed), "utf8");
      }
      const headers = { ...req.headers, "content-length": String(body.length) };
      delete headers["transfer-encoding"];
      const forwarded = request(
        {
          hostname: upstream.hostname,
          port: upstream.port,
          method: req.method,
          path: url,
          headers,
        },
        (reply) => {
          res.writeHead(reply.statusCode ?? 502, reply.headers);
          reply.pipe(res);
        },
      );
      forwarded.on("error", () => res.destroy());
      forwarded.end(body);
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
