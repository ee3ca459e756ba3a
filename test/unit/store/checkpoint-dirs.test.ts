/**
 * Creating a checkpoint's directories: one level at a time, each tried once, never on a kernel
 * pseudo file system. Node's recursive mkdir spins forever under `/proc/self/...` (ENOENT below
 * a parent that exists, retried without end); a commit there must be a prompt 422 that leaves no
 * work running. `node:fs/promises` is wrapped to count and steer every `mkdir`.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { mkdir as mkdirReal, mkdtemp, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { makeDirectories } from "#sdk/store/safe-fs.js";
import {
  expectStateError,
  makeTempDir,
  pdirOf,
  read,
  rec,
  removeTempDir,
  writer,
} from "./helpers.js";

const mkdirHooks = vi.hoisted(() => ({
  /** Every path `mkdir` was called with, in order. */
  calls: [] as string[],
  /** Fails `mkdir` of a path with this errno code instead of creating it. */
  fail: null as ((file: string) => string | null) | null,
}));

vi.mock("node:fs/promises", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs/promises")>();
  const mkdir = (async (file: string, options?: unknown) => {
    mkdirHooks.calls.push(String(file));
    const code = mkdirHooks.fail?.(String(file)) ?? null;
    if (code !== null) throw Object.assign(new Error(`${code}: injected`), { code });
    return await actual.mkdir(file, options as never);
  }) as typeof actual.mkdir;
  const wrapped = { ...actual, mkdir };
  return { ...wrapped, default: wrapped };
});

let dir: string;

beforeEach(async () => {
  dir = await makeTempDir();
  mkdirHooks.calls.length = 0;
  mkdirHooks.fail = null;
});

afterEach(async () => {
  mkdirHooks.fail = null;
  await removeTempDir(dir);
});

/** Lets every callback already queued run, several rounds deep (timers included). */
async function drain(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setTimeout(resolve, 0));
}

describe("a checkpoint_dir on a pseudo file system", () => {
  it.each([
    ["/proc/self", "/proc/self/gym-ckpt/one"],
    ["/proc", "/proc/gym-ckpt"],
    ["/sys", "/sys/kernel/gym-ckpt"],
    ["/dev", "/dev/gym-ckpt"],
  ])(
    "under %s is a 422 naming the tree, with no mkdir attempted and none left running",
    async (_tree, checkpointDir) => {
      const error = await expectStateError(
        writer(checkpointDir).write([rec("r")]),
        "cannot write checkpoint state",
        "pseudo file system",
      );
      expect(error.detail).toContain(checkpointDir);
      expect(mkdirHooks.calls).toEqual([]);
      await drain();
      expect(mkdirHooks.calls).toEqual([]);
    },
  );

  it("reached through a symlink is refused by where it really lies", async () => {
    const link = path.join(dir, "looks-local");
    await symlink("/proc/self", link);
    await expectStateError(
      writer(path.join(link, "ckpt")).write([rec("r")]),
      "pseudo file system",
      "/proc",
    );
    expect(mkdirHooks.calls).toEqual([]);
  });

  it("/dev/shm is an ordinary tmpfs and holds a checkpoint", async () => {
    const shm = await mkdtemp(path.join("/dev/shm", "gym-ckpt-"));
    try {
      const manifest = await writer(shm).write([rec("r")]);
      expect((await read(shm)).manifest).toEqual(manifest);
    } finally {
      await removeTempDir(shm);
    }
  });
});

describe("creating the directories", () => {
  it("creates each missing level once, top down, from the deepest existing one", async () => {
    const nested = path.join(dir, "a", "b");
    await writer(nested).write([rec("r")]);
    expect(mkdirHooks.calls).toEqual([
      path.join(dir, "a"),
      path.join(dir, "a", "b"),
      path.join(dir, "a", "b", "gym"),
      path.join(dir, "a", "b", "gym", "environment"),
      pdirOf(nested),
    ]);
    mkdirHooks.calls.length = 0;
    await writer(nested, { checkpointId: "ckpt-1" }).write([rec("r")]);
    expect(mkdirHooks.calls).toEqual([]);
  });

  it("a level that keeps failing with ENOENT under a parent that exists is tried once, then a 422", async () => {
    // What /proc does to Node's recursive mkdir, which then loops forever.
    mkdirHooks.fail = (file) => (file === path.join(dir, "gym") ? "ENOENT" : null);
    await expectStateError(
      writer(dir).write([rec("r")]),
      "cannot write checkpoint state",
      "ENOENT",
    );
    expect(mkdirHooks.calls).toEqual([path.join(dir, "gym")]);
    await drain();
    expect(mkdirHooks.calls).toEqual([path.join(dir, "gym")]);
  });

  it.each([
    ["a regular file", async (file: string) => await writeFile(file, "x")],
    ["a FIFO", async (file: string) => execFileSync("mkfifo", [file])],
  ])("a component that is %s is a 422 naming it", async (what, make) => {
    await mkdirReal(path.join(dir, "gym"));
    const component = path.join(dir, "gym", "environment");
    await make(component);
    await expectStateError(writer(dir).write([rec("r")]), component, `is ${what}, not a directory`);
  });

  it("a level a racing commit created meanwhile (EEXIST) is accepted", async () => {
    const gym = path.join(dir, "gym");
    mkdirHooks.fail = (file) => {
      if (file === gym) mkdirSync(gym); // the racer wins: our mkdir then meets EEXIST
      return null;
    };
    await expect(makeDirectories(pdirOf(dir))).resolves.toBeUndefined();
    expect(mkdirHooks.calls.filter((file) => file === gym)).toHaveLength(1);
  });
});
