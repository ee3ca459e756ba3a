/**
 * Shared helpers of the checkpoint store tests (see docs/storage.md): real temporary directories,
 * records, hand-planted checkpoints and typed-error assertions.
 */
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { expect } from "vitest";
import { CheckpointStateError } from "#sdk/errors.js";
import { fromCaptureKey, type EpisodeId } from "#sdk/identity/episode-id.js";
import { readCheckpoint } from "#sdk/store/records-reader.js";
import { RecordsWriter, type WriteTarget } from "#sdk/store/records-writer.js";
import { JsonPayloadSchema } from "#sdk/json/json-payload-schema.js";
import { recordSchema, type RecordBase } from "#sdk/wire/storage.js";

export const KIND = "environment";
export const INSTANCE = "env-1";

/** The record model of the tests: `episode_id` plus one opaque payload. */
export const TestRecordSchema = recordSchema({ state: JsonPayloadSchema });

export interface TestRecord extends RecordBase {
  readonly episode_id: EpisodeId;
  readonly state: unknown;
}

/** A record of the episode named by `key` (`r`, `r-a2`, ...). */
export function rec(key: string, state: unknown = { n: 1 }): TestRecord {
  return { episode_id: fromCaptureKey(key), state };
}

export async function makeTempDir(): Promise<string> {
  return await mkdtemp(path.join(os.tmpdir(), "gym-store-test-"));
}

export async function removeTempDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
}

/** `<dir>/gym/<kind>/<instance>`. */
export function pdirOf(dir: string, kind = KIND, instance = INSTANCE): string {
  return path.join(dir, "gym", kind, instance);
}

/** Sorted entry names of a directory. */
export async function listDir(dir: string): Promise<string[]> {
  return (await readdir(dir)).sort();
}

export function sha256(data: Buffer | string): string {
  return createHash("sha256").update(data).digest("hex");
}

export function target(dir: string, overrides: Partial<WriteTarget> = {}): WriteTarget {
  return {
    checkpointDir: dir,
    kind: KIND,
    instance: INSTANCE,
    checkpointId: "ckpt-1",
    ...overrides,
  };
}

export function writer(dir: string, overrides: Partial<WriteTarget> = {}): RecordsWriter {
  return new RecordsWriter(target(dir, overrides));
}

/** Reads the test participant's checkpoint in `dir`. */
export async function read(dir: string, scope: readonly string[] | null = null) {
  return await readCheckpoint({
    checkpointDir: dir,
    kind: KIND,
    instance: INSTANCE,
    scope: scope === null ? null : new Set(scope),
    recordSchema: TestRecordSchema,
  });
}

/** Awaits a rejection that must be a typed 422 `invalid_checkpoint_state` naming `parts`. */
export async function expectStateError(
  promise: Promise<unknown>,
  ...parts: string[]
): Promise<CheckpointStateError> {
  let caught: unknown = undefined;
  let rejected = false;
  try {
    await promise;
  } catch (error) {
    caught = error;
    rejected = true;
  }
  expect(rejected, "expected a rejection").toBe(true);
  expect(caught).toBeInstanceOf(CheckpointStateError);
  const error = caught as CheckpointStateError;
  expect(error.code).toBe("invalid_checkpoint_state");
  expect(error.status).toBe(422);
  for (const part of parts) expect(error.detail).toContain(part);
  return error;
}

/** Hidden temporaries the writer might leave (`.records.jsonl.*`, `.manifest.json.*`). */
export function temporaries(names: readonly string[]): string[] {
  return names.filter((name) => name.startsWith("."));
}

/** Asserts the participant directory holds exactly the manifest and its records file. */
export async function expectPublished(pdir: string, recordsFile: string): Promise<void> {
  expect(await listDir(pdir)).toEqual([...["manifest.json", recordsFile]].sort());
}

/** Records-file lines of the test participant (each with its `\n`). */
export function lines(...objects: string[]): string {
  return objects.map((line) => line + "\n").join("");
}

/** A valid stored line of the episode `key` (compact form, as the writer writes it). */
export function line(key: string, state = '{"n":1}'): string {
  const e = fromCaptureKey(key);
  return `{"episode_id":{"rollout_id":"${e.rollout_id}","attempt":${e.attempt}},"state":${state}}`;
}

/**
 * Plants a checkpoint by hand: the records file (exact bytes) and a manifest describing it,
 * with `manifest` fields overriding (undefined deletes a field), or `manifestText` verbatim.
 */
export async function plant(
  dir: string,
  records: Buffer | string,
  options: {
    manifest?: Record<string, unknown>;
    manifestText?: string;
    recordsFile?: string;
    countOverride?: number;
  } = {},
): Promise<{ pdir: string; manifest: Record<string, unknown> }> {
  const pdir = pdirOf(dir);
  await mkdir(pdir, { recursive: true });
  const bytes = typeof records === "string" ? Buffer.from(records, "utf8") : records;
  const digest = sha256(bytes);
  const recordsFile = options.recordsFile ?? `records-${digest}.jsonl`;
  await writeFile(path.join(pdir, recordsFile), bytes);
  let count = 0;
  for (const byte of bytes) if (byte === 10) count += 1;
  if (bytes.length > 0 && bytes[bytes.length - 1] !== 10) count += 1;
  const manifest: Record<string, unknown> = {
    schema_version: 1,
    kind: KIND,
    instance: INSTANCE,
    checkpoint_id: "ckpt-1",
    records_file: recordsFile,
    records_sha256: digest,
    record_count: options.countOverride ?? count,
  };
  for (const [key, value] of Object.entries(options.manifest ?? {})) {
    if (value === undefined) delete manifest[key];
    else manifest[key] = value;
  }
  await writeFile(
    path.join(pdir, "manifest.json"),
    options.manifestText ?? JSON.stringify(manifest, null, 1),
  );
  return { pdir, manifest };
}

/** A promise with its resolver (Node 20 has no Promise.withResolvers). */
export function deferred<T = void>(): {
  promise: Promise<T>;
  resolve: (value: T) => void;
  reject: (error: unknown) => void;
} {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
