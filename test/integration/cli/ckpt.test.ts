/**
 * `gym ckpt` verbs against in-process servers (the fixture resources participant and a
 * backend), run through `runCli` with a state file pointing at them. Checks the exit status,
 * the tables, the JSON, and what the participants end up holding.
 */
import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { chooseFreePorts } from "#sdk/cli/ports.js";
import { writeState, type RunState } from "#sdk/cli/state-file.js";
import type { Server } from "#sdk/server/server.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";
import createEchoBackend from "../../fixtures/servers/echo-backend.js";
import EpisodesResourcesServer from "../../fixtures/servers/episodes-resources.js";
import { runGym, writeRunState, type GymOutcome } from "../../support/gym-in-process.js";

const TOKEN = "ckpt-test-token";
let root: string;
let runs = 0;
const running: Server[] = [];

beforeAll(async () => {
  root = await mkdtemp(path.join(tmpdir(), "gym-ckpt-"));
});

afterEach(async () => {
  await Promise.all(running.splice(0).map((server) => server.close()));
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

interface Deployment {
  readonly stateFile: string;
  readonly dir: string;
  readonly counterUrl: string;
}

/** Starts the fixture servers in this process and writes a state file naming them. */
async function deploy(
  config: Record<string, unknown> = {},
  options: { checkpoint?: boolean } = {},
): Promise<Deployment> {
  const dir = path.join(root, `run-${++runs}`);
  const ports = await chooseFreePorts([
    { name: "counter", host: "127.0.0.1" },
    { name: "echo", host: "127.0.0.1" },
  ]);
  const checkpoint =
    options.checkpoint === false
      ? null
      : { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 };
  const entry = (kind: "resources" | "backend", port: number, serverConfig: object) => ({
    kind,
    url: `http://127.0.0.1:${port}`,
    host: "127.0.0.1",
    port,
    num_workers: 1,
    config: serverConfig as Record<string, unknown>,
  });
  const deployment: ResolvedDeployment = {
    checkpoint,
    servers: {
      counter: entry("resources", ports.counter ?? 0, config),
      echo: entry("backend", ports.echo ?? 0, {}),
    },
  };
  const common = { checkpoint, deployment, logLevel: "silent" };
  const counter = new EpisodesResourcesServer({ name: "counter", config, ...common });
  const echo = createEchoBackend({ name: "echo", ...common });
  running.push(counter, echo);
  await counter.listen({ port: ports.counter });
  await echo.listen({ port: ports.echo });
  const stateFile = path.join(dir, "run.json");
  writeRunState(
    {
      stateFile,
      deploymentFile: path.join(dir, "deployment.yaml"),
      resolvedFile: path.join(dir, "deployment.resolved.json"),
      logDir: path.join(dir, "logs"),
    },
    deployment,
  );
  return { stateFile, dir, counterUrl: deployment.servers.counter?.url ?? "" };
}

/** Runs `gym` in-process as if invoked as `command` (`npx gym`, …); without it, a bare `gym`. */
async function gymAs(command: string | undefined, ...argv: string[]): Promise<GymOutcome> {
  return await runGym({ cwd: root, command }, argv);
}

async function gym(...argv: string[]): Promise<GymOutcome> {
  return await gymAs(undefined, ...argv);
}

async function episodesOf(url: string): Promise<{ live: string[]; pending: string[] }> {
  const response = await fetch(`${url}/episodes`);
  return (await response.json()) as { live: string[]; pending: string[] };
}

describe("status", () => {
  it("lists every participant, and the servers that are not participants", async () => {
    const { stateFile } = await deploy();
    const { code, out } = await gym("ckpt", "status", "--state", stateFile);
    expect(code).toBe(0);
    expect(out).toMatch(
      /SERVER\s+KIND\s+PHASE\s+CHECKPOINT\s+LEASE\s+READY\s+BLOCKERS\s+RESTARTS\s+RETIRED/,
    );
    expect(out).toMatch(/counter\s+resources\s+idle\s+-\s+-\s+yes\s+-\s+-\s+0/);
    expect(out).toMatch(/echo\s+backend\s+\(not a participant\)/);
  });

  it("prints the status replies as JSON", async () => {
    const { stateFile } = await deploy();
    const { code, out } = await gym("ckpt", "status", "--state", stateFile, "--json");
    expect(code).toBe(0);
    const json = JSON.parse(out) as {
      servers: Record<string, { phase: string; report: { counts: object } }>;
      not_participants: string[];
    };
    expect(json.servers.counter?.phase).toBe("idle");
    expect(json.servers.counter?.report.counts).toEqual({ live: 3, pending: 0 });
    expect(json.not_participants).toEqual(["echo"]);
  });

  it("exits 1 when checkpointing is off, saying how to turn it on", async () => {
    const { stateFile } = await deploy({}, { checkpoint: false });
    const { code, err } = await gym("ckpt", "status", "--state", stateFile);
    expect(code).toBe(1);
    expect(err).toMatch(/checkpointing is off/);
    expect(err).toMatch(/what to do: turn it on/);
  });

  it("exits 1 when a server is down, asking whether the deployment runs", async () => {
    const { stateFile } = await deploy();
    await Promise.all(running.splice(0).map((server) => server.close()));
    const { code, err } = await gym("ckpt", "status", "--state", stateFile);
    expect(code).toBe(1);
    expect(err).toMatch(/discovering the participants failed on 1 participant\(s\)/);
    // The SERVER column names it; the detail does not repeat the name.
    expect(err).toMatch(/counter\s+-\s+GET .* cannot connect/);
    expect(err).not.toMatch(/counter: GET/);
    expect(err).toMatch(
      /what to do: is the deployment running\? if not, start it with `gym serve .*deployment\.yaml`; if it is, see why counter did not answer in its log, .*counter\.log/,
    );
    expect(err).not.toMatch(/what to do: .*gym ckpt status/);
  });

  it("takes --deadline, bounding discovery and the status calls together", async () => {
    const { stateFile } = await deploy();
    expect((await gym("ckpt", "status", "--state", stateFile, "--deadline", "5s")).code).toBe(0);
    // A server that accepts connections and never answers: only the deadline ends the wait.
    const sockets = new Set<Socket>();
    const silent = createServer((socket) => void sockets.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const port = (silent.address() as { port: number }).port;
    const state = JSON.parse(await readFile(stateFile, "utf8")) as RunState;
    const counter = state.deployment.servers.counter;
    if (counter === undefined) throw new Error("no counter in the state file");
    state.deployment.servers.counter = { ...counter, port, url: `http://127.0.0.1:${port}` };
    writeState(stateFile, state);
    try {
      // The reply names the bound it gave up at: 1 s, not the default probe timeout.
      const { code, err } = await gym("ckpt", "status", "--state", stateFile, "--deadline", "1s");
      expect(code).toBe(1);
      expect(err).toMatch(/counter\s+-\s+no status reply within 1 seconds/);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });
});

describe("prepare, commit, resume", () => {
  it("commits the continued episodes of the last prepare and resumes", async () => {
    const { stateFile, dir } = await deploy();
    const checkpointDir = path.join(dir, "ckpt");
    const prepared = await gym("ckpt", "prepare", "--id", "p1", "--state", stateFile);
    expect(prepared.code).toBe(0);
    expect(prepared.out).toMatch(/counter\s+resources\s+prepared/);
    expect(prepared.out).toMatch(/next: gym ckpt commit --id p1 --dir DIR/);
    const last = JSON.parse(await readFile(path.join(dir, "last-prepare.json"), "utf8"));
    expect(last).toMatchObject({ checkpoint_id: "p1", prepared: true });

    const committed = await gym(
      "ckpt",
      "commit",
      "--id",
      "p1",
      "--dir",
      checkpointDir,
      "--state",
      stateFile,
      "--json",
    );
    expect(committed.code).toBe(0);
    const reply = JSON.parse(committed.out) as {
      episode_ids: null;
      replies: Record<string, { episode_ids: string[] }>;
    };
    expect(reply.episode_ids).toBeNull();
    expect(reply.replies.counter?.episode_ids).toEqual(["task-1", "task-2", "task-3"]);

    const resumed = await gym("ckpt", "resume", "--id", "p1", "--state", stateFile);
    expect(resumed.code).toBe(0);
    expect(resumed.out).toMatch(/counter\s+resources\s+idle\s+resumed/);

    const inspected = await gym("ckpt", "inspect", checkpointDir);
    expect(inspected.code).toBe(0);
    expect(inspected.out).toMatch(/3 episode\(s\), every digest verified/);
  });

  it("refuses the default scope without a recorded prepare of that ID (exit 2)", async () => {
    const { stateFile, dir } = await deploy();
    const { code, err } = await gym(
      "ckpt",
      "commit",
      "--id",
      "never",
      "--dir",
      path.join(dir, "c"),
      "--state",
      stateFile,
    );
    expect(code).toBe(2);
    expect(err).toMatch(/no prepare is recorded/);
    expect(err).toMatch(/gym ckpt prepare --id never/);
  });

  it("prints each participant's refusal code and what to do (exit 1)", async () => {
    const { stateFile, dir } = await deploy();
    const { code, err } = await gym(
      "ckpt",
      "commit",
      "--id",
      "idle",
      "--dir",
      path.join(dir, "c"),
      "--scope",
      "all",
      "--state",
      stateFile,
    );
    expect(code).toBe(1);
    expect(err).toMatch(/commit failed on 1 participant\(s\)/);
    expect(err).toMatch(/counter\s+invalid_phase\s+HTTP 409 invalid_phase/);
    expect(err).toMatch(/what to do: a participant is not in the phase this step needs/);
  });

  it("prints a refusal as JSON with --json", async () => {
    const { stateFile, dir } = await deploy();
    const { code, out } = await gym(
      "ckpt",
      "commit",
      "--id",
      "idle",
      "--dir",
      path.join(dir, "c"),
      "--scope",
      "all",
      "--state",
      stateFile,
      "--json",
    );
    expect(code).toBe(1);
    expect(JSON.parse(out)).toMatchObject({
      error: { operation: "commit", codes: { counter: "invalid_phase" } },
    });
  });

  it("exits 1 naming the blockers when the prepare deadline passes first", async () => {
    const { stateFile } = await deploy({ blockers: ["task-2"] });
    const { code, out, err } = await gym(
      "ckpt",
      "prepare",
      "--id",
      "slow",
      "--deadline",
      "300ms",
      "--state",
      stateFile,
    );
    expect(code).toBe(1);
    expect(out).toMatch(/counter\s+resources\s+preparing\s+1: task-2/);
    expect(err).toMatch(
      /checkpoint slow is not prepared: 1 blocker\(s\) on counter \(counter: task-2\)/,
    );
    expect(err).toMatch(/abort it with `gym ckpt resume --id slow`/);
    expect((await gym("ckpt", "resume", "--id", "slow", "--state", stateFile)).code).toBe(0);
  });
});

describe("restarts and the commit scope", () => {
  it("needs the episodes in flight when the prepare reported restarts, then leaves the restarts out", async () => {
    const { stateFile, dir } = await deploy({ restarts: ["task-2"] });
    const checkpointDir = path.join(dir, "ckpt");
    const prepared = await gym("ckpt", "prepare", "--id", "r1", "--state", stateFile);
    expect(prepared.code).toBe(0);
    expect(prepared.out).toMatch(/counter\s+resources\s+prepared\s+-\s+task-2/);

    const refused = await gym(
      "ckpt",
      "commit",
      "--id",
      "r1",
      "--dir",
      checkpointDir,
      "--state",
      stateFile,
    );
    expect(refused.code).toBe(2);
    expect(refused.err).toMatch(/reported 1 restart\(s\) \(task-2\)/);

    const episodes = path.join(dir, "in-flight.txt");
    await writeFile(episodes, "task-1\ntask-2\ntask-3\n");
    const committed = await gym(
      "ckpt",
      "commit",
      "--id",
      "r1",
      "--dir",
      checkpointDir,
      "--episodes",
      episodes,
      "--state",
      stateFile,
      "--json",
    );
    expect(committed.code).toBe(0);
    expect(JSON.parse(committed.out).episode_ids).toEqual(["task-1", "task-3"]);
    expect((await gym("ckpt", "resume", "--id", "r1", "--state", stateFile)).code).toBe(0);
  });

  it("checkpoint aborts (resumes) when restarts need an episodes list it was not given", async () => {
    const { stateFile, dir } = await deploy({ restarts: ["task-2"] });
    const { code, err } = await gym(
      "ckpt",
      "checkpoint",
      "--dir",
      path.join(dir, "ckpt"),
      "--state",
      stateFile,
    );
    expect(code).toBe(2);
    expect(err).toMatch(/restart\(s\) \(task-2\)/);
    expect(err).toMatch(
      /nothing was written, and ckpt-\S+ was aborted \(every participant resumed\)/,
    );
    const status = await gym("ckpt", "status", "--state", stateFile, "--json");
    expect(JSON.parse(status.out).servers.counter.phase).toBe("idle");
  });
});

describe("checkpoint, restore, retire, forget", () => {
  it("checkpoints in one go with timings, then restores into a fresh server", async () => {
    const first = await deploy();
    const checkpointDir = path.join(first.dir, "ckpt");
    const checkpoint = await gym(
      "ckpt",
      "checkpoint",
      "--dir",
      checkpointDir,
      "--state",
      first.stateFile,
      "--json",
    );
    expect(checkpoint.code).toBe(0);
    const result = JSON.parse(checkpoint.out) as {
      checkpoint_id: string;
      timings_ms: Record<string, number>;
      commit: Record<string, { episode_ids: string[] }>;
    };
    expect(result.checkpoint_id).toMatch(/^ckpt-\d{8}T\d{6}Z-[0-9a-f]{4}$/);
    expect(Object.keys(result.timings_ms)).toEqual(["prepare", "commit", "resume", "total"]);
    expect(result.commit.counter?.episode_ids).toEqual(["task-1", "task-2", "task-3"]);

    // "Crash": the servers go away; fresh ones start with the same names.
    await Promise.all(running.splice(0).map((server) => server.close()));
    const second = await deploy();
    const restored = await gym(
      "ckpt",
      "restore",
      "--id",
      "restore-1",
      "--dir",
      checkpointDir,
      "--all",
      "--state",
      second.stateFile,
    );
    expect(restored.code).toBe(0);
    expect(restored.out).toMatch(
      /counter\s+resources\s+ckpt-\S+\s+3: task-1-a1, task-2-a1, task-3-a1/,
    );
    expect(restored.out).toMatch(/gym ckpt resume --id restore-1/);
    const status = await gym("ckpt", "status", "--state", second.stateFile, "--json");
    expect(JSON.parse(status.out).servers.counter).toMatchObject({
      phase: "restored",
      checkpoint_id: "restore-1",
      retired_rollouts: 3,
    });
    expect((await episodesOf(second.counterUrl)).pending).toEqual([
      "task-1-a1",
      "task-2-a1",
      "task-3-a1",
    ]);
    expect(
      (await gym("ckpt", "resume", "--id", "restore-1", "--state", second.stateFile)).code,
    ).toBe(0);

    const retired = await gym("ckpt", "retire", "--keys", "task-1-a1", "--state", second.stateFile);
    expect(retired.code).toBe(0);
    expect(retired.out).toMatch(/counter\s+resources\s+1/);
    expect(retired.out).toMatch(/next attempts: task-1-a2/);
    expect((await episodesOf(second.counterUrl)).pending).toEqual(["task-2-a1", "task-3-a1"]);

    const forgotten = await gym(
      "ckpt",
      "forget",
      "--rollouts",
      "task-1,task-9",
      "--state",
      second.stateFile,
      "--json",
    );
    expect(forgotten.code).toBe(0);
    expect(JSON.parse(forgotten.out)).toMatchObject({
      rollout_ids: ["task-1", "task-9"],
      replies: { counter: { forgotten_count: expect.any(Number) } },
    });
  });

  it("restores the episodes of a file and resumes with --resume", async () => {
    const first = await deploy();
    const checkpointDir = path.join(first.dir, "ckpt");
    expect(
      (await gym("ckpt", "checkpoint", "--dir", checkpointDir, "--state", first.stateFile)).code,
    ).toBe(0);
    await Promise.all(running.splice(0).map((server) => server.close()));
    const second = await deploy({ episodes: [] });
    const episodes = path.join(second.dir, "restore.txt");
    await writeFile(episodes, "task-2\n");
    const { code, out } = await gym(
      "ckpt",
      "restore",
      "--id",
      "restore-2",
      "--dir",
      checkpointDir,
      "--episodes",
      episodes,
      "--resume",
      "--state",
      second.stateFile,
    );
    expect(code).toBe(0);
    expect(out).toMatch(/restored 1 episode\(s\) as their next attempts: task-2-a1/);
    expect(out).toMatch(/every participant resumed/);
    const status = await gym("ckpt", "status", "--state", second.stateFile, "--json");
    expect(JSON.parse(status.out).servers.counter.phase).toBe("idle");
  });

  it("resolves a relative --dir against the working directory, for checkpoint and restore", async () => {
    // The participants refuse a relative checkpoint_dir: both steps work only if it is resolved.
    const first = await deploy();
    const inRun = (...argv: string[]) => runGym({ cwd: first.dir }, argv);
    const checkpoint = await inRun(
      "ckpt",
      "checkpoint",
      "--dir",
      "ckpt",
      "--state",
      first.stateFile,
    );
    expect(checkpoint.code, checkpoint.err).toBe(0);
    expect(checkpoint.out).toContain(path.join(first.dir, "ckpt"));
    expect((await gym("ckpt", "inspect", path.join(first.dir, "ckpt"))).code).toBe(0);

    await Promise.all(running.splice(0).map((server) => server.close()));
    const second = await deploy();
    const restored = await inRun(
      "ckpt",
      "restore",
      "--id",
      "restore-rel",
      "--dir",
      "ckpt",
      "--all",
      "--state",
      second.stateFile,
    );
    expect(restored.code, restored.err).toBe(0);
    expect((await episodesOf(second.counterUrl)).pending).toEqual([
      "task-1-a1",
      "task-2-a1",
      "task-3-a1",
    ]);
  });

  it("restore without --id takes the ID the directory's manifests name, and says so", async () => {
    const first = await deploy();
    const checkpointDir = path.join(first.dir, "ckpt");
    const checkpoint = await gym(
      "ckpt",
      "checkpoint",
      "--dir",
      checkpointDir,
      "--state",
      first.stateFile,
      "--json",
    );
    expect(checkpoint.code, checkpoint.err).toBe(0);
    const id = (JSON.parse(checkpoint.out) as { checkpoint_id: string }).checkpoint_id;
    await Promise.all(running.splice(0).map((server) => server.close()));
    const second = await deploy();
    const restored = await gym(
      "ckpt",
      "restore",
      "--dir",
      checkpointDir,
      "--all",
      "--state",
      second.stateFile,
    );
    expect(restored.code, restored.err).toBe(0);
    expect(restored.err).toContain(
      `gym: no --id given: restoring checkpoint ${id}, the ID the manifests in ` +
        `${path.relative(root, checkpointDir)} name`,
    );
    expect(restored.out).toMatch(new RegExp(`gym ckpt resume --id ${id}`));
    const status = await gym("ckpt", "status", "--state", second.stateFile, "--json");
    expect(JSON.parse(status.out).servers.counter).toMatchObject({
      phase: "restored",
      checkpoint_id: id,
    });
  });

  it("restore without --id from a gym collect directory takes the checkpoint LATEST names", async () => {
    const first = await deploy();
    const collection = path.join(first.dir, "collection");
    const id = "run1-s1-c2";
    const checkpointDir = path.join(collection, "checkpoints", id);
    // What a collection leaves: the participants' commit, its collection manifest, LATEST.
    const committed = await gym(
      "ckpt",
      "checkpoint",
      "--dir",
      checkpointDir,
      "--state",
      first.stateFile,
    );
    expect(committed.code, committed.err).toBe(0);
    const manifest = {
      format: 1,
      run_id: "run1",
      session: 1,
      checkpoint_id: id,
      created_at: new Date().toISOString(),
      continued: [],
      restarted: [],
    };
    await writeFile(path.join(checkpointDir, "collection.json"), JSON.stringify(manifest));
    await writeFile(path.join(collection, "LATEST"), `${id}\n`);
    await Promise.all(running.splice(0).map((server) => server.close()));
    const second = await deploy();
    const restored = await gym(
      "ckpt",
      "restore",
      "--dir",
      collection,
      "--all",
      "--json",
      "--state",
      second.stateFile,
    );
    expect(restored.code, restored.err).toBe(0);
    expect(restored.err).toContain(
      `gym: no --id given: restoring checkpoint ${id}, the latest checkpoint the collection in ` +
        `${path.relative(root, collection)} published (its LATEST), from ${path.relative(root, checkpointDir)}`,
    );
    expect(JSON.parse(restored.out)).toMatchObject({
      checkpoint_id: id,
      checkpoint_dir: checkpointDir,
      restored: ["task-1-a1", "task-2-a1", "task-3-a1"],
    });
  });

  it("restore without --id refuses a directory whose manifests name several checkpoints", async () => {
    const { stateFile, dir } = await deploy();
    const checkpointDir = path.join(dir, "ckpt");
    expect(
      (await gym("ckpt", "checkpoint", "--dir", checkpointDir, "--state", stateFile)).code,
    ).toBe(0);
    // A second participant whose manifest names another checkpoint.
    const counter = path.join(checkpointDir, "gym", "resources", "counter");
    const other = path.join(checkpointDir, "gym", "resources", "other");
    await cp(counter, other, { recursive: true });
    const file = path.join(other, "manifest.json");
    const manifest = JSON.parse(await readFile(file, "utf8")) as Record<string, unknown>;
    await writeFile(
      file,
      JSON.stringify({ ...manifest, instance: "other", checkpoint_id: "older" }),
    );
    const { code, err } = await gym(
      "ckpt",
      "restore",
      "--dir",
      checkpointDir,
      "--all",
      "--state",
      stateFile,
    );
    expect(code).toBe(2);
    expect(err).toMatch(
      /the participants in .*ckpt hold different checkpoints, so there is no one to pick: .*older \(resources\/other\)/,
    );
    expect(err).toMatch(/what to do: pass the restore's ID with --id ID/);
    const status = await gym("ckpt", "status", "--state", stateFile, "--json");
    expect(JSON.parse(status.out).servers.counter.phase).toBe("idle");
  });

  it("restore without --id from a directory holding no checkpoint is bad usage (exit 2)", async () => {
    const { stateFile, dir } = await deploy();
    const episodes = path.join(dir, "restore.txt");
    await writeFile(episodes, "task-1\n");
    const { code, err } = await gym(
      "ckpt",
      "restore",
      "--dir",
      dir,
      "--episodes",
      episodes,
      "--state",
      stateFile,
    );
    expect(code).toBe(2);
    expect(err).toMatch(/there is no checkpoint at .*: it has no gym\/ directory/);
  });

  it("refuses to restore --all from a corrupt checkpoint before contacting anyone", async () => {
    const { stateFile, dir } = await deploy();
    const checkpointDir = path.join(dir, "ckpt");
    expect(
      (await gym("ckpt", "checkpoint", "--dir", checkpointDir, "--state", stateFile)).code,
    ).toBe(0);
    await rm(path.join(checkpointDir, "gym", "resources", "counter", "manifest.json"));
    const { code, err } = await gym(
      "ckpt",
      "restore",
      "--id",
      "r",
      "--dir",
      checkpointDir,
      "--all",
      "--state",
      stateFile,
    );
    expect(code).toBe(1);
    expect(err).toMatch(/cannot list the episodes .* it is corrupt/);
    expect(err).toMatch(/resources\/counter: missing manifest/);
    const status = await gym("ckpt", "status", "--state", stateFile, "--json");
    expect(JSON.parse(status.out).servers.counter.phase).toBe("idle");
  });

  it("a failed restore is all or nothing: the participants end idle", async () => {
    const first = await deploy();
    const checkpointDir = path.join(first.dir, "ckpt");
    expect(
      (await gym("ckpt", "checkpoint", "--dir", checkpointDir, "--state", first.stateFile)).code,
    ).toBe(0);
    await Promise.all(running.splice(0).map((server) => server.close()));
    const second = await deploy();
    const file = path.join(checkpointDir, "gym", "resources", "counter", "manifest.json");
    const manifest = JSON.parse(await readFile(file, "utf8")) as Record<string, unknown>;
    await writeFile(file, JSON.stringify({ ...manifest, record_count: 9 }));
    const episodes = path.join(second.dir, "restore.txt");
    await writeFile(episodes, "task-1\n");
    const { code, err } = await gym(
      "ckpt",
      "restore",
      "--id",
      "r",
      "--dir",
      checkpointDir,
      "--episodes",
      episodes,
      "--state",
      second.stateFile,
    );
    expect(code).toBe(1);
    expect(err).toMatch(/counter\s+invalid_checkpoint_state/);
    expect(err).toMatch(
      /what to do: the checkpoint directory cannot be restored from \(see DETAIL\): check it with `gym ckpt inspect DIR`/,
    );
    const status = await gym("ckpt", "status", "--state", second.stateFile, "--json");
    expect(JSON.parse(status.out).servers.counter.phase).toBe("idle");
  });
});

describe("what to do follows what went wrong", () => {
  it("a checkpoint into a directory already used says to use a fresh --dir", async () => {
    const { stateFile, dir } = await deploy();
    const checkpointDir = path.join(dir, "ckpt");
    expect(
      (await gym("ckpt", "checkpoint", "--dir", checkpointDir, "--state", stateFile)).code,
    ).toBe(0);
    const again = await gym("ckpt", "checkpoint", "--dir", checkpointDir, "--state", stateFile);
    expect(again.code).toBe(1);
    expect(again.err).toMatch(
      /counter\s+invalid_checkpoint_state\s+.*already holds a different commit/,
    );
    expect(again.err).toMatch(
      /what to do: the directory already holds another checkpoint's commit: write each checkpoint to a fresh directory \(a new --dir\)/,
    );
    expect(again.err).not.toMatch(/what to do: .*gym ckpt inspect/);
  });

  it("restore --all from a directory holding no checkpoint is bad usage (exit 2)", async () => {
    const { stateFile, dir } = await deploy();
    const { code, err } = await gym(
      "ckpt",
      "restore",
      "--id",
      "r",
      "--dir",
      path.join(dir, "nope"),
      "--all",
      "--state",
      stateFile,
    );
    expect(code).toBe(2);
    expect(err).toMatch(/there is no checkpoint at .*nope: .* does not exist/);
  });
});

describe("next steps and advice name gym the way it was invoked", () => {
  it("prepare and commit print their next steps as `npm run gym -- …`", async () => {
    const { stateFile } = await deploy();
    const npm = (...argv: string[]) => gymAs("npm run gym --", ...argv);
    const prepared = await npm("ckpt", "prepare", "--id", "n1", "--state", stateFile);
    expect(prepared.code).toBe(0);
    expect(prepared.out).toMatch(/^next: npm run gym -- ckpt commit --id n1 --dir DIR$/m);
    const committed = await npm(
      "ckpt",
      "commit",
      "--id",
      "n1",
      "--dir",
      "n1",
      "--state",
      stateFile,
    );
    expect(committed.code).toBe(0);
    expect(committed.out).toMatch(
      /^next: npm run gym -- ckpt resume --id n1 \(check it with npm run gym -- ckpt inspect n1\)$/m,
    );
    expect(committed.out).not.toMatch(/gym ckpt/);
    expect((await npm("ckpt", "resume", "--id", "n1", "--state", stateFile)).code).toBe(0);
  });

  it("a refusal's advice and a down deployment's advice say `npx gym …`", async () => {
    const { stateFile, dir } = await deploy();
    const refused = await gymAs(
      "npx gym",
      "ckpt",
      "commit",
      "--id",
      "idle",
      "--dir",
      path.join(dir, "c"),
      "--scope",
      "all",
      "--state",
      stateFile,
    );
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(
      /what to do: a participant is not in the phase .*see `npx gym ckpt status`/,
    );

    await Promise.all(running.splice(0).map((server) => server.close()));
    const down = await gymAs("npx gym", "ckpt", "status", "--state", stateFile);
    expect(down.code).toBe(1);
    expect(down.err).toMatch(/start it with `npx gym serve .*deployment\.yaml`/);
  });
});

describe("retire takes a file with --episodes, as every verb does, or --keys inline", () => {
  it("retires the capture keys of an --episodes file", async () => {
    const { stateFile, dir, counterUrl } = await deploy();
    const file = path.join(dir, "keys.txt");
    await writeFile(file, "# to retire\ntask-2\n");
    const { code, out } = await gym("ckpt", "retire", "--episodes", file, "--state", stateFile);
    expect(code).toBe(0);
    expect(out).toMatch(/retired task-2 \(and earlier attempts\); next attempts: task-2-a1/);
    expect((await episodesOf(counterUrl)).live).toEqual(["task-1", "task-3"]);
  });

  it("refuses --episodes naming no file instead of retiring a rollout of that name", async () => {
    const { stateFile, counterUrl } = await deploy();
    const { code, err } = await gym(
      "ckpt",
      "retire",
      "--episodes",
      "keys.txt",
      "--state",
      stateFile,
    );
    expect(code).toBe(2);
    expect(err).toMatch(/cannot read the episodes file .*keys\.txt/);
    expect(err).toMatch(/what to do: .*use --keys KEY\[,KEY\]/);
    expect((await episodesOf(counterUrl)).live).toEqual(["task-1", "task-2", "task-3"]);
  });
});
