/** `gym ckpt resume --id ID`: resume every participant in reverse stage order (also aborts). */
import { PREPARE_ORDER, resume } from "../../client/coordination.js";
import type { Io } from "../output.js";
import { table } from "../table.js";
import { deadlineTs, printJson, type CkptOptions } from "./common.js";
import { withSession } from "./session.js";

/** `gym ckpt resume --id ID`. */
export async function resumeCommand(id: string, options: CkptOptions, io: Io): Promise<number> {
  return await withSession(options, io, "resume", async (session) => {
    const replies = await resume(session.participants, id, deadlineTs(options));
    if (options.json === true) {
      printJson(io, { checkpoint_id: id, replies });
      return 0;
    }
    io.out(
      table(
        ["SERVER", "KIND", "PHASE", "RESULT"],
        [...PREPARE_ORDER]
          .reverse()
          .flatMap((kind) => session.participants.members.filter((m) => m.kind === kind))
          .map((member) => {
            const reply = replies[member.name];
            return [
              member.name,
              member.kind,
              reply?.phase ?? "?",
              reply === undefined ? "?" : reply.idempotent ? "nothing to resume" : "resumed",
            ];
          }),
      ),
    );
    return 0;
  });
}
