/**
 * Clock skew in real processes: the fixture resources server runs on its own (`serveMain`)
 * under Debian's `faketime`, its clock shifted from this controller's. A small shift (±2 s) is
 * measured at discovery and tolerated: each deadline is sent in the server's clock, so its lease
 * ends when the controller meant it to; a large one (±60 s) refuses prepare before the server is
 * asked anything. Skipped only where `faketime` is not installed (CI installs it).
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ClockSkewError,
  commit,
  discover,
  prepare,
  resume,
  status,
  type Participants,
} from "#sdk/client/coordination.js";
import { ServerClient } from "#sdk/client/server-client.js";
import type { ResolvedServer } from "#sdk/wire/deployment.js";
import { FIXTURES, REPO } from "./helpers.js";

const TOKEN = "clock-skew-e2e-token";
const GRACE = 600;
const SHIFTS = ["+2", "-2", "+60", "-60"] as const;
type Shift = (typeof SHIFTS)[number];

const FAKETIME = spawnSync("faketime", ["--version"], { stdio: "ignore" }).error === undefined;
if (!FAKETIME) {
  console.warn(
    "clock-skew e2e skipped: `faketime` is not installed (Debian package faketime: apt-get install faketime)",
  );
}

let root: string;
const children: ChildProcess[] = [];
const urls = new Map<Shift, string>();

/** Starts the fixture server with its clock `shift` seconds off; resolves with its URL. */
async function serve(shift: Shift): Promise<string> {
  const child = spawn(
    "faketime",
    [
      "-f",
      `${shift}s`,
      process.execPath,
      "--import",
      "tsx",
      path.join(FIXTURES, "servers", "episodes-resources.ts"),
      "--port",
      "0",
      "--name",
      "counter",
      "--checkpoint-token",
      TOKEN,
    ],
    {
      cwd: REPO,
      // Only the wall clock moves: timers and performance.now() keep real time.
      env: { ...process.env, LOG_LEVEL: "warn", DONT_FAKE_MONOTONIC: "1" },
      stdio: ["ignore", "pipe", "pipe"],
      // Its own process group: faketime and the server it runs are stopped together.
      detached: true,
    },
  );
  children.push(child);
  let output = "";
  return await new Promise<string>((resolve, reject) => {
    const bound = setTimeout(
      () => reject(new Error(`no start within 60 s under faketime ${shift}s:\n${output}`)),
      60_000,
    );
    const read = (chunk: Buffer): void => {
      output += chunk.toString("utf8");
      const url = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output)?.[1];
      if (url !== undefined) {
        clearTimeout(bound);
        resolve(url);
      }
    };
    child.stdout?.on("data", read);
    child.stderr?.on("data", read);
    child.once("exit", (code) => {
      clearTimeout(bound);
      reject(new Error(`exited (${code}) under faketime ${shift}s:\n${output}`));
    });
  });
}

function resourcesAt(url: string): ResolvedServer {
  const { hostname, port } = new URL(url);
  return { kind: "resources", url, host: hostname, port: Number(port), num_workers: 1, config: {} };
}

async function participantsOf(shift: Shift): Promise<Participants> {
  const client = new ServerClient({
    checkpoint: { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: GRACE },
    servers: { counter: resourcesAt(urls.get(shift) as string) },
  });
  return await discover(client, TOKEN, { requireModel: false, probeTimeoutMs: 10_000 });
}

describe.skipIf(!FAKETIME)("a participant whose clock is off (faketime)", () => {
  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), "gym-e2e-clock-"));
    // At once: each start is mostly tsx compiling, on the machine's two cores.
    const started = await Promise.all(SHIFTS.map(async (shift) => await serve(shift)));
    SHIFTS.forEach((shift, i) => urls.set(shift, started[i] as string));
  }, 90_000);

  afterAll(async () => {
    await Promise.all(
      children.map(async (child) => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = new Promise((resolve) => child.once("exit", resolve));
        process.kill(-(child.pid as number), "SIGKILL");
        await exited;
      }),
    );
    rmSync(root, { recursive: true, force: true });
  });

  it.each([
    ["+2", 2_000],
    ["-2", -2_000],
  ] as const)(
    "%s s: measured at discovery, tolerated; the lease ends when the controller meant",
    async (shift, expectedMs) => {
      const participants = await participantsOf(shift);
      try {
        const [member] = participants.members;
        expect(member?.name).toBe("counter");
        expect(Math.abs((member?.clockOffsetMs ?? 0) - expectedMs)).toBeLessThan(300);
        expect(member?.clockUncertaintyMs).toBeLessThan(300);

        const id = `skew${shift.replace("+", "plus").replace("-", "minus")}`;
        const deadline = Date.now() / 1000 + 30;
        const prepared = await prepare(participants, id, deadline);
        expect(prepared.prepared).toBe(true);
        // The lease is deadline + grace in the server's clock: the deadline was sent in it.
        const lease = (await status(participants)).counter?.lease_expires_at ?? 0;
        const inControllerClock = lease - GRACE - (member?.clockOffsetMs ?? 0) / 1000;
        expect(Math.abs(inControllerClock - deadline)).toBeLessThan(0.01);

        const dir = path.join(root, id);
        const replies = await commit(participants, {
          checkpointId: id,
          checkpointDir: dir,
          episodeIds: [],
          deadlineTs: Date.now() / 1000 + 30,
        });
        expect(replies.counter?.phase).toBe("committed");
        await resume(participants, id, Date.now() / 1000 + 30);
        expect((await status(participants)).counter?.phase).toBe("idle");
      } finally {
        await participants.client.close();
      }
    },
  );

  it.each([
    ["+60", "ahead of"],
    ["-60", "behind"],
  ] as const)(
    "%s s: prepare is refused naming the server and its offset; nothing was prepared",
    async (shift, direction) => {
      const participants = await participantsOf(shift);
      try {
        const error = await prepare(participants, "skew-refused", Date.now() / 1000 + 30).catch(
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(ClockSkewError);
        const offsetMs = (error as ClockSkewError).offsetsMs.counter ?? 0;
        expect(Math.abs(Math.abs(offsetMs) - 60_000)).toBeLessThan(300);
        expect((error as Error).message).toMatch(
          new RegExp(
            `counter's clock is (59\\.\\d|60(\\.\\d)?) s ${direction} this controller's \\(bound 5 s\\): synchronise clocks`,
          ),
        );
        const after = (await status(participants)).counter;
        expect(after?.phase).toBe("idle");
        expect(after?.checkpoint_id).toBeNull();
      } finally {
        await participants.client.close();
      }
    },
  );
});
