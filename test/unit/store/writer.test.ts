/**
 * The commit side of the checkpoint store (see docs/storage.md): layout, record lines, the manifest
 * and its on-disk form, idempotent retries, conflicting commits, racing writers, stop, unsafe
 * names, unwritable directories and records that are not JSON. Real temporary directories.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CheckpointStateError } from "#sdk/errors.js";
import { participantDir } from "#sdk/store/paths.js";
import { encodeRecordLine } from "#sdk/store/records-writer.js";
import { decodeJson } from "#sdk/json/json-decode.js";
import {
  INSTANCE,
  KIND,
  expectPublished,
  expectStateError,
  listDir,
  makeTempDir,
  pdirOf,
  read,
  rec,
  removeTempDir,
  sha256,
  temporaries,
  writer,
  type TestRecord,
} from "./helpers.js";

let dir: string;

beforeEach(async () => {
  dir = await makeTempDir();
});

afterEach(async () => {
  await removeTempDir(dir);
});

const RECORDS: TestRecord[] = [
  rec("r", { turn: 1, text: "héllo\nworld\u2028", nan: NaN, big: 2n ** 70n }),
  rec("s-a2", [1, -0, Infinity, { "2": "b", "1": "a" }]),
  rec("t", null),
];

async function manifestText(pdir: string): Promise<string> {
  return await readFile(path.join(pdir, "manifest.json"), "utf8");
}

describe("layout", () => {
  it("writes records-<sha256>.jsonl and manifest.json under <dir>/gym/<kind>/<instance> and nothing else", async () => {
    const manifest = await writer(dir).write(RECORDS);
    const pdir = pdirOf(dir);
    expect(await listDir(dir)).toEqual(["gym"]);
    expect(await listDir(path.join(dir, "gym"))).toEqual([KIND]);
    expect(await listDir(path.join(dir, "gym", KIND))).toEqual([INSTANCE]);
    expect(manifest.records_file).toMatch(/^records-[0-9a-f]{64}\.jsonl$/);
    await expectPublished(pdir, manifest.records_file);
  });

  it("participantDir joins <checkpoint_dir>/gym/<kind>/<instance>", () => {
    expect(participantDir({ checkpointDir: dir, kind: KIND, instance: INSTANCE })).toBe(
      pdirOf(dir),
    );
  });

  it("writes one records file whatever the number of rollouts", async () => {
    const many = Array.from({ length: 50 }, (_, i) => rec(`roll-${i}`, i));
    const manifest = await writer(dir).write(many);
    expect(manifest.record_count).toBe(50);
    await expectPublished(pdirOf(dir), manifest.records_file);
  });
});

describe("record lines", () => {
  it("writes one compact JSON line per record, each terminated by a single newline", async () => {
    const manifest = await writer(dir).write(RECORDS);
    const bytes = await readFile(path.join(pdirOf(dir), manifest.records_file));
    const text = bytes.toString("utf8");
    expect(text).toBe(RECORDS.map(encodeRecordLine).join(""));
    expect(text.endsWith("\n")).toBe(true);
    const parts = text.split("\n");
    expect(parts).toHaveLength(RECORDS.length + 1);
    expect(parts.at(-1)).toBe("");
    expect(parts[0]).toBe(
      '{"episode_id":{"rollout_id":"r","attempt":0},"state":{"turn":1,"text":"héllo\\nworld\u2028","nan":NaN,"big":1180591620717411303424}}',
    );
    expect(decodeJson(parts[1] as string)).toEqual({
      episode_id: { rollout_id: "s", attempt: 2 },
      state: [1, -0, Infinity, { "1": "a", "2": "b" }],
    });
  });

  it("encodeRecordLine returns the compact line with its newline", () => {
    expect(encodeRecordLine(rec("x-a1", { a: [1, 2] }))).toBe(
      '{"episode_id":{"rollout_id":"x","attempt":1},"state":{"a":[1,2]}}\n',
    );
  });
});

describe("manifest", () => {
  it("is written with sorted keys, indent 1 and no trailing newline, and names the file's SHA-256 and line count", async () => {
    const manifest = await writer(dir).write(RECORDS);
    const pdir = pdirOf(dir);
    const bytes = await readFile(path.join(pdir, manifest.records_file));
    const digest = sha256(bytes);
    expect(manifest.records_sha256).toBe(digest);
    expect(manifest.records_file).toBe(`records-${digest}.jsonl`);
    expect(manifest.record_count).toBe(3);
    expect(await manifestText(pdir)).toBe(
      [
        "{",
        ' "checkpoint_id": "ckpt-1",',
        ` "instance": "${INSTANCE}",`,
        ` "kind": "${KIND}",`,
        ' "record_count": 3,',
        ` "records_file": "records-${digest}.jsonl",`,
        ` "records_sha256": "${digest}",`,
        ' "schema_version": 1',
        "}",
      ].join("\n"),
    );
    expect(JSON.parse(await manifestText(pdir))).toEqual(manifest);
  });

  it("an empty export writes an empty records file and a record_count of 0", async () => {
    const manifest = await writer(dir).write([]);
    expect(manifest.record_count).toBe(0);
    expect(manifest.records_sha256).toBe(sha256(""));
    expect(await readFile(path.join(pdirOf(dir), manifest.records_file))).toHaveLength(0);
    expect((await read(dir)).records).toEqual([]);
  });

  it("writes manifestExtra fields, keys sorted at every level (integer-like keys as strings), never over the core fields", async () => {
    const manifestExtra = {
      zeta: { b: [1, { y: 2, x: 1 }], a: "é" },
      "9": true,
      "10": null,
      kind: "not-this",
      record_count: -5,
      empty: {},
      none: [],
    };
    const manifest = await writer(dir, { manifestExtra }).write([rec("r")]);
    expect(manifest.kind).toBe(KIND);
    expect(manifest.record_count).toBe(1);
    const text = await manifestText(pdirOf(dir));
    const digest = manifest.records_sha256;
    expect(text).toBe(
      [
        "{",
        ' "10": null,',
        ' "9": true,',
        ' "checkpoint_id": "ckpt-1",',
        ' "empty": {},',
        ` "instance": "${INSTANCE}",`,
        ` "kind": "${KIND}",`,
        ' "none": [],',
        ' "record_count": 1,',
        ` "records_file": "records-${digest}.jsonl",`,
        ` "records_sha256": "${digest}",`,
        ' "schema_version": 1,',
        ' "zeta": {',
        '  "a": "é",',
        '  "b": [',
        "   1,",
        "   {",
        '    "x": 1,',
        '    "y": 2',
        "   }",
        "  ]",
        " }",
        "}",
      ].join("\n"),
    );
    const back = await read(dir);
    expect(back.manifest).toMatchObject({ zeta: { a: "é" }, "9": true, "10": null });
  });

  it.each([
    ["NaN", { x: NaN }],
    ["a bigint", { x: 2n ** 64n }],
    ["a Date", { x: new Date(0) }],
    ["undefined inside an array", { x: [undefined] }],
  ])(
    "manifestExtra holding %s fails the commit before anything is published",
    async (_what, manifestExtra) => {
      await expectStateError(
        writer(dir, { manifestExtra }).write([rec("r")]),
        "manifest",
        "not JSON",
      );
      expect(await listDir(pdirOf(dir))).toEqual([]);
    },
  );
});

describe("retries and conflicts", () => {
  it("a retried write of the same commit returns the manifest already there and leaves exactly two files", async () => {
    const w = writer(dir);
    const first = await w.write(RECORDS);
    const text = await manifestText(pdirOf(dir));
    expect(await w.write(RECORDS)).toEqual(first);
    expect(await writer(dir).write(RECORDS)).toEqual(first);
    await expectPublished(pdirOf(dir), first.records_file);
    expect(await manifestText(pdirOf(dir))).toBe(text);
  });

  it("a retry with equal manifestExtra in another key order is still idempotent", async () => {
    const first = await writer(dir, { manifestExtra: { a: 1, b: { c: 2, d: 3 } } }).write(RECORDS);
    const again = await writer(dir, { manifestExtra: { b: { d: 3, c: 2 }, a: 1 } }).write(RECORDS);
    expect(again).toEqual(first);
  });

  it("another commit's records are refused with 'already holds a different commit'; ours are removed, theirs left intact", async () => {
    const first = await writer(dir).write(RECORDS);
    const pdir = pdirOf(dir);
    const theirs = await readFile(path.join(pdir, first.records_file));
    const text = await manifestText(pdir);
    await expectStateError(
      writer(dir, { checkpointId: "ckpt-2" }).write([rec("other")]),
      "already holds a different commit",
    );
    await expectPublished(pdir, first.records_file);
    expect(await readFile(path.join(pdir, first.records_file))).toEqual(theirs);
    expect(await manifestText(pdir)).toBe(text);
  });

  it("the same records under another checkpoint ID are refused and the shared records file stays", async () => {
    const first = await writer(dir).write(RECORDS);
    await expectStateError(
      writer(dir, { checkpointId: "ckpt-2" }).write(RECORDS),
      "already holds a different commit",
    );
    await expectPublished(pdirOf(dir), first.records_file);
    expect((await read(dir)).manifest.checkpoint_id).toBe("ckpt-1");
  });

  it("other manifestExtra make it a different commit", async () => {
    await writer(dir, { manifestExtra: { step: 1 } }).write(RECORDS);
    await expectStateError(
      writer(dir, { manifestExtra: { step: 2 } }).write(RECORDS),
      "already holds a different commit",
    );
  });

  it("a manifest already there that is not JSON refuses the commit and is left as it is", async () => {
    const pdir = pdirOf(dir);
    await mkdir(pdir, { recursive: true });
    await writeFile(path.join(pdir, "manifest.json"), "garbage");
    await expectStateError(writer(dir).write(RECORDS), "already holds a different commit");
    expect(await listDir(pdir)).toEqual(["manifest.json"]);
    expect(await manifestText(pdir)).toBe("garbage");
  });

  it("a manifest already there that is nested too deep to compare refuses the commit as a typed 422", async () => {
    const pdir = pdirOf(dir);
    await mkdir(pdir, { recursive: true });
    const deep = '{"a":'.repeat(1200) + "1" + "}".repeat(1200);
    await writeFile(path.join(pdir, "manifest.json"), deep);
    await expectStateError(writer(dir).write(RECORDS), "already holds a different commit");
    expect(await listDir(pdir)).toEqual(["manifest.json"]);
  });

  it("two racing writers of different commits: exactly one publishes, the directory holds only its files", async () => {
    for (let round = 0; round < 6; round += 1) {
      const base = path.join(dir, `round-${round}`);
      const results = await Promise.allSettled([
        writer(base, { checkpointId: "a" }).write([rec("a", round)]),
        writer(base, { checkpointId: "b" }).write([rec("b", round)]),
      ]);
      const won = results.filter((r) => r.status === "fulfilled");
      const lost = results.filter((r) => r.status === "rejected");
      expect(won).toHaveLength(1);
      expect(lost).toHaveLength(1);
      const error = (lost[0] as PromiseRejectedResult).reason as unknown;
      expect(error).toBeInstanceOf(CheckpointStateError);
      expect((error as CheckpointStateError).detail).toContain("already holds a different commit");
      const manifest = (won[0] as PromiseFulfilledResult<{ records_file: string }>).value;
      await expectPublished(pdirOf(base), manifest.records_file);
      expect(JSON.parse(await manifestText(pdirOf(base)))).toEqual(manifest);
    }
  });

  it("two racing writers of the same commit both succeed with the same manifest", async () => {
    const [a, b] = await Promise.all([writer(dir).write(RECORDS), writer(dir).write(RECORDS)]);
    expect(a).toEqual(b);
    await expectPublished(pdirOf(dir), a.records_file);
  });
});

describe("stop and the stop flag", () => {
  it("stop() before the write: 422 'was resumed before its write finished', no manifest, no temporary", async () => {
    const w = writer(dir);
    await w.stop();
    expect(w.stopped).toBe(true);
    await expectStateError(w.write(RECORDS), "was resumed before its write finished");
    await expectStateError(w.write([]), "was resumed before its write finished");
    expect(await listDir(pdirOf(dir))).toEqual([]);
  });

  it("stop() while records are being written fails the write and leaves nothing", async () => {
    const w = writer(dir);
    let stopping: Promise<void> | null = null;
    let produced = 0;
    // Records of 5 MB: the writer awaits its file between batches, where the stop lands.
    function* records(): Generator<TestRecord> {
      for (let i = 0; i < 6; i += 1) {
        produced += 1;
        if (i === 1) stopping = w.stop();
        yield rec(`big-${i}`, "x".repeat(5 * 1024 * 1024));
      }
    }
    await expectStateError(w.write(records()), "was resumed before its write finished");
    await stopping;
    expect(produced).toBeLessThan(6);
    expect(await listDir(pdirOf(dir))).toEqual([]);
  });

  it("stop() after a published write changes nothing on disk", async () => {
    const w = writer(dir);
    const manifest = await w.write(RECORDS);
    await w.stop();
    await expectPublished(pdirOf(dir), manifest.records_file);
    expect((await read(dir)).records).toHaveLength(3);
  });
});

describe("names and directories", () => {
  const UNSAFE = ["", ".", "..", "../x", "a/b", "a\\b", ".hidden", "-x", "_x", "a b", "a\n", "ü"];

  it.each(UNSAFE)("kind %j is refused as 'not a safe path component'", async (name) => {
    await expectStateError(writer(dir, { kind: name }).write(RECORDS), "not a safe path component");
    expect(await listDir(dir)).toEqual([]);
  });

  it.each(UNSAFE)("instance %j is refused as 'not a safe path component'", async (name) => {
    await expectStateError(
      writer(dir, { instance: name }).write(RECORDS),
      "not a safe path component",
    );
    expect(await listDir(dir)).toEqual([]);
  });

  it("a name that is not a string is refused as 'not a safe path component'", async () => {
    await expectStateError(
      writer(dir, { instance: undefined as unknown as string }).write(RECORDS),
      "not a safe path component",
    );
    expect(() =>
      participantDir({ checkpointDir: dir, kind: 7 as unknown as string, instance: "x" }),
    ).toThrow(CheckpointStateError);
  });

  it("names with dots, dashes and underscores after the first character are safe", async () => {
    const manifest = await writer(dir, { kind: "k.1_a-b", instance: "Z9" }).write(RECORDS);
    await expectPublished(pdirOf(dir, "k.1_a-b", "Z9"), manifest.records_file);
  });

  it.each([
    // [what, the regular file, checkpoint_dir] (relative to the temporary directory)
    ["checkpoint_dir", "plain-file", "plain-file"],
    ["gym", "gym", "."],
    ["<kind>", `gym/${KIND}`, "."],
    ["the participant directory", `gym/${KIND}/${INSTANCE}`, "."],
  ])(
    "%s being a regular file is a 422 'cannot write checkpoint state'",
    async (_what, file, checkpointDir) => {
      await mkdir(path.dirname(path.join(dir, file)), { recursive: true });
      await writeFile(path.join(dir, file), "not a directory");
      await expectStateError(
        writer(path.join(dir, checkpointDir)).write(RECORDS),
        "cannot write checkpoint state",
      );
    },
  );
});

describe("records that are not JSON", () => {
  class Point {
    constructor(readonly x: number) {}
  }
  const cycle: Record<string, unknown> = { a: 1 };
  cycle.self = cycle;
  let deep: unknown = 1;
  for (let i = 0; i < 1000; i += 1) deep = [deep];
  const holey: unknown[] = [1];
  holey[2] = 3;
  const throwing = Object.defineProperty({}, "boom", {
    enumerable: true,
    get() {
      throw new Error("getter exploded");
    },
  });

  it.each([
    ["a Date", { when: new Date(0) }],
    ["a Map", new Map([["a", 1]])],
    ["a Set", [new Set([1])]],
    ["undefined", { a: undefined }],
    ["a cycle", cycle],
    ["a class instance", { p: new Point(1) }],
    ["a function", { f: () => 1 }],
    ["a symbol", [Symbol("s")]],
    ["an array hole", holey],
    ["a Date deep inside", { a: [{ b: [{ c: new Date(0) }] }] }],
    ["nesting too deep once inside the record", deep],
    ["a throwing getter", throwing],
  ])(
    "a payload holding %s fails the commit naming the episode, leaving nothing",
    async (_w, state) => {
      const records = [rec("good", 1), rec("bad-a2", state), rec("later", 2)];
      const error = await expectStateError(
        writer(dir).write(records),
        "episode 'bad-a2'",
        "not JSON",
      );
      expect(error.captureKey).toBe("bad-a2");
      expect(await listDir(pdirOf(dir))).toEqual([]);
    },
  );

  it("encodeRecordLine names the episode in captureKey and in the detail", () => {
    let caught: unknown;
    try {
      encodeRecordLine(rec("e-a3", { d: new Date(0) }));
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(CheckpointStateError);
    expect((caught as CheckpointStateError).captureKey).toBe("e-a3");
    expect((caught as CheckpointStateError).detail).toMatch(/episode 'e-a3' is not JSON/);
  });

  it("a failed commit leaves no temporary file, and a corrected retry publishes exactly two files", async () => {
    const w = writer(dir);
    await expectStateError(w.write([rec("r", new Date(0))]), "episode 'r'");
    expect(temporaries(await listDir(pdirOf(dir)))).toEqual([]);
    const manifest = await w.write([rec("r", 0)]);
    await expectPublished(pdirOf(dir), manifest.records_file);
  });
});
