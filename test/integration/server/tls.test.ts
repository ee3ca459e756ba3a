/**
 * A deployment's `tls:` block: servers serve HTTPS, every client trusts `ca_file` and fails
 * with a typed TLS error when it does not, mutual TLS refuses a client without a certificate,
 * a file that cannot be read is named, and a server bound beyond loopback without TLS warns
 * once that its token and data cross the network in clear.
 */
import { readFileSync } from "node:fs";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import { pino } from "pino";
import request from "supertest";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ServerUnreachableError } from "#sdk/client/errors.js";
import { ServerClient } from "#sdk/client/server-client.js";
import { deploymentFetch } from "#sdk/client/tls.js";
import { snapshotOf } from "#sdk/cli/top.js";
import { serveMain } from "#sdk/cli/run-server.js";
import { ConfigError } from "#sdk/errors.js";
import { PolicyModelServer } from "#sdk/server/policy-model-server.js";
import { ResourcesServer } from "#sdk/server/resources-server.js";
import { resolveCheckpointSettings, type ServerOptions } from "#sdk/server/server.js";
import type { StatusReply } from "#sdk/wire/control.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";
import type { TlsSettings } from "#sdk/wire/settings.js";
import { makeTestCertificates, type TestCertificates } from "../../support/test-certificates.js";

const TOKEN = "tls-test-token";
const checkpoint = resolveCheckpointSettings({ enabled: true, control_auth_token: TOKEN });

class Echo extends ResourcesServer {
  static override checkpointMode = "stateless" as const;
  protected override verify() {
    return { reward: 1 };
  }
}

let certs: TestCertificates;
beforeAll(() => {
  certs = makeTestCertificates();
});
afterAll(() => certs.remove());

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

/** The server's side of the block: its certificate, and a client CA under mutual TLS. */
function serverTls(mutual: boolean): TlsSettings {
  return {
    cert_file: certs.serverCert,
    key_file: certs.serverKey,
    ca_file: certs.caCert,
    client_ca_file: mutual ? certs.caCert : null,
  };
}

/** Starts an Echo server with this `tls` (or none) and returns its URL. */
async function serve(
  tls: TlsSettings | null,
  options: Partial<ServerOptions> & { host?: string } = {},
): Promise<string> {
  const server = new Echo({
    name: "e",
    logLevel: "silent",
    checkpoint,
    deployment: { checkpoint, servers: {}, ...(tls === null ? {} : { tls }) },
    ...options,
  });
  closers.push(() => server.close());
  const { url } = await server.listen({ port: 0, host: options.host ?? "127.0.0.1" });
  return url;
}

/** A client of a deployment with the one server at `url`, under this `tls` (or none). */
function clientOf(url: string, tls: TlsSettings | null): ServerClient {
  const { port } = new URL(url);
  const deployment: ResolvedDeployment = {
    checkpoint,
    ...(tls === null ? {} : { tls }),
    servers: {
      e: {
        kind: "resources",
        url,
        host: "127.0.0.1",
        port: Number(port),
        num_workers: 1,
        config: {},
      },
    },
  };
  const client = new ServerClient(deployment);
  closers.push(() => client.destroy());
  return client;
}

async function statusOf(client: ServerClient): Promise<StatusReply> {
  return await client.control<StatusReply>("e", "status", null, {
    token: TOKEN,
    timeoutMs: 10_000,
  });
}

/** The failure of a call expected to fail, checked to be an unreachable error. */
async function unreachable(call: Promise<unknown>): Promise<ServerUnreachableError> {
  const error = await call.then(
    () => null,
    (failure: unknown) => failure,
  );
  expect(error).toBeInstanceOf(ServerUnreachableError);
  return error as ServerUnreachableError;
}

describe("a deployment with tls", () => {
  it("serves HTTPS, and a client trusting ca_file makes control and data calls", async () => {
    const url = await serve(serverTls(false));
    expect(url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const client = clientOf(url, serverTls(false));
    expect((await statusOf(client)).instance).toBe("e");
    expect(await client.get("e", "/health")).toEqual({ status: "ok", name: "e" });
  });

  it("fails a client that does not trust the server's CA with a typed TLS error", async () => {
    const url = await serve(serverTls(false));
    const wrongCa = { ...serverTls(false), ca_file: certs.otherCaCert };
    expect((await unreachable(statusOf(clientOf(url, wrongCa)))).reason).toBe("tls");
    // No tls block at all: the system's CAs, which do not know the test CA either.
    expect((await unreachable(statusOf(clientOf(url, null)))).reason).toBe("tls");
  });

  it("under mutual TLS refuses a client without a certificate and serves one with", async () => {
    const url = await serve(serverTls(true));
    // Trusts the server, presents nothing (a client presents cert_file only under mutual TLS).
    const anonymous = clientOf(url, { ...serverTls(false), cert_file: "/unused", key_file: "/x" });
    const refused = await unreachable(statusOf(anonymous));
    expect(refused.reason).not.toBe("timeout");
    const withCert = clientOf(url, {
      cert_file: certs.clientCert,
      key_file: certs.clientKey,
      ca_file: certs.caCert,
      client_ca_file: certs.caCert,
    });
    expect((await statusOf(withCert)).instance).toBe("e");
    // A server calling another presents the deployment's own certificate.
    expect((await statusOf(clientOf(url, serverTls(true)))).instance).toBe("e");
  });

  it("names the tls key and the file that cannot be read", () => {
    const missing = "/nonexistent/gym-test/ca.pem";
    const client = (): unknown =>
      new ServerClient({ checkpoint, tls: { ...serverTls(false), ca_file: missing }, servers: {} });
    expect(client).toThrow(ConfigError);
    expect(client).toThrow(`tls.ca_file ${missing}`);
    const server = (): unknown =>
      new Echo({
        name: "e",
        logLevel: "silent",
        deployment: { checkpoint, servers: {}, tls: { ...serverTls(false), key_file: missing } },
      });
    expect(server).toThrow(`tls.key_file ${missing}`);
  });

  it("is what gym top reads readiness and metrics over", async () => {
    const url = await serve(serverTls(true));
    expect(url).toMatch(/^https:/);
    const http = deploymentFetch(serverTls(true));
    closers.push(() => http.close());
    const snapshot = await snapshotOf({ url }, { fetch: http.fetch });
    expect(snapshot.ready).toBe("ready");
    expect(snapshot.phase).toBe("idle");
    // The global fetch neither trusts the test CA nor presents a certificate.
    expect((await snapshotOf({ url })).ready).toBe("down");
  });

  it("is what the policy model reaches its backend_server over", async () => {
    // A backend of the deployment under mutual TLS, answering every call with an error: a 502
    // naming its answer shows the handshake went through both ways.
    const backend = createHttpsServer(
      {
        cert: readFileSync(certs.serverCert),
        key: readFileSync(certs.serverKey),
        ca: readFileSync(certs.caCert),
        requestCert: true,
        rejectUnauthorized: true,
      },
      (req, res) => {
        req.resume();
        req.on("end", () => res.writeHead(500).end("engine exploded"));
      },
    );
    await new Promise<void>((resolve) => backend.listen(0, "127.0.0.1", resolve));
    closers.push(() => new Promise((resolve) => backend.close(() => resolve())));
    const { port } = backend.address() as AddressInfo;
    const policy = new PolicyModelServer({
      name: "policy",
      logLevel: "silent",
      config: { backend_server: "engine" },
      deployment: {
        checkpoint: null,
        tls: serverTls(true),
        servers: {
          engine: {
            kind: "backend",
            url: `https://127.0.0.1:${port}`,
            host: "127.0.0.1",
            port,
            num_workers: 1,
            config: {},
          },
        },
      },
    });
    closers.push(() => policy.close());
    const reply = await request(policy.app()).post("/v1/responses").send({ input: "hi" });
    expect(reply.status).toBe(502);
    expect(reply.body.detail).toMatch(/inference backend answered 500: engine exploded/);
  });

  it("is taken from serveMain's --tls-cert, --tls-key and --tls-client-ca", async () => {
    const before = new Set([...process.listeners("SIGTERM"), ...process.listeners("SIGINT")]);
    closers.push(async () => {
      // serveMain stops on signals: its handlers must not outlive the test.
      for (const signal of ["SIGTERM", "SIGINT"] as const) {
        for (const listener of process.listeners(signal)) {
          if (!before.has(listener)) process.off(signal, listener);
        }
      }
    });
    const running = await serveMain(Echo, [
      "--port",
      "0",
      "--name",
      "e",
      "--checkpoint-token",
      TOKEN,
      "--tls-cert",
      certs.serverCert,
      "--tls-key",
      certs.serverKey,
      "--tls-client-ca",
      certs.caCert,
    ]);
    expect(running).not.toBeNull();
    closers.push(() => running!.stop());
    expect(running!.address.url).toMatch(/^https:/);
    expect((await statusOf(clientOf(running!.address.url, serverTls(true)))).instance).toBe("e");
    const anonymous = clientOf(running!.address.url, serverTls(false));
    await unreachable(statusOf(anonymous));
  });
});

describe("without tls", () => {
  it("serves plain HTTP", async () => {
    const url = await serve(null);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await statusOf(clientOf(url, null))).instance).toBe("e");
  });

  /** Starts a server logging into a string; returns its warnings about clear text. */
  async function warningsOf(host: string, tls: TlsSettings | null): Promise<string[]> {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(...chunk.toString("utf8").split("\n").filter(Boolean));
        done();
      },
    });
    const url = await serve(tls, { host, logger: pino({ level: "info" }, sink) });
    // Bound to the wildcard; reached through loopback only.
    const { port } = new URL(url);
    const local = clientOf(`${tls === null ? "http" : "https"}://127.0.0.1:${port}`, tls);
    await statusOf(local);
    return lines
      .map((line) => JSON.parse(line) as { level: number; msg: string })
      .filter((entry) => entry.level === 40 && entry.msg.includes("in clear"))
      .map((entry) => entry.msg);
  }

  it("warns once when bound beyond loopback, saying how to turn TLS on", async () => {
    const warnings = await warningsOf("0.0.0.0", null);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain("0.0.0.0");
    expect(warnings[0]).toContain("tls:");
    expect(warnings[0]).toContain("control token");
  });

  it("does not warn on loopback, nor beyond it with TLS", async () => {
    expect(await warningsOf("127.0.0.1", null)).toEqual([]);
    expect(await warningsOf("0.0.0.0", serverTls(false))).toEqual([]);
  });
});
