/**
 * Ways to corrupt one participant's part of a copy of a real checkpoint: bytes flipped,
 * truncated, deleted, duplicated or retyped records (some with the digest recomputed so the
 * participant's own checks are reached), manifests broken or swapped with another
 * participant's, and files replaced by FIFOs, directories or links to endless devices. A restore
 * of any of them must be a typed 4xx that installs nothing.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync, cpSync } from "node:fs";
import path from "node:path";
import { participantDir, rewriteRecords } from "../support/craft-checkpoint.js";

/** Where a corruption applies: one participant's directory in a copied checkpoint. */
export interface CorruptionTarget {
  /** The copied checkpoint. */
  readonly checkpointDir: string;
  readonly kind: string;
  readonly instance: string;
  /** Another participant's directory in the same checkpoint, for swaps (null when none). */
  readonly other: { readonly kind: string; readonly instance: string } | null;
}

/** One way to corrupt a participant's part of a checkpoint. */
export interface Corruption {
  /** A stable name, used in findings and by `--only corrupt:<name>`. */
  readonly name: string;
  /** Corrupts the copy; false when it does not apply (say, the participant wrote no records). */
  apply(target: CorruptionTarget): Promise<boolean>;
}

function dirOf(target: CorruptionTarget): string {
  return participantDir(target.checkpointDir, target.kind, target.instance);
}

function manifestOf(target: CorruptionTarget): Record<string, unknown> {
  return JSON.parse(readFileSync(path.join(dirOf(target), "manifest.json"), "utf8")) as Record<
    string,
    unknown
  >;
}

function writeManifest(target: CorruptionTarget, manifest: unknown): void {
  writeFileSync(path.join(dirOf(target), "manifest.json"), JSON.stringify(manifest));
}

function recordsFileOf(target: CorruptionTarget): string {
  return path.join(dirOf(target), manifestOf(target).records_file as string);
}

/** Edits the records bytes; does not apply to an empty records file. */
function editBytes(edit: (bytes: Buffer) => Buffer): Corruption["apply"] {
  return async (target) => {
    const file = recordsFileOf(target);
    const bytes = readFileSync(file);
    if (bytes.length === 0) return false;
    writeFileSync(file, edit(bytes));
    return true;
  };
}

/** Rewrites the parsed records and republishes them with a matching digest and count. */
function editRecords(
  edit: (records: Record<string, unknown>[]) => Record<string, unknown>[],
): Corruption["apply"] {
  return async (target) => {
    let applied = false;
    await rewriteRecords(target.checkpointDir, target.kind, target.instance, (records) => {
      applied = records.length > 0;
      return applied ? edit(records) : records;
    });
    return applied;
  };
}

/** Replaces a file of the participant's directory with something that is not a plain file. */
function replaceFile(
  which: "manifest" | "records",
  make: (file: string) => void,
): Corruption["apply"] {
  return async (target) => {
    const file =
      which === "manifest" ? path.join(dirOf(target), "manifest.json") : recordsFileOf(target);
    rmSync(file, { recursive: true, force: true });
    make(file);
    return true;
  };
}

/** Every corruption the fuzz restores. */
export const CORRUPTIONS: readonly Corruption[] = [
  {
    name: "flipped-byte",
    apply: editBytes((bytes) => {
      const at = Math.floor(bytes.length / 2);
      bytes[at] = (bytes[at] as number) ^ 0x20;
      return bytes;
    }),
  },
  { name: "truncated-records", apply: editBytes((b) => b.subarray(0, Math.floor(b.length / 2))) },
  { name: "emptied-records", apply: editBytes(() => Buffer.alloc(0)) },
  {
    name: "garbage-line-appended",
    apply: editBytes((b) => Buffer.concat([b, Buffer.from("{not json\n")])),
  },
  { name: "records-deleted", apply: replaceFile("records", () => undefined) },
  { name: "manifest-deleted", apply: replaceFile("manifest", () => undefined) },
  {
    name: "participant-dir-deleted",
    apply: async (target) => {
      rmSync(dirOf(target), { recursive: true });
      return true;
    },
  },
  {
    name: "participant-dir-is-a-file",
    apply: async (target) => {
      rmSync(dirOf(target), { recursive: true });
      writeFileSync(dirOf(target), "not a directory");
      return true;
    },
  },
  {
    name: "manifest-not-json",
    apply: replaceFile("manifest", (file) => writeFileSync(file, "{not json")),
  },
  {
    name: "manifest-an-array",
    apply: replaceFile("manifest", (file) => writeFileSync(file, "[]")),
  },
  {
    name: "manifest-of-another-instance",
    apply: async (target) => {
      writeManifest(target, { ...manifestOf(target), kind: "environment", instance: "x" });
      return true;
    },
  },
  {
    name: "manifest-schema-version-2",
    apply: async (target) => {
      writeManifest(target, { ...manifestOf(target), schema_version: 2 });
      return true;
    },
  },
  {
    name: "manifest-records-file-escapes",
    apply: async (target) => {
      writeManifest(target, { ...manifestOf(target), records_file: "../../x.jsonl" });
      return true;
    },
  },
  {
    name: "manifest-count-off-by-one",
    apply: async (target) => {
      const manifest = manifestOf(target);
      writeManifest(target, { ...manifest, record_count: (manifest.record_count as number) + 1 });
      return true;
    },
  },
  {
    name: "manifest-count-a-string",
    apply: async (target) => {
      writeManifest(target, { ...manifestOf(target), record_count: "1" });
      return true;
    },
  },
  {
    name: "swapped-with-another-participant",
    apply: async (target) => {
      if (target.other === null) return false;
      const from = participantDir(target.checkpointDir, target.other.kind, target.other.instance);
      rmSync(dirOf(target), { recursive: true });
      cpSync(from, dirOf(target), { recursive: true });
      return true;
    },
  },
  {
    name: "records-a-fifo",
    apply: replaceFile("records", (file) => execFileSync("mkfifo", [file])),
  },
  { name: "records-a-directory", apply: replaceFile("records", (file) => mkdirSync(file)) },
  {
    name: "records-linked-to-dev-zero",
    apply: replaceFile("records", (file) => symlinkSync("/dev/zero", file)),
  },
  {
    name: "manifest-linked-to-dev-zero",
    apply: replaceFile("manifest", (file) => symlinkSync("/dev/zero", file)),
  },
  {
    name: "record-twice",
    apply: editRecords((records) => [...records, records[0] as Record<string, unknown>]),
  },
  {
    name: "record-fields-retyped",
    apply: editRecords((records) =>
      records.map((record) =>
        Object.fromEntries(
          Object.entries(record).map(([key, value]) => [key, key === "episode_id" ? value : "x"]),
        ),
      ),
    ),
  },
  {
    name: "record-fields-nulled",
    apply: editRecords((records) =>
      records.map((record) =>
        Object.fromEntries(
          Object.entries(record).map(([key, value]) => [key, key === "episode_id" ? value : null]),
        ),
      ),
    ),
  },
  {
    name: "record-episode-id-broken",
    apply: editRecords((records) =>
      records.map((record) => ({ ...record, episode_id: { rollout_id: "../x", attempt: -1 } })),
    ),
  },
  {
    name: "records-null",
    apply: editRecords((records) => records.map(() => null as unknown as Record<string, unknown>)),
  },
];
