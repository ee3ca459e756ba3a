/**
 * The capture ledger's own file work cannot hang: its directory is created one level at a time
 * and never on a pseudo file system (a recursive `mkdir` under `/proc/self` retries for ever),
 * and a ledger path holding a FIFO or a directory is refused by type before any synchronous read.
 */
import { execFileSync } from "node:child_process";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { CaptureLedger } from "#sdk/capture/ledger/capture-ledger.js";
import { CorruptLedgerError } from "#sdk/capture/ledger/errors.js";
import { captureFileName } from "#sdk/capture/ledger/files.js";
import { RowCache } from "#sdk/capture/ledger/row-cache.js";
import { makeTempDir, removeTempDir } from "../../support/test-participant.js";

const dirs: string[] = [];
afterEach(async () => {
  for (const dir of dirs.splice(0)) await removeTempDir(dir);
});

async function tempDir(): Promise<string> {
  const dir = await makeTempDir();
  dirs.push(dir);
  return dir;
}

describe("the capture ledger's directory", () => {
  it("under a pseudo file system is refused as invalid_checkpoint_state, not created", async () => {
    const ledger = new CaptureLedger("/proc/self/gym-capture/ledger");
    await expect(ledger.retire(["r"])).rejects.toMatchObject({
      code: "invalid_checkpoint_state",
    });
    await expect(
      ledger.recordFailure("r", "call-1", "worker_capture_failed"),
    ).rejects.toMatchObject({ code: "invalid_checkpoint_state" });
  });

  it("is created with its missing parents on the first write", async () => {
    const dir = path.join(await tempDir(), "a", "b", "capture");
    const ledger = new CaptureLedger(dir);
    await ledger.recordFailure("r", "call-1", "worker_capture_failed");
    expect((await ledger.manifest("r")).failures).toHaveLength(1);
  });
});

describe("a ledger path that is not a regular file", () => {
  it.each([
    ["a FIFO", (file: string) => execFileSync("mkfifo", [file])],
    ["a directory", (file: string) => mkdir(file)],
  ])("holding %s is refused as a corrupt ledger naming the path", async (_, make) => {
    const file = path.join(await tempDir(), captureFileName("r", "ledger"));
    await make(file);
    const read = (): unknown => new RowCache().read("r", file);
    expect(read).toThrow(CorruptLedgerError);
    expect(read).toThrow(/is not a regular file/);
  });
});
