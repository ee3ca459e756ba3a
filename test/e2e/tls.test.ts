/**
 * A deployment with a `tls:` block under the real `gym serve`: the counter with two workers
 * serves HTTPS under mutual TLS, the state file records its https URL, the supervisor's health
 * probe, `gym ckpt` and `gym top` reach it trusting the deployment's CA and presenting its
 * certificate, and a client without a certificate is refused.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Agent } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeTestCertificates, type TestCertificates } from "../support/test-certificates.js";
import { REPO, gym, killEverything, stateServers } from "./helpers.js";

const TOKEN = "tls-e2e-token";
/** The built CLI: each command starts in a fraction of the time tsx takes. */
const COMPILED = { compiled: true } as const;
let certs: TestCertificates;
let dir: string;
let stateFile: string;
let url: string;
let agent: Agent;

beforeAll(async () => {
  certs = makeTestCertificates();
  dir = mkdtempSync(path.join(tmpdir(), "gym-tls-e2e-"));
  stateFile = path.join(dir, "run.json");
  // Built, and given 120 s: three processes start at once on a loaded machine.
  const entrypoint = path.join(REPO, "reference-servers", "counter", "dist", "index.js");
  const file = path.join(dir, "deployment.yaml");
  const lines = [
    "checkpoint:",
    "  enabled: true",
    `  control_auth_token: ${TOKEN}`,
    "tls:",
    `  cert_file: ${certs.serverCert}`,
    `  key_file: ${certs.serverKey}`,
    `  ca_file: ${certs.caCert}`,
    `  client_ca_file: ${certs.caCert}`,
    "servers:",
    "  counter:",
    "    kind: resources",
    `    entrypoint: ${entrypoint}`,
    "    num_workers: 2",
  ];
  writeFileSync(file, `${lines.join("\n")}\n`);
  const served = await gym(
    ["serve", file, "--detach", "--state", stateFile, "--health-timeout", "120s"],
    { timeoutMs: 180_000, compiled: true },
  );
  if (served.code !== 0) throw new Error(`gym serve failed:\n${served.stderr}`);
  const counter = stateServers(stateFile).find((server) => server.name === "counter");
  if (counter === undefined) throw new Error("counter is not running");
  url = counter.url;
  agent = new Agent({
    connect: {
      ca: readFileSync(certs.caCert),
      cert: readFileSync(certs.clientCert),
      key: readFileSync(certs.clientKey),
    },
  });
}, 200_000);

afterAll(async () => {
  await agent?.close();
  await killEverything(dir, [stateFile]);
  rmSync(dir, { recursive: true, force: true });
  certs.remove();
});

async function post(route: string, body: unknown): Promise<{ status: number; body: unknown }> {
  const reply = await agent.request({
    origin: url,
    path: route,
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: reply.statusCode, body: await reply.body.json() };
}

describe.sequential("gym serve with a tls block", { timeout: 120_000 }, () => {
  it("records the server's https URL and serves a client with a certificate", async () => {
    expect(url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const seeded = await post("/ng-rollout/r1/seed_session", {
      resources_session_id: "s1",
      episode_id: { rollout_id: "r1", attempt: 0 },
      task_id: { taskset: "t", task_id: "1" },
      task_data: { target: 2 },
    });
    expect(seeded.status, JSON.stringify(seeded.body)).toBe(200);
  });

  it("refuses a client that trusts the CA but presents no certificate", async () => {
    const anonymous = new Agent({ connect: { ca: readFileSync(certs.caCert) } });
    try {
      await expect(
        anonymous.request({ origin: url, path: "/health", method: "GET" }),
      ).rejects.toThrow();
    } finally {
      await anonymous.close();
    }
  });

  it("gym ckpt status and checkpoint reach it over https", async () => {
    const status = await gym(["ckpt", "status", "--state", stateFile, "--json"], COMPILED);
    expect(status.code, status.stderr).toBe(0);
    const json = JSON.parse(status.stdout) as { servers: Record<string, { phase: string }> };
    expect(json.servers.counter).toMatchObject({ phase: "idle" });
    const checkpoint = await gym(
      ["ckpt", "checkpoint", "--dir", path.join(dir, "ckpt"), "--state", stateFile],
      COMPILED,
    );
    expect(checkpoint.code, checkpoint.stderr).toBe(0);
    expect(checkpoint.stdout).toMatch(/\(1 episode\(s\)\); every participant resumed/);
  });

  it("gym top reads it over https", async () => {
    const top = await gym(["top", "--once", "--state", stateFile], COMPILED);
    expect(top.code, top.stderr).toBe(0);
    expect(top.stdout).toMatch(/counter\s+resources\s+ready\s+idle/);
  });

  it("gym stop stops it", async () => {
    expect((await gym(["stop", "--state", stateFile], COMPILED)).code).toBe(0);
  });
});
