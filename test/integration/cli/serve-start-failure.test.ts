/**
 * A failed start through the supervisor, with a real server process: what it prints comes from
 * this start's part of the server's log only (earlier runs are appended before it), and a health
 * timeout is told about `--health-timeout`, and a port another process took before the server
 * could bind it is named as such.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { planServe } from "#sdk/cli/launcher.js";
import type { Io } from "#sdk/cli/output.js";
import { supervise } from "#sdk/cli/supervisor.js";
import { writeDeployment } from "../../e2e/helpers.js";

const temp = mkdtempSync(path.join(tmpdir(), "gym-start-failure-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

const io: Io = { out: () => {}, err: () => {}, cwd: temp, env: {} };

describe("a failed start", { timeout: 60_000 }, () => {
  it("shows only this start's log lines and points a health timeout at --health-timeout", async () => {
    const deployment = writeDeployment(temp, "never-healthy.yaml");
    const logs = path.join(temp, ".gym", "logs");
    mkdirSync(logs, { recursive: true });
    writeFileSync(
      path.join(logs, "silent.log"),
      "=== gym serve: starting silent at 2025-01-01T00:00:00.000Z ===\nline of an earlier run\n",
    );
    const plan = await planServe({ deploymentFile: deployment, healthTimeoutMs: 1_500 }, io);
    let failed: { message: string; hint: string | null } | null = null;
    const code = await supervise({ ...plan, grace_ms: 1_000 }, io, {
      onReady: () => {
        throw new Error("the server must not come up");
      },
      onFailed: (message, hint) => {
        failed = { message, hint };
      },
      stopRequested: new Promise<void>(() => {}),
    });
    expect(code).toBe(1);
    const { message, hint } = failed ?? { message: "", hint: null };
    expect(message).toMatch(
      /server silent failed to start: it did not answer GET .*\/health within 1\.5 s/,
    );
    expect(message).not.toMatch(/earlier run|=== gym serve/);
    expect(hint).toMatch(/give it longer with --health-timeout 60s/);
    // The whole log keeps both runs.
    const log = readFileSync(path.join(logs, "silent.log"), "utf8");
    expect(log.match(/=== gym serve: starting silent/g)).toHaveLength(2);
  });

  it("names the port when another process takes it between the plan and the start", async () => {
    const dir = mkdtempSync(path.join(temp, "taken-"));
    const deployment = writeDeployment(dir, "good.yaml");
    const plan = await planServe({ deploymentFile: deployment, healthTimeoutMs: 30_000 }, io);
    const url = plan.deployment.servers.counter?.url ?? "";
    // Takes counter's port and answers nothing, so only the server's own exit ends the wait.
    const other = createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) =>
      other.listen(Number(new URL(url).port), "127.0.0.1", resolve),
    );
    const port = (other.address() as AddressInfo).port;
    let failed: { message: string; hint: string | null } | null = null;
    try {
      const code = await supervise({ ...plan, grace_ms: 1_000 }, io, {
        onReady: () => {
          throw new Error("counter must not come up");
        },
        onFailed: (message, hint) => {
          failed = { message, hint };
        },
        stopRequested: new Promise<void>(() => {}),
      });
      expect(code).toBe(1);
    } finally {
      await new Promise((resolve) => other.close(resolve));
    }
    const { message, hint } = failed ?? { message: "", hint: null };
    expect(message).toMatch(
      new RegExp(
        `server counter failed to start: it exited .*: port ${port} is already in use by another process`,
      ),
    );
    expect(hint).toMatch(new RegExp(`stop the process holding port ${port} \\(server counter\\)`));
    expect(hint).not.toMatch(/fix the server/);
  });
});
