/**
 * The restore side of the checkpoint store (see docs/storage.md): every corrupt manifest is a typed
 * 422, the records file is hashed, counted and parsed in one streaming pass, `episode_id` is
 * checked on every record, only in-scope records are validated and kept, and lines spanning the
 * read chunks are reassembled. Real temporary directories.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readAsStandardJson, readCheckpoint } from "#sdk/store/records-reader.js";
import { encodeRecordLine } from "#sdk/store/records-writer.js";
import {
  INSTANCE,
  KIND,
  expectStateError,
  line,
  lines,
  makeTempDir,
  pdirOf,
  plant,
  read,
  rec,
  removeTempDir,
  TestRecordSchema,
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

const GOOD = lines(line("r"), line("s-a1", "[1,NaN]"), line("t"));
const ZERO_DIGEST = "0".repeat(64);

describe("manifest", () => {
  it("a directory without manifest.json is a 422 'missing manifest'", async () => {
    await expectStateError(read(dir), "missing manifest");
    await mkdir(pdirOf(dir), { recursive: true });
    await writeFile(path.join(pdirOf(dir), `records-${ZERO_DIGEST}.jsonl`), GOOD);
    await expectStateError(read(dir), "missing manifest");
  });

  it.each([
    ["not JSON", "{not json", "is not JSON"],
    ["empty", "", "is not JSON"],
    ["a JSON array", "[1, 2]", "is not a manifest"],
    ["null", "null", "is not a manifest"],
    ["a string", '"manifest"', "is not a manifest"],
    ["a number", "1", "is not a manifest"],
  ])("a manifest that is %s is a typed 422", async (_what, manifestText, detail) => {
    await plant(dir, GOOD, { manifestText });
    await expectStateError(read(dir), detail);
  });

  it.each([
    ["schema_version 2", { schema_version: 2 }, "unsupported schema"],
    ["schema_version '1'", { schema_version: "1" }, "unsupported schema"],
    ["no schema_version", { schema_version: undefined }, "unsupported schema"],
    ["another kind", { kind: "agent" }, "belongs to"],
    ["another instance", { instance: "env-2" }, "belongs to"],
    ["no kind", { kind: undefined }, "belongs to"],
    ["a kind that cannot be turned into a string", { kind: { toString: 1 } }, "belongs to"],
    [
      "an instance that cannot be turned into a string",
      { instance: { toString: [] } },
      "belongs to",
    ],
    ["no checkpoint_id", { checkpoint_id: undefined }, "names no checkpoint"],
    ["a numeric checkpoint_id", { checkpoint_id: 7 }, "names no checkpoint"],
    ["no records_file", { records_file: undefined }, "records file"],
    ["records_file '../x.jsonl'", { records_file: "../x.jsonl" }, "records file"],
    ["records_file a path", { records_file: `sub/records-${ZERO_DIGEST}.jsonl` }, "records file"],
    ["records_file absolute", { records_file: "/etc/passwd" }, "records file"],
    ["records_file upper-case hex", { records_file: `records-${"A".repeat(64)}.jsonl` }, "records"],
    ["records_file with a suffix", { records_file: "records.jsonl.bak" }, "records file"],
    ["records_file a number", { records_file: 5 }, "records file"],
    ["no records_sha256", { records_sha256: undefined }, "records_sha256"],
    ["records_sha256 not hex", { records_sha256: "xyz" }, "records_sha256"],
    ["record_count a string", { record_count: "3" }, "record_count"],
    ["no record_count", { record_count: undefined }, "record_count"],
    ["record_count negative", { record_count: -1 }, "record_count"],
    ["record_count fractional", { record_count: 2.5 }, "record_count"],
  ])("a manifest with %s is a typed 422", async (_what, manifest, detail) => {
    await plant(dir, GOOD, { manifest });
    await expectStateError(read(dir), detail);
  });

  it("records_file naming a missing file is a 422 'cannot read checkpoint state'", async () => {
    await plant(dir, GOOD, { manifest: { records_file: `records-${ZERO_DIGEST}.jsonl` } });
    await expectStateError(read(dir), "cannot read checkpoint state");
    await plant(dir, GOOD, { manifest: { records_file: "records.jsonl" } });
    await expectStateError(read(dir), "cannot read checkpoint state");
  });

  it("records_file naming a directory is a 422 'cannot read checkpoint state'", async () => {
    await plant(dir, GOOD, { manifest: { records_file: `records-${ZERO_DIGEST}.jsonl` } });
    await mkdir(path.join(pdirOf(dir), `records-${ZERO_DIGEST}.jsonl`));
    await expectStateError(read(dir), "cannot read checkpoint state");
  });

  it("manifest.json being a directory is a 422 'cannot read checkpoint state'", async () => {
    await mkdir(path.join(pdirOf(dir), "manifest.json"), { recursive: true });
    await expectStateError(read(dir), "cannot read checkpoint state");
  });

  it("unsafe names are refused before anything is read", async () => {
    await plant(dir, GOOD);
    for (const [kind, instance] of [
      ["..", INSTANCE],
      [KIND, "../env-1"],
      [KIND, ""],
    ] as const) {
      await expectStateError(
        readCheckpoint({
          checkpointDir: dir,
          kind,
          instance,
          scope: null,
          recordSchema: TestRecordSchema,
        }),
        "not a safe path component",
      );
    }
  });

  it("the legacy records file name records.jsonl is accepted", async () => {
    await plant(dir, GOOD, { recordsFile: "records.jsonl" });
    const { manifest, records } = await read(dir);
    expect(manifest.records_file).toBe("records.jsonl");
    expect(records.map((r) => r.episode_id)).toEqual([
      { rollout_id: "r", attempt: 0 },
      { rollout_id: "s", attempt: 1 },
      { rollout_id: "t", attempt: 0 },
    ]);
  });

  it("manifest extras are returned with the manifest", async () => {
    await plant(dir, GOOD, { manifest: { step: 120, tags: ["a"] } });
    expect((await read(dir)).manifest).toMatchObject({ step: 120, tags: ["a"] });
  });

  it("reads the reference's spacing and \\u escapes, with NaN/Infinity tokens", async () => {
    const text = lines(
      '{"episode_id": {"rollout_id": "r", "attempt": 0}, "state": {"k": NaN, "u": "\\u00e9", "i": -Infinity, "b": 123456789012345678901234567890}}',
    );
    await plant(dir, text);
    const [record] = (await read(dir)).records as TestRecord[];
    expect(record?.state).toEqual({
      k: NaN,
      u: "é",
      i: -Infinity,
      b: 123456789012345678901234567890n,
    });
  });
});

describe("records read from standard JSON", () => {
  it("are known as such; a line with a NaN token, an unsafe integer or a bigint is not", async () => {
    await plant(
      dir,
      lines(
        line("r", '{"n":1.5,"s":"é"}'),
        line("s", "[1,NaN]"),
        line("t", "12345678901234567890"),
        line("u", "-Infinity"),
      ),
    );
    const records = (await read(dir)).records;
    expect(records.map((record) => readAsStandardJson(record))).toEqual([
      true,
      false,
      false,
      false,
    ]);
    expect(readAsStandardJson({ ...records[0] })).toBe(false);
  });
});

describe("records", () => {
  it("reads back what the writer wrote", async () => {
    const written = [rec("r", { a: 1 }), rec("s-a1", [NaN, 2n ** 64n])];
    await writer(dir).write(written);
    expect((await read(dir)).records).toEqual(written);
  });

  it("a tampered byte is a 422 'does not match its manifest digest'", async () => {
    const manifest = await writer(dir).write([rec("r", "aaaa"), rec("s", "bbbb")]);
    const file = path.join(pdirOf(dir), manifest.records_file);
    const text = await readFile(file, "utf8");
    await writeFile(file, text.replace("aaaa", "aaba"));
    await expectStateError(read(dir), "does not match its manifest digest");
  });

  it("an extra line is reported as a digest mismatch first", async () => {
    const manifest = await writer(dir).write([rec("r"), rec("s")]);
    const file = path.join(pdirOf(dir), manifest.records_file);
    await writeFile(file, (await readFile(file, "utf8")) + encodeRecordLine(rec("t")));
    await expectStateError(read(dir), "does not match its manifest digest");
  });

  it("a missing line is reported as a digest mismatch first", async () => {
    const manifest = await writer(dir).write([rec("r"), rec("s")]);
    const file = path.join(pdirOf(dir), manifest.records_file);
    await writeFile(file, encodeRecordLine(rec("r")));
    await expectStateError(read(dir), "does not match its manifest digest");
  });

  it("a matching digest with another count is a 422 'expects N records, found M'", async () => {
    await plant(dir, GOOD, { countOverride: 5 });
    await expectStateError(read(dir), "expects 5 records, found 3");
  });

  it("a line that is not JSON is a 422 'holds a record that is not JSON', raised before the digest check", async () => {
    await plant(dir, lines(line("r"), '{"episode_id": {"rollout_id": "s"', line("t")), {
      manifest: { records_sha256: ZERO_DIGEST },
    });
    await expectStateError(read(dir), "holds a record that is not JSON");
  });

  it("an empty line is a record that is not JSON", async () => {
    await plant(dir, lines(line("r"), "", line("t")));
    await expectStateError(read(dir), "holds a record that is not JSON");
  });

  it.each([
    ["no episode_id", '{"state":1}'],
    ["a null episode_id", '{"episode_id":null,"state":1}'],
    ["a string episode_id", '{"episode_id":"r","state":1}'],
    ["an unsafe rollout_id", '{"episode_id":{"rollout_id":"../x","attempt":0}}'],
    ["a suffixed rollout_id", '{"episode_id":{"rollout_id":"r-a1","attempt":0}}'],
    ["a negative attempt", '{"episode_id":{"rollout_id":"r","attempt":-1}}'],
    ["a fractional attempt", '{"episode_id":{"rollout_id":"r","attempt":1.5}}'],
    ["an unknown field in episode_id", '{"episode_id":{"rollout_id":"r","attempt":0,"x":1}}'],
    ["an array record", "[1,2]"],
    ["a scalar record", "42"],
  ])(
    "a record with %s is a 422 'has no valid episode_id', even out of scope",
    async (_what, bad) => {
      await plant(dir, lines(line("keep"), bad, line("other")));
      await expectStateError(read(dir, ["keep"]), "has no valid episode_id");
      await expectStateError(read(dir, null), "has no valid episode_id");
    },
  );

  it("an out-of-scope invalid record is not validated: the restore succeeds", async () => {
    await plant(
      dir,
      lines(line("r"), '{"episode_id":{"rollout_id":"x","attempt":0},"unknown":1}', line("s")),
    );
    const { records } = await read(dir, ["r", "s"]);
    expect(records.map((r) => r.episode_id.rollout_id)).toEqual(["r", "s"]);
  });

  it("an in-scope invalid record is a 422 naming its episode, raised before the digest check", async () => {
    await plant(
      dir,
      lines(line("q"), '{"episode_id":{"rollout_id":"r","attempt":0},"unknown":1}'),
      {
        manifest: { records_sha256: ZERO_DIGEST },
      },
    );
    const error = await expectStateError(
      read(dir, ["r"]),
      "checkpoint record of episode 'r' is invalid",
    );
    expect(error.captureKey).toBe("r");
    await expectStateError(read(dir, null), "checkpoint record of episode 'r' is invalid");
  });

  it("an in-scope record holding a payload that is not JSON-shaped is invalid", async () => {
    await plant(dir, lines('{"episode_id":{"rollout_id":"r","attempt":2}}'));
    const error = await expectStateError(
      read(dir),
      "checkpoint record of episode 'r-a2' is invalid",
    );
    expect(error.captureKey).toBe("r-a2");
  });

  it("the scope keeps only its records, in file order; null keeps all; an empty scope keeps none", async () => {
    await plant(dir, GOOD);
    const keys = async (scope: string[] | null) =>
      (await read(dir, scope)).records.map(
        (r) => `${r.episode_id.rollout_id}/${r.episode_id.attempt}`,
      );
    expect(await keys(null)).toEqual(["r/0", "s/1", "t/0"]);
    expect(await keys(["t", "s-a1", "absent"])).toEqual(["s/1", "t/0"]);
    expect(await keys(["s"])).toEqual([]);
    expect(await keys([])).toEqual([]);
  });

  it("the whole file is verified even when the scope keeps nothing", async () => {
    await plant(dir, GOOD, { manifest: { records_sha256: ZERO_DIGEST } });
    await expectStateError(read(dir, []), "does not match its manifest digest");
    await plant(dir, GOOD, { countOverride: 2 });
    await expectStateError(read(dir, []), "expects 2 records, found 3");
  });

  it("a file without a trailing newline counts its last line", async () => {
    const text = line("r") + "\n" + line("s");
    await plant(dir, text);
    const { records, manifest } = await read(dir);
    expect(manifest.record_count).toBe(2);
    expect(records).toHaveLength(2);
    await plant(dir, text, { countOverride: 1 });
    await expectStateError(read(dir), "expects 1 records, found 2");
  });

  it("an empty records file with a record_count of 0 holds no records", async () => {
    await plant(dir, "");
    expect((await read(dir)).records).toEqual([]);
  });
});

describe("read chunks (4 MB)", () => {
  const CHUNK = 4 * 1024 * 1024;
  const bytesOf = (records: TestRecord[]): Buffer =>
    Buffer.from(records.map(encodeRecordLine).join(""), "utf8");
  /** A filler record whose line is exactly `size` bytes. */
  const filler = (key: string, size: number): TestRecord => {
    const overhead = Buffer.byteLength(encodeRecordLine(rec(key, "")));
    return rec(key, "x".repeat(size - overhead));
  };

  it("reads a line bigger than a chunk spanning three chunks, with multi-byte characters split at both boundaries", async () => {
    // The 2-byte characters start at an odd offset, so each even chunk boundary splits one.
    const head = filler("head", CHUNK - 1001);
    const prefix = Buffer.byteLength(encodeRecordLine(rec("big", ""))) - 3; // without `"}\n`
    const big = rec("big", "é".repeat((CHUNK + 2000) / 2));
    const records = [head, big, rec("tail-1", 1), rec("tail-2", 2)];
    const bytes = bytesOf(records);
    const bigStart = CHUNK - 1001;
    expect(bigStart + prefix).toBeLessThan(CHUNK);
    expect(bigStart + Buffer.byteLength(encodeRecordLine(big))).toBeGreaterThan(2 * CHUNK);
    for (const boundary of [CHUNK, 2 * CHUNK]) {
      expect(bytes[boundary - 1]).toBe(0xc3); // first byte of "é"
      expect(bytes[boundary]).toBe(0xa9); // its continuation, in the next chunk
    }
    await writer(dir).write(records);
    const back = await read(dir);
    expect(back.records.map((r) => r.episode_id.rollout_id)).toEqual([
      "head",
      "big",
      "tail-1",
      "tail-2",
    ]);
    expect(back.records[1]?.state).toBe(big.state);
    expect(back.manifest.record_count).toBe(4);
  });

  it("reads many tiny lines around a chunk boundary, one of them split by it", async () => {
    const tiny = Array.from({ length: 2000 }, (_, i) => rec(`t${i}`, i));
    const tinyBytes = bytesOf(tiny).length;
    const records = [filler("head", CHUNK - Math.floor(tinyBytes / 2) - 7), ...tiny];
    const bytes = bytesOf(records);
    expect(bytes.length).toBeGreaterThan(CHUNK);
    expect(bytes[CHUNK - 1]).not.toBe(10); // the boundary falls inside a tiny line
    await writer(dir).write(records);
    const back = await read(dir);
    expect(back.records).toHaveLength(2001);
    expect(back.records.slice(1).map((r) => r.state)).toEqual(tiny.map((r) => r.state));
    const scoped = await read(dir, ["t999", "t1000", "t1001"]);
    expect(scoped.records.map((r) => r.state)).toEqual([999, 1000, 1001]);
  });
});
