/**
 * `gym ckpt restore [--id ID] --dir DIR (--episodes FILE | --all)`: restore a checkpoint into
 * fresh processes, all or nothing, and optionally resume. Without `--id`, the checkpoint
 * directory says which checkpoint it holds ({@link latestCheckpoint}).
 */
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { restore, resume } from "../../client/coordination.js";
import { CollectionDir } from "../../collect/collection-dir.js";
import { captureKey, fromCaptureKey, type EpisodeId } from "../../identity/episode-id.js";
import { MANIFEST_FILE } from "../../store/paths.js";
import { ManifestSchema } from "../../wire/storage.js";
import { inspectCheckpoint, noCheckpoint } from "../inspect.js";
import { CliError, UsageError, commandOf, describeError, shownPath, type Io } from "../output.js";
import { listCell, table } from "../table.js";
import { deadlineTs, printJson, type CkptOptions } from "./common.js";
import { readEpisodesFile } from "./episodes.js";
import { kindOf, memberNames, withSession } from "./session.js";

/** What `restore` takes besides the common options. */
export interface RestoreCommandOptions extends CkptOptions {
  /** A file of capture keys to restore. */
  readonly episodes?: string;
  /** Restore every episode the checkpoint holds. */
  readonly all?: boolean;
  /** Resume right after a successful restore. @default false */
  readonly resume?: boolean;
}

/**
 * The episodes a checkpoint directory holds, verified; a corrupt one is refused with advice that
 * starts its commands with `gym` ({@link commandOf}).
 */
export async function checkpointEpisodes(dir: string, gym: string): Promise<EpisodeId[]> {
  const report = await inspectCheckpoint(dir);
  if (!report.found) throw noCheckpoint(report, gym);
  if (!report.ok) {
    throw new CliError(
      `cannot list the episodes of ${dir}: it is corrupt:\n` +
        report.problems.map((problem) => `  - ${problem}`).join("\n"),
      `restore from another checkpoint, or see \`${gym} ckpt inspect DIR\``,
    );
  }
  return report.episodes.map(fromCaptureKey);
}

/** The checkpoint a restore without `--id` takes. */
export interface ChosenCheckpoint {
  /** Its checkpoint ID: the restore's ID too. */
  readonly id: string;
  /** Where it is (absolute): the directory given, or the one a collection's `LATEST` names. */
  readonly dir: string;
  /** Where the ID was read, for the message that names the choice. */
  readonly source: string;
}

function isDir(file: string): boolean {
  try {
    return statSync(file).isDirectory();
  } catch {
    return false;
  }
}

function subdirectories(dir: string): string[] {
  return readdirSync(dir)
    .filter((entry) => isDir(path.join(dir, entry)))
    .sort();
}

/**
 * The checkpoint ID each participant's manifest in `dir` names (`gym/<kind>/<instance>/
 * manifest.json`), by ID: the participants holding it. Unreadable manifests are left out: the
 * restore refuses them itself, naming the participant.
 */
function manifestIds(dir: string): Map<string, string[]> {
  const ids = new Map<string, string[]>();
  const gym = path.join(dir, "gym");
  for (const kind of subdirectories(gym)) {
    for (const instance of subdirectories(path.join(gym, kind))) {
      let id: string;
      try {
        const text = readFileSync(path.join(gym, kind, instance, MANIFEST_FILE), "utf8");
        const parsed = ManifestSchema.safeParse(JSON.parse(text) as unknown);
        if (!parsed.success) continue;
        id = parsed.data.checkpoint_id;
      } catch {
        continue;
      }
      ids.set(id, [...(ids.get(id) ?? []), `${kind}/${instance}`]);
    }
  }
  return ids;
}

/**
 * The checkpoint `gym ckpt restore` takes when no `--id` is given, read from the checkpoint
 * directory (never from the run's state: after a crash the processes are new, the directory is
 * what was kept):
 *
 * - a checkpoint directory (`DIR/gym/<kind>/<instance>/`, what `gym ckpt commit` and
 *   `gym ckpt checkpoint` write): the ID its participants' manifests name. A directory holding
 *   one commit holds one ID; manifests naming several are refused, listing them, since guessing
 *   could restore the wrong one;
 * - a `gym collect` directory (`DIR/LATEST`): the checkpoint `LATEST` names, the latest the
 *   collection published, from `DIR/checkpoints/<id>/`.
 *
 * Anything else is a {@link UsageError} saying there is no checkpoint there.
 */
export async function latestCheckpoint(dir: string, io: Io): Promise<ChosenCheckpoint> {
  const gym = commandOf(io);
  const shown = shownPath(io, dir);
  const inspectHint = `pass it with --id ID, or see what ${shown} holds with \`${gym} ckpt inspect ${shown}\``;
  if (isDir(path.join(dir, "gym"))) {
    const ids = manifestIds(dir);
    if (ids.size === 1) {
      const id = [...ids.keys()][0] as string;
      return { id, dir, source: `the ID the manifests in ${shown} name` };
    }
    if (ids.size === 0) {
      throw new UsageError(
        `no checkpoint ID to restore in ${dir}: no participant under gym/ has a readable ${MANIFEST_FILE}`,
        inspectHint,
      );
    }
    const listed = [...ids].map(([id, holders]) => `${id} (${holders.join(", ")})`).join("; ");
    throw new UsageError(
      `the participants in ${dir} hold different checkpoints, so there is no one to pick: ${listed}`,
      `pass the restore's ID with --id ID, or see \`${gym} ckpt inspect ${shown}\``,
    );
  }
  const collection = new CollectionDir(dir);
  if (existsSync(collection.latestFile)) {
    let latest: Awaited<ReturnType<CollectionDir["readLatest"]>>;
    try {
      latest = await collection.readLatest();
    } catch (error) {
      throw new CliError(
        `cannot read the latest checkpoint of the collection in ${dir}: ${describeError(error)}`,
        `continue the collection with \`${gym} collect --resume\`, or pass --id ID with --dir ${shown}/checkpoints/<id>`,
      );
    }
    if (latest !== null) {
      const id = latest.checkpoint_id;
      return {
        id,
        dir: collection.checkpointDir(id),
        source: `the latest checkpoint the collection in ${shown} published (its LATEST)`,
      };
    }
  }
  throw new UsageError(
    `there is no checkpoint at ${dir}: it has no gym/ directory (a checkpoint directory) and no LATEST (a gym collect directory)`,
    `pass the directory a checkpoint was written to (the --dir of \`${gym} ckpt commit\` or \`${gym} ckpt checkpoint\`)`,
  );
}

/**
 * `gym ckpt restore [--id ID] --dir DIR (--episodes FILE | --all)`. Without an ID, restores
 * the checkpoint {@link latestCheckpoint} picks and says on stderr which one it is.
 */
export async function restoreCommand(
  givenId: string | undefined,
  dir: string,
  options: RestoreCommandOptions,
  io: Io,
): Promise<number> {
  const gym = commandOf(io);
  if ((options.episodes === undefined) === (options.all !== true)) {
    throw new UsageError(
      options.all === true
        ? "--episodes and --all cannot be combined"
        : "restore needs the episodes to continue",
      "pass --all (every episode the checkpoint holds) or --episodes FILE (capture keys, one per line)",
    );
  }
  let checkpointDir = path.resolve(io.cwd, dir);
  let id: string;
  if (givenId === undefined) {
    const chosen = await latestCheckpoint(checkpointDir, io);
    id = chosen.id;
    checkpointDir = chosen.dir;
    io.err(
      `gym: no --id given: restoring checkpoint ${id}, ${chosen.source}` +
        (chosen.dir === path.resolve(io.cwd, dir) ? "" : `, from ${shownPath(io, chosen.dir)}`),
    );
  } else {
    id = givenId;
  }
  const episodes =
    options.all === true
      ? await checkpointEpisodes(checkpointDir, gym)
      : readEpisodesFile(path.resolve(io.cwd, options.episodes as string));
  return await withSession(options, io, "restore", async (session) => {
    const replies = await restore(session.participants, {
      checkpointId: id,
      checkpointDir,
      episodeIds: episodes,
      deadlineTs: deadlineTs(options),
    });
    const restored = [...new Set(Object.values(replies).flatMap((reply) => reply.restored))].sort();
    const resumed =
      options.resume === true ? await resume(session.participants, id, deadlineTs(options)) : null;
    if (options.json === true) {
      printJson(io, {
        checkpoint_id: id,
        checkpoint_dir: checkpointDir,
        episode_ids: episodes.map(captureKey),
        restored,
        replies,
        resume: resumed,
      });
      return 0;
    }
    io.out(
      table(
        ["SERVER", "KIND", "SOURCE", "RESTORED"],
        memberNames(session).map((name) => {
          const reply = replies[name];
          return [
            name,
            kindOf(session, name),
            reply?.source_checkpoint_id ?? "?",
            reply === undefined ? "?" : `${reply.restored.length}: ${listCell(reply.restored, 4)}`,
          ];
        }),
      ),
    );
    io.out(
      `\nrestored ${restored.length} episode(s) as their next attempts: ${restored.join(", ") || "none"}`,
    );
    io.out(
      resumed !== null
        ? "every participant resumed"
        : `the participants stay closed until: ${gym} ckpt resume --id ${id}`,
    );
    return 0;
  });
}
