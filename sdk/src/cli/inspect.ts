/**
 * `gym ckpt inspect DIR`: reads a checkpoint directory without any server. Every participant
 * directory `DIR/gym/<kind>/<instance>/` is verified the way a restore would (manifest, digest
 * and count over every line, each record's `episode_id`), then listed: participants, record
 * counts, episodes (capture keys) and a short summary of each record's `boundary` field.
 *
 * @see docs/deployment.md
 */
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { z } from "zod";
import { captureKey, EpisodeIdSchema } from "../identity/episode-id.js";
import { readCheckpoint } from "../store/records-reader.js";
import { MANIFEST_FILE } from "../store/paths.js";
import { PARTICIPANT_KINDS } from "../wire/control.js";
import { encodeJson } from "../json/json-value.js";
import { CliError, UsageError, commandOf, describeError, type Io } from "./output.js";
import { listCell, table, truncate } from "./table.js";

/** How long a boundary summary may be, in characters. */
export const BOUNDARY_SUMMARY_CHARS = 60;

/** One episode's record in one participant. */
export interface InspectedRecord {
  /** The capture key of the record's episode (the checkpointed attempt). */
  readonly episode: string;
  /** The record's `boundary` field, as short JSON; null when the record has none. */
  readonly boundary: string | null;
}

/** One participant directory. */
export interface InspectedParticipant {
  readonly kind: string;
  readonly instance: string;
  readonly dir: string;
  /** Whether manifest, digest, count and every record's episode verified. */
  readonly ok: boolean;
  /** What is wrong, when not ok. */
  readonly error: string | null;
  readonly checkpoint_id: string | null;
  readonly record_count: number | null;
  readonly records_file: string | null;
  readonly records_sha256: string | null;
  readonly records: readonly InspectedRecord[];
  /** Files besides the manifest and its records file (e.g. leftovers of an interrupted write). */
  readonly extra_files: readonly string[];
}

/** What inspect found. */
export interface InspectReport {
  readonly checkpoint_dir: string;
  /**
   * Whether the directory holds a checkpoint at all: a `gym/` directory with at least one
   * `<kind>/<instance>/` directory under it. When false, `problems` says what is missing.
   */
  readonly found: boolean;
  /** No corruption anywhere. */
  readonly ok: boolean;
  readonly participants: readonly InspectedParticipant[];
  /** Every episode held by some participant, sorted capture keys. */
  readonly episodes: readonly string[];
  /** Corruption: each names the participant (or the place) and the problem. */
  readonly problems: readonly string[];
  /** Oddities that do not stop a restore. */
  readonly warnings: readonly string[];
}

/** Short JSON of a boundary value. */
export function summarizeBoundary(value: unknown): string {
  let text: string;
  try {
    text = encodeJson(value);
  } catch {
    text = String(value);
  }
  return truncate(text, BOUNDARY_SUMMARY_CHARS);
}

/** Keeps only what inspect shows of each record, so a large checkpoint is not held in memory. */
const InspectRecordSchema = z.looseObject({ episode_id: EpisodeIdSchema }).transform((record) => ({
  episode_id: record.episode_id,
  boundary: Object.hasOwn(record, "boundary")
    ? summarizeBoundary((record as Record<string, unknown>).boundary)
    : null,
}));

function listDir(dir: string): string[] {
  return readdirSync(dir).sort();
}

function isDir(file: string): boolean {
  try {
    return statSync(file).isDirectory();
  } catch {
    return false;
  }
}

async function inspectParticipant(
  checkpointDir: string,
  kind: string,
  instance: string,
): Promise<InspectedParticipant> {
  const dir = path.join(checkpointDir, "gym", kind, instance);
  const files = listDir(dir);
  try {
    const { manifest, records } = await readCheckpoint({
      checkpointDir,
      kind,
      instance,
      scope: null,
      recordSchema: InspectRecordSchema,
    });
    return {
      kind,
      instance,
      dir,
      ok: true,
      error: null,
      checkpoint_id: manifest.checkpoint_id,
      record_count: manifest.record_count,
      records_file: manifest.records_file,
      records_sha256: manifest.records_sha256,
      records: records.map((record) => ({
        episode: captureKey(record.episode_id),
        boundary: record.boundary,
      })),
      extra_files: files.filter((file) => file !== MANIFEST_FILE && file !== manifest.records_file),
    };
  } catch (error) {
    return {
      kind,
      instance,
      dir,
      ok: false,
      error: describeError(error),
      checkpoint_id: null,
      record_count: null,
      records_file: null,
      records_sha256: null,
      records: [],
      extra_files: [],
    };
  }
}

/** Verifies and lists a checkpoint directory. Never throws for corruption: see `problems`. */
export async function inspectCheckpoint(checkpointDir: string): Promise<InspectReport> {
  const dir = path.resolve(checkpointDir);
  const gym = path.join(dir, "gym");
  const problems: string[] = [];
  const warnings: string[] = [];
  const participants: InspectedParticipant[] = [];
  if (!isDir(gym)) {
    problems.push(
      isDir(dir)
        ? "the directory has no gym/ subdirectory"
        : existsSync(dir)
          ? "it is not a directory"
          : "the directory does not exist",
    );
    return {
      checkpoint_dir: dir,
      found: false,
      ok: false,
      participants,
      episodes: [],
      problems,
      warnings,
    };
  }
  let found = false;
  for (const kind of listDir(gym)) {
    const kindDir = path.join(gym, kind);
    if (!isDir(kindDir)) {
      warnings.push(`gym/${kind} is a file, not a participant kind directory`);
      continue;
    }
    if (listDir(kindDir).some((entry) => isDir(path.join(kindDir, entry)))) found = true;
    if (!(PARTICIPANT_KINDS as readonly string[]).includes(kind)) {
      problems.push(
        `gym/${kind}: '${kind}' is not a participant kind (${PARTICIPANT_KINDS.join(", ")})`,
      );
      continue;
    }
    for (const instance of listDir(kindDir)) {
      if (!isDir(path.join(kindDir, instance))) {
        warnings.push(`gym/${kind}/${instance} is a file, not a participant directory`);
        continue;
      }
      const participant = await inspectParticipant(dir, kind, instance);
      participants.push(participant);
      if (participant.error !== null) problems.push(`${kind}/${instance}: ${participant.error}`);
      for (const file of participant.extra_files) {
        warnings.push(
          `${kind}/${instance}: unexpected file ${file}` +
            (file.startsWith(".") ? " (left over by an interrupted write; harmless)" : ""),
        );
      }
    }
  }
  if (!found) {
    problems.push("gym/ holds no participant directory (gym/<kind>/<instance>/)");
  }
  const ids = new Set(
    participants.map((p) => p.checkpoint_id).filter((id): id is string => id !== null),
  );
  if (ids.size > 1) {
    warnings.push(
      `participants hold different checkpoints (${[...ids].sort().join(", ")}): ` +
        "the directory mixes commits of several checkpoint IDs",
    );
  }
  const episodes = [
    ...new Set(participants.flatMap((p) => p.records.map((record) => record.episode))),
  ].sort();
  return {
    checkpoint_dir: dir,
    found,
    ok: problems.length === 0,
    participants,
    episodes,
    problems,
    warnings,
  };
}

/** The report for people. */
export function renderInspectReport(report: InspectReport): string {
  const parts: string[] = [];
  const verified = report.participants.filter((p) => p.ok).length;
  parts.push(
    `checkpoint ${report.checkpoint_dir}: ${report.participants.length} participant(s), ` +
      `${report.episodes.length} episode(s), ` +
      (report.ok
        ? "every digest verified"
        : `CORRUPT (${verified} of ${report.participants.length} participant(s) verified)`),
  );
  if (report.participants.length > 0) {
    parts.push(
      "",
      table(
        ["PARTICIPANT", "CHECKPOINT", "RECORDS", "DIGEST", "EPISODES"],
        report.participants.map((p) => [
          `${p.kind}/${p.instance}`,
          p.checkpoint_id ?? "-",
          p.record_count === null ? "-" : String(p.record_count),
          p.ok ? `ok (sha256 ${(p.records_sha256 ?? "").slice(0, 12)}…)` : "CORRUPT",
          listCell(
            p.records.map((record) => record.episode),
            4,
          ),
        ]),
      ),
    );
  }
  const rows = report.participants.flatMap((p) =>
    p.records.map((record) => [record.episode, `${p.kind}/${p.instance}`, record.boundary ?? "-"]),
  );
  if (rows.length > 0) {
    rows.sort(
      (a, b) => (a[0] ?? "").localeCompare(b[0] ?? "") || (a[1] ?? "").localeCompare(b[1] ?? ""),
    );
    parts.push("", table(["EPISODE", "PARTICIPANT", "BOUNDARY"], rows));
  }
  if (report.warnings.length > 0) {
    parts.push("", "warnings:", ...report.warnings.map((warning) => `  - ${warning}`));
  }
  return parts.join("\n");
}

/**
 * A directory that holds no checkpoint was named where one is needed: bad usage. `gym` is the
 * prefix of the commands the advice names.
 */
export function noCheckpoint(report: InspectReport, gym: string): UsageError {
  const error = new UsageError(
    `there is no checkpoint at ${report.checkpoint_dir}: ${report.problems.join("; ")}`,
    `pass the directory a checkpoint was written to (the --dir of \`${gym} ckpt commit\` or \`${gym} ckpt checkpoint\`)`,
  );
  // `--json` still prints the report: a script reads `found: false` instead of nothing.
  error.json = report;
  return error;
}

/**
 * `gym ckpt inspect DIR`; returns the exit status (1 on any corruption; a directory that holds
 * no checkpoint at all is bad usage, 2).
 */
export async function inspectCommand(
  dir: string,
  options: { json?: boolean },
  io: Io,
): Promise<number> {
  const gym = commandOf(io);
  const report = await inspectCheckpoint(path.resolve(io.cwd, dir));
  if (!report.found) throw noCheckpoint(report, gym);
  if (options.json === true) io.out(JSON.stringify(report, null, 2));
  else io.out(renderInspectReport(report));
  if (!report.ok) {
    throw new CliError(
      `checkpoint ${report.checkpoint_dir} is corrupt:\n` +
        report.problems.map((problem) => `  - ${problem}`).join("\n"),
      `do not restore from it: restore an earlier checkpoint, or take a new one with \`${gym} ckpt checkpoint --dir DIR\``,
    );
  }
  return 0;
}
