/**
 * The session secret under the real `gym serve`, with two workers behind the counter: without
 * checkpointing and without a configured secret the coordinator hands its workers one random
 * secret, so a cookie minted on one worker verifies on the other and every session keeps its
 * count; a configured secret signs the cookies and shows in no file of the run, no log, no
 * `gym ckpt status` output and no OpenAPI document.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { decodeSessionCookie } from "#sdk/server/resources/session-cookie.js";
import { SessionSecret } from "#sdk/server/session-secret.js";
import { REPO, gym, killEverything, stateServers } from "./helpers.js";
import { cookieOwner, postFresh } from "./workers-harness.js";

const COOKIE = "CounterServer___counter";
const SECRET = "e2e-session-secret-never-shown-4711";
const TOKEN = "session-secret-e2e-token";
const SESSIONS = 6;
const TARGET = 3;
const VERIFY = { responses_create_params: { input: [] }, response: { output: [] } };
const dirs: string[] = [];

afterAll(async () => {
  for (const dir of dirs) {
    await killEverything(dir, [path.join(dir, "run.json")]);
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A run of the counter with two workers. */
interface Run {
  readonly dir: string;
  readonly stateFile: string;
  readonly url: string;
}

/** Serves the counter with two workers, checkpointing and a configured secret as asked. */
async function serve(options: { checkpoint: boolean; secret: boolean }): Promise<Run> {
  const dir = mkdtempSync(path.join(tmpdir(), "gym-session-secret-"));
  dirs.push(dir);
  // Built, and given 120 s: three processes start at once on a loaded machine.
  const entrypoint = path.join(REPO, "reference-servers", "counter", "dist", "index.js");
  const file = path.join(dir, "deployment.yaml");
  const lines = [
    ...(options.checkpoint
      ? ["checkpoint:", "  enabled: true", `  control_auth_token: ${TOKEN}`]
      : []),
    "servers:",
    "  counter:",
    "    kind: resources",
    `    entrypoint: ${entrypoint}`,
    "    num_workers: 2",
    ...(options.secret ? ['    session_secret: "${GYM_E2E_SESSION_SECRET}"'] : []),
  ];
  writeFileSync(file, `${lines.join("\n")}\n`);
  const stateFile = path.join(dir, "run.json");
  const served = await gym(
    ["serve", file, "--detach", "--state", stateFile, "--health-timeout", "120s"],
    {
      timeoutMs: 180_000,
      compiled: true,
      env: { ...process.env, GYM_E2E_SESSION_SECRET: SECRET },
    },
  );
  if (served.code !== 0) throw new Error(`gym serve failed:\n${served.stderr}`);
  expect(`${served.stdout}${served.stderr}`).not.toContain(SECRET);
  const counter = stateServers(stateFile).find((server) => server.name === "counter");
  if (counter === undefined) throw new Error("counter is not running");
  return { dir, stateFile, url: counter.url };
}

/**
 * Seeds sessions over fresh connections, then counts each to its target and verifies it, each
 * request over a fresh connection (consecutive connections reach consecutive workers, so many
 * of them land on the worker that does not own the session). Returns the cookies.
 */
async function countEverySession(url: string): Promise<string[]> {
  const cookies: string[] = [];
  for (let i = 0; i < SESSIONS; i++) {
    const seeded = await postFresh(url, `/ng-rollout/r${i}/seed_session`, {
      resources_session_id: `s${i}`,
      episode_id: { rollout_id: `r${i}`, attempt: 0 },
      task_id: { taskset: "t", task_id: String(i) },
      task_data: { target: TARGET },
    });
    expect(seeded.status, JSON.stringify(seeded.body)).toBe(200);
    cookies.push(seeded.setCookie ?? "");
  }
  expect(new Set(cookies.map(cookieOwner)).size).toBe(2);
  for (const [i, cookie] of cookies.entries()) {
    for (let step = 0; step < TARGET; step++) {
      const incremented = await postFresh(
        url,
        `/ng-rollout/r${i}/increment_counter`,
        { count: 1 },
        { cookie },
      );
      expect(incremented.body, `session ${i}`).toEqual({ success: true });
    }
    const verified = await postFresh(url, `/ng-rollout/r${i}/verify`, VERIFY, { cookie });
    expect((verified.body as { reward: number }).reward, `session ${i}`).toBe(1);
  }
  return cookies;
}

/** Every file under `dir`, recursively. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const file = path.join(dir, name);
    return statSync(file).isDirectory() ? filesUnder(file) : [file];
  });
}

describe("session secrets under gym serve with two workers", { timeout: 240_000 }, () => {
  it("share one random secret without checkpointing: cookies verify on either worker", async () => {
    const run = await serve({ checkpoint: false, secret: false });
    await countEverySession(run.url);
    const log = readFileSync(path.join(run.dir, "logs", "counter.log"), "utf8");
    expect(log.match(/"session_secret":"random"/g)).toHaveLength(2);
    await gym(["stop", "--state", run.stateFile], { compiled: true });
  });

  it("sign with the configured secret, which no file, log, status or document shows", async () => {
    const run = await serve({ checkpoint: true, secret: true });
    const cookies = await countEverySession(run.url);
    const key = SessionSecret.configured(SECRET).keyFor(COOKIE);
    for (const [i, cookie] of cookies.entries()) {
      expect(decodeSessionCookie(cookie.slice(COOKIE.length + 1), key)).toBe(`s${i}`);
    }
    const status = await gym(["ckpt", "status", "--state", run.stateFile, "--json"], {
      compiled: true,
    });
    expect(status.code, status.stderr).toBe(0);
    const openapi = await (await fetch(`${run.url}/openapi.json`)).text();
    for (const text of [status.stdout, status.stderr, openapi]) expect(text).not.toContain(SECRET);
    const files = filesUnder(run.dir);
    expect(files.map((file) => path.basename(file))).toEqual(
      expect.arrayContaining(["run.json", "deployment.resolved.json", "counter.log"]),
    );
    for (const file of files) {
      expect(readFileSync(file, "utf8"), file).not.toContain(SECRET);
    }
    const log = readFileSync(path.join(run.dir, "logs", "counter.log"), "utf8");
    expect(log.match(/"session_secret":"configured"/g)).toHaveLength(2);
    await gym(["stop", "--state", run.stateFile], { compiled: true });
    expect(readFileSync(path.join(run.dir, "logs", "counter.log"), "utf8")).not.toContain(SECRET);
  });
});
