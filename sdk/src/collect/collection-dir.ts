/**
 * The collector's checkpoint directory `D`:
 *
 * ```
 * D/run.json                       the run: ID, input digest, repeats (written once)
 * D/dispatch.log                   every (rollout, attempt) before its /run is sent
 * D/LATEST                         the published checkpoint to restore: its ID
 * D/checkpoints/<id>/              what the participants committed
 * D/checkpoints/<id>/collection.json  the collection manifest: rows continued and restarted
 * ```
 *
 * A checkpoint is published by writing its manifest, then pointing `LATEST` at it; only then are
 * older ones removed (the newest {@link KEEP_PUBLISHED} stay). Every file is written durably.
 */
import { mkdir, readdir, readFile, rm } from "node:fs/promises";
import path from "node:path";
import { z } from "zod";
import { writeFileDurably } from "../store/durable-file.js";
import { SAFE_ID_PATTERN } from "../identity/episode-id.js";

/** Published checkpoints kept: the newest, and the one before in case the newest is unreadable. */
export const KEEP_PUBLISHED = 2;
/** The collection manifest's name inside a checkpoint directory. */
export const MANIFEST_NAME = "collection.json";

/** A run's identity and what its rollout IDs are derived from. */
export const RunFileSchema = z.strictObject({
  format: z.literal(1),
  run_id: z.string().regex(SAFE_ID_PATTERN),
  /** How many times the run was started: 1, then +1 for each `--resume`. */
  session: z.number().int().positive(),
  created_at: z.string(),
  input: z.string(),
  input_digest: z.string(),
  rows: z.number().int().nonnegative(),
  repeats: z.number().int().positive(),
});
export type RunFile = z.infer<typeof RunFileSchema>;

/** A row a checkpoint names. */
export const RowEpisodeSchema = z.strictObject({
  rollout_id: z.string().min(1),
  attempt: z.number().int().nonnegative(),
  row: z.number().int().nonnegative(),
  repeat: z.number().int().nonnegative(),
});
/** A row a checkpoint names, at the attempt it holds. */
export type RowEpisode = z.infer<typeof RowEpisodeSchema>;

/** What a published checkpoint continues. */
export const CollectionManifestSchema = z.strictObject({
  format: z.literal(1),
  run_id: z.string(),
  /** Which start of the run published it (1 for the first, +1 for each `--resume`). */
  session: z.number().int().positive(),
  checkpoint_id: z.string(),
  created_at: z.string(),
  /** Rows the participants committed, at their checkpointed attempt. */
  continued: z.array(RowEpisodeSchema),
  /** Rows in flight that some participant could not save: they start over. */
  restarted: z.array(RowEpisodeSchema),
  /**
   * The host that wrote each participant's state, by server (null: its manifest did not say),
   * named when a restore finds that state missing. Absent in a checkpoint of an older version.
   */
  writers: z.record(z.string(), z.string().nullable()).optional(),
});
export type CollectionManifest = z.infer<typeof CollectionManifestSchema>;

/** D is not what the collector left there. */
export class CollectionDirError extends Error {
  override readonly name = "CollectionDirError";
}

/** Paths and publication of one checkpoint directory. */
export class CollectionDir {
  readonly runFile: string;
  readonly dispatchLog: string;
  readonly latestFile: string;
  readonly checkpointsDir: string;

  constructor(readonly dir: string) {
    this.runFile = path.join(dir, "run.json");
    this.dispatchLog = path.join(dir, "dispatch.log");
    this.latestFile = path.join(dir, "LATEST");
    this.checkpointsDir = path.join(dir, "checkpoints");
  }

  /** Where the participants commit checkpoint `id`. */
  checkpointDir(id: string): string {
    return path.join(this.checkpointsDir, id);
  }

  /** The run D holds, or null when it holds none. */
  async readRun(): Promise<RunFile | null> {
    const text = await readOptional(this.runFile);
    if (text === null) return null;
    const parsed = RunFileSchema.safeParse(parseJson(text, this.runFile));
    if (!parsed.success) {
      throw new CollectionDirError(`${this.runFile} is not a collection run file`);
    }
    return parsed.data;
  }

  /** Starts a run in D: creates the directories and writes `run.json`. */
  async createRun(run: RunFile): Promise<void> {
    await mkdir(this.checkpointsDir, { recursive: true });
    await writeFileDurably(this.runFile, `${JSON.stringify(run, null, 2)}\n`);
  }

  /** Empties D of everything a run left (for `--reset`). */
  async clear(): Promise<void> {
    for (const file of [this.runFile, this.dispatchLog, this.latestFile]) {
      await rm(file, { force: true });
    }
    await rm(this.checkpointsDir, { recursive: true, force: true });
  }

  /** The checkpoint `LATEST` names, or null when none was published. */
  async readLatest(): Promise<CollectionManifest | null> {
    const text = await readOptional(this.latestFile);
    if (text === null) return null;
    const id = text.trim();
    const file = path.join(this.checkpointDir(id), MANIFEST_NAME);
    const manifest = await readOptional(file);
    if (manifest === null) {
      throw new CollectionDirError(`${this.latestFile} names ${id}, which has no ${MANIFEST_NAME}`);
    }
    const parsed = CollectionManifestSchema.safeParse(parseJson(manifest, file));
    if (!parsed.success || parsed.data.checkpoint_id !== id) {
      throw new CollectionDirError(`${file} is not the collection manifest of ${id}`);
    }
    return parsed.data;
  }

  /**
   * Publishes a committed checkpoint: its manifest, then `LATEST`, then the removal of every
   * checkpoint directory but the newest {@link KEEP_PUBLISHED} published ones (unpublished ones,
   * left by a checkpoint that failed, go too).
   */
  async publish(manifest: CollectionManifest): Promise<void> {
    const dir = this.checkpointDir(manifest.checkpoint_id);
    await mkdir(dir, { recursive: true });
    await writeFileDurably(path.join(dir, MANIFEST_NAME), `${JSON.stringify(manifest)}\n`);
    await writeFileDurably(this.latestFile, `${manifest.checkpoint_id}\n`);
    await this.prune(manifest.checkpoint_id);
  }

  /** Removes checkpoint directories beyond the newest published ones, `latest` always kept. */
  async prune(latest: string): Promise<void> {
    const entries = await readdir(this.checkpointsDir).catch(() => [] as string[]);
    const published: { id: string; createdAt: string }[] = [];
    const unpublished: string[] = [];
    for (const id of entries) {
      const text = await readOptional(path.join(this.checkpointDir(id), MANIFEST_NAME));
      const parsed = text === null ? null : CollectionManifestSchema.safeParse(safeJson(text));
      if (parsed?.success === true) published.push({ id, createdAt: parsed.data.created_at });
      else unpublished.push(id);
    }
    published.sort((a, b) =>
      a.id === latest ? -1 : b.id === latest ? 1 : b.createdAt.localeCompare(a.createdAt),
    );
    const doomed = [...published.slice(KEEP_PUBLISHED).map((entry) => entry.id), ...unpublished];
    for (const id of doomed) {
      if (id !== latest) await rm(this.checkpointDir(id), { recursive: true, force: true });
    }
  }
}

async function readOptional(file: string): Promise<string | null> {
  try {
    return await readFile(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

function parseJson(text: string, file: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new CollectionDirError(`${file} is not JSON`);
  }
}
