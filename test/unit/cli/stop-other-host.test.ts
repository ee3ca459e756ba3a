/**
 * A run directory shared by several machines: `gym stop` never signals a pid another machine
 * wrote, and `gym top` / the dead-server report never judge such a pid here.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { deadServers } from "#sdk/cli/dead-servers.js";
import { readState, writeState } from "#sdk/cli/state-file.js";
import type { RunState } from "#sdk/cli/state-schema.js";
import { runGym } from "../../support/gym-in-process.js";

const dir = mkdtempSync(path.join(tmpdir(), "gym-stop-other-host-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A pid no process holds here (pid_max is at most 2^22). */
const NO_SUCH_PID = 4_194_303 + 7;

function stateOn(hostname: string, file: string): RunState {
  const state: RunState = {
    version: 1,
    deployment_file: path.join(dir, "deployment.yaml"),
    resolved_file: path.join(dir, "resolved.json"),
    deployment: { checkpoint: null, servers: {} },
    servers: {
      policy: {
        name: "policy",
        kind: "model",
        url: "http://10.0.0.2:8001",
        // This very process: signalling it would kill the test.
        pid: process.pid,
        pgid: process.pid,
        log: path.join(dir, "policy.log"),
        supervisor_pid: null,
        started_at: new Date().toISOString(),
        hostname,
        node: "gpu",
      },
    },
  };
  writeState(file, state);
  return state;
}

describe("entries another machine wrote", () => {
  it("gym stop refuses them, naming the machine, and signals nothing", async () => {
    const file = path.join(dir, "other", "run.json");
    stateOn("gpu-node-7", file);
    const outcome = await runGym({ cwd: dir }, ["stop", "--state", file]);
    expect(outcome.code).toBe(1);
    expect(outcome.err).toMatch(/policy runs on gpu-node-7, not on this machine/);
    expect(outcome.err).toMatch(/--node gpu/);
    expect(readState(file)?.servers.policy).toBeDefined();
  });

  it("are not reported dead for a pid that means nothing here", () => {
    const state = stateOn("gpu-node-7", path.join(dir, "dead", "run.json"));
    const policy = state.servers.policy;
    if (policy === undefined) throw new Error("no entry");
    const gone = { ...state, servers: { policy: { ...policy, pid: NO_SUCH_PID } } };
    expect(deadServers(gone)).toEqual([]);
    expect(
      deadServers({
        ...gone,
        servers: { policy: { ...policy, pid: NO_SUCH_PID, hostname: undefined } },
      }),
    ).toHaveLength(1);
  });
});
