/**
 * `gym ckpt checkpoint --dir DIR`: prepare, commit and resume with a fresh ID in one go, timed
 * per stage. A failure before the commit is written resumes every participant, so nothing is
 * left open.
 */
import path from "node:path";
import { CoordinationError, resume } from "../../client/coordination.js";
import { captureKey, type EpisodeId } from "../../identity/episode-id.js";
import type { CommitReply } from "../../wire/storage.js";
import { formatDuration } from "../duration.js";
import { CliError, UsageError, commandOf, describeError, type Io } from "../output.js";
import { table } from "../table.js";
import { deadlineTs, freshCheckpointId, printJson } from "./common.js";
import { commitAll, commitTable, episodesOption, type CommitCommandOptions } from "./commit.js";
import { notPrepared, prepareJson, prepareTable, runPrepare } from "./prepare.js";
import { RefusalError, refusal } from "./refusal.js";
import { commitScope } from "./scope.js";
import { withSession } from "./session.js";

/** `gym ckpt checkpoint --dir DIR`: prepare + commit + resume with a fresh ID. */
export async function checkpointCommand(
  dir: string,
  options: CommitCommandOptions,
  io: Io,
): Promise<number> {
  const checkpointDir = path.resolve(io.cwd, dir);
  const episodes = episodesOption(options, io);
  const scope = options.scope ?? "continued";
  if (scope === "all" && episodes !== null) {
    throw new UsageError(
      "--scope all and --episodes cannot be combined",
      "--scope all commits everything each participant holds; --episodes FILE names the continued episodes",
    );
  }
  const id = freshCheckpointId();
  const gym = commandOf(io);
  return await withSession(options, io, "checkpoint", async (session) => {
    const timings: [string, number][] = [];
    const timed = async <T>(stage: string, work: () => Promise<T>): Promise<T> => {
      const started = performance.now();
      try {
        return await work();
      } finally {
        timings.push([stage, performance.now() - started]);
      }
    };
    const abort = async (why: unknown): Promise<never> => {
      // Nothing will be published: reopen every participant, then report the first failure.
      try {
        await resume(session.participants, id, deadlineTs(options));
      } catch (error) {
        io.err(`gym: resuming ${id} after the failure also failed: ${describeError(error)}`);
      }
      throw why;
    };
    if (options.json !== true) io.err(`gym: checkpoint ${id} → ${checkpointDir}`);

    const prepared = await timed("prepare", () => runPrepare(session, id, options));
    if (!prepared.prepared) {
      if (options.json === true)
        printJson(io, { checkpoint_id: id, prepare: prepareJson(id, prepared) });
      else io.out(prepareTable(session, prepared));
      return await abort(
        notPrepared(
          id,
          prepared,
          `the checkpoint was aborted (resumed): retry with a longer --deadline, or retire the blockers first (${gym} ckpt retire --keys KEY,...)`,
        ),
      );
    }
    let episodeIds: EpisodeId[] | null;
    try {
      episodeIds = commitScope(id, prepared, scope, episodes);
    } catch (error) {
      // Prepared, then refused here: say that nothing was left open or written.
      if (!(error instanceof CliError)) return await abort(error);
      const aborted = `nothing was written, and ${id} was aborted (every participant resumed)`;
      return await abort(
        new CliError(
          error.message,
          error.hint === null ? aborted : `${error.hint}; ${aborted}`,
          error.exitCode,
        ),
      );
    }
    let committed: Record<string, CommitReply>;
    try {
      committed = await timed("commit", () =>
        commitAll(session.participants, {
          checkpointId: id,
          checkpointDir,
          episodeIds,
          deadlineTs: () => deadlineTs(options),
        }),
      );
    } catch (error) {
      return await abort(error);
    }
    let resumed: Awaited<ReturnType<typeof resume>>;
    try {
      resumed = await timed("resume", () => resume(session.participants, id, deadlineTs(options)));
    } catch (error) {
      if (!(error instanceof CoordinationError)) throw error;
      const failure = refusal(error, session, "resume", gym);
      throw new RefusalError(
        failure.operation,
        failure.failures,
        failure.codes,
        `checkpoint ${id} was committed to ${checkpointDir}, but ${failure.message}`,
        `resume again: ${gym} ckpt resume --id ${id} (a participant that cannot be reached resumes on its own when its lease expires)`,
        failure.json,
      );
    }
    const total = timings.reduce((sum, [, ms]) => sum + ms, 0);
    if (options.json === true) {
      printJson(io, {
        checkpoint_id: id,
        checkpoint_dir: checkpointDir,
        episode_ids: episodeIds === null ? null : episodeIds.map(captureKey),
        timings_ms: {
          ...Object.fromEntries(timings.map(([stage, ms]) => [stage, Math.round(ms)])),
          total: Math.round(total),
        },
        prepare: prepareJson(id, prepared),
        commit: committed,
        resume: resumed,
      });
      return 0;
    }
    io.out(commitTable(session, committed));
    io.out("");
    io.out(
      table(
        ["STAGE", "TIME"],
        [
          ...timings.map(([stage, ms]) => [stage, formatDuration(ms)]),
          ["total", formatDuration(total)],
        ],
      ),
    );
    const episodesHeld = new Set(Object.values(committed).flatMap((reply) => reply.episode_ids));
    io.out(
      `\ncheckpoint ${id} written to ${checkpointDir} (${episodesHeld.size} episode(s)); every participant resumed` +
        `\ncheck it with: ${gym} ckpt inspect ${dir}`,
    );
    return 0;
  });
}
