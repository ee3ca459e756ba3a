/**
 * `gym ckpt commit --id ID --dir DIR`: commit the prepared checkpoint, in the scope the last
 * prepare allows (see `scope.ts`). `checkpoint` reuses the pieces.
 */
import path from "node:path";
import {
  CommitScopeRequiredError,
  commitEverywhere,
  type CommitStep,
} from "../../client/commit-everywhere.js";
import { PrepareResult, type Participants } from "../../client/coordination.js";
import { captureKey, type EpisodeId } from "../../identity/episode-id.js";
import type { CommitReply } from "../../wire/storage.js";
import { CheckpointNotSharedError } from "../../errors.js";
import { CliError, EXIT_FAILED, UsageError, commandOf, type Io } from "../output.js";
import { readLastPrepare } from "../state-file.js";
import { listCell, table } from "../table.js";
import { deadlineTs, printJson, type CkptOptions } from "./common.js";
import { readEpisodesFile } from "./episodes.js";
import { commitScope, type CommitScope } from "./scope.js";
import { kindOf, memberNames, withSession, type Session } from "./session.js";

/** What `commit` and `checkpoint` take besides the common options. */
export interface CommitCommandOptions extends CkptOptions {
  readonly scope?: CommitScope;
  /** A file of capture keys: the continued episodes. */
  readonly episodes?: string;
}

/** The continued episodes `--episodes FILE` names, or null without it. */
export function episodesOption(options: CommitCommandOptions, io: Io): EpisodeId[] | null {
  return options.episodes === undefined
    ? null
    : readEpisodesFile(path.resolve(io.cwd, options.episodes));
}

/**
 * {@link commitEverywhere}, with the CLI's hints when nothing says which episodes continue and
 * when this machine does not see what the participants wrote.
 */
export async function commitAll(
  participants: Participants,
  step: CommitStep,
): Promise<Record<string, CommitReply>> {
  try {
    return await commitEverywhere(participants, step);
  } catch (error) {
    if (error instanceof CheckpointNotSharedError) {
      throw new CliError(
        `checkpoint ${step.checkpointId} cannot be used: ${error.message}`,
        "pass a --dir on a file system every machine mounts at the same path, this one " +
          "included (NFS, Lustre, CephFS; see docs/storage.md), then checkpoint again (after " +
          `gym ckpt resume --id ${step.checkpointId} if this checkpoint is still open)`,
        EXIT_FAILED,
        { cause: error },
      );
    }
    if (!(error instanceof CommitScopeRequiredError)) throw error;
    throw new UsageError(
      error.message,
      "pass --episodes FILE (the capture keys in flight, one per line)",
    );
  }
}

/** The recorded prepare of `id`, which the default scope needs: it must have reached prepared. */
function lastPrepareFor(session: Session, id: string, gym: string): PrepareResult {
  const last = readLastPrepare(session.paths.lastPrepareFile);
  if (last === null || last.checkpoint_id !== id) {
    throw new UsageError(
      last === null
        ? `no prepare is recorded in ${session.paths.dir}, and the default scope (continued) needs the prepare of ${id}`
        : `the last prepare recorded in ${session.paths.dir} is ${last.checkpoint_id}, not ${id}`,
      `prepare it from this state directory first (${gym} ckpt prepare --id ${id}), or pass --scope all`,
    );
  }
  if (!last.prepared) {
    throw new CliError(
      `the last prepare of ${id} did not reach prepared`,
      `prepare again with the same ID (${gym} ckpt prepare --id ${id}), or abort it with \`${gym} ckpt resume --id ${id}\``,
    );
  }
  return new PrepareResult(last.prepared, last.replies);
}

/** The commit's table: what each participant wrote. */
export function commitTable(session: Session, replies: Record<string, CommitReply>): string {
  return table(
    ["SERVER", "KIND", "RECORDS", "EPISODES", "RECORDS FILE"],
    memberNames(session).map((name) => {
      const reply = replies[name];
      if (reply === undefined) return [name, kindOf(session, name), "?", "?", "?"];
      return [
        name,
        kindOf(session, name),
        String(reply.manifest.record_count),
        listCell(reply.episode_ids, 4),
        reply.manifest.records_file.slice(0, 20) + "…",
      ];
    }),
  );
}

/** `gym ckpt commit --id ID --dir DIR`. */
export async function commitCommand(
  id: string,
  dir: string,
  options: CommitCommandOptions,
  io: Io,
): Promise<number> {
  const checkpointDir = path.resolve(io.cwd, dir);
  const episodes = episodesOption(options, io);
  const gym = commandOf(io);
  return await withSession(options, io, "commit", async (session) => {
    const scope = options.scope ?? "continued";
    const episodeIds =
      scope === "all" && episodes === null
        ? null
        : commitScope(id, lastPrepareFor(session, id, gym), scope, episodes);
    const replies = await commitAll(session.participants, {
      checkpointId: id,
      checkpointDir,
      episodeIds,
      deadlineTs: () => deadlineTs(options),
    });
    if (options.json === true) {
      printJson(io, {
        checkpoint_id: id,
        checkpoint_dir: checkpointDir,
        episode_ids: episodeIds === null ? null : episodeIds.map(captureKey),
        replies,
      });
    } else {
      io.out(commitTable(session, replies));
      io.out(
        `\ncommitted ${id} to ${checkpointDir}\nnext: ${gym} ckpt resume --id ${id} (check it with ${gym} ckpt inspect ${dir})`,
      );
    }
    return 0;
  });
}
