/**
 * A FIFO, socket, directory or device where a checkpoint's manifest or records file belongs.
 * Opening a FIFO for reading waits for a writer (a thread tied up until the deadline, or, read
 * synchronously, the whole event loop); a device may never end. Each must be a prompt 422
 * `invalid_checkpoint_state` naming the file, on restore, on inspect and on commit, with the
 * file never opened.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { closeSync, constants, openSync } from "node:fs";
import { mkdir, readdir, rename, rm, symlink } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { inspectCheckpoint } from "#sdk/cli/inspect.js";
import { fsyncDir } from "#sdk/store/fs-sync.js";
import { refuseOccupiedDir } from "#sdk/store/records-writer.js";
import {
  expectStateError,
  lines,
  line,
  makeTempDir,
  pdirOf,
  plant,
  read,
  rec,
  removeTempDir,
  target,
  writer,
} from "./helpers.js";

let dir: string;
const fifos: string[] = [];
const sockets: Server[] = [];
const watchdogs: ChildProcess[] = [];

beforeEach(async () => {
  dir = await makeTempDir();
});

afterEach(async () => {
  // A reader stuck in open() on a FIFO (only without the fix) is let go by a writer's open.
  for (const fifo of fifos.splice(0)) {
    try {
      closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      // ENXIO: no reader waits on it, as it should be.
    }
  }
  for (const watchdog of watchdogs.splice(0)) watchdog.kill("SIGKILL");
  await Promise.all(sockets.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
  await removeTempDir(dir);
});

function mkfifo(file: string): void {
  execFileSync("mkfifo", [file]);
  fifos.push(file);
}

/** A listening Unix socket at `file` (bound at a short path first: socket paths are short). */
async function listenUnix(file: string): Promise<void> {
  const server = createServer();
  sockets.push(server);
  const bound = path.join(dir, "s.sock");
  await new Promise<void>((resolve) => server.listen(bound, resolve));
  await rename(bound, file);
}

/** Each kind of file that is not a regular one, made at `file`, and how a refusal names it. */
const SPECIAL: readonly [string, string, (file: string) => Promise<void>][] = [
  ["a FIFO", "a FIFO", async (file) => mkfifo(file)],
  ["a socket", "a socket", listenUnix],
  ["a directory", "a directory", async (file) => await mkdir(file)],
  ["a device (symlink to /dev/zero)", "a character device", (file) => symlink("/dev/zero", file)],
];

/** A good checkpoint, then its records file replaced by `make`. */
async function plantWithRecords(make: (file: string) => Promise<void>): Promise<string> {
  const { pdir, manifest } = await plant(dir, lines(line("r")));
  const recordsPath = path.join(pdir, manifest.records_file as string);
  await rm(recordsPath);
  await make(recordsPath);
  return recordsPath;
}

/** A good checkpoint, then its manifest replaced by `make`. */
async function plantWithManifest(make: (file: string) => Promise<void>): Promise<string> {
  const { pdir } = await plant(dir, lines(line("r")));
  const manifestPath = path.join(pdir, "manifest.json");
  await rm(manifestPath);
  await make(manifestPath);
  return manifestPath;
}

describe("restore and inspect", () => {
  it.each(SPECIAL)(
    "a records file that is %s is a 422 naming it",
    { timeout: 10_000 },
    async (_what, named, make) => {
      const recordsPath = await plantWithRecords(make);
      await expectStateError(read(dir), recordsPath, `is ${named}, not a regular file`);
      const report = await inspectCheckpoint(dir);
      expect(report.ok).toBe(false);
      expect(report.problems.join("\n")).toContain(`is ${named}, not a regular file`);
    },
  );

  it.each(SPECIAL)(
    "a manifest that is %s is a 422 naming it",
    { timeout: 10_000 },
    async (_what, named, make) => {
      const manifestPath = await plantWithManifest(make);
      await expectStateError(read(dir), manifestPath, `is ${named}, not a regular file`);
      const report = await inspectCheckpoint(dir);
      expect(report.ok).toBe(false);
      expect(report.problems.join("\n")).toContain(manifestPath);
    },
  );
});

describe("commit", () => {
  it(
    "refuses a directory whose manifest is a FIFO before anything is written, without opening it",
    { timeout: 10_000 },
    async () => {
      const manifestPath = await plantWithManifest(async (file) => mkfifo(file));
      // Without the fix the synchronous read below stops the event loop in open(); this writer
      // lets it go (the read then sees end of file) so the test fails instead of hanging.
      const watchdog = spawn("sh", ["-c", 'exec 3>"$0"', manifestPath], { stdio: "ignore" });
      watchdogs.push(watchdog);
      let caught: unknown = null;
      try {
        refuseOccupiedDir(target(dir));
      } catch (error) {
        caught = error;
      }
      await expectStateError(Promise.reject(caught), manifestPath, "is a FIFO");
    },
  );

  it(
    "a write that finds a FIFO where its manifest goes is a 422 naming it, and leaves no records file",
    {
      timeout: 10_000,
    },
    async () => {
      await mkdir(pdirOf(dir), { recursive: true });
      const manifestPath = path.join(pdirOf(dir), "manifest.json");
      mkfifo(manifestPath);
      await expectStateError(writer(dir).write([rec("r")]), manifestPath, "is a FIFO");
      expect((await readdir(pdirOf(dir))).sort()).toEqual(["manifest.json"]);
    },
  );

  it(
    "fsyncing a FIFO where a directory belongs fails at once (ENOTDIR), never waits for a writer",
    {
      timeout: 10_000,
    },
    async () => {
      const fifo = path.join(dir, "not-a-dir");
      mkfifo(fifo);
      await expect(fsyncDir(fifo)).rejects.toMatchObject({ code: "ENOTDIR" });
    },
  );
});
