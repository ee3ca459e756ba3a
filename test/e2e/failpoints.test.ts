/**
 * Crashes at every failpoint of commit and restore, in real processes: a resources server
 * (the fixture, run on its own through `serveMain`) started with `GYM_FAILPOINTS=<point>=crash`
 * dies by SIGKILL at that point, in the middle of a commit or a restore. The checkpoint it was
 * writing is then whole or absent, and a fresh process restores the newest whole checkpoint
 * with every committed episode. The capture ledger's points are walked with I/O errors in
 * test/integration/failpoints (they need a policy model server and its backend).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { inspectCheckpoint } from "#sdk/cli/inspect.js";
import { CONTROL_PREFIX } from "#sdk/wire/control.js";
import { FAILPOINTS, type FailpointName } from "#sdk/util/failpoints.js";
import { FIXTURES, REPO, killEverything, waitFor } from "./helpers.js";

const TOKEN = "failpoints-e2e-token";
const EPISODES = ["e-1", "e-2"];
const SCOPE = EPISODES.map((rollout_id) => ({ rollout_id, attempt: 0 }));
const RESTORED = ["e-1-a1", "e-2-a1"];

let root: string;
const children: ChildProcess[] = [];

beforeAll(() => {
  root = mkdtempSync(path.join(tmpdir(), "gym-e2e-failpoints-"));
});

afterAll(async () => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
  await killEverything(root);
  rmSync(root, { recursive: true, force: true });
});

/** One fixture server process: where it listens and how it ended. */
interface Process {
  readonly url: string;
  /** Stops the process (SIGKILL) and waits until it is gone. */
  kill(): Promise<void>;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts the fixture server holding `episodes`, with `failpoints` armed (or none). */
async function serve(
  dir: string,
  episodes: readonly string[],
  failpoints: string | null,
): Promise<Process> {
  const config = path.join(dir, `settings-${children.length}.yaml`);
  writeFileSync(config, `episodes: [${episodes.join(", ")}]\n`);
  const env: NodeJS.ProcessEnv = { ...process.env, LOG_LEVEL: "warn" };
  if (failpoints === null) delete env.GYM_FAILPOINTS;
  else env.GYM_FAILPOINTS = failpoints;
  const child = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      path.join(FIXTURES, "servers", "episodes-resources.ts"),
      "--port",
      "0",
      "--config",
      config,
      "--name",
      "counter",
      "--checkpoint-token",
      TOKEN,
    ],
    { cwd: REPO, env, stdio: ["ignore", "pipe", "pipe"] },
  );
  children.push(child);
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
  child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  const listening = (): string | null =>
    /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout)?.[1] ?? null;
  const up = await waitFor(() => listening() !== null || child.exitCode !== null, 60_000);
  const url = listening();
  if (!up || url === null) throw new Error(`the server did not start:\n${stdout}${stderr}`);
  return {
    url,
    exited,
    kill: async () => {
      child.kill("SIGKILL");
      await exited;
    },
  };
}

/** POSTs a control operation; status 0 when the connection died (the process crashed). */
async function control(
  url: string,
  op: string,
  body: Record<string, unknown>,
): Promise<{ status: number; body: Record<string, unknown> | null }> {
  try {
    const res = await fetch(`${url}${CONTROL_PREFIX}/${op}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}` },
      body: JSON.stringify({ deadline_ts: Date.now() / 1000 + 30, ...body }),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  } catch {
    return { status: 0, body: null };
  }
}

async function ok(url: string, op: string, body: Record<string, unknown>): Promise<unknown> {
  const res = await control(url, op, body);
  expect(res.status, `${op}: ${JSON.stringify(res.body)}`).toBe(200);
  return res.body;
}

async function checkpoint(url: string, id: string, dir: string) {
  await ok(url, "prepare", { checkpoint_id: id });
  return await control(url, "commit", {
    checkpoint_id: id,
    checkpoint_dir: dir,
    episode_ids: SCOPE,
  });
}

/** "whole" (manifest present and everything verifies) or "absent" (no manifest); never half. */
async function stateOf(dir: string): Promise<"whole" | "absent"> {
  if (!existsSync(path.join(dir, "gym", "resources", "counter", "manifest.json"))) return "absent";
  const report = await inspectCheckpoint(dir);
  expect(report.problems).toEqual([]);
  expect(report.episodes).toEqual(EPISODES);
  return "whole";
}

/** A fresh process (no failpoints) restores `dir` and holds every committed episode. */
async function restoresInFreshProcess(caseDir: string, dir: string): Promise<void> {
  const fresh = await serve(caseDir, [], null);
  const reply = (await ok(fresh.url, "restore", {
    checkpoint_id: "after-crash",
    checkpoint_dir: dir,
    episode_ids: SCOPE,
  })) as { restored: string[] };
  expect(reply.restored).toEqual(RESTORED);
  const held = (await (await fetch(`${fresh.url}/episodes`)).json()) as { pending: string[] };
  expect(held.pending).toEqual(RESTORED);
  await fresh.kill();
}

function newCase(): string {
  return mkdtempSync(path.join(root, "case-"));
}

const COMMIT_POINTS = FAILPOINTS.filter((point) => point.startsWith("commit."));
const RESTORE_POINTS = FAILPOINTS.filter((point) => point.startsWith("restore."));

describe.concurrent("a crash at a failpoint", { timeout: 120_000 }, () => {
  it.each(COMMIT_POINTS)(
    "%s: the second commit dies there; its checkpoint is whole or absent, and the newest whole one restores",
    async (point: FailpointName) => {
      const caseDir = newCase();
      const first = path.join(caseDir, "ckpt-1");
      const second = path.join(caseDir, "ckpt-2");
      // Armed from the second pass: the first commit goes through.
      const server = await serve(caseDir, EPISODES, `${point}=crash@2`);
      expect((await checkpoint(server.url, "c1", first)).status).toBe(200);
      await ok(server.url, "resume", { checkpoint_id: "c1" });
      const dying = await checkpoint(server.url, "c2", second);
      expect(dying.status).toBe(0);
      expect(await server.exited).toEqual({ code: null, signal: "SIGKILL" });

      expect(await stateOf(first)).toBe("whole");
      const crashed = await stateOf(second);
      // Only a crash after the manifest's link leaves the second checkpoint published.
      expect(crashed).toBe(point === "commit.published" ? "whole" : "absent");
      await restoresInFreshProcess(caseDir, crashed === "whole" ? second : first);
    },
  );

  it.each(RESTORE_POINTS)(
    "%s: the restore dies there; the checkpoint is untouched and a fresh process restores it",
    async (point: FailpointName) => {
      const caseDir = newCase();
      const good = path.join(caseDir, "ckpt");
      const source = await serve(caseDir, EPISODES, null);
      expect((await checkpoint(source.url, "c1", good)).status).toBe(200);
      await source.kill();

      const target = await serve(caseDir, [], `${point}=crash`);
      const dying = await control(target.url, "restore", {
        checkpoint_id: "r1",
        checkpoint_dir: good,
        episode_ids: SCOPE,
      });
      expect(dying.status).toBe(0);
      expect(await target.exited).toEqual({ code: null, signal: "SIGKILL" });
      expect(await stateOf(good)).toBe("whole");
      await restoresInFreshProcess(caseDir, good);
    },
  );
});
