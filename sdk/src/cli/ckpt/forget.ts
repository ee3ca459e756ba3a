/** `gym ckpt forget --rollouts ID[,ID]`: drop the retired marks of finished rollouts. */
import { forget } from "../../client/coordination.js";
import { rolloutIdProblem } from "../../identity/episode-id.js";
import { UsageError, type Io } from "../output.js";
import { table } from "../table.js";
import { deadlineTs, freshCheckpointId, printJson, type CkptOptions } from "./common.js";
import { kindOf, memberNames, withSession } from "./session.js";

/** `gym ckpt forget --rollouts ID[,ID]`. */
export async function forgetCommand(
  rolloutIds: readonly string[],
  options: CkptOptions & { id?: string },
  io: Io,
): Promise<number> {
  for (const rolloutId of rolloutIds) {
    const problem = rolloutIdProblem(rolloutId);
    if (problem !== null) {
      throw new UsageError(
        `--rollouts: ${JSON.stringify(rolloutId)} is not a rollout ID: ${problem}`,
        "name rollouts by their rollout ID, without an -aN attempt suffix",
      );
    }
  }
  const id = options.id ?? freshCheckpointId();
  return await withSession(options, io, "forget", async (session) => {
    const replies = await forget(session.participants, id, rolloutIds, deadlineTs(options));
    if (options.json === true) {
      printJson(io, { checkpoint_id: id, rollout_ids: [...new Set(rolloutIds)].sort(), replies });
      return 0;
    }
    io.out(
      table(
        ["SERVER", "KIND", "FORGOTTEN"],
        memberNames(session).map((name) => [
          name,
          kindOf(session, name),
          String(replies[name]?.forgotten_count ?? "?"),
        ]),
      ),
    );
    return 0;
  });
}
