/**
 * Crafting checkpoints a commit never writes, for restore tests: the records of one participant
 * rewritten by a test, published under a manifest whose digest and count match, so the restore
 * gets past the store's checks and meets the participant's own.
 */
import { createHash } from "node:crypto";
import { readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { RecordsWriter } from "#sdk/store/records-writer.js";
import type { RecordBase } from "#sdk/wire/storage.js";

/** The directory of one participant inside a checkpoint. */
export function participantDir(checkpointDir: string, kind: string, instance: string): string {
  return path.join(checkpointDir, "gym", kind, instance);
}

/**
 * Rewrites the records of `kind`/`instance` through `edit` (parsed JSON records in file order)
 * and republishes them: a new records file named by its digest, the manifest updated to match.
 */
export async function rewriteRecords(
  checkpointDir: string,
  kind: string,
  instance: string,
  edit: (records: Record<string, unknown>[]) => Record<string, unknown>[],
): Promise<void> {
  const dir = participantDir(checkpointDir, kind, instance);
  const manifestPath = path.join(dir, "manifest.json");
  const manifest = JSON.parse(await readFile(manifestPath, "utf8")) as Record<string, unknown>;
  const oldFile = path.join(dir, manifest.records_file as string);
  const lines = (await readFile(oldFile, "utf8")).split("\n").filter((line) => line.length > 0);
  const records = edit(lines.map((line) => JSON.parse(line) as Record<string, unknown>));
  const bytes = records.map((record) => `${JSON.stringify(record)}\n`).join("");
  const digest = createHash("sha256").update(bytes).digest("hex");
  const recordsFile = `records-${digest}.jsonl`;
  await rm(oldFile);
  await writeFile(path.join(dir, recordsFile), bytes);
  const updated = {
    ...manifest,
    records_file: recordsFile,
    records_sha256: digest,
    record_count: records.length,
  };
  await writeFile(manifestPath, JSON.stringify(updated));
}

/**
 * Publishes `records` as they are (the writer does not validate) as the checkpoint `c1` of
 * `resources`/`instance` in `checkpointDir`; returns the records file's bytes.
 */
export async function writeRecordsAs(
  checkpointDir: string,
  instance: string,
  records: readonly object[],
): Promise<Buffer> {
  const writer = new RecordsWriter({
    checkpointDir,
    kind: "resources",
    instance,
    checkpointId: "c1",
  });
  const manifest = await writer.write(records as RecordBase[]);
  return await readFile(
    path.join(participantDir(checkpointDir, "resources", instance), manifest.records_file),
  );
}
