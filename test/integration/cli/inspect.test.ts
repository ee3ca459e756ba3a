/**
 * `gym ckpt inspect` against checkpoint directories written by the SDK's own writer, intact and
 * corrupted every way a restore would refuse: exit 0 listing participants, episodes and
 * boundaries, or exit 1 naming the participant and the problem.
 */
import { cp, mkdir, mkdtemp, readdir, readFile, rm, rename, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { inspectCheckpoint, summarizeBoundary } from "#sdk/cli/inspect.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import { RecordsWriter } from "#sdk/store/records-writer.js";
import type { RecordBase } from "#sdk/wire/storage.js";
import { runGym, type GymOutcome } from "../../support/gym-in-process.js";

let root: string;
let pristine: string;
let cases = 0;

/** Runs `gym` in-process as if invoked as `command` (`npx gym`, …); without it, a bare `gym`. */
async function gymAs(command: string | undefined, ...argv: string[]): Promise<GymOutcome> {
  return await runGym({ cwd: root, command }, argv);
}

async function gym(...argv: string[]): Promise<GymOutcome> {
  return await gymAs(undefined, ...argv);
}

async function writeParticipant(
  dir: string,
  kind: string,
  instance: string,
  records: RecordBase[],
): Promise<void> {
  await new RecordsWriter({ checkpointDir: dir, kind, instance, checkpointId: "ckpt-7" }).write(
    records,
  );
}

/** A fresh copy of the pristine checkpoint to corrupt. */
async function copy(): Promise<string> {
  const dir = path.join(root, `case-${++cases}`);
  await cp(pristine, dir, { recursive: true });
  return dir;
}

async function recordsFile(dir: string, kind: string, instance: string): Promise<string> {
  const pdir = path.join(dir, "gym", kind, instance);
  const name = (await readdir(pdir)).find((file) => file.startsWith("records-"));
  if (name === undefined) throw new Error(`no records file in ${pdir}`);
  return path.join(pdir, name);
}

beforeAll(async () => {
  root = await mkdtemp(path.join(tmpdir(), "gym-inspect-"));
  pristine = path.join(root, "pristine");
  await writeParticipant(pristine, "resources", "counter", [
    { episode_id: episodeId("task-1"), boundary: { step: 1, turn: "tool_call" } } as RecordBase,
    {
      episode_id: episodeId("task-2", 1),
      boundary: { step: 4, big: 12345678901234567890n },
    } as RecordBase,
  ]);
  await writeParticipant(pristine, "agent", "simple_agent", [
    { episode_id: episodeId("task-1"), messages: ["hi"] } as RecordBase,
  ]);
  await writeParticipant(pristine, "environment", "empty", []);
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("an intact checkpoint", () => {
  it("exits 0 and lists participants, counts, episodes and boundaries", async () => {
    const { code, out } = await gym("ckpt", "inspect", pristine);
    expect(code).toBe(0);
    expect(out).toMatch(/3 participant\(s\), 2 episode\(s\), every digest verified/);
    expect(out).toMatch(
      /resources\/counter\s+ckpt-7\s+2\s+ok \(sha256 [0-9a-f]{12}…\)\s+task-1, task-2-a1/,
    );
    expect(out).toMatch(/agent\/simple_agent\s+ckpt-7\s+1/);
    expect(out).toMatch(/environment\/empty\s+ckpt-7\s+0/);
    expect(out).toMatch(/task-1\s+resources\/counter\s+\{"step":1,"turn":"tool_call"\}/);
    expect(out).toMatch(/task-1\s+agent\/simple_agent\s+-/);
    expect(out).toMatch(/task-2-a1\s+resources\/counter\s+\{"step":4,"big":12345678901234567890\}/);
  });

  it("prints the report as JSON with --json", async () => {
    const { code, out } = await gym("ckpt", "inspect", pristine, "--json");
    expect(code).toBe(0);
    const report = JSON.parse(out) as Awaited<ReturnType<typeof inspectCheckpoint>>;
    expect(report.ok).toBe(true);
    expect(report.episodes).toEqual(["task-1", "task-2-a1"]);
    expect(report.participants.map((p) => `${p.kind}/${p.instance}:${p.record_count}`)).toEqual([
      "agent/simple_agent:1",
      "environment/empty:0",
      "resources/counter:2",
    ]);
    expect(report.problems).toEqual([]);
  });

  it("warns about a leftover temporary file without failing", async () => {
    const dir = await copy();
    await writeFile(path.join(dir, "gym", "resources", "counter", ".records.jsonl.tmp1"), "x");
    const { code, out } = await gym("ckpt", "inspect", dir);
    expect(code).toBe(0);
    expect(out).toMatch(
      /warnings:\n.*resources\/counter: unexpected file \.records\.jsonl\.tmp1 \(left over/,
    );
  });

  it("summarizes long boundaries in a few characters", () => {
    const summary = summarizeBoundary({ text: "x".repeat(500) });
    expect(summary.length).toBe(60);
    expect(summary.endsWith("…")).toBe(true);
  });
});

describe("a corrupt checkpoint exits 1 naming the participant and the problem", () => {
  it("a tampered byte", async () => {
    const dir = await copy();
    const file = await recordsFile(dir, "resources", "counter");
    const text = await readFile(file, "utf8");
    const tampered = text.replace('"step":1', '"step":7');
    expect(tampered).not.toBe(text);
    await writeFile(file, tampered);
    const { code, out, err } = await gym("ckpt", "inspect", dir);
    expect(code).toBe(1);
    expect(err).toMatch(/resources\/counter: .*does not match its manifest digest/);
    expect(err).toMatch(/what to do: do not restore from it/);
    expect(out).toMatch(/CORRUPT \(2 of 3 participant\(s\) verified\)/);
  });

  it("its advice names gym as it was invoked", async () => {
    const dir = await copy();
    await rm(path.join(dir, "gym", "resources", "counter", "manifest.json"));
    const { code, err } = await gymAs("npx gym", "ckpt", "inspect", dir);
    expect(code).toBe(1);
    expect(err).toMatch(/take a new one with `npx gym ckpt checkpoint --dir DIR`$/m);
  });

  it("a missing manifest", async () => {
    const dir = await copy();
    await rm(path.join(dir, "gym", "agent", "simple_agent", "manifest.json"));
    const { code, err } = await gym("ckpt", "inspect", dir);
    expect(code).toBe(1);
    expect(err).toMatch(/agent\/simple_agent: missing manifest/);
  });

  it("a wrong record count", async () => {
    const dir = await copy();
    const manifestPath = path.join(dir, "gym", "resources", "counter", "manifest.json");
    const manifest = JSON.parse(await readFile(manifestPath, "utf8")) as Record<string, unknown>;
    await writeFile(manifestPath, JSON.stringify({ ...manifest, record_count: 5 }));
    const { code, err } = await gym("ckpt", "inspect", dir);
    expect(code).toBe(1);
    expect(err).toMatch(/resources\/counter: .*the manifest expects 5 records, found 2/);
  });

  it("a participant directory under a foreign kind", async () => {
    const dir = await copy();
    await rename(
      path.join(dir, "gym", "resources", "counter"),
      path.join(dir, "gym", "environment", "counter"),
    );
    const { code, err } = await gym("ckpt", "inspect", dir);
    expect(code).toBe(1);
    expect(err).toMatch(
      /environment\/counter: .*belongs to resources\/counter, not environment\/counter/,
    );
  });

  it("a directory that is not a participant kind", async () => {
    const dir = await copy();
    await cp(path.join(dir, "gym", "agent"), path.join(dir, "gym", "robots"), { recursive: true });
    const { code, err } = await gym("ckpt", "inspect", dir);
    expect(code).toBe(1);
    expect(err).toMatch(/gym\/robots: 'robots' is not a participant kind/);
  });

  it("a record line that is not JSON", async () => {
    const dir = await copy();
    const file = await recordsFile(dir, "agent", "simple_agent");
    await writeFile(file, "{not json\n");
    const { code, err } = await gym("ckpt", "inspect", dir);
    expect(code).toBe(1);
    expect(err).toMatch(/agent\/simple_agent: the checkpoint holds a record that is not JSON/);
  });

  it("reports every corrupt participant, not only the first", async () => {
    const dir = await copy();
    await rm(path.join(dir, "gym", "agent", "simple_agent", "manifest.json"));
    await rm(path.join(dir, "gym", "environment", "empty", "manifest.json"));
    const report = await inspectCheckpoint(dir);
    expect(report.ok).toBe(false);
    expect(report.problems).toHaveLength(2);
    expect(report.participants.find((p) => p.instance === "counter")?.ok).toBe(true);
  });
});

describe("a directory holding no checkpoint is bad usage (exit 2), not a corrupt checkpoint", () => {
  it.each([
    [
      "does not exist",
      () => Promise.resolve(path.join(root, "nope")),
      /the directory does not exist/,
    ],
    ["has no gym/", () => Promise.resolve(root), /the directory has no gym\/ subdirectory/],
    [
      "has an empty gym/",
      async () => {
        const dir = path.join(root, "empty-gym");
        await mkdir(path.join(dir, "gym", "resources"), { recursive: true });
        return dir;
      },
      /gym\/ holds no participant directory/,
    ],
  ])("a directory that %s", async (_, make, why) => {
    const dir = await make();
    const { code, out, err } = await gym("ckpt", "inspect", dir);
    expect(code).toBe(2);
    expect(err).toMatch(new RegExp(`there is no checkpoint at ${dir}: ${why.source}`));
    expect(err).toMatch(/what to do: pass the directory a checkpoint was written to/);
    expect(`${out}${err}`).not.toMatch(/CORRUPT|do not restore/);
    const json = await gym("ckpt", "inspect", dir, "--json");
    expect(json.code).toBe(2);
    expect(JSON.parse(json.out)).toMatchObject({ found: false, ok: false, checkpoint_dir: dir });
  });

  it("its advice names gym as it was invoked", async () => {
    const { code, err } = await gymAs("npm run gym --", "ckpt", "inspect", path.join(root, "nope"));
    expect(code).toBe(2);
    expect(err).toMatch(
      /the --dir of `npm run gym -- ckpt commit` or `npm run gym -- ckpt checkpoint`/,
    );
  });
});
