/**
 * I/O errors injected at every failpoint of commit and restore, through the real control routes
 * of an in-process resources server: each is a typed refusal (never a 500), the checkpoint is
 * whole or absent, nothing is installed after a failed restore, and once the fault is cleared
 * the same request succeeds.
 */
import { execFileSync } from "node:child_process";
import { closeSync, constants, existsSync, openSync } from "node:fs";
import { rm } from "node:fs/promises";
import path from "node:path";
import request from "supertest";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { inspectCheckpoint } from "#sdk/cli/inspect.js";
import { ERROR_CATALOGUE } from "#sdk/errors.js";
import type { Server } from "#sdk/server/server.js";
import {
  FAILPOINTS,
  clearFailpoints,
  setFailpoint,
  type FailpointAction,
  type FailpointName,
} from "#sdk/util/failpoints.js";
import EpisodesResourcesServer from "../../fixtures/servers/episodes-resources.js";
import { controlRoutes } from "../../support/control-routes.js";
import { makeTempDir, removeTempDir } from "../../support/test-participant.js";

const TOKEN = "failpoints-token";
const { control, status } = controlRoutes(TOKEN);
const EPISODES = ["e-1", "e-2"];
const SCOPE = EPISODES.map((rollout_id) => ({ rollout_id, attempt: 0 }));
const IO_ACTIONS: readonly FailpointAction[] = ["eio", "enospc", "eacces"];

const COMMIT_POINTS: readonly FailpointName[] = FAILPOINTS.filter((point) =>
  point.startsWith("commit."),
);
/**
 * Every restore point: where real I/O runs, and the control plane's own steps (fence, install),
 * whose untyped failures are refused as 409 `checkpoint_error`.
 */
const RESTORE_POINTS: readonly FailpointName[] = FAILPOINTS.filter((point) =>
  point.startsWith("restore."),
);

let root: string;
let runs = 0;
const running: Server[] = [];

beforeAll(async () => {
  root = await makeTempDir();
});

afterEach(async () => {
  clearFailpoints();
  await Promise.all(running.splice(0).map((server) => server.close()));
});

afterAll(async () => {
  await removeTempDir(root);
});

/** A fresh fixture server holding `episodes` (a restore target holds none). */
async function start(episodes: readonly string[]): Promise<string> {
  const server = new EpisodesResourcesServer({
    name: "counter",
    config: { episodes },
    checkpoint: { enabled: true, control_auth_token: TOKEN },
    logLevel: "silent",
  });
  running.push(server);
  return (await server.listen({ port: 0 })).url;
}

function freshDir(): string {
  return path.join(root, `ckpt-${++runs}`);
}

/** A refusal must be a typed 4xx with a catalogued code: a 500 is a bug. */
function expectTypedRefusal(res: request.Response): string {
  expect(res.status, JSON.stringify(res.body)).toBeGreaterThanOrEqual(400);
  expect(res.status, JSON.stringify(res.body)).toBeLessThan(500);
  const code = (res.body as { error?: { code?: string } }).error?.code ?? "";
  expect(Object.keys(ERROR_CATALOGUE)).toContain(code);
  return code;
}

/** "whole" (a manifest, and everything verifies) or "absent" (no manifest); never half. */
async function stateOf(dir: string): Promise<"whole" | "absent"> {
  const manifest = path.join(dir, "gym", "resources", "counter", "manifest.json");
  if (!existsSync(manifest)) return "absent";
  const report = await inspectCheckpoint(dir);
  expect(report.problems).toEqual([]);
  expect(report.episodes).toEqual(EPISODES);
  return "whole";
}

async function episodesOf(url: string): Promise<{ live: string[]; pending: string[] }> {
  const res = await request(url).get("/episodes");
  expect(res.status).toBe(200);
  return res.body as { live: string[]; pending: string[] };
}

/** Commits checkpoint `id` of the server at `url` into `dir` (prepare first). */
async function commit(url: string, id: string, dir: string): Promise<request.Response> {
  return await control(url, "commit", {
    checkpoint_id: id,
    checkpoint_dir: dir,
    episode_ids: SCOPE,
  });
}

describe("commit", () => {
  const cases = COMMIT_POINTS.flatMap((point) => IO_ACTIONS.map((action) => [point, action]));

  it.each(cases)(
    "%s=%s is a 422 invalid_checkpoint_state, leaves the checkpoint whole or absent, and a retry commits",
    async (point, action) => {
      const url = await start(EPISODES);
      const dir = freshDir();
      await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
      setFailpoint(point as FailpointName, action as FailpointAction);
      const refused = await commit(url, "c1", dir);
      expect(expectTypedRefusal(refused)).toBe("invalid_checkpoint_state");
      expect((refused.body as { error: { detail: string } }).error.detail).toContain(
        (action as string).toUpperCase(),
      );
      // Only the fsync after publication comes after the manifest is in place.
      expect(await stateOf(dir)).toBe(point === "commit.published" ? "whole" : "absent");

      clearFailpoints();
      const retried = await commit(url, "c1", dir);
      expect(retried.status, JSON.stringify(retried.body)).toBe(200);
      expect(retried.body.episode_ids).toEqual(EPISODES);
      expect(await stateOf(dir)).toBe("whole");
      await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    },
  );
});

describe("restore", () => {
  let good: string;

  beforeAll(async () => {
    const url = await start(EPISODES);
    good = freshDir();
    await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    const committed = await commit(url, "c1", good);
    expect(committed.status, JSON.stringify(committed.body)).toBe(200);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
  });

  const cases = RESTORE_POINTS.flatMap((point) => IO_ACTIONS.map((action) => [point, action]));

  it.each(cases)(
    "%s=%s is a typed refusal with nothing installed, and a retry restores",
    async (point, action) => {
      const url = await start([]);
      setFailpoint(point as FailpointName, action as FailpointAction);
      const body = { checkpoint_id: "r1", checkpoint_dir: good, episode_ids: SCOPE };
      const refused = await control(url, "restore", body);
      expectTypedRefusal(refused);
      expect(await episodesOf(url)).toEqual({ live: [], pending: [] });
      expect((await status<{ phase: string }>(url)).phase).toBe("idle");

      clearFailpoints();
      // Inspect reads as a restore does: only once the fault is gone.
      expect(await stateOf(good)).toBe("whole");
      const retried = await control(url, "restore", body);
      expect(retried.status, JSON.stringify(retried.body)).toBe(200);
      expect(retried.body.restored).toEqual(["e-1-a1", "e-2-a1"]);
      expect(await episodesOf(url)).toEqual({ live: [], pending: ["e-1-a1", "e-2-a1"] });
    },
  );
});

describe("paths that cannot hold a checkpoint, over HTTP", () => {
  it("a commit into /proc/self/... is a prompt 422 naming the pseudo file system", async () => {
    const url = await start(EPISODES);
    await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    const refused = await commit(url, "c1", "/proc/self/gym-checkpoints/c1");
    expect(expectTypedRefusal(refused)).toBe("invalid_checkpoint_state");
    expect(refused.body.error.detail).toContain("pseudo file system");
    // The same ID still commits to a real directory.
    const dir = freshDir();
    expect((await commit(url, "c1", dir)).status).toBe(200);
    expect(await stateOf(dir)).toBe("whole");
  });

  it("a restore whose records file is a FIFO is a prompt 422 naming it, not a deadline", async () => {
    const source = await start(EPISODES);
    const dir = freshDir();
    await control(source, "prepare", { checkpoint_id: "c1" }).expect(200);
    const committed = await commit(source, "c1", dir);
    expect(committed.status).toBe(200);
    const pdir = path.join(dir, "gym", "resources", "counter");
    const records = path.join(pdir, committed.body.manifest.records_file as string);
    await rm(records);
    execFileSync("mkfifo", [records]);
    try {
      const url = await start([]);
      const refused = await control(url, "restore", {
        checkpoint_id: "r1",
        checkpoint_dir: dir,
        episode_ids: SCOPE,
        deadline_ts: Date.now() / 1000 + 600,
      });
      expect(expectTypedRefusal(refused)).toBe("invalid_checkpoint_state");
      expect(refused.body.error.detail).toContain(`${records}: it is a FIFO`);
      expect(await episodesOf(url)).toEqual({ live: [], pending: [] });
    } finally {
      // Lets a reader stuck on the FIFO (only without the fix) go.
      try {
        closeSync(openSync(records, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        // ENXIO: nobody is reading it.
      }
    }
  });
});
