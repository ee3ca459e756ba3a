/**
 * `gym ckpt restore --id ID --dir DIR (--episodes FILE | --all)`: restore a checkpoint into
 * fresh processes, all or nothing, and optionally resume.
 */
import path from "node:path";
import { restore, resume } from "../../client/coordination.js";
import { captureKey, fromCaptureKey, type EpisodeId } from "../../identity/episode-id.js";
import { inspectCheckpoint, noCheckpoint } from "../inspect.js";
import { CliError, UsageError, commandOf, type Io } from "../output.js";
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

/** `gym ckpt restore --id ID --dir DIR (--episodes FILE | --all)`. */
export async function restoreCommand(
  id: string,
  dir: string,
  options: RestoreCommandOptions,
  io: Io,
): Promise<number> {
  const checkpointDir = path.resolve(io.cwd, dir);
  const gym = commandOf(io);
  if ((options.episodes === undefined) === (options.all !== true)) {
    throw new UsageError(
      options.all === true
        ? "--episodes and --all cannot be combined"
        : "restore needs the episodes to continue",
      "pass --all (every episode the checkpoint holds) or --episodes FILE (capture keys, one per line)",
    );
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
