/**
 * Checkpoint directories a restore must refuse (docs/storage.md, "Read (restore)"), each
 * written for the participant under test: every one is a typed 422, never a 500, and installs
 * nothing.
 */
import { createHash } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { MANIFEST_FILE, participantDir, recordsFileName } from "../store/paths.js";
import { MANIFEST_SCHEMA_VERSION } from "../wire/storage.js";
import type { ServerProfile } from "./profile.js";

/** One corrupt checkpoint: what it is, and how to write it into a checkpoint directory. */
export interface CorruptCheckpoint {
  readonly what: string;
  write(checkpointDir: string, profile: ServerProfile): Promise<void>;
}

/** One record line of no participant in particular (out of every restore scope the kit sends). */
const LINE = '{"episode_id": {"rollout_id": "conformance-corrupt", "attempt": 0}}\n';

const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex");

/** Writes `manifest` (and `records` under its own name, when given) into the participant's directory. */
async function writeParticipant(
  checkpointDir: string,
  profile: ServerProfile,
  manifest: string | null,
  records: { name: string; text: string } | null,
): Promise<void> {
  const dir = participantDir({ checkpointDir, kind: profile.kind, instance: profile.instance });
  await mkdir(dir, { recursive: true });
  if (records !== null) await writeFile(path.join(dir, records.name), records.text);
  if (manifest !== null) await writeFile(path.join(dir, MANIFEST_FILE), manifest);
}

/** A manifest for `profile` over `text`, with `override` applied, keys sorted. */
function manifestOf(
  profile: ServerProfile,
  text: string,
  override: Record<string, unknown> = {},
): string {
  const manifest: Record<string, unknown> = {
    checkpoint_id: "conformance-corrupt",
    instance: profile.instance,
    kind: profile.kind,
    record_count: text.split("\n").length - 1,
    records_file: recordsFileName(sha256(text)),
    records_sha256: sha256(text),
    schema_version: MANIFEST_SCHEMA_VERSION,
    ...override,
  };
  return JSON.stringify(
    Object.fromEntries(Object.entries(manifest).sort(([a], [b]) => (a < b ? -1 : 1))),
    null,
    1,
  );
}

/** Every corrupt checkpoint the kit offers a restore. */
export const corruptCheckpoints: readonly CorruptCheckpoint[] = [
  {
    what: "a directory with no manifest",
    write: (dir, profile) => writeParticipant(dir, profile, null, null),
  },
  {
    what: "a manifest that is not JSON",
    write: (dir, profile) => writeParticipant(dir, profile, "{not json", null),
  },
  {
    what: "a manifest of another instance",
    write: (dir, profile) =>
      writeParticipant(
        dir,
        profile,
        manifestOf(profile, LINE, { instance: `${profile.instance}-other` }),
        {
          name: recordsFileName(sha256(LINE)),
          text: LINE,
        },
      ),
  },
  {
    what: "records that do not match the manifest's digest",
    write: (dir, profile) => {
      const claimed = sha256(`${LINE}tampered`);
      return writeParticipant(
        dir,
        profile,
        manifestOf(profile, LINE, {
          records_file: recordsFileName(claimed),
          records_sha256: claimed,
        }),
        { name: recordsFileName(claimed), text: LINE },
      );
    },
  },
  {
    what: "a manifest counting more records than the file holds",
    write: (dir, profile) =>
      writeParticipant(dir, profile, manifestOf(profile, LINE, { record_count: 2 }), {
        name: recordsFileName(sha256(LINE)),
        text: LINE,
      }),
  },
  {
    what: "a manifest naming a records file outside its directory",
    write: (dir, profile) =>
      writeParticipant(
        dir,
        profile,
        manifestOf(profile, LINE, { records_file: "../records.jsonl" }),
        null,
      ),
  },
];
