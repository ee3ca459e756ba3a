/**
 * A participant whose host is gone or frozen, in one process: a socket that accepts and never
 * answers stands for a frozen server (its kernel still takes connections), a closed port for a
 * killed one. Coordination fails within the step's deadline plus the call slack, with an error
 * naming the server, its node and its host; a failed restore does not ask the silent participant
 * again.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { createServer as createNetServer, type Server as NetServer, type Socket } from "node:net";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  CALL_SLACK_MS,
  UnreachableParticipantsError,
  prepare,
  restore,
  status,
  type Participants,
} from "#sdk/client/coordination.js";
import { ServerClient } from "#sdk/client/server-client.js";
import { Participant } from "#sdk/control/participant.js";
import { episodeId, type EpisodeId } from "#sdk/identity/episode-id.js";
import { Server } from "#sdk/server/server.js";
import { prepareReport, type PrepareReport } from "#sdk/wire/control.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";
import { JsonPayloadSchema } from "#sdk/json/json-payload-schema.js";
import { recordSchema } from "#sdk/wire/storage.js";

const TOKEN = "host-loss-token";
const RecordSchema = recordSchema({ payload: JsonPayloadSchema });
type Rec = ReturnType<typeof RecordSchema.parse>;

class Idle extends Participant<Rec> {
  readonly recordSchema = RecordSchema;
  readonly kind = "environment" as const;
  closeAdmission(): void {}
  openAdmission(): void {}
  readiness(): PrepareReport {
    return prepareReport({ ready: true, blockers: [], restarts: [] });
  }
  async retire(_episode: EpisodeId): Promise<void> {}
  async export(): Promise<Rec[]> {
    return [];
  }
  async install(): Promise<void> {}
}

class EnvServer extends Server {
  constructor() {
    super({
      name: "env",
      logLevel: "silent",
      checkpoint: { enabled: true, control_auth_token: TOKEN },
    });
  }
  protected override createParticipant(): Participant | null {
    return new Idle();
  }
}

const closing: (() => Promise<void>)[] = [];
let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), "gym-host-loss-"));
});
afterEach(async () => {
  for (const close of closing.splice(0).reverse()) await close();
  await rm(dir, { recursive: true, force: true });
});

/** A port that accepts connections and never answers: a frozen server. */
async function frozenPort(): Promise<number> {
  const sockets: Socket[] = [];
  const silent: NetServer = createNetServer((socket) => sockets.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
  closing.push(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => silent.close(() => resolve()));
  });
  return (silent.address() as { port: number }).port;
}

/** A port nothing listens on: a killed server. */
async function deadPort(): Promise<number> {
  const probe = createNetServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = (probe.address() as { port: number }).port;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

/** A live environment server on node `cpu` and a policy model at `policyPort` on node `gpu`. */
async function deployment(policyPort: number): Promise<Participants> {
  const env = new EnvServer();
  const address = await env.listen();
  closing.push(async () => await env.close());
  const resolved: ResolvedDeployment = {
    checkpoint: { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 },
    servers: {
      env: { ...address, kind: "environment", node: "cpu", num_workers: 1, config: {} },
      policy: {
        kind: "model",
        url: `http://127.0.0.1:${policyPort}`,
        host: "127.0.0.1",
        port: policyPort,
        node: "gpu",
        num_workers: 1,
        config: {},
      },
    },
  };
  const client = new ServerClient(resolved);
  closing.push(async () => await client.destroy());
  return {
    client,
    token: TOKEN,
    members: [
      { name: "env", kind: "environment" },
      { name: "policy", kind: "model" },
    ],
  };
}

function deadline(seconds: number): number {
  return Date.now() / 1000 + seconds;
}

async function failure(work: Promise<unknown>): Promise<UnreachableParticipantsError> {
  const error = await work.then(
    () => null,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(UnreachableParticipantsError);
  return error as UnreachableParticipantsError;
}

describe("a participant's host is lost", { timeout: 30_000 }, () => {
  it("frozen: prepare fails at its deadline plus the slack, naming the server, its node and host", async () => {
    const port = await frozenPort();
    const participants = await deployment(port);
    const started = Date.now();
    const error = await failure(prepare(participants, "ckpt-frozen", deadline(1)));
    const elapsed = Date.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(1_000);
    expect(elapsed).toBeLessThan(1_000 + CALL_SLACK_MS + 2_000);
    expect(error.operation).toBe("prepare");
    expect(error.message).toBe(
      `checkpoint prepare failed on 1 participant(s): policy (node gpu, 127.0.0.1:${port}): ` +
        "no reply within the prepare deadline (1 s) — is host 127.0.0.1 down or frozen?",
    );
    expect(error.unreachable).toEqual({
      policy: { node: "gpu", host: "127.0.0.1", address: `127.0.0.1:${port}`, reason: "timeout" },
    });
    expect(error.hosts()).toEqual(["127.0.0.1"]);
    // The stage before the lost one prepared: resuming it is the caller's move.
    const env = await status({ ...participants, members: [participants.members[0]!] }, 5_000);
    expect(env.env?.phase).toBe("prepared");
  });

  it("killed: prepare fails at once, naming the server, its node and host", async () => {
    const port = await deadPort();
    const participants = await deployment(port);
    const started = Date.now();
    const error = await failure(prepare(participants, "ckpt-killed", deadline(30)));
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(error.failures.policy).toBe("cannot connect — is the server down, or host 127.0.0.1?");
    expect(error.message).toContain(`policy (node gpu, 127.0.0.1:${port}): cannot connect`);
    expect(error.unreachable.policy?.reason).toBe("connect");
  });

  it("frozen: a failed restore does not ask the silent participant again, so it fails at its deadline", async () => {
    const port = await frozenPort();
    const participants = await deployment(port);
    const started = Date.now();
    const error = await failure(
      restore(participants, {
        checkpointId: "ckpt-restore",
        checkpointDir: path.join(dir, "missing"),
        episodeIds: [episodeId("r1", 0)],
        deadlineTs: deadline(1),
      }),
    );
    // Asking it again to retire and resume would take 35 s more each (the cleanup's bound).
    expect(Date.now() - started).toBeLessThan(1_000 + CALL_SLACK_MS + 3_000);
    expect(Object.keys(error.failures).sort()).toEqual(["env", "policy"]);
    expect(error.unreachable.policy?.reason).toBe("timeout");
    expect(error.message).toContain(
      `policy (node gpu, 127.0.0.1:${port}): no reply within the restore deadline (1 s)`,
    );
    // The answering participant was cleaned up: resumed, back to idle.
    const env = await status({ ...participants, members: [participants.members[0]!] }, 5_000);
    expect(env.env?.phase).toBe("idle");
  });
});
