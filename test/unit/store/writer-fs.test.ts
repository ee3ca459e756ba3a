/**
 * The commit's write order (see docs/storage.md) as seen by the file system: which files and
 * directories are fsynced and in which order relative to the rename and the manifest link, how
 * `stop()` interleaves with a publication, racing publications, injected I/O failures and short
 * writes. `node:fs/promises` is wrapped (real files still written in real temporary directories) so
 * every operation is recorded and can be held or failed on demand.
 */
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  deferred,
  expectPublished,
  expectStateError,
  INSTANCE,
  KIND,
  listDir,
  makeTempDir,
  pdirOf,
  read,
  rec,
  removeTempDir,
  writer,
} from "./helpers.js";

type Op = "sync" | "rename" | "link" | "unlink";

/** Shared with the hoisted mock factory. */
const fsHooks = vi.hoisted(() => ({
  /** `"<op> <path>"` of every wrapped operation, in call order. */
  events: [] as string[],
  /** Runs before each wrapped operation; may hold it (await) or fail it (throw). */
  before: null as ((op: Op, file: string) => Promise<void> | void) | null,
  /** When set, each `writev` writes only the first half of its bytes (a short write). */
  shortWrites: false,
}));

vi.mock("node:fs/promises", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs/promises")>();
  const hook = async (op: Op, file: unknown): Promise<void> => {
    fsHooks.events.push(`${op} ${String(file)}`);
    await fsHooks.before?.(op, String(file));
  };
  const open: typeof actual.open = async (file, flags, mode) => {
    const handle = await actual.open(file, flags, mode);
    const sync = handle.sync.bind(handle);
    handle.sync = async () => {
      await hook("sync", file);
      await sync();
      fsHooks.events.push(`synced ${String(file)}`);
    };
    const writev = handle.writev.bind(handle);
    handle.writev = (async (buffers: readonly NodeJS.ArrayBufferView[], position?: number) => {
      if (!fsHooks.shortWrites) return await writev(buffers, position);
      const all = Buffer.concat(
        buffers.map((b) => Buffer.from(b.buffer, b.byteOffset, b.byteLength)),
      );
      const { bytesWritten } = await handle.write(all.subarray(0, Math.ceil(all.length / 2)));
      return { bytesWritten, buffers };
    }) as typeof handle.writev;
    return handle;
  };
  const rename: typeof actual.rename = async (from, to) => {
    await hook("rename", to);
    await actual.rename(from, to);
  };
  const link: typeof actual.link = async (existing, newPath) => {
    await hook("link", newPath);
    await actual.link(existing, newPath);
  };
  const unlink: typeof actual.unlink = async (file) => {
    await hook("unlink", file);
    await actual.unlink(file);
  };
  const wrapped = { ...actual, open, rename, link, unlink };
  return { ...wrapped, default: wrapped };
});

let dir: string;

beforeEach(async () => {
  dir = await makeTempDir();
  fsHooks.events.length = 0;
  fsHooks.before = null;
  fsHooks.shortWrites = false;
});

afterEach(async () => {
  fsHooks.before = null;
  fsHooks.shortWrites = false;
  await removeTempDir(dir);
});

/** Events relative to the temporary directory, random suffixes of temporaries as `*`. */
function trace(): string[] {
  return fsHooks.events
    .filter((event) => event.includes(dir) && !event.startsWith("synced "))
    .map((event) => {
      const [op, file] = [event.slice(0, event.indexOf(" ")), event.slice(event.indexOf(" ") + 1)];
      const rel = path.relative(dir, file) || ".";
      return `${op} ${rel.replace(/(\.records\.jsonl|\.manifest\.json)\.[0-9a-f]+$/, "$1.*")}`;
    });
}

const PD = `gym/${KIND}/${INSTANCE}`;
const RECORDS = [rec("r", { a: 1 }), rec("s-a1", [NaN])];

/** An I/O error like the ones the file system raises. */
function ioFailure(code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: injected`), { code });
}

describe("fsync and write order", () => {
  it("fsyncs the records file, <kind>, gym, <checkpoint_dir> and the manifest's temporary before publishing; the participant directory last", async () => {
    const manifest = await writer(dir).write(RECORDS);
    const events = trace();
    // One round, started together: their order among themselves is the scheduler's.
    expect(events.slice(0, 5).sort()).toEqual(
      [
        `sync ${PD}/.records.jsonl.*`,
        `sync gym/${KIND}`,
        "sync gym",
        "sync .",
        `sync ${PD}/.manifest.json.*`,
      ].sort(),
    );
    expect(events.slice(5)).toEqual([
      `rename ${PD}/${manifest.records_file}`,
      `link ${PD}/manifest.json`,
      `unlink ${PD}/.manifest.json.*`,
      `sync ${PD}`,
    ]);
    // Never the parent of <checkpoint_dir>.
    expect(fsHooks.events).not.toContain(`sync ${path.dirname(dir)}`);
  });

  it.each([
    ["the records file", (file: string) => file.includes(".records.jsonl.")],
    ["gym", (file: string) => file.endsWith(`${path.sep}gym`)],
    ["the manifest's temporary", (file: string) => file.includes(".manifest.json.")],
  ])("publishes nothing until the fsync of %s completed", async (_what, isHeld) => {
    const reached = deferred();
    const release = deferred();
    fsHooks.before = async (op, file) => {
      if (op === "sync" && isHeld(file)) {
        reached.resolve();
        await release.promise;
      }
    };
    const writing = writer(dir).write(RECORDS);
    await reached.promise;
    // The round's four other fsyncs end; then the publication still waits for the held one.
    const synced = (): number => fsHooks.events.filter((e) => e.startsWith("synced ")).length;
    for (const deadline = Date.now() + 10_000; synced() < 4 && Date.now() < deadline;) {
      await new Promise<void>((resolve) => setTimeout(resolve, 2));
    }
    expect(fsHooks.events.filter((e) => e.startsWith("synced "))).toHaveLength(4);
    for (let i = 0; i < 10; i++) await new Promise<void>((resolve) => setImmediate(resolve));
    expect(trace().filter((e) => !e.startsWith("sync "))).toEqual([]);
    fsHooks.events.push("released");
    release.resolve();
    await writing;
    const firstRename = fsHooks.events.findIndex((e) => e.startsWith("rename "));
    expect(fsHooks.events.indexOf("released")).toBeLessThan(firstRename);
  });

  it("fsyncs up to a nested <checkpoint_dir>, not beyond it", async () => {
    const nested = path.join(dir, "a", "b");
    await writer(nested).write(RECORDS);
    const syncs = trace().filter((e) => e.startsWith("sync ") && !e.includes(".json"));
    expect(syncs.slice(0, 3).sort()).toEqual(["sync a/b", "sync a/b/gym", `sync a/b/gym/${KIND}`]);
    expect(syncs.slice(3)).toEqual([`sync a/b/${PD}`]);
  });

  it("a retry that finds its own manifest publishes nothing new and syncs no directory after the link", async () => {
    await writer(dir).write(RECORDS);
    fsHooks.events.length = 0;
    await writer(dir).write(RECORDS);
    const after = trace();
    expect(after.filter((e) => e === `sync ${PD}`)).toEqual([]);
    expect(after).toContain(`link ${PD}/manifest.json`);
  });

  it("completes short writes so the file holds every byte the digest covers", async () => {
    fsHooks.shortWrites = true;
    const written = [rec("r", "x".repeat(1000)), rec("s", "y".repeat(3000))];
    const manifest = await writer(dir).write(written);
    expect((await read(dir)).records).toEqual(written);
    expect(manifest.record_count).toBe(2);
  });
});

describe("stop and the publication lock", () => {
  it("stop() waits for a publication in progress, whose manifest then exists", async () => {
    const atLink = deferred();
    const release = deferred();
    fsHooks.before = async (op, file) => {
      if (op === "link" && file.endsWith("manifest.json")) {
        atLink.resolve();
        await release.promise;
      }
    };
    const w = writer(dir);
    const writing = w.write(RECORDS).then((m) => {
      fsHooks.events.push("write resolved");
      return m;
    });
    await atLink.promise;
    const stopping = w.stop().then(() => fsHooks.events.push("stop returned"));
    // Let every ready callback run: stop() must still be waiting on the lock.
    await new Promise<void>((resolve) => setImmediate(resolve));
    fsHooks.events.push("released");
    release.resolve();
    const [manifest] = await Promise.all([writing, stopping]);
    const events = fsHooks.events;
    expect(events.indexOf("released")).toBeLessThan(events.indexOf("stop returned"));
    expect(events.indexOf(`sync ${pdirOf(dir)}`)).toBeLessThan(events.indexOf("stop returned"));
    await expectPublished(pdirOf(dir), manifest.records_file);
  });

  it.each([
    [
      "the records file is being fsynced",
      (op: Op, file: string) => op === "sync" && file.includes(".records.jsonl."),
    ],
    [
      "<kind> is being fsynced",
      (op: Op, file: string) => op === "sync" && file.endsWith(`gym${path.sep}${KIND}`),
    ],
  ])(
    "stop() while %s returns at once; the write then fails and no manifest appears",
    async (_what, at) => {
      const reached = deferred();
      const release = deferred();
      fsHooks.before = async (op, file) => {
        if (at(op, file)) {
          reached.resolve();
          await release.promise;
        }
      };
      const w = writer(dir);
      const writing = w.write(RECORDS);
      await reached.promise;
      await w.stop(); // the lock is free: returns while the write is held
      fsHooks.events.push("stop returned");
      release.resolve();
      await expectStateError(writing, "was resumed before its write finished");
      expect(await listDir(pdirOf(dir))).toEqual([]);
      const afterStop = fsHooks.events.slice(fsHooks.events.indexOf("stop returned"));
      expect(afterStop.some((e) => e.startsWith("rename ") || e.startsWith("link "))).toBe(false);
    },
  );

  it("stop() queued behind a losing publication still leaves the winner's files only", async () => {
    const first = await writer(dir).write(RECORDS);
    const w = writer(dir, { checkpointId: "other" });
    const writing = w.write([rec("z")]);
    await expectStateError(writing, "already holds a different commit");
    await w.stop();
    await expectPublished(pdirOf(dir), first.records_file);
  });
});

describe("racing publications", () => {
  it("two writers that both renamed their records before either links: exactly one publishes, the loser removes its file", async () => {
    let arrived = 0;
    const both = deferred();
    fsHooks.before = async (op, file) => {
      if (op === "link" && file.endsWith("manifest.json")) {
        arrived += 1;
        if (arrived === 2) both.resolve();
        await both.promise;
      }
    };
    const results = await Promise.allSettled([
      writer(dir, { checkpointId: "a" }).write([rec("a")]),
      writer(dir, { checkpointId: "b" }).write([rec("b")]),
    ]);
    expect(arrived).toBe(2);
    const won = results.filter((r) => r.status === "fulfilled");
    const lost = results.filter((r) => r.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(1);
    await expectStateError(
      Promise.reject((lost[0] as PromiseRejectedResult).reason),
      "already holds a different commit",
    );
    const winner = (
      won[0] as PromiseFulfilledResult<{ records_file: string; checkpoint_id: string }>
    ).value;
    await expectPublished(pdirOf(dir), winner.records_file);
    expect((await read(dir)).manifest.checkpoint_id).toBe(winner.checkpoint_id);
  });
});

describe("I/O failures", () => {
  it.each([
    ["fsyncing the records file", "sync", ".records.jsonl."],
    ["fsyncing <kind>", "sync", `gym${path.sep}${KIND}`],
    ["fsyncing <checkpoint_dir>", "sync", "<dir>"],
    ["renaming the records file", "rename", "records-"],
    ["fsyncing the manifest", "sync", ".manifest.json."],
    ["linking the manifest", "link", "manifest.json"],
  ])(
    "a failure %s is a 422 'cannot write checkpoint state', leaves no temporary and no manifest, and a retry publishes exactly two files",
    async (_what, failOp, marker) => {
      fsHooks.before = (op, file) => {
        const hit = marker === "<dir>" ? file === dir : file.includes(marker);
        if (op === failOp && hit) throw ioFailure("EIO");
      };
      const w = writer(dir);
      await expectStateError(w.write(RECORDS), "cannot write checkpoint state");
      const left = await listDir(pdirOf(dir));
      expect(left.filter((name) => name.startsWith("."))).toEqual([]);
      expect(left).not.toContain("manifest.json");
      fsHooks.before = null;
      const manifest = await w.write(RECORDS);
      await expectPublished(pdirOf(dir), manifest.records_file);
    },
  );

  it("a failure fsyncing the participant directory after the link leaves a manifest a retry accepts", async () => {
    fsHooks.before = (op, file) => {
      if (op === "sync" && file === pdirOf(dir)) throw ioFailure("EIO");
    };
    const w = writer(dir);
    await expectStateError(w.write(RECORDS), "cannot write checkpoint state");
    fsHooks.before = null;
    const manifest = await w.write(RECORDS);
    await expectPublished(pdirOf(dir), manifest.records_file);
  });
});
