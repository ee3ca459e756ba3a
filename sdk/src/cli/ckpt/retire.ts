/**
 * `gym ckpt retire (--episodes FILE | --keys KEY[,KEY])`: stop these attempts (and earlier
 * ones) everywhere, callers first.
 */
import path from "node:path";
import { retire } from "../../client/coordination.js";
import { captureKey, nextAttempt } from "../../identity/episode-id.js";
import { UsageError, type Io } from "../output.js";
import { table } from "../table.js";
import { deadlineTs, freshCheckpointId, printJson, type CkptOptions } from "./common.js";
import { parseCaptureKeys, readEpisodesFile } from "./episodes.js";
import { kindOf, memberNames, withSession } from "./session.js";

/** The attempts `retire` stops: a file of capture keys, or keys given inline. */
export interface RetireSelection {
  /** `--episodes FILE`: capture keys, one per line (as for commit and restore). */
  readonly file?: string;
  /** `--keys KEY[,KEY]`: capture keys inline. */
  readonly keys?: readonly string[];
}

/** `gym ckpt retire (--episodes FILE | --keys KEY[,KEY])`. */
export async function retireCommand(
  selection: RetireSelection,
  options: CkptOptions & { id?: string },
  io: Io,
): Promise<number> {
  if ((selection.file === undefined) === (selection.keys === undefined)) {
    throw new UsageError(
      selection.file === undefined
        ? "retire needs the attempts to stop"
        : "--episodes and --keys cannot be combined",
      "pass --episodes FILE (capture keys, one per line) or --keys KEY[,KEY] (capture keys inline)",
    );
  }
  const episodes =
    selection.keys !== undefined
      ? parseCaptureKeys(selection.keys, "--keys")
      : readEpisodesFile(
          path.resolve(io.cwd, selection.file as string),
          "--episodes takes a file of capture keys, one per line; to name the keys inline, use --keys KEY[,KEY]",
        );
  if (episodes.length === 0) {
    throw new UsageError(
      `the episodes file ${selection.file ?? ""} names no capture key`,
      "write the capture keys to retire, one per line, or pass them with --keys KEY[,KEY]",
    );
  }
  const id = options.id ?? freshCheckpointId();
  return await withSession(options, io, "retire", async (session) => {
    const replies = await retire(session.participants, id, episodes, deadlineTs(options));
    if (options.json === true) {
      printJson(io, { checkpoint_id: id, episode_ids: episodes.map(captureKey), replies });
      return 0;
    }
    io.out(
      table(
        ["SERVER", "KIND", "RETIRED"],
        memberNames(session).map((name) => [
          name,
          kindOf(session, name),
          String(replies[name]?.retired_count ?? "?"),
        ]),
      ),
    );
    io.out(
      `\nretired ${episodes.map(captureKey).join(", ")} (and earlier attempts); ` +
        `next attempts: ${episodes.map((episode) => captureKey(nextAttempt(episode))).join(", ")}`,
    );
    return 0;
  });
}
