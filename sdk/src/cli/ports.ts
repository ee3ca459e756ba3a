/** Free ports for `port: 0` servers, chosen before anything is started. */
import { createServer, type Server } from "node:net";
import { CliError } from "./output.js";

function listen(host: string): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, host, () => {
      server.off("error", reject);
      resolve(server);
    });
  });
}

function close(server: Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

/**
 * One free port per request: binds port 0 on each host, reads the port the system gave, and
 * closes again. All are held until every port is chosen, so no two requests get the same one.
 * (Another program could still take a port before the server binds it; the start then fails
 * with the server's EADDRINUSE in its log.)
 */
export async function chooseFreePorts(
  requests: readonly { readonly name: string; readonly host: string }[],
): Promise<Record<string, number>> {
  const held: Server[] = [];
  const ports: Record<string, number> = {};
  try {
    for (const request of requests) {
      let server: Server;
      try {
        server = await listen(request.host);
      } catch (error) {
        throw new CliError(
          `server ${request.name}: cannot bind a port on host ${JSON.stringify(request.host)}: ${(error as Error).message}; nothing was started`,
          "use a host this machine has (127.0.0.1, localhost, 0.0.0.0) in the deployment file",
        );
      }
      held.push(server);
      const address = server.address();
      if (address === null || typeof address === "string") {
        throw new Error(`cannot read the port bound on ${request.host}`);
      }
      ports[request.name] = address.port;
    }
  } finally {
    await Promise.all(held.map(close));
  }
  return ports;
}
