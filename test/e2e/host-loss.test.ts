/**
 * A machine that disappears, in real processes: the reference deployment with its servers placed
 * on two nodes (as the controller sees them), one server frozen (SIGSTOP on its process group:
 * its kernel still takes connections, nothing answers) or killed (SIGKILL). Prepare and commit
 * fail within the step's deadline plus the call slack, with an error naming the server, its node
 * and its host; the others are resumed; once the host is back, the same resume clears it.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  CALL_SLACK_MS,
  UnreachableParticipantsError,
  commit,
  discover,
  prepare,
  resume,
  type Participants,
} from "#sdk/client/coordination.js";
import { ServerClient } from "#sdk/client/server-client.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";
import { CrashRun, deadline, statusOf, until, without } from "./crash-harness.js";
import { stateServers } from "./helpers.js";

const STEP_SECONDS = 2;
/** What a step may take beyond its deadline: the call slack, and a loaded machine's margin. */
const BOUND_MS = STEP_SECONDS * 1000 + CALL_SLACK_MS + 3_000;

const run = new CrashRun(
  mkdtempSync(path.join(tmpdir(), "gym-e2e-host-loss-")),
  "deployment.yaml",
  {
    compiled: true,
  },
);
let client: ServerClient;
let participants: Participants;
const frozen = new Set<string>();

beforeAll(async () => {
  await run.serve();
  // The same servers, placed on nodes as a deployment across machines would place them.
  const deployment: ResolvedDeployment = structuredClone(run.client.deployment);
  for (const [name, server] of Object.entries(deployment.servers)) {
    server.node = name === "policy" || name === "inference" ? "gpu" : "cpu";
  }
  client = new ServerClient(deployment);
  participants = await discover(client, run.token, { probeTimeoutMs: 10_000 });
}, 180_000);

afterAll(async () => {
  for (const server of frozen) run.thaw(server);
  await client?.destroy();
  await run.cleanup();
  rmSync(run.dir, { recursive: true, force: true });
});

function freeze(server: string): void {
  run.freeze(server);
  frozen.add(server);
}

function thaw(server: string): void {
  run.thaw(server);
  frozen.delete(server);
}

async function failure(work: Promise<unknown>): Promise<UnreachableParticipantsError> {
  const error = await work.then(
    () => null,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(UnreachableParticipantsError);
  return error as UnreachableParticipantsError;
}

/** Waits until every participant is idle (a thawed server works off what waited in its socket). */
async function allIdle(): Promise<void> {
  for (const member of participants.members) {
    await until(`${member.name} to be idle`, async () => {
      return (await statusOf(participants, member.name)).phase === "idle";
    });
  }
}

describe.sequential("a lost host (reference deployment)", { timeout: 120_000 }, () => {
  it("a frozen policy model: prepare fails within its deadline naming server, node and host; the others resume; the same resume clears it once thawed", async () => {
    const port = new URL(run.url("policy")).port;
    freeze("policy");
    try {
      const started = Date.now();
      const error = await failure(prepare(participants, "lost-prepare", deadline(STEP_SECONDS)));
      expect(Date.now() - started).toBeLessThan(BOUND_MS);
      expect(error.message).toContain(
        `policy (node gpu, 127.0.0.1:${port}): no reply within the prepare deadline (2 s) — is host 127.0.0.1 down or frozen?`,
      );
      expect(Object.keys(error.unreachable)).toEqual(["policy"]);
      expect(error.unreachable.policy).toMatchObject({ node: "gpu", reason: "timeout" });
      expect(error.hosts()).toEqual(["127.0.0.1"]);
      // The environments (the stage before) prepared; nothing after the model was asked.
      expect((await statusOf(participants, "counter_env")).phase).toBe("prepared");
      expect((await statusOf(participants, "simple_agent")).phase).toBe("idle");
      await resume(without(participants, ["policy"]), "lost-prepare", deadline(30));
      expect((await statusOf(participants, "counter_env")).phase).toBe("idle");
    } finally {
      thaw("policy");
    }
    await resume(participants, "lost-prepare", deadline(30));
    await allIdle();
  });

  it("a frozen resources server: commit fails within its deadline naming it; the others committed and resume", async () => {
    const dir = path.join(run.dir, "ckpt-commit");
    const prepared = await prepare(participants, "lost-commit", deadline(30));
    expect(prepared.prepared).toBe(true);
    freeze("counter");
    try {
      const started = Date.now();
      const error = await failure(
        commit(participants, {
          checkpointId: "lost-commit",
          checkpointDir: dir,
          episodeIds: [],
          deadlineTs: deadline(STEP_SECONDS),
        }),
      );
      expect(Date.now() - started).toBeLessThan(BOUND_MS);
      expect(Object.keys(error.failures)).toEqual(["counter"]);
      expect(error.message).toMatch(
        /counter \(node cpu, 127\.0\.0\.1:\d+\): no reply within the commit deadline \(2 s\) — is host 127\.0\.0\.1 down or frozen\?/,
      );
      expect((await statusOf(participants, "policy")).phase).toBe("committed");
      await resume(without(participants, ["counter"]), "lost-commit", deadline(30));
    } finally {
      thaw("counter");
    }
    await resume(participants, "lost-commit", deadline(30));
    await allIdle();
  });

  it("a killed server: prepare fails at once naming it; the others resume", async () => {
    const weather = stateServers(run.stateFile).find((server) => server.name === "weather");
    if (weather === undefined) throw new Error("no weather server in the state file");
    process.kill(-weather.pgid, "SIGKILL");
    await until("the weather server to refuse connections", async () => {
      try {
        await fetch(`${run.url("weather")}/health`);
        return false;
      } catch {
        return true;
      }
    });
    const started = Date.now();
    const error = await failure(prepare(participants, "lost-killed", deadline(30)));
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(error.failures.weather).toBe("cannot connect — is the server down, or host 127.0.0.1?");
    expect(error.message).toMatch(/weather \(node cpu, 127\.0\.0\.1:\d+\): cannot connect/);
    const rest = without(participants, ["weather"]);
    await resume(rest, "lost-killed", deadline(30));
    for (const member of rest.members) {
      expect((await statusOf(rest, member.name)).phase, member.name).toBe("idle");
    }
  });
});
