/**
 * Ports of a run, before anything is started: free ports for `port: 0` servers, and a check
 * that every fixed port is still free, so a taken one is named plainly instead of surfacing as
 * a server that "failed to start".
 */
import { createServer, type Server } from "node:net";
import { CliError } from "./output.js";

function listen(host: string, port = 0): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(port, host, () => {
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

/** A fixed port a server of the run cannot listen on. */
export interface TakenPort {
  readonly name: string;
  readonly host: string;
  readonly port: number;
  /** `in use`: another process listens there (EADDRINUSE); `denied`: a privileged port (EACCES). */
  readonly why: "in use" | "denied";
}

/**
 * The requests whose port cannot be listened on now, found by binding each and closing again.
 * Other bind errors (a host this machine does not have) are left to the server to report.
 */
export async function takenPorts(
  requests: readonly { readonly name: string; readonly host: string; readonly port: number }[],
): Promise<TakenPort[]> {
  const taken: TakenPort[] = [];
  for (const request of requests) {
    try {
      await close(await listen(request.host, request.port));
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "EADDRINUSE") taken.push({ ...request, why: "in use" });
      else if (code === "EACCES") taken.push({ ...request, why: "denied" });
    }
  }
  return taken;
}

/** What to do about taken ports, for the message `gym serve` fails with. */
export function takenPortsError(taken: readonly TakenPort[], deploymentFile: string): CliError {
  const lines = taken.map(({ name, host, port, why }) =>
    why === "in use"
      ? `server ${name}: port ${port} on ${host} is already in use by another process`
      : `server ${name}: port ${port} on ${host} needs privileges this user lacks (ports below 1024)`,
  );
  const busy = taken.find((entry) => entry.why === "in use");
  const names = [...new Set(taken.map((entry) => entry.name))].join(", ");
  const hint =
    busy === undefined
      ? `give ${names} a port of 1024 or above in ${deploymentFile} (port: 0 picks a free one)`
      : `stop the process listening there (\`ss -ltnp 'sport = :${busy.port}'\` names it), ` +
        `or give ${names} another port in ${deploymentFile} (port: 0 picks a free one)`;
  return new CliError(`${lines.join("\n")}; nothing was started`, hint);
}
