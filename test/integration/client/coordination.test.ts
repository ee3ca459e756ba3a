import { mkdtemp, rm } from "node:fs/promises";
import { createServer as createNetServer, type Server as NetServer, type Socket } from "node:net";
import os from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  CoordinationError,
  commit,
  discover,
  forget,
  prepare,
  renew,
  restore,
  resume,
  retire,
  status,
  type Participants,
} from "#sdk/client/coordination.js";
import { ServerClient } from "#sdk/client/server-client.js";
import { CommitScopeRequiredError, commitEverywhere } from "#sdk/client/commit-everywhere.js";
import { Participant, type CloseAdmissionRequest } from "#sdk/control/participant.js";
import { captureKey, episodeId, nextAttempt, type EpisodeId } from "#sdk/identity/episode-id.js";
import { Server } from "#sdk/server/server.js";
import { prepareReport, type ParticipantKind, type PrepareReport } from "#sdk/wire/control.js";
import type { ResolvedDeployment, ServerKind } from "#sdk/wire/deployment.js";
import { JsonPayloadSchema } from "#sdk/json/json-payload-schema.js";
import { recordSchema } from "#sdk/wire/storage.js";

const TOKEN = "coordination-token";
const RecordSchema = recordSchema({ payload: JsonPayloadSchema });
type Rec = ReturnType<typeof RecordSchema.parse>;

/** Every hook call of every participant, in arrival order. */
const calls: string[] = [];

class Recording extends Participant<Rec> {
  readonly recordSchema = RecordSchema;
  ready_ = true;
  restarts: string[] = [];
  episodes: EpisodeId[] = [];
  prepareRequests: CloseAdmissionRequest[] = [];
  failInstall = false;
  failRetire = false;
  constructor(
    readonly name: string,
    readonly kind: ParticipantKind,
  ) {
    super();
  }
  closeAdmission(request: CloseAdmissionRequest): void {
    this.prepareRequests.push(request);
    calls.push(`${this.name}:close`);
  }
  openAdmission(): void {
    calls.push(`${this.name}:open`);
  }
  readiness(): PrepareReport {
    return prepareReport({
      ready: this.ready_,
      blockers: this.ready_ ? [] : this.episodes.map(captureKey),
      restarts: this.restarts,
    });
  }
  async retire(episode: EpisodeId): Promise<void> {
    calls.push(`${this.name}:retire:${captureKey(episode)}`);
    if (this.failRetire) throw new Error("retire refused");
  }
  override forget(rolloutIds: readonly string[]): void {
    calls.push(`${this.name}:forget:${rolloutIds.join(",")}`);
    super.forget(rolloutIds);
  }
  async export(scope: readonly EpisodeId[] | null): Promise<Rec[]> {
    calls.push(`${this.name}:export`);
    const keys = scope === null ? null : new Set(scope.map(captureKey));
    return this.episodes
      .filter((e) => keys === null || keys.has(captureKey(e)))
      .map((e) => ({ episode_id: e, payload: { owner: this.name } }));
  }
  async install(records: readonly Rec[]): Promise<void> {
    calls.push(`${this.name}:install:${records.length}`);
    if (this.failInstall) throw new Error("install refused");
  }
}

class ParticipantServer extends Server {
  constructor(
    name: string,
    readonly own: Participant | null,
  ) {
    super({
      name,
      logLevel: "silent",
      checkpoint: { enabled: true, control_auth_token: TOKEN },
    });
  }
  protected override createParticipant(): Participant | null {
    return this.own;
  }
}

interface Fixture {
  participants: Participants;
  byName: Map<string, Recording>;
  servers: Server[];
}

const openServers: { close(): Promise<void> | void }[] = [];

async function deploy(
  spec: Record<string, ServerKind | "none">,
  extra: Record<string, { kind: ServerKind; url: string }> = {},
): Promise<Fixture> {
  const deployment: ResolvedDeployment = {
    checkpoint: { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 },
    servers: {},
  };
  const byName = new Map<string, Recording>();
  const servers: Server[] = [];
  for (const [name, kind] of Object.entries(spec)) {
    const participant =
      kind === "none" || kind === "backend" ? null : new Recording(name, kind as ParticipantKind);
    if (participant !== null) byName.set(name, participant);
    const server = new ParticipantServer(name, participant);
    const address = await server.listen();
    servers.push(server);
    openServers.push(server);
    deployment.servers[name] = {
      kind: kind === "none" ? "resources" : kind,
      url: address.url,
      host: address.host,
      port: address.port,
      num_workers: 1,
      config: {},
    };
  }
  for (const [name, entry] of Object.entries(extra)) {
    const url = new URL(entry.url);
    deployment.servers[name] = {
      kind: entry.kind,
      url: entry.url,
      host: url.hostname,
      port: Number(url.port),
      num_workers: 1,
      config: {},
    };
  }
  const client = new ServerClient(deployment);
  openServers.push(client);
  return { participants: await discoverOrNull(client), byName, servers };
}

async function discoverOrNull(client: ServerClient): Promise<Participants> {
  try {
    return await discover(client, TOKEN, { requireModel: false, probeTimeoutMs: 2_000 });
  } catch {
    return { client, token: TOKEN, members: [] };
  }
}

const FULL = {
  env: "environment",
  policy: "model",
  agent: "agent",
  counter: "resources",
  weather: "resources",
} as const;

function deadline(seconds = 30): number {
  return Date.now() / 1000 + seconds;
}

let dir: string;
beforeEach(async () => {
  calls.length = 0;
  dir = await mkdtemp(path.join(os.tmpdir(), "gym-coord-"));
});
afterEach(async () => {
  await Promise.all(openServers.splice(0).map((s) => s.close()));
  await rm(dir, { recursive: true, force: true });
});
afterAll(() => {
  vi.restoreAllMocks();
});

describe("discover", () => {
  it("finds participants sorted by stage then name, skipping non-participants and backends", async () => {
    const { participants } = await deploy({
      weather: "resources",
      counter: "resources",
      agent: "agent",
      policy: "model",
      env: "environment",
      helper: "none",
      backend: "backend",
    });
    expect(participants.members.map(({ name, kind }) => ({ name, kind }))).toEqual([
      { name: "env", kind: "environment" },
      { name: "policy", kind: "model" },
      { name: "agent", kind: "agent" },
      { name: "counter", kind: "resources" },
      { name: "weather", kind: "resources" },
    ]);
    // One process, one clock: each offset is within what a loaded loop can make of a round trip.
    for (const member of participants.members) {
      expect(Math.abs(member.clockOffsetMs ?? Number.NaN)).toBeLessThan(1_000);
    }
  });

  it("reports a server that is down instead of waiting on it", async () => {
    const probe = createNetServer();
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const { participants } = await deploy(
      { policy: "model" },
      { ghost: { kind: "resources", url: `http://127.0.0.1:${port}` } },
    );
    const error = await discover(participants.client, TOKEN, { probeTimeoutMs: 5_000 }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(CoordinationError);
    expect((error as CoordinationError).failures.ghost).toMatch(/cannot connect/);
  });

  it("reports a server that accepts but never answers, within the probe timeout", async () => {
    const sockets: Socket[] = [];
    const silent: NetServer = createNetServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    openServers.push({
      close: () =>
        new Promise<void>((resolve) => {
          for (const socket of sockets) socket.destroy();
          silent.close(() => resolve());
        }),
    });
    const port = (silent.address() as { port: number }).port;
    const { participants } = await deploy(
      { policy: "model" },
      { mute: { kind: "agent", url: `http://127.0.0.1:${port}` } },
    );
    const error = (await discover(participants.client, TOKEN, { probeTimeoutMs: 300 }).catch(
      (e: unknown) => e,
    )) as CoordinationError;
    expect(error.failures.mute).toContain("no status reply within");
  });

  it("reports an unknown participant kind", async () => {
    const { participants, byName } = await deploy({ policy: "model", odd: "resources" });
    (byName.get("odd") as unknown as { kind: string }).kind = "oracle";
    const error = (await discover(participants.client, TOKEN).catch(
      (e: unknown) => e,
    )) as CoordinationError;
    expect(error.failures.odd).toContain("unknown participant kind");
  });

  it("requires a policy model by default", async () => {
    const { participants } = await deploy({ counter: "resources" });
    await expect(discover(participants.client, TOKEN)).rejects.toThrow(
      "no policy model takes part in checkpoints",
    );
  });
});

describe("prepare", () => {
  it("prepares stage by stage: environment, model, agent, resources", async () => {
    const { participants } = await deploy(FULL);
    const result = await prepare(participants, "c1", deadline());
    expect(result.prepared).toBe(true);
    const closes = calls.filter((c) => c.endsWith(":close"));
    expect(closes.slice(0, 3)).toEqual(["env:close", "policy:close", "agent:close"]);
    expect(new Set(closes.slice(3))).toEqual(new Set(["counter:close", "weather:close"]));
  });

  it("sends later stages the restarts of every earlier stage, only when there are any", async () => {
    const { participants, byName } = await deploy(FULL);
    byName.get("policy")!.restarts = ["r2", "r1"];
    byName.get("agent")!.restarts = ["r3"];
    await prepare(participants, "c1", deadline());
    expect("restarts" in byName.get("env")!.prepareRequests[0]!).toBe(false);
    expect("restarts" in byName.get("policy")!.prepareRequests[0]!).toBe(false);
    expect((byName.get("agent")!.prepareRequests[0] as { restarts?: string[] }).restarts).toEqual([
      "r1",
      "r2",
    ]);
    expect((byName.get("counter")!.prepareRequests[0] as { restarts?: string[] }).restarts).toEqual(
      ["r1", "r2", "r3"],
    );
  });

  it("stops after the first stage that is not prepared", async () => {
    const { participants, byName } = await deploy(FULL);
    byName.get("agent")!.ready_ = false;
    byName.get("agent")!.episodes = [episodeId("stuck")];
    const result = await prepare(participants, "c1", deadline(-1));
    expect(result.prepared).toBe(false);
    expect(result.blockers()).toEqual({ agent: ["stuck"] });
    expect(calls.filter((c) => c.startsWith("counter") || c.startsWith("weather"))).toEqual([]);
  });

  it("gives the commit scope without the restarts, order kept", async () => {
    const { participants, byName } = await deploy(FULL);
    byName.get("counter")!.restarts = ["b"];
    const result = await prepare(participants, "c1", deadline());
    const scope = result.continued([episodeId("c"), episodeId("b"), episodeId("a")]);
    expect(scope.map(captureKey)).toEqual(["c", "a"]);
    expect(result.restarts().map(captureKey)).toEqual(["b"]);
  });
});

describe("commit, renew, resume", () => {
  it("commits everywhere with the same encoded bytes, then resumes in reverse stage order", async () => {
    const { participants, byName } = await deploy(FULL);
    for (const p of byName.values()) p.episodes = [episodeId("r1"), episodeId("r2")];
    const spy = vi.spyOn(participants.client, "control");
    await prepare(participants, "c1", deadline());
    spy.mockClear();
    const replies = await commit(participants, {
      checkpointId: "c1",
      checkpointDir: dir,
      episodeIds: [episodeId("r1")],
      deadlineTs: deadline(),
    });
    expect(Object.keys(replies).sort()).toEqual(["agent", "counter", "env", "policy", "weather"]);
    for (const reply of Object.values(replies)) expect(reply.episode_ids).toEqual(["r1"]);
    const bodies = new Set(spy.mock.calls.map((call) => call[2]));
    expect(bodies.size).toBe(1);

    calls.length = 0;
    await resume(participants, "c1", deadline());
    const opens = calls.filter((c) => c.endsWith(":open"));
    expect(new Set(opens.slice(0, 2))).toEqual(new Set(["counter:open", "weather:open"]));
    expect(opens.slice(2)).toEqual(["agent:open", "policy:open", "env:open"]);
  });

  it("sends commit, restore and retire scopes in capture-key order, each attempt once", async () => {
    const { participants, byName } = await deploy(FULL);
    const listed = [episodeId("r2"), episodeId("r10"), episodeId("r1", 1), episodeId("r2")];
    for (const p of byName.values()) p.episodes = listed;
    const sent = vi.spyOn(participants.client, "control");
    const scopeOf = (operation: string): unknown => {
      const call = sent.mock.calls.find((c) => c[1] === operation);
      return JSON.parse(Buffer.from(call?.[2] as Uint8Array).toString("utf8")).episode_ids;
    };
    const inKeyOrder = [
      { rollout_id: "r1", attempt: 1 },
      { rollout_id: "r10", attempt: 0 },
      { rollout_id: "r2", attempt: 0 },
    ];
    await prepare(participants, "c1", deadline());
    await commit(participants, {
      checkpointId: "c1",
      checkpointDir: dir,
      episodeIds: listed,
      deadlineTs: deadline(),
    });
    expect(scopeOf("commit")).toEqual(inKeyOrder);
    await resume(participants, "c1", deadline());
    await retire(participants, "c1", listed, deadline());
    expect(scopeOf("retire")).toEqual(inKeyOrder);
    const fresh = await deploy(FULL);
    const restoreSent = vi.spyOn(fresh.participants.client, "control");
    await restore(fresh.participants, {
      checkpointId: "c1",
      checkpointDir: dir,
      episodeIds: listed,
      deadlineTs: deadline(),
    });
    const restoreCall = restoreSent.mock.calls.find((c) => c[1] === "restore");
    const restored = JSON.parse(Buffer.from(restoreCall?.[2] as Uint8Array).toString("utf8"));
    expect(restored.episode_ids).toEqual(inKeyOrder);
    // A list the caller changes between calls is read afresh at each.
    const reused = [episodeId("r3")];
    await retire(participants, "c1", reused, deadline());
    reused.splice(0, 1, episodeId("r5"), episodeId("r4"));
    sent.mockClear();
    await retire(participants, "c1", reused, deadline());
    expect(scopeOf("retire")).toEqual([
      { rollout_id: "r4", attempt: 0 },
      { rollout_id: "r5", attempt: 0 },
    ]);
  });

  it("renews every lease", async () => {
    const { participants } = await deploy(FULL);
    await prepare(participants, "c1", deadline());
    const far = deadline(10_000);
    const replies = await renew(participants, "c1", far);
    for (const reply of Object.values(replies)) expect(reply.lease_expires_at).toBe(far + 600);
    const statuses = await status(participants);
    for (const s of Object.values(statuses)) expect(s.lease_expires_at).toBe(far + 600);
  });

  it("keeps resuming later stages when one fails and reports the failures together", async () => {
    const { participants, servers } = await deploy(FULL);
    await prepare(participants, "c1", deadline());
    // The agent goes away: its stage fails, the stages after it still resume.
    await servers.find((s) => s.name === "agent")!.close();
    calls.length = 0;
    const error = (await resume(participants, "c1", deadline()).catch(
      (e: unknown) => e,
    )) as CoordinationError;
    expect(error).toBeInstanceOf(CoordinationError);
    expect(Object.keys(error.failures)).toEqual(["agent"]);
    expect(new Set(calls)).toEqual(
      new Set(["counter:open", "weather:open", "policy:open", "env:open"]),
    );
  });
});

/** A deployment whose every participant holds `r1`, checkpointed as `c1` into `dir`, resumed. */
async function checkpointR1(): Promise<void> {
  const { participants, byName } = await deploy(FULL);
  for (const p of byName.values()) p.episodes = [episodeId("r1")];
  await prepare(participants, "c1", deadline());
  await commit(participants, {
    checkpointId: "c1",
    checkpointDir: dir,
    episodeIds: null,
    deadlineTs: deadline(),
  });
  await resume(participants, "c1", deadline());
}

describe("restore", () => {
  it("restores all participants and names the replacements", async () => {
    await checkpointR1();

    const fresh = await deploy(FULL);
    const replies = await restore(fresh.participants, {
      checkpointId: "c1",
      checkpointDir: dir,
      episodeIds: [episodeId("r1")],
      deadlineTs: deadline(),
    });
    for (const reply of Object.values(replies)) expect(reply.restored).toEqual(["r1-a1"]);
  });

  it("is all or nothing: on failure retires the replacements, resumes everyone, raises the restore error", async () => {
    await checkpointR1();

    const fresh = await deploy(FULL);
    fresh.byName.get("weather")!.failInstall = true;
    calls.length = 0;
    const error = (await restore(fresh.participants, {
      checkpointId: "c1",
      checkpointDir: dir,
      episodeIds: [episodeId("r1")],
      deadlineTs: deadline(),
    }).catch((e: unknown) => e)) as CoordinationError;
    expect(error).toBeInstanceOf(CoordinationError);
    expect(error.operation).toBe("restore");
    expect(Object.keys(error.failures)).toEqual(["weather"]);
    const replacement = captureKey(nextAttempt(episodeId("r1")));
    for (const name of Object.keys(FULL)) {
      expect(calls).toContain(`${name}:retire:${replacement}`);
    }
    const statuses = await status(fresh.participants);
    for (const s of Object.values(statuses)) expect(s.phase).toBe("idle");
  });

  it("retires the replacements even when every participant refused (a retried restore)", async () => {
    await checkpointR1();

    const fresh = await deploy(FULL);
    const options = {
      checkpointId: "c1",
      checkpointDir: dir,
      episodeIds: [episodeId("r1")],
      deadlineTs: deadline(),
    };
    await restore(fresh.participants, options);
    await resume(fresh.participants, "c1", deadline());
    // The same command again: c1 was resumed, so every participant refuses it at once. The
    // rollback does not tell refusals apart: the replacement r1-a1 is retired everywhere.
    calls.length = 0;
    const error = (await restore(fresh.participants, options).catch(
      (e: unknown) => e,
    )) as CoordinationError;
    expect(error).toBeInstanceOf(CoordinationError);
    expect(new Set(Object.values(error.codes()))).toEqual(new Set(["stale_checkpoint"]));
    for (const name of Object.keys(FULL)) expect(calls).toContain(`${name}:retire:r1-a1`);
  });

  it("fences the crashed attempts and their replacements when every participant refused (a mistyped directory)", async () => {
    await checkpointR1();

    const fresh = await deploy(FULL);
    calls.length = 0;
    const error = (await restore(fresh.participants, {
      checkpointId: "c1",
      checkpointDir: `${dir}-mistyped`,
      episodeIds: [episodeId("r1")],
      deadlineTs: deadline(),
    }).catch((e: unknown) => e)) as CoordinationError;
    expect(error).toBeInstanceOf(CoordinationError);
    expect(Object.keys(error.failures).sort()).toEqual(Object.keys(FULL).sort());
    // Retiring r1-a1 marks the rollout retired through attempt 1: attempt 0, which the fresh
    // processes never saw, is refused too.
    for (const name of Object.keys(FULL)) expect(calls).toContain(`${name}:retire:r1-a1`);
    const statuses = await status(fresh.participants);
    for (const s of Object.values(statuses)) {
      expect(s.phase).toBe("idle");
      expect(s.retired_rollouts).toBe(1);
    }
  });

  it("still retires the replacements on later stages when an earlier stage's retire fails", async () => {
    await checkpointR1();

    const fresh = await deploy(FULL);
    fresh.byName.get("weather")!.failInstall = true;
    fresh.byName.get("env")!.failRetire = true;
    calls.length = 0;
    await expect(
      restore(fresh.participants, {
        checkpointId: "c1",
        checkpointDir: dir,
        episodeIds: [episodeId("r1")],
        deadlineTs: deadline(),
      }),
    ).rejects.toThrow(CoordinationError);
    for (const name of ["agent", "policy", "counter", "weather"]) {
      expect(calls).toContain(`${name}:retire:r1-a1`);
    }
    const statuses = await status(fresh.participants);
    for (const s of Object.values(statuses)) expect(s.phase).toBe("idle");
  });
});

describe("deadlines", () => {
  it("accept fractional deadlines (microseconds, as a Python controller sends them)", async () => {
    const { participants } = await deploy(FULL);
    const result = await prepare(participants, "c1", Date.now() / 1000 + 30.000123);
    expect(result.prepared).toBe(true);
    await resume(participants, "c1", Date.now() / 1000 + 30.5);
  });

  it("accept a deadline beyond setTimeout's range without timing out early", async () => {
    const { participants } = await deploy(FULL);
    const monthAhead = Date.now() / 1000 + 30 * 24 * 3600;
    expect((await prepare(participants, "c1", monthAhead)).prepared).toBe(true);
    await resume(participants, "c1", monthAhead);
  });

  it.each([
    ["milliseconds for seconds", Date.now() + 30_000, /Unix seconds, not milliseconds/],
    ["not a number", Number.NaN, /finite number of Unix seconds/],
  ])("refuse a deadline given in %s before calling anyone", async (_case, deadlineTs, message) => {
    const { participants } = await deploy(FULL);
    const spy = vi.spyOn(participants.client, "control");
    await expect(prepare(participants, "c1", deadlineTs)).rejects.toThrow(RangeError);
    await expect(resume(participants, "c1", deadlineTs)).rejects.toThrow(message);
    expect(spy).not.toHaveBeenCalled();
  });
});

describe("the CLI's commit with no scope (commitEverywhere)", () => {
  it("commits the others with null, then the model with exactly what they exported, each with its own deadline", async () => {
    const { participants, byName } = await deploy(FULL);
    for (const [name, p] of byName) {
      p.episodes = name === "policy" ? [episodeId("r1"), episodeId("done")] : [episodeId("r1")];
    }
    byName.get("counter")!.episodes = [episodeId("r1"), episodeId("r2")];
    await prepare(participants, "c1", deadline());
    const spy = vi.spyOn(participants.client, "control");
    let deadlines = 0;
    const replies = await commitEverywhere(participants, {
      checkpointId: "c1",
      checkpointDir: dir,
      episodeIds: null,
      deadlineTs: () => deadline(30 + deadlines++),
    });
    const bodies = spy.mock.calls.map(
      (call) =>
        JSON.parse(Buffer.from(call[2] as Uint8Array).toString("utf8")) as {
          episode_ids: unknown;
          deadline_ts: number;
        },
    );
    expect(new Set(bodies.map((body) => JSON.stringify(body.episode_ids)))).toEqual(
      new Set([
        "null",
        JSON.stringify([
          { rollout_id: "r1", attempt: 0 },
          { rollout_id: "r2", attempt: 0 },
        ]),
      ]),
    );
    expect(deadlines).toBe(2);
    // The model left out what no one else holds ("done": a finished rollout).
    expect(replies.policy?.episode_ids).toEqual(["r1"]);
    expect(replies.counter?.episode_ids).toEqual(["r1", "r2"]);
    await resume(participants, "c1", deadline());
  });

  it("refuses when the model is the only participant: nothing says which episodes continue", async () => {
    const { participants } = await deploy({ policy: "model" });
    await prepare(participants, "c1", deadline());
    const spy = vi.spyOn(participants.client, "control");
    await expect(
      commitEverywhere(participants, {
        checkpointId: "c1",
        checkpointDir: dir,
        episodeIds: null,
        deadlineTs: () => deadline(),
      }),
    ).rejects.toThrow(/the model is the only participant/);
    await expect(
      commitEverywhere(participants, {
        checkpointId: "c1",
        checkpointDir: dir,
        episodeIds: null,
        deadlineTs: () => deadline(),
      }),
    ).rejects.toBeInstanceOf(CommitScopeRequiredError);
    expect(spy).not.toHaveBeenCalled();
    await resume(participants, "c1", deadline());
  });
});

describe("checkpoint directories", () => {
  it("send a relative directory resolved against the controller's working directory", async () => {
    const { participants, byName } = await deploy(FULL);
    for (const p of byName.values()) p.episodes = [episodeId("r1")];
    await prepare(participants, "c1", deadline());
    const spy = vi.spyOn(participants.client, "control");
    const relative = path.relative(process.cwd(), path.join(dir, "relative-commit"));
    expect(path.isAbsolute(relative)).toBe(false);
    const replies = await commit(participants, {
      checkpointId: "c1",
      checkpointDir: relative,
      episodeIds: [episodeId("r1")],
      deadlineTs: deadline(),
    });
    const body = JSON.parse(Buffer.from(spy.mock.calls[0]?.[2] as Uint8Array).toString("utf8"));
    expect(body.checkpoint_dir).toBe(path.join(dir, "relative-commit"));
    expect(Object.keys(replies)).toHaveLength(5);
    await resume(participants, "c1", deadline());
  });

  it("restore from a relative directory resolved against the controller's working directory", async () => {
    await checkpointR1();
    const relative = path.relative(process.cwd(), dir);
    expect(path.isAbsolute(relative)).toBe(false);

    // The participants refuse a relative checkpoint_dir: this restore works only if resolved.
    const fresh = await deploy(FULL);
    const replies = await restore(fresh.participants, {
      checkpointId: "c1",
      checkpointDir: relative,
      episodeIds: [episodeId("r1")],
      deadlineTs: deadline(),
    });
    for (const reply of Object.values(replies)) expect(reply.restored).toEqual(["r1-a1"]);
  });
});

describe("retire and forget", () => {
  it("retire callers first: environment, agent, then model and resources", async () => {
    const { participants } = await deploy(FULL);
    await retire(participants, "any", [episodeId("r1", 1)], deadline());
    const order = calls.map((c) => c.split(":")[0]);
    expect(order.slice(0, 2)).toEqual(["env", "agent"]);
    expect(new Set(order.slice(2))).toEqual(new Set(["policy", "counter", "weather"]));
  });

  it("forgets sorted unique rollouts in the same order", async () => {
    const { participants } = await deploy(FULL);
    await forget(participants, "any", ["b", "a", "b"], deadline());
    expect(calls.slice(0, 2)).toEqual(["env:forget:a,b", "agent:forget:a,b"]);
  });

  it("makes no call for an empty list", async () => {
    const { participants } = await deploy(FULL);
    const spy = vi.spyOn(participants.client, "control");
    expect(await retire(participants, "any", [], deadline())).toEqual({});
    expect(await forget(participants, "any", [], deadline())).toEqual({});
    expect(spy).not.toHaveBeenCalled();
  });

  it("reports a refusal with its code, naming the server", async () => {
    const { participants } = await deploy(FULL);
    await prepare(participants, "c1", deadline());
    const error = (await retire(participants, "c1", [episodeId("r1")], deadline()).catch(
      (e: unknown) => e,
    )) as CoordinationError;
    expect(error.codes().env).toBe("invalid_phase");
    expect(error.message).toContain(
      "checkpoint retire failed on 1 participant(s): env: HTTP 409 invalid_phase",
    );
  });
});
