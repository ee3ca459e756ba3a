/**
 * `gym ckpt checkpoint` with a checkpoint directory on a participant's own disk (a proxy moves
 * its `checkpoint_dir` under a root of its own): exit 1 naming the server, the path and the
 * host that wrote it, with what to do, and every participant resumed.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";
import EpisodesResourcesServer from "../../fixtures/servers/episodes-resources.js";
import { runGym, writeRunState } from "../../support/gym-in-process.js";
import { startNodeLocalProxy } from "../../support/node-local-proxy.js";

const TOKEN = "ckpt-shared-token";
const closing: (() => Promise<void>)[] = [];
let root: string;

beforeEach(async () => {
  root = await mkdtemp(path.join(tmpdir(), "gym-ckpt-shared-"));
});

afterEach(async () => {
  for (const close of closing.splice(0).reverse()) await close();
  await rm(root, { recursive: true, force: true });
});

describe("gym ckpt checkpoint with a node-local checkpoint directory", () => {
  it("exits 1 naming the server, the path and its host, and resumes every participant", async () => {
    const checkpoint = { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 };
    const config = { episodes: ["r1"] };
    const counter = new EpisodesResourcesServer({
      name: "counter",
      config,
      checkpoint,
      logLevel: "silent",
    });
    const { url } = await counter.listen();
    closing.push(async () => await counter.close());
    const proxy = await startNodeLocalProxy(url, path.join(root, "node-counter"));
    closing.push(async () => await proxy.close());
    const deployment: ResolvedDeployment = {
      checkpoint,
      servers: {
        counter: {
          kind: "resources",
          url: proxy.url,
          host: "127.0.0.1",
          port: proxy.port,
          num_workers: 1,
          config,
        },
      },
    };
    const stateFile = path.join(root, "run.json");
    writeRunState(
      {
        stateFile,
        deploymentFile: path.join(root, "deployment.yaml"),
        resolvedFile: path.join(root, "deployment.resolved.json"),
        logDir: path.join(root, "logs"),
      },
      deployment,
    );
    const dir = path.join(root, "ckpt");
    const { code, err } = await runGym({ cwd: root }, [
      "ckpt",
      "checkpoint",
      "--dir",
      dir,
      "--scope",
      "all",
      "--state",
      stateFile,
    ]);
    expect(err).not.toMatch(/unexpected error/);
    expect(code).toBe(1);
    expect(err).toContain(
      `counter wrote ${path.join(dir, "gym", "resources", "counter")} on host ${hostname()} (127.0.0.1), but it is not there on this machine (${hostname()})`,
    );
    expect(err).toMatch(/what to do: pass a --dir on a file system every machine mounts/);
    const status = (await (
      await fetch(`${url}/ng-control/v1/checkpoint/status`, {
        headers: { authorization: `Bearer ${TOKEN}` },
      })
    ).json()) as { phase: string };
    expect(status.phase).toBe("idle");
  });
});
