/**
 * Every template as an author gets it: scaffolded without prompts into a temporary directory,
 * installed (by default the SDK packed into the project's vendor/; one kind from a checkout that
 * is deleted before the project installs, one linked to this checkout's sdk/ with `--sdk`, one
 * from a tarball passed with `--sdk`; two resources kinds whose manifest and vendored SDK are
 * the first's get its installed tree hard-linked instead of installing the same tree again),
 * typechecked, built, its own tests run, then
 * served under `gym serve` from its deployment file and checkpointed with `gym ckpt checkpoint`.
 * The exported resources server also survives a real crash: killed, served again, restored.
 * One kind at a time: each step is a child process and CI has two cores.
 */
import {
  cpSync,
  existsSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createHash } from "node:crypto";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { killEverything, stateServers } from "../e2e/helpers.js";
import { BIN, REPO, exec, requireBuilt, shown, type Finished } from "./helpers.js";

const MINUTE = 60_000;

let root: string;
/** The SDK packed by `npm pack`: one project installs it instead of linking the checkout. */
let tarball: string;
const stateFiles: string[] = [];

beforeAll(async () => {
  requireBuilt();
  root = mkdtempSync(path.join(tmpdir(), "create-gym-generated-"));
  const packed = await exec("npm", ["pack", "-w", "sdk", "--pack-destination", root], {
    cwd: REPO,
    timeoutMs: MINUTE,
  });
  expect(packed.code, shown(packed)).toBe(0);
  tarball = path.join(root, packed.stdout.trim().split("\n").at(-1) ?? "");
}, 2 * MINUTE);

// Five installed projects to delete: on a loaded machine that outlasts the default hook bound.
afterAll(async () => {
  await killEverything(root, stateFiles);
  rmSync(root, { recursive: true, force: true });
}, 2 * MINUTE);

/**
 * A checkout of its own for the scaffolder to run from, installed with `npm install` like a
 * user's clone: the SDK and scaffolder packages as built here (package files, `dist/`, bins,
 * templates) under a workspace root. The caller deletes it before the project installs.
 */
async function copyOfCheckout(): Promise<string> {
  const checkout = path.join(root, "checkout");
  const copy = (from: string, to = from) =>
    cpSync(path.join(REPO, from), path.join(checkout, to), {
      recursive: true,
      filter: (source) => !source.split(path.sep).includes("node_modules"),
    });
  for (const entry of [
    "package.json",
    "bin",
    "dist",
    "src",
    "README.md",
    "LICENSE",
    "CHANGELOG.md",
  ]) {
    copy(path.join("sdk", entry));
  }
  for (const entry of readdirSync(path.join(REPO, "templates"))) {
    if (entry !== "node_modules") copy(path.join("templates", entry));
  }
  writeFileSync(
    path.join(checkout, "package.json"),
    JSON.stringify({ private: true, workspaces: ["sdk", "templates"] }),
  );
  await step(
    checkout,
    "npm",
    ["install", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts"],
    4 * MINUTE,
  );
  return checkout;
}

/** Runs a step of the project in `dir`, expecting exit 0. */
async function step(
  dir: string,
  command: string,
  args: readonly string[],
  timeoutMs = 2 * MINUTE,
): Promise<Finished> {
  const result = await exec(command, args, { cwd: dir, timeoutMs });
  expect(result.code, `${command} ${args.join(" ")} in ${dir}\n${shown(result)}`).toBe(0);
  return result;
}

/** A digest of what `npm install` makes a project's tree from: its manifest but its name, and vendor/. */
function installInput(dir: string): string {
  const { name: _name, ...manifest } = JSON.parse(
    readFileSync(path.join(dir, "package.json"), "utf8"),
  ) as Record<string, unknown>;
  const hash = createHash("sha256").update(JSON.stringify(manifest));
  const vendor = path.join(dir, "vendor");
  for (const file of existsSync(vendor) ? readdirSync(vendor).sort() : []) {
    hash.update(file).update(readFileSync(path.join(vendor, file)));
  }
  return hash.digest("hex");
}

/**
 * Copies the directory tree `from` to `to` with every file hard-linked (symlinks copied as they
 * are): the copy's paths are its own, its bytes shared. Caches a run writes are left out.
 */
function linkTree(from: string, to: string): void {
  mkdirSync(to, { recursive: true });
  for (const entry of readdirSync(from, { withFileTypes: true })) {
    if (entry.name === ".vite" || entry.name === ".cache") continue;
    const source = path.join(from, entry.name);
    const target = path.join(to, entry.name);
    if (entry.isSymbolicLink()) symlinkSync(readlinkSync(source), target);
    else if (entry.isDirectory()) linkTree(source, target);
    else linkSync(source, target);
  }
}

/**
 * Installs the project in `dir` with `npm install`; or, given `installed`, a project installed
 * already whose manifest (but its name) and vendored SDK are the same bytes, links that
 * project's `node_modules` into it: npm would make the same tree, and an install costs seconds
 * of CPU. They differ when the checkout changed between the two scaffolds (the vendored SDK
 * holds its sources): the project then installs its own, and says so.
 */
async function install(dir: string, installed?: string): Promise<void> {
  if (installed !== undefined && installInput(dir) === installInput(installed)) {
    linkTree(path.join(installed, "node_modules"), path.join(dir, "node_modules"));
    // The tree is this project's own (its paths are in it, not in the other project).
    expect(realpathSync(path.join(dir, "node_modules"))).toBe(
      path.join(realpathSync(dir), "node_modules"),
    );
    return;
  }
  if (installed !== undefined) {
    console.warn(`${dir}: package.json or vendor/ differs from ${installed}'s: installing`);
  }
  await step(dir, "npm", ["install", "--prefer-offline", "--no-audit", "--no-fund"], 4 * MINUTE);
}

/** The project's own `gym` (the SDK's bin, linked by npm install). */
function gym(dir: string, args: readonly string[]): Promise<Finished> {
  return step(dir, path.join(dir, "node_modules", ".bin", "gym"), args, MINUTE);
}

/** POSTs JSON with a cookie jar of one cookie; returns the status, body and new cookie. */
async function post(
  url: string,
  body: unknown,
  cookie: string,
): Promise<{ status: number; body: unknown; cookie: string }> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...(cookie === "" ? {} : { cookie }) },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const set = res.headers.get("set-cookie");
  return { status: res.status, body: await res.json(), cookie: set?.split(";")[0] ?? cookie };
}

/** Each template: its flags, its server's name in deployment.yaml, a route of its own. */
const VARIANTS = [
  // Scaffolded from a copy of the checkout whose node_modules (and everything else) is deleted
  // before the project installs: the vendored SDK must stand on its own.
  {
    name: "tally",
    flags: ["--kind", "resources", "--mode", "exported"],
    server: "tally",
    route: "/add",
    exported: 1,
    checkoutGone: true,
  },
  {
    name: "multiplier",
    flags: ["--kind", "resources", "--mode", "stateless", "--verify", "replay"],
    server: "multiplier",
    route: "/multiply",
    exported: 0,
    sharesInstall: "tally",
  },
  {
    name: "restart-tally",
    flags: ["--kind", "resources", "--mode", "restart_only"],
    server: "tally",
    route: "/add",
    exported: 0,
    sharesInstall: "tally",
  },
  // Linked to this checkout's sdk/ (`--sdk <dir>`, the form for working on the SDK itself).
  {
    name: "planner",
    flags: ["--kind", "agent"],
    server: "planner",
    route: "/v1/responses",
    linked: true,
  },
  // Installed from the packed SDK rather than the checkout's link (the other supported way).
  {
    name: "word-count",
    flags: ["--kind", "environment"],
    server: "word_count",
    route: "/run",
    packed: true,
  },
] as const;

/** A resources session's seed (native body). */
const SEED = {
  resources_session_id: "s1",
  episode_id: { rollout_id: "ep1", attempt: 0 },
  task_id: { taskset: "demo", task_id: "1" },
  task_data: {},
};

describe.sequential("generated projects", () => {
  for (const variant of VARIANTS) {
    it(
      `${variant.flags.join(" ")}: installs, builds, passes its tests, serves and checkpoints`,
      { timeout: 6 * MINUTE },
      async () => {
        const dir = path.join(root, variant.name);
        const packed = "packed" in variant;
        const linked = "linked" in variant;
        const checkoutGone = "checkoutGone" in variant;
        const checkout = checkoutGone ? await copyOfCheckout() : REPO;
        await step(root, process.execPath, [
          path.join(checkout, path.relative(REPO, BIN)),
          variant.name,
          ...variant.flags,
          ...(packed ? ["--sdk", tarball] : []),
          ...(linked ? ["--sdk", path.join(REPO, "sdk")] : []),
          "--no-interactive",
        ]);
        const manifest = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8")) as {
          dependencies: Record<string, string>;
        };
        const spec = manifest.dependencies["gym-participant-sdk"];
        if (packed || linked) {
          const sdk = packed ? tarball : path.join(REPO, "sdk");
          expect(spec).toBe(`file:${path.relative(dir, sdk)}`);
        } else {
          expect(spec).toMatch(/^file:vendor\/gym-participant-sdk-[\d.]+\.tgz$/);
        }
        if (checkoutGone) rmSync(checkout, { recursive: true, force: true });
        await install(
          dir,
          "sharesInstall" in variant ? path.join(root, variant.sharesInstall) : undefined,
        );
        if (!linked) {
          // The SDK and its dependencies are the project's own: nothing resolves into a checkout.
          const sdkDir = realpathSync(path.join(dir, "node_modules", "gym-participant-sdk"));
          const project = realpathSync(dir);
          expect(sdkDir.startsWith(project)).toBe(true);
          const pino = createRequire(path.join(sdkDir, "package.json")).resolve("pino");
          expect(realpathSync(pino).startsWith(project), pino).toBe(true);
        }
        // `npx gym` finds the project's gym from a subdirectory too (never the registry).
        const version = await step(path.join(dir, "src"), "npx", [
          "--no-install",
          "gym",
          "--version",
        ]);
        expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
        await step(dir, "npm", ["run", "typecheck"]);
        // The build's own type check is the one typecheck just ran (same options, src only):
        // `--noCheck` skips it and still reports what only declaration emit finds.
        await step(dir, "npm", ["run", "build", "--", "--noCheck"]);
        const tested = await step(dir, "npm", ["test"], 3 * MINUTE);
        expect(tested.stdout).toMatch(/Tests\s+\d+ passed/);

        stateFiles.push(path.join(dir, ".gym", "run.json"));
        await gym(dir, ["serve", "deployment.yaml", "--detach"]);
        const [server] = stateServers(path.join(dir, ".gym", "run.json"));
        expect(server?.name).toBe(variant.server);
        const openapi = (await (await fetch(`${server?.url}/openapi.json`)).json()) as {
          paths: Record<string, unknown>;
        };
        expect(Object.keys(openapi.paths)).toContain(variant.route);

        // A resources server holds a live session at the checkpoint: exported, or a restart.
        if ("exported" in variant) {
          const seeded = await post(`${server?.url}/ng-rollout/ep1/seed_session`, SEED, "");
          expect(seeded.status).toBe(200);
        }
        const checkpoint = await step(dir, "npm", ["run", "checkpoint"]);
        const exported = "exported" in variant ? variant.exported : 0;
        expect(checkpoint.stdout).toMatch(
          new RegExp(`\\(${exported} episode\\(s\\)\\); every participant resumed`),
        );
        const [written] = readdirSync(path.join(dir, "checkpoints"));
        await gym(dir, ["ckpt", "inspect", `checkpoints/${written}`]);
        await gym(dir, ["stop", "--deployment", "deployment.yaml"]);
      },
    );
  }

  it(
    "tally: a session checkpointed under gym serve survives a crash",
    { timeout: 2 * MINUTE },
    async () => {
      const dir = path.join(root, "tally");
      const state = path.join(dir, ".gym", "run.json");
      await gym(dir, ["serve", "deployment.yaml", "--detach"]);
      const url = () => stateServers(state)[0]?.url ?? "";
      let jar = (await post(`${url()}/ng-rollout/ep1/seed_session`, SEED, "")).cookie;
      expect((await post(`${url()}/ng-rollout/ep1/add`, { amount: 2 }, jar)).body).toEqual({
        total: 2,
      });
      const checkpoint = await gym(dir, [
        "ckpt",
        "checkpoint",
        "--deployment",
        "deployment.yaml",
        "--dir",
        "checkpoints/crash",
      ]);
      expect(checkpoint.stdout).toMatch(/\(1 episode\(s\)\)/);

      await gym(dir, ["stop", "--deployment", "deployment.yaml", "--kill"]); // the crash
      await gym(dir, ["serve", "deployment.yaml", "--detach"]);
      await gym(dir, [
        "ckpt",
        "restore",
        "--deployment",
        "deployment.yaml",
        "--id",
        "restore-1",
        "--dir",
        "checkpoints/crash",
        "--all",
        "--resume",
      ]);
      // The crashed attempt is fenced; its replacement goes on with the old cookie.
      const stale = await post(`${url()}/ng-rollout/ep1/add`, { amount: 3 }, jar);
      expect(stale.status).toBe(409);
      expect(stale.body).toMatchObject({ error: { code: "stale_attempt" } });
      // 2 restored + 3 = the target 5.
      jar = (await post(`${url()}/ng-rollout/ep1-a1/add`, { amount: 3 }, jar)).cookie;
      const verified = await post(`${url()}/ng-rollout/ep1-a1/verify`, { target: 5 }, jar);
      expect(verified.body).toMatchObject({ reward: 1 });
      expect(JSON.parse(readFileSync(state, "utf8"))).toMatchObject({ servers: { tally: {} } });
      await gym(dir, ["stop", "--deployment", "deployment.yaml"]);
    },
  );
});
