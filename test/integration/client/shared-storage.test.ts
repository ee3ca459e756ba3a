/**
 * A checkpoint directory that is not shared: each participant writes its subdirectory on its
 * own machine's disk (a proxy moves the directory of one participant under a root of its own,
 * as a node-local disk would). The controller's commit fails naming the server, the path and
 * the host that wrote it; a restore that finds its subdirectory missing is a 422 naming the path
 * and the machine, and installs nothing.
 */
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { commitEverywhere } from "#sdk/client/commit-everywhere.js";
import { discover, prepare, resume, type Participants } from "#sdk/client/coordination.js";
import { ServerReplyError } from "#sdk/client/errors.js";
import { ServerClient } from "#sdk/client/server-client.js";
import { checkRestoreShared } from "#sdk/client/shared-storage.js";
import { Participant } from "#sdk/control/participant.js";
import { CheckpointNotSharedError, CheckpointStateError } from "#sdk/errors.js";
import { episodeId, type EpisodeId } from "#sdk/identity/episode-id.js";
import { JsonPayloadSchema } from "#sdk/json/json-payload-schema.js";
import { Server } from "#sdk/server/server.js";
import { prepareReport, type ParticipantKind, type PrepareReport } from "#sdk/wire/control.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";
import { recordSchema } from "#sdk/wire/storage.js";
import { onNode, startNodeLocalProxy } from "../../support/node-local-proxy.js";

const TOKEN = "shared-storage-token";
const RecordSchema = recordSchema({ payload: JsonPayloadSchema });
type Rec = ReturnType<typeof RecordSchema.parse>;

class Holding extends Participant<Rec> {
  readonly recordSchema = RecordSchema;
  readonly episodes: EpisodeId[] = [episodeId("r1")];
  readonly installed: Rec[][] = [];
  constructor(readonly kind: ParticipantKind) {
    super();
  }
  closeAdmission(): void {}
  openAdmission(): void {}
  readiness(): PrepareReport {
    return prepareReport({ ready: true, blockers: [], restarts: [] });
  }
  async retire(): Promise<void> {}
  async export(): Promise<Rec[]> {
    return this.episodes.map((episode) => ({ episode_id: episode, payload: { n: 1 } }));
  }
  async install(records: readonly Rec[]): Promise<void> {
    this.installed.push([...records]);
  }
}

class HoldingServer extends Server {
  constructor(
    name: string,
    readonly own: Holding,
  ) {
    super({ name, logLevel: "silent", checkpoint: { enabled: true, control_auth_token: TOKEN } });
  }
  protected override createParticipant(): Participant {
    return this.own;
  }
}

const closing: (() => Promise<void> | void)[] = [];
let root: string;

beforeEach(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), "gym-shared-"));
});

afterEach(async () => {
  for (const close of closing.splice(0).reverse()) await close();
  await rm(root, { recursive: true, force: true });
});

interface Fixture {
  readonly participants: Participants;
  readonly holders: Map<string, Holding>;
}

/**
 * `env` (environment) and `counter` (resources), each in this process; the ones named in
 * `nodeLocal` behind a proxy whose disk is `<root>/node-<name>`.
 */
async function deploy(nodeLocal: readonly string[]): Promise<Fixture> {
  const deployment: ResolvedDeployment = {
    checkpoint: { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 },
    servers: {},
  };
  const holders = new Map<string, Holding>();
  for (const [name, kind] of [
    ["env", "environment"],
    ["counter", "resources"],
  ] as const) {
    const holder = new Holding(kind);
    holders.set(name, holder);
    const server = new HoldingServer(name, holder);
    let { url, port } = await server.listen();
    closing.push(() => server.close());
    if (nodeLocal.includes(name)) {
      const proxy = await startNodeLocalProxy(url, path.join(root, `node-${name}`));
      closing.push(() => proxy.close());
      ({ url, port } = proxy);
    }
    deployment.servers[name] = {
      kind,
      url,
      host: "127.0.0.1",
      port,
      num_workers: 1,
      config: {},
    };
  }
  const client = new ServerClient(deployment);
  closing.push(() => client.close());
  const participants = await discover(client, TOKEN, { requireModel: false });
  return { participants, holders };
}

function deadline(): number {
  return Date.now() / 1000 + 30;
}

async function commitAt(participants: Participants, id: string, dir: string) {
  await prepare(participants, id, deadline());
  return await commitEverywhere(participants, {
    checkpointId: id,
    checkpointDir: dir,
    episodeIds: null,
    deadlineTs: deadline,
  });
}

describe("a checkpoint directory on a node-local disk", () => {
  it("fails the commit, naming the server, the path it wrote and its host", async () => {
    const { participants } = await deploy(["counter"]);
    const dir = path.join(root, "ckpt", "c1");
    const failure = await commitAt(participants, "c1", dir).then(
      () => null,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(CheckpointNotSharedError);
    const error = failure as CheckpointNotSharedError;
    expect(error).toBeInstanceOf(CheckpointStateError);
    expect(error.code).toBe("invalid_checkpoint_state");
    expect(error.operation).toBe("commit");
    const counterDir = path.join(dir, "gym", "resources", "counter");
    expect(error.unshared).toEqual([
      {
        server: "counter",
        path: counterDir,
        host: os.hostname(),
        address: "127.0.0.1",
        problem: "it is not there",
      },
    ]);
    expect(error.localHost).toBe(os.hostname());
    expect(error.message).toContain(`counter wrote ${counterDir} on host ${os.hostname()}`);
    expect(error.message).toContain("shares (NFS, Lustre, CephFS), not a node-local disk");
    // The participant did write, on its own disk, and says which host it is.
    const written = onNode(path.join(root, "node-counter"), counterDir);
    const manifest = JSON.parse(await readFile(path.join(written, "manifest.json"), "utf8")) as {
      host?: string;
    };
    expect(manifest.host).toBe(os.hostname());
    // env's state is visible here: it is not named.
    expect(existsSync(path.join(dir, "gym", "environment", "env", "manifest.json"))).toBe(true);
    await resume(participants, "c1", deadline());
  });

  it("commits when every participant's directory is visible here", async () => {
    const { participants } = await deploy([]);
    const replies = await commitAt(participants, "c1", path.join(root, "ckpt", "c1"));
    expect(Object.keys(replies).sort()).toEqual(["counter", "env"]);
    expect(replies.counter?.manifest).toMatchObject({ host: os.hostname() });
    await resume(participants, "c1", deadline());
  });

  it("a restore whose subdirectory is missing here is a 422 naming the path and the machine, and installs nothing", async () => {
    // Committed where everyone sees it, then restored by a participant whose disk lacks it.
    const shared = await deploy([]);
    const dir = path.join(root, "ckpt", "c1");
    await commitAt(shared.participants, "c1", dir);
    await resume(shared.participants, "c1", deadline());

    const fresh = await deploy(["counter"]);
    const failure = await fresh.participants.client
      .control(
        "counter",
        "restore",
        Buffer.from(
          JSON.stringify({
            checkpoint_id: "c1",
            deadline_ts: deadline(),
            checkpoint_dir: dir,
            episode_ids: [{ rollout_id: "r1", attempt: 0 }],
          }),
        ),
        { token: TOKEN, timeoutMs: 10_000 },
      )
      .then(
        () => null,
        (error: unknown) => error,
      );
    expect(failure).toBeInstanceOf(ServerReplyError);
    const refusal = failure as ServerReplyError;
    expect(refusal.status).toBe(422);
    expect(refusal.code).toBe("invalid_checkpoint_state");
    const missing = path.join(
      onNode(path.join(root, "node-counter"), dir),
      "gym",
      "resources",
      "counter",
    );
    expect(refusal.detail).toContain(`missing manifest ${path.join(missing, "manifest.json")}`);
    expect(refusal.detail).toContain(`on this machine (${os.hostname()})`);
    expect(refusal.detail).toContain("not a node-local disk");
    expect(fresh.holders.get("counter")?.installed).toEqual([]);
  });

  it("the controller's own check before a restore names the host that wrote what is missing", async () => {
    const { participants } = await deploy([]);
    const dir = path.join(root, "ckpt", "c1");
    await commitAt(participants, "c1", dir);
    await resume(participants, "c1", deadline());
    const counterDir = path.join(dir, "gym", "resources", "counter");
    await rm(counterDir, { recursive: true });
    const failure = await checkRestoreShared(
      participants.client.deployment,
      dir,
      participants.members,
      { env: "gpu-node-0", counter: "gpu-node-1" },
    ).then(
      () => null,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(CheckpointNotSharedError);
    const error = failure as CheckpointNotSharedError;
    expect(error.operation).toBe("restore");
    expect(error.unshared).toEqual([
      {
        server: "counter",
        path: counterDir,
        host: "gpu-node-1",
        address: "127.0.0.1",
        problem: "it is not there",
      },
    ]);
    expect(error.message).toContain(
      `counter's state ${counterDir} (written on host gpu-node-1 (127.0.0.1)): it is not there on this machine (${os.hostname()})`,
    );
  });
});
