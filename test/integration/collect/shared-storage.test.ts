/**
 * The collector with a checkpoint directory that is not shared: a participant that writes its
 * subdirectory on its own machine's disk fails the checkpoint before anything is published;
 * a published checkpoint whose subdirectory is missing here is not restored (no restore is
 * sent), naming the host that wrote it, and its rows start over.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { CollectOptions } from "#sdk/collect/collect-options.js";
import type { CollectEvent } from "#sdk/collect/collect-report.js";
import { Collection, collect } from "#sdk/collect/collector.js";
import type { Participants } from "#sdk/client/coordination.js";
import { ServerClient } from "#sdk/client/server-client.js";
import {
  onNode,
  startNodeLocalProxy,
  type NodeLocalProxy,
} from "../../support/node-local-proxy.js";
import { StubDeployment, writeTasks } from "./stub-deployment.js";

let stub: StubDeployment;
let dir: string;
let proxy: NodeLocalProxy | null = null;
const clients: ServerClient[] = [];

beforeEach(async () => {
  stub = new StubDeployment();
  await stub.start();
  dir = mkdtempSync(path.join(tmpdir(), "gym-collect-shared-"));
});

afterEach(async () => {
  // Hanging rows first: closing a client waits for the calls it has in flight.
  stub.release();
  await Promise.all(clients.splice(0).map((client) => client.close()));
  await proxy?.close();
  proxy = null;
  await stub.close();
  rmSync(dir, { recursive: true, force: true });
});

const tasks = (count: number): string => writeTasks(dir, count);

/** The stub's participants, reached through a node-local proxy when `nodeLocal`. */
async function participants(nodeLocal: boolean): Promise<Participants> {
  if (!nodeLocal) {
    const direct = stub.participants();
    clients.push(direct.client);
    return direct;
  }
  proxy = await startNodeLocalProxy(stub.deployment.servers.env?.url as string, nodeRoot());
  const base = stub.deployment;
  const client = new ServerClient({
    ...base,
    servers: { env: { ...base.servers.env!, url: proxy.url, port: proxy.port } },
  });
  clients.push(client);
  return { ...stub.participants(), client };
}

function nodeRoot(): string {
  return path.join(dir, "node-env");
}

function options(p: Participants, extra: Partial<CollectOptions> = {}): CollectOptions {
  return {
    client: p.client,
    participants: p,
    input: tasks(2),
    output: path.join(dir, "out.jsonl"),
    checkpointDir: path.join(dir, "D"),
    concurrency: 2,
    stepTimeoutMs: 5_000,
    ...extra,
  };
}

async function until(what: string, probe: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe("the collector and a checkpoint directory that is not shared", () => {
  it("a participant that wrote on its own disk fails the checkpoint: nothing is published, the run resumes", async () => {
    stub.behaviour = () => "hang";
    const collection = await Collection.start(options(await participants(true)));
    await until("two rows in flight", () => stub.hanging === 2);
    const outcome = await collection.checkpoint();
    if (outcome.status !== "failed")
      throw new Error(`expected a failed checkpoint: ${outcome.status}`);
    const envDir = path.join(dir, "D", "checkpoints", outcome.checkpointId, "gym");
    const written = path.join(envDir, "environment", "env");
    const error = outcome.error;
    expect(error).toContain(`env wrote ${written} on host ${hostname()} (127.0.0.1)`);
    expect(error).toContain(`it is not there on this machine (${hostname()})`);
    // The participant wrote, on its disk; nothing was published here.
    expect(existsSync(path.join(onNode(nodeRoot(), written), "manifest.json"))).toBe(true);
    expect(existsSync(path.join(dir, "D", "LATEST"))).toBe(false);
    expect(
      existsSync(path.join(dir, "D", "checkpoints", outcome.checkpointId, "collection.json")),
    ).toBe(false);
    expect(stub.calls("resume")).toHaveLength(1);
    stub.release();
    const summary = await collection.done;
    expect(summary).toMatchObject({ status: "complete", checkpoints: { published: 0, failed: 1 } });
  });

  it("a published checkpoint records who wrote each part; one missing here is not restored, naming its writer", async () => {
    stub.behaviour = () => "hang";
    const direct = await participants(false);
    const first = await Collection.start(options(direct));
    await until("two rows in flight", () => stub.hanging === 2);
    const stopped = await first.stop();
    expect(stopped.status).toBe("published");
    await first.done;
    stub.release();
    const id = readFileSync(path.join(dir, "D", "LATEST"), "utf8").trim();
    const published = JSON.parse(
      readFileSync(path.join(dir, "D", "checkpoints", id, "collection.json"), "utf8"),
    ) as { writers?: Record<string, string | null> };
    expect(published.writers).toEqual({ env: hostname() });

    // The participant's part is gone from this machine (as on a disk of its node).
    const part = path.join(dir, "D", "checkpoints", id, "gym", "environment", "env");
    rmSync(part, { recursive: true });
    stub.control.length = 0;
    stub.runs.length = 0;
    stub.behaviour = () => "reply";
    const events: CollectEvent[] = [];
    const summary = await collect(
      options(direct, { resume: true, onEvent: (event) => events.push(event) }),
    );
    expect(summary).toMatchObject({ status: "complete", restored: 0, fenced: 2, finished: 2 });
    expect(stub.calls("restore")).toEqual([]);
    const failed = events.find((event) => event.type === "restore_failed");
    expect(failed?.type === "restore_failed" ? failed.error : "").toContain(
      `env's state ${part} (written on host ${hostname()} (127.0.0.1)): it is not there on this machine (${hostname()})`,
    );
  });
});
