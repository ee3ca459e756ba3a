/**
 * The commit scope of `commit` and `checkpoint`.
 *
 * They send `episode_ids: null` ("everything each participant holds") when that is exactly the
 * continued episodes: with `--scope all`, or with the default `--scope continued` when the last
 * prepare reported no restarts (participants never export restarts they know of). The model,
 * which refuses `null`, then commits what the others exported (see `commitEverywhere`). When
 * the prepare reported restarts, an earlier stage may have exported an episode a later stage
 * reported, so the continued scope must be explicit: pass `--episodes FILE` (capture keys in
 * flight, one per line) and the restarts are taken out with `PrepareResult.continued`. The last
 * prepare is kept in the state directory (`last-prepare.json`).
 *
 * @see docs/controller.md
 */
import type { PrepareResult } from "../../client/coordination.js";
import { sortedCaptureKeys, type EpisodeId } from "../../identity/episode-id.js";
import { UsageError } from "../output.js";
import { listCell } from "../table.js";

/** How the commit scope is chosen. */
export type CommitScope = "continued" | "all";

/** The `episode_ids` of a commit (see the module documentation). */
export function commitScope(
  id: string,
  result: PrepareResult,
  scope: CommitScope,
  episodes: readonly EpisodeId[] | null,
): EpisodeId[] | null {
  if (scope === "all") {
    if (episodes !== null) {
      throw new UsageError(
        "--scope all and --episodes cannot be combined",
        "--scope all commits everything each participant holds; --episodes FILE names the continued episodes",
      );
    }
    return null;
  }
  if (episodes !== null) return result.continued(episodes);
  const restarts = result.restarts();
  if (restarts.length === 0) return null;
  throw new UsageError(
    `the prepare of ${id} reported ${restarts.length} restart(s) (${listCell(sortedCaptureKeys(restarts), 5)}), ` +
      "so the continued episodes must be named",
    "pass --episodes FILE (the capture keys in flight, one per line; the restarts are left out for you), " +
      "or --scope all to commit everything each participant holds",
  );
}
