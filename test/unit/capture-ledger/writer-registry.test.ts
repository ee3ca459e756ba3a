/**
 * The writer registry: a ledger alone in its directory exports cached rows without a stat per
 * ledger, and any other writer (live, unjudgeable, or dead until a registering instance removes
 * it) sends it back to looking at every file.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { appendFile, mkdir, readdir, rm, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { CaptureLedger } from "#sdk/capture/ledger/capture-ledger.js";
import { encodeRowLine } from "#sdk/capture/ledger/row-codec.js";
import {
  WRITER_REGISTRY_DIR,
  WriterRegistry,
  bootId,
  pidNamespace,
} from "#sdk/capture/ledger/writer-registry.js";
import { custodyRow, makeTempDir, removeTempDir, warnings } from "./helpers.js";

const stats = vi.hoisted(() => ({ ledgerFiles: 0 }));

vi.mock("node:fs", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs")>();
  const statSync = ((file: string, ...rest: unknown[]) => {
    if (String(file).endsWith(".lineage.jsonl")) stats.ledgerFiles += 1;
    return (actual.statSync as (...args: unknown[]) => unknown)(file, ...rest);
  }) as typeof actual.statSync;
  return { ...actual, default: { ...actual, statSync }, statSync };
});

const failRegistration = vi.hoisted(() => ({ code: null as string | null }));

vi.mock("node:fs/promises", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs/promises")>();
  const writeFile = (async (file: string, ...rest: unknown[]) => {
    if (failRegistration.code !== null && String(file).includes(`/writers/`)) {
      throw Object.assign(new Error(`injected ${failRegistration.code}`), {
        code: failRegistration.code,
      });
    }
    return await (actual.writeFile as (...args: unknown[]) => Promise<void>)(file, ...rest);
  }) as typeof actual.writeFile;
  return { ...actual, default: { ...actual, writeFile }, writeFile };
});

let dir: string;

beforeEach(async () => {
  dir = await makeTempDir();
  stats.ledgerFiles = 0;
  failRegistration.code = null;
});

afterEach(async () => {
  await removeTempDir(dir);
});

const KEYS = Array.from({ length: 20 }, (_, i) => `r${i}`);
const none = new Set<string>();

async function recordEach(ledger: CaptureLedger): Promise<void> {
  for (const key of KEYS) await ledger.record(key, custodyRow("c1", key));
}

/** Ledger stats of one export of every key. */
async function exportStats(ledger: CaptureLedger): Promise<number> {
  stats.ledgerFiles = 0;
  await ledger.exportRowsOf(KEYS, none);
  return stats.ledgerFiles;
}

/** The PID of a process that has exited. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
  await once(child, "exit");
  return child.pid as number;
}

/** A registry entry shaped like one of `pid` on this machine, in this PID namespace. */
function entryOf(
  pid: number,
  { namespace = pidNamespace(), boot = bootId() }: { namespace?: string; boot?: string } = {},
): string {
  return ["w", boot, encodeURIComponent(hostname()), namespace, String(pid), "0123456789ab"].join(
    "~",
  );
}

describe("a ledger alone in its directory", () => {
  it("exports cached rows without a stat per ledger", async () => {
    const ledger = new CaptureLedger(dir);
    await recordEach(ledger);
    expect(await exportStats(ledger)).toBe(0);
    const rows = await ledger.exportRowsOf(KEYS, none);
    expect(rows.map((r) => r.map((row) => row.model_call_id))).toEqual(KEYS.map(() => ["c1"]));
  });

  it("still reads a ledger it has not cached", async () => {
    const ledger = new CaptureLedger(dir);
    await recordEach(ledger);
    await ledger.retire(["r0"]);
    await ledger.delete(["r0"]);
    await writeFile(
      path.join(dir, "r0.lineage.jsonl"),
      encodeRowLine("r0", custodyRow("c9", "r0")),
    );
    const [first] = await ledger.exportRowsOf(["r0"], none);
    expect(first?.map((row) => row.model_call_id)).toEqual(["c9"]);
  });

  it("never trusts its cache before it changed the directory itself", async () => {
    const writer = new CaptureLedger(dir);
    await recordEach(writer);
    const reader = new CaptureLedger(dir);
    await reader.exportRowsOf(KEYS, none);
    expect(await exportStats(reader)).toBe(KEYS.length);
  });
});

describe("with another writer", () => {
  it("sees what another live instance appended to a ledger it has cached", async () => {
    const a = new CaptureLedger(dir);
    await recordEach(a);
    const b = new CaptureLedger(dir);
    await b.record("r3", custodyRow("c2", "r3"));
    const rows = await a.exportRowsOf(KEYS, none);
    expect(rows[3]?.map((row) => row.model_call_id)).toEqual(["c1", "c2"]);
    expect(await exportStats(a)).toBe(KEYS.length);
  });

  it("stats every ledger while an entry of another host is registered", async () => {
    const ledger = new CaptureLedger(dir);
    await recordEach(ledger);
    await writeFile(path.join(dir, WRITER_REGISTRY_DIR, "elsewhere~1~42~0123456789ab"), "");
    expect(await exportStats(ledger)).toBe(KEYS.length);
  });

  it("stats every ledger once its own entry is gone (the registry was removed under it)", async () => {
    const ledger = new CaptureLedger(dir);
    await recordEach(ledger);
    await rm(path.join(dir, WRITER_REGISTRY_DIR), { recursive: true });
    expect(await exportStats(ledger)).toBe(KEYS.length);
  });

  it("a dead writer's entry counts until a registering instance removes it", async () => {
    const first = new CaptureLedger(dir);
    await first.record("r0", custodyRow("c1", "r0"));
    const dead = entryOf(await deadPid());
    await writeFile(path.join(dir, WRITER_REGISTRY_DIR, dead), "");
    await recordEach(first);
    // Registered already: it does not remove entries, so it cannot tell what that writer did.
    expect(await exportStats(first)).toBe(KEYS.length);

    const next = new CaptureLedger(dir);
    await next.record("r0", custodyRow("c2", "r0")); // registers, removing the dead entry
    expect(await readdir(path.join(dir, WRITER_REGISTRY_DIR))).not.toContain(dead);
    // `first` is still registered: `next` is another writer to both of them.
    expect(await exportStats(next)).toBe(KEYS.length);
    expect(await exportStats(first)).toBe(KEYS.length);
  });

  it("keeps nothing it cached when registering removed a dead writer, which may have appended", async () => {
    const seeded = new CaptureLedger(dir);
    await seeded.record("r1", custodyRow("c1", "r1"));
    // As if `seeded` ran in a process that is gone now: its entry is one of a dead PID.
    const registryDir = path.join(dir, WRITER_REGISTRY_DIR);
    await rm(registryDir, { recursive: true });
    await mkdir(registryDir);
    await writeFile(path.join(registryDir, entryOf(await deadPid())), "");

    const ledger = new CaptureLedger(dir);
    // Read and cached before this instance changes anything...
    expect((await ledger.rows("r1")).map((row) => row.model_call_id)).toEqual(["c1"]);
    // ...then the dead writer's last append lands.
    await appendFile(
      path.join(dir, "r1.lineage.jsonl"),
      encodeRowLine("r1", custodyRow("c2", "r1")),
    );
    await ledger.record("r2", custodyRow("c1", "r2")); // registers, removes the dead entry
    expect(await readdir(registryDir)).toHaveLength(1);
    const [r1, r2] = await ledger.exportRowsOf(["r1", "r2"], none);
    expect(r1?.map((row) => row.model_call_id)).toEqual(["c1", "c2"]);
    expect(r2?.map((row) => row.model_call_id)).toEqual(["c1"]);
  });
});

describe("a registry that cannot be made", () => {
  it("still records (with a warning) and stats every ledger", async () => {
    await writeFile(path.join(dir, WRITER_REGISTRY_DIR), "not a directory");
    const { logger, logged } = warnings();
    const ledger = new CaptureLedger(dir, { logger });
    await recordEach(ledger);
    expect(await ledger.rows("r0")).toHaveLength(1);
    expect(logged.map((entry) => entry.msg)).toEqual([
      "cannot register in the capture ledger's writer registry; every export stats each ledger",
    ]);
    expect(await exportStats(ledger)).toBe(KEYS.length);
  });
});

describe("WriterRegistry", () => {
  it("registers once, before the first change, and removes only dead entries of this boot and namespace", async () => {
    const registry = new WriterRegistry(dir);
    expect(registry.othersMayWrite()).toBe(true); // not registered: never alone
    const registryDir = path.join(dir, WRITER_REGISTRY_DIR);
    const dropped: string[] = [];
    expect(await registry.register(() => dropped.push("first"))).toBe("registered");
    const [own] = await readdir(registryDir);
    expect(own).toBe(entryOf(process.pid).replace(/~[0-9a-f]{12}$/, own!.slice(-13)));
    expect(registry.othersMayWrite()).toBe(false);
    expect(dropped).toEqual([]); // nothing removed: nothing to drop

    const deadEntry = entryOf(await deadPid());
    const liveEntry = entryOf(process.pid).replace(/[0-9a-f]{12}$/, "bbbbbbbbbbbb");
    const otherNamespace = entryOf(await deadPid(), { namespace: "1" });
    const otherBoot = entryOf(await deadPid(), { boot: "0".repeat(32) });
    const unknown = `x~${entryOf(await deadPid())}`;
    for (const name of [deadEntry, liveEntry, otherNamespace, otherBoot, unknown]) {
      await writeFile(path.join(registryDir, name), "");
    }
    const next = new WriterRegistry(dir);
    let registeredWhenDropped: boolean | null = null;
    await next.register(() => {
      registeredWhenDropped = next.registered;
    });
    // The cache is dropped before the instance counts as registered (alone, it would trust it).
    expect(registeredWhenDropped).toBe(false);
    const left = await readdir(registryDir);
    expect(left).not.toContain(deadEntry);
    expect(left).toEqual(
      expect.arrayContaining([own, liveEntry, otherNamespace, otherBoot, unknown]),
    );
    expect(left).toHaveLength(6);
    expect(registry.othersMayWrite()).toBe(true);
  });

  it("waits for the ledger directory, and makes the registry again if it vanished", async () => {
    const missing = new WriterRegistry(path.join(dir, "not-yet"));
    expect(await missing.register(() => undefined)).toBe("no-ledger-dir");
    expect(missing.registered).toBe(false);
    await mkdir(path.join(dir, "not-yet"));
    expect(await missing.register(() => undefined)).toBe("registered");
    expect(missing.othersMayWrite()).toBe(false);
  });
});

describe("a registration that fails", () => {
  it("fails the change: nothing is appended unregistered", async () => {
    const ledger = new CaptureLedger(dir);
    failRegistration.code = "EMFILE";
    await expect(ledger.record("r0", custodyRow("c1", "r0"))).rejects.toMatchObject({
      code: "EMFILE",
    });
    expect(await readdir(dir)).toEqual([WRITER_REGISTRY_DIR]);
    failRegistration.code = null;
    await ledger.record("r0", custodyRow("c1", "r0"));
    expect((await ledger.rows("r0")).map((row) => row.model_call_id)).toEqual(["c1"]);
    expect(await exportStats(ledger)).toBe(KEYS.length - 1); // r0 cached and trusted
  });
});
