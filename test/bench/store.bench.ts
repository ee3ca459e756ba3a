/**
 * Store benchmark: commit and restore of 1,000 records of ~350 KB each through the checkpoint
 * store, against writing, hashing and fsyncing the same bytes raw (and reading and hashing them
 * raw), measured in the same run. Prints medians and ratios; asserts nothing.
 *
 *   npm run bench:store [-- --records 1000 --runs 5 --shape text|mixed]
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, open, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { episodeId } from "#sdk/identity/episode-id.js";
import { readCheckpoint } from "#sdk/store/records-reader.js";
import { RecordsWriter, encodeRecordLine } from "#sdk/store/records-writer.js";
import { JsonPayloadSchema } from "#sdk/json/json-payload-schema.js";
import { recordSchema, type RecordBase } from "#sdk/wire/storage.js";

function arg(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? Number(process.argv[at + 1]) : fallback;
}

const RECORDS = arg("records", 1000);
const RUNS = arg("runs", 5);
const WORDS = "the model answers the question and the tool returns a value ".repeat(1100);

/** A session's state: text (a sandbox transcript, files), ~350 KB. */
function makeTextRecord(i: number) {
  return {
    episode_id: episodeId(`task-${i}-0`),
    payload: {
      turn: 3,
      files: [0, 1, 2, 3, 4].map((f) => ({
        path: `/work/f${f}.txt`,
        content: `${i}:${f} ${WORDS}`,
      })),
    },
  };
}

/** A model-side record: a conversation, its token IDs and log-probabilities (~380 KB). */
function makeMixedRecord(i: number) {
  const tokenIds = Array.from({ length: 10_000 }, (_, k) => (k * 7919 + i) % 151_000);
  const logprobs = Array.from({ length: 3_000 }, (_, k) => -((k % 97) + i / 1000) / 13);
  return {
    episode_id: episodeId(`task-${i}-0`),
    payload: {
      turn: 3,
      messages: [0, 1, 2, 3].map((m) => ({
        role: m % 2 === 0 ? "user" : "assistant",
        content: `${i}:${m} ${WORDS}`,
      })),
      token_ids: tokenIds,
      logprobs,
    },
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const start = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - start) / 1e9;
}

/** Writes pre-encoded lines raw: batched writev, sha256, fsync — the floor of a commit. */
async function rawWrite(file: string, lines: Buffer[]): Promise<void> {
  const handle = await open(file, "wx");
  const hash = createHash("sha256");
  let batch: Buffer[] = [];
  let bytes = 0;
  for (const line of lines) {
    hash.update(line);
    batch.push(line);
    bytes += line.length;
    if (bytes >= 8 * 1024 * 1024) {
      await handle.writev(batch);
      batch = [];
      bytes = 0;
    }
  }
  if (batch.length > 0) await handle.writev(batch);
  await handle.sync();
  await handle.close();
  hash.digest("hex");
}

/** Streams the file through a reused buffer and hashes it: the floor of a restore. */
async function rawRead(file: string): Promise<void> {
  const handle = await open(file, "r");
  const hash = createHash("sha256");
  const buffer = Buffer.allocUnsafeSlow(4 * 1024 * 1024);
  for (;;) {
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, null);
    if (bytesRead === 0) break;
    hash.update(buffer.subarray(0, bytesRead));
  }
  await handle.close();
  hash.digest("hex");
}

/**
 * Allocates and touches `bytes` of fresh memory, then lets it go: what the page faults alone of
 * materializing that much cost on this machine (a floor under any restore that keeps its
 * records). Chunks of 64 MB are above glibc's largest mmap threshold, so each run maps them anew
 * instead of reusing the last run's pages.
 */
function touchFresh(bytes: number): number {
  const chunk = 64 * 1024 * 1024;
  let touched = 0;
  for (let left = bytes; left > 0; left -= chunk) {
    touched += Buffer.allocUnsafeSlow(Math.min(left, chunk)).fill(1).length;
  }
  return touched;
}

async function bench(shape: string, makeRecord: (i: number) => RecordBase): Promise<void> {
  const root = await mkdtemp(path.join(os.tmpdir(), "gym-store-bench-"));
  const records = Array.from({ length: RECORDS }, (_, i) => makeRecord(i));
  const lines = records.map((record) => Buffer.from(encodeRecordLine(record), "utf8"));
  const totalBytes = lines.reduce((sum, line) => sum + line.length, 0);
  const schema = recordSchema({ payload: JsonPayloadSchema });
  const scope = new Set(records.map((r) => r.episode_id.rollout_id));

  const rawWrites: number[] = [];
  const commits: number[] = [];
  const rawReads: number[] = [];
  const restores: number[] = [];
  const touches: number[] = [];
  for (let run = 0; run < RUNS; run++) {
    const dir = path.join(root, `run-${run}`);
    const rawFile = path.join(root, `raw-${run}.jsonl`);
    rawWrites.push(await timed(() => rawWrite(rawFile, lines)));
    commits.push(
      await timed(() =>
        new RecordsWriter({
          checkpointDir: dir,
          kind: "resources",
          instance: "bench",
          checkpointId: `bench-${run}-${randomBytes(2).toString("hex")}`,
        }).write(records),
      ),
    );
    rawReads.push(await timed(() => rawRead(rawFile)));
    touches.push(await timed(async () => touchFresh(totalBytes)));
    restores.push(
      await timed(async () => {
        const result = await readCheckpoint({
          checkpointDir: dir,
          kind: "resources",
          instance: "bench",
          scope,
          recordSchema: schema,
        });
        if (result.records.length !== RECORDS) throw new Error("restore lost records");
      }),
    );
    await rm(dir, { recursive: true, force: true });
    await rm(rawFile, { force: true });
  }
  await rm(root, { recursive: true, force: true });

  const mb = totalBytes / 1e6;
  const row = (name: string, values: number[], baseline: number[]) => {
    const m = median(values);
    return {
      step: name,
      "median s": m.toFixed(3),
      "MB/s": (mb / m).toFixed(0),
      "vs raw": (m / median(baseline)).toFixed(2),
      runs: values.map((v) => v.toFixed(3)).join(" "),
    };
  };
  console.log(
    `store bench (${shape}): ${RECORDS} records, ${mb.toFixed(1)} MB, ${RUNS} runs, node ${process.version}`,
  );
  console.table([
    row("raw write+sha256+fsync", rawWrites, rawWrites),
    row("commit (RecordsWriter)", commits, rawWrites),
    row("raw read+sha256", rawReads, rawReads),
    row("touch fresh memory, same size", touches, rawReads),
    row("restore (readCheckpoint)", restores, rawReads),
  ]);
}

const SHAPES: Record<string, (i: number) => RecordBase> = {
  text: makeTextRecord,
  mixed: makeMixedRecord,
};
const only = process.argv.includes("--shape")
  ? process.argv[process.argv.indexOf("--shape") + 1]
  : null;
for (const [shape, make] of Object.entries(SHAPES)) {
  if (only === null || only === shape) await bench(shape, make);
}
